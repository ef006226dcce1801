"""ONNX ConvInteger on DirectML CONVOLUTION_INTEGER (ops/convolution_integer.py): 1-D (as 2-D
with a height of 1) and 2-D, int8 / uint8 data and weights, an optional scalar x zero point and a
scalar or per-output-channel w zero point, kernel_shape, strides, dilations, group, pads or
auto_pad as for Conv (handlers_conv.conv_padding); the INT32 result exact (sums modulo 2^32).
`quantize_dynamic` writes DynamicQuantizeLinear -> ConvInteger -> Cast -> Mul for a float Conv:
each of them runs on the device. MatMulInteger alone (not in the Cast -> Mul chain fusion_quant.py
runs) as a 1 x 1 CONVOLUTION_INTEGER (matmul_integer)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

import kompute_dml as kdml
from kompute_dml.ops.spatial import output_sizes

from .graph import _attr
from .handlers_conv import conv_padding
from .handlers_values import as_device, strided
from .values import DeviceValue, FallbackNeeded, RunStats, _value_dtype, _value_shape

if TYPE_CHECKING:
    from .context import NodeContext

_Q8 = (np.dtype(np.int8), np.dtype(np.uint8))


def _as_2d(v: DeviceValue) -> DeviceValue:
    """A 3-D (N, C, W) value viewed as (N, C, 1, W)."""
    st = v.tensor.desc.effective_strides
    return strided(v, (v.shape[0], v.shape[1], 1, v.shape[2]), (st[0], st[1], 0, st[2]))


def _zero_points(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats,
                 counts: tuple[int, int] | None = None) -> list[Any]:
    """The optional zero points (inputs 2 and 3) on the device, each of its data's type (else
    ValueError); `counts`: how many values each may hold besides one (else the CPU runs the node)."""
    zps = []
    for i in (2, 3):
        if len(ins) > i and ins[i] is not None and node.input[i]:
            if _value_dtype(ins[i]) != _value_dtype(ins[i - 2]):
                raise ValueError(f"{node.op_type} {node.name!r}: input {i}'s type differs from input {i - 2}'s")
            size = math.prod(_value_shape(ins[i]))
            if counts is not None and size not in (1, counts[i - 2]):
                raise FallbackNeeded(f"{node.op_type}'s input {i} of {size} zero points")
            zps.append(as_device(ctx, ins[i], stats, node.input[i]).tensor)
        else:
            zps.append(None)
    return zps


def _h_conv_integer(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    if _value_dtype(ins[0]) not in _Q8 or _value_dtype(ins[1]) not in _Q8:
        raise FallbackNeeded(f"ConvInteger of {_value_dtype(ins[0])} and {_value_dtype(ins[1])} (int8 / uint8 only)")
    shape, wshape = _value_shape(ins[0]), _value_shape(ins[1])
    if len(shape) not in (3, 4) or len(wshape) != len(shape):
        raise FallbackNeeded(f"a ConvInteger of {len(shape)} dimensions (1-D and 2-D run on the device)")
    if 0 in shape or 0 in wshape:
        raise FallbackNeeded("an empty tensor")
    n = len(shape) - 2
    window = tuple(int(k) for k in wshape[2:])
    kernel = _attr(node, "kernel_shape", None)
    if kernel is not None and tuple(int(k) for k in kernel) != window:
        raise ValueError(f"ConvInteger {node.name!r}: kernel_shape {tuple(kernel)} is not the weight's window {window}")
    strides = tuple(int(s) for s in _attr(node, "strides", [1] * n))
    dilations = tuple(int(d) for d in _attr(node, "dilations", [1] * n))
    start, end = conv_padding(node, tuple(shape[2:]), window, strides, dilations)
    x, w = (as_device(ctx, ins[i], stats, node.input[i]) for i in range(2))
    zps = _zero_points(ctx, node, ins, stats)
    if n == 1:
        x, w = _as_2d(x), _as_2d(w)
        strides, dilations, start, end = (1, *strides), (1, *dilations), (0, *start), (0, *end)
    out_shape = (shape[0], wshape[0], *output_sizes(tuple(x.shape[2:]), tuple(w.shape[2:]), strides, dilations, start, end))
    if any(s < 1 for s in out_shape):
        raise ValueError(f"ConvInteger {node.name!r}: the window is larger than the padded input")
    out = ctx.out_tensor(out_shape, np.int32)
    y = kdml.conv_integer(x.tensor, w.tensor, zps[0], zps[1], strides=strides, dilations=dilations,
                          start_padding=start, end_padding=end, group_count=int(_attr(node, "group", 1)), out=out,
                          device=ctx.device)
    onnx_shape = out_shape if n == 2 else (out_shape[0], out_shape[1], out_shape[3])
    if n == 1:
        y = kdml.Tensor(y.buffer, kdml.TensorDesc(kdml.DataType.INT32, onnx_shape), y.offset)
    return [DeviceValue(y, onnx_shape, np.dtype(np.int32))]


def matmul_integer(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    """ONNX MatMulInteger alone (INT32 out) as a 1 x 1 CONVOLUTION_INTEGER: A (..., M, K) seen as the
    input (batch, K, M, 1), the 2-D B (K, N) as the filter (N, K, 1, 1), the result (..., M, N) as the
    output (batch, N, M, 1), all through strides; A's zero point a scalar, B's a scalar or one per
    column (the filter's per-output-channel one). Per-row A zero points, batched or 1-D B, 1-D A and
    A's batch dimensions that do not merge into one stride: the CPU."""
    a_shape, b_shape = tuple(_value_shape(ins[0])), tuple(_value_shape(ins[1]))
    if _value_dtype(ins[0]) not in _Q8 or _value_dtype(ins[1]) not in _Q8:
        raise FallbackNeeded(f"MatMulInteger of {_value_dtype(ins[0])} and {_value_dtype(ins[1])} (int8 / uint8 only)")
    if len(a_shape) < 2 or len(b_shape) < 2 or any(d != 1 for d in b_shape[:-2]):
        raise FallbackNeeded("MatMulInteger of a 1-D operand or a batched B")
    (m, k), n = a_shape[-2:], b_shape[-1]
    if b_shape[-2] != k:
        raise ValueError(f"MatMulInteger {node.name!r}: {a_shape} and {b_shape} do not multiply")
    if 0 in a_shape or 0 in b_shape:
        raise FallbackNeeded("an empty tensor")
    a, b = (as_device(ctx, ins[i], stats, node.input[i]) for i in range(2))
    zps = _zero_points(ctx, node, ins, stats, (1, n))
    st = tuple(a.tensor.desc.effective_strides)
    batch = a_shape[:-2]
    if any(st[i] != st[i + 1] * batch[i + 1] for i in range(len(batch) - 1) if batch[i] > 1):
        raise FallbackNeeded("A's batch dimensions do not merge into one stride")
    count = math.prod(batch)
    x = strided(a, (count, k, m, 1), (st[len(batch) - 1] if batch else 0, st[-1], st[-2], 0))
    bs = tuple(b.tensor.desc.effective_strides)
    w = strided(b, (n, k, 1, 1), (bs[-1], bs[-2], 0, 0))
    shape = (*batch, m, n)
    y = ctx.out_tensor(shape, np.int32)
    view = kdml.Tensor.trusted(y.buffer, kdml.TensorDesc(kdml.DataType.INT32, (count, n, m, 1), (m * n, 1, n, 1)), y.offset)
    kdml.conv_integer(x.tensor, w.tensor, zps[0], zps[1], out=view, device=ctx.device)
    return [DeviceValue(y, shape, np.dtype(np.int32))]


CONV_INTEGER_HANDLERS = {"ConvInteger": _h_conv_integer, "MatMulInteger": matmul_integer}
