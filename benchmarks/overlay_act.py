"""Benchmark-only shader overlay: GEMM's FLOAT32 FusedActivation epilogue (shaders/gemm.comp's ACT
variants) with other forms of ACTIVATION_SWISH, for `python -m benchmarks.bench_conv --swish-forms`:
`gemmab_f32_b{blk}_s{form}` builds act_math.glsl's um_swish and um_hard_swish with SWISH_ABL = form
(FORMS). Form 1 is the exact form inlined in each output of the register block, as the product did
before its fast forms (gemm_act.glsl gemm_act_fast); form 2 is Swish before device call 229 (the
sigmoid's quotient correctly rounded in integer code, the input scale always applied), kept to time the
change; 3 (x / (1 + exp(-x)); x clamp(Alpha x + Beta, 0, 1)) and 4 (x) bound what any exact form could
gain.

Dropped after measuring (H100, 8 x 16 -> 96 x 112 x 112 with SiLU, us; the product then 127): the
epilogue staged through shared memory with one activation per loop step (1.6-2.3x as slow in every form,
device calls 227-229, at da3dd79); the quotient corrected by its remainder in integer code with a
fallback to f32_div_bits (95.7; 83.3 without the fallback; at 4c05f3c, call 229).

CONV_DIRECT_ACT (`python -m benchmarks.bench_conv --act-kinds`): the direct convolution kernel with the
fused activation's kind compiled in. Not yet timed on the H100; lavapipe gives the policy's bits.

    python -m benchmarks.overlay_act   # build them into benchmarks/out/spirv_act
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import Any

try:  # loaded by tools/build_spirv.py --overlay (standard library only): its copy of the contract
    contract: Any = sys.modules["_kdml_shader_contract"]
except KeyError:
    from kompute_dml.ops import contract

ROOT = Path(__file__).resolve().parent.parent
SPIRV_DIR = ROOT / "benchmarks" / "out" / "spirv_act"
FORMS = {0: "the product", 1: "the exact form in every output", 2: "before call 229: exact division",
         3: "the device's float32 formula", 4: "none"}
GEMM_ACT_FORMS = contract.family(
    "gemm_act_forms", "gemm.comp", "gemmab_f32_b{blk}_s{form}", contract.GEMM_PUSH, (16, 16, 1),
    blk=(2, 4), form=tuple(str(f) for f in FORMS),
    defines=lambda blk, form: {"F16": 0, "BLK": blk, "ACT": 1, "SWISH_ABL": int(form)})
# the direct convolution kernels (depthwise 3 x 3 / 5 x 5, conv_common.glsl's epilogue) with the fused
# activation's kind compiled in (CONV_ACT_FIXED: fused_act.glsl's ACT_* numbers), where the product reads
# it from the operator's constant and so holds every kind's code, as GEMM's did before its kind became
# a specialization constant (gemm_act.glsl)
CONV_ACT_KINDS = {"hs": 6, "sw": 9}  # HardSwish, Swish
CONV_DIRECT_ACT = contract.family(
    "conv_direct_act", "convolution.comp", "convdk{win}_{kind}_f32", contract.CONV_PUSH, (256, 1, 1),
    win=("3", "5"), kind=tuple(CONV_ACT_KINDS),
    defines=lambda win, kind: {"F16": 0, "DIRECT": 1, "REDUCE": 0, "SPLIT": 0, "LANES": 0, "WIN": int(win),
                               "CONV_ACT_FIXED": f"{CONV_ACT_KINDS[kind]}u"})
# FLOAT16: GEMM's tensor-core family (A and B row-major, the 1 x 1 convolutions' orders) with the forms
# (the product's FLOAT16 epilogue is the exact form: gemm_act16)
GEMM_COOP_ACT_FORMS = contract.family(
    "gemm_coop_act_forms", "gemm_coop.comp", "gemmc16ab_rr_s{form}", contract.GEMM_PUSH, None,
    form=tuple(str(f) for f in FORMS if f != 1),
    defines=lambda form: {"MMA": 0, "AL": 0, "BL": 0, "ACT": 1, "SWISH_ABL": int(form)},
    target=lambda form: contract.COOP_TARGET)
FAMILIES = (GEMM_ACT_FORMS, CONV_DIRECT_ACT, GEMM_COOP_ACT_FORMS)


@functools.cache
def load() -> None:
    """Build the overlay where its SPIR-V is missing or stale, and let the runtime load it."""
    from benchmarks.overlay_load import build_and_load

    build_and_load(FAMILIES, SPIRV_DIR, "activation")


if __name__ == "__main__":
    load()
