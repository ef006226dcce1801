"""Planning transfer commands (runtime.TransferPlan) for copies and fills whose rows are
contiguous: whole tensors as one region, strided tensors as one region per row."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..core.layout import element_offsets, merge_dims
from ..runtime import TransferPlan

# A row shorter than this is cheaper in a shader than as a region of its own.
MIN_ROW_BYTES = 64
# Plans hold their regions; beyond this many rows the shader path is used.
MAX_ROWS = 1 << 16


def row_layout(
    sizes: Sequence[int], *strides: Sequence[int]
) -> tuple[int, list[np.ndarray]] | None:
    """(row length in elements, per-row element offsets for each stride list) when the
    merged innermost dimension is contiguous (stride 1) in every list, else None."""
    msizes, mstrides = merge_dims(sizes, *strides)
    if len(msizes) == 1 and msizes[0] == 1:
        return 1, [np.zeros(1, np.int64) for _ in strides]
    if any(st[-1] != 1 for st in mstrides):
        return None
    rows = int(np.prod(msizes[:-1])) if len(msizes) > 1 else 1
    if rows > MAX_ROWS:
        return None
    return msizes[-1], [element_offsets(msizes[:-1], st[:-1]) for st in mstrides]


def plan_copy_transfer(
    sizes: Sequence[int], src_strides: Sequence[int], dst_strides: Sequence[int], width: int,
    src_index: int = 0, dst_index: int = 1,
) -> TransferPlan | None:
    layout = row_layout(sizes, src_strides, dst_strides)
    if layout is None:
        return None
    row, (src_rows, dst_rows) = layout
    if len(src_rows) > 1 and row * width < MIN_ROW_BYTES:
        return None
    regions = np.stack([src_rows * width, dst_rows * width, np.full_like(src_rows, row * width)], axis=1)
    return TransferPlan("copy", (src_index, dst_index), regions.astype(np.int64), (dst_index,))


def fill_regions(byte_ranges: np.ndarray) -> np.ndarray:
    """Drop empty (offset, size) ranges."""
    return byte_ranges[byte_ranges[:, 1] > 0].astype(np.int64)
