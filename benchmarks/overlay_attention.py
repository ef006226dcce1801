"""Benchmark-only shader overlay: ablations of the tensor-core attention kernel at key tiles of 32 (`mhac16a0_d64k32`)
(shaders/attention.comp KERNEL 4, its ABL bits) and of the blocked kernel `mha_f32_blocked64` (KERNEL 6):
each `mhac16a<n>_d64k32` / `mha_f32_blocked64a<n>` leaves parts out, so its results are wrong by design;
`python -m benchmarks.attention_ablation [--kernel blocked]` times them beside the kernel.

    python tools/build_spirv.py --overlay benchmarks/overlay_attention.py --out benchmarks/out/spirv_attention

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
SPIRV_DIR = ROOT / "benchmarks" / "out" / "spirv_attention"

# ABL bits: what each ablation leaves out of (or changes in) the kernel
BITS = {2: "no low parts of the weights", 4: "the device's exp", 16: "no key / value loads",
        32: "no P V products", 64: "low parts by the device's float16 conversion",
        128: "every tile checked (no plain tiles)", 256: "no rescaling of the accumulators",
        512: "float16 conversions by the general h2f / f2h (the same bits)"}
ABLATIONS = {0: 0, 1: 2, 2: 4, 3: 64, 4: 16, 5: 32, 6: 2 | 4, 7: 128, 8: 256, 9: 512}
# the kernel they leave parts out of: key tiles of 32, which production left at 1da342c for 16 (a0: nothing left out)
ABLATED = "mhac16a0_d64k32"

MHA_ABLATION = contract.family(
    "mha_ablation", "attention.comp", "mhac16a{part}_d64k32", contract.MHA_PUSH, None, part=tuple(ABLATIONS),
    target=contract.COOP_TARGET,
    defines=lambda part: {"BITS": 16, "KERNEL": 4, "MMA": 0, "BK": 32, "DMAX": 64, "ABL": ABLATIONS[int(part)]})
# the tensor-core kernel at other shared-memory sizes (key tiles BK, output fragments staged at once
# OSTAGE), with float16 weights (HALFP 1, timed beside mhac16h_d64k32) or float32 ones (beside the kernel)
HALF_EXPERIMENTS = {1: (16, 2, 1), 2: (32, 2, 1), 3: (16, 2, 0), 4: (32, 2, 0), 5: (16, 4, 1),
                    6: (16, 4, 0)}  # BK, OSTAGE, HALFP
MHA_HALF_EXPERIMENT = contract.family(
    "mha_half_experiment", "attention.comp", "mhac16he{part}_d64", contract.MHA_PUSH, None, part=tuple(HALF_EXPERIMENTS),
    target=contract.COOP_TARGET,
    defines=lambda part: {"BITS": 16, "KERNEL": 4, "MMA": 0, "BK": HALF_EXPERIMENTS[int(part)][0], "DMAX": 64,
                          "OSTAGE": HALF_EXPERIMENTS[int(part)][1], "HALFP": HALF_EXPERIMENTS[int(part)][2]})
# the blocked kernel's ABL bits
BLOCKED_BITS = {1: "the device's exp", 4: "no score products", 8: "no P V products",
                16: "the scaled products alone in every tile (no per-score checks)"}
BLOCKED_ABLATIONS = {1: 1, 2: 4, 3: 8, 4: 16, 5: 1 | 16, 6: 4 | 8}
MHA_BLOCKED_ABLATION = contract.family(
    "mha_blocked_ablation", "attention.comp", "mha_f32_blocked64a{part}", contract.MHA_PUSH,
    contract.MHA_BLOCKED[64].local_size, part=tuple(BLOCKED_ABLATIONS),  # (key tiles and head sizes of 64)
    defines=lambda part: {"BITS": 32, "KERNEL": 6, "BQ": 64, "BK": 64, "DMAX": 64, "ABL": BLOCKED_ABLATIONS[int(part)]})
# the blocked kernel's structure: x1 key / value tiles loaded where stored (NOPF), x2 the tile maxima by
# subgroup shuffles (SGMAX), x3 both
BLOCKED_EXPERIMENTS = {1: (1, 0), 2: (0, 1), 3: (1, 1)}
MHA_BLOCKED_EXPERIMENT = contract.family(
    "mha_blocked_experiment", "attention.comp", "mha_f32_blocked64x{part}", contract.MHA_PUSH,
    contract.MHA_BLOCKED[64].local_size, part=tuple(BLOCKED_EXPERIMENTS),
    defines=lambda part: {"BITS": 32, "KERNEL": 6, "BQ": 64, "BK": 64, "DMAX": 64,
                          "NOPF": BLOCKED_EXPERIMENTS[int(part)][0], "SGMAX": BLOCKED_EXPERIMENTS[int(part)][1]})
FAMILIES = (MHA_ABLATION, MHA_HALF_EXPERIMENT, MHA_BLOCKED_ABLATION, MHA_BLOCKED_EXPERIMENT)


@functools.cache
def load() -> None:
    """Build the overlay where its SPIR-V is missing or stale, and let the runtime load it."""
    from benchmarks.overlay_load import build_and_load

    build_and_load(FAMILIES, SPIRV_DIR, "attention")
