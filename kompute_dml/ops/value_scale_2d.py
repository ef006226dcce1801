"""DirectML's VALUE_SCALE_2D (DML_VALUE_SCALE_2D_OPERATOR_DESC { InputTensor, OutputTensor, Scale,
ChannelCount, Bias }): Output = Scale * Input + Bias[c] over an input { N, C, H, W }, one bias per
channel (the page: ELEMENT_WISE_IDENTITY's ScaleBias with a bias per channel).

Thin: one ELEMENT_WISE_IDENTITY-with-ScaleBias dispatch per channel (C is 1 or 3), each ACTIVATION_LINEAR's
function (shaders/float_unary.comp FN_LINEAR, Alpha = Scale, Beta = Bias[c]) on the element-wise plans of
the channel's { N, 1, H, W } view, its tensors' offset words moved to the channel (ops/elementwise_extra
.float_plans). So each element is x * scale rounded to float32 in integer code (never flushed), then
+ bias[c] by the device's float32 add; FLOAT16 widened exactly and rounded once: bit for bit numpy's
float32 (x * scale) + bias[c].

Tensor support as the page gives it: 4 dimensions, FLOAT32 and FLOAT16, from 1_0. Validation, in order:
DML_BUFFER_TENSOR_DESC rules and the table (InvalidArgumentError / UnsupportedError naming the field),
the same DataType and Sizes (output_tensor.*), channel_count 1 or 3 and equal to the input's channels
(the page), bias a sequence of channel_count real numbers, scale a real number, none NaN (kompute_dml's
rule: ACTIVATION_LINEAR's parameters), a non-overlapping output, 32-bit element addressing. The page does
not allow aliasing the output over the input. No ONNX node (ImageScaler, deprecated, is not placed).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.dtypes import DataType
from ..core.errors import invalid
from ..core.ints import as_int
from ..core.layout import check_no_overlap
from ..core.registry import FL, FLOATS, OperatorSupport, row
from ..core.tensor_desc import TensorDesc
from ..device.device import Device
from ..device.memory import Tensor
from . import contract
from .activation import _unary
from .base import validate_tensors
from .elementwise import CompiledElementWise, check_same
from .elementwise_extra import float_plans, linear_words
from .elementwise_plan import check_addressable
from .spec import OperatorSpec

VALUE_SCALE_2D = OperatorSupport("VALUE_SCALE_2D", 65, (
    row(FL.FL_1_0, ("input_tensor", "input", (4, 4), FLOATS), ("output_tensor", "output", (4, 4), FLOATS)),))


@dataclass(frozen=True)
class ValueScale2DDesc:
    """DML_VALUE_SCALE_2D_OPERATOR_DESC { InputTensor, OutputTensor, Scale, ChannelCount, Bias }: output
    = scale * input + bias[c] over { N, C, H, W }; channel_count (1 or 3) = C = len(bias)."""

    input_tensor: TensorDesc
    output_tensor: TensorDesc
    scale: float
    channel_count: int
    bias: tuple[float, ...]

    def __post_init__(self) -> None:
        b = self.bias
        if not isinstance(b, tuple) and isinstance(b, Iterable) and not isinstance(b, (str, bytes)):
            object.__setattr__(self, "bias", tuple(b))


def _real(v: Any, field: str) -> float:
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise invalid(field, f"must be a real number, got {type(v).__name__} {v!r}")
    if np.isnan(np.float32(v)):
        raise invalid(field, f"must be a number, not NaN, got {v!r}")
    return float(v)


def compile_value_scale_2d(device: Device, desc: ValueScale2DDesc) -> CompiledElementWise:
    support = VALUE_SCALE_2D
    validate_tensors(support, device.feature_level, desc, support.fields, support.outputs)
    check_same(desc, "input_tensor", ("output_tensor",), data_type=True)
    x, y = desc.input_tensor, desc.output_tensor
    c = as_int(desc.channel_count, "channel_count")
    if c not in (1, 3):
        raise invalid("channel_count", f"must be 1 or 3 (the page), got {c}")
    if x.sizes[1] != c:
        raise invalid("channel_count", f"must equal input_tensor's channels (sizes[1] = {x.sizes[1]}), got {c}")
    if not isinstance(desc.bias, tuple) or len(desc.bias) != c:
        raise invalid("bias", f"must be a sequence of channel_count ({c}) numbers, got {desc.bias!r}")
    scale = _real(desc.scale, "scale")
    bias = [_real(b, f"bias[{i}]") for i, b in enumerate(desc.bias)]
    check_no_overlap(y.sizes, y.effective_strides, "output_tensor")
    check_addressable(support.fields, (x, y))
    n, _, h, w = x.sizes
    xs, ys = x.effective_strides, y.effective_strides
    plans: list[Any] = []
    for ch in range(c):  # the channel's view; its first element's offset added to the plans' offset words
        xv = TensorDesc(x.data_type, (n, 1, h, w), xs)
        yv = TensorDesc(y.data_type, (n, 1, h, w), ys)
        shift = {0: ch * xs[1], 1: ch * ys[1]}
        for p in float_plans(device, "linear", xv, yv, linear_words(scale, bias[ch]), vector=c == 1):
            push = list(p.push)
            for word, idx, _ in p.offset_slots:
                push[word] += shift[idx]
            plans.append(dataclasses.replace(p, push=tuple(push)))
    return CompiledElementWise(device, desc, support, support.inputs, support.outputs, plans)


def value_scale_2d(x: Any, scale: float, bias: Any, *, out: Tensor | None = None, device: Device | None = None) -> Tensor:
    """scale * x + bias[c] over x of { N, C, H, W } (C 1 or 3; FLOAT32 / FLOAT16; DML_VALUE_SCALE_2D): a new
    Tensor of x's shape and type, or `out`."""
    b = tuple(bias) if isinstance(bias, Iterable) else (bias,)
    return _unary(ValueScale2DDesc, x, out, device, scale=scale, channel_count=len(b), bias=b)


_X = TensorDesc(DataType.FLOAT32, (2, 3, 4, 5))
SPECS = (
    OperatorSpec(ValueScale2DDesc, VALUE_SCALE_2D, compile_value_scale_2d, (contract.FLOAT_UNARY["linear"],),
                 helpers=("value_scale_2d",), example=lambda: ValueScale2DDesc(_X, _X, 0.5, 3, (1.0, -2.0, 0.25))),
)
