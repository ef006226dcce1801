"""Benchmark-only shader overlay: the ablations of the cooperative-matrix kernel `mmc8_rc`
(`bench_coop.py --ablate`, coop_ablate.py). Each `mmc8a<n>_rc` leaves a part of the kernel out or
takes an older one; most give wrong results by design, so they are not in the production contract
(kompute_dml/ops/contract), its specs, `kompute-dml info` or kompute_dml/spirv: this file declares
their family, `load()` builds it (`tools/build_spirv.py --overlay`, into benchmarks/out/) and adds
it to this process's shaders, `compile_ablation` plans one.

    python tools/build_spirv.py --overlay benchmarks/overlay_ablation.py --out benchmarks/out/spirv_ablation
"""

from __future__ import annotations

import functools
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

try:  # loaded by tools/build_spirv.py --overlay (standard library only): its copy of the contract
    contract: Any = sys.modules["_kdml_shader_contract"]
except KeyError:
    from kompute_dml.ops import contract

ROOT = Path(__file__).resolve().parent.parent
SPIRV_DIR = ROOT / "benchmarks" / "out" / "spirv_ablation"

# what each leaves out of mmc8_rc (shaders/matmul_coop.comp), and its #defines
ABLATIONS = {1: "no global loads in the K loop", 2: "no fragment loads in the K loop",
             3: "no fragment loads or MMAs", 4: "no epilogue (raw int32 store)", 5: "old epilogue loop",
             6: "old global->shared pipeline (PIPE=1)", 7: "loads two steps ahead (PIPE=3)",
             8: "no fast path at the shared store (FAST=0)", 9: "no bounds work in the loads (LDV=1)",
             10: "load addresses chosen in a branch (LDV=2)", 11: "zero points' sums from the shared tiles (RSUM=0)"}
_DEFINES = {1: {"ABL": 1}, 2: {"ABL": 2}, 3: {"ABL": 3}, 4: {"ABL": 4}, 5: {"ABL": 5},
            6: {"PIPE": 1, "FAST": 0}, 7: {"PIPE": 3}, 8: {"FAST": 0},
            9: {"LDV": 1}, 10: {"LDV": 2}, 11: {"RSUM": 0}}
# the ablations that are exact kernels (the others' results are wrong by design): 6 and 7 are the
# global -> shared pipeline before the first fix and a deeper one, 8 the shared stores without
# the fast path's constant offsets, 10 the load addresses chosen in a branch (interior or edge
# tile: the default before the clamped addresses), 11 a k-contiguous operand's row / column sums
# (zero points) re-read from the shared tiles every step instead of taken from the staging
# registers as they are stored (the default before RSUM=1), 9 (exact only where the tiles divide
# the shape) what bounds work costs, all timed beside the default (PIPE=2, FAST=1, LDV=0, RSUM=1)
EXACT_ABLATIONS = (5, 6, 7, 8, 9, 10, 11)
WHOLE_TILE_ABLATIONS = (9,)  # exact only where the work-group tiles divide M, N and K

MMC_ABLATION = contract.family(
    "mmc_ablation", "matmul_coop.comp", "mmc8a{part}_rc", contract.MATMUL_PUSH, None, part=tuple(ABLATIONS),
    target=contract.COOP_TARGET, defines=lambda part: {"AL": 1, "BL": 1, **_DEFINES[int(part)]})
FAMILIES = (MMC_ABLATION,)


@functools.cache
def load() -> None:
    """Build the overlay where its SPIR-V is missing or stale, and let the runtime load it."""
    from benchmarks.overlay_load import build_and_load

    build_and_load(FAMILIES, SPIRV_DIR, "ablation")


def compile_ablation(device: Any, desc: Any, ablation: int, config: Any = None) -> Any:
    """MATRIX_MULTIPLY_INTEGER_TO_FLOAT on `mmc8a<ablation>_rc`: the coopmat family's plan for
    `desc` (A row-major, B column-major) with the ablated kernel. UnsupportedError elsewhere."""
    from kompute_dml.core.errors import UnsupportedError
    from kompute_dml.ops.base import CompiledOperator
    from kompute_dml.ops.matmul_common import INPUT_FIELDS, MATRIX_MULTIPLY_INTEGER_TO_FLOAT, OUTPUT_FIELDS
    from kompute_dml.ops.matmul_coop import compile_coop
    from kompute_dml.runtime.shaders import check_capabilities

    if ablation not in ABLATIONS:
        raise UnsupportedError(f"ablation: {ablation} must be one of {sorted(ABLATIONS)}")
    plan = compile_coop(device, desc, family="coopmat", config=config, sums="bytes").plans[0]
    if plan.variant != "mmc8_rc":
        raise UnsupportedError(f"ablation: the ablations are of mmc8_rc (A row-major, B column-major), not {plan.variant}")
    load()
    plan = replace(plan, variant=MMC_ABLATION.name(part=ablation))
    check_capabilities(plan.variant, device.capabilities)
    return CompiledOperator(device, desc, MATRIX_MULTIPLY_INTEGER_TO_FLOAT, INPUT_FIELDS, OUTPUT_FIELDS, [plan])
