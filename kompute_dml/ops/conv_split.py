"""Split-K for the tiled convolution kernels (CONVOLUTION's and QUANTIZED_LINEAR_CONVOLUTION's,
docs/convolution.md): how many parts a grid of few work groups cuts its reduction into (the parts'
partial sums to the operator's scratch, then added per output in part order by a second dispatch)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ..core.ints import cdiv

if TYPE_CHECKING:
    from ..device.device import Device

TILE_K = 16  # the tiled kernel's reduction step (shaders/convolution.comp BK)

# Split-K (GPUs, docs/convolution.md): fewer work groups than SPLIT_TARGET_GROUPS cut the reduction into
# at most SPLIT_MAX parts of at least SPLIT_MIN_K terms; KDML_CONV_SPLIT=<parts> forces a count (1: none).
SPLIT_TARGET_GROUPS = 256
SPLIT_MIN_K = 32
SPLIT_MAX = 32
CONV_SPLIT_ENV = "KDML_CONV_SPLIT"


def conv_split(device: Device, groups_in_grid: int, klen: int, step: int = TILE_K) -> int:
    """How many parts a tiled kernel of `groups_in_grid` work groups and K steps of `step` cuts the
    reduction of `klen` terms into (1: none); each part a multiple of `step`."""
    forced = os.environ.get(CONV_SPLIT_ENV, "")
    if forced:
        if not forced.isdigit() or int(forced) < 1:
            raise ValueError(f"{CONV_SPLIT_ENV}={forced!r}: a count of parts >= 1")
        want = int(forced)
    elif device.policy.name == "cpu" or groups_in_grid >= SPLIT_TARGET_GROUPS:
        return 1
    else:
        want = min(SPLIT_MAX, cdiv(SPLIT_TARGET_GROUPS, groups_in_grid), klen // SPLIT_MIN_K)
    chunk = cdiv(cdiv(klen, max(want, 1)), step) * step
    return max(1, cdiv(klen, chunk))


def conv_parts(device: Device, grid: tuple[int, int, int], klen: int, outputs: int,
               step: int = TILE_K) -> tuple[int, int]:
    """(parts, terms per part) of a tiled `grid` (parts multiply its y) over `klen` terms of `outputs`
    sums: conv_split's count where the parts' grid and 4 x parts x outputs bytes fit, else one pass."""
    split, lim = conv_split(device, grid[0] * grid[1] * grid[2], klen, step), device.limits
    room = (grid[1] * split <= lim["max_compute_work_group_count"][1] and split * outputs < 2 ** 32
            and 4 * split * outputs <= lim["max_storage_buffer_range"])  # else no room for the parts: one pass
    return (split, cdiv(cdiv(klen, split), step) * step) if room else (1, cdiv(klen, step) * step)
