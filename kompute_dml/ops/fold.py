"""DirectML's FOLD operator (DML_FOLD_OPERATOR_DESC, feature level 6_4): the sliding blocks of an
input (N, C x prod(WindowSizes), BlockCount) summed into the output (N, C, OutputSize...) they
were taken from (ONNX Col2Im, torch.nn.Fold). Along each of the DimensionCount spatial axes the
padded output (StartPadding + OutputSize + EndPadding) holds BlocksPerDimension = (OutputSize +
StartPadding + EndPadding - Dilations (WindowSizes - 1) - 1) / Strides + 1 blocks, BlockCount their
product (row-major); input row c x prod(WindowSizes) + k holds window position k (row-major) of
channel c, and its value in block b lands at b x Strides - StartPadding + k x Dilations (dropped
in the padding).

shaders/fold.comp: an output element per invocation, summing in float32 the values landing on it
in ascending window position, each addition rounded once (FLOAT16 decoded exactly, the sum rounded
once): the bits of that order's float32 sum (tests/test_fold_operator.py, and the page's three
examples).

The page (its examples, checked by tests/test_fold_operator.py) gives a 3-D InputTensor (N, C x
prod(WindowSizes), BlockCount) for a 4-D OutputTensor, while its constraints ask for the same
DimensionCount (a slip): both are taken, the input's leading dimensions past the three being 1, as
the output's past N, C and the spatial ones. Its table names no data types: FLOAT32 and FLOAT16,
as its examples. kompute_dml folds at most 3 spatial dimensions (the page: 6; UnsupportedError
naming window_sizes beyond).

Validation, in order: the table (InvalidArgumentError / UnsupportedError naming the field), one
data type, the arrays (DimensionCount values each; window sizes, strides and dilations >= 1), the
dimension counts, the input's sizes (N, C x prod(WindowSizes), BlockCount), a non-overlapping
output, 32-bit addressing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from ..core.dtypes import DataType
from ..core.errors import UnsupportedError, invalid
from ..core.ints import as_int_tuple
from ..core.layout import check_no_overlap
from ..core.registry import FL, FLOATS, OperatorSupport, row
from ..core.tensor_desc import TensorDesc
from ..device.memory import Tensor
from ..functional import run_into
from ..functional.elementwise import _operands
from ..runtime import DispatchPlan, grid_for
from . import contract
from .base import CompiledOperator, validate_tensors
from .elementwise_plan import check_addressable
from .onnx_types import float_input
from .spec import OnnxOp, OperatorSpec

if TYPE_CHECKING:
    from ..device.device import Device

FOLD = OperatorSupport("FOLD", 176, (
    row(FL.FL_6_4, ("input_tensor", "input", (3, 8), FLOATS), ("output_tensor", "output", (3, 8), FLOATS)),))
MAX_SPATIAL = 3  # kompute_dml's shader (contract.vision.FOLD_PUSH)
_ARRAYS = ("window_sizes", "strides", "dilations", "start_padding", "end_padding")


@dataclass(frozen=True)
class FoldDesc:
    """DML_FOLD_OPERATOR_DESC { InputTensor, OutputTensor, DimensionCount, WindowSizes, Strides,
    Dilations, StartPadding, EndPadding }; DimensionCount is the arrays' length."""

    input_tensor: TensorDesc
    output_tensor: TensorDesc
    window_sizes: Sequence[int]
    strides: Sequence[int]
    dilations: Sequence[int]
    start_padding: Sequence[int]
    end_padding: Sequence[int]


def blocks_per_dimension(size: Sequence[int], window: Sequence[int], strides: Sequence[int], dilations: Sequence[int],
                         start: Sequence[int], end: Sequence[int]) -> tuple[int, ...]:
    """The page's BlocksPerDimension (<= 0 where the padded axis is shorter than the window)."""
    return tuple((s + p + q - d * (w - 1) - 1) // st + 1 if s + p + q - d * (w - 1) - 1 >= 0 else 0
                 for s, w, st, d, p, q in zip(size, window, strides, dilations, start, end))


def _arrays(desc: Any, name: str) -> dict[str, tuple[int, ...]]:
    vals = {f: as_int_tuple(getattr(desc, f), f) for f in _ARRAYS}
    d = len(vals["window_sizes"])
    if not 1 <= d <= 6:
        raise invalid("window_sizes", f"DimensionCount must be 1 to 6, got {d}")
    for f, v in vals.items():
        if len(v) != d:
            raise invalid(f, f"must hold DimensionCount ({d}) values, got {len(v)}")
        low = 0 if f.endswith("padding") else 1
        if any(x < low for x in v):
            raise invalid(f, f"values must be >= {low}, got {v}")
    if d > MAX_SPATIAL:
        raise UnsupportedError(f"window_sizes: kompute_dml's {name} takes at most {MAX_SPATIAL} spatial dimensions, got {d}")
    return vals


def _logical(t: TensorDesc, keep: int, field: str) -> tuple[int, ...]:
    """t's last `keep` sizes (its leading ones must be 1)."""
    lead = t.sizes[:t.dimension_count - keep]
    if t.dimension_count < keep or any(s != 1 for s in lead):
        raise invalid(f"{field}.sizes", f"must be {keep} sizes after leading 1s, got {t.sizes}")
    return t.sizes[t.dimension_count - keep:]


class Windows(NamedTuple):
    """A checked FOLD / UNFOLD descriptor's geometry: its arrays, the image's N, C and spatial sizes, the
    window's element count K and the blocks per dimension."""

    arrays: dict[str, tuple[int, ...]]
    n: int
    c: int
    spatial: tuple[int, ...]
    k: int
    blocks: tuple[int, ...]


def check_windows(desc: Any, name: str, image_field: str, columns_field: str) -> Windows:
    """FOLD's and UNFOLD's shared rules (the pages'): one data type; the image (N, C, spatial...) and the
    columns (N, C x prod(WindowSizes), BlockCount), the columns of 3 dimensions or the image's count (the
    pages' examples against their constraints: module docstring); every window inside the padded image."""
    x, y = desc.input_tensor, desc.output_tensor
    if y.data_type != x.data_type:
        raise invalid("output_tensor.data_type", f"must equal input_tensor's ({x.data_type.name}), got {y.data_type.name}")
    a = _arrays(desc, name)
    d = len(a["window_sizes"])
    image, cols = getattr(desc, image_field), getattr(desc, columns_field)
    if cols.dimension_count not in (3, image.dimension_count):
        raise invalid(f"{columns_field}.sizes", f"dimension count must be 3 or {image_field}'s ({image.dimension_count}), "
                                                f"got {cols.dimension_count}")
    n, c, *spatial = _logical(image, d + 2, image_field)
    cn, rows, count = _logical(cols, 3, columns_field)
    k = math.prod(a["window_sizes"])
    blocks = blocks_per_dimension(spatial, a["window_sizes"], a["strides"], a["dilations"], a["start_padding"],
                                  a["end_padding"])
    if min(blocks) < 1:
        padded = [s + p + q for s, p, q in zip(spatial, a["start_padding"], a["end_padding"])]
        raise invalid("window_sizes", f"a window of {a['window_sizes']} (dilations {a['dilations']}) is longer than the "
                                      f"padded {image_field.split('_')[0]} {padded}")
    want = (n, c * k, math.prod(blocks))
    if (cn, rows, count) != want:
        raise invalid(f"{columns_field}.sizes", f"must be (N, C x prod(WindowSizes), BlockCount) = {want} for "
                                                f"{image_field} {image.sizes} (blocks per dimension {blocks}), got {cols.sizes}")
    return Windows(a, n, c, tuple(spatial), k, blocks)


def compile_fold(device: Device, desc: FoldDesc) -> CompiledOperator:
    support = FOLD
    validate_tensors(support, device.feature_level, desc, support.fields, support.outputs)
    x, y = desc.input_tensor, desc.output_tensor
    a, _, c, spatial, k, blocks = check_windows(desc, "FOLD", "output_tensor", "input_tensor")
    d = len(a["window_sizes"])
    check_no_overlap(y.sizes, y.effective_strides, "output_tensor")
    check_addressable(support.fields, (x, y))
    pad3 = MAX_SPATIAL - d
    xs, ys = x.effective_strides[-3:], y.effective_strides[-(d + 2):]

    def three(v: Sequence[int], fill: int) -> list[int]:
        return [fill] * pad3 + list(v)

    fam = contract.vision.FOLD
    unit = x.data_type.size
    total = y.element_count
    push = fam.pack(x_off=0, y_off=0, total=total, c=c, k=k, xs=list(xs), ys=[ys[0], ys[1], *three(ys[2:], 0)],
                    osz=three(spatial, 1), win=three(a["window_sizes"], 1), stride=three(a["strides"], 1),
                    dil=three(a["dilations"], 1), pad=three(a["start_padding"], 0), blk=three(blocks, 1))
    plan = DispatchPlan(variant=fam.name(t="f16" if x.data_type == DataType.FLOAT16 else "f32"), bindings=(0, 1),
                        push=push, writes=(1,), offset_slots=fam.slots(x_off=(0, unit), y_off=(1, unit)),
                        groups=grid_for(total, 256, device.limits["max_compute_work_group_count"][0]))
    return CompiledOperator(device, desc, support, support.inputs, support.outputs, [plan])


# ---- functional helper (exported as kdml.<name>) -----------------------------------------
def fold(x: Any, output_size: Sequence[int], window_sizes: Sequence[int], *, strides: Sequence[int] | None = None,
         dilations: Sequence[int] | None = None, start_padding: Sequence[int] | None = None,
         end_padding: Sequence[int] | None = None, out: Tensor | None = None, device: Device | None = None) -> Tensor:
    """DML_FOLD (ONNX Col2Im, torch.nn.functional.fold): x (N, C x prod(window_sizes), BlockCount)
    summed into a new packed Tensor (N, C, *output_size), or `out`; strides and dilations default
    to 1, the paddings to 0."""
    dev, (t,) = _operands((x,), ("x",), device)
    win = as_int_tuple(window_sizes, "window_sizes")
    size = as_int_tuple(output_size, "output_size")
    d = len(win)

    def arr(v: Sequence[int] | None, default: int) -> tuple[int, ...]:
        return (default,) * d if v is None else tuple(v)

    if t.desc.dimension_count != 3:
        raise invalid("x", f"must have 3 dimensions (N, C x prod(window_sizes), BlockCount), got {t.desc.sizes}")
    if len(size) != d:
        raise invalid("output_size", f"must hold {d} values (window_sizes' count), got {size}")
    k = math.prod(win) if win and min(win) > 0 else 1
    shape = (t.desc.sizes[0], t.desc.sizes[1] // k, *size)
    dt = t.desc.data_type
    xd = TensorDesc(dt, (1,) * (len(shape) - 3) + t.desc.sizes, (0,) * (len(shape) - 3) + t.desc.effective_strides)
    return run_into(dev, lambda od: FoldDesc(xd, od, win, arr(strides, 1), arr(dilations, 1), arr(start_padding, 0),
                                             arr(end_padding, 0)), [Tensor.trusted(t.buffer, xd, t.offset)], shape, dt, out)


def _example() -> FoldDesc:
    f32 = DataType.FLOAT32
    return FoldDesc(TensorDesc(f32, (1, 9, 4)), TensorDesc(f32, (1, 1, 4, 4)), (3, 3), (1, 1), (1, 1), (0, 0), (0, 0))


SPECS = (OperatorSpec(FoldDesc, FOLD, compile_fold, (contract.vision.FOLD,), helpers=("fold",),
                      onnx=(OnnxOp("Col2Im", "", "fold", check=float_input),), example=_example),)
