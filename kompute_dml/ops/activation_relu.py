"""DirectML's ACTIVATION_RELU (DML_ACTIVATION_RELU_OPERATOR_DESC): f(x) = max(0, x), element by
element, on the element-wise plans (ops/elementwise_plan.py) with its function in
shaders/float_unary.comp (FN_RELU).

The result is decided on the bits, so it is exact in both types: every negative input and -0
give +0, NaN passes through with its bits (ONNX Relu's and numpy.maximum's NaN), +inf stays.
kompute_dml implements the page's float rows; its 5_1 row's INT32 / INT16 / INT8 are left out.
An output may not alias the input yet (the page allows in-place execution).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..core.dtypes import DataType
from ..core.layout import check_no_overlap
from ..core.registry import FL, FLOATS, OperatorSupport, row
from ..core.tensor_desc import TensorDesc
from ..device.device import Device
from ..device.memory import Tensor
from . import contract
from .activation import _unary
from .base import CompiledOperator, validate_tensors
from .elementwise import CompiledElementWise, check_same, type_code
from .elementwise_plan import check_addressable, device_limits, plan_elementwise
from .spec import OnnxOp, OperatorSpec

FLOAT_UNARY = "relu"  # its family in shaders/float_unary.comp (ops/contract reads this line)

# From the page: 4 dimensions at 1_0, 4 to 5 at 2_0, 1 to 8 from 3_0; FLOAT32 and FLOAT16.
ACTIVATION_RELU = OperatorSupport("ACTIVATION_RELU", 44, tuple(
    row(level, ("input_tensor", "input", dims, FLOATS), ("output_tensor", "output", dims, FLOATS))
    for level, dims in ((FL.FL_1_0, (4, 4)), (FL.FL_2_0, (4, 5)), (FL.FL_3_0, (1, 8)))))


_F32_4D = TensorDesc(DataType.FLOAT32, (1, 2, 3, 4))


@dataclass(frozen=True)
class ActivationReluDesc:
    """DML_ACTIVATION_RELU_OPERATOR_DESC { InputTensor, OutputTensor }: f(x) = max(0, x); the
    same DataType, DimensionCount and Sizes for both."""

    input_tensor: TensorDesc
    output_tensor: TensorDesc


def compile_relu(device: Device, desc: ActivationReluDesc) -> CompiledOperator:
    support = ACTIVATION_RELU
    validate_tensors(support, device.feature_level, desc, support.fields, support.outputs)
    check_same(desc, "input_tensor", ("output_tensor",), data_type=True)
    x, y = desc.input_tensor, desc.output_tensor
    check_no_overlap(y.sizes, y.effective_strides, "output_tensor")
    check_addressable(support.fields, (x, y))
    family = contract.FLOAT_UNARY[FLOAT_UNARY]
    t = type_code(x.data_type, True)
    plans = plan_elementwise(family, family.name(t=t, vec=""), (x, y), **device_limits(device),
                             vector=family.name(t=t, vec="_v"))
    return CompiledElementWise(device, desc, support, support.inputs, support.outputs, list(plans))


def relu(x: Any, *, out: Tensor | None = None, device: Device | None = None) -> Tensor:
    """max(0, x) (DML_ACTIVATION_RELU): exact; -0 -> +0, NaN kept."""
    return _unary(ActivationReluDesc, x, out, device)


SPECS = (OperatorSpec(ActivationReluDesc, ACTIVATION_RELU, compile_relu, (contract.FLOAT_UNARY[FLOAT_UNARY],),
                      helpers=("relu",), onnx=(OnnxOp("Relu", "", "relu", kind="float_unary"),),
                      example=lambda: ActivationReluDesc(_F32_4D, _F32_4D)),)
