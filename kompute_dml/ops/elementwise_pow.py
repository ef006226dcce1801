"""DirectML's ELEMENT_WISE_POW (an exponent tensor) and ELEMENT_WISE_CONSTANT_POW (a FLOAT Exponent,
a row of ops/elementwise_unary.py's table: float_unary.comp's FN_CONSTANT_POW), both with the
pages' optional ScaleBias on the input; POW on the element-wise plans with shaders/elementwise.comp
(contract.EW_POW: a block of 5 dimensions plus `prm`, the ScaleBias words and the exponent's
element type, read at run time so an exponent of another type than the input takes no variant of
its own).

Floats (shaders/pow_math.glsl; FLOAT16 decoded exactly, computed in float32, rounded once):
pow(x, y) = 2^(y log2 |x|) with log2 as a pair of float32s and the product as a pair, so the
result is within a little more than half an ulp (docs/elementwise_pow.md); integral exponents
with |y| <= 64 by squaring on pairs with one rounding, so every result a float32 holds is
exact (2^10, 3^5, 0.5^-3, 10^7). C99's special values: y = +-0 or x = 1 gives 1 (NaN
included); a NaN gives NaN; y = +-inf gives 1 for |x| = 1, else +0 or +inf by |x| against 1;
x = +-0 / +-inf give +-0 / +-inf by y's sign (negative only for an odd y); a negative x with a
non-integral y gives NaN (the pages' "Negative bases are supported for exponents with integral
values ..., otherwise this operator returns NaN"). An integer exponent tensor with a float input
(3_0 on) is taken as its exact integer value and parity.

Integers (3_0 on, 8 to 32 bits; the exponent an integer type too): the exact power where it fits
the type ("guarantees exact results"); where it does not, and for 0 to a negative power, the
type's top-bit pattern (its minimum for signed types: what onnxruntime's int32 Pow returns, a
double converted by x86); a negative exponent gives trunc(x^y): +-1 for x = +-1, else 0.
kompute_dml refuses an integer input with a float exponent or a ScaleBias (UnsupportedError).

ONNX Pow (onnx_backend/handlers_math.py): float32 / float16 bases with any exponent type the
node may carry (an int64 / uint64 exponent converted on the device to float32, exact below 2^24;
a constant one on the host), int32 bases with int32 exponents; a float32 cube by a constant 3
stays onnxruntime's (x * x) * x on ELEMENT_WISE_MULTIPLY; int64 bases and integer bases with
float exponents stay on the CPU.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.dtypes import DataType
from ..core.errors import UnsupportedError, invalid
from ..core.layout import check_no_overlap
from ..core.registry import FL, FLOATS, INTS_8_32, OperatorSupport, row
from ..core.tensor_desc import TensorDesc
from ..device.device import Device
from ..device.memory import Tensor
from ..functional.elementwise import _operands, _run
from . import contract
from .base import CompiledOperator, validate_tensors
from .elementwise import CompiledElementWiseInPlace, check_same, type_code
from .elementwise_plan import check_addressable, device_limits, plan_elementwise
from .elementwise_unary import L10, ScaleBias, UnaryOp, _param_words, _spec
from .onnx_types import NodeTypes
from .spec import OnnxOp, OperatorSpec

# CONSTANT_POW's family in shaders/float_unary.comp (FN_CONSTANT_POW: pow_math.glsl); ops/contract reads this line
FLOAT_UNARY = ("constant_pow",)

CONSTANT_POW = UnaryOp("ELEMENT_WISE_CONSTANT_POW", 26, "", "constant_pow", "constant_pow", L10, True,
                       "pow(x, exponent)", False, params=(("exponent", 1.0),))

_SCALE_BIAS_ONLY = dataclasses.replace(CONSTANT_POW, params=())
_POW_TYPES = FLOATS | INTS_8_32
ELEMENT_WISE_POW = OperatorSupport("ELEMENT_WISE_POW", 25, tuple(
    row(level, ("input_tensor", "input", dims, types), ("exponent_tensor", "input", dims, types),
        ("output_tensor", "output", dims, types))
    for level, dims, types in ((FL.FL_1_0, (4, 4), FLOATS), (FL.FL_3_0, (1, 8), _POW_TYPES))))


@dataclass(frozen=True)
class ElementWisePowDesc:
    """DML_ELEMENT_WISE_POW_OPERATOR_DESC { InputTensor, ExponentTensor, OutputTensor, ScaleBias }:
    Output = pow(Input * scale + bias, Exponent) element by element (error bound and special
    values: docs/elementwise_pow.md). Input and output of one DataType; all three of one
    DimensionCount and Sizes; the exponent's DataType the input's before 3_0, any of the table's
    from 3_0 (an integer input takes integer exponents only). In place allowed."""

    input_tensor: TensorDesc
    exponent_tensor: TensorDesc
    output_tensor: TensorDesc
    scale_bias: ScaleBias | None = None


_KIND = {DataType.FLOAT32: 2, DataType.FLOAT16: 2}


def _type_word(dt: DataType) -> int:
    """elementwise.comp's prm[3]: the exponent's bits | kind << 8 (0 unsigned, 1 signed, 2 float)."""
    kind = _KIND.get(dt, 1 if dt.is_signed else 0)
    return 8 * dt.size | kind << 8


def compile_pow(device: Device, desc: ElementWisePowDesc) -> CompiledOperator:
    support = ELEMENT_WISE_POW
    validate_tensors(support, device.feature_level, desc, support.fields, support.outputs)
    check_same(desc, "input_tensor", ("exponent_tensor", "output_tensor"), data_type=False)
    check_same(desc, "input_tensor", ("output_tensor",), data_type=True)
    x, e, y = desc.input_tensor, desc.exponent_tensor, desc.output_tensor
    if device.feature_level < FL.FL_3_0 and e.data_type != x.data_type:
        raise invalid("exponent_tensor.data_type", f"must equal input_tensor's ({x.data_type.name}) before feature "
                                                   f"level 3_0, got {e.data_type.name}")
    words = _param_words(_SCALE_BIAS_ONLY, desc)[:3]  # the ScaleBias words, checked as the unary operators' are
    if x.data_type not in FLOATS:
        if e.data_type in FLOATS:
            raise UnsupportedError(f"exponent_tensor: kompute_dml's ELEMENT_WISE_POW takes integer exponents with an "
                                   f"integer input ({x.data_type.name}), not {e.data_type.name}")
        if desc.scale_bias is not None:
            raise UnsupportedError(f"scale_bias: kompute_dml's ELEMENT_WISE_POW takes a ScaleBias with FLOAT32 / "
                                   f"FLOAT16 inputs only, not {x.data_type.name}")
    check_no_overlap(y.sizes, y.effective_strides, "output_tensor")
    check_addressable(support.fields, (x, e, y))
    family = contract.EW_POW
    plans = plan_elementwise(family, family.name(t=type_code(x.data_type, True)), (x, e, y),
                             **device_limits(device), prm=[*words, _type_word(e.data_type)])
    return CompiledElementWiseInPlace(device, desc, support, support.inputs, support.outputs, list(plans))


def pow(x: Any, y: Any, *, scale_bias: Any = None, out: Tensor | None = None,
        device: Device | None = None) -> Tensor:
    """x ** y element by element, numpy-broadcast (DML_ELEMENT_WISE_POW): x's type out; y a
    Tensor or array of its own type, or Python data taken in x's type."""
    dev, (tx,) = _operands((x,), ("x",), device)
    if not isinstance(y, (Tensor, np.ndarray)):
        y = np.asarray(y, tx.desc.data_type.numpy_dtype)
    ty = _operands((y,), ("y",), dev)[1][0]
    return _run(lambda a, b, o: ElementWisePowDesc(a, b, o, scale_bias), [tx, ty], ("x", "y"),
                tx.desc.data_type, out, dev)


_ONNX_FLOAT = frozenset(np.dtype(t) for t in (np.float32, np.float16))
_ONNX_EXP = _ONNX_FLOAT | frozenset(np.dtype(t) for t in (np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32,
                                                          np.int64, np.uint64, np.float64))


def pow_rule(t: NodeTypes) -> str:
    """ONNX Pow on the device: a float32 / float16 base with an exponent of any integer type or
    float32 / float16 (float64 only as a constant), or int32 ** int32; else the CPU."""
    base = t.elem(0) if t.inputs else None
    exp = t.elem(1) if t.inputs > 1 else None
    if base is None or exp is None:
        return ""
    if base in _ONNX_FLOAT:
        if exp == np.float64 and t.constant(1) is None:
            return "a float64 exponent that is not a constant"
        return "" if exp in _ONNX_EXP else f"exponent type {exp}"
    if base == np.int32 and exp == np.int32:
        return ""
    return f"base {base} with exponent {exp} (ELEMENT_WISE_POW takes float bases, or int32 ** int32 here)"


_HOME: dict[str, Any] = globals()
_F4 = TensorDesc(DataType.FLOAT32, (1, 2, 3, 4))
SPECS = (OperatorSpec(ElementWisePowDesc, ELEMENT_WISE_POW, compile_pow, (contract.EW_POW,), helpers=("pow",),
                      onnx=(OnnxOp("Pow", "", "pow", check=pow_rule),),  # onnx_backend/handlers_math.py
                      example=lambda: ElementWisePowDesc(_F4, _F4, _F4, ScaleBias(0.5, 0.25))),
         _spec(CONSTANT_POW, _HOME))
