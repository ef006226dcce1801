"""ONNX NonZero on DirectML's NONZERO_COORDINATES (ops/nonzero_coordinates.py): the coordinates of the nonzero
elements in row-major order, as onnxruntime and numpy.nonzero give them, [rank, count] int64.

The input, 1 to 5 dimensions, goes in as 4 or 5 (leading sizes 1) with N = its rank coordinate columns; bool as
its bytes, 64-bit integers as the larger of their two 32-bit words (REDUCE MAX: nonzero where either is). The count
is read on the host: the output's shape depends on it, as on every implementation (onnxruntime's CUDA provider
reads it too), so a whole-graph plan stops here (FallbackNeeded) and the model runs node by node, the rest of its
nodes on the device. The output's two 32-bit words per coordinate are joined (JOIN of the [count, rank] columns read
transposed and zeros) into the INT64 tensor's bytes. Float64 inputs, other ranks and empty inputs run on the CPU."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

import kompute_dml as kdml
from kompute_dml.functional import compile_cached
from kompute_dml.ops.nonzero_coordinates import NonzeroCoordinatesDesc

from .handlers_values import device_tensor
from .values import DeviceValue, FallbackNeeded, RunStats, _value_dtype, _value_shape

if TYPE_CHECKING:
    from .context import NodeContext

_U32 = kdml.DataType.UINT32


def _h_nonzero(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    x = ins[0]
    shape, dt = tuple(_value_shape(x)), np.dtype(_value_dtype(x))
    r = len(shape)
    if not 1 <= r <= 5 or 0 in shape:
        raise FallbackNeeded(f"NonZero of {r} dimensions, sizes {shape}")
    if dt.kind == "f" and dt.itemsize == 8:
        raise FallbackNeeded("a float64 input")
    dev = ctx.device
    t = device_tensor(ctx, x, stats, node.input[0])
    if dt.itemsize == 8:  # either 32-bit word nonzero
        st = t.desc.effective_strides
        words = kdml.Tensor.trusted(t.buffer, kdml.TensorDesc(_U32, (*shape, 2), (*(2 * s for s in st), 1)), t.offset)
        t = kdml.reduce_max(words, [r], False, out=ctx.out_tensor(shape, np.uint32), device=dev)
    dims = 4 if r <= 4 else 5
    st = t.desc.effective_strides
    lead = st[0] * shape[0]  # (any stride for the added sizes of 1)
    view = kdml.Tensor.trusted(t.buffer, kdml.TensorDesc(t.desc.data_type, (1,) * (dims - r) + shape,
                                                         (lead,) * (dims - r) + tuple(st)), t.offset)
    m = int(np.prod(shape))
    count = ctx.out_tensor((1,) * dims, np.uint32)
    coords = ctx.out_tensor((1,) * (dims - 2) + (m, r), np.uint32)
    compile_cached(dev, NonzeroCoordinatesDesc(view.desc, count.desc, coords.desc)).execute([view], [count, coords])
    c = int(np.asarray(ctx.host(DeviceValue(count, (1,), np.dtype(np.uint32)), stats)).reshape(-1)[0])
    if c == 0:
        return [np.zeros((r, 0), np.int64)]
    columns = kdml.Tensor.trusted(coords.buffer, kdml.TensorDesc(_U32, (r, c, 1), (1, r, 1)), coords.offset)
    zeros = kdml.fill((r, c, 1), 0, _U32, out=ctx.out_tensor((r, c, 1), np.uint32), device=dev)
    out = ctx.out_tensor((r, c), np.int64)
    kdml.join([columns, zeros], 2, out=kdml.Tensor.trusted(out.buffer, kdml.TensorDesc(_U32, (r, c, 2)), out.offset),
              device=dev)
    return [DeviceValue(out, (r, c), np.dtype(np.int64))]


NONZERO_HANDLERS = {"NonZero": _h_nonzero}
