"""DirectML's ACTIVATION_GELU (DML_ACTIVATION_GELU_OPERATOR_DESC) and ACTIVATION_SOFTMAX1
(DML_ACTIVATION_SOFTMAX1_OPERATOR_DESC), both from feature level 5_1, FLOAT32 and FLOAT16, 1 to 8
dimensions.

GELU runs on the element-wise plans (ops/elementwise_plan.py: merged dimensions, per-tensor
strides, stride-0 broadcast, offsets, host-enumerated dimensions beyond the shader's rank) with
shaders/gelu.comp; SOFTMAX1 on its own plans (`plan_softmax`: a row per 8, 32 or 256
invocations) with shaders/softmax.comp. The arithmetic of both (shaders/gelu_math.glsl) uses
only operations Vulkan rounds correctly, and its error bounds are in docs/gelu.md and
docs/softmax.md. Validation, in order: DML_BUFFER_TENSOR_DESC rules and the feature level's
table (InvalidArgumentError / UnsupportedError naming the field), then the pages' tensor
constraint (the same DataType, DimensionCount and Sizes: InvalidArgumentError naming
output_tensor.data_type / output_tensor.sizes), SOFTMAX1's axes, then a non-overlapping output
and 32-bit element addressing.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import registry as reg
from ..errors import invalid
from ..ints import as_int_tuple, cdiv
from ..layout import check_no_overlap, merge_dims
from ..runtime import DispatchPlan, grid_for
from ..tensor_desc import TensorDesc
from . import contract
from .base import CompiledOperator, validate_tensors
from .elementwise import CompiledElementWise, check_same, type_code
from .elementwise_plan import check_addressable, plan_elementwise
from .spec import OnnxOp, OperatorSpec

if TYPE_CHECKING:
    from ..device import Device


@dataclass(frozen=True)
class ActivationGeluDesc:
    """DML_ACTIVATION_GELU_OPERATOR_DESC { InputTensor, OutputTensor }:
    f(x) = 0.5 * x * (1 + erf(x / sqrt(2))), element by element, computed in float32 (FLOAT16
    rounded once). Error bound: docs/gelu.md."""

    input_tensor: TensorDesc
    output_tensor: TensorDesc


@dataclass(frozen=True)
class ActivationSoftmax1Desc:
    """DML_ACTIVATION_SOFTMAX1_OPERATOR_DESC { InputTensor, OutputTensor, AxisCount, Axes }:
    f(x) = exp(x) / sum(exp(x)) over the elements of the dimensions in `axes` (AxisCount is
    len(axes)), computed as exp(x - max) / sum(exp(x - max)) in float32. Each axis in
    [0, DimensionCount); kompute_dml also refuses an empty or repeated axis list (the page says
    neither). Error bound and the rows of NaN / infinities: docs/softmax.md."""

    input_tensor: TensorDesc
    output_tensor: TensorDesc
    axes: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        axes = self.axes  # a list or an array made hashable; anything else is refused at compile
        if not isinstance(axes, tuple) and isinstance(axes, Iterable) and not isinstance(axes, (str, bytes)):
            with contextlib.suppress(TypeError):
                object.__setattr__(self, "axes", tuple(axes))


def _same(desc: Any) -> None:
    check_same(desc, "input_tensor", ("output_tensor",), data_type=True)


def compile_gelu(device: Device, desc: ActivationGeluDesc) -> CompiledOperator:
    support = reg.ACTIVATION_GELU
    validate_tensors(support, device.feature_level, desc, support.fields, support.outputs)
    _same(desc)
    x, y = desc.input_tensor, desc.output_tensor
    check_no_overlap(y.sizes, y.effective_strides, "output_tensor")
    check_addressable(support.fields, (x, y))
    variant = contract.GELU.name(t=type_code(x.data_type, True))
    plans = plan_elementwise(contract.GELU, variant, (x, y), device.limits["max_compute_work_group_count"][0])
    return CompiledElementWise(device, desc, support, support.inputs, support.outputs, list(plans))


def softmax_axes(axes: object, dimension_count: int) -> tuple[int, ...]:
    """The validated axes (Axes of the page: each in [0, DimensionCount); not empty, no repeats)."""
    values = as_int_tuple(axes, "axes")
    if not values:
        raise invalid("axes", "must name at least one axis (AxisCount >= 1)")
    for i, a in enumerate(values):
        if not 0 <= a < dimension_count:
            raise invalid(f"axes[{i}]", f"must be in [0, {dimension_count - 1}] (input_tensor's DimensionCount "
                                        f"{dimension_count}), got {a}")
    if len(set(values)) != len(values):
        raise invalid("axes", f"must not repeat an axis, got {values}")
    return values


# A row of at most FAST_ELEMENTS (float16: twice as many) in one reduced dimension is read once,
# into registers (contract.SMX_FAST); longer or multi-dimensional rows are read three times.
FAST_LANES, FAST_K = (8, 32), (1, 2, 4, 8, 16, 32)
FAST_ELEMENTS = FAST_LANES[-1] * FAST_K[-1]
GEN_WIDE_ABOVE = 4096  # rows longer than this take 256 invocations (smx_gen g256), else 32


def _merged(sizes: Sequence[int], dims: Sequence[int], xs: Sequence[int],
            ys: Sequence[int]) -> tuple[list[int], list[int], list[int]]:
    """`dims` merged (layout.merge_dims) after ordering them by the output's stride, largest
    first: the order of a row's or of the rows' enumeration is free, and this one merges what
    is contiguous in both tensors whatever the dimension order, innermost last."""
    order = sorted(dims, key=lambda d: -ys[d])
    m_sizes, (m_x, m_y) = merge_dims([sizes[d] for d in order], [xs[d] for d in order], [ys[d] for d in order])
    if m_sizes == [1]:
        return [], [], []
    return m_sizes, m_x, m_y


def plan_softmax(x: TensorDesc, y: TensorDesc, axes: Sequence[int], max_groups: int = 65535) -> list[DispatchPlan]:
    """One dispatch: the rows (coordinates of the dimensions outside `axes`) over the work groups."""
    n = x.dimension_count
    xs, ys = x.effective_strides, y.effective_strides
    red = sorted(set(axes))
    o_sizes, o_x, o_y = _merged(x.sizes, [d for d in range(n) if d not in red], xs, ys)
    r_sizes, r_x, r_y = _merged(x.sizes, red, xs, ys)
    if not r_sizes:
        r_sizes, r_x, r_y = [1], [0], [0]
    nouter = 8 - len(r_sizes)
    pad = nouter - len(o_sizes)
    rows, length = math.prod(o_sizes), math.prod(r_sizes)
    ept = 4 // x.data_type.size
    t = type_code(x.data_type, True)
    if len(r_sizes) == 1 and length <= FAST_ELEMENTS * ept:
        lanes = FAST_LANES[0] if length <= FAST_LANES[0] * 4 * ept else FAST_LANES[1]
        k = next(k for k in FAST_K if k * lanes * ept >= length)
        family, variant = contract.SMX_FAST, contract.SMX_FAST.name(t=t, lanes=lanes, k=k)
    else:
        lanes = 256 if length > GEN_WIDE_ABOVE else 32
        family, variant = contract.SMX_GEN, contract.SMX_GEN.name(t=t, lanes=lanes)
    push = family.pack(x_off=0, y_off=0, rows=rows, len=length, nouter=nouter, size=[1] * pad + o_sizes + r_sizes,
                       x_str=[0] * pad + o_x + r_x, y_str=[0] * pad + o_y + r_y)
    groups = grid_for(cdiv(rows, 256 // lanes) * 256, 256, max_groups)
    return [DispatchPlan(variant=variant, bindings=(0, 1), push=push, groups=groups, writes=(1,),
                         offset_slots=family.slots(x_off=(0, x.data_type.size), y_off=(1, y.data_type.size)))]


def compile_softmax1(device: Device, desc: ActivationSoftmax1Desc) -> CompiledOperator:
    support = reg.ACTIVATION_SOFTMAX1
    validate_tensors(support, device.feature_level, desc, support.fields, support.outputs)
    _same(desc)
    x, y = desc.input_tensor, desc.output_tensor
    axes = softmax_axes(desc.axes, x.dimension_count)
    check_no_overlap(y.sizes, y.effective_strides, "output_tensor")
    check_addressable(support.fields, (x, y))
    plans = plan_softmax(x, y, axes, device.limits["max_compute_work_group_count"][0])
    return CompiledOperator(device, desc, support, support.inputs, support.outputs, list(plans))


# ---- specs (kompute_dml/ops/spec.py) --------------------------------------------------------
SPECS = (
    OperatorSpec(ActivationGeluDesc, reg.ACTIVATION_GELU, compile_gelu, (contract.GELU,), helpers=("gelu",),
                 onnx=(OnnxOp("Gelu", "com.microsoft", "gelu"), OnnxOp("Gelu", "", "gelu"))),
    OperatorSpec(ActivationSoftmax1Desc, reg.ACTIVATION_SOFTMAX1, compile_softmax1,
                 (contract.SMX_FAST, contract.SMX_GEN), helpers=("softmax",), onnx=(OnnxOp("Softmax", "", "softmax"),)),
)
