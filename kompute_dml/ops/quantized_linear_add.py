"""DirectML's ELEMENT_WISE_QUANTIZED_LINEAR_ADD (DML_ELEMENT_WISE_QUANTIZED_LINEAR_ADD_OPERATOR_DESC,
feature level 4_0): A and B dequantized, added and requantized:

    AValue = (A - AZeroPoint) * AScale            BValue = (B - BZeroPoint) * BScale
    Output = clamp(round((AValue + BValue) / OutputScale) + OutputZeroPoint, Min, Max)

kompute_dml evaluates the page's steps in float32, each rounded once, as ELEMENT_WISE_DEQUANTIZE_LINEAR,
ELEMENT_WISE_ADD and ELEMENT_WISE_QUANTIZE_LINEAR do (and onnxruntime's scalar QLinearAdd kernel,
onnx_backend/handlers_qlinear.py): AValue and BValue the correctly rounded float32 products
(subnormals kept), their float32 sum, its correctly rounded quotient by OutputScale, rounded half to
even once (the requantized result's one rounding: no intermediate is quantized), the zero point added,
saturated to the output type; a NaN quotient (OutputScale 0 with a zero sum: the page calls scales of 0
undefined) gives Min. The real-valued expression is not rounded once: the products, the sum and the
quotient are float32, so an output whose exact value lies within a few float32 ulps of a half-way point
may land one step from the exactly rounded one (tests/test_quantized_linear_add.py checks the float32
steps bit for bit and the exact rational value within one step). The sum is the device's float32 addition
(Vulkan: correctly rounded; a device that flushes subnormals flushes a subnormal sum, which only a
subnormal OutputScale could tell apart).

The dispatches are existing plans on the operator's scratch (two FLOAT32 tensors of the output's
sizes): ELEMENT_WISE_DEQUANTIZE_LINEAR of A, of B, ELEMENT_WISE_ADD of the two (into the first), then
ELEMENT_WISE_QUANTIZE_LINEAR into the output (an absent output zero point: a constant 0 of its type).

The page names no rule on A's, B's and Output's sizes: kompute_dml asks for them equal (DirectML's
element-wise rule; broadcasting through stride-0 views), and every scale and zero point of one element
("the expected number of elements is 1"), every tensor of one DimensionCount (the page's constraint).
Tensor support as the page's table: every tensor 1 to 8 dimensions; A, B, Output and their zero points
INT8 or UINT8 (each zero point of its tensor's type), the scales FLOAT32. Validation, in order: the table,
the page's constraints (InvalidArgumentError naming the field), the sizes, a non-overlapping output,
32-bit addressing. Docs: docs/quantized_linear_add.md; helper kdml.quantized_linear_add.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..core.dtypes import DataType
from ..core.errors import invalid
from ..core.layout import check_no_overlap
from ..core.registry import F32, FL, D, OperatorSupport, row
from ..core.tensor_desc import TensorDesc
from ..device.memory import Tensor
from ..functional import as_tensor, device_of, run_into
from ..runtime import DispatchPlan
from . import contract
from .base import CompiledOperator, validate_tensors
from .elementwise_plan import check_addressable, device_limits, plan_elementwise
from .plan_chain import rebind
from .spec import OperatorSpec

if TYPE_CHECKING:
    from ..device.device import Device

_Q8 = frozenset({D.INT8, D.UINT8})
ELEMENT_WISE_QUANTIZED_LINEAR_ADD = OperatorSupport("ELEMENT_WISE_QUANTIZED_LINEAR_ADD", 147, (
    row(FL.FL_4_0, ("a_tensor", "input", (1, 8), _Q8), ("a_scale_tensor", "input", (1, 8), F32),
        ("a_zero_point_tensor", "optional input", (1, 8), _Q8), ("b_tensor", "input", (1, 8), _Q8),
        ("b_scale_tensor", "input", (1, 8), F32), ("b_zero_point_tensor", "optional input", (1, 8), _Q8),
        ("output_scale_tensor", "input", (1, 8), F32), ("output_zero_point_tensor", "optional input", (1, 8), _Q8),
        ("output_tensor", "output", (1, 8), _Q8)),))
# the binding list: the nine fields, then the constants (two FLOAT32 scratch tensors, a zero point of 0)
AT, AS, AZ, BT, BS, BZ, YS, YZ, YT, VA, VB, ZERO = range(12)


@dataclass(frozen=True)
class ElementWiseQuantizedLinearAddDesc:
    """DML_ELEMENT_WISE_QUANTIZED_LINEAR_ADD_OPERATOR_DESC { ATensor, AScaleTensor, AZeroPointTensor,
    BTensor, BScaleTensor, BZeroPointTensor, OutputScaleTensor, OutputZeroPointTensor, OutputTensor };
    absent zero points are 0."""

    a_tensor: TensorDesc
    a_scale_tensor: TensorDesc
    a_zero_point_tensor: TensorDesc | None
    b_tensor: TensorDesc
    b_scale_tensor: TensorDesc
    b_zero_point_tensor: TensorDesc | None
    output_scale_tensor: TensorDesc
    output_zero_point_tensor: TensorDesc | None
    output_tensor: TensorDesc


def _validate(device: Device, desc: ElementWiseQuantizedLinearAddDesc) -> None:
    support = ELEMENT_WISE_QUANTIZED_LINEAR_ADD
    validate_tensors(support, device.feature_level, desc, support.fields, support.outputs)
    for zp, t in (("a_zero_point_tensor", "a_tensor"), ("b_zero_point_tensor", "b_tensor"),
                  ("output_zero_point_tensor", "output_tensor")):
        z, dt = getattr(desc, zp), getattr(desc, t).data_type
        if z is not None and z.data_type != dt:
            raise invalid(f"{zp}.data_type", f"must equal {t}'s ({dt.name}), got {z.data_type.name}")
    a, y = desc.a_tensor, desc.output_tensor
    for f in support.fields[1:]:
        t = getattr(desc, f)
        if t is not None and t.dimension_count != a.dimension_count:
            raise invalid(f"{f}.sizes", f"dimension count must equal a_tensor's ({a.dimension_count}), got {t.dimension_count}")
    for f in ("b_tensor", "output_tensor"):
        if getattr(desc, f).sizes != a.sizes:
            raise invalid(f"{f}.sizes", f"must equal a_tensor's {a.sizes}, got {getattr(desc, f).sizes}")
    for f in support.fields:
        t = getattr(desc, f)
        if ("scale" in f or "zero_point" in f) and t is not None and t.element_count != 1:
            raise invalid(f"{f}.sizes", f"must hold one element, got sizes {t.sizes}")
    check_no_overlap(y.sizes, y.effective_strides, "output_tensor")
    present = [(f, getattr(desc, f)) for f in support.fields if getattr(desc, f) is not None]
    check_addressable([f for f, _ in present], [t for _, t in present])


def _type(t: TensorDesc) -> str:
    return "i8" if t.data_type == D.INT8 else "u8"


def compile_quantized_linear_add(device: Device, desc: ElementWiseQuantizedLinearAddDesc) -> CompiledOperator:
    support = ELEMENT_WISE_QUANTIZED_LINEAR_ADD
    _validate(device, desc)
    y = desc.output_tensor
    sizes = y.sizes
    value = TensorDesc(DataType.FLOAT32, sizes)
    limits = device_limits(device)

    def one(t: TensorDesc | None, dt: DataType) -> TensorDesc:
        """A one-element scale or zero point read as every element (stride 0); a stand-in where absent."""
        return TensorDesc(t.data_type if t is not None else dt, sizes, (0,) * len(sizes))

    def chain(fam: contract.ShaderFamily, variant: str, descs: tuple[TensorDesc, ...], where: tuple[int | None, ...]
              ) -> list[DispatchPlan]:
        return [rebind(p, dict(enumerate(where))) for p in plan_elementwise(fam, variant, descs, **limits)]

    plans: list[DispatchPlan] = []
    for x, s, z, v in ((AT, AS, AZ, VA), (BT, BS, BZ, VB)):
        xd, sd, zd = (getattr(desc, support.fields[i]) for i in (x, s, z))
        # (the zero point absent: the nozp variant, the stand-in bound as the dummy buffer)
        variant = contract.DEQUANT.name(i=_type(xd), o="f32", z="zp" if zd is not None else "nozp")
        plans += chain(contract.DEQUANT, variant, (xd, one(sd, DataType.FLOAT32), one(zd, xd.data_type), value),
                       (x, s, z if zd is not None else None, v))
    plans += chain(contract.EW_ADD, contract.EW_ADD.name(t="f32"), (value, value, value), (VA, VB, VA))
    has_yz = desc.output_zero_point_tensor is not None
    plans += chain(contract.QUANT, contract.QUANT.name(i="f32", o=_type(y)),
                   (value, one(desc.output_scale_tensor, DataType.FLOAT32), one(desc.output_zero_point_tensor, y.data_type), y),
                   (VA, YS, YZ if has_yz else ZERO, YT))
    constants = [Tensor.scratch(device, value), Tensor.scratch(device, value),
                 device.tensor(np.zeros(4, y.data_type.numpy_dtype))]
    return CompiledOperator(device, desc, support, support.inputs, support.outputs, plans, constants=constants)


def _param(v: Any, dev: Device, name: str, dt: DataType, rank: int) -> Tensor | None:
    """A scale or zero point (one value) as a tensor of `rank` dimensions, all sizes 1."""
    if v is None:
        return None
    if isinstance(v, Tensor):
        if v.desc.element_count != 1:
            raise invalid(name, f"must hold one value, got sizes {v.desc.sizes}")
        return Tensor.trusted(v.buffer, TensorDesc(v.desc.data_type, (1,) * rank), v.offset)
    host = np.asarray(v, dtype=dt.numpy_dtype)
    if host.size != 1:
        raise invalid(name, f"must hold one value, got {host.size}")
    return as_tensor(host.reshape((1,) * rank), dev, name)


def quantized_linear_add(a: Any, a_scale: Any, b: Any, b_scale: Any, y_scale: Any, a_zero_point: Any = None,
                         b_zero_point: Any = None, y_zero_point: Any = None, *, out: Tensor | None = None,
                         device: Device | None = None) -> Tensor:
    """DML_ELEMENT_WISE_QUANTIZED_LINEAR_ADD of 8-bit a and b of equal shapes (ONNX com.microsoft
    QLinearAdd without broadcasting): clamp(round((dq(a) + dq(b)) / y_scale) + y_zero_point); scales and
    zero points one value each (Python numbers, arrays or Tensors); the output takes y_zero_point's type
    (out's, else a's where it is None)."""
    dev = device_of(a, b, out, device=device)
    ta, tb = as_tensor(a, dev, "a"), as_tensor(b, dev, "b")
    rank = ta.desc.dimension_count
    yt = (y_zero_point.desc.data_type if isinstance(y_zero_point, Tensor) else
          out.desc.data_type if out is not None else ta.desc.data_type)
    f32 = DataType.FLOAT32
    ps = [_param(v, dev, name, dt, rank) for v, name, dt in (
        (a_scale, "a_scale", f32), (a_zero_point, "a_zero_point", ta.desc.data_type), (b_scale, "b_scale", f32),
        (b_zero_point, "b_zero_point", tb.desc.data_type), (y_scale, "y_scale", f32), (y_zero_point, "y_zero_point", yt))]
    shape = ta.desc.sizes
    ts = [ta, ps[0], ps[1], tb, ps[2], ps[3], ps[4], ps[5]]
    descs = [t.desc if t is not None else None for t in ts]
    return run_into(dev, lambda od: ElementWiseQuantizedLinearAddDesc(*descs, od), ts, shape, yt, out)  # type: ignore[arg-type]


def _example() -> ElementWiseQuantizedLinearAddDesc:
    s, u, i = (TensorDesc(dt, (1, 1, 1, 1)) for dt in (DataType.FLOAT32, DataType.UINT8, DataType.INT8))
    return ElementWiseQuantizedLinearAddDesc(TensorDesc(DataType.UINT8, (1, 2, 3, 4)), s, u, TensorDesc(DataType.INT8, (1, 2, 3, 4)),
                                             s, i, s, u, TensorDesc(DataType.UINT8, (1, 2, 3, 4)))


SPECS = (OperatorSpec(ElementWiseQuantizedLinearAddDesc, ELEMENT_WISE_QUANTIZED_LINEAR_ADD, compile_quantized_linear_add,
                      (contract.DEQUANT, contract.EW_ADD, contract.QUANT), helpers=("quantized_linear_add",),
                      example=_example),)
