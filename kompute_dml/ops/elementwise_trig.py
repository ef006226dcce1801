"""DirectML's ELEMENT_WISE_TAN, _ASIN, _ACOS, _ATAN, _SINH, _COSH, _ASINH, _ACOSH and _ATANH as rows of
ops/elementwise_unary.py's table (ScaleBias, FLOAT32 / FLOAT16, float_unary.comp's FN_<NAME>
variants, ONNX Tan, Asin, Acos, Atan, Sinh, Cosh, Asinh, Acosh, Atanh through the float_unary
kind), and ELEMENT_WISE_ATAN_YX (atan2(A, B): A the y, B the x) on the element-wise plans with
shaders/elementwise.comp (contract.EW_ATAN2).

The functions (shaders/inv_trig_math.glsl, hyp_math.glsl) are integer code and unfused float32
+, -, * only, with divisions and square roots correctly rounded in integer code, so a result is
the same on every device; TAN takes SIN / COS's exact argument reduction (trig_math.glsl) and
divides sin by cos as unrounded pairs. Special values as C99 / numpy: NaN in gives NaN out (the
input quieted), tan(+-inf) = NaN, asin / acos / atanh of |x| > 1 NaN, atanh(+-1) = +-inf, acosh
below 1 NaN and acosh(1) = +0, asin(+-1) = +-pi/2, acos(-1) = pi, acos(1) = +0, atan(+-inf) =
+-pi/2, sinh / cosh overflow to infinity from 89.42, the odd functions keep -0 and subnormal
inputs (below 2^-12 they return x, which is the correctly rounded result); ATAN_YX C99's atan2
(+-0 / +-inf combinations, atan2(+-0, -0) = +-pi). Error bounds, measured against float64 by
tools/measure_unary.py, in docs/elementwise_trig.md. FLOAT16 is decoded exactly, computed in
float32 and rounded once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..core.dtypes import DataType
from ..core.registry import FL, FLOATS
from ..core.tensor_desc import TensorDesc
from ..device.device import Device
from ..device.memory import Tensor
from ..functional.elementwise import _binary as _run_binary
from . import contract
from .base import CompiledOperator
from .elementwise import _binary, _compile, _validate, type_code
from .elementwise_unary import L10, L20, UnaryOp, _spec
from .spec import OperatorSpec

# their families in shaders/float_unary.comp (FN_<NAME>: inv_trig_math.glsl, hyp_math.glsl); ops/contract reads this line
FLOAT_UNARY = ("tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh")

OPS = (
    UnaryOp("ELEMENT_WISE_TAN", 31, "Tan", "tan", "tan", L10, True, "tan(x)", False),
    UnaryOp("ELEMENT_WISE_ASIN", 5, "Asin", "asin", "asin", L10, True, "asin(x)", False),
    UnaryOp("ELEMENT_WISE_ACOS", 3, "Acos", "acos", "acos", L10, True, "acos(x)", False),
    UnaryOp("ELEMENT_WISE_ATAN", 6, "Atan", "atan", "atan", L10, True, "atan(x)", False),
    UnaryOp("ELEMENT_WISE_SINH", 82, "Sinh", "sinh", "sinh", L20, True, "sinh(x)", False),
    UnaryOp("ELEMENT_WISE_COSH", 83, "Cosh", "cosh", "cosh", L20, True, "cosh(x)", False),
    UnaryOp("ELEMENT_WISE_ASINH", 85, "Asinh", "asinh", "asinh", L20, True, "asinh(x)", False),
    UnaryOp("ELEMENT_WISE_ACOSH", 86, "Acosh", "acosh", "acosh", L20, True, "acosh(x)", False),
    UnaryOp("ELEMENT_WISE_ATANH", 87, "Atanh", "atanh", "atanh", L20, True, "atanh(x)", False),
)

# ---- ELEMENT_WISE_ATAN_YX (3_1: 1 to 8 dimensions, FLOAT32 / FLOAT16)
ELEMENT_WISE_ATAN_YX = _binary("ELEMENT_WISE_ATAN_YX", 141, ((FL.FL_3_1, (1, 8), FLOATS),))


@dataclass(frozen=True)
class ElementWiseAtanYxDesc:
    """DML_ELEMENT_WISE_ATAN_YX_OPERATOR_DESC { ATensor, BTensor, OutputTensor }: Output =
    atan2(A, B), A the y and B the x (C99's special values; error bound: docs/elementwise_trig.md).
    The same DataType, DimensionCount and Sizes for all three. In place allowed."""

    a_tensor: TensorDesc
    b_tensor: TensorDesc
    output_tensor: TensorDesc


def compile_atan_yx(device: Device, desc: ElementWiseAtanYxDesc) -> CompiledOperator:
    support = ELEMENT_WISE_ATAN_YX
    _validate(device, desc, support, ("a_tensor", "b_tensor", "output_tensor"))
    family = contract.EW_ATAN2
    return _compile(device, desc, support, family, family.name(t=type_code(desc.a_tensor.data_type, True)), in_place=True)


def atan2(y: Any, x: Any, *, out: Tensor | None = None, device: Device | None = None) -> Tensor:
    """atan2(y, x) element by element, numpy-broadcast (DML_ELEMENT_WISE_ATAN_YX; FLOAT32 / FLOAT16)."""
    return _run_binary(ElementWiseAtanYxDesc, y, x, out, device)


_HOME: dict[str, Any] = globals()
assert {op.fn for op in OPS} == set(FLOAT_UNARY), "FLOAT_UNARY must name the table's functions"
_F4 = TensorDesc(DataType.FLOAT32, (1, 2, 3, 4))
SPECS = (*(_spec(op, _HOME) for op in OPS),
         OperatorSpec(ElementWiseAtanYxDesc, ELEMENT_WISE_ATAN_YX, compile_atan_yx, (contract.EW_ATAN2,), helpers=("atan2",),
                      example=lambda: ElementWiseAtanYxDesc(_F4, _F4, _F4)))
