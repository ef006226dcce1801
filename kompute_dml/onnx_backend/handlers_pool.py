"""ONNX MaxPool, AveragePool, GlobalMaxPool, GlobalAveragePool, LpPool and GlobalLpPool on
MAX_POOLING2 / AVERAGE_POOLING / LP_POOLING (ops/pooling.py). 2-D and 3-D pooling as they are,
1-D through a (N, C, 1, W) view (kdml.max_pool / avg_pool / lp_pool); kernel_shape,
strides, dilations (AveragePool's on AVERAGE_POOLING1), pads or auto_pad (as Conv's), ceil_mode (the output size rounded up,
the extra windows expressed as end padding, which never wins a maximum and is not counted unless
count_include_pad: ONNX then counts only the padded input, so such an AveragePool's results are
multiplied in place by K / K', the window's size over its taps in the padded input),
count_include_pad. MaxPool's Indices output (storage_order = 0: the flat
row-major index into X, as onnxruntime's) from MAX_POOLING2's UINT32 indices, widened to int64 word
pairs by a JOIN with a zero word; storage_order = 1 (the spatial position counted column-major,
the batch and channel part as it is) reordered first by UINT32 element-wise division, modulus,
multiplication and addition.
MaxPool of int8 / uint8 on MAX_POOLING2's 8-bit rows. BatchNormalization on BATCH_NORMALIZATION (in
training mode with the batch's mean and variance from REDUCE, and the running statistics out;
opset < 9's spatial = 0 and mixed types stay on the CPU)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

import kompute_dml as kdml
from kompute_dml.functional.elementwise import broadcast_view
from kompute_dml.ops.spatial import output_sizes

from .graph import _attr
from .handlers_conv import conv_padding
from .handlers_values import as_device
from .values import DeviceValue, FallbackNeeded, RunStats

if TYPE_CHECKING:
    from .context import NodeContext


def _int64_indices(ctx: NodeContext, ind: kdml.Tensor, shape: tuple[int, ...], stats: RunStats) -> kdml.Tensor:
    """MAX_POOLING2's UINT32 indices as ONNX's int64: word pairs (index, 0) written by one JOIN of
    the indices and a broadcast zero word into the int64 output seen as (M, 2) UINT32."""
    m = math.prod(shape)
    out = ctx.out_tensor(shape, np.int64)
    u32 = kdml.DataType.UINT32
    pairs = kdml.Tensor.trusted(out.buffer, kdml.TensorDesc(u32, (m, 2)), out.offset)
    zero = ctx.to_device(np.zeros((1, 1), np.uint32), stats)
    low = kdml.Tensor.trusted(ind.buffer, kdml.TensorDesc(u32, (m, 1)), ind.offset)
    kdml.join([low, broadcast_view(zero, (m, 1), "zero")], 1, out=pairs, device=ctx.device)
    return out


def _column_major(ctx: NodeContext, ind: kdml.Tensor, spatial: tuple[int, ...], stats: RunStats) -> None:
    """MAX_POOLING2's flat row-major UINT32 indices into X (N, C, D1..Dn) rewritten in place as
    storage_order = 1's: base + the spatial coordinates counted column-major (D1 fastest), base
    = the index less its spatial part (the batch and channel, as they are)."""
    u32 = kdml.DataType.UINT32
    m = math.prod(ind.desc.sizes)
    flat = kdml.Tensor.trusted(ind.buffer, kdml.TensorDesc(u32, (m,)), ind.offset)

    def const(v: int) -> kdml.Tensor:
        return broadcast_view(ctx.to_device(np.array([v], np.uint32), stats), (m,), "index constant")

    def temp() -> kdml.Tensor:
        return ctx.out_tensor((m,), np.uint32)  # a temporary of this node

    dev = ctx.device
    rest = kdml.mod(flat, const(math.prod(spatial)), out=temp(), device=dev)  # the spatial part
    kdml.sub(flat, rest, out=flat, device=dev)  # base
    coords = []
    for d in reversed(spatial[1:]):  # row-major: the last dimension fastest
        coords.append(kdml.mod(rest, const(d), out=temp(), device=dev))
        kdml.div(rest, const(d), out=rest, device=dev)
    coords.append(rest)  # D1's coordinate
    acc = coords[0]  # Dn's coordinate, then Horner towards D1: ((c_n D_{n-1} + c_{n-1}) D_{n-2} + ...)
    for d, c in zip(reversed(spatial[:-1]), coords[1:]):
        kdml.mul(acc, const(d), out=acc, device=dev)
        kdml.add(acc, c, out=acc, device=dev)
    kdml.add(flat, acc, out=flat, device=dev)


def _beyond_padding_factors(sizes: Any, window: Any, strides: Any, dil: Any, start: Any, end: Any,
                            padded: Any) -> np.ndarray | None:
    """K / K' per output position of an AveragePool counting padding whose ceil_mode windows pass
    the padded input: ONNX (onnxruntime) divides by K', the window's taps inside the padded input,
    where AVERAGE_POOLING's IncludePadding divides by the window's size K. None where K' = K."""
    counts = []
    for i, k, s, d, a, e, p in zip(sizes, window, strides, dil, start, end, padded):
        o = np.arange((i + a + e - ((k - 1) * d + 1)) // s + 1)
        taps = o[:, None] * s + np.arange(k)[None, :] * d  # positions in the padded input
        counts.append((taps < p).sum(axis=1))
    inside = counts[0].astype(np.float64)
    for c in counts[1:]:
        inside = np.multiply.outer(inside, c)
    if np.all(inside == math.prod(window)):
        return None
    return math.prod(window) / inside


def _h_pool(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    with_indices = len([o for o in node.output if o]) > 1
    column_major = with_indices and int(_attr(node, "storage_order", 0)) != 0
    x = as_device(ctx, ins[0], stats, node.input[0])
    dt, shape = x.dtype, tuple(x.shape)
    is_max = node.op_type in ("MaxPool", "GlobalMaxPool")
    lp = node.op_type in ("LpPool", "GlobalLpPool")
    q8 = is_max and dt in (np.int8, np.uint8)  # MAX_POOLING2's 8-bit rows
    if (dt not in (np.float32, np.float16) and not q8) or len(shape) not in (3, 4, 5):
        raise FallbackNeeded(f"pooling of {dt} with {len(shape)} dimensions")
    n = len(shape) - 2
    fix = None  # AveragePool's divisors where ceil_mode windows pass the padded input (count_include_pad)
    if node.op_type.startswith("Global"):
        window, strides, dil = tuple(shape[2:]), (1,) * n, (1,) * n
        start, end, include = (0,) * n, (0,) * n, False
    else:
        window = tuple(int(k) for k in _attr(node, "kernel_shape", []))
        if len(window) != n:
            raise ValueError(f"{node.op_type} {node.name!r}: kernel_shape must hold {n} sizes, got {window}")
        strides = tuple(int(s) for s in _attr(node, "strides", [1] * n))
        dil = tuple(int(d) for d in _attr(node, "dilations", [1] * n))
        start, end = conv_padding(node, shape[2:], window, strides, dil)
        include = bool(int(_attr(node, "count_include_pad", 0))) and not lp
        if int(_attr(node, "ceil_mode", 0)):
            extra = []
            for i, k, s, d, a, b in zip(shape[2:], window, strides, dil, start, end):
                span = i + a + b - ((k - 1) * d + 1)
                out = -(-span // s) + 1
                if (out - 1) * s >= i + a:  # the last window would start in the end padding: ONNX drops it
                    out -= 1
                extra.append(max(0, (out - 1) * s + (k - 1) * d + 1 - (i + a + b)))
            padded = tuple(i + a + b for i, a, b in zip(shape[2:], start, end))
            end = tuple(b + e for b, e in zip(end, extra))
            if include and any(extra):
                fix = _beyond_padding_factors(shape[2:], window, strides, dil, start, end, padded)
    out_shape = (shape[0], shape[1], *output_sizes(shape[2:], window, strides, dil, start, end))
    out = ctx.out_tensor(out_shape, dt)
    if is_max:
        ind = ctx.out_tensor(out_shape, np.uint32) if with_indices else None  # a temporary of this node
        kdml.max_pool(x.tensor, window, strides=strides, start_padding=start, end_padding=end, dilations=dil,
                      out=out, indices_out=ind, device=ctx.device)
        if ind is not None:
            if column_major:
                _column_major(ctx, ind, shape[2:], stats)
            return [DeviceValue(out, out_shape, dt),
                    DeviceValue(_int64_indices(ctx, ind, out_shape, stats), out_shape, np.dtype(np.int64))]
    elif lp:  # padding adds nothing to sum |x|^p: ONNX's zero padding and DirectML's alike
        kdml.lp_pool(x.tensor, window, int(_attr(node, "p", 2)), strides=strides, start_padding=start,
                     end_padding=end, dilations=dil, out=out, device=ctx.device)
    else:
        kdml.avg_pool(x.tensor, window, strides=strides, start_padding=start, end_padding=end, dilations=dil,
                      include_padding=include, out=out, device=ctx.device)
        if fix is not None:  # sum / K -> sum / K': one ELEMENT_WISE_MULTIPLY by K / K', in place
            f = ctx.to_device(fix.astype(dt).reshape(1, 1, *fix.shape), stats)
            kdml.mul(out, broadcast_view(f, out_shape, "factors"), out=out, device=ctx.device)
    return [DeviceValue(out, out_shape, dt)]


def batch_norm_node(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats, relu: bool) -> list[Any]:
    """BatchNormalization's output on BATCH_NORMALIZATION (`relu`: its fused ReLU, a following
    Relu node fused: fusions.py); in training mode with the batch's statistics (_training_stats)."""
    training = int(_attr(node, "training_mode", 0)) != 0
    if not training and len([o for o in node.output if o]) > 1:
        raise FallbackNeeded("BatchNormalization's running mean / variance outputs outside training mode")
    if int(_attr(node, "spatial", 1)) != 1:
        raise FallbackNeeded("BatchNormalization spatial = 0")
    x, scale, b, mean, var = (as_device(ctx, ins[i], stats, node.input[i]) for i in range(5))
    if x.dtype not in (np.float32, np.float16) or any(v.dtype != x.dtype for v in (scale, b, mean, var)):
        raise FallbackNeeded("BatchNormalization of mixed or non-float types")
    if len(x.shape) < 1 or len(x.shape) > 8 or 0 in x.shape:
        raise FallbackNeeded("a BatchNormalization input of more than 8 dimensions or empty")
    running: list[Any] = []
    use_mean, use_var = mean.tensor, var.tensor
    if training:
        use_mean, use_var, running = _training_stats(ctx, node, x, mean, var, stats)
    out = ctx.out_tensor(tuple(x.shape), x.dtype)
    y = kdml.batch_norm(x.tensor, use_mean, use_var, scale.tensor, b.tensor, relu=relu,
                        epsilon=float(_attr(node, "epsilon", 1e-5)), out=out, device=ctx.device)
    return [DeviceValue(y, tuple(x.shape), x.dtype), *running]


def _training_stats(ctx: NodeContext, node: onnx.NodeProto, x: Any, mean: Any, var: Any,
                    stats: RunStats) -> tuple[kdml.Tensor, kdml.Tensor, list[Any]]:
    """Training mode (opset 14+), as ONNX's reference: the batch's mean and (population) variance
    per channel (REDUCE AVERAGE over every dimension but 1, of X and of
    ELEMENT_WISE_DIFFERENCE_SQUARE(X, mean)) normalize Y; the running statistics out are
    input * momentum + batch's * (1 - momentum), each step rounded in X's type."""
    if len(x.shape) < 2:
        raise FallbackNeeded("BatchNormalization in training mode of a 1-D input")
    dt, dev, shape = x.dtype, ctx.device, tuple(x.shape)
    c = shape[1]
    axes = [d for d in range(len(shape)) if d != 1]
    kept = tuple(c if d == 1 else 1 for d in range(len(shape)))
    bmean = kdml.reduce_mean(x.tensor, axes=axes, out=ctx.out_tensor(kept, dt), device=dev)
    sq = kdml.difference_square(x.tensor, bmean, out=ctx.out_tensor(shape, dt), device=dev)
    bvar = kdml.reduce_mean(sq, axes=axes, out=ctx.out_tensor(kept, dt), device=dev)
    per_channel = [kdml.Tensor.trusted(t.buffer, kdml.TensorDesc(t.desc.data_type, (c,)), t.offset) for t in (bmean, bvar)]
    momentum = float(_attr(node, "momentum", 0.9))
    keep, take = (ctx.to_device(np.full((1,), v, dt), stats) for v in (momentum, 1.0 - momentum))
    running: list[Any] = []
    for i, (given, batch) in enumerate(zip((mean, var), per_channel), start=1):
        if len(node.output) <= i or not node.output[i]:
            running.append(None)
            continue
        r = kdml.mul(given.tensor, keep, out=ctx.out_tensor((c,), dt), device=dev)
        part = kdml.mul(batch, take, out=ctx.out_tensor((c,), dt), device=dev)
        kdml.add(r, part, out=r, device=dev)
        running.append(DeviceValue(r, (c,), dt))
    while running and running[-1] is None:  # (only the outputs the node has)
        running.pop()
    return per_channel[0], per_channel[1], running


def _h_batch_norm(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    return batch_norm_node(ctx, node, ins, stats, False)


POOL_HANDLERS = {**{op: _h_pool for op in ("MaxPool", "AveragePool", "GlobalMaxPool", "GlobalAveragePool", "LpPool",
                                            "GlobalLpPool")},
                 "BatchNormalization": _h_batch_norm}
