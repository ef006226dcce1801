"""Benchmark-only shader overlay: ablations of the tensor-core convolution kernel `convc_<t>`
(shaders/conv_coop.comp, its ABL bits): each `convca<n>_<t>` leaves a part out, so its results are
wrong by design; `python -m benchmarks.conv_ablation` times them beside the kernel.

    python tools/build_spirv.py --overlay benchmarks/overlay_conv.py --out benchmarks/out/spirv_conv

(built where a glslang with cooperative matrices is installed; the GPU machine has none: carry the folder)
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
SPIRV_DIR = ROOT / "benchmarks" / "out" / "spirv_conv"

BITS = {1: "no input loads", 2: "no filter loads", 4: "no products", 8: "no output stores",
        16: "input loads without bounds checks"}
ABLATIONS = {1: 1, 2: 2, 3: 4, 4: 8, 5: 16, 6: 1 | 2}
TYPES = {"f16": (1, 1), "f32": (0, 0)}  # F16, W16 (conv.py's _COOP_TYPES)

CONV_ABLATION = contract.family(
    "conv_ablation", "conv_coop.comp", "convca{part}_{t}", contract.CONV_PUSH, None, part=tuple(ABLATIONS),
    t=tuple(TYPES), target=contract.COOP_TARGET,
    defines=lambda part, t: {"MMA": 0, "SPLIT": 0, "F16": TYPES[t][0], "W16": TYPES[t][1],
                             "ABL": ABLATIONS[int(part)]})
FAMILIES = (CONV_ABLATION,)


@functools.cache
def load() -> None:
    """Build the overlay where its SPIR-V is missing or stale, and let the runtime load it."""
    from benchmarks.overlay_load import build_and_load

    build_and_load(FAMILIES, SPIRV_DIR, "convolution")
