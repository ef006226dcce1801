"""ONNX Conv on DirectML CONVOLUTION (ops/convolution.py): 1-D, 2-D and 3-D, float32 and float16;
kernel_shape (checked against the weight's), strides, dilations, group, pads (ONNX's begin...,
end... order) or auto_pad: VALID (no padding), SAME_UPPER / SAME_LOWER (output = ceil(in / stride),
the odd padding at the end / at the start), NOTSET (the pads). An optional bias of output-channel
values. ConvTranspose on CONVOLUTION's BACKWARD direction: weight (Cin, Cout / group, window...),
output_padding, output_shape (the padding derived from it) and auto_pad as ONNX defines them.

allow_half_precision (DirectML's DML_EXECUTION_FLAG_ALLOW_HALF_PRECISION_COMPUTATION): the prepared
model's flag `ctx.prepared.allow_half_precision` (absent: False; Backend.prepare's option) compiles
every float32 Conv with it, so the device policy may run it on the float16 tensor-core kernel
(ops/conv_coop.py); where it does, a constant weight goes up once as float16 (`half_weight`: the
kernel then reads it without converting it at every tile load)."""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

import kompute_dml as kdml
from kompute_dml.ops.convolution import backward_output_sizes, output_sizes

from .graph import _attr, attr_text
from .half_precision import allow_half
from .handlers_activation import fused_activation
from .handlers_values import as_device
from .values import DeviceValue, FallbackNeeded, RunStats, _value_dtype

if TYPE_CHECKING:
    from .context import NodeContext


def conv_padding(node: onnx.NodeProto, in_sizes: tuple[int, ...], window: tuple[int, ...], strides: tuple[int, ...],
                 dilations: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The start and end padding of each spatial axis, as ONNX's Conv defines them."""
    n = len(in_sizes)
    auto = attr_text(node, "auto_pad", "NOTSET")
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        start, end = [], []
        for i, k, s, d in zip(in_sizes, window, strides, dilations):
            total = max(0, (-(-i // s) - 1) * s + (k - 1) * d + 1 - i)
            small, big = total // 2, total - total // 2
            start.append(small if auto == "SAME_UPPER" else big)
            end.append(big if auto == "SAME_UPPER" else small)
        return tuple(start), tuple(end)
    if auto == "VALID":
        return (0,) * n, (0,) * n
    if auto != "NOTSET":
        raise ValueError(f"Conv {node.name!r}: auto_pad {auto!r} is not one ONNX defines")
    pads = [int(p) for p in _attr(node, "pads", [0] * (2 * n))]
    if len(pads) != 2 * n:
        raise ValueError(f"Conv {node.name!r}: pads must hold {2 * n} values, got {len(pads)}")
    return tuple(pads[:n]), tuple(pads[n:])


# per prepared model: its constant float32 Conv weights uploaded as float16 (half_weight)
_HALF_WEIGHTS: weakref.WeakKeyDictionary[Any, dict[str, kdml.Tensor]] = weakref.WeakKeyDictionary()


def half_weight(ctx: NodeContext, name: str, groups: int) -> DeviceValue | None:
    """Under allow_half_precision, the constant float32 Conv weight `name` as float16, uploaded once
    per prepared model, where the device policy runs the Conv on the tensor cores (the only kernel
    that takes a float16 filter with float32 tensors); None elsewhere (the float32 weight is used)."""
    if not allow_half(ctx) or not ctx.is_constant(name):
        return None
    arr = ctx.prepared.constant_host(name)
    if arr.dtype != np.float32 or arr.ndim not in (3, 4, 5) or groups < 1 or arr.shape[0] % groups:
        return None
    family = ctx.device.policy.conv_family_for(half=True, coutg=arr.shape[0] // groups, klen=math.prod(arr.shape[1:]),
                                               backward=False)
    if family not in ("coopmat", "coopmat-emulated"):
        return None
    cache = _HALF_WEIGHTS.setdefault(ctx.prepared, {})
    if name not in cache:
        cache[name] = ctx.device.tensor(arr.astype(np.float16))
    return DeviceValue(cache[name], arr.shape, np.dtype(np.float16))


def _operands(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats,
              w16: DeviceValue | None = None) -> tuple[Any, ...]:
    """Conv's and ConvTranspose's common reading: x and w on the device (one float type, 3 to 5
    dimensions; `w16`: the weight as float16 for float32 x, half_weight's), the window (checked
    against kernel_shape), strides, dilations, the optional bias."""
    x = as_device(ctx, ins[0], stats, node.input[0])
    w = w16 if w16 is not None and x.dtype == np.float32 else as_device(ctx, ins[1], stats, node.input[1])
    dt = x.dtype
    if dt not in (np.float32, np.float16) or (w.dtype != dt and w is not w16):
        raise FallbackNeeded(f"{node.op_type} of {dt} and {w.dtype} (CONVOLUTION takes FLOAT32 / FLOAT16)")
    r = len(x.shape)
    if r not in (3, 4, 5) or len(w.shape) != r:
        raise FallbackNeeded(f"a {node.op_type} of {r} dimensions")
    n = r - 2
    window = tuple(int(k) for k in w.shape[2:])
    shape = _attr(node, "kernel_shape", None)
    if shape is not None and tuple(int(k) for k in shape) != window:
        raise ValueError(f"{node.op_type} {node.name!r}: kernel_shape {tuple(shape)} is not the weight's window {window}")
    strides = tuple(int(s) for s in _attr(node, "strides", [1] * n))
    dilations = tuple(int(d) for d in _attr(node, "dilations", [1] * n))
    bias = None
    if len(ins) > 2 and ins[2] is not None and node.input[2]:
        bias = as_device(ctx, ins[2], stats, node.input[2]).tensor
    return x, w, dt, n, window, strides, dilations, bias


def _h_conv(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    return run_conv(ctx, node, ins, stats)


def run_conv(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats, activation: Any = None) -> list[Any]:
    """The Conv node on CONVOLUTION, its output through `activation` (a fused activation descriptor:
    the Conv+<activation> fusions), under the prepared model's allow_half_precision."""
    groups = int(_attr(node, "group", 1))
    w16 = half_weight(ctx, node.input[1], groups) if len(node.input) > 1 else None
    x, w, dt, _n, window, strides, dilations, bias = _operands(ctx, node, ins, stats, w16)
    start, end = conv_padding(node, tuple(x.shape[2:]), window, strides, dilations)
    out_shape = (x.shape[0], w.shape[0], *output_sizes(
        tuple(x.shape[2:]), window, strides, dilations, start, end))
    out = ctx.out_tensor(out_shape, dt)
    y = kdml.conv(x.tensor, w.tensor, bias, strides=strides, dilations=dilations, start_padding=start,
                  end_padding=end, groups=groups, activation=activation, allow_half_precision=allow_half(ctx), out=out,
                  device=ctx.device)
    return [DeviceValue(y, out_shape, dt)]


def run_conv_activation(ctx: NodeContext, nodes: list[onnx.NodeProto], lookup: Callable[[str], Any],
                        stats: RunStats) -> list[Any]:
    """Conv -> <activation> (fusions.PATTERNS: Relu, LeakyRelu, Clip, Sigmoid, HardSigmoid, HardSwish, Swish,
    Tanh, Elu) in one dispatch: CONVOLUTION with the fused activation, whose bits are the unfused
    chain's (conv_common.glsl applies the standalone operator's function to the rounded Conv output;
    ReLU commutes with the rounding); FallbackNeeded (a fed Clip bound) runs the chain unfused."""
    conv, act = nodes
    ins = [lookup(name) if name else None for name in conv.input]
    x = ins[0]
    act_ins = [None] + [lookup(name) if name else None for name in act.input[1:]]  # input 0: the Conv's output
    desc = fused_activation(ctx, act, act_ins, stats, _value_dtype(x))
    return run_conv(ctx, conv, ins, stats, activation=desc)


def transpose_padding(node: onnx.NodeProto, in_sizes: tuple[int, ...], window: tuple[int, ...],
                      strides: tuple[int, ...], dilations: tuple[int, ...],
                      out_pad: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """ConvTranspose's start and end padding: from output_shape or auto_pad SAME_* (the total
    padding that gives the output shape, its odd unit at the end for SAME_UPPER, else at the
    start; negative where output_shape is beyond the full result: the output extends past it,
    as onnxruntime's, the total split by floor division as the ONNX reference splits it), VALID
    (none) or pads."""
    n = len(in_sizes)
    auto = attr_text(node, "auto_pad", "NOTSET")
    if auto not in ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"):
        raise ValueError(f"ConvTranspose {node.name!r}: auto_pad {auto!r} is not one ONNX defines")
    shape = _attr(node, "output_shape", None)
    if shape is not None or auto in ("SAME_UPPER", "SAME_LOWER"):
        want = ([int(v) for v in shape][-n:] if shape is not None else [i * s for i, s in zip(in_sizes, strides)])
        start, end = [], []
        for i, k, s, d, op, o in zip(in_sizes, window, strides, dilations, out_pad, want):
            total = s * (i - 1) + op + (k - 1) * d + 1 - o  # negative: output_shape beyond the full result
            big, small = total - total // 2, total // 2
            start.append(small if auto == "SAME_UPPER" else big)
            end.append(big if auto == "SAME_UPPER" else small)
        return tuple(start), tuple(end)
    if auto == "VALID":
        return (0,) * n, (0,) * n
    pads = [int(p) for p in _attr(node, "pads", [0] * (2 * n))]
    if len(pads) != 2 * n:
        raise ValueError(f"ConvTranspose {node.name!r}: pads must hold {2 * n} values, got {len(pads)}")
    return tuple(pads[:n]), tuple(pads[n:])


def _h_conv_transpose(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    x, w, dt, n, window, strides, dilations, bias = _operands(ctx, node, ins, stats)
    out_pad = tuple(int(p) for p in _attr(node, "output_padding", [0] * n))
    start, end = transpose_padding(node, tuple(x.shape[2:]), window, strides, dilations, out_pad)
    groups = int(_attr(node, "group", 1))
    # negative end padding (output_shape beyond the full result, ONNX's node test and onnxruntime's
    # case): the full result starts the output, whose elements past it no input reaches (0, or
    # the bias); DirectML's paddings are unsigned. A negative start would put the result at an
    # element offset inside the output, which a binding cannot express: the CPU takes it.
    if min(start) < 0:
        raise FallbackNeeded(f"ConvTranspose {node.name!r}: output_shape beyond the full result at its start")
    after = tuple(max(-p, 0) for p in end)
    end = tuple(max(p, 0) for p in end)
    inner = (x.shape[0], w.shape[1] * groups, *backward_output_sizes(
        tuple(x.shape[2:]), window, strides, dilations, start, end, out_pad))
    out_shape = (*inner[:2], *(m + a for m, a in zip(inner[2:], after)))
    out = ctx.out_tensor(out_shape, dt)
    window_out = out
    if any(after):
        kt = out.desc.data_type
        if bias is None:
            kdml.fill(out.desc.sizes, 0, kt, out=out, device=ctx.device)
        else:  # the bias over every channel's elements: a broadcast view of it
            st = [0] * len(out_shape)
            st[1] = bias.desc.effective_strides[0]
            kdml.copy(kdml.Tensor(bias.buffer, kdml.TensorDesc(kt, out.desc.sizes, tuple(st)), bias.offset),
                      out=out, device=ctx.device)
        window_out = kdml.Tensor(out.buffer, kdml.TensorDesc(kt, inner, out.desc.effective_strides), out.offset)
    kdml.conv_transpose(x.tensor, w.tensor, bias, strides=strides, dilations=dilations, start_padding=start,
                        end_padding=end, output_padding=out_pad, groups=groups, out=window_out, device=ctx.device)
    return [DeviceValue(out, out_shape, dt)]


CONV_HANDLERS = {"Conv": _h_conv, "ConvTranspose": _h_conv_transpose}
