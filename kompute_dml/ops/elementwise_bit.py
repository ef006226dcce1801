"""DirectML's ELEMENT_WISE_BIT_AND, _BIT_OR, _BIT_XOR and _BIT_NOT: the bitwise operation on each
element's native encoding ("the tensor data type is ignored except for determining the width of
each element"), exact. All tensors of one DataType, DimensionCount and Sizes; the output may alias
an input (in place). 3_0: UINT8 / UINT16 / UINT32; 4_1: every type (FLOAT64, 64-bit integers and
floats as word pairs). On ops/elementwise.py's plans and shaders/elementwise.comp (the ew_band,
ew_bor, ew_bxor, ew_bnot families, one variant per width). Helpers as numpy names them:
kdml.bitwise_and, bitwise_or, bitwise_xor, bitwise_not; ONNX BitwiseAnd, BitwiseOr, BitwiseXor,
BitwiseNot (docs/elementwise_logic.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..core.layout import check_no_overlap
from ..core.registry import ALL_TYPES, FL, D, OperatorSupport, row
from ..core.tensor_desc import TensorDesc
from . import contract
from .base import CompiledOperator, validate_tensors
from .elementwise import CompiledElementWiseInPlace, check_same
from .elementwise_plan import check_addressable, device_limits, plan_elementwise
from .spec import OnnxOp, OperatorSpec

if TYPE_CHECKING:
    from ..device.device import Device

_UINTS = frozenset({D.UINT8, D.UINT16, D.UINT32})
_ROWS = ((FL.FL_3_0, _UINTS), (FL.FL_4_1, ALL_TYPES))


def _table(name: str, op_type: int, fields: tuple[str, ...]) -> OperatorSupport:
    return OperatorSupport(name, op_type, tuple(
        row(level, *((f, "input", (1, 8), types) for f in fields), ("output_tensor", "output", (1, 8), types))
        for level, types in _ROWS))


ELEMENT_WISE_BIT_AND = _table("ELEMENT_WISE_BIT_AND", 121, ("a_tensor", "b_tensor"))
ELEMENT_WISE_BIT_OR = _table("ELEMENT_WISE_BIT_OR", 122, ("a_tensor", "b_tensor"))
ELEMENT_WISE_BIT_XOR = _table("ELEMENT_WISE_BIT_XOR", 123, ("a_tensor", "b_tensor"))
ELEMENT_WISE_BIT_NOT = _table("ELEMENT_WISE_BIT_NOT", 124, ("input_tensor",))


@dataclass(frozen=True)
class ElementWiseBitAndDesc:
    """DML_ELEMENT_WISE_BIT_AND_OPERATOR_DESC: Output = A & B (bit patterns). In place allowed."""

    a_tensor: TensorDesc
    b_tensor: TensorDesc
    output_tensor: TensorDesc


@dataclass(frozen=True)
class ElementWiseBitOrDesc:
    """DML_ELEMENT_WISE_BIT_OR_OPERATOR_DESC: Output = A | B (bit patterns). In place allowed."""

    a_tensor: TensorDesc
    b_tensor: TensorDesc
    output_tensor: TensorDesc


@dataclass(frozen=True)
class ElementWiseBitXorDesc:
    """DML_ELEMENT_WISE_BIT_XOR_OPERATOR_DESC: Output = A ^ B (bit patterns). In place allowed."""

    a_tensor: TensorDesc
    b_tensor: TensorDesc
    output_tensor: TensorDesc


@dataclass(frozen=True)
class ElementWiseBitNotDesc:
    """DML_ELEMENT_WISE_BIT_NOT_OPERATOR_DESC: Output = ~Input (bit patterns). In place allowed."""

    input_tensor: TensorDesc
    output_tensor: TensorDesc


def _compiler(support: OperatorSupport, family: contract.ShaderFamily) -> Any:
    def compile_bit(device: Device, desc: Any) -> CompiledOperator:
        validate_tensors(support, device.feature_level, desc, support.fields, support.outputs)
        first, *rest = support.fields
        check_same(desc, first, tuple(rest), data_type=True)
        descs = [getattr(desc, f) for f in support.fields]
        check_no_overlap(descs[-1].sizes, descs[-1].effective_strides, "output_tensor")
        check_addressable(support.fields, descs)
        variant = family.name(t=f"b{8 * descs[0].data_type.size}")
        plans = plan_elementwise(family, variant, descs, **device_limits(device))
        return CompiledElementWiseInPlace(device, desc, support, support.inputs, support.outputs, list(plans))
    compile_bit.__name__ = f"compile_{support.name.lower()}"
    return compile_bit


def _helper2(name: str, desc_type: Any, what: str) -> Any:
    def helper(a: Any, b: Any, *, out: Any = None, device: Any = None) -> Any:
        from ..functional.elementwise import _binary
        return _binary(desc_type, a, b, out, device)
    helper.__name__ = helper.__qualname__ = name
    helper.__doc__ = f"{what} of the operands' bit patterns (one data type; numpy broadcasting)."
    return helper


bitwise_and = _helper2("bitwise_and", ElementWiseBitAndDesc, "a & b (DML_ELEMENT_WISE_BIT_AND)")
bitwise_or = _helper2("bitwise_or", ElementWiseBitOrDesc, "a | b (DML_ELEMENT_WISE_BIT_OR)")
bitwise_xor = _helper2("bitwise_xor", ElementWiseBitXorDesc, "a ^ b (DML_ELEMENT_WISE_BIT_XOR)")


def bitwise_not(x: Any, *, out: Any = None, device: Any = None) -> Any:
    """~x of x's bit pattern, its type kept (DML_ELEMENT_WISE_BIT_NOT)."""
    from ..functional.elementwise import _operands, _run
    dev, (t,) = _operands((x,), ("x",), device)
    return _run(ElementWiseBitNotDesc, [t], ("x",), None, out, dev)


def integer_input(t: Any) -> str:
    """ONNX Bitwise*: integer operands (the ONNX types; the bits are DirectML's at 4_1)."""
    dt = t.elem(0) if t.inputs else None
    return f"type {dt} is not an integer type" if dt is not None and dt.kind not in "iu" else ""


_U32_4D = TensorDesc(D.UINT32, (2, 3, 4, 5))


def _spec(desc_type: Any, support: OperatorSupport, family: contract.ShaderFamily, helper: str,
          onnx: str) -> OperatorSpec:
    n = len(support.fields)
    return OperatorSpec(desc_type, support, _compiler(support, family), (family,), helpers=(helper,),
                        onnx=(OnnxOp(onnx, "", helper, kind="binary" if n == 3 else "", check=integer_input),),
                        example=lambda: desc_type(*[_U32_4D] * n))


SPECS = (
    _spec(ElementWiseBitAndDesc, ELEMENT_WISE_BIT_AND, contract.EW_BAND, "bitwise_and", "BitwiseAnd"),
    _spec(ElementWiseBitOrDesc, ELEMENT_WISE_BIT_OR, contract.EW_BOR, "bitwise_or", "BitwiseOr"),
    _spec(ElementWiseBitXorDesc, ELEMENT_WISE_BIT_XOR, contract.EW_BXOR, "bitwise_xor", "BitwiseXor"),
    _spec(ElementWiseBitNotDesc, ELEMENT_WISE_BIT_NOT, contract.EW_BNOT, "bitwise_not", "BitwiseNot"),
)
