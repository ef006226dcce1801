"""com.microsoft's QOperator-format element-wise and pooling nodes (onnxruntime's quantize_static
with QuantFormat.QOperator writes them beside QLinearConv / QLinearMatMul) as the float steps
their definition names, each an operator of its own:

    QLinearAdd / QLinearMul(A, A_scale, A_zp, B, B_scale, B_zp, C_scale, C_zp):
        C = saturate(round_half_even((dq(A) op dq(B)) / C_scale) + C_zp)
    QLinearSigmoid / QLinearLeakyRelu(X, X_scale, X_zp, Y_scale, Y_zp[, alpha]): Y = q(f(dq(X)))
    QLinearGlobalAveragePool(X, x_scale, x_zp, y_scale, y_zp), channels_last 0: Y = q(mean(dq(X)))
    QLinearAveragePool(X, x_scale, x_zp, y_scale, y_zp; AveragePool's attributes), channels_last 0: likewise
    QLinearSoftmax(X, X_scale, X_zp, Y_scale, Y_zp; axis, opset): Y = q(softmax(dq(X)))
    QLinearConcat(Y_scale, Y_zp, (X, X_scale, X_zp)...; axis): Y = q(concat(dq(X)...))
    QGemm(A, a_scale, a_zp, B, b_scale, b_zp, C, y_scale, y_zp): Y = [q](alpha dq(A) dq(B) + C a_scale b_scale)

dq(v) = v_scale * (v - v_zp) in float32 (ELEMENT_WISE_DEQUANTIZE_LINEAR), the float step
(ELEMENT_WISE_ADD / MULTIPLY, ACTIVATION_SIGMOID / LEAKY_RELU, the global pooling), q on
ELEMENT_WISE_QUANTIZE_LINEAR (the division by the scale, half-even rounding, saturation). That is
onnxruntime's reference arithmetic for the binary nodes (its scalar kernel, one float32 rounding per
step); its vector kernels and its lookup tables (Sigmoid, LeakyRelu) and its integer sums (the
pooling) may land one quantization step away where a value falls on a rounding boundary
(tests/test_onnx_qlinear.py measures both); QGemm's float sums are not its integer ones either.
A zero point left out is 0 of the input's type."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

import kompute_dml as kdml

from ..functional.constants import device_constant
from .graph import _attr
from .values import DeviceValue, FallbackNeeded, RunStats, _value_dtype, _value_shape

if TYPE_CHECKING:
    from .context import NodeContext


def _step(ctx: NodeContext, op: str, node: onnx.NodeProto, ins: list[tuple[Any, str]], stats: RunStats,
          role: str = "", **attrs: Any) -> Any:
    """The device handler of ONNX `op` on `ins` (value, name): the graph's names where a value is the
    node's own input (uploads and constants are kept by name), else one per step and role (a run
    keeps uploads by name: two steps of one name would share one)."""
    from .handlers import handler_for  # (the handler tables import this module)

    base = f"{node.output[0]}/{op}{role}"
    step = onnx.helper.make_node(op, [name or f"{base}:{i}" for i, (_, name) in enumerate(ins)], [base],
                                 name=f"{node.name} ({op}{role} step)", **attrs)
    return handler_for(step)(ctx, step, [v for v, _ in ins], stats)[0]


def _operand(ins: list[Any], node: onnx.NodeProto, i: int) -> tuple[Any, str]:
    return ins[i], node.input[i]


def _zp(ctx: NodeContext, ins: list[Any], node: onnx.NodeProto, i: int, like: Any) -> tuple[Any, str]:
    """Input i (a zero point), or a device 0 of `like`'s type where it is left out."""
    if i < len(ins) and ins[i] is not None:
        return ins[i], node.input[i]
    dt = _value_dtype(like)
    return DeviceValue(device_constant(ctx.device, np.zeros((), dt)), (), dt), ""


def _dq(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], first: int, stats: RunStats) -> Any:
    x = ins[first]
    if _value_dtype(x) not in (np.int8, np.uint8):
        raise FallbackNeeded(f"{node.op_type} of {_value_dtype(x)}")
    return _step(ctx, "DequantizeLinear", node, [_operand(ins, node, first), _operand(ins, node, first + 1),
                                                 _zp(ctx, ins, node, first + 2, x)], stats, str(first))


def _q(ctx: NodeContext, node: onnx.NodeProto, x: Any, ins: list[Any], first: int, stats: RunStats,
       like: int = 0) -> list[Any]:
    """x quantized by input `first` (the scale) and the zero point after it (left out: 0 of input
    `like`'s type)."""
    return [_step(ctx, "QuantizeLinear", node, [(x, ""), _operand(ins, node, first),
                                                _zp(ctx, ins, node, first + 1, ins[like])], stats)]


def _binary(op: str) -> Any:
    def run(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
        a, b = _dq(ctx, node, ins, 0, stats), _dq(ctx, node, ins, 3, stats)
        return _q(ctx, node, _step(ctx, op, node, [(a, ""), (b, "")], stats), ins, 6, stats)
    return run


def _unary(op: str, **defaults: Any) -> Any:
    def run(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
        attrs = {k: float(_attr(node, k, v)) for k, v in defaults.items()}
        x = _dq(ctx, node, ins, 0, stats)
        return _q(ctx, node, _step(ctx, op, node, [(x, "")], stats, **attrs), ins, 3, stats)
    return run


def _h_average_pool(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    """QLinearAveragePool: ONNX AveragePool's attributes on the dequantized input."""
    if int(_attr(node, "channels_last", 0)):
        raise FallbackNeeded("QLinearAveragePool with channels_last")
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute if a.name != "channels_last"}
    x = _dq(ctx, node, ins, 0, stats)
    return _q(ctx, node, _step(ctx, "AveragePool", node, [(x, "")], stats, **attrs), ins, 3, stats)


def _h_global_average_pool(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    if int(_attr(node, "channels_last", 0)):
        raise FallbackNeeded("QLinearGlobalAveragePool with channels_last")
    x = _dq(ctx, node, ins, 0, stats)
    return _q(ctx, node, _step(ctx, "GlobalAveragePool", node, [(x, "")], stats), ins, 3, stats)


def _h_softmax(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    """QLinearSoftmax (attribute `opset`: the Softmax it stands for; from 13 over the one axis `axis`,
    before over every axis from `axis` on)."""
    x = _dq(ctx, node, ins, 0, stats)
    rank = max(len(x.shape), 1)
    new = int(_attr(node, "opset", 13)) >= 13
    axis = int(_attr(node, "axis", -1 if new else 1))
    axis = axis + rank if axis < 0 else axis
    if not 0 <= axis < rank:
        raise ValueError(f"QLinearSoftmax {node.name!r}: axis {_attr(node, 'axis', 1)} is outside [-{rank}, {rank - 1}]")
    y = kdml.softmax(x.tensor, axes=(axis,) if new else tuple(range(axis, rank)),
                     out=ctx.out_tensor(x.shape, np.float32), device=ctx.device)
    return _q(ctx, node, DeviceValue(y, x.shape, np.dtype(np.float32)), ins, 3, stats)


def _h_concat(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    """QLinearConcat(Y_scale, Y_zp, then X, X_scale, X_zp per input): Concat of the dequantized inputs."""
    if len(ins) < 5 or (len(ins) - 2) % 3:
        raise ValueError(f"QLinearConcat {node.name!r}: Y_scale, Y_zero_point and (X, X_scale, X_zero_point) triples, "
                         f"got {len(ins)} inputs")
    # (an input empty along the axis is left out, as Concat leaves it: Phi-3's rotary pass-through)
    parts = [(_dq(ctx, node, ins, i, stats), "") for i in range(2, len(ins), 3) if 0 not in _value_shape(ins[i])]
    joined = _step(ctx, "Concat", node, parts, stats, axis=int(_attr(node, "axis", 0)))
    return _q(ctx, node, joined, ins, 0, stats, like=2)


def _h_qgemm(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    """QGemm(A, a_scale, a_zp, B, b_scale, b_zp[, C, y_scale, y_zp]): GEMM of dq(A) and dq(B) (alpha,
    transA, transB), C (int32 at scale a_scale b_scale) as float32 C a_scale b_scale computed on the
    host; quantized where y_scale is given, else the float32 result."""
    c = ins[6] if len(ins) > 6 else None
    if any(isinstance(v, DeviceValue) for v in (ins[1], ins[4], c)):
        raise FallbackNeeded("QGemm's scales or C computed on the device")
    operands = [(_dq(ctx, node, ins, 0, stats), ""), (_dq(ctx, node, ins, 3, stats), "")]
    if c is not None:
        scale = np.asarray(ctx.host(ins[1], stats), np.float32) * np.asarray(ctx.host(ins[4], stats), np.float32)
        operands.append(((np.asarray(ctx.host(c, stats)).astype(np.float32) * scale).astype(np.float32), ""))
    y = _step(ctx, "Gemm", node, operands, stats, alpha=float(_attr(node, "alpha", 1.0)),
              transA=int(_attr(node, "transA", 0)), transB=int(_attr(node, "transB", 0)))
    return _q(ctx, node, y, ins, 7, stats) if len(ins) > 7 and ins[7] is not None else [y]


QLINEAR_HANDLERS = {
    "QGemm": _h_qgemm,
    "QLinearSoftmax": _h_softmax,
    "QLinearAveragePool": _h_average_pool,
    "QLinearConcat": _h_concat,
    "QLinearAdd": _binary("Add"),
    "QLinearMul": _binary("Mul"),
    "QLinearSigmoid": _unary("Sigmoid"),
    "QLinearLeakyRelu": _unary("LeakyRelu", alpha=0.01),
    "QLinearGlobalAveragePool": _h_global_average_pool,
}
