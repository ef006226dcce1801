"""DirectML's ACTIVATION_PARAMETERIZED_RELU: f(x, slope) = x for x >= 0, else slope * x, element
by element with a slope tensor of the input's sizes (broadcast by 0 strides), on the element-wise
plans with shaders/elementwise.comp (contract.EW_EXT's ew_prelu_<t>: the input as A, the slope as B).

Exact: FLOAT32's product correctly rounded in integer code (subnormal results included, on any
device), FLOAT16's computed exactly in float32 and rounded once; -0 counts as x >= 0 (kept);
a NaN input stays NaN (quieted), a NaN slope gives NaN for x < 0. Integers (INT32 / INT16 /
INT8, from 5_1): the low bits of the product in the type (MULTIPLY's wrap).

Support (the page's table): FLOAT32 / FLOAT16 4 dimensions at 1_0, 4 to 5 at 2_0, 1 to 8 from
3_0; INT32, INT16, INT8 too from 5_1. The three tensors must share DataType, DimensionCount and
Sizes (InvalidArgumentError naming the field). ONNX PRelu (slope unidirectionally broadcast to
X; float32 / float16 / int32 / int8 / int16 inputs) runs on it through `kdml.prelu`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..core.dtypes import DataType
from ..core.registry import FL, FLOATS, OperatorSupport, row
from ..core.tensor_desc import TensorDesc
from ..device.device import Device
from ..device.memory import Tensor
from ..functional.elementwise import _operands, _run
from . import contract
from .base import CompiledOperator
from .elementwise import _compile, _validate, type_code
from .onnx_types import NodeTypes
from .spec import OnnxOp, OperatorSpec

_INTS = frozenset({DataType.INT32, DataType.INT16, DataType.INT8})
_FIELDS = ("input_tensor", "slope_tensor", "output_tensor")
ACTIVATION_PARAMETERIZED_RELU = OperatorSupport("ACTIVATION_PARAMETERIZED_RELU", 42, tuple(
    row(level, *((f, "output" if f == "output_tensor" else "input", dims, types) for f in _FIELDS))
    for level, dims, types in ((FL.FL_1_0, (4, 4), FLOATS), (FL.FL_2_0, (4, 5), FLOATS), (FL.FL_3_0, (1, 8), FLOATS),
                               (FL.FL_5_1, (1, 8), FLOATS | _INTS))))


@dataclass(frozen=True)
class ActivationParameterizedReluDesc:
    """DML_ACTIVATION_PARAMETERIZED_RELU_OPERATOR_DESC { InputTensor, SlopeTensor, OutputTensor }:
    x for x >= 0, else slope * x (exact); the same DataType, DimensionCount and Sizes for all
    three. In place allowed."""

    input_tensor: TensorDesc
    slope_tensor: TensorDesc
    output_tensor: TensorDesc


def compile_parameterized_relu(device: Device, desc: ActivationParameterizedReluDesc) -> CompiledOperator:
    support = ACTIVATION_PARAMETERIZED_RELU
    _validate(device, desc, support, _FIELDS)
    fam = contract.EW_EXT
    return _compile(device, desc, support, fam, fam.name(op="prelu", t=type_code(desc.input_tensor.data_type, True)),
                    in_place=True)


def prelu(x: Any, slope: Any, *, out: Tensor | None = None, device: Device | None = None) -> Tensor:
    """x for x >= 0, else slope * x (DML_ACTIVATION_PARAMETERIZED_RELU), the slope numpy-broadcast
    with x: a new Tensor of the broadcast shape, or `out`."""
    dev, (tx, ts) = _operands((x, slope), ("x", "slope"), device)
    return _run(ActivationParameterizedReluDesc, [tx, ts], ("input_tensor", "slope_tensor"), None, out, dev)


_ONNX_TYPES = frozenset(d.numpy_dtype for d in FLOATS | _INTS)


def _prelu_rule(t: NodeTypes) -> str:
    """ONNX PRelu on the device: X and slope of one type the operator takes."""
    types = {t.elem(i) for i in range(min(t.inputs, 2))} - {None}
    if len(types) > 1:
        return "X and slope types differ"
    bad = [d for d in types if d not in _ONNX_TYPES]
    return f"type {bad[0]} is not one ACTIVATION_PARAMETERIZED_RELU takes" if bad else ""


_F4 = TensorDesc(DataType.FLOAT32, (1, 2, 3, 4))
SPECS = (OperatorSpec(ActivationParameterizedReluDesc, ACTIVATION_PARAMETERIZED_RELU, compile_parameterized_relu,
                      (contract.EW_EXT,), helpers=("prelu",),
                      onnx=(OnnxOp("PRelu", "", "prelu", kind="binary", check=_prelu_rule),),
                      example=lambda: ActivationParameterizedReluDesc(_F4, _F4, _F4)),)
