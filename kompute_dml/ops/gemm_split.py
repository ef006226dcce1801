"""GEMM's split-K on GPUs (docs/gemm.md, "Split-K"): where the tiled kernel has few work groups, each
walks all of K in serial steps of 16 (loads, a barrier, the products), about 0.8 us each on the
H100 when the GPU is mostly idle, so a product of few tiles and long K is bound by that chain (1024
x 1024 x 256 float32 on 64 tiles: 53 us against torch's 23). From SPLIT_FROM_K terms, cut into parts
of at least SPLIT_MIN_K (at most SPLIT_MAX, until the grid has SPLIT_TARGET_GROUPS work groups), the `gemms_*`
variant writes each part's float32 sums to the operator's scratch and `gemmr_*` adds them in part
order per output and applies the epilogue. KDML_GEMM_SPLIT=<parts> forces a count (1: none; the
tests force it on lavapipe, which never splits by itself)."""

from __future__ import annotations

import dataclasses
import os
from typing import TYPE_CHECKING, Any

from ..core.dtypes import DataType
from ..core.ints import cdiv
from ..core.tensor_desc import TensorDesc
from ..device.memory import Tensor
from ..runtime import DispatchPlan, grid_for
from . import contract

if TYPE_CHECKING:
    from ..device.device import Device

SPLIT_TARGET_GROUPS = 256
SPLIT_MIN_K = 128
# no split below this K: at K = 256 the second dispatch costs what the parts save (H100, `python -m
# benchmarks.bench_gemm --blocks --only 1576x`: 1576 x 256 x 256 17.3 us in one pass, 20.5 in two parts)
SPLIT_FROM_K = 512
SPLIT_MAX = 16
# Two parts over K >= LONG_K where the tiles fall short of twice SPLIT_TARGET_GROUPS: ViT-B/16's second
# feed-forward product at batch 8, 1576 x 3072 x 768 on 300 tiles, 325.7 us in one pass, 286.0 in two, 286.5 in
# four (H200, `python -m benchmarks.bench_gemm --blocks --only 1576x3072` with KDML_GEMM_SPLIT unset, 2, 4;
# device call 296); at K = 768 on 300 tiles two parts gained nothing (1576 x 768 x 768: 88.0 / 87.4 us)
LONG_K = 2048
KT = 16  # gemm.comp's K step: every part but the last a multiple of it
GEMM_SPLIT_ENV = "KDML_GEMM_SPLIT"


def gemm_split(device: Device, tiles: int, k: int) -> tuple[int, int]:
    """(parts, terms per part) for a product of `tiles` 64 x 64 tiles over `k` terms; (1, _): none."""
    forced = os.environ.get(GEMM_SPLIT_ENV, "")
    if forced:
        if not forced.isdigit() or int(forced) < 1:
            raise ValueError(f"{GEMM_SPLIT_ENV}={forced!r}: a count of parts >= 1")
        want = int(forced)
    elif device.policy.name == "cpu" or k < SPLIT_FROM_K or tiles >= SPLIT_TARGET_GROUPS * (2 if k >= LONG_K else 1):
        return 1, k
    else:
        want = min(SPLIT_MAX, max(2, cdiv(SPLIT_TARGET_GROUPS, tiles)), k // SPLIT_MIN_K)
    chunk = cdiv(cdiv(k, max(want, 1)), KT) * KT
    return max(1, cdiv(k, chunk)), chunk


def split_plans(device: Device, plan: DispatchPlan, m: int, n: int, k: int, nmat: int,
                gemm_grid: Any) -> tuple[list[DispatchPlan], Tensor] | None:
    """The tiled one-pass `plan` as split-K's two dispatches and their scratch (the operator's
    constant, binding-list entry 4), or None where it stays one pass."""
    t, blk_act = plan.variant.split("_")[1], plan.variant.rsplit("_b", 1)[1]
    bm, bn = contract.block_sides(blk_act.rstrip("a"))
    if bm != bn:  # (the 8 x 4 block: chosen only where there are many tiles, so never split)
        return None
    blk, act = bm, "a" if blk_act.endswith("a") else ""  # gemm_f32_b8a: fused activation
    tiles = cdiv(m, 16 * blk) * cdiv(n, 16 * blk) * nmat
    # the parts from the logical shape alone (64 x 64 tiles, whatever the block): a product's bits do
    # not depend on its tile or layout
    parts, chunk = gemm_split(device, cdiv(m, 64) * cdiv(n, 64) * nmat, k)
    words = parts * nmat * m * n
    if parts < 2 or tiles * parts >= 1 << 31 or words >= 1 << 32 or 4 * words > device.limits["max_storage_buffer_range"]:
        return None
    push = list(plan.push)
    push[contract.GEMM.offset("kchunk")] = chunk
    bindings = (*plan.bindings[:4], 4)
    parts_plan = dataclasses.replace(plan, variant=contract.GEMM_SPLIT.name(t=t, blk=blk), push=tuple(push), spec=(),
                                     bindings=bindings, groups=gemm_grid(tiles * parts, device.limits["max_compute_work_group_count"]),
                                     writes=(4,))
    reduce = dataclasses.replace(plan, variant=contract.GEMM_REDUCE.name(t=t, act=act), push=tuple(push), bindings=bindings,
                                 groups=grid_for(nmat * m * n, 256, device.limits["max_compute_work_group_count"][0]))
    desc = TensorDesc(DataType.UINT32, (words,))
    return [parts_plan, reduce], Tensor.scratch(device, desc)
