"""DirectML's UNFOLD operator (DML_UNFOLD_OPERATOR_DESC, feature level 6_4): the sliding blocks of an
input (N, C, SpatialSize...) flattened into the columns of an output (N, C x prod(WindowSizes),
BlockCount) (torch.nn.Unfold, im2col), the inverse of FOLD (ops/fold.py). Along each of the
DimensionCount spatial axes the padded input (StartPadding + SpatialSize + EndPadding) holds
BlocksPerDimension = (SpatialSize + StartPadding + EndPadding - Dilations (WindowSizes - 1) - 1) /
Strides + 1 blocks, BlockCount their product (row-major); output row c x prod(WindowSizes) + k holds
window position k (row-major) of channel c, and its column b the input element at b x Strides -
StartPadding + k x Dilations, 0 where that falls in the padding.

shaders/unfold.comp: an output element per invocation, the element's bits copied (no arithmetic:
exact for every type, -0.0 and NaN payloads kept), the padding's elements all-zero bits.

The page, as FOLD's, gives a 4-D InputTensor and a 3-D OutputTensor in its examples while its
constraints ask for the same DimensionCount (a slip): both are taken, the output's leading dimensions
past the three being 1, as the input's past N, C and the spatial ones. Its table names no data types:
UNFOLD only moves elements, so kompute_dml takes every type of 8, 16 or 32 bits (FLOAT32, FLOAT16,
INT32 / UINT32, INT16 / UINT16, INT8 / UINT8); 64-bit types are refused (UnsupportedError). It
unfolds at most 3 spatial dimensions (the page: 6; UnsupportedError naming window_sizes beyond). The
page computes BlocksPerDimension with its formula alone; an axis whose padded size is shorter than the
dilated window (no block) is refused (InvalidArgumentError naming window_sizes).

Validation, in order: the table (InvalidArgumentError / UnsupportedError naming the field), one data
type, the arrays (DimensionCount values each; window sizes, strides and dilations >= 1), the
dimension counts, the output's sizes (N, C x prod(WindowSizes), BlockCount), a non-overlapping
output, 32-bit addressing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..core.dtypes import DataType
from ..core.errors import invalid
from ..core.ints import as_int_tuple
from ..core.layout import check_no_overlap
from ..core.registry import FL, FLOATS, INTS_8_32, OperatorSupport, row
from ..core.tensor_desc import TensorDesc
from ..device.memory import Tensor
from ..functional import run_into
from ..functional.elementwise import _operands
from ..runtime import DispatchPlan, grid_for
from . import contract
from .base import CompiledOperator, validate_tensors
from .elementwise_plan import check_addressable
from .fold import blocks_per_dimension, check_windows
from .spec import OperatorSpec

if TYPE_CHECKING:
    from ..device.device import Device

_TYPES = FLOATS | INTS_8_32
# DML_OPERATOR_UNFOLD: directml.h's enumeration, the one after DML_OPERATOR_FOLD (176)
UNFOLD = OperatorSupport("UNFOLD", 177, (
    row(FL.FL_6_4, ("input_tensor", "input", (3, 8), _TYPES), ("output_tensor", "output", (3, 8), _TYPES)),))
MAX_SPATIAL = 3  # kompute_dml's shader (contract.unfold.UNFOLD_PUSH)


@dataclass(frozen=True)
class UnfoldDesc:
    """DML_UNFOLD_OPERATOR_DESC { InputTensor, OutputTensor, DimensionCount, WindowSizes, Strides,
    Dilations, StartPadding, EndPadding }; DimensionCount is the arrays' length."""

    input_tensor: TensorDesc
    output_tensor: TensorDesc
    window_sizes: Sequence[int]
    strides: Sequence[int]
    dilations: Sequence[int]
    start_padding: Sequence[int]
    end_padding: Sequence[int]


def compile_unfold(device: Device, desc: UnfoldDesc) -> CompiledOperator:
    support = UNFOLD
    validate_tensors(support, device.feature_level, desc, support.fields, support.outputs)
    x, y = desc.input_tensor, desc.output_tensor
    a, _, c, spatial, k, blocks = check_windows(desc, "UNFOLD", "input_tensor", "output_tensor")
    d = len(a["window_sizes"])
    check_no_overlap(y.sizes, y.effective_strides, "output_tensor")
    check_addressable(support.fields, (x, y))
    pad3 = MAX_SPATIAL - d
    xs, ys = x.effective_strides[-(d + 2):], y.effective_strides[-3:]

    def three(v: Sequence[int], fill: int) -> list[int]:
        return [fill] * pad3 + list(v)

    fam = contract.unfold.UNFOLD
    unit = x.data_type.size
    total = y.element_count
    push = fam.pack(x_off=0, y_off=0, total=total, c=c, k=k, xs=[xs[0], xs[1], *three(xs[2:], 0)], ys=list(ys),
                    isz=three(spatial, 1), win=three(a["window_sizes"], 1), stride=three(a["strides"], 1),
                    dil=three(a["dilations"], 1), pad=three(a["start_padding"], 0), blk=three(blocks, 1))
    plan = DispatchPlan(variant=fam.name(bits=8 * unit), bindings=(0, 1), push=push, writes=(1,),
                        offset_slots=fam.slots(x_off=(0, unit), y_off=(1, unit)),
                        groups=grid_for(total, 256, device.limits["max_compute_work_group_count"][0]))
    return CompiledOperator(device, desc, support, support.inputs, support.outputs, [plan])


# ---- functional helper (exported as kdml.<name>) -----------------------------------------
def unfold(x: Any, window_sizes: Sequence[int], *, strides: Sequence[int] | None = None,
           dilations: Sequence[int] | None = None, start_padding: Sequence[int] | None = None,
           end_padding: Sequence[int] | None = None, out: Tensor | None = None, device: Device | None = None) -> Tensor:
    """DML_UNFOLD (torch.nn.functional.unfold, im2col): x (N, C, *spatial) into a new packed Tensor
    (N, C x prod(window_sizes), BlockCount), or `out`; strides and dilations default to 1, the
    paddings to 0."""
    dev, (t,) = _operands((x,), ("x",), device)
    win = as_int_tuple(window_sizes, "window_sizes")
    d = len(win)

    def arr(v: Sequence[int] | None, default: int) -> tuple[int, ...]:
        return (default,) * d if v is None else as_int_tuple(v, "window_sizes")

    st, dil, sp, ep = arr(strides, 1), arr(dilations, 1), arr(start_padding, 0), arr(end_padding, 0)
    if t.desc.dimension_count != d + 2:
        raise invalid("x", f"must have {d + 2} dimensions (N, C and window_sizes' {d} spatial ones), got {t.desc.sizes}")
    if len({len(v) for v in (st, dil, sp, ep)} | {d}) != 1 or min(win, default=0) < 1 or min(st + dil, default=1) < 1:
        raise invalid("window_sizes", f"window_sizes, strides, dilations and paddings must hold {d} values, the first "
                                      f"three >= 1: got {win}, {st}, {dil}, {sp}, {ep}")
    blocks = blocks_per_dimension(t.desc.sizes[2:], win, st, dil, sp, ep)
    n, c = t.desc.sizes[:2]
    shape = (n, c * math.prod(win), math.prod(blocks))
    dt = t.desc.data_type
    return run_into(dev, lambda od: UnfoldDesc(t.desc, od, win, st, dil, sp, ep), [t], shape, dt, out)


def _example() -> UnfoldDesc:
    f32 = DataType.FLOAT32
    return UnfoldDesc(TensorDesc(f32, (1, 1, 5, 5)), TensorDesc(f32, (1, 9, 9)), (3, 3), (1, 1), (1, 1), (0, 0), (0, 0))


SPECS = (OperatorSpec(UnfoldDesc, UNFOLD, compile_unfold, (contract.unfold.UNFOLD,), helpers=("unfold",),
                      example=_example),)
