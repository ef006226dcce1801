"""DirectML's element-wise arithmetic, comparison, logical, IS_NAN and IF operators.

Descriptors, validation and specs; the dispatch plans are in ops/elementwise_plan.py, the
shader is shaders/elementwise.comp, the semantics and error bounds are in docs/elementwise.md.
Every tensor has the output's sizes (DirectML's constraint); broadcasting is expressed by
input strides of 0. Validation, in order: DML_BUFFER_TENSOR_DESC rules and the feature
level's table (InvalidArgumentError / UnsupportedError naming the field), then the
operator's tensor constraints (InvalidArgumentError whose message starts with the field),
then a non-overlapping output.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..core.dtypes import DataType, FeatureLevel
from ..core.errors import invalid
from ..core.layout import check_no_overlap
from ..core.registry import (
    ALL_TYPES,
    BOOL_OUT,
    FL,
    FLOATS,
    INTS_8_32,
    INTS_32,
    INTS_64,
    NUMERIC,
    D,
    LevelSupport,
    OperatorSupport,
    row,
)
from ..core.tensor_desc import TensorDesc
from . import contract, onnx_types
from .attention_rules import rotary_rule
from .base import CompiledOperator, validate_tensors
from .elementwise_plan import check_addressable, device_limits, plan_elementwise
from .spec import OnnxOp, OperatorSpec

if TYPE_CHECKING:
    from ..device.device import Device


# ---- element-wise operators from their DirectML pages ------
# FLOAT64 is left out of the arithmetic and comparison tables (DirectML lists it for IF only,
# which selects bit patterns: exact); every other listed type is implemented exactly.


def _binary(name: str, op_type: int, rows: Sequence[tuple[FeatureLevel, tuple[int, int], frozenset[DataType]]],
            out_types: frozenset[DataType] | None = None, first: LevelSupport | None = None) -> OperatorSupport:
    """A, B, Output (the output's types: the inputs', or `out_types` for the logical operators);
    `first`: a row of its own before `rows`."""
    return OperatorSupport(name, op_type, (*((first,) if first else ()), *(
        row(level, ("a_tensor", "input", dims, types), ("b_tensor", "input", dims, types),
             ("output_tensor", "output", dims, out_types if out_types is not None else types))
        for level, dims, types in rows)))


_ARITH_ROWS = ((FL.FL_1_0, (4, 5), FLOATS), (FL.FL_2_1, (4, 5), FLOATS | INTS_32), (FL.FL_3_0, (1, 8), FLOATS | INTS_32),
               (FL.FL_4_1, (1, 8), FLOATS | INTS_32 | INTS_64), (FL.FL_5_1, (1, 8), NUMERIC))
ELEMENT_WISE_ADD = _binary("ELEMENT_WISE_ADD", 4, _ARITH_ROWS)
# SUBTRACT's pages list 4 dimensions (not 4 to 5) at 1_0 and 2_1; MULTIPLY's 4 to 5
ELEMENT_WISE_SUBTRACT = _binary("ELEMENT_WISE_SUBTRACT", 30, ((FL.FL_1_0, (4, 4), FLOATS), (FL.FL_2_1, (4, 4), FLOATS | INTS_32),
                                                              *_ARITH_ROWS[2:]))
ELEMENT_WISE_MULTIPLY = _binary("ELEMENT_WISE_MULTIPLY", 24, _ARITH_ROWS)
ELEMENT_WISE_DIVIDE = _binary("ELEMENT_WISE_DIVIDE", 10, (
    (FL.FL_1_0, (4, 4), FLOATS), (FL.FL_2_1, (4, 4), FLOATS | INTS_32), (FL.FL_3_0, (1, 8), FLOATS | INTS_32),
    (FL.FL_5_1, (1, 8), FLOATS | INTS_8_32), (FL.FL_6_0, (1, 8), NUMERIC)))
_COMPARE_ROWS = ((FL.FL_3_0, (1, 8), FLOATS | INTS_8_32), (FL.FL_4_1, (1, 8), NUMERIC))
ELEMENT_WISE_LOGICAL_EQUALS = _binary(
    "ELEMENT_WISE_LOGICAL_EQUALS", 15, ((FL.FL_2_0, (4, 4), FLOATS), (FL.FL_2_1, (4, 4), FLOATS | INTS_8_32), *_COMPARE_ROWS),
    BOOL_OUT, row(FL.FL_1_0, ("a_tensor", "input", (4, 4), FLOATS), ("b_tensor", "input", (4, 4), FLOATS),
                   ("output_tensor", "output", (4, 4), frozenset({D.UINT32}))))
ELEMENT_WISE_LOGICAL_GREATER_THAN_OR_EQUAL = _binary("ELEMENT_WISE_LOGICAL_GREATER_THAN_OR_EQUAL", 126, _COMPARE_ROWS,
                                                     BOOL_OUT)
ELEMENT_WISE_LOGICAL_AND = _binary("ELEMENT_WISE_LOGICAL_AND", 14, (
    (FL.FL_1_0, (4, 4), frozenset({D.UINT32})), (FL.FL_2_0, (4, 4), BOOL_OUT), (FL.FL_3_0, (1, 8), BOOL_OUT)))
ELEMENT_WISE_IS_NAN = OperatorSupport("ELEMENT_WISE_IS_NAN", 80, tuple(
    row(level, ("input_tensor", "input", dims, FLOATS), ("output_tensor", "output", dims, BOOL_OUT))
    for level, dims in ((FL.FL_2_0, (4, 4)), (FL.FL_3_0, (1, 8)))))
_U8 = frozenset({D.UINT8})
ELEMENT_WISE_IF = OperatorSupport("ELEMENT_WISE_IF", 88, tuple(
    row(level, ("condition_tensor", "input", dims, _U8), ("a_tensor", "input", dims, types),
         ("b_tensor", "input", dims, types), ("output_tensor", "output", dims, types))
    for level, dims, types in ((FL.FL_2_0, (4, 4), frozenset({D.FLOAT16})), (FL.FL_3_0, (1, 8), FLOATS | INTS_8_32),
                               (FL.FL_5_0, (1, 8), ALL_TYPES))))


# ---- descriptors (DML_ELEMENT_WISE_*_OPERATOR_DESC, field names in snake_case) -------------
@dataclass(frozen=True)
class ElementWiseAddDesc:
    """DML_ELEMENT_WISE_ADD_OPERATOR_DESC: Output = A + B (integers wrap). In place allowed."""

    a_tensor: TensorDesc
    b_tensor: TensorDesc
    output_tensor: TensorDesc


@dataclass(frozen=True)
class ElementWiseAdd1Desc:
    """DML_ELEMENT_WISE_ADD1_OPERATOR_DESC: Output = FusedActivation(A + B). FusedActivation:
    None, or for FLOAT32 / FLOAT16 one of CONVOLUTION's (ops/conv_fused.py: RELU, LEAKY_RELU,
    SIGMOID, HARD_SIGMOID, HARD_SWISH, TANH, ELU, SWISH, IDENTITY, CLIP), applied to the sum as the
    output type holds it: the bits of ADD1 then the standalone activation. In place allowed."""

    a_tensor: TensorDesc
    b_tensor: TensorDesc
    output_tensor: TensorDesc
    fused_activation: Any = None


@dataclass(frozen=True)
class ElementWiseSubtractDesc:
    """DML_ELEMENT_WISE_SUBTRACT_OPERATOR_DESC: Output = A - B (integers wrap). In place allowed."""

    a_tensor: TensorDesc
    b_tensor: TensorDesc
    output_tensor: TensorDesc


@dataclass(frozen=True)
class ElementWiseMultiplyDesc:
    """DML_ELEMENT_WISE_MULTIPLY_OPERATOR_DESC: Output = A * B (integers: the low bits of the
    product). In place allowed."""

    a_tensor: TensorDesc
    b_tensor: TensorDesc
    output_tensor: TensorDesc


@dataclass(frozen=True)
class ElementWiseDivideDesc:
    """DML_ELEMENT_WISE_DIVIDE_OPERATOR_DESC: Output = A / B; integer division truncates
    toward zero ("For integer divisions, the result is truncated"); x / 0 has every bit set
    (kompute_dml's choice: DirectML does not say). In place allowed."""

    a_tensor: TensorDesc
    b_tensor: TensorDesc
    output_tensor: TensorDesc


@dataclass(frozen=True)
class ElementWiseLogicalEqualsDesc:
    """DML_ELEMENT_WISE_LOGICAL_EQUALS_OPERATOR_DESC: Output = (A == B) as 1 / 0 (UINT8 or
    UINT32); NaN equals nothing, -0 == +0."""

    a_tensor: TensorDesc
    b_tensor: TensorDesc
    output_tensor: TensorDesc


@dataclass(frozen=True)
class ElementWiseLogicalGreaterThanOrEqualDesc:
    """DML_ELEMENT_WISE_LOGICAL_GREATER_THAN_OR_EQUAL_OPERATOR_DESC: Output = (A >= B) as 1 / 0;
    false where either is NaN."""

    a_tensor: TensorDesc
    b_tensor: TensorDesc
    output_tensor: TensorDesc


@dataclass(frozen=True)
class ElementWiseLogicalAndDesc:
    """DML_ELEMENT_WISE_LOGICAL_AND_OPERATOR_DESC: Output = (A != 0 && B != 0) as 1 / 0
    (UINT8 or UINT32, all three of one type). In place allowed."""

    a_tensor: TensorDesc
    b_tensor: TensorDesc
    output_tensor: TensorDesc


@dataclass(frozen=True)
class ElementWiseIsNanDesc:
    """DML_ELEMENT_WISE_IS_NAN_OPERATOR_DESC: Output = 1 where Input is a NaN (IEEE-754), else 0.
    (The page lists no InfinityMode or other field.)"""

    input_tensor: TensorDesc
    output_tensor: TensorDesc


@dataclass(frozen=True)
class ElementWiseIfDesc:
    """DML_ELEMENT_WISE_IF_OPERATOR_DESC: Output = A where Condition != 0, else B (bit patterns
    copied: NaN payloads and -0 kept)."""

    condition_tensor: TensorDesc
    a_tensor: TensorDesc
    b_tensor: TensorDesc
    output_tensor: TensorDesc


# ---- validation and compile ----------------------------------------------------------------
class CompiledElementWise(CompiledOperator):
    """In-place execution runs the operator (the base class's no-op is for copies)."""

    def is_inplace_noop(self, bound: list[Any]) -> bool:
        return False


class CompiledElementWiseInPlace(CompiledElementWise):
    allows_inplace = True  # the operator's page: "OutputTensor is permitted to alias ... the input tensors"


def check_same(desc: Any, first: str, others: tuple[str, ...], data_type: bool) -> None:
    """DirectML's tensor constraints: `others` have `first`'s DimensionCount and Sizes (and
    DataType where `data_type`)."""
    ref: TensorDesc = getattr(desc, first)
    for f in others:
        t: TensorDesc = getattr(desc, f)
        if data_type and t.data_type != ref.data_type:
            raise invalid(f"{f}.data_type", f"must equal {first}'s ({ref.data_type.name}), got {t.data_type.name}")
        if t.dimension_count != ref.dimension_count:
            raise invalid(f"{f}.sizes", f"dimension count must equal {first}'s ({ref.dimension_count}), "
                                        f"got {t.dimension_count}")
        if t.sizes != ref.sizes:
            raise invalid(f"{f}.sizes", f"must equal {first}'s {ref.sizes}, got {t.sizes}")


def type_code(dt: DataType, signed: bool) -> str:
    """The shader variant's element-type code: f32 / f16, else i<n> / u<n> where signedness
    matters (`signed`), b<n> where it does not."""
    if dt == DataType.FLOAT32:
        return "f32"
    if dt == DataType.FLOAT16:
        return "f16"
    bits = 8 * dt.size
    if not signed:
        return f"b{bits}"
    return f"{'i' if dt.is_signed else 'u'}{bits}"


def _compile(device: Device, desc: Any, support: OperatorSupport, family: contract.ShaderFamily, variant: str,
             in_place: bool, prm: Sequence[int] = ()) -> CompiledOperator:
    fields = support.fields
    descs = [getattr(desc, f) for f in fields]
    check_no_overlap(descs[-1].sizes, descs[-1].effective_strides, fields[-1])
    check_addressable(fields, descs)
    plans = plan_elementwise(family, variant, descs, prm=prm, **device_limits(device))
    cls = CompiledElementWiseInPlace if in_place else CompiledElementWise
    return cls(device, desc, support, support.inputs, support.outputs, list(plans))


def _validate(device: Device, desc: Any, support: OperatorSupport, same_type: tuple[str, ...]) -> None:
    validate_tensors(support, device.feature_level, desc, support.fields, support.outputs)
    first, *rest = [f for f in support.fields if f != "condition_tensor"]
    check_same(desc, first, tuple(rest), data_type=False)
    if "condition_tensor" in support.fields:
        check_same(desc, first, ("condition_tensor",), data_type=False)
    if same_type:
        check_same(desc, same_type[0], same_type[1:], data_type=True)


_ARITH_FAMILIES = {"add": contract.EW_ADD, "sub": contract.EW_SUB, "mul": contract.EW_MUL, "div": contract.EW_DIV}


def _arith(op: str, support: OperatorSupport) -> Any:
    def compile_arith(device: Device, desc: Any) -> CompiledOperator:
        _validate(device, desc, support, ("a_tensor", "b_tensor", "output_tensor"))
        dt = desc.a_tensor.data_type
        fam = _ARITH_FAMILIES[op]
        return _compile(device, desc, support, fam, fam.name(t=type_code(dt, op == "div")), in_place=True)

    compile_arith.__name__ = f"compile_{support.name.lower()}"
    return compile_arith


def _compare(family: contract.ShaderFamily, signed: bool, support: OperatorSupport) -> Any:
    def compile_compare(device: Device, desc: Any) -> CompiledOperator:
        _validate(device, desc, support, ("a_tensor", "b_tensor"))
        ob = 8 * desc.output_tensor.data_type.size
        variant = family.name(t=type_code(desc.a_tensor.data_type, signed), ob=ob)
        return _compile(device, desc, support, family, variant, in_place=False)

    compile_compare.__name__ = f"compile_{support.name.lower()}"
    return compile_compare


def compile_logical_and(device: Device, desc: ElementWiseLogicalAndDesc) -> CompiledOperator:
    support = ELEMENT_WISE_LOGICAL_AND
    _validate(device, desc, support, ("a_tensor", "b_tensor", "output_tensor"))
    variant = contract.EW_AND.name(t=type_code(desc.a_tensor.data_type, False))
    return _compile(device, desc, support, contract.EW_AND, variant, in_place=True)


def compile_is_nan(device: Device, desc: ElementWiseIsNanDesc) -> CompiledOperator:
    support = ELEMENT_WISE_IS_NAN
    _validate(device, desc, support, ())
    variant = contract.EW_ISNAN.name(t=type_code(desc.input_tensor.data_type, False),
                                     ob=8 * desc.output_tensor.data_type.size)
    return _compile(device, desc, support, contract.EW_ISNAN, variant, in_place=False)


def compile_if(device: Device, desc: ElementWiseIfDesc) -> CompiledOperator:
    support = ELEMENT_WISE_IF
    _validate(device, desc, support, ("a_tensor", "b_tensor", "output_tensor"))
    variant = contract.EW_IF.name(t=f"b{8 * desc.a_tensor.data_type.size}")
    return _compile(device, desc, support, contract.EW_IF, variant, in_place=False)


# ---- specs (kompute_dml/ops/spec.py) ------------------------------------------------------
SPECS = (
    OperatorSpec(ElementWiseAddDesc, ELEMENT_WISE_ADD, _arith("add", ELEMENT_WISE_ADD), (contract.EW_ADD,),
                 helpers=("add",),
                 onnx=(OnnxOp("Add", "", "add", kind="binary"),
                       # a fold of additions; Mean divides by the count last (onnx_backend/handlers_activation.py)
                       OnnxOp("Sum", "", "add", check=onnx_types.float_inputs),
                       OnnxOp("Mean", "", "add", check=onnx_types.float_inputs))),
    OperatorSpec(ElementWiseSubtractDesc, ELEMENT_WISE_SUBTRACT, _arith("sub", ELEMENT_WISE_SUBTRACT),
                 (contract.EW_SUB,), helpers=("sub",),
                 onnx=(OnnxOp("Sub", "", "sub", kind="binary"),)),
    OperatorSpec(ElementWiseMultiplyDesc, ELEMENT_WISE_MULTIPLY, _arith("mul", ELEMENT_WISE_MULTIPLY),
                 (contract.EW_MUL,), helpers=("mul",),
                 onnx=(OnnxOp("Mul", "", "mul", kind="binary"),
                       # products of the position tables (onnx_backend/handlers_onnx_attention.py; constant
                       # caches: rotary.py, on ROTARY_EMBEDDING where the halves rotate)
                       OnnxOp("RotaryEmbedding", "", "mul", check=rotary_rule))),
    OperatorSpec(ElementWiseDivideDesc, ELEMENT_WISE_DIVIDE, _arith("div", ELEMENT_WISE_DIVIDE),
                 (contract.EW_DIV,), helpers=("div",),
                 onnx=(OnnxOp("Div", "", "div", kind="binary"),)),
    OperatorSpec(ElementWiseLogicalEqualsDesc, ELEMENT_WISE_LOGICAL_EQUALS,
                 _compare(contract.EW_EQ, False, ELEMENT_WISE_LOGICAL_EQUALS), (contract.EW_EQ,), helpers=("equal",),
                 onnx=(OnnxOp("Equal", "", "equal", kind="compare"),)),
    OperatorSpec(ElementWiseLogicalGreaterThanOrEqualDesc, ELEMENT_WISE_LOGICAL_GREATER_THAN_OR_EQUAL,
                 _compare(contract.EW_GE, True, ELEMENT_WISE_LOGICAL_GREATER_THAN_OR_EQUAL), (contract.EW_GE,),
                 helpers=("greater_equal",),
                 onnx=(OnnxOp("GreaterOrEqual", "", "greater_equal", kind="compare"),)),
    OperatorSpec(ElementWiseLogicalAndDesc, ELEMENT_WISE_LOGICAL_AND, compile_logical_and, (contract.EW_AND,),
                 helpers=("logical_and",),
                 onnx=(OnnxOp("And", "", "logical_and"),)),
    OperatorSpec(ElementWiseIsNanDesc, ELEMENT_WISE_IS_NAN, compile_is_nan, (contract.EW_ISNAN,),
                 helpers=("isnan",),
                 onnx=(OnnxOp("IsNaN", "", "isnan"),)),
    OperatorSpec(ElementWiseIfDesc, ELEMENT_WISE_IF, compile_if, (contract.EW_IF,), helpers=("where",),
                 onnx=(OnnxOp("Where", "", "where"),)),
)
