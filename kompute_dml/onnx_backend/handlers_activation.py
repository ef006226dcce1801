"""Device handlers of ONNX's parameterized activations and Clip (ops/activation_params.py):
LeakyRelu (alpha), Elu (alpha), Celu (alpha), Selu (alpha, gamma), HardSigmoid (alpha, beta),
HardSwish (alpha 1/6, beta 0.5), ThresholdedRelu (alpha), Shrink (bias, lambd -> threshold): each
node's attributes (the ONNX defaults where absent) become the operator's float32 parameters. Mish: its
function body's three operators.

Clip: min / max attributes up to opset 10, optional inputs from 11, read on the host (a fed bound
makes the model run node by node, read at each run). Integer Clip (opset 12 on)
runs on CLIP's integer rows where its bounds survive CLIP's FLOAT fields (the OnnxOp's rule). An absent input bound is
the type's lowest / highest finite value, as onnxruntime takes it (so +-inf is clipped to +-65504
in float16, +-3.4e38 in float32); an absent opset-6 attribute is float32's (float16 infinities
stay); a NaN bound runs on the CPU. Where min > max onnxruntime gives max
everywhere, DirectML's max(Min, min(x, Max)) gives Min: the handler passes Min = Max = max."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

import kompute_dml as kdml

from ..ops.activation_params import integer_bound
from .graph import _attr
from .handlers_math import _operands, _out
from .handlers_nn import _dev, _floats, _opset
from .values import DeviceValue, FallbackNeeded, RunStats, _value_dtype, _value_shape

if TYPE_CHECKING:
    from .context import NodeContext

SELU_ALPHA = 1.67326319217681884765625
SELU_GAMMA = 1.05070102214813232421875


def _attr_unary(helper: str, attrs: dict[str, tuple[str, float]]) -> Any:
    """kdml.<helper> on the one input, each ONNX attribute (default where absent) as a keyword."""
    fn = getattr(kdml, helper)

    def handler(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
        dt = _floats(node, ins[:1])
        shape = _value_shape(ins[0])
        kw = {k: float(_attr(node, a, d)) for a, (k, d) in attrs.items()}
        y = fn(_dev(ctx, node, ins, 0, stats), out=ctx.out_tensor(shape, dt), device=ctx.device, **kw)
        return [DeviceValue(y, shape, dt)]
    return handler


def _bound(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], i: int, stats: RunStats, dt: np.dtype,
           default: float) -> float:
    if i >= len(node.input) or not node.input[i] or i >= len(ins) or ins[i] is None:
        return default
    v = np.asarray(ctx.host(ins[i], stats)).reshape(-1)  # a fed bound: read per run, node by node
    if v.size != 1:
        raise ValueError(f"Clip {node.name!r}: the {('min', 'max')[i - 1]} input is not a scalar")
    if np.issubdtype(dt, np.integer) and integer_bound(float(v[0]), kdml.DataType.from_numpy(dt)) != int(v[0]):
        raise FallbackNeeded(f"the {('min', 'max')[i - 1]} bound {v[0]} is not exact through a float32 (CLIP's FLOAT field)")
    return float(v[0])


def _h_clip(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    dt = _value_dtype(ins[0])
    integer = np.issubdtype(dt, np.integer)
    if not integer:
        dt = _floats(node, ins[:1])
    elif 0 in _value_shape(ins[0]):
        raise FallbackNeeded("an empty tensor")
    shape = _value_shape(ins[0])
    lo, hi = clip_bounds(ctx, node, ins, stats, dt)
    y = kdml.clip(_dev(ctx, node, ins, 0, stats), min=lo, max=hi, out=ctx.out_tensor(shape, dt), device=ctx.device)
    return [DeviceValue(y, shape, dt)]


def clip_bounds(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats, dt: Any) -> tuple[float, float]:
    """Clip's (min, max) for input type `dt` as the module docstring says (FallbackNeeded: a NaN
    bound, an integer bound CLIP's float32 field cannot hold)."""
    integer = np.issubdtype(dt, np.integer)
    if _opset(ctx.prepared.model) < 11:  # float attributes: float32's limits by default (inf stays inf in float16)
        f32 = np.finfo(np.float32)
        lo, hi = float(_attr(node, "min", float(f32.min))), float(_attr(node, "max", float(f32.max)))
    else:
        info: Any = np.iinfo(dt) if integer else np.finfo(dt)
        lo, hi = float(info.min), float(info.max)
        lo, hi = _bound(ctx, node, ins, 1, stats, dt, lo), _bound(ctx, node, ins, 2, stats, dt, hi)
    if np.isnan(lo) or np.isnan(hi):
        raise FallbackNeeded("a NaN bound")
    if lo > hi:  # onnxruntime: max everywhere
        lo = hi
    return lo, hi


def variadic(helper: str, mean: bool = False) -> Any:
    """Min / Max / Sum / Mean: kdml.<helper> folded over the inputs left to right (numpy-broadcast,
    one type); Mean divides the sum by the input count last, as onnx's reference does."""
    fn = getattr(kdml, helper)

    def handler(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
        dt = _value_dtype(ins[0])
        if any(_value_dtype(v) != dt for v in ins[1:]):
            raise ValueError(f"{node.op_type} {node.name!r}: operand types differ")
        tensors = _operands(ctx, node, ins, stats)
        shape, out = _out(ctx, ins, dt)
        if len(tensors) == 1:
            return [DeviceValue(kdml.copy(tensors[0], out=out, device=ctx.device), shape, dt)]
        acc, acc_shape = tensors[0], _value_shape(ins[0])
        for i in range(1, len(tensors)):
            acc_shape = tuple(np.broadcast_shapes(acc_shape, _value_shape(ins[i])))
            last = i == len(tensors) - 1 and not mean
            dest = out if last else ctx.out_tensor(acc_shape, out.desc.data_type.numpy_dtype)
            acc = fn(acc, tensors[i], out=dest, device=ctx.device)
        if mean:
            n = ctx.to_device(np.array([len(tensors)], dt), stats, None)
            acc = kdml.div(acc, n, out=out, device=ctx.device)
        return [DeviceValue(acc, shape, dt)]
    return handler


def _h_mish(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    """Mish (opset 18): x * tanh(softplus(x)), its function body as ONNX defines it, in three dispatches
    (ACTIVATION_SOFTPLUS, ACTIVATION_TANH, ELEMENT_WISE_MULTIPLY; DirectML has no Mish): the bits of
    the body's three nodes as this backend runs them (not onnxruntime's, whose Softplus and Tanh round
    otherwise). torch.onnx writes it from opset 18 (the dynamo exporter); below, the three nodes themselves."""
    dt = _floats(node, ins[:1])
    shape = _value_shape(ins[0])
    x = _dev(ctx, node, ins, 0, stats)
    sp = kdml.softplus(x, out=ctx.out_tensor(shape, dt), device=ctx.device)
    th = kdml.tanh(sp, out=ctx.out_tensor(shape, dt), device=ctx.device)
    return [DeviceValue(kdml.mul(x, th, out=ctx.out_tensor(shape, dt), device=ctx.device), shape, dt)]


# the node types CONVOLUTION fuses (onnx_backend/fusions.py's Conv+<type>): their descriptors' classes
# and attributes, as the handlers above and the float_unary kind read them
_FUSED: dict[str, tuple[str, dict[str, tuple[str, float]]]] = {
    "Relu": ("ActivationReluDesc", {}),
    "LeakyRelu": ("ActivationLeakyReluDesc", {"alpha": ("alpha", 0.01)}),
    "Elu": ("ActivationEluDesc", {"alpha": ("alpha", 1.0)}),
    "HardSigmoid": ("ActivationHardSigmoidDesc", {"alpha": ("alpha", 0.2), "beta": ("beta", 0.5)}),
    "HardSwish": ("ActivationHardSwishDesc", {}),
    "Sigmoid": ("ActivationSigmoidDesc", {}),
    "Tanh": ("ActivationTanhDesc", {}),
    "Clip": ("ElementWiseClipDesc", {}),
    "Swish": ("ActivationSwishDesc", {"alpha": ("sigmoid_input_scale", 1.0)}),
}
FUSED_TYPES = tuple(_FUSED)


def fused_activation(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats, dt: Any) -> Any:
    """The activation node `node` (one of FUSED_TYPES) as a fused activation descriptor (tensors None)
    for an input of type `dt`, with the parameters its own handler gives the standalone operator
    (Clip: clip_bounds, from `ins`' min / max inputs), so the fused result has its bits."""
    cls_name, attrs = _FUSED[node.op_type]
    kw = {k: float(_attr(node, a, d)) for a, (k, d) in attrs.items()}
    if node.op_type == "Clip":
        kw["min"], kw["max"] = clip_bounds(ctx, node, ins, stats, np.dtype(dt))
    return getattr(kdml, cls_name)(None, None, **kw)


ACT_HANDLERS = {
    "Min": variadic("minimum"),
    "Max": variadic("maximum"),
    "Sum": variadic("add"),
    "Mean": variadic("add", mean=True),
    "LeakyRelu": _attr_unary("leaky_relu", {"alpha": ("alpha", 0.01)}),
    "Elu": _attr_unary("elu", {"alpha": ("alpha", 1.0)}),
    "Celu": _attr_unary("celu", {"alpha": ("alpha", 1.0)}),
    "Selu": _attr_unary("selu", {"alpha": ("alpha", SELU_ALPHA), "gamma": ("gamma", SELU_GAMMA)}),
    "HardSigmoid": _attr_unary("hard_sigmoid", {"alpha": ("alpha", 0.2), "beta": ("beta", 0.5)}),
    "HardSwish": _attr_unary("hard_swish", {}),
    "ThresholdedRelu": _attr_unary("thresholded_relu", {"alpha": ("alpha", 1.0)}),
    "Shrink": _attr_unary("shrink", {"bias": ("bias", 0.0), "lambd": ("threshold", 0.5)}),
    "Swish": _attr_unary("swish", {"alpha": ("sigmoid_input_scale", 1.0)}),  # opset 24
    "QuickGelu": _attr_unary("swish", {"alpha": ("sigmoid_input_scale", 1.702)}),  # com.microsoft
    "Clip": _h_clip,
    "Mish": _h_mish,
}
