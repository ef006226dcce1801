"""Shape/stride arithmetic shared by the operators: dimension merging, overlap checks,
and the ranges of bytes a strided tensor touches."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .errors import invalid


def merge_dims(sizes: Sequence[int], *strides: Sequence[int]) -> tuple[list[int], list[list[int]]]:
    """Drop size-1 dimensions and fuse neighbours that are contiguous in *every* stride list.

    Dimension i and i+1 fuse when stride[i] == stride[i+1] * size[i+1] for all lists, so the
    pair is addressed exactly like one dimension of size[i] * size[i+1]. Returns at least one
    dimension (size 1, strides 0 for a scalar)."""
    out_sizes: list[int] = []
    out_strides: list[list[int]] = [[] for _ in strides]
    for d, size in enumerate(sizes):
        if size == 1:
            continue
        if out_sizes and all(
            out_strides[k][-1] == strides[k][d] * size for k in range(len(strides))
        ):
            out_sizes[-1] *= size
            for k in range(len(strides)):
                out_strides[k][-1] = strides[k][d]
            continue
        out_sizes.append(size)
        for k in range(len(strides)):
            out_strides[k].append(strides[k][d])
    if not out_sizes:
        return [1], [[0] for _ in strides]
    return out_sizes, out_strides


# Above this many elements the exact (enumerating) overlap test is not attempted.
_EXACT_OVERLAP_LIMIT = 1 << 22


def check_no_overlap(sizes: Sequence[int], strides: Sequence[int], field: str) -> None:
    """Raise InvalidArgumentError if two elements of an output map to the same address."""
    dims = sorted((st, s) for s, st in zip(sizes, strides) if s > 1)
    extent = 0  # highest offset reachable by the dimensions seen so far
    simple = True
    for st, s in dims:
        if st == 0:
            raise invalid(f"{field}.strides", "an output may not broadcast (stride 0 on a dimension of size > 1)")
        if st <= extent:
            simple = False
            break
        extent += (s - 1) * st
    if simple:
        return
    count = 1
    for s in sizes:
        count *= s
    if count > _EXACT_OVERLAP_LIMIT:
        raise invalid(
            f"{field}.strides",
            "output strides must be provably non-overlapping (each stride, sorted ascending, "
            "must exceed the span of the smaller ones)",
        )
    offsets = element_offsets(sizes, strides)
    if np.unique(offsets).size != offsets.size:
        raise invalid(f"{field}.strides", "output strides make two elements share one address")


def element_offsets(sizes: Sequence[int], strides: Sequence[int]) -> np.ndarray:
    """Element offsets (in elements) of every coordinate, row-major, as int64."""
    off = np.zeros((1,), dtype=np.int64)
    for s, st in zip(sizes, strides):
        off = (off[:, None] + np.arange(s, dtype=np.int64)[None, :] * st).reshape(-1)
    return off
