"""The transfer-assisted plans of DIAGONAL_MATRIX and DIAGONAL_MATRIX1 (where the device
policy uses transfer commands: lavapipe): zero fills and copy regions for the elements that
are not Value, fills of Value's word or the narrow diag_band shader for the band."""

from __future__ import annotations

import math

import numpy as np

from ..core.layout import element_offsets
from ..core.tensor_desc import TensorDesc
from ..runtime import DispatchPlan, TransferPlan, grid_for
from . import contract
from .transfer_plans import MAX_ROWS, fill_regions, plan_copy_transfer

# ---- transfer-assisted plans (Device.transfer_commands) -----------------------------
# For 32/64-bit outputs whose rows are contiguous, the elements that are not Value are
# written by transfer commands (a zero fill, or copy regions from the input), and Value
# by fills of its 32-bit word per row range or, for a narrow band, by diag_band.comp.
BAND_SHADER_MAX = 64
BAND_LOCAL_SIZE = 64


def _row_ranges(nrows: int, rows: int, cols: int, begin: int, end: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Per row (batch-major), the [x0, x1) ranges that get Value and those that do not."""
    y = np.arange(nrows, dtype=np.int64) % rows
    if end >= begin:
        v0 = np.clip(y + begin, 0, cols)
        v1 = np.clip(y + end, 0, cols)
        zero = np.zeros_like(y)
        full = np.full_like(y, cols)
        return [np.stack([v0, v1], 1)], [np.stack([zero, v0], 1), np.stack([v1, full], 1)]
    a = np.clip(y + end, 0, cols)
    b = np.clip(y + begin, 0, cols)
    zero = np.zeros_like(y)
    full = np.full_like(y, cols)
    return [np.stack([zero, a], 1), np.stack([b, full], 1)], [np.stack([a, b], 1)]


def plan_diagonal_transfer(
    out: TensorDesc, inp: TensorDesc | None, begin: int, end: int, value_bits: int, out_index: int,
    max_groups: int = 65535,
) -> list[DispatchPlan | TransferPlan] | None:
    """Transfer-assisted plan, or None where only the shader applies."""
    width = out.data_type.size
    if width < 4 and (inp is not None or not 0 < end - begin <= BAND_SHADER_MAX):
        return None  # fills of Value or of input ranges need 4-byte granularity
    sizes, ostr = list(out.sizes), list(out.effective_strides)
    rows, cols = sizes[-2], sizes[-1]
    if cols > 1 and ostr[-1] != 1:
        return None
    istr = list(inp.effective_strides) if inp is not None else None
    if istr is not None and cols > 1 and istr[-1] != 1:
        return None
    nrows = math.prod(sizes[:-1])
    if nrows > MAX_ROWS:
        return None
    lo, hi = value_bits & 0xFFFFFFFF, (value_bits >> 32) & 0xFFFFFFFF
    band = end - begin
    use_band_shader = inp is None and 0 < band <= BAND_SHADER_MAX and (nrows > 16 or width < 4)
    if not use_band_shader and width == 8 and lo != hi:
        return None  # a 64-bit Value that is not a repeated 32-bit word cannot be filled
    out_rows = element_offsets(sizes[:-1], ostr[:-1]) * width
    value_ranges, other_ranges = _row_ranges(nrows, rows, cols, begin, end)
    plans: list[DispatchPlan | TransferPlan] = []
    if inp is None:
        zero = plan_copy_transfer(sizes, ostr, ostr, width)  # the output's own row layout
        if zero is None:
            return None
        whole = np.stack([zero.regions[:, 1], zero.regions[:, 2]], 1)
        if width < 4 and np.any(whole % 4):
            return None  # a fill covers whole words only
        plans.append(TransferPlan("fill", (out_index,), fill_regions(whole), (out_index,), 0))
        if value_bits == 0:
            return plans
    else:
        in_rows = element_offsets(sizes[:-1], istr[:-1]) * width  # type: ignore[index]
        regions = [
            np.stack([in_rows + r[:, 0] * width, out_rows + r[:, 0] * width, (r[:, 1] - r[:, 0]) * width], 1)
            for r in other_ranges
        ]
        copy = np.concatenate(regions)
        copy = copy[copy[:, 2] > 0]
        if len(copy):
            plans.append(TransferPlan("copy", (0, out_index), copy.astype(np.int64), (out_index,)))
    if use_band_shader:
        # clamp begin so that y + begin + k cannot overflow int32 in the shader
        b = max(min(begin, cols), -(rows + band))
        bsizes = [1, 1, *sizes[:-2]][-2:]
        bstr = [0, 0, *ostr[:-2]][-2:]
        fam = contract.DIAG_BAND
        push = fam.pack(out_off=0, total=nrows * band, band=band, rows=rows, cols=cols, begin=b, row_stride=ostr[-2],
                        b1_size=bsizes[1], b1_stride=bstr[1], b0_stride=bstr[0], value_lo=lo, value_hi=hi)
        plans.append(DispatchPlan(
            variant=fam.name(bits=8 * width), bindings=(out_index,), push=push,
            groups=grid_for(nrows * band, BAND_LOCAL_SIZE, max_groups), writes=(out_index,),
            offset_slots=fam.slots(out_off=(out_index, width)),
        ))
        return plans
    fills = np.concatenate([np.stack([out_rows + r[:, 0] * width, (r[:, 1] - r[:, 0]) * width], 1) for r in value_ranges])
    fills = fill_regions(fills)
    if len(fills):
        plans.append(TransferPlan("fill", (out_index,), fills, (out_index,), lo))
    return plans
