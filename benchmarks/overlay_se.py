"""Benchmark-only shader overlay for SQUEEZE_EXCITATION (benchmarks/bench_se.py):

- SE_BEFORE: the kernel before the means spread over invocations and the quad loads
  (benchmarks/shaders/se_before.comp, a copy kept for the comparison; it ignores the push block's mp);
- SE_ABLATION: the product's kernel (shaders/squeeze_excitation.comp) with phases left out (its
  ABL bits), so their results are wrong by design;
- SE_UNROLL: the product's kernel with more of the products' loads issued together.

    python -m benchmarks.overlay_se   # build both into benchmarks/out/spirv_se_*
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

# ABL bits: what each leaves out of the kernel
BITS = {1: "the means (one load per channel)", 2: "the hidden products", 4: "the gate products"}
ABLATIONS = (1, 2, 4, 7)
_DEFINES = {"SE_MAX_C": contract.SE_MAX_C, "SE_MAX_R": contract.SE_MAX_R, "SE_PARTS": contract.SE_PARTS}
SE_BEFORE = contract.family("se_before", "se_before.comp", "seb_{t}", contract.SE_PUSH, (256, 1, 1), t=("f32",),
                            defines=lambda t: {"F16": 0, **_DEFINES})
SE_ABLATION = contract.family("se_ablation", "squeeze_excitation.comp", "sea{abl}_{t}", contract.SE_PUSH, (256, 1, 1),
                              abl=ABLATIONS, t=("f32",), defines=lambda abl, t: {"F16": 0, "ABL": int(abl), **_DEFINES})
# the products' loads per output issued together: UNROLL scalars, UNROLL_Q quads (the product: 4, 2)
UNROLLS = {"u8q4": (8, 4), "u4q3": (4, 3)}
SE_UNROLL = contract.family("se_unroll", "squeeze_excitation.comp", "seu_{u}_{t}", contract.SE_PUSH, (256, 1, 1),
                            u=tuple(UNROLLS), t=("f32",),
                            defines=lambda u, t: {"F16": 0, "UNROLL": UNROLLS[u][0], "UNROLL_Q": UNROLLS[u][1], **_DEFINES})
FAMILIES = (SE_ABLATION, SE_UNROLL)  # tools/build_spirv.py --overlay: the ones whose sources are in shaders/


def build() -> int:
    """Both families into their folders (SE_BEFORE's source is in benchmarks/shaders); 0 or 1."""
    from benchmarks.overlay_load import builder

    b = builder()
    return (b.build(quiet=True, families=(SE_BEFORE,), shader_dir=ROOT / "benchmarks" / "shaders",
                    out_dir=OUT / "spirv_se_before")
            | b.build(quiet=True, families=(SE_ABLATION, SE_UNROLL), out_dir=OUT / "spirv_se_ablation"))


@functools.cache
def load() -> None:
    """Build the overlay where its SPIR-V is missing or stale, and let the runtime load it."""
    if build() != 0:
        raise RuntimeError("the squeeze-excitation overlay did not build (see above)")
    from kompute_dml.runtime import shaders

    shaders.add_overlay(OUT / "spirv_se_before")
    shaders.add_overlay(OUT / "spirv_se_ablation")


if __name__ == "__main__":
    raise SystemExit(build())
