"""Benchmark-only shader overlay: the softmax's word geometries (shaders/softmax.comp, VEC 1) with
parts left out or changed (its ABL bits), so some results are wrong by design;
`python -m benchmarks.softmax_ablation` times them beside the product's variant.

    python tools/build_spirv.py --overlay benchmarks/overlay_softmax.py --out benchmarks/out/spirv_softmax
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
SPIRV_DIR = ROOT / "benchmarks" / "out" / "spirv_softmax"

# ABL bits: what each leaves out of (or changes in) the kernel
# (bit 2, FLOAT16 conversions branch-free where finite, the same bits, went into the product after
# device call 211 measured it at 1.07x at Whisper's FLOAT16 rows)
BITS = {1: "the device's exp", 4: "no compensated sum", 8: "no row reductions (each lane's own max and sum)"}
ABLATIONS = (0, 1, 4, 8, 1 | 4 | 8)
GEOMETRIES = ("l128_k3v", "l64_k3v", "l16_k4v")

SMX_ABLATION = contract.family(
    "smx_ablation", "softmax.comp", "smxa{abl}_{t}_{g}", contract.SMX_PUSH, (256, 1, 1), abl=ABLATIONS,
    t=("f32", "f16"), g=GEOMETRIES, shape=("g",),
    defines=lambda abl, t, g: {"BITS": 32 if t == "f32" else 16, "LANES": int(g.split("_")[0][1:]), "FAST": 1,
                               "K": int(g.split("_")[1][1:-1]), "EXT": 0, "MODE": 0, "VEC": 1, "ABL": int(abl)})
# PIPE rows per invocation, each row's words loaded while the one before is reduced (the grid
# shrinks by PIPE; benchmarks.softmax_ablation plans it)
PIPES = (1, 2, 4)
SMX_PIPE = contract.family(
    "smx_pipe", "softmax.comp", "smxp{pipe}_{t}_{g}", contract.SMX_PUSH, (256, 1, 1), pipe=PIPES,
    t=("f32", "f16"), g=GEOMETRIES, shape=("g",),
    defines=lambda pipe, t, g: {"BITS": 32 if t == "f32" else 16, "LANES": int(g.split("_")[0][1:]), "FAST": 1,
                                "K": int(g.split("_")[1][1:-1]), "EXT": 0, "MODE": 0, "VEC": 1, "PIPE": int(pipe)})
FAMILIES = (SMX_ABLATION, SMX_PIPE)


@functools.cache
def load() -> None:
    """Build the overlay where its SPIR-V is missing or stale, and let the runtime load it."""
    from benchmarks.overlay_load import build_and_load

    build_and_load(FAMILIES, SPIRV_DIR, "softmax")
