"""Device handlers of a transformer encoder's float nodes: LayerNormalization and
com.microsoft SkipLayerNormalization (MEAN_VARIANCE_NORMALIZATION1; the skip through its skip
extension, one dispatch), InstanceNormalization, GroupNormalization and MeanVarianceNormalization
(MEAN_VARIANCE_NORMALIZATION1),
Softmax (ACTIVATION_SOFTMAX1), LogSoftmax (ACTIVATION_LOG_SOFTMAX1), Hardmax (ACTIVATION_HARDMAX1),
Gelu (ACTIVATION_GELU), MatMul and com.microsoft FusedMatMul
(GEMM). DynamicQuantizeLinear is in handlers.py, beside DynamicQuantizeMatMul, which uses it."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

import kompute_dml as kdml
from kompute_dml.core.tensor_desc import packed_strides
from kompute_dml.functional.mean_variance_normalization import skip_layer_norm_key_parts
from kompute_dml.ops.gelu_keys import gelu_key_parts

from .graph import _attr, attr_text
from .half_precision import as_float32, half_operand, use_half
from .handlers_values import _strides_of, as_device, gemm_foldable, strided
from .values import _FLOAT_OUT, DeviceValue, FallbackNeeded, RunStats, _value_dtype, _value_shape

if TYPE_CHECKING:
    from .context import NodeContext


def _floats(node: onnx.NodeProto, ins: list[Any]) -> np.dtype:
    dt = _value_dtype(ins[0])
    if dt not in _FLOAT_OUT:
        raise FallbackNeeded(f"type {dt} is not float32/float16")
    for v in ins[1:]:
        if v is not None and _value_dtype(v) != dt:
            raise FallbackNeeded("operand types differ")
    for v in ins:
        if v is not None and 0 in _value_shape(v):
            raise FallbackNeeded("an empty tensor")
    return dt


def _dev(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], i: int, stats: RunStats) -> kdml.Tensor | None:
    if i >= len(ins) or ins[i] is None or not node.input[i]:
        return None
    return as_device(ctx, ins[i], stats, node.input[i]).tensor


def _only_first_output(node: onnx.NodeProto, allowed: int = 1) -> None:
    if any(o for o in node.output[allowed:]):
        raise FallbackNeeded(f"optional outputs {list(node.output[allowed:])}")


def _opset(model: onnx.ModelProto) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)


def _h_layer_norm(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    """Y on one MEAN_VARIANCE_NORMALIZATION1 (kdml.layer_norm); the optional Mean and InvStdDev
    (training graphs' outputs) beside it, in float32 (stash_type 1) as ONNX's function body
    computes them: REDUCE AVERAGE of X, of (X - Mean)^2 (ELEMENT_WISE_DIFFERENCE_SQUARE), then
    + epsilon, SQRT and RECIP, each of shape X's with the normalized dimensions 1."""
    dt = _floats(node, ins)
    shape = _value_shape(ins[0])
    axis = int(_attr(node, "axis", -1))
    eps = float(_attr(node, "epsilon", 1e-5))
    stats_wanted = [bool(o) for o in node.output[1:3]]
    if any(stats_wanted) and int(_attr(node, "stash_type", 1)) != 1:
        raise FallbackNeeded("Mean / InvStdDev with a stash_type other than float32")
    x, scale, bias = (_dev(ctx, node, ins, i, stats) for i in range(3))
    out = ctx.out_tensor(shape, dt)
    y = kdml.layer_norm(x, scale, bias, axis=axis, epsilon=eps, out=out, device=ctx.device)
    outs: list[Any] = [DeviceValue(y, shape, dt)]
    if any(stats_wanted):
        assert x is not None  # (input 0 is required)
        outs += _layer_norm_stats(ctx, x, shape, dt, axis, eps, stats, stats_wanted)
    return outs


def _layer_norm_stats(ctx: NodeContext, x: kdml.Tensor, shape: tuple[int, ...], dt: np.dtype, axis: int, eps: float,
                      stats: RunStats, wanted: list[bool]) -> list[Any]:
    """LayerNormalization's Mean and InvStdDev (None where not wanted) in float32."""
    rank = len(shape)
    axis = axis + rank if axis < 0 else axis
    if not 0 <= axis < rank:
        raise ValueError(f"LayerNormalization: axis {axis} is outside the input's rank {rank}")
    f32, dev = np.dtype(np.float32), ctx.device
    axes = tuple(range(axis, rank))
    stat_shape = (*shape[:axis], *(1,) * (rank - axis))
    x32 = x if dt == f32 else kdml.cast(x, kdml.DataType.FLOAT32, out=ctx.out_tensor(shape, f32), device=dev)
    mean = kdml.reduce_mean(x32, axes=axes, out=ctx.out_tensor(stat_shape, f32), device=dev)
    outs: list[Any] = [DeviceValue(mean, stat_shape, f32) if wanted[0] else None]
    if len(wanted) > 1 and wanted[1]:
        sq = kdml.difference_square(x32, mean, out=ctx.out_tensor(shape, f32), device=dev)
        inv = kdml.reduce_mean(sq, axes=axes, out=ctx.out_tensor(stat_shape, f32), device=dev)
        e = ctx.to_device(np.full((1,) * rank, eps, np.float32), stats)  # broadcast by the ADD
        kdml.add(inv, e, out=inv, device=dev)
        kdml.sqrt(inv, out=inv, device=dev)
        kdml.reciprocal(inv, out=inv, device=dev)
        outs.append(DeviceValue(inv, stat_shape, f32))
    return outs


def _h_group_norm(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    """InstanceNormalization and GroupNormalization (opset 18's per-group and 21's per-channel
    scale and bias, told apart by their length) on one MEAN_VARIANCE_NORMALIZATION1 (kdml.group_norm);
    MeanVarianceNormalization (axes, default [0, 2, 3]) on kdml.mean_variance_normalization."""
    dt = _floats(node, ins)
    shape = _value_shape(ins[0])
    x, scale, bias = (_dev(ctx, node, ins, i, stats) for i in range(3))
    out = ctx.out_tensor(shape, dt)
    eps = float(_attr(node, "epsilon", 1e-5))
    if node.op_type == "MeanVarianceNormalization":
        axes = [int(a) for a in _attr(node, "axes", [0, 2, 3])]
        y = kdml.mean_variance_normalization(x, axes=axes, epsilon=1e-9, out=out, device=ctx.device)
    elif node.op_type == "InstanceNormalization":
        y = kdml.instance_norm(x, scale, bias, epsilon=eps, out=out, device=ctx.device)
    else:
        y = kdml.group_norm(x, scale, bias, int(_attr(node, "num_groups", 1)), epsilon=eps, out=out, device=ctx.device)
    return [DeviceValue(y, shape, dt)]


def keys_for(ctx: NodeContext, name: str, shape: tuple[int, ...], dt: np.dtype, gelu: bool = False) -> kdml.Tensor | None:
    """A skip normalization's (or with `gelu`, a GELU's) keys_out for its output `name` where a
    dynamic quantization reads that (rep.dynamic_quantized: its DYNAMIC_QUANTIZE_LINEAR then runs
    in one dispatch instead of two), else None: float32 (what DynamicQuantizeLinear takes), one
    row or more."""
    if name not in ctx.prepared.dynamic_quantized or dt != np.float32 or not shape or 0 in shape:
        return None
    parts = gelu_key_parts(math.prod(shape)) if gelu else skip_layer_norm_key_parts(shape, kdml.DataType.FLOAT32)
    return ctx.out_tensor((parts, 2), np.uint32)


def with_keys(ctx: NodeContext, value: DeviceValue, keys: kdml.Tensor | None) -> DeviceValue:
    """`value` carrying `keys` (DeviceValue.keys), kept alive while the value's buffer is."""
    if keys is not None:
        value.keys = keys
        ctx.attach(value, DeviceValue(keys, keys.desc.sizes, np.uint32))
    return value


def _h_skip_layer_norm(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    """output = LayerNorm(input + skip (+ bias)) * gamma + beta; the fourth output is the sum. One
    MEAN_VARIANCE_NORMALIZATION1 dispatch (its skip extension, kdml.skip_layer_norm)."""
    if any(o for o in node.output[1:3]):
        raise FallbackNeeded("the mean / inv_std_var outputs")
    dt = _floats(node, ins)
    shape = _value_shape(ins[0])
    skip_shape = _value_shape(ins[1])
    # onnxruntime reads skip at (offset % skip size): numpy's broadcasting where only leading
    # dimensions are missing or 1
    core = skip_shape[next((i for i, s in enumerate(skip_shape) if s != 1), len(skip_shape)):]
    if len(core) > len(shape) or (core and shape[-len(core):] != core):
        raise FallbackNeeded(f"skip of shape {skip_shape}")
    x, skip, gamma, beta, bias = (_dev(ctx, node, ins, i, stats) for i in range(5))
    out = ctx.out_tensor(shape, dt)
    total = ctx.out_tensor(shape, dt) if len(node.output) > 3 and node.output[3] else None
    keys = keys_for(ctx, node.output[0], shape, dt)
    kdml.skip_layer_norm(x, skip, gamma, bias, beta, epsilon=float(_attr(node, "epsilon", 1e-12)),
                         sum_out=total if total is not None else False, out=out, keys_out=keys, device=ctx.device)
    outs: list[Any] = [with_keys(ctx, DeviceValue(out, shape, dt), keys), None, None]
    if total is not None:
        outs.append(DeviceValue(total, shape, dt))
    return outs


def _row_activation(helper: str) -> Any:
    """Softmax (ACTIVATION_SOFTMAX1), LogSoftmax (ACTIVATION_LOG_SOFTMAX1), Hardmax
    (ACTIVATION_HARDMAX1) through kdml.<helper>: from opset 13 over the one axis `axis` (default
    -1); before, over the 2-D flattening [prod(:axis), prod(axis:)] (default axis 1), i.e. over
    every axis from `axis` on."""

    def handler(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
        dt = _floats(node, ins[:1])
        shape = _value_shape(ins[0])
        rank = max(len(shape), 1)
        new = _opset(ctx.prepared.model) >= 13
        axis = int(_attr(node, "axis", -1 if new else 1))
        axis = axis + rank if axis < 0 else axis
        if not 0 <= axis < rank:  # ONNX's range [-rank, rank - 1] (onnxruntime refuses the node alike)
            raise ValueError(f"axis {_attr(node, 'axis', 1)} is outside [-{rank}, {rank - 1}] for an input of rank {rank}")
        axes = (axis,) if new else tuple(range(axis, rank))  # before opset 13: the flattened trailing block
        x = _dev(ctx, node, ins, 0, stats)
        y = getattr(kdml, helper)(x, axes=axes, out=ctx.out_tensor(shape, dt), device=ctx.device)
        return [DeviceValue(y, shape, dt)]

    return handler


def _h_gelu(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    """Gelu (opset 20, com.microsoft): ACTIVATION_GELU; approximate "tanh" its extension of that form."""
    approximate = attr_text(node, "approximate", "none")
    if approximate not in ("none", "tanh"):
        raise ValueError(f"Gelu {node.name!r}: approximate {approximate!r} (none or tanh)")
    dt = _floats(node, ins[:1])
    shape = _value_shape(ins[0])
    x = _dev(ctx, node, ins, 0, stats)
    keys = keys_for(ctx, node.output[0], shape, dt, gelu=True) if packed_run(x) else None
    y = kdml.gelu(x, approximate=approximate, out=ctx.out_tensor(shape, dt), keys_out=keys, device=ctx.device)
    return [with_keys(ctx, DeviceValue(y, shape, dt), keys)]


def packed_run(t: kdml.Tensor) -> bool:
    """t's elements are one run of unit strides (ACTIVATION_GELU's keys_output_tensor needs it)."""
    return t.desc.effective_strides == packed_strides(t.desc.sizes)


def _h_bias_gelu(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    """com.microsoft BiasGelu(x, bias) = Gelu(x + bias), bias broadcast over x's last axis
    (onnxruntime's optimizer fuses MatMul -> Add -> Gelu into it): ELEMENT_WISE_ADD then
    ACTIVATION_GELU, the sum rounded to the type in between as onnxruntime's kernel rounds it."""
    dt = _floats(node, ins[:2])
    shape = _value_shape(ins[0])
    if len(_value_shape(ins[1])) != 1 or _value_shape(ins[1])[0] != shape[-1]:
        raise ValueError(f"BiasGelu {node.name!r}: bias of shape {_value_shape(ins[1])} is not ({shape[-1]},)")
    x, b = _dev(ctx, node, ins, 0, stats), _dev(ctx, node, ins, 1, stats)
    s = kdml.add(x, b, out=ctx.out_tensor(shape, dt), device=ctx.device)  # numpy broadcasting
    keys = keys_for(ctx, node.output[0], shape, dt, gelu=True)  # (s is packed)
    y = kdml.gelu(s, out=ctx.out_tensor(shape, dt), keys_out=keys, device=ctx.device)
    return [with_keys(ctx, DeviceValue(y, shape, dt), keys)]


def unary(helper: str, floats: bool = False) -> Any:
    """The handler of an OnnxOp of kind "unary": kdml.<helper> on the one input, of any type the
    operator's rows (and the declaration's check) take; the output of its shape and type.
    `floats`: float32 / float16 only (kind "float_unary": _floats refuses the rest)."""
    fn = getattr(kdml, helper)

    def handler(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
        dt = _floats(node, ins[:1]) if floats else _value_dtype(ins[0])
        shape = _value_shape(ins[0])
        return [DeviceValue(fn(_dev(ctx, node, ins, 0, stats), out=ctx.out_tensor(shape, dt), device=ctx.device), shape, dt)]
    return handler


def float_unary(helper: str) -> Any:
    """The handler of an OnnxOp of kind "float_unary": kdml.<helper> on the one float input."""
    return unary(helper, floats=True)


def _swap_last(v: DeviceValue) -> DeviceValue:
    shape = v.shape
    st = tuple(v.tensor.desc.effective_strides)
    return strided(v, (*shape[:-2], shape[-1], shape[-2]), (*st[:-2], st[-1], st[-2]))


def _matmul(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats, trans_a: bool, trans_b: bool,
            alpha: float) -> list[Any]:
    dt = _floats(node, ins[:2])
    half = use_half(ctx, dt)
    a, b = (half_operand(ctx, ins[i], node.input[i], stats) if half else as_device(ctx, ins[i], stats, node.input[i])
            for i in range(2))
    vec_a, vec_b = len(a.shape) == 1, len(b.shape) == 1
    if (vec_a or vec_b) and (trans_a or trans_b):
        raise FallbackNeeded("a 1-D operand of a transposed product")
    if vec_a:  # numpy's matmul: (K,) as (1, K), the 1 dropped from the result
        a = strided(a, (1, *a.shape), (0, *_strides_of(a)))
    if vec_b:  # (K,) as (K, 1), the 1 dropped from the result
        b = strided(b, (*b.shape, 1), (*_strides_of(b), 0))
    if len(a.shape) < 2 or len(b.shape) < 2:
        raise FallbackNeeded("a 0-D operand")
    if trans_a:
        a = _swap_last(a)
    if trans_b:
        b = _swap_last(b)
    try:
        batch = tuple(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
    except ValueError as e:
        raise ValueError(f"{node.op_type} {node.name!r}: batch shapes do not broadcast: {e}") from None
    if a.shape[-1] != b.shape[-2]:
        raise ValueError(f"{node.op_type} {node.name!r}: {a.shape} and {b.shape} do not multiply")
    a, b = gemm_foldable(ctx, a, b, stats)
    shape = (*batch, a.shape[-2], b.shape[-1])
    final = shape[:len(shape) - 2] + shape[-2:][vec_a:2 - vec_b]  # (less the dimensions a 1-D operand added)
    y = ctx.out_tensor(final, a.dtype)
    out = y if final == shape else kdml.Tensor.trusted(y.buffer, kdml.TensorDesc(y.desc.data_type, shape), y.offset)
    if alpha == 1.0:
        kdml.matmul(a.tensor, b.tensor, out=out, device=ctx.device)
    else:
        kdml.gemm(a.tensor, b.tensor, alpha=alpha, out=out, device=ctx.device)
    return [as_float32(ctx, y, final) if half else DeviceValue(y, final, dt)]


def _h_matmul(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    from . import product_groups

    group = product_groups.group_of(ctx, node)
    a = ins[0]
    if group is not None and isinstance(a, DeviceValue) and _value_dtype(a) in _FLOAT_OUT and not use_half(ctx, a.dtype):
        return [product_groups.run(ctx, group, node, a, lambda w, wn, bias, bn: product_groups.grouped_gemm(
            ctx, a, (w, wn), (bias, bn), stats))]
    return _matmul(ctx, node, ins, stats, False, False, 1.0)


def _h_fused_matmul(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    if int(_attr(node, "transBatchA", 0)) or int(_attr(node, "transBatchB", 0)):
        raise FallbackNeeded("transBatchA / transBatchB")
    return _matmul(ctx, node, ins, stats, bool(_attr(node, "transA", 0)), bool(_attr(node, "transB", 0)),
                   float(_attr(node, "alpha", 1.0)))


def _h_gemm(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    """ONNX Gemm: alpha * op(A) op(B) + beta * C (2-D A and B; C broadcast to the result)."""
    dt = _floats(node, [v for v in ins if v is not None])
    half = use_half(ctx, dt)
    a, b = (half_operand(ctx, ins[i], node.input[i], stats) if half else as_device(ctx, ins[i], stats, node.input[i])
            for i in range(2))
    if len(a.shape) != 2 or len(b.shape) != 2:
        raise ValueError(f"Gemm {node.name!r}: A and B must be 2-D, got {a.shape} and {b.shape}")
    ta, tb = bool(_attr(node, "transA", 0)), bool(_attr(node, "transB", 0))
    m = a.shape[1] if ta else a.shape[0]
    n = b.shape[0] if tb else b.shape[1]
    if half and len(ins) > 2 and ins[2] is not None and node.input[2]:
        c: kdml.Tensor | None = half_operand(ctx, ins[2], node.input[2], stats).tensor
    else:
        c = _dev(ctx, node, ins, 2, stats) if len(ins) > 2 else None
    out = ctx.out_tensor((m, n), a.dtype)
    y = kdml.gemm(a.tensor, b.tensor, c, trans_a=ta, trans_b=tb, alpha=float(_attr(node, "alpha", 1.0)),
                  beta=float(_attr(node, "beta", 1.0)), out=out, device=ctx.device)
    return [as_float32(ctx, y, (m, n)) if half else DeviceValue(y, (m, n), dt)]


NN_HANDLERS = {
    "Gemm": _h_gemm,
    "LayerNormalization": _h_layer_norm,
    "SkipLayerNormalization": _h_skip_layer_norm,
    "InstanceNormalization": _h_group_norm,
    "GroupNormalization": _h_group_norm,
    "MeanVarianceNormalization": _h_group_norm,
    "Softmax": _row_activation("softmax"),
    "LogSoftmax": _row_activation("log_softmax"),
    "Hardmax": _row_activation("hardmax"),
    "Gelu": _h_gelu,
    "BiasGelu": _h_bias_gelu,
    "MatMul": _h_matmul,
    "FusedMatMul": _h_fused_matmul,
}
