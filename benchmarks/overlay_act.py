"""Benchmark-only shader overlay: GEMM's FLOAT32 FusedActivation epilogue (shaders/gemm.comp's ACT
variants) in other forms, for `python -m benchmarks.bench_conv --swish-forms`: `gemmab_f32_b{blk}_s{form}{t}`
with SWISH_ABL = form (FORMS: 0 the product's Swish; 1 the product's, its input scale skipped where it is 1,
the same bits; 3 x / (1 + exp(-x)) in the device's float32; 4 no activation; 5, 6, 7, 9 the product's
sigmoid with one of its two steps replaced) and `t` the epilogue
staged through shared memory, one activation per loop step (ACT_STAGED), where the product inlines
one per output of the register block.

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
FORMS = {0: "product", 1: "scale 1 skipped", 3: "float32 formula", 4: "none", 5: "um_exp, the device's division",
         6: "the device's exp, the exact division", 7: "um_exp, um_sig_div", 9: "um_exp, um_sig_div without its fallback"}
GEMM_ACT_FORMS = contract.family(
    "gemm_act_forms", "gemm.comp", "gemmab_f32_b{blk}_s{form}{t}", contract.GEMM_PUSH, (16, 16, 1),
    blk=(2, 4), form=tuple(str(f) for f in FORMS), t=("", "t"),
    defines=lambda blk, form, t: {"F16": 0, "BLK": blk, "ACT": 1, "SWISH_ABL": 7 if form == "9" else int(form),
                                       "SIG_DIV_FALLBACK": int(form != "9"), "ACT_STAGED": int(t == "t")})
FAMILIES = (GEMM_ACT_FORMS,)


@functools.cache
def load() -> None:
    """Build the overlay where its SPIR-V is missing or stale, and let the runtime load it."""
    from benchmarks.overlay_load import build_and_load

    build_and_load(FAMILIES, SPIRV_DIR, "activation")


if __name__ == "__main__":
    load()
