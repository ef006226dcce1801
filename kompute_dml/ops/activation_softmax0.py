"""DirectML's ACTIVATION_SOFTMAX, the first version (DML_ACTIVATION_SOFTMAX_OPERATOR_DESC { InputTensor,
OutputTensor }; from feature level 1_0: 4 dimensions, 4 to 5 from 2_0, 1 to 8 from 3_0; FLOAT32 and
FLOAT16): f(x_i) = exp(x_i - max) / sum(exp(x - max)) over each row of the last dimension of an input
whose effective rank (DimensionCount without its leading sizes of 1) is at most 2.

It is ACTIVATION_SOFTMAX1 with Axes {DimensionCount - 1} and neither of kompute_dml's extensions:
ACTIVATION_SOFTMAX1's plans (ops/activation.py `plan_rows`) and shaders/softmax.comp's smx_* families,
the effective-rank rule of ops/activation_log_softmax.py's first versions (`last_axis`). So its results
are ACTIVATION_SOFTMAX1's bit for bit: error bound, NaN and infinities as docs/softmax.md gives them.
The page allows no aliasing of the output over the input. Validation, in order: DML_BUFFER_TENSOR_DESC
rules and the feature level's table (InvalidArgumentError / UnsupportedError naming the field), the
same DataType, DimensionCount and Sizes (output_tensor.*), the effective rank (input_tensor.sizes), a
non-overlapping output, 32-bit element addressing. No helper (kdml.softmax is ACTIVATION_SOFTMAX1's)
and no ONNX node (Softmax runs on ACTIVATION_SOFTMAX1).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core.dtypes import DataType
from ..core.layout import check_no_overlap
from ..core.tensor_desc import TensorDesc
from ..device.device import Device
from . import contract
from .activation import plan_rows
from .activation_log_softmax import _table, last_axis
from .base import CompiledOperator, validate_tensors
from .elementwise import check_same
from .elementwise_plan import check_addressable
from .spec import OperatorSpec

ACTIVATION_SOFTMAX = _table("ACTIVATION_SOFTMAX", 48, True)


@dataclass(frozen=True)
class ActivationSoftmaxDesc:
    """DML_ACTIVATION_SOFTMAX_OPERATOR_DESC { InputTensor, OutputTensor }: the input has an effective
    rank of at most 2; the softmax of each row of the last dimension (ACTIVATION_SOFTMAX1 with Axes
    {DimensionCount - 1})."""

    input_tensor: TensorDesc
    output_tensor: TensorDesc


def compile_softmax(device: Device, desc: ActivationSoftmaxDesc) -> CompiledOperator:
    support = ACTIVATION_SOFTMAX
    validate_tensors(support, device.feature_level, desc, support.fields, support.outputs)
    check_same(desc, "input_tensor", ("output_tensor",), data_type=True)
    x, y = desc.input_tensor, desc.output_tensor
    axes = last_axis(x)
    check_no_overlap(y.sizes, y.effective_strides, "output_tensor")
    check_addressable(support.fields, (x, y))
    plans = plan_rows(device, x, y, axes)
    return CompiledOperator(device, desc, support, support.inputs, support.outputs, list(plans))


_F4 = TensorDesc(DataType.FLOAT32, (1, 1, 3, 4))  # effective rank 2, 4-D at 1_0
SPECS = (
    OperatorSpec(ActivationSoftmaxDesc, ACTIVATION_SOFTMAX, compile_softmax, (contract.SMX_FAST, contract.SMX_GEN),
                 example=lambda: ActivationSoftmaxDesc(_F4, _F4)),
)
