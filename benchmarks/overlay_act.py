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
FAMILIES = (GEMM_ACT_FORMS,)


@functools.cache
def load() -> None:
    """Build the overlay where its SPIR-V is missing or stale, and let the runtime load it."""
    from benchmarks.overlay_load import build_and_load

    build_and_load(FAMILIES, SPIRV_DIR, "activation")


if __name__ == "__main__":
    load()
