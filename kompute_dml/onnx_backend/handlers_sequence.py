"""Device handler of ONNX ReverseSequence on REVERSE_SUBSEQUENCES (ops/reverse_subsequences.py):
Axis = time_axis, the lengths (sequence_lens, int64 or int32 of shape [batch]) read on the device
as UINT32 through a view: each length's low word (an int64's first word, little-endian) along
batch_axis, stride 0 along every other dimension (an input may broadcast). ONNX asks every length
to be within [0, the time axis' size]: such a length's low word is the length itself; a length
beyond it is clamped (DirectML's rule; onnxruntime refuses it). Types the operator takes (float32,
float16, int32, int16, int8, uint32, uint16, uint8, and bool as uint8); others, and empty or
0/1-dimensional inputs, run on the CPU."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

import kompute_dml as kdml

from .graph import _attr
from .handlers_math import _operands
from .handlers_values import BOOL, dml_numpy
from .values import DeviceValue, FallbackNeeded, RunStats, _value_dtype, _value_shape

if TYPE_CHECKING:
    from .context import NodeContext

_TYPES = frozenset(np.dtype(t) for t in (np.float32, np.float16, np.int32, np.int16, np.int8, np.uint32, np.uint16,
                                         np.uint8, np.bool_))
_LENGTH_TYPES = {np.dtype(np.int64): 2, np.dtype(np.int32): 1}  # words per length


def _h_reverse_sequence(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    x, lens = ins[0], ins[1]
    shape, dt = tuple(_value_shape(x)), _value_dtype(x)
    if len(shape) < 2 or 0 in shape:
        raise FallbackNeeded("an empty or rank < 2 input")
    if dt not in _TYPES and dt != BOOL:
        raise FallbackNeeded(f"type {dt} is not one REVERSE_SUBSEQUENCES takes")
    words = _LENGTH_TYPES.get(np.dtype(_value_dtype(lens)))
    if words is None:
        raise FallbackNeeded(f"sequence_lens of type {_value_dtype(lens)}")
    batch, time = int(_attr(node, "batch_axis", 1)), int(_attr(node, "time_axis", 0))
    if {batch, time} != {0, 1}:
        raise ValueError(f"ReverseSequence {node.name!r}: batch_axis and time_axis must be 0 and 1, got {batch}, {time}")
    if tuple(_value_shape(lens)) != (shape[batch],):
        raise ValueError(f"ReverseSequence {node.name!r}: sequence_lens must have shape ({shape[batch]},), "
                         f"got {tuple(_value_shape(lens))}")
    tx, tl = _operands(ctx, node, [x, lens], stats)
    step = words * tl.desc.effective_strides[0]
    sizes = tuple(1 if d == time else s for d, s in enumerate(shape))
    strides = tuple(step if d == batch else 0 for d in range(len(shape)))
    view = kdml.Tensor.trusted(tl.buffer, kdml.TensorDesc(kdml.DataType.UINT32, sizes, strides), tl.offset)
    out = ctx.out_tensor(shape, dml_numpy(dt))
    y = kdml.reverse_subsequences(tx, view, time, out=out, device=ctx.device)
    return [DeviceValue(y, shape, dt)]


SEQUENCE_HANDLERS = {"ReverseSequence": _h_reverse_sequence}
