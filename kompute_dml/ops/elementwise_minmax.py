"""DirectML's ELEMENT_WISE_MIN and ELEMENT_WISE_MAX: the smaller / greater of two corresponding
elements, on the element-wise plans (ops/elementwise_plan.py: the output's sizes, inputs
broadcast by 0 strides, offsets) with shaders/elementwise.comp (contract.EW_EXT: ew_min_<t> /
ew_max_<t>, a variant per element type). Exact: the result is one of the operands, bit for bit.

Every type of the pages' tables: FLOAT32 / FLOAT16 from 1_0 (4 dimensions), the 8- to 32-bit
integers from 2_1 (4), 1 to 8 dimensions from 3_0, INT64 / UINT64 from 5_0. The pages say
nothing of NaN: kompute_dml follows onnxruntime's Min / Max (and numpy's minimum / maximum): a NaN
operand gives NaN (A's if both are; quieted). MIN is `B < A ? B : A`, MAX `A < B ? B : A`, so of
equal operands (-0 and +0 included) A is returned. Floats are compared on their bits, whatever
the device's denormal mode.

ONNX Min / Max (onnx_backend/handlers_activation.py): two inputs on one operator, more chained
pairwise in input order, one input copied; numpy broadcasting (kdml.minimum / kdml.maximum).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.dtypes import DataType
from ..core.registry import FL, FLOATS, INTS_8_32, NUMERIC
from ..core.tensor_desc import TensorDesc
from ..device.device import Device
from ..device.memory import Tensor
from ..functional.elementwise import _binary as _run_binary
from . import contract
from .base import CompiledOperator
from .elementwise import _binary, _compile, _validate, type_code
from .onnx_types import DML_NUMPY, NodeTypes
from .spec import OnnxOp, OperatorSpec

_ROWS = ((FL.FL_1_0, (4, 4), FLOATS), (FL.FL_2_1, (4, 4), FLOATS | INTS_8_32), (FL.FL_3_0, (1, 8), FLOATS | INTS_8_32),
         (FL.FL_5_0, (1, 8), NUMERIC))
ELEMENT_WISE_MIN = _binary("ELEMENT_WISE_MIN", 23, _ROWS)
ELEMENT_WISE_MAX = _binary("ELEMENT_WISE_MAX", 21, _ROWS)


@dataclass(frozen=True)
class ElementWiseMinDesc:
    """DML_ELEMENT_WISE_MIN_OPERATOR_DESC: Output = min(A, B) (B if B < A, else A; a NaN operand
    gives NaN). The same DataType, DimensionCount and Sizes for all three. In place allowed."""

    a_tensor: TensorDesc
    b_tensor: TensorDesc
    output_tensor: TensorDesc


@dataclass(frozen=True)
class ElementWiseMaxDesc:
    """DML_ELEMENT_WISE_MAX_OPERATOR_DESC: Output = max(A, B) (B if A < B, else A; a NaN operand
    gives NaN). The same DataType, DimensionCount and Sizes for all three. In place allowed."""

    a_tensor: TensorDesc
    b_tensor: TensorDesc
    output_tensor: TensorDesc


def _compiler(op: str, support: Any) -> Any:
    def compile_minmax(device: Device, desc: Any) -> CompiledOperator:
        _validate(device, desc, support, ("a_tensor", "b_tensor", "output_tensor"))
        return _compile(device, desc, support, contract.EW_EXT, contract.EW_EXT.name(op=op, t=type_code(desc.a_tensor.data_type, True)),
                        in_place=True)
    compile_minmax.__name__ = f"compile_{support.name.lower()}"
    return compile_minmax


def minimum(a: Any, b: Any, *, out: Tensor | None = None, device: Device | None = None) -> Tensor:
    """The smaller of a and b element by element, numpy-broadcast (DML_ELEMENT_WISE_MIN; NaN wins)."""
    return _run_binary(ElementWiseMinDesc, a, b, out, device)


def maximum(a: Any, b: Any, *, out: Tensor | None = None, device: Device | None = None) -> Tensor:
    """The greater of a and b element by element, numpy-broadcast (DML_ELEMENT_WISE_MAX; NaN wins)."""
    return _run_binary(ElementWiseMaxDesc, a, b, out, device)


_NUMERIC_NUMPY = frozenset(np.dtype(t) for t in DML_NUMPY if np.dtype(t) != np.float64)


def _minmax_rule(t: NodeTypes) -> str:
    """ONNX Min / Max on the device: every input of one DirectML type other than FLOAT64."""
    types = {t.elem(i) for i in range(t.inputs)} - {None}
    if len(types) > 1:
        return f"input types differ: {sorted(str(d) for d in types)}"
    bad = [d for d in types if d not in _NUMERIC_NUMPY]
    return f"type {bad[0]} is not one ELEMENT_WISE_MIN / MAX takes" if bad else ""


_F4 = TensorDesc(DataType.FLOAT32, (1, 2, 3, 4))
SPECS = (
    OperatorSpec(ElementWiseMinDesc, ELEMENT_WISE_MIN, _compiler("min", ELEMENT_WISE_MIN), (contract.EW_EXT,),
                 helpers=("minimum",), onnx=(OnnxOp("Min", "", "minimum", check=_minmax_rule),),
                 example=lambda: ElementWiseMinDesc(_F4, _F4, _F4)),
    OperatorSpec(ElementWiseMaxDesc, ELEMENT_WISE_MAX, _compiler("max", ELEMENT_WISE_MAX), (contract.EW_EXT,),
                 helpers=("maximum",), onnx=(OnnxOp("Max", "", "maximum", check=_minmax_rule),),
                 example=lambda: ElementWiseMaxDesc(_F4, _F4, _F4)),
)
