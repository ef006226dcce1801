"""The rest of DirectML's element-wise comparisons and logic: ELEMENT_WISE_LOGICAL_GREATER_THAN,
_LESS_THAN, _LESS_THAN_OR_EQUAL (1 / 0 as UINT8 or UINT32; false where either operand is a NaN,
-0 equal to +0) and ELEMENT_WISE_LOGICAL_NOT, _OR, _XOR (nonzero is true; 1 / 0 in the operands'
type, UINT8 or UINT32). On ops/elementwise.py's plans and shaders/elementwise.comp (the ew_gt,
ew_lt, ew_le, ew_not, ew_or, ew_xor families); every result is exact (comparisons of floats on
their bit patterns). Helpers as numpy names them: kdml.greater, less, less_equal, logical_not,
logical_or, logical_xor; ONNX Greater, Less, LessOrEqual, Not, Or, Xor (docs/elementwise_logic.md).

Validation, in order: DML_BUFFER_TENSOR_DESC rules and the feature level's table (UnsupportedError
naming the field), the tensor constraints (InvalidArgumentError whose message starts with the
field: one DimensionCount and Sizes for all; A and B one DataType; NOT / OR / XOR's output of the
inputs' DataType), then a non-overlapping output. Broadcasting is input strides of 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..core.dtypes import DataType
from ..core.layout import check_no_overlap
from ..core.registry import BOOL_OUT, FL, FLOATS, INTS_8_32, NUMERIC, D, OperatorSupport, row
from ..core.tensor_desc import TensorDesc
from . import contract
from .base import CompiledOperator, validate_tensors
from .elementwise import CompiledElementWise, CompiledElementWiseInPlace, check_same, type_code
from .elementwise_plan import check_addressable, device_limits, plan_elementwise
from .spec import OnnxOp, OperatorSpec

if TYPE_CHECKING:
    from ..device.device import Device

_U32 = frozenset({D.UINT32})


def _binary(name: str, op_type: int, rows: Any) -> OperatorSupport:
    """A, B, Output of one type per row (LOGICAL_OR / XOR)."""
    return OperatorSupport(name, op_type, tuple(
        row(level, ("a_tensor", "input", dims, types), ("b_tensor", "input", dims, types),
            ("output_tensor", "output", dims, types))
        for level, dims, types in rows))


# GREATER_THAN / LESS_THAN (introduced at 1_0, as LOGICAL_EQUALS: its rows), LESS_THAN_OR_EQUAL
# (introduced at 3_0 with GREATER_THAN_OR_EQUAL: its rows); 1_0's output is UINT32 only
_CMP_1_0 = ((FL.FL_2_0, (4, 4), FLOATS), (FL.FL_2_1, (4, 4), FLOATS | INTS_8_32),
            (FL.FL_3_0, (1, 8), FLOATS | INTS_8_32), (FL.FL_4_1, (1, 8), NUMERIC))


def _compare_table(name: str, op_type: int, first_1_0: bool) -> OperatorSupport:
    rows = _CMP_1_0 if first_1_0 else _CMP_1_0[2:]
    first = (row(FL.FL_1_0, ("a_tensor", "input", (4, 4), FLOATS), ("b_tensor", "input", (4, 4), FLOATS),
                 ("output_tensor", "output", (4, 4), _U32)),) if first_1_0 else ()
    return OperatorSupport(name, op_type, (*first, *(
        row(level, ("a_tensor", "input", dims, types), ("b_tensor", "input", dims, types),
            ("output_tensor", "output", dims, BOOL_OUT)) for level, dims, types in rows)))


ELEMENT_WISE_LOGICAL_GREATER_THAN = _compare_table("ELEMENT_WISE_LOGICAL_GREATER_THAN", 16, True)
ELEMENT_WISE_LOGICAL_LESS_THAN = _compare_table("ELEMENT_WISE_LOGICAL_LESS_THAN", 17, True)
ELEMENT_WISE_LOGICAL_LESS_THAN_OR_EQUAL = _compare_table("ELEMENT_WISE_LOGICAL_LESS_THAN_OR_EQUAL", 127, False)
_LOGIC_ROWS = ((FL.FL_1_0, (4, 4), _U32), (FL.FL_2_0, (4, 4), BOOL_OUT), (FL.FL_3_0, (1, 8), BOOL_OUT))
ELEMENT_WISE_LOGICAL_OR = _binary("ELEMENT_WISE_LOGICAL_OR", 19, _LOGIC_ROWS)
ELEMENT_WISE_LOGICAL_XOR = _binary("ELEMENT_WISE_LOGICAL_XOR", 20, _LOGIC_ROWS)
ELEMENT_WISE_LOGICAL_NOT = OperatorSupport("ELEMENT_WISE_LOGICAL_NOT", 18, tuple(
    row(level, ("input_tensor", "input", dims, types), ("output_tensor", "output", dims, types))
    for level, dims, types in _LOGIC_ROWS))


@dataclass(frozen=True)
class ElementWiseLogicalGreaterThanDesc:
    """DML_ELEMENT_WISE_LOGICAL_GREATER_THAN_OPERATOR_DESC: Output = (A > B) as 1 / 0; false where
    either is NaN."""

    a_tensor: TensorDesc
    b_tensor: TensorDesc
    output_tensor: TensorDesc


@dataclass(frozen=True)
class ElementWiseLogicalLessThanDesc:
    """DML_ELEMENT_WISE_LOGICAL_LESS_THAN_OPERATOR_DESC: Output = (A < B) as 1 / 0; false where
    either is NaN."""

    a_tensor: TensorDesc
    b_tensor: TensorDesc
    output_tensor: TensorDesc


@dataclass(frozen=True)
class ElementWiseLogicalLessThanOrEqualDesc:
    """DML_ELEMENT_WISE_LOGICAL_LESS_THAN_OR_EQUAL_OPERATOR_DESC: Output = (A <= B) as 1 / 0;
    false where either is NaN."""

    a_tensor: TensorDesc
    b_tensor: TensorDesc
    output_tensor: TensorDesc


@dataclass(frozen=True)
class ElementWiseLogicalOrDesc:
    """DML_ELEMENT_WISE_LOGICAL_OR_OPERATOR_DESC: Output = (A != 0 || B != 0) as 1 / 0 (UINT8 or
    UINT32, all three of one type). In place allowed."""

    a_tensor: TensorDesc
    b_tensor: TensorDesc
    output_tensor: TensorDesc


@dataclass(frozen=True)
class ElementWiseLogicalXorDesc:
    """DML_ELEMENT_WISE_LOGICAL_XOR_OPERATOR_DESC: Output = ((A != 0) != (B != 0)) as 1 / 0 (UINT8
    or UINT32, all three of one type). In place allowed."""

    a_tensor: TensorDesc
    b_tensor: TensorDesc
    output_tensor: TensorDesc


@dataclass(frozen=True)
class ElementWiseLogicalNotDesc:
    """DML_ELEMENT_WISE_LOGICAL_NOT_OPERATOR_DESC: Output = (Input == 0) as 1 / 0 (UINT8 or UINT32,
    the input's type). In place allowed."""

    input_tensor: TensorDesc
    output_tensor: TensorDesc


def _compile(device: Device, desc: Any, support: OperatorSupport, family: contract.ShaderFamily,
             same_type: tuple[str, ...], in_place: bool) -> CompiledOperator:
    validate_tensors(support, device.feature_level, desc, support.fields, support.outputs)
    first, *rest = support.fields
    check_same(desc, first, tuple(rest), data_type=False)
    check_same(desc, same_type[0], same_type[1:], data_type=True)
    descs = [getattr(desc, f) for f in support.fields]
    check_no_overlap(descs[-1].sizes, descs[-1].effective_strides, support.fields[-1])
    check_addressable(support.fields, descs)
    if in_place:
        variant = family.name(t=type_code(descs[0].data_type, False))
    else:
        variant = family.name(t=type_code(descs[0].data_type, True), ob=8 * descs[-1].data_type.size)
    plans = plan_elementwise(family, variant, descs, **device_limits(device))
    cls = CompiledElementWiseInPlace if in_place else CompiledElementWise
    return cls(device, desc, support, support.inputs, support.outputs, list(plans))


def _compare(support: OperatorSupport, family: contract.ShaderFamily) -> Any:
    def compile_compare(device: Device, desc: Any) -> CompiledOperator:
        return _compile(device, desc, support, family, ("a_tensor", "b_tensor"), in_place=False)
    compile_compare.__name__ = f"compile_{support.name.lower()}"
    return compile_compare


def _logic(support: OperatorSupport, family: contract.ShaderFamily) -> Any:
    def compile_logic(device: Device, desc: Any) -> CompiledOperator:
        return _compile(device, desc, support, family, support.fields, in_place=True)
    compile_logic.__name__ = f"compile_{support.name.lower()}"
    return compile_logic


# ---- helpers (numpy's names) ---------------------------------------------------------------
def _helper2(name: str, desc_type: Any, boolean: bool, what: str) -> Any:
    def helper(a: Any, b: Any, *, data_type: Any = DataType.UINT8, out: Any = None, device: Any = None) -> Any:
        from ..functional.elementwise import _binary as run_binary
        return run_binary(desc_type, a, b, out, device, DataType.coerce(data_type, "data_type") if boolean else None)
    helper.__name__ = helper.__qualname__ = name
    helper.__doc__ = what + (" as 1 / 0 of `data_type` (UINT8 or UINT32)" if boolean else
                             " as 1 / 0 of the operands' type, UINT8 or UINT32 (boolean arrays are UINT8); "
                             "data_type is ignored")
    return helper


greater = _helper2("greater", ElementWiseLogicalGreaterThanDesc, True, "a > b (false where either is NaN)")
less = _helper2("less", ElementWiseLogicalLessThanDesc, True, "a < b (false where either is NaN)")
less_equal = _helper2("less_equal", ElementWiseLogicalLessThanOrEqualDesc, True, "a <= b (false where either is NaN)")
logical_or = _helper2("logical_or", ElementWiseLogicalOrDesc, False, "(a != 0) or (b != 0)")
logical_xor = _helper2("logical_xor", ElementWiseLogicalXorDesc, False, "(a != 0) xor (b != 0)")


def logical_not(x: Any, *, out: Any = None, device: Any = None) -> Any:
    """x == 0 as 1 / 0 of x's type, UINT8 or UINT32 (boolean arrays are UINT8;
    DML_ELEMENT_WISE_LOGICAL_NOT)."""
    from ..functional.elementwise import _operands, _run
    dev, (t,) = _operands((x,), ("x",), device)
    return _run(ElementWiseLogicalNotDesc, [t], ("x",), None, out, dev)


_F32_4D = TensorDesc(DataType.FLOAT32, (2, 3, 4, 5))
_U32_4D = TensorDesc(DataType.UINT32, (2, 3, 4, 5))
_U8_4D = TensorDesc(DataType.UINT8, (2, 3, 4, 5))


def _cmp_spec(desc_type: Any, support: OperatorSupport, family: contract.ShaderFamily, helper: str,
              onnx: str, first_out: TensorDesc) -> OperatorSpec:
    return OperatorSpec(desc_type, support, _compare(support, family), (family,), helpers=(helper,),
                        onnx=(OnnxOp(onnx, "", helper, kind="compare"),),
                        example=lambda: desc_type(_F32_4D, _F32_4D, first_out))


def _logic_spec(desc_type: Any, support: OperatorSupport, family: contract.ShaderFamily, helper: str,
                onnx: str) -> OperatorSpec:
    n = len(support.fields)
    return OperatorSpec(desc_type, support, _logic(support, family), (family,), helpers=(helper,),
                        onnx=(OnnxOp(onnx, "", helper, kind="" if n == 2 else "binary"),), example=lambda: desc_type(*[_U32_4D] * n))


SPECS = (
    _cmp_spec(ElementWiseLogicalGreaterThanDesc, ELEMENT_WISE_LOGICAL_GREATER_THAN, contract.EW_GT, "greater",
              "Greater", _U32_4D),
    _cmp_spec(ElementWiseLogicalLessThanDesc, ELEMENT_WISE_LOGICAL_LESS_THAN, contract.EW_LT, "less", "Less", _U32_4D),
    _cmp_spec(ElementWiseLogicalLessThanOrEqualDesc, ELEMENT_WISE_LOGICAL_LESS_THAN_OR_EQUAL, contract.EW_LE,
              "less_equal", "LessOrEqual", _U8_4D),
    _logic_spec(ElementWiseLogicalOrDesc, ELEMENT_WISE_LOGICAL_OR, contract.EW_OR, "logical_or", "Or"),
    _logic_spec(ElementWiseLogicalXorDesc, ELEMENT_WISE_LOGICAL_XOR, contract.EW_XOR, "logical_xor", "Xor"),
    _logic_spec(ElementWiseLogicalNotDesc, ELEMENT_WISE_LOGICAL_NOT, contract.EW_NOT, "logical_not", "Not"),
)
