"""Quantized convolutions on QUANTIZED_LINEAR_CONVOLUTION (ops/quantized_convolution.py,
kdml.quantized_conv): ONNX QLinearConv, and onnxruntime's QDQ format (quantize_static with
QuantFormat.QDQ) DequantizeLinear(x) -> Conv -> QuantizeLinear, fused at prepare (fusions.PATTERNS)
where the Conv's weight is a DequantizeLinear of an int8 / uint8 initializer (per tensor, or per
output channel along axis 0) and its bias absent or a constant:

- the weight's integers, scale and zero point go in as the filter and its scale / zero point;
- a bias that is a DequantizeLinear of an int32 initializer with zero point 0 and scale
  x_scale * w_scale (as quantize_static writes it) goes in as those integers, a bias of zeros
  (whatever its scale) as none; any other bias leaves the chain unfused (its float sum has no
  exact integer form);
- x is the DequantizeLinear's own input (the int8 / uint8 value), its scale and zero point the
  operator's, the QuantizeLinear's scale and zero point the output's (per tensor: others stay
  unfused).

The fused result is the integer convolution with one requantization (docs/quantized_convolution.md):
onnxruntime's own QDQ -> QLinearConv fusion computes the same, where it fuses. A run whose values the
kernel does not take (FallbackNeeded, fusions.Unfused) runs the three nodes one by one (DQ, float Conv and Q, all on
the device)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

import kompute_dml as kdml

from .graph import _attr
from .handlers_conv import conv_padding
from .handlers_values import as_device, device_tensor
from .values import DeviceValue, FallbackNeeded, RunStats, _value_dtype, _value_shape

if TYPE_CHECKING:
    from .context import NodeContext
    from .rep import BackendRep

_Q8 = (np.dtype(np.int8), np.dtype(np.uint8))


def _geometry(node: onnx.NodeProto, x_shape: tuple[int, ...], w_shape: tuple[int, ...]) -> dict[str, Any]:
    n = len(x_shape) - 2
    window = tuple(int(k) for k in _attr(node, "kernel_shape", list(w_shape[2:])))
    strides = tuple(int(s) for s in _attr(node, "strides", [1] * n))
    dil = tuple(int(d) for d in _attr(node, "dilations", [1] * n))
    start, end = conv_padding(node, tuple(x_shape[2:]), window, strides, dil)
    return dict(strides=strides, dilations=dil, start_padding=start, end_padding=end,
                group_count=int(_attr(node, "group", 1)))


def _out_shape(x_shape: tuple[int, ...], w_shape: tuple[int, ...], g: dict[str, Any]) -> tuple[int, ...]:
    from kompute_dml.ops.spatial import output_sizes

    return (x_shape[0], w_shape[0], *output_sizes(tuple(x_shape[2:]), tuple(w_shape[2:]), g["strides"], g["dilations"],
                                                  g["start_padding"], g["end_padding"]))


def _h_qlinear_conv(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    """QLinearConv(x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, B?) on one dispatch; 1-D (3-D x)
    as 2-D of height 1 (views, no copy)."""
    x_shape, w_shape = tuple(_value_shape(ins[0])), tuple(_value_shape(ins[3]))
    if len(x_shape) not in (3, 4) or len(w_shape) != len(x_shape) or _value_dtype(ins[0]) not in _Q8 or \
            _value_dtype(ins[3]) not in _Q8:
        raise FallbackNeeded("QLinearConv other than 1-D or 2-D of int8 / uint8")
    g = _geometry(node, x_shape, w_shape)
    shape = _out_shape(x_shape, w_shape, g)
    dt = _value_dtype(ins[7])
    t = [device_tensor(ctx, v, stats, name) if v is not None and name else None for v, name in zip(ins, node.input)]
    if len(x_shape) == 3:  # [n, c, w] as [n, c, 1, w]: the height's geometry the identity
        t[0], t[3] = _with_height(t[0]), _with_height(t[3])
        g = dict(g, strides=(1, *g["strides"]), dilations=(1, *g["dilations"]), start_padding=(0, *g["start_padding"]),
                 end_padding=(0, *g["end_padding"]))
    out = ctx.out_tensor(shape, dt)
    kdml.quantized_conv(t[0], t[1], t[3], t[4], t[6], x_zero_point=t[2], w_zero_point=t[5],
                        bias=t[8] if len(t) > 8 else None, y_zero_point=t[7],
                        out=_with_height(out) if len(x_shape) == 3 else out, device=ctx.device, **g)
    return [DeviceValue(out, shape, dt)]


def _with_height(t: kdml.Tensor) -> kdml.Tensor:
    """A 3-D tensor [a, b, w] as [a, b, 1, w] (the same elements)."""
    a, b, w = t.desc.sizes
    sa, sb, sw = t.desc.effective_strides
    return kdml.Tensor.trusted(t.buffer, kdml.TensorDesc(t.desc.data_type, (a, b, 1, w), (sa, sb, sw * w, sw)), t.offset)


def _in(node: onnx.NodeProto, i: int) -> str:
    """Input i's name ("" where absent)."""
    return node.input[i] if i < len(node.input) else ""


def _producer(graph: onnx.GraphProto, name: str) -> onnx.NodeProto | None:
    return next((n for n in graph.node if name in n.output), None)


def _dq(graph: onnx.GraphProto, constant: Callable[[str], np.ndarray | None], name: str,
        ) -> tuple[onnx.NodeProto, np.ndarray, np.ndarray, np.ndarray | None] | None:
    """The DequantizeLinear of initializers that makes `name` (through Identity nodes):
    (the node, its integers, scale, zero point), else None."""
    node = _producer(graph, name)
    while node is not None and node.op_type == "Identity":
        node = _producer(graph, node.input[0])
    if node is None or node.op_type != "DequantizeLinear":
        return None
    vals = [constant(_in(node, i)) if _in(node, i) else None for i in range(3)]
    if vals[0] is None or vals[1] is None or (len(node.input) > 2 and node.input[2] and vals[2] is None):
        return None
    return node, vals[0], vals[1], vals[2]


def per_tensor_parameters(nodes: tuple[onnx.NodeProto, ...], constant: Callable[[str], np.ndarray | None]) -> str:
    """Why the nodes' scales and zero points are not all per-tensor initializers ("" where they are)."""
    for node in nodes:
        for i in (1, 2):
            if _in(node, i):
                v = constant(node.input[i])
                if v is None or v.size != 1:
                    return f"{node.op_type}'s scale / zero point is not a per-tensor initializer"
    return ""


def qdq_plan(graph: onnx.GraphProto, constant: Callable[[str], np.ndarray | None],
             nodes: list[onnx.NodeProto]) -> str | dict[str, Any]:
    """Why DequantizeLinear -> Conv -> QuantizeLinear cannot run as one QUANTIZED_LINEAR_CONVOLUTION
    (a message), else the names of the initializers it binds (the bias: None where absent or 0)."""
    dq, conv, q = nodes
    why = per_tensor_parameters((dq, q), constant)
    if why:
        return why
    weights = _dq(graph, constant, conv.input[1])
    if weights is None:
        return "the weight is not a DequantizeLinear of initializers"
    wdq, w, ws, _wz = weights
    if w.dtype not in _Q8 or w.ndim != 4 or ws.dtype != np.float32:
        return f"the weight is {w.dtype} of {w.ndim} dimensions dequantized by {ws.dtype}"
    if ws.size != 1 and (ws.ndim != 1 or ws.size != w.shape[0] or int(_attr(wdq, "axis", 1)) != 0):
        return "the weight's scale is neither per tensor nor per output channel"
    plan: dict[str, Any] = {"w": [_in(wdq, i) for i in range(3)], "bias": None}
    if len(conv.input) > 2 and conv.input[2]:
        bias = _dq(graph, constant, conv.input[2])
        if bias is None:
            return "the bias is not a DequantizeLinear of initializers"
        bdq, b, bs, bz = bias
        acc_scale = np.float32(constant(dq.input[1]).reshape(())) * ws.reshape(-1)  # type: ignore[union-attr]
        exact = (b.dtype == np.int32 and (bz is None or not bz.any())
                 and np.array_equal(np.broadcast_to(bs.reshape(-1), acc_scale.shape), acc_scale))
        if exact:
            plan["bias"] = bdq.input[0]
        elif ((b.astype(np.int64) - (0 if bz is None else bz.astype(np.int64))) != 0).any():
            return "the bias is not in the accumulator's units (x_scale * w_scale) and not 0"
    return plan


def static_constants(rep: BackendRep) -> Callable[[str], np.ndarray | None]:
    """The prepared model's constant of a name (None for any other value), for the static checks."""
    return lambda n: rep.constant_host(n) if n in rep.constants else None


def run_constants(prepared: Any) -> Callable[[str], np.ndarray | None]:
    """The same at run time, through a node context's prepared model."""
    return lambda n: prepared.constant_host(n) if prepared.is_constant(n) else None


def check_qdq_conv(rep: BackendRep, nodes: list[onnx.NodeProto]) -> str:
    if rep._declared_rank(nodes[1].input[0]) not in (None, 4):
        return "not a 2-D convolution"
    x_t = rep._elem_dtype(nodes[0].input[0])
    if x_t is not None and x_t not in _Q8:
        return f"the quantized input is {x_t}"
    plan = qdq_plan(rep.graph, static_constants(rep), nodes)
    return plan if isinstance(plan, str) else ""


def run_qdq_conv(ctx: NodeContext, nodes: list[onnx.NodeProto], lookup: Callable[[str], Any],
                 stats: RunStats) -> list[Any]:
    dq, conv, q = nodes
    prepared = ctx.prepared
    plan = qdq_plan(prepared.graph, run_constants(prepared), nodes)
    if isinstance(plan, str):
        raise FallbackNeeded(plan)  # Fusion.run: the chain runs unfused
    x = as_device(ctx, lookup(dq.input[0]), stats, dq.input[0])
    if x.dtype not in _Q8 or len(x.shape) != 4:
        raise FallbackNeeded(f"x is {x.dtype} of shape {x.shape}")
    w_shape = prepared.constant_host(plan["w"][0]).shape
    g = _geometry(conv, x.shape, w_shape)
    shape = _out_shape(x.shape, w_shape, g)
    yz = _in(q, 2)
    dt = prepared.constant_host(yz).dtype if yz else np.dtype(np.uint8)

    def up(name: str) -> kdml.Tensor | None:  # initializers: uploaded once per model
        return ctx.to_device(prepared.constant_host(name), stats, name) if name else None

    y = kdml.quantized_conv(x.tensor, up(dq.input[1]), up(plan["w"][0]), up(plan["w"][1]), up(q.input[1]),
                            x_zero_point=up(_in(dq, 2)), w_zero_point=up(plan["w"][2]),
                            bias=up(plan["bias"]) if plan["bias"] else None, y_zero_point=up(yz),
                            out=ctx.out_tensor(shape, dt), device=ctx.device, **g)
    return [DeviceValue(y, shape, dt)]


QCONV_HANDLERS = {"QLinearConv": _h_qlinear_conv}
