"""Device handlers of the other transformer contrib nodes onnxruntime's optimizers write:
com.microsoft EmbedLayerNormalization (GATHERs, then one MEAN_VARIANCE_NORMALIZATION1 with its skip
extension; the mask index by LOGICAL_EQUALS, CAST and REDUCE), SimplifiedLayerNormalization /
RMSNormalization / com.microsoft SkipSimplifiedLayerNormalization (RMS normalization:
MEAN_VARIANCE_NORMALIZATION1 with use_mean False, kdml.rms_norm), com.microsoft FastGelu (ACTIVATION_GELU's
tanh form after the bias), BiasAdd and RotaryEmbedding (rotary.py)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

import kompute_dml as kdml

from .graph import _attr
from .handlers_attention import need
from .handlers_nn import _dev, _floats, _only_first_output, keys_for, packed_run, with_keys
from .rotary import rotate
from .values import DeviceValue, FallbackNeeded, RunStats, _value_dtype, _value_shape

if TYPE_CHECKING:
    from .context import NodeContext


def _h_embed_layer_norm(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    """LayerNorm(word[input_ids] + position[position_ids or 0..S-1] + segment[segment_ids]) * gamma
    + beta, the sums in that order (onnxruntime's CPU kernel's); mask_index: the count of 1s of each
    mask row (INT32 [batch]); embedding_sum: the sum before normalizing."""
    ids = need(ctx, node, ins, 0, stats)
    word, pos_t = need(ctx, node, ins, 2, stats), need(ctx, node, ins, 3, stats)
    dt = _floats(node, [ins[i] for i in (2, 3, 5, 6)] + ([ins[4]] if len(ins) > 4 and ins[4] is not None else []))
    batch, seq = ids.desc.sizes
    hidden = word.desc.sizes[1]
    shape = (batch, seq, hidden)
    w = kdml.gather(word, ids, axis=0, out=ctx.out_tensor(shape, dt), device=ctx.device)
    pos_ids = _dev(ctx, node, ins, 8, stats) if len(ins) > 8 else None
    if pos_ids is not None:
        p = kdml.gather(pos_t, pos_ids, axis=0, out=ctx.out_tensor((*pos_ids.desc.sizes, hidden), dt), device=ctx.device)
    else:
        if pos_t.desc.sizes[0] < seq:
            raise ValueError(f"EmbedLayerNormalization {node.name!r}: {seq} positions, a table of {pos_t.desc.sizes[0]}")
        p = kdml.Tensor.trusted(pos_t.buffer, kdml.TensorDesc(pos_t.desc.data_type, (1, seq, hidden)), pos_t.offset)
    seg_ids, seg_t = _dev(ctx, node, ins, 1, stats), (_dev(ctx, node, ins, 4, stats) if len(ins) > 4 else None)
    seg = None
    if seg_ids is not None and seg_t is not None:
        seg = kdml.gather(seg_t, seg_ids, axis=0, out=ctx.out_tensor(shape, dt), device=ctx.device)
    gamma, beta = _dev(ctx, node, ins, 5, stats), _dev(ctx, node, ins, 6, stats)
    out = ctx.out_tensor(shape, dt)
    total = ctx.out_tensor(shape, dt) if len(node.output) > 2 and node.output[2] else None
    kdml.skip_layer_norm(w, p, gamma, seg, beta, epsilon=float(_attr(node, "epsilon", 1e-12)),
                         sum_out=total if total is not None else False, out=out, device=ctx.device)
    outs: list[Any] = [DeviceValue(out, shape, dt), None]
    if len(node.output) > 1 and node.output[1]:
        mask = _dev(ctx, node, ins, 7, stats) if len(ins) > 7 else None
        count = ctx.out_tensor((batch,), np.int32)
        if mask is None:
            kdml.fill((batch,), 0, kdml.DataType.INT32, out=count, device=ctx.device)
        else:
            one = ctx.to_device(np.ones((1, 1), mask.desc.data_type.numpy_dtype), stats)
            eq = kdml.equal(mask, one, out=ctx.out_tensor(mask.desc.sizes, np.uint8), device=ctx.device)
            as32 = kdml.cast(eq, kdml.DataType.INT32, out=ctx.out_tensor(mask.desc.sizes, np.int32), device=ctx.device)
            view = kdml.Tensor.trusted(count.buffer, kdml.TensorDesc(kdml.DataType.INT32, (batch, 1)), count.offset)
            kdml.reduce_sum(as32, axes=(1,), keepdims=True, out=view, device=ctx.device)
        outs[1] = DeviceValue(count, (batch,), np.dtype(np.int32))
    if total is not None:
        outs.append(DeviceValue(total, shape, dt))
    return outs


def _h_rms_norm(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    """SimplifiedLayerNormalization / RMSNormalization: X / sqrt(mean(X^2) + epsilon) * scale over
    axis..rank-1 (float32 statistics: stash_type 1 only)."""
    _only_first_output(node)
    if int(_attr(node, "stash_type", 1)) != 1:
        raise FallbackNeeded("stash_type other than float32")
    dt = _floats(node, ins[:2])
    shape = _value_shape(ins[0])
    y = kdml.rms_norm(_dev(ctx, node, ins, 0, stats), _dev(ctx, node, ins, 1, stats), axis=int(_attr(node, "axis", -1)),
                      epsilon=float(_attr(node, "epsilon", 1e-5)), out=ctx.out_tensor(shape, dt), device=ctx.device)
    return [DeviceValue(y, shape, dt)]


def _h_skip_rms_norm(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    """com.microsoft SkipSimplifiedLayerNormalization: RMSNorm(input + skip (+ bias)) * gamma; the
    fourth output the sum: one dispatch (kdml.skip_layer_norm with use_mean False)."""
    if any(o for o in node.output[1:3]):
        raise FallbackNeeded("the mean / inv_std_var outputs")
    dt = _floats(node, ins[:4])
    shape = _value_shape(ins[0])
    if _value_shape(ins[1]) != shape:
        raise FallbackNeeded(f"skip of shape {_value_shape(ins[1])}")
    x, skip, gamma, bias = (_dev(ctx, node, ins, i, stats) for i in range(4))
    out = ctx.out_tensor(shape, dt)
    total = ctx.out_tensor(shape, dt) if len(node.output) > 3 and node.output[3] else None
    kdml.skip_layer_norm(x, skip, gamma, bias, None, epsilon=float(_attr(node, "epsilon", 1e-12)), use_mean=False,
                         sum_out=total if total is not None else False, out=out, device=ctx.device)
    outs: list[Any] = [DeviceValue(out, shape, dt), None, None]
    if total is not None:
        outs.append(DeviceValue(total, shape, dt))
    return outs


def _h_fast_gelu(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    """com.microsoft FastGelu(X, bias) = 0.5 u (1 + tanh(sqrt(2 / pi) (u + 0.044715 u^3))), u = X + bias:
    ELEMENT_WISE_ADD (where there is a bias) and ACTIVATION_GELU's tanh form (kompute_dml's extension, each
    step rounded to the type: within float32 rounding of onnxruntime's kernel, whose tanh is MLAS's own).
    After a MatMul the bias is the product's C (fusion_bias_gelu.py)."""
    dt = _floats(node, [v for v in ins[:2] if v is not None])
    shape = _value_shape(ins[0])
    x = _dev(ctx, node, ins, 0, stats)
    if len(ins) > 1 and ins[1] is not None:
        x = kdml.add(x, _dev(ctx, node, ins, 1, stats), out=ctx.out_tensor(shape, dt), device=ctx.device)
    keys = keys_for(ctx, node.output[0], shape, dt, gelu=True) if packed_run(x) else None  # (a quantized product next)
    y = kdml.gelu(x, approximate="tanh", out=ctx.out_tensor(shape, dt), keys_out=keys, device=ctx.device)
    return [with_keys(ctx, DeviceValue(y, shape, dt), keys)]


def _h_bias_add(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    """com.microsoft BiasAdd(X, bias, skip) = X + bias + skip (in that order)."""
    dt = _floats(node, ins[:3])
    shape = _value_shape(ins[0])
    x, b, s = (_dev(ctx, node, ins, i, stats) for i in range(3))
    xb = kdml.add(x, b, out=ctx.out_tensor(shape, dt), device=ctx.device)
    return [DeviceValue(kdml.add(xb, s, out=ctx.out_tensor(shape, dt), device=ctx.device), shape, dt)]


def _h_rotary(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    """com.microsoft RotaryEmbedding: input [batch, seq, hidden] or [batch, heads, seq, head size];
    position_ids [batch, seq], or [1]: the first position (the others follow it)."""
    if float(_attr(node, "scale", 1.0)) != 1.0 or int(_attr(node, "is_packed_batching", 0)):
        raise FallbackNeeded("scale / is_packed_batching")
    dt = _floats(node, [ins[0], ins[2], ins[3]])
    shape = _value_shape(ins[0])
    x = need(ctx, node, ins, 0, stats)
    half = _value_shape(ins[2])[1]
    rot = int(_attr(node, "rotary_embedding_dim", 0))
    bhsd = len(shape) == 4
    heads = int(_attr(node, "num_heads", 0)) or (shape[1] if bhsd else shape[2] // (2 * half))
    if rot not in (0, 2 * half):
        raise FallbackNeeded(f"rotary_embedding_dim {rot}")
    batch, seq = shape[0], shape[2] if bhsd else shape[1]
    pos_shape = _value_shape(ins[1])
    if _value_dtype(ins[1]) not in (np.int64, np.int32):
        raise FallbackNeeded(f"position_ids of {_value_dtype(ins[1])}")
    if math.prod(pos_shape) == 1:  # a first position: p0 + 0..seq-1
        p0 = int(np.asarray(ctx.host(ins[1], stats)).reshape(-1)[0])
        pos = ctx.to_device(np.arange(p0, p0 + seq, dtype=np.int32).reshape(1, seq), stats)
    elif pos_shape == (batch, seq):
        pos = need(ctx, node, ins, 1, stats)
    else:
        raise FallbackNeeded(f"position_ids of shape {pos_shape}")
    y = rotate(ctx, node, x, ins[2], ins[3], None, node.input[2], node.input[3], stats, heads=heads,
               interleaved=bool(_attr(node, "interleaved", 0)), pos=pos, bhsd=bhsd)
    return [DeviceValue(y, shape, dt)]


TRANSFORMER_HANDLERS = {
    "EmbedLayerNormalization": _h_embed_layer_norm,
    "SimplifiedLayerNormalization": _h_rms_norm,
    "RMSNormalization": _h_rms_norm,
    "SkipSimplifiedLayerNormalization": _h_skip_rms_norm,
    "FastGelu": _h_fast_gelu,
    "BiasAdd": _h_bias_add,
    "RotaryEmbedding": _h_rotary,
}
