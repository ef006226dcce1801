"""DirectML's pooling gradients: AVERAGE_POOLING_GRAD (DML_AVERAGE_POOLING_GRAD_OPERATOR_DESC, 3_0)
and MAX_POOLING_GRAD (DML_MAX_POOLING_GRAD_OPERATOR_DESC, 3_0), the backward passes of
AVERAGE_POOLING and MAX_POOLING2 (ops/pooling.py).

shaders/grad_pooling.comp (contract.grad.GRAD_POOL): one dispatch, an invocation per element of the
OutputGradientTensor (the forward input's shape), which gathers the windows covering it (no scatter,
no atomics: deterministic) and sums their contributions in float32 in ascending row-major order of
the forward output position (od, oh, ow), starting from +0, each addition rounded once:
- AVERAGE: window o contributes dY[o] / n(o), n(o) the forward divisor (IncludePadding: the whole
  window, prod(WindowSize); else the window's elements inside the input), the quotient correctly
  rounded. Bits equal the float32 reference of that order; against float64 the error is at most
  (m + 1) u sum |dY[o] / n(o)| for m covering windows (u = 2^-24), FLOAT16 adding its one rounding.
- MAX: window o contributes dY[o] to the element that is its maximum (m additions of exact values:
  the same bound; a single window's value is copied exactly). The maximum is MAX_POOLING2's
  (ops/pooling.py, its OutputIndicesTensor): the first largest element in window (row-major) order,
  which is the page's tie rule ("the element with the lowest logical element index is chosen"),
  padding never winning. The page says nothing of NaN: a NaN counts as the largest (the first NaN
  wins), as MAX_POOLING2 does. Values are compared on their bits (-0 == +0), so no device's denormal
  mode changes the choice. A window wholly in the padding (no element) contributes nothing (MAX_POOLING2
  reports index 0 for it, a placeholder, not an element that won).
FLOAT16 is decoded exactly, summed in float32 and rounded once. An element no window covers gets +0.

The pages' constraints: AVERAGE "InputGradientTensor and OutputGradientTensor must have the same
DataType and DimensionCount"; MAX: InputTensor and OutputGradientTensor the same Sizes, all three the
same DataType, 4 dimensions only (DimensionCount 2). Both pages call InputGradientTensor's sizes
"typically" the forward output's; kompute_dml requires exactly that (N, C and the forward formula,
ops/spatial.output_sizes, the window dilated for MAX), as the forward operators do, since a gradient
of other sizes has no windows to come from. Arrays: DimensionCount values each (empty strides /
paddings / dilations mean 1 / 0 / 1, as ops/pooling.py's descriptors), strides, window sizes and
dilations >= 1. Validation, in order: the table (InvalidArgumentError / UnsupportedError naming the
field), the pages' constraints and the arrays (InvalidArgumentError naming the field), a
non-overlapping output, 32-bit element addressing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..core.dtypes import DataType
from ..core.errors import invalid
from ..core.layout import check_no_overlap
from ..core.registry import FL, FLOATS, OperatorSupport, row
from ..core.tensor_desc import TensorDesc
from ..runtime import DispatchPlan, grid_for
from . import contract
from .base import CompiledOperator, validate_tensors
from .elementwise_plan import check_addressable
from .spatial import output_sizes, spatial_array, strides5, three
from .spec import OperatorSpec

if TYPE_CHECKING:
    from ..device.device import Device

AVERAGE_POOLING_GRAD = OperatorSupport("AVERAGE_POOLING_GRAD", 130, (
    row(FL.FL_3_0, ("input_gradient_tensor", "input", (4, 5), FLOATS),
        ("output_gradient_tensor", "output", (4, 5), FLOATS)),))
MAX_POOLING_GRAD = OperatorSupport("MAX_POOLING_GRAD", 131, (
    row(FL.FL_3_0, ("input_tensor", "input", (4, 4), FLOATS), ("input_gradient_tensor", "input", (4, 4), FLOATS),
        ("output_gradient_tensor", "output", (4, 4), FLOATS)),))


@dataclass(frozen=True)
class AveragePoolingGradDesc:
    """DML_AVERAGE_POOLING_GRAD_OPERATOR_DESC { InputGradientTensor, OutputGradientTensor, DimensionCount,
    Strides, WindowSize, StartPadding, EndPadding, IncludePadding }; DimensionCount is the arrays' length
    (the tensors' dimension count - 2)."""

    input_gradient_tensor: TensorDesc
    output_gradient_tensor: TensorDesc
    strides: tuple[int, ...]
    window_size: tuple[int, ...]
    start_padding: tuple[int, ...]
    end_padding: tuple[int, ...]
    include_padding: bool


@dataclass(frozen=True)
class MaxPoolingGradDesc:
    """DML_MAX_POOLING_GRAD_OPERATOR_DESC { InputTensor, InputGradientTensor, OutputGradientTensor,
    DimensionCount, Strides, WindowSize, StartPadding, EndPadding, Dilations }; DimensionCount is 2."""

    input_tensor: TensorDesc
    input_gradient_tensor: TensorDesc
    output_gradient_tensor: TensorDesc
    strides: tuple[int, ...]
    window_size: tuple[int, ...]
    start_padding: tuple[int, ...]
    end_padding: tuple[int, ...]
    dilations: tuple[int, ...]


def _compile(device: Device, desc: Any, support: OperatorSupport, is_max: bool) -> CompiledOperator:
    validate_tensors(support, device.feature_level, desc, support.fields, support.outputs)
    x = desc.input_tensor if is_max else None
    g, y = desc.input_gradient_tensor, desc.output_gradient_tensor
    for name, t in (("input_gradient_tensor", g), ("input_tensor", x)):
        if t is not None and t.data_type != y.data_type:
            raise invalid(f"{name}.data_type", f"must equal output_gradient_tensor's ({y.data_type.name}), "
                                               f"got {t.data_type.name}")
    if g.dimension_count != y.dimension_count:
        raise invalid("input_gradient_tensor.sizes", f"dimension count must equal output_gradient_tensor's "
                                                     f"({y.dimension_count}), got {g.dimension_count}")
    if x is not None and x.sizes != y.sizes:
        raise invalid("output_gradient_tensor.sizes", f"must equal input_tensor's {x.sizes}, got {y.sizes}")
    n = y.dimension_count - 2
    window = spatial_array(desc, "window_size", n, -1, 1)
    strides = spatial_array(desc, "strides", n, 1, 1)
    start = spatial_array(desc, "start_padding", n, 0, 0)
    end = spatial_array(desc, "end_padding", n, 0, 0)
    dil = spatial_array(desc, "dilations", n, 1, 1) if is_max else (1,) * n
    spatial = output_sizes(y.sizes[2:], window, strides, dil, start, end)
    want = (*y.sizes[:2], *spatial)
    if any(s < 1 for s in spatial) or g.sizes != want:
        raise invalid("input_gradient_tensor.sizes", f"must be the forward output's {want} (the pooling pages' formula "
                                                     f"from output_gradient_tensor's {y.sizes}), got {g.sizes}")
    check_no_overlap(y.sizes, y.effective_strides, "output_gradient_tensor")
    tensors = tuple(t for t in (x, g, y) if t is not None)
    check_addressable(support.fields, tensors)
    in3 = three(y.sizes[2:], 1)
    total = y.element_count
    words = np.array([y.sizes[1], *in3, *three(spatial, 1), *three(window, 1), *three(strides, 1), *three(dil, 1),
                      *three(start, 0), *strides5(x), *strides5(g), *strides5(y),
                      1 if getattr(desc, "include_padding", False) else 0, total, math.prod(in3), in3[1] * in3[2]],
                     dtype=np.uint32)
    fam = contract.grad.GRAD_POOL
    unit = y.data_type.size
    k = len(support.fields)  # the constant's binding-list index
    xi, gi, yi = (0, 1, 2) if is_max else (None, 0, 1)
    slots = {"g_off": (gi, unit), "y_off": (yi, unit), **({"x_off": (xi, unit)} if xi is not None else {})}
    plan = DispatchPlan(variant=fam.name(fn="max" if is_max else "avg", t="f16" if y.data_type == DataType.FLOAT16 else "f32"),
                        bindings=(xi, gi, yi, k), push=fam.pack(x_off=0, g_off=0, y_off=0), writes=(yi,),
                        groups=grid_for(total, 256, device.limits["max_compute_work_group_count"][0]),
                        offset_slots=fam.slots(**slots))
    return CompiledOperator(device, desc, support, support.inputs, support.outputs, [plan], constants=[device.tensor(words)])


def compile_average_pooling_grad(device: Device, desc: AveragePoolingGradDesc) -> CompiledOperator:
    return _compile(device, desc, AVERAGE_POOLING_GRAD, False)


def compile_max_pooling_grad(device: Device, desc: MaxPoolingGradDesc) -> CompiledOperator:
    return _compile(device, desc, MAX_POOLING_GRAD, True)


_Y = TensorDesc(DataType.FLOAT32, (1, 2, 5, 5))
_G = TensorDesc(DataType.FLOAT32, (1, 2, 2, 2))
SPECS = (
    OperatorSpec(AveragePoolingGradDesc, AVERAGE_POOLING_GRAD, compile_average_pooling_grad, (contract.grad.GRAD_POOL,),
                 example=lambda: AveragePoolingGradDesc(_G, _Y, (2, 2), (3, 3), (0, 0), (0, 0), True)),
    OperatorSpec(MaxPoolingGradDesc, MAX_POOLING_GRAD, compile_max_pooling_grad, (contract.grad.GRAD_POOL,),
                 example=lambda: MaxPoolingGradDesc(_Y, _G, _Y, (2, 2), (3, 3), (0, 0), (0, 0), (1, 1))),
)
