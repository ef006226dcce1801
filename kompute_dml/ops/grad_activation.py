"""DirectML's element-wise gradients: ACTIVATION_RELU_GRAD (DML_ACTIVATION_RELU_GRAD_OPERATOR_DESC,
3_0), ELEMENT_WISE_CLIP_GRAD (DML_ELEMENT_WISE_CLIP_GRAD_OPERATOR_DESC, 3_1) and
ELEMENT_WISE_CLIP_GRAD1 (DML_ELEMENT_WISE_CLIP_GRAD1_OPERATOR_DESC, 5_0), on the element-wise plans
(ops/elementwise_plan.py: strided views, broadcasting by 0 strides, the host enumerating dimensions
past the shader's 5) with shaders/grad_elementwise.comp (contract.grad.GRAD_RELU / GRAD_CLIP).

RELU_GRAD: OutputGradient = (X > 0 ? dY : 0). CLIP_GRAD / CLIP_GRAD1: 0 where X <= Min or X >= Max,
else dY. The result is dY's bit pattern (NaN payloads and -0 kept) or +0 / integer 0, decided on
X's bits: exact on every device. Comparisons are IEEE-754's: -0 == +0, and a NaN X compares false
with everything, so RELU_GRAD gives 0 there (NaN > 0 is false) and CLIP_GRAD passes dY (neither
"X <= Min" nor "X >= Max" holds): the pages' formulas read literally (they say nothing of NaN).

Where the pages are silent, kompute_dml's choices:
- CLIP_GRAD's Min / Max are FLOATs. With FLOAT16 tensors X is compared exactly with the float32
  bound (not with the bound rounded to float16). With integer tensors the bound is cast as
  ELEMENT_WISE_CLIP's integer rows cast theirs (activation_params.integer_bound: float32, truncated
  toward zero, saturated to the type), so the gradient is 0 exactly where the forward CLIP's output
  sits on a bound; a NaN bound is refused (InvalidArgumentError naming it), as CLIP refuses one.
- CLIP_GRAD1's Min / Max are DML_SCALAR_UNIONs read as MinMaxDataType, which must equal the output's
  type (given as Python numbers, as ELEMENT_WISE_CLIP1's: floats rounded to the type, integers
  integral and in range; 64-bit integers exact); both are required; None for min_max_data_type
  means the output's type.
- Min > Max: every element's gradient is 0 (one of the two comparisons holds), as the formula says.
- The pages allow OutputGradientTensor to alias InputTensor for CLIP_GRAD / CLIP_GRAD1 (exact
  in-place execution; `allows_inplace`); RELU_GRAD's page says nothing, so aliasing is refused.

Tables: RELU_GRAD 1 to 8 dimensions FLOAT32 / FLOAT16 (3_0; the 4_0 table is the same);
CLIP_GRAD 1 to 8 dimensions FLOAT32, FLOAT16 and the 8- to 32-bit integers (3_1); CLIP_GRAD1 1 to 8
dimensions, every type but FLOAT64 (5_0). Validation, in order: the table (InvalidArgumentError /
UnsupportedError naming the field), the three tensors' one DataType, DimensionCount and Sizes
(InvalidArgumentError naming the field), the scalar fields, a non-overlapping output, 32-bit element
addressing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.dtypes import DataType
from ..core.errors import invalid
from ..core.layout import check_no_overlap
from ..core.registry import FL, FLOATS, INTS_8_32, NUMERIC, OperatorSupport, row
from ..core.tensor_desc import TensorDesc
from ..device.device import Device
from ..device.memory import Tensor
from ..functional.elementwise import _operands, _run
from . import contract
from .activation_params import integer_bound
from .base import CompiledOperator, validate_tensors
from .diagonal import value1_bits
from .elementwise import CompiledElementWise, CompiledElementWiseInPlace, check_same, type_code
from .elementwise_plan import check_addressable, device_limits, plan_elementwise
from .spec import OperatorSpec

_FIELDS = ("input_tensor", "input_gradient_tensor", "output_gradient_tensor")


def _table(name: str, op_type: int, level: FL, types: frozenset[DataType]) -> OperatorSupport:
    return OperatorSupport(name, op_type, (row(level, ("input_tensor", "input", (1, 8), types),
                                                ("input_gradient_tensor", "input", (1, 8), types),
                                                ("output_gradient_tensor", "output", (1, 8), types)),))


ACTIVATION_RELU_GRAD = _table("ACTIVATION_RELU_GRAD", 129, FL.FL_3_0, FLOATS)
ELEMENT_WISE_CLIP_GRAD = _table("ELEMENT_WISE_CLIP_GRAD", 142, FL.FL_3_1, FLOATS | INTS_8_32)
ELEMENT_WISE_CLIP_GRAD1 = _table("ELEMENT_WISE_CLIP_GRAD1", 154, FL.FL_5_0, NUMERIC)


@dataclass(frozen=True)
class ActivationReluGradDesc:
    """DML_ACTIVATION_RELU_GRAD_OPERATOR_DESC { InputTensor, InputGradientTensor, OutputGradientTensor }:
    OutputGradient = X > 0 ? dY : 0."""

    input_tensor: TensorDesc
    input_gradient_tensor: TensorDesc
    output_gradient_tensor: TensorDesc


@dataclass(frozen=True)
class ElementWiseClipGradDesc:
    """DML_ELEMENT_WISE_CLIP_GRAD_OPERATOR_DESC { InputTensor, InputGradientTensor, OutputGradientTensor,
    Min, Max }: 0 where X <= Min or X >= Max, else dY; Min / Max FLOATs."""

    input_tensor: TensorDesc
    input_gradient_tensor: TensorDesc
    output_gradient_tensor: TensorDesc
    min: float
    max: float


@dataclass(frozen=True)
class ElementWiseClipGrad1Desc:
    """DML_ELEMENT_WISE_CLIP_GRAD1_OPERATOR_DESC { InputTensor, InputGradientTensor, OutputGradientTensor,
    MinMaxDataType, Min, Max }: CLIP_GRAD with Min / Max read as min_max_data_type (None: the output's
    type, which the page requires)."""

    input_tensor: TensorDesc
    input_gradient_tensor: TensorDesc
    output_gradient_tensor: TensorDesc
    min_max_data_type: DataType | None
    min: Any
    max: Any


def order_key(value: int | float, dt: DataType) -> list[int]:
    """shaders/grad_elementwise.comp's order key of a bound (low word, high word): floats as float32
    bits mapped to an unsigned key (-0 == +0), signed integers with the sign bit flipped, 64-bit
    integers as word pairs."""
    if dt in FLOATS:
        b = int(np.array([value], np.float32).view(np.uint32)[0])
        if b & 0x7FFFFFFF == 0:
            b = 0
        return [(~b & 0xFFFFFFFF) if b >> 31 else (b | 0x80000000), 0]
    v = int(value) & ((1 << 64) - 1)
    lo, hi = v & 0xFFFFFFFF, v >> 32
    if dt.size == 8:
        return [lo, hi ^ 0x80000000 if dt.is_signed else hi]
    return [lo ^ 0x80000000 if dt.is_signed else lo, 0]


def _prelude(device: Device, desc: Any, support: OperatorSupport) -> tuple[TensorDesc, TensorDesc, TensorDesc]:
    validate_tensors(support, device.feature_level, desc, support.fields, support.outputs)
    check_same(desc, "input_tensor", ("input_gradient_tensor", "output_gradient_tensor"), data_type=True)
    return desc.input_tensor, desc.input_gradient_tensor, desc.output_gradient_tensor


def _plans(device: Device, support: OperatorSupport, fam: contract.ShaderFamily, descs: tuple[TensorDesc, ...],
           prm: list[int]) -> list[Any]:
    y = descs[-1]
    check_no_overlap(y.sizes, y.effective_strides, "output_gradient_tensor")
    check_addressable(support.fields, descs)
    return list(plan_elementwise(fam, fam.name(t=type_code(y.data_type, True)), descs, **device_limits(device), prm=prm))


def compile_relu_grad(device: Device, desc: ActivationReluGradDesc) -> CompiledOperator:
    support = ACTIVATION_RELU_GRAD
    descs = _prelude(device, desc, support)
    plans = _plans(device, support, contract.grad.GRAD_RELU, descs, [])
    return CompiledElementWise(device, desc, support, support.inputs, support.outputs, plans)


def _float_bound(value: Any, field: str) -> float:
    """A FLOAT field: a real number, not NaN, rounded to float32."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise invalid(field, f"must be a real number, got {type(value).__name__} {value!r}")
    f = float(np.float32(value))
    if math.isnan(f):
        raise invalid(field, "must be a number, not NaN")
    return f


def compile_clip_grad(device: Device, desc: ElementWiseClipGradDesc) -> CompiledOperator:
    support = ELEMENT_WISE_CLIP_GRAD
    descs = _prelude(device, desc, support)
    dt = descs[-1].data_type
    lo, hi = _float_bound(desc.min, "min"), _float_bound(desc.max, "max")
    bounds: tuple[int | float, int | float] = (lo, hi) if dt in FLOATS else (integer_bound(lo, dt), integer_bound(hi, dt))
    plans = _plans(device, support, contract.grad.GRAD_CLIP, descs, order_key(bounds[0], dt) + order_key(bounds[1], dt))
    return CompiledElementWiseInPlace(device, desc, support, support.inputs, support.outputs, plans)


def _scalar(value: Any, dt: DataType, field: str) -> int | float:
    """A DML_SCALAR_UNION read as dt: a float (exact in dt) or an exact integer; required, not NaN."""
    if value is None:
        raise invalid(field, "is required (a number read as min_max_data_type)")
    bits = value1_bits(value, dt, field)
    if dt in FLOATS:
        f = float(np.array([bits], f"u{dt.size}").view(dt.numpy_dtype)[0])
        if math.isnan(f):
            raise invalid(field, "must be a number, not NaN")
        return f
    return bits - (1 << (8 * dt.size)) if dt.is_signed and bits >> (8 * dt.size - 1) else bits


def compile_clip_grad1(device: Device, desc: ElementWiseClipGrad1Desc) -> CompiledOperator:
    support = ELEMENT_WISE_CLIP_GRAD1
    descs = _prelude(device, desc, support)
    dt = descs[-1].data_type
    if desc.min_max_data_type is not None:
        mdt = DataType.coerce(desc.min_max_data_type, "min_max_data_type")
        if mdt != dt:
            raise invalid("min_max_data_type", f"must equal output_gradient_tensor's data type ({dt.name}), got {mdt.name}")
    lo, hi = _scalar(desc.min, dt, "min"), _scalar(desc.max, dt, "max")
    plans = _plans(device, support, contract.grad.GRAD_CLIP, descs, order_key(lo, dt) + order_key(hi, dt))
    return CompiledElementWiseInPlace(device, desc, support, support.inputs, support.outputs, plans)


# ---- functional helpers (exported as kdml.<name>): numpy-broadcast operands of one type, a new
# packed Tensor of the broadcast shape, or `out`
_NAMES = ("x", "dy")


def relu_grad(x: Any, dy: Any, *, out: Tensor | None = None, device: Device | None = None) -> Tensor:
    """dy where x > 0, else 0 (DML_ACTIVATION_RELU_GRAD; FLOAT32 / FLOAT16; exact)."""
    dev, ts = _operands((x, dy), _NAMES, device)
    return _run(ActivationReluGradDesc, ts, _NAMES, None, out, dev)


def clip_grad(x: Any, dy: Any, min: float, max: float, *, out: Tensor | None = None,
              device: Device | None = None) -> Tensor:
    """0 where x <= min or x >= max, else dy (DML_ELEMENT_WISE_CLIP_GRAD: FLOAT min / max; floats and
    the 8- to 32-bit integers; exact)."""
    dev, ts = _operands((x, dy), _NAMES, device)
    return _run(lambda a, b, o: ElementWiseClipGradDesc(a, b, o, min, max), ts, _NAMES, None, out, dev)


def clip_grad1(x: Any, dy: Any, min: Any, max: Any, *, out: Tensor | None = None,
               device: Device | None = None) -> Tensor:
    """0 where x <= min or x >= max, else dy, min / max read as x's type (DML_ELEMENT_WISE_CLIP_GRAD1:
    every type but FLOAT64; exact)."""
    dev, ts = _operands((x, dy), _NAMES, device)
    return _run(lambda a, b, o: ElementWiseClipGrad1Desc(a, b, o, None, min, max), ts, _NAMES, None, out, dev)


_F4 = TensorDesc(DataType.FLOAT32, (1, 2, 3, 4))
SPECS = (
    OperatorSpec(ActivationReluGradDesc, ACTIVATION_RELU_GRAD, compile_relu_grad, (contract.grad.GRAD_RELU,),
                 helpers=("relu_grad",), example=lambda: ActivationReluGradDesc(_F4, _F4, _F4)),
    OperatorSpec(ElementWiseClipGradDesc, ELEMENT_WISE_CLIP_GRAD, compile_clip_grad, (contract.grad.GRAD_CLIP,),
                 helpers=("clip_grad",), example=lambda: ElementWiseClipGradDesc(_F4, _F4, _F4, -1.0, 2.0)),
    OperatorSpec(ElementWiseClipGrad1Desc, ELEMENT_WISE_CLIP_GRAD1, compile_clip_grad1, (contract.grad.GRAD_CLIP,),
                 helpers=("clip_grad1",),
                 example=lambda: ElementWiseClipGrad1Desc(_F4, _F4, _F4, DataType.FLOAT32, -1.0, 2.0)),
)
