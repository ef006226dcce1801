"""ELEMENT_WISE_NEGATE of signed integers (INT8, INT16, INT32, INT64: DML_ELEMENT_WISE_NEGATE_OPERATOR_DESC's
rows beside FLOAT32 and FLOAT16, from 5_0): -x in two's complement, the most negative value
wrapping to itself (as numpy's and ONNX Runtime's Neg), computed as ELEMENT_WISE_SUBTRACT's
0 - x on elementwise.comp (`ew_sub_b<bits>`: the same wrap-around bits for either signedness),
the zero an operator constant read with stride 0. ops/elementwise_unary.py compiles the float rows
and sends these here: an int64 position or bucket index negated in a transformer's relative
attention (SEW-D, DeBERTa) stays on the device."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..core.registry import D, OperatorSupport
from ..core.tensor_desc import TensorDesc
from ..functional.constants import device_constant
from . import contract
from .elementwise import CompiledElementWiseInPlace, type_code
from .elementwise_plan import device_limits, plan_elementwise
from .plan_chain import rebind

if TYPE_CHECKING:
    from ..device.device import Device
    from .base import CompiledOperator

SIGNED = frozenset({D.INT8, D.INT16, D.INT32, D.INT64})


def compile_integer_negate(device: Device, desc: Any, support: OperatorSupport) -> CompiledOperator:
    """`desc` (checked: the same type and sizes for both tensors, a signed integer type) as one
    subtraction from a zero constant."""
    x, y = desc.input_tensor, desc.output_tensor
    zero = device_constant(device, np.zeros(1, x.data_type.numpy_dtype))
    broadcast = TensorDesc(x.data_type, x.sizes, (0,) * x.dimension_count)
    family = contract.EW_SUB
    plans = plan_elementwise(family, family.name(t=type_code(x.data_type, False)), (broadcast, x, y),
                             **device_limits(device))
    # plan_elementwise binds (a, b, output) as 0, 1, 2; the operator's list is (input, output, zero)
    plans = [rebind(p, {0: 2, 1: 0, 2: 1}) for p in plans]
    return CompiledElementWiseInPlace(device, desc, support, support.inputs, support.outputs, list(plans), [zero])
