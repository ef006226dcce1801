"""ONNX's reductions on DirectML REDUCE (ops/reduce.py): ReduceSum, ReduceMean, ReduceMax, ReduceMin,
ReduceProd, ReduceSumSquare, ReduceL1, ReduceL2, ReduceLogSum, ReduceLogSumExp (axes an attribute
up to opset 12 / 17, ReduceSum's an input from 13, the others' from 18; keepdims;
noop_with_empty_axes; negative axes), ArgMax and ArgMin (axis, keepdims; INT64 indices; the first
index of the extreme, or with select_last_index = 1 the last: REDUCE over the axis reversed by
SLICE1, mapped back by a GATHER); TopK on TOP_K1 (ops/top_k.py); LpNormalization. An axes input
must be a constant known on the host (FallbackNeeded otherwise, also decided at prepare by the
OnnxOp's rule); an empty or 0-dimensional input runs on the CPU."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

import kompute_dml as kdml
from kompute_dml.ops.reduce import ONNX_REDUCE

from .graph import _attr
from .handlers_values import device_tensor, dml_numpy
from .int64_sum import sum_int64
from .values import DeviceValue, FallbackNeeded, RunStats, _value_dtype, _value_shape

if TYPE_CHECKING:
    from .context import NodeContext


def _axes(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[int] | None:
    """The node's axes as given (attribute or input, read on the host: a fed or device-computed
    input makes a plan raise FallbackNeeded, and the model runs node by node); None where none
    are given."""
    if node.op_type in ("ArgMax", "ArgMin"):
        return [int(_attr(node, "axis", 0))]
    if len(ins) > 1 and len(node.input) > 1 and node.input[1]:
        return [int(a) for a in np.asarray(ctx.host(ins[1], stats)).reshape(-1)]
    axes = _attr(node, "axes", None)
    return None if axes is None else [int(a) for a in axes]


def _h_reduce(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    x = ins[0]
    shape = tuple(_value_shape(x))
    if not shape or 0 in shape:
        raise FallbackNeeded("an empty or 0-dimensional input")
    dt = _value_dtype(x)
    axes = _axes(ctx, node, ins, stats)
    keepdims = bool(int(_attr(node, "keepdims", 1)))
    t = device_tensor(ctx, x, stats, node.input[0])
    if not axes:
        if int(_attr(node, "noop_with_empty_axes", 0)):  # the input unchanged
            out = ctx.out_tensor(shape, dml_numpy(dt))
            return [DeviceValue(kdml.copy(t, out=out, device=ctx.device), shape, dt)]
        axes = list(range(len(shape)))
    red = {a % len(shape) for a in axes}
    out_shape = tuple(1 if d in red else s for d, s in enumerate(shape)) if keepdims else \
        tuple(s for d, s in enumerate(shape) if d not in red)
    if node.op_type == "ReduceSum" and dt.kind in "iu" and dt.itemsize == 8:  # (REDUCE takes no 64-bit integers)
        return [sum_int64(ctx, t, shape, red, out_shape, dt, stats)]
    out_dt = np.dtype(np.int64) if node.op_type in ("ArgMax", "ArgMin") else dt
    out = ctx.out_tensor(out_shape, dml_numpy(out_dt))
    helper = getattr(kdml, ONNX_REDUCE[node.op_type])
    kw = {"index_type": kdml.DataType.INT64} if out_dt != dt else {}
    if out_dt != dt and int(_attr(node, "select_last_index", 0)) == 1:
        return [_last_index(ctx, t, shape, axes[0] % len(shape), keepdims, out, helper, stats, out_shape)]
    return [DeviceValue(helper(t, axes, keepdims, out=out, device=ctx.device, **kw), out_shape, out_dt)]


def _last_index(ctx: NodeContext, t: Any, shape: tuple[int, ...], axis: int, keepdims: bool, out: Any, helper: Any,
                stats: RunStats, out_shape: tuple[int, ...]) -> DeviceValue:
    """ArgMax / ArgMin with select_last_index = 1: REDUCE's first index of the extreme in the axis
    reversed (SLICE1 with a negative stride) is the last one counted from the end, mapped back to
    n - 1 - i by a GATHER of the reversed positions."""
    dev, n, r = ctx.device, shape[axis], len(shape)
    rev = kdml.slice1(t, [0] * r, list(shape), [-1 if d == axis else 1 for d in range(r)],
                      out=ctx.out_tensor(shape, t.desc.data_type.numpy_dtype), device=dev)
    first = helper(rev, [axis], keepdims, out=ctx.out_tensor(out_shape, np.int64), device=dev,
                   index_type=kdml.DataType.INT64)
    back = ctx.to_device(np.arange(n - 1, -1, -1, dtype=np.int64), stats)
    kdml.gather(back, first, 0, out=out, device=dev)
    return DeviceValue(out, out_shape, np.dtype(np.int64))


def _h_topk(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    """TopK on TOP_K1 (ops/top_k.py): k from the input (opset 10+; read on the host: a fed or
    device-computed k makes a plan raise FallbackNeeded, and the model runs node by node, where k
    is read at each run) or the attribute (opset 1), `axis`, `largest`; `sorted` = 0 leaves the
    order free, TOP_K1's sorted one is returned; the int64 indices are the UINT64 index output
    over the same bytes."""
    x = ins[0]
    shape = tuple(_value_shape(x))
    if not shape or 0 in shape:
        raise FallbackNeeded("an empty or 0-dimensional input")
    if len(node.input) > 1 and node.input[1]:
        k = int(np.asarray(ctx.host(ins[1], stats)).reshape(-1)[0])
    else:
        k = int(_attr(node, "k", 0))
    axis = int(_attr(node, "axis", -1)) % len(shape)
    if not 1 <= k <= shape[axis]:
        raise FallbackNeeded(f"k = {k} outside [1, {shape[axis]}]")
    dt = _value_dtype(x)
    out_shape = (*shape[:axis], k, *shape[axis + 1:])
    values = ctx.out_tensor(out_shape, dml_numpy(dt))
    indices = ctx.out_tensor(out_shape, np.int64)
    u64 = kdml.Tensor.trusted(indices.buffer, kdml.TensorDesc(kdml.DataType.UINT64, indices.desc.sizes,
                                                              indices.desc.strides), indices.offset)
    kdml.top_k(device_tensor(ctx, x, stats, node.input[0]), k, axis=axis, largest=bool(int(_attr(node, "largest", 1))),
               out=(values, u64), device=ctx.device)
    return [DeviceValue(values, out_shape, dt), DeviceValue(indices, out_shape, np.dtype(np.int64))]


def _h_lp_norm(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    """LpNormalization (p 1 or 2, one axis) as onnxruntime computes it: x / ||x||_p over the axis,
    0 where that norm is 0 (REDUCE L1 / L2 kept as size 1, ELEMENT_WISE_DIVIDE, then
    ELEMENT_WISE_IF on the norm's equality to 0)."""
    x = ins[0]
    shape = tuple(_value_shape(x))
    if not shape or 0 in shape:
        raise FallbackNeeded("an empty or 0-dimensional input")
    p = int(_attr(node, "p", 2))
    if p not in (1, 2):
        raise ValueError(f"LpNormalization {node.name!r}: p must be 1 or 2, got {p}")
    dt = _value_dtype(x)
    axis = int(_attr(node, "axis", -1)) % len(shape)
    t = device_tensor(ctx, x, stats, node.input[0])
    dev = ctx.device
    nshape = tuple(1 if d == axis else s for d, s in enumerate(shape))
    norm = (kdml.reduce_l2 if p == 2 else kdml.reduce_l1)(t, axes=[axis], out=ctx.out_tensor(nshape, dt), device=dev)
    q = kdml.div(t, norm, out=ctx.out_tensor(shape, dt), device=dev)
    zero = ctx.to_device(np.zeros((1,) * len(shape), dt), stats)
    is_zero = kdml.equal(norm, zero, out=ctx.out_tensor(nshape, np.uint8), device=dev)
    y = kdml.where(is_zero, zero, q, out=ctx.out_tensor(shape, dt), device=dev)
    return [DeviceValue(y, shape, dt)]


REDUCE_HANDLERS = {**{op_type: _h_reduce for op_type in ONNX_REDUCE}, "TopK": _h_topk, "LpNormalization": _h_lp_norm}
