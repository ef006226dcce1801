"""Benchmark-only shader overlay for SQUEEZE_EXCITATION (benchmarks/bench_se.py):

- SE_BEFORE: the kernel before the means spread over invocations and the quad loads
  (benchmarks/shaders/se_before.comp, a copy kept for the comparison; it ignores the push block's mp);
- SE_ABLATION: the product's kernel (shaders/squeeze_excitation.comp) with phases left out (its
  ABL bits), so their results are wrong by design;
- SE_UNROLL: the product's kernel with more of the products' loads issued together.

    python -m benchmarks.overlay_se   # build them into benchmarks/out/spirv_se_*
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
OUT = ROOT / "benchmarks" / "out"

# ABL bits and their names: what each leaves out of the kernel (1: the means, one load per channel
# instead; 2: the hidden products; 4: the gate products; 7: all three)
ABLATIONS = {1: "means", 2: "hidden", 4: "gate", 7: "all"}
_DEFINES = {"SE_MAX_C": contract.SE_MAX_C, "SE_MAX_R": contract.SE_MAX_R, "SE_PARTS": contract.SE_PARTS}
SE_BEFORE = contract.family("se_before", "se_before.comp", "seb_{t}", contract.SE_PUSH, (256, 1, 1), t=("f32",),
                            defines=lambda t: {"F16": 0, **_DEFINES})
SE_ABLATION = contract.family("se_ablation", "squeeze_excitation.comp", "sea{abl}_{t}", contract.SE_PUSH, (256, 1, 1),
                              abl=tuple(ABLATIONS), t=("f32",), defines=lambda abl, t: {"F16": 0, "ABL": int(abl), **_DEFINES})
# the products' loads per output issued together: UNROLL scalars, UNROLL_Q quads (the product: 4, 2)
UNROLLS = {"u8q4": (8, 4), "u4q3": (4, 3)}
SE_UNROLL = contract.family("se_unroll", "squeeze_excitation.comp", "seu_{u}_{t}", contract.SE_PUSH, (256, 1, 1),
                            u=tuple(UNROLLS), t=("f32",),
                            defines=lambda u, t: {"F16": 0, "UNROLL": UNROLLS[u][0], "UNROLL_Q": UNROLLS[u][1], **_DEFINES})
FAMILIES = (SE_ABLATION, SE_UNROLL)  # tools/build_spirv.py --overlay: the ones whose sources are in shaders/


@functools.cache
def load() -> None:
    """Build the overlay where its SPIR-V is missing or stale (SE_BEFORE's source is in
    benchmarks/shaders, so each has its own folder), and let the runtime load it."""
    from benchmarks.overlay_load import build_and_load

    build_and_load((SE_BEFORE,), OUT / "spirv_se_before", "squeeze-excitation", ROOT / "benchmarks" / "shaders")
    build_and_load((SE_ABLATION, SE_UNROLL), OUT / "spirv_se_ablation", "squeeze-excitation")


if __name__ == "__main__":
    load()
