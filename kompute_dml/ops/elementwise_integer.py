"""DirectML's ELEMENT_WISE_MODULUS_TRUNCATE, _MODULUS_FLOOR, _BIT_SHIFT_LEFT, _BIT_SHIFT_RIGHT, _BIT_COUNT
and _DIFFERENCE_SQUARE on the element-wise plans (ops/elementwise_plan.py: the output's sizes,
inputs broadcast by 0 strides, offsets) with shaders/elementwise.comp (contract.EW_MOD, EW_SHIFT,
EW_POPCNT, EW_DSQ). Exact, every type of the pages' tables:

- MODULUS_TRUNCATE: C's remainder (the quotient truncated: the dividend's sign); floats fmod,
  exact in integer code (x's sign kept, -0 included; NaN for x = +-inf or y = +-0; x for
  y = +-inf). MODULUS_FLOOR: "the same results as the Python modulus" (the divisor's sign):
  r = fmod(x, y), plus y where r and y differ in sign (that sum correctly rounded, no subnormal
  operand or result on the device), a zero remainder taking y's sign (numpy's np.mod; -3 mod
  +inf = +inf, 3 mod -inf = -inf). Integers: a - b q with ELEMENT_WISE_DIVIDE's truncated q, so
  x mod 0 = x (DIVIDE's x / 0 has every bit set; the pages say nothing of 0), INT_MIN mod -1 = 0.
  FLOAT32 / FLOAT16 and 8- to 32-bit integers from 2_1 (4 dimensions), 1 to 8 from 3_0, INT64 /
  UINT64 from 6_0; FLOAT16 through float32 (fmod fits float16 exactly; the floor form's sum
  rounded once more).
- BIT_SHIFT_LEFT / _RIGHT: logical shifts of the bit patterns by B (read as unsigned); a shift
  by the element width or more gives 0 (the pages say nothing: onnxruntime's and numpy's
  result). UINT8 / 16 / 32 from 2_1, UINT64 from 4_1.
- BIT_COUNT: the number of set bits of each element's encoding, as UINT8 or UINT32; UINT8 / 16 /
  32 inputs from 3_0, every type from 4_1.
- DIFFERENCE_SQUARE: (a - b) * (a - b): integers wrap (INT32 / UINT32), floats round the
  difference to the type and then the square (FLOAT16: each to float16), the device's float32
  subtract and multiply (ELEMENT_WISE_SUBTRACT's and _MULTIPLY's). 3_1, 1 to 8 dimensions.

ONNX Mod (fmod 0: MODULUS_FLOOR, fmod 1: MODULUS_TRUNCATE; every type but float64) and BitShift
(unsigned types; opset 28's signed ones on the unsigned view, the right shift made arithmetic)
in onnx_backend/handlers_arith.py. docs/elementwise_integer.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.registry import ALL_TYPES, BOOL_OUT, FL, FLOATS, INTS_8_32, INTS_32, INTS_64, D, OperatorSupport, row
from ..core.tensor_desc import TensorDesc
from ..device.device import Device
from ..device.memory import Tensor
from ..functional.elementwise import _binary as _run_binary
from ..functional.elementwise import _operands, _run
from . import contract
from .base import CompiledOperator
from .elementwise import _binary, _compile, _validate, type_code
from .onnx_types import DML_NUMPY, NodeTypes
from .spec import OnnxOp, OperatorSpec

_MOD_TYPES = FLOATS | INTS_8_32
_MOD_ROWS = ((FL.FL_2_1, (4, 4), _MOD_TYPES), (FL.FL_3_0, (1, 8), _MOD_TYPES), (FL.FL_6_0, (1, 8), _MOD_TYPES | INTS_64))
ELEMENT_WISE_MODULUS_TRUNCATE = _binary("ELEMENT_WISE_MODULUS_TRUNCATE", 101, _MOD_ROWS)
ELEMENT_WISE_MODULUS_FLOOR = _binary("ELEMENT_WISE_MODULUS_FLOOR", 102, _MOD_ROWS)
_UINTS = frozenset({D.UINT8, D.UINT16, D.UINT32})
_SHIFT_ROWS = ((FL.FL_2_1, (4, 4), _UINTS), (FL.FL_3_0, (1, 8), _UINTS), (FL.FL_4_1, (1, 8), _UINTS | {D.UINT64}))
ELEMENT_WISE_BIT_SHIFT_LEFT = _binary("ELEMENT_WISE_BIT_SHIFT_LEFT", 97, _SHIFT_ROWS)
ELEMENT_WISE_BIT_SHIFT_RIGHT = _binary("ELEMENT_WISE_BIT_SHIFT_RIGHT", 98, _SHIFT_ROWS)
ELEMENT_WISE_BIT_COUNT = OperatorSupport("ELEMENT_WISE_BIT_COUNT", 125, tuple(
    row(level, ("input_tensor", "input", (1, 8), types), ("output_tensor", "output", (1, 8), BOOL_OUT))
    for level, types in ((FL.FL_3_0, _UINTS), (FL.FL_4_1, ALL_TYPES))))
ELEMENT_WISE_DIFFERENCE_SQUARE = _binary("ELEMENT_WISE_DIFFERENCE_SQUARE", 143, ((FL.FL_3_1, (1, 8), FLOATS | INTS_32),))


@dataclass(frozen=True)
class ElementWiseModulusTruncateDesc:
    """DML_ELEMENT_WISE_MODULUS_TRUNCATE_OPERATOR_DESC: Output = A - B * trunc(A / B) (C's %, fmod;
    exact; x mod 0 = x for integers, NaN for floats). One DataType, DimensionCount and Sizes for
    all three. In place allowed."""

    a_tensor: TensorDesc
    b_tensor: TensorDesc
    output_tensor: TensorDesc


@dataclass(frozen=True)
class ElementWiseModulusFloorDesc:
    """DML_ELEMENT_WISE_MODULUS_FLOOR_OPERATOR_DESC: Output = A - B * floor(A / B), the Python
    modulus (the divisor's sign; floats as numpy's np.mod). One DataType, DimensionCount and Sizes
    for all three. In place allowed."""

    a_tensor: TensorDesc
    b_tensor: TensorDesc
    output_tensor: TensorDesc


@dataclass(frozen=True)
class ElementWiseBitShiftLeftDesc:
    """DML_ELEMENT_WISE_BIT_SHIFT_LEFT_OPERATOR_DESC: Output = A << B (logical; 0 for B >= the
    element width). One DataType, DimensionCount and Sizes for all three. In place allowed."""

    a_tensor: TensorDesc
    b_tensor: TensorDesc
    output_tensor: TensorDesc


@dataclass(frozen=True)
class ElementWiseBitShiftRightDesc:
    """DML_ELEMENT_WISE_BIT_SHIFT_RIGHT_OPERATOR_DESC: Output = A >> B (logical; 0 for B >= the
    element width). One DataType, DimensionCount and Sizes for all three. In place allowed."""

    a_tensor: TensorDesc
    b_tensor: TensorDesc
    output_tensor: TensorDesc


@dataclass(frozen=True)
class ElementWiseBitCountDesc:
    """DML_ELEMENT_WISE_BIT_COUNT_OPERATOR_DESC: Output = the number of 1 bits of each Input
    element's encoding, UINT8 or UINT32; one DimensionCount and Sizes for both."""

    input_tensor: TensorDesc
    output_tensor: TensorDesc


@dataclass(frozen=True)
class ElementWiseDifferenceSquareDesc:
    """DML_ELEMENT_WISE_DIFFERENCE_SQUARE_OPERATOR_DESC: Output = (A - B) * (A - B) (integers wrap;
    floats rounded after each step). One DataType, DimensionCount and Sizes for all three. In place
    allowed."""

    a_tensor: TensorDesc
    b_tensor: TensorDesc
    output_tensor: TensorDesc


def _compiler(support: OperatorSupport, family: contract.ShaderFamily, op: str, signed: bool) -> Any:
    def compile_integer(device: Device, desc: Any) -> CompiledOperator:
        _validate(device, desc, support, ("a_tensor", "b_tensor", "output_tensor"))
        t = type_code(desc.a_tensor.data_type, signed)
        variant = family.name(op=op, t=t) if "op" in dict(family.params) else family.name(t=t)
        return _compile(device, desc, support, family, variant, in_place=True)
    compile_integer.__name__ = f"compile_{support.name.lower()}"
    return compile_integer


def compile_bit_count(device: Device, desc: ElementWiseBitCountDesc) -> CompiledOperator:
    support = ELEMENT_WISE_BIT_COUNT
    _validate(device, desc, support, ())
    variant = contract.EW_POPCNT.name(t=f"b{8 * desc.input_tensor.data_type.size}", ob=8 * desc.output_tensor.data_type.size)
    return _compile(device, desc, support, contract.EW_POPCNT, variant, in_place=False)


def _helper2(name: str, desc_type: Any, what: str) -> Any:
    def helper(a: Any, b: Any, *, out: Tensor | None = None, device: Device | None = None) -> Tensor:
        return _run_binary(desc_type, a, b, out, device)
    helper.__name__ = helper.__qualname__ = name
    helper.__doc__ = f"{what} element by element (one data type; numpy broadcasting)."
    return helper


mod = _helper2("mod", ElementWiseModulusFloorDesc, "a mod b with the divisor's sign, numpy's np.mod "
                                                   "(DML_ELEMENT_WISE_MODULUS_FLOOR)")
fmod = _helper2("fmod", ElementWiseModulusTruncateDesc, "a mod b with the dividend's sign, numpy's np.fmod "
                                                        "(DML_ELEMENT_WISE_MODULUS_TRUNCATE)")
left_shift = _helper2("left_shift", ElementWiseBitShiftLeftDesc, "a << b, logical, 0 from the element width on "
                                                                 "(DML_ELEMENT_WISE_BIT_SHIFT_LEFT)")
right_shift = _helper2("right_shift", ElementWiseBitShiftRightDesc, "a >> b, logical, 0 from the element width on "
                                                                    "(DML_ELEMENT_WISE_BIT_SHIFT_RIGHT)")
difference_square = _helper2("difference_square", ElementWiseDifferenceSquareDesc,
                             "(a - b) * (a - b) (DML_ELEMENT_WISE_DIFFERENCE_SQUARE)")


def bit_count(x: Any, *, out_type: Any = D.UINT8, out: Tensor | None = None, device: Device | None = None) -> Tensor:
    """The number of 1 bits of each element's encoding, as UINT8 (default) or UINT32 (numpy's
    np.bitwise_count; DML_ELEMENT_WISE_BIT_COUNT)."""
    dev, (t,) = _operands((x,), ("x",), device)
    return _run(ElementWiseBitCountDesc, [t], ("x",), D.coerce(out_type, "out_type"), out, dev)


_MOD_NUMPY = frozenset(np.dtype(t) for t in DML_NUMPY if np.dtype(t) != np.float64)


def mod_rule(t: NodeTypes) -> str:
    """ONNX Mod on the device: both operands of one DirectML type other than float64."""
    types = {t.elem(i) for i in range(min(t.inputs, 2))} - {None}
    if len(types) > 1:
        return f"operand types differ: {sorted(str(d) for d in types)}"
    bad = [d for d in types if d not in _MOD_NUMPY]
    return f"type {bad[0]} is not one ELEMENT_WISE_MODULUS_* takes" if bad else ""


def bitshift_rule(t: NodeTypes) -> str:
    """ONNX BitShift on the device: integer operands (signed ones: opset 28) of one type."""
    types = [t.elem(i) for i in range(min(t.inputs, 2))]
    bad = [d for d in types if d is not None and d.kind not in "iu"]
    return f"type {bad[0]} is not an integer type" if bad else ""


_F4 = TensorDesc(D.FLOAT32, (1, 2, 3, 4))
_U4 = TensorDesc(D.UINT32, (1, 2, 3, 4))


def _spec(desc_type: Any, support: OperatorSupport, family: contract.ShaderFamily, op: str, helper: str, signed: bool,
          onnx: tuple[OnnxOp, ...] = (), example: TensorDesc = _F4) -> OperatorSpec:
    return OperatorSpec(desc_type, support, _compiler(support, family, op, signed), (family,), helpers=(helper,),
                        onnx=onnx, example=lambda: desc_type(example, example, example))


SPECS = (
    _spec(ElementWiseModulusTruncateDesc, ELEMENT_WISE_MODULUS_TRUNCATE, contract.EW_MOD, "modt", "fmod", True),
    _spec(ElementWiseModulusFloorDesc, ELEMENT_WISE_MODULUS_FLOOR, contract.EW_MOD, "modf", "mod", True,
          (OnnxOp("Mod", "", "mod", check=mod_rule),)),  # onnx_backend/handlers_arith.py (fmod picks the operator)
    _spec(ElementWiseBitShiftLeftDesc, ELEMENT_WISE_BIT_SHIFT_LEFT, contract.EW_SHIFT, "shl", "left_shift", False,
          (OnnxOp("BitShift", "", "left_shift", check=bitshift_rule),), _U4),
    _spec(ElementWiseBitShiftRightDesc, ELEMENT_WISE_BIT_SHIFT_RIGHT, contract.EW_SHIFT, "shr", "right_shift", False,
          example=_U4),
    OperatorSpec(ElementWiseBitCountDesc, ELEMENT_WISE_BIT_COUNT, compile_bit_count, (contract.EW_POPCNT,),
                 helpers=("bit_count",), example=lambda: ElementWiseBitCountDesc(_U4, TensorDesc(D.UINT8, (1, 2, 3, 4)))),
    _spec(ElementWiseDifferenceSquareDesc, ELEMENT_WISE_DIFFERENCE_SQUARE, contract.EW_DSQ, "", "difference_square", False),
)
