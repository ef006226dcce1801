"""A squeeze-and-excitation block's gate on kompute_dml's SQUEEZE_EXCITATION (fusions.py's patterns), as
torch.onnx.export writes torchvision's MobileNetV3 and EfficientNet blocks:

    GlobalAveragePool(x) -> Conv 1x1 -> Relu -> Conv 1x1 -> HardSigmoid | Sigmoid
    GlobalAveragePool(x) -> Conv 1x1 -> Sigmoid -> Mul (SiLU) -> Conv 1x1 -> HardSigmoid | Sigmoid

the pool also as the dynamo exporter (torch.onnx.export's default since torch 2.9) writes
adaptive_avg_pool2d(x, 1): ReduceMean over every spatial axis with keepdims (a constant axes input or
attribute; where the graph does not declare x's rank, its axes are checked at run time).

The Convs: group 1, a constant (R, C, 1, 1) / (C, R, 1, 1) weight, stride 1, no padding, constant
or absent biases; float32, and float16 up to F16_MAX_CHANNELS channels or past MEAN_ELEMENTS elements
per image (below). The gate (N, C, 1, 1) is the chain's output. One dispatch instead of three (the pool, two Convs with
their activations), two where an image has more than MEAN_ELEMENTS elements (the pool's own dispatch,
then the gate from its means), within the float32 bound of the unfused chain (ops/squeeze_excitation.py:
the sums in another order). With the block's Mul(x, gate) after it (either side, x the pool's own
input), the same dispatch also writes x * gate (the operator's ScaledOutputTensor: ELEMENT_WISE_MULTIPLY's
bits of the gate it wrote) where one dispatch runs the gate and each work group scales at most
DevicePolicy.se_scale_max_elements elements (its channels, at most 64, times the positions; known at
prepare where the graph declares the image's shape, else checked at run time); otherwise the Mul runs as
it is. Where the values do not fit (more
than MAX_CHANNELS channels, ...) the chain runs node by node, its Conv + activation pairs fused as
usual."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

import kompute_dml as kdml

from .feeds import declared_shape
from .graph import _attr, attr_text, other_input
from .handlers_activation import fused_activation
from .handlers_pool import POOL_HANDLERS
from .handlers_values import as_device
from .values import _FLOAT_OUT, DeviceValue, FallbackNeeded, RunStats

if TYPE_CHECKING:
    from .context import NodeContext
    from .rep import BackendRep

_GATES = ("HardSigmoid", "Sigmoid")
_HEADS = ("GlobalAveragePool", "ReduceMean")
# Above this many input elements per image (channels x positions) the pool runs first as its own
# dispatch (AVERAGE_POOLING: work groups over the channels) and the gate reads its means (one
# position): the operator's work group sums all its image's elements itself. H100, device call 221
# (`python -m benchmarks.bench_se --mean-lanes 0,2,3,5`, batch 1, us, fused with 8 lanes per mean or 32
# for 16 channels / pool first): 16 x 56 x 56 (50,176 elements) 11.7 / 17.9, 240 x 14 x 14 12.8 / 15.9,
# 576 x 7 x 7 22.0 / 21.4; 1152 x 7 x 7 (56,448) 28.2 / 20.1, 480 x 14 x 14 17.9 / 16.9, 96 x 56 x 56
# 30.1 / 18.7. (At batch 8 the 14 x 14 pools are slower: 8 x 480 x 14 x 14 18.6 / 29.0, call 226.)
MEAN_ELEMENTS = 16 * 56 * 56
# float16 blocks of at most F16_MAX_CHANNELS channels are fused, and wider ones whose images have more
# than MEAN_ELEMENTS elements (their pool runs first); the others run node by node, where the float16 gate
# measured slower than the unfused chain. H100, device call 247 (`python -m benchmarks.bench_se --dtype
# float16`, us, the gate (the pool first past MEAN_ELEMENTS) / the chain): batch 1 288 x 7 x 7 17.7 /
# 23.2, 576 x 7 x 7 32.4 / 25.2, 480 x 14 x 14 20.9 / 25.8, 1152 x 7 x 7 27.8 / 29.6; batch 8 576 x 7 x 7
# 33.3 / 38.1, 672 x 14 x 14 44.7 / 49.1, 1152 x 7 x 7 35.0 / 33.1.
F16_MAX_CHANNELS = 288
FLOAT16 = (f"a float16 block of more than {F16_MAX_CHANNELS} channels and at most {MEAN_ELEMENTS} elements per image "
           "(or of unknown size; its fused gate is slower: node by node)")


def _elements_per_image(rep: BackendRep, name: str) -> int | None:
    """The declared elements per image (all dimensions but the first) of `name`, None where unknown."""
    dims = (declared_shape(rep.declared_types.get(name)) or ())[1:]
    return int(np.prod(dims)) if dims and all(d for d in dims) else None


def _check_pointwise(rep: BackendRep, conv: onnx.NodeProto) -> str:
    """Why `conv` is not a 1x1 Conv of a constant weight, group 1, stride 1, no padding ("" where it is)."""
    w = rep.constants.get(conv.input[1]) if len(conv.input) > 1 else None
    if w is None or conv.input[1] in rep.input_names:
        return f"Conv {conv.name!r}: the weight is not a constant"
    if len(w.dims) < 3 or any(d != 1 for d in w.dims[2:]):
        return f"Conv {conv.name!r}: weight {list(w.dims)} is not 1x1"
    if len(conv.input) > 2 and conv.input[2] and (conv.input[2] not in rep.constants or conv.input[2] in rep.input_names):
        return f"Conv {conv.name!r}: the bias is not a constant"
    if int(_attr(conv, "group", 1)) != 1 or any(int(s) != 1 for s in _attr(conv, "strides", [])) or \
            any(int(p) != 0 for p in _attr(conv, "pads", [])) or attr_text(conv, "auto_pad", "NOTSET") not in ("NOTSET", "VALID"):
        return f"Conv {conv.name!r}: groups, strides or padding"
    dt = rep._elem_dtype(conv.input[0])
    return "" if dt is None or dt in _FLOAT_OUT else f"Conv of {dt}"


def _mean_axes(node: onnx.NodeProto, constant: Callable[[str], Any]) -> list[int] | None:
    """A ReduceMean's axes (attribute, or its input 1 through `constant`: None where not constant), [] for all."""
    if len(node.input) > 1 and node.input[1]:
        v = constant(node.input[1])
        return None if v is None else [int(a) for a in np.asarray(v).reshape(-1)]
    return [int(a) for a in _attr(node, "axes", [])]


def _spatial_mean(axes: list[int] | None, rank: int) -> bool:
    """The axes are every spatial axis (2 .. rank - 1) of a rank-`rank` x."""
    return axes is not None and rank >= 3 and sorted({a % rank for a in axes}) == list(range(2, rank)) and \
        all(-rank <= a < rank for a in axes)


def _check_head(rep: BackendRep, head: onnx.NodeProto) -> str:
    """Why the chain's first node is not a global average pool ("" where it is, or its rank is known at run)."""
    if head.op_type == "GlobalAveragePool":
        return ""
    if int(_attr(head, "keepdims", 1)) != 1:
        return "ReduceMean without keepdims"
    axes = _mean_axes(head, lambda n: None if n in rep.input_names or n not in rep.constants else rep.constant_host(n))
    if not axes:
        return "ReduceMean's axes are not constant spatial axes"
    dims = declared_shape(rep.declared_types.get(head.input[0]))
    return "" if dims is None or _spatial_mean(axes, len(dims)) else f"ReduceMean over axes {axes} of a rank-{len(dims)} x"


def check_se(rep: BackendRep, nodes: list[onnx.NodeProto]) -> str:
    convs = [n for n in nodes if n.op_type == "Conv"]
    why = _check_head(rep, nodes[0]) or next((why for why in (_check_pointwise(rep, c) for c in convs) if why), "")
    if not why and rep._elem_dtype(nodes[0].input[0]) == np.float16 and rep.constants[convs[0].input[1]].dims[1] > F16_MAX_CHANNELS:
        elements = _elements_per_image(rep, nodes[0].input[0])
        if elements is None or elements <= MEAN_ELEMENTS:
            return FLOAT16
    return why


def _scale_fits(policy: Any, c: int, elements: int, dt: Any) -> str:
    """Why the gate's dispatch does not also write x * gate for images of `c` channels and
    `elements` elements of type `dt` ("" where it does)."""
    if elements > MEAN_ELEMENTS:
        return f"images of {elements} elements (more than {MEAN_ELEMENTS}: the pool runs first)"
    per_group = min(64, c) * (elements // c)
    most = policy.se_scale_max_elements[np.dtype(dt) == np.float16]
    if per_group > most:
        return f"{per_group} {np.dtype(dt)} elements per work group (DevicePolicy.se_scale_max_elements: {most})"
    return ""


def check_se_scaled(rep: BackendRep, nodes: list[onnx.NodeProto]) -> str:
    """check_se, the Mul reading the pool's own x, and the scaled output's limits where the image's
    shape is declared."""
    why = check_se(rep, nodes[:-1])
    if why:
        return why
    x = nodes[0].input[0]
    if other_input(nodes[-1], nodes[-2].output[0]) != x:
        return "the Mul's other operand is not the pool's input"
    elements, dt = _elements_per_image(rep, x), rep._elem_dtype(x)
    c = rep.constants[nodes[1].input[1]].dims[1]
    return "" if elements is None or dt is None else _scale_fits(rep.device.policy, c, elements, dt)


def _weight(ctx: NodeContext, lookup: Callable[[str], Any], stats: RunStats, conv: onnx.NodeProto,
            dt: np.dtype) -> tuple[Any, Any]:
    """The Conv's weight as a 2-D (out, in) view on the device and its bias (or None), both of type `dt`."""
    w = as_device(ctx, lookup(conv.input[1]), stats, conv.input[1])
    b = as_device(ctx, lookup(conv.input[2]), stats, conv.input[2]) if len(conv.input) > 2 and conv.input[2] else None
    if w.dtype != dt or (b is not None and b.dtype != dt):
        raise FallbackNeeded(f"Conv {conv.name!r}: a weight or bias of another type than its input's {dt}")
    return w.tensor.reshape(w.shape[0], int(np.prod(w.shape[1:]))), None if b is None else b.tensor


def _run(ctx: NodeContext, nodes: list[onnx.NodeProto], lookup: Callable[[str], Any], stats: RunStats,
         silu: bool, scaled: bool = False) -> list[Any]:
    if scaled:
        nodes = nodes[:-1]  # (the Mul: the scaled output)
    pool, conv1, conv2, gate = nodes[0], nodes[1], nodes[-2], nodes[-1]
    x = as_device(ctx, lookup(pool.input[0]), stats, pool.input[0])
    dt, shape = x.dtype, tuple(x.shape)
    if dt not in (np.float32, np.float16) or len(shape) not in (3, 4, 5):
        raise FallbackNeeded(f"a pool input of {dt} {shape}")
    if pool.op_type == "ReduceMean" and not _spatial_mean(_mean_axes(pool, lambda n: ctx.host(lookup(n), stats)), len(shape)):
        raise FallbackNeeded(f"ReduceMean's axes are not the spatial axes of x {shape}")
    why = _scale_fits(ctx.device.policy, shape[1], int(np.prod(shape[1:])), dt) if scaled else ""
    if why:
        raise FallbackNeeded(why)
    if int(np.prod(shape[1:])) > MEAN_ELEMENTS:
        head = pool if pool.op_type == "GlobalAveragePool" else \
            onnx.helper.make_node("GlobalAveragePool", pool.input[:1], pool.output[:1], name=pool.name)  # (ReduceMean's)
        (x,) = POOL_HANDLERS["GlobalAveragePool"](ctx, head, [x], stats)
    w1, b1 = _weight(ctx, lookup, stats, conv1, dt)
    w2, b2 = _weight(ctx, lookup, stats, conv2, dt)
    act1 = kdml.ActivationSwishDesc(None, None) if silu else fused_activation(ctx, nodes[2], [], stats, dt)
    act2 = fused_activation(ctx, gate, [], stats, dt)
    out_shape = (shape[0], shape[1]) + (1,) * (len(shape) - 2)
    out = ctx.out_tensor(out_shape, dt)
    z = ctx.out_tensor(shape, dt) if scaled else None
    kdml.squeeze_excitation(x.tensor, w1, b1, w2, b2, activation1=act1, activation2=act2,
                            out=out.reshape(shape[0], shape[1]), scaled_out=z, device=ctx.device)
    return [DeviceValue(z, shape, np.dtype(dt)) if z is not None else DeviceValue(out, out_shape, np.dtype(dt))]


def se_patterns(pattern: Callable[..., Any]) -> list[Any]:
    """The two block forms of the module docstring, each with either gate (and the SiLU's Mul reading
    the Sigmoid on either side); first each with the block's Mul(x, gate), the gate on either side."""
    out = []
    for h in _HEADS:
        relu = (h, "Conv", "Relu", "Conv")
        silu = (h, "Conv", "Sigmoid", "Mul", "Conv")
        out += [
            *(pattern(f"{h}+Conv+Relu+Conv+{g}+Mul", (*relu, g, "Mul"),
                      ((0, 1, 0), (1, 2, 0), (2, 3, 0), (3, 4, 0), (4, 5, j)), "SQUEEZE_EXCITATION", check_se_scaled,
                      functools.partial(_run, silu=False, scaled=True)) for g in _GATES for j in (0, 1)),
            *(pattern(f"{h}+Conv+Sigmoid+Mul+Conv+{g}+Mul", (*silu, g, "Mul"),
                      ((0, 1, 0), (1, 2, 0), (1, 3, 1 - k), (2, 3, k), (3, 4, 0), (4, 5, 0), (5, 6, j)),
                      "SQUEEZE_EXCITATION", check_se_scaled, functools.partial(_run, silu=True, scaled=True))
              for g in _GATES for k in (0, 1) for j in (0, 1)),
            *(pattern(f"{h}+Conv+Relu+Conv+{g}", (*relu, g), ((0, 1, 0), (1, 2, 0), (2, 3, 0), (3, 4, 0)),
                      "SQUEEZE_EXCITATION", check_se, functools.partial(_run, silu=False)) for g in _GATES),
            *(pattern(f"{h}+Conv+Sigmoid+Mul+Conv+{g}", (*silu, g),
                      ((0, 1, 0), (1, 2, 0), (1, 3, 1 - k), (2, 3, k), (3, 4, 0), (4, 5, 0)), "SQUEEZE_EXCITATION", check_se,
                      functools.partial(_run, silu=True)) for g in _GATES for k in (0, 1)),
        ]
    return out
