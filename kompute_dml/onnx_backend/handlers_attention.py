"""Device handlers of onnxruntime's attention contrib ops on MULTIHEAD_ATTENTION / MULTIHEAD_ATTENTION1
(kdml.multihead_attention, ops/attention.py, docs/attention.md): com.microsoft Attention (the input
projection as one GEMM, its Q / K / V read as strided views of the product), MultiHeadAttention,
GroupQueryAttention (MULTIHEAD_ATTENTION1: key / value heads, per-batch past lengths from
seqlens_k, the rotary embedding of onnx_backend/rotary.py). Every form these handlers do not take
(a shared past / present buffer, a cache indirection, softcap, local windows, quantized caches,
the qk outputs) runs on onnxruntime's CPU provider (FallbackNeeded)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

import kompute_dml as kdml

from .graph import _attr
from .half_precision import half_weights
from .handlers_nn import _dev, _floats
from .handlers_values import as_device
from .rotary import rotate
from .values import DeviceValue, FallbackNeeded, RunStats, _value_dtype, _value_shape

if TYPE_CHECKING:
    from .context import NodeContext

MT = kdml.MultiheadAttentionMaskType
_ALIGN = 16  # a binding's offset (DirectML's minimum buffer tensor alignment)


def need(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], i: int, stats: RunStats) -> kdml.Tensor:
    """Input i on the device (ValueError naming the node where it is absent)."""
    t = _dev(ctx, node, ins, i, stats)
    if t is None:
        raise ValueError(f"{node.op_type} {node.name!r}: input {i} is required")
    return t


def _past(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], i: int, stats: RunStats) -> kdml.Tensor | None:
    """A past input on the device; an empty one (a decoder's first step: no past rows) as absent."""
    if i < len(ins) and ins[i] is not None and 0 in _value_shape(ins[i]):
        return None
    return _dev(ctx, node, ins, i, stats)


def view(t: kdml.Tensor, sizes: tuple[int, ...], strides: tuple[int, ...] | None = None) -> kdml.Tensor:
    """t's bytes from its start seen with other sizes and strides (None: packed, row-major)."""
    return kdml.Tensor.trusted(t.buffer, kdml.TensorDesc(t.desc.data_type, sizes, strides), t.offset)


def _at(t: kdml.Tensor, sizes: tuple[int, ...], strides: tuple[int, ...], elements: int = 0) -> kdml.Tensor | None:
    """A view of t's bytes `elements` past its start (None where that offset is not 16-byte aligned)."""
    off = t.offset + elements * t.desc.data_type.size
    if off % _ALIGN:
        return None
    return kdml.Tensor.trusted(t.buffer, kdml.TensorDesc(t.desc.data_type, sizes, strides), off)


def _columns(ctx: NodeContext, t: kdml.Tensor, widths: tuple[int, ...]) -> list[kdml.Tensor]:
    """The column blocks of a packed [.., N] tensor: strided views where their offsets allow, else
    packed copies (DML_SPLIT)."""
    sizes, n = t.desc.sizes, t.desc.sizes[-1]
    strides = t.desc.effective_strides
    out, start = [], 0
    for w in widths:
        v = _at(t, (*sizes[:-1], w), strides, start)
        if v is None:
            return list(kdml.split(t, list(widths), axis=-1, device=ctx.device))
        out.append(v)
        start += w
    assert start == n
    return out


def _pair(ctx: NodeContext, t: kdml.Tensor) -> tuple[kdml.Tensor, kdml.Tensor]:
    """t[0], t[1] of a packed [2, ...] tensor (Attention's past / present)."""
    sizes, strides = t.desc.sizes[1:], t.desc.effective_strides[1:]
    a, b = _at(t, sizes, strides), _at(t, sizes, strides, math.prod(sizes))
    if a is None or b is None:
        raise FallbackNeeded("past / present halves off the 16-byte binding grid")
    return a, b


def _mask(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], i: int, stats: RunStats, batch: int, seq: int,
          total: int, past: int) -> tuple[kdml.Tensor | None, int]:
    """onnxruntime's mask input forms as the operator's mask and type: [batch] key lengths, [2 batch]
    ends then starts, [3 batch + 2], raw 0 / 1 masks [batch, keys] and [batch, sequence, keys], and
    [batch, 1, max, max] (its rows past..past + sequence)."""
    m = _dev(ctx, node, ins, i, stats)
    if m is None:
        return None, 0
    if m.desc.data_type != kdml.DataType.INT32:
        raise FallbackNeeded(f"a mask of {m.desc.data_type.name}")
    sizes, st = m.desc.sizes, m.desc.effective_strides
    if len(sizes) == 1:
        n = sizes[0]
        if n == batch:
            return m, MT.KEY_SEQUENCE_LENGTH
        if n == 2 * batch:
            return _at(m, (2, batch), (batch * st[0], st[0])), MT.KEY_SEQUENCE_END_START
        if n == 3 * batch + 2:
            return m, MT.KEY_QUERY_SEQUENCE_LENGTH_START_END
    elif len(sizes) == 2 and sizes == (batch, total):
        return m, MT.BOOLEAN
    elif len(sizes) == 3 and sizes == (batch, seq, total):
        return _at(m, (batch, 1, seq, total), (st[0], 0, st[1], st[2])), MT.BOOLEAN
    elif len(sizes) == 4 and sizes[:2] == (batch, 1) and sizes[2] >= past + seq and sizes[3] >= total:
        v = _at(m, (batch, 1, seq, total), (st[0], 0, st[2], st[3]), past * st[2])
        if v is not None:
            return v, MT.BOOLEAN
    raise FallbackNeeded(f"a mask of shape {sizes} (batch {batch}, sequence {seq}, keys {total})")


def _refuse(node: onnx.NodeProto, attrs: dict[str, Any], outputs_from: int) -> None:
    for name, allowed in attrs.items():
        if _attr(node, name, allowed) != allowed:
            raise FallbackNeeded(f"attribute {name} = {_attr(node, name)}")
    if any(o for o in node.output[outputs_from:]):
        raise FallbackNeeded(f"outputs {list(node.output[outputs_from:])}")


def _presents(p: list[kdml.Tensor | None]) -> tuple[kdml.Tensor | None, kdml.Tensor | None] | bool:
    return (p[0], p[1]) if any(t is not None for t in p) else False


def _bias_4d(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], i: int, stats: RunStats) -> kdml.Tensor | None:
    return _dev(ctx, node, ins, i, stats) if i < len(ins) else None


def _h_attention(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    """com.microsoft Attention: QKV = input x weights (one GEMM), its three column blocks the
    query, key and value (bias added by the operator), past [2, batch, heads, past, head size],
    present likewise; unidirectional: causal."""
    _refuse(node, {"do_rotary": 0, "past_present_share_buffer": 0}, 2)
    if len(ins) > 6 and ins[6] is not None:
        raise FallbackNeeded("past_sequence_length")
    dt = _floats(node, [v for v in ins[:3] if v is not None])
    x, w = as_device(ctx, ins[0], stats, node.input[0]), as_device(ctx, ins[1], stats, node.input[1])
    if len(x.shape) != 3 or len(w.shape) != 2:
        raise FallbackNeeded(f"input {x.shape}, weights {w.shape}")
    batch, seq, _ = x.shape
    heads = int(_attr(node, "num_heads"))
    widths = tuple(int(v) for v in _attr(node, "qkv_hidden_sizes", [w.shape[1] // 3] * 3))
    if sum(widths) != w.shape[1] or widths[0] != widths[1] or any(v % heads for v in widths):
        raise ValueError(f"Attention {node.name!r}: qkv_hidden_sizes {widths} do not fit weights {w.shape}")
    qkv = ctx.out_tensor((batch, seq, w.shape[1]), dt)
    kdml.matmul(x.tensor, w.tensor, out=qkv, device=ctx.device)
    q, k, v = _columns(ctx, qkv, widths)
    bias = _dev(ctx, node, ins, 2, stats)
    past = _past(ctx, node, ins, 4, stats)
    pk = pv = None
    p_len = 0
    if past is not None:
        pk, pv = _pair(ctx, past)
        p_len = pk.desc.sizes[2]
    total = p_len + seq
    mask, kind = _mask(ctx, node, ins, 3, stats, batch, seq, total, p_len)
    head = widths[0] // heads
    out = ctx.out_tensor((batch, seq, widths[2]), dt)
    presents: Any = False
    present = None
    if len(node.output) > 1 and node.output[1]:
        present = ctx.out_tensor((2, batch, heads, total, widths[2] // heads), dt)
        presents = _pair(ctx, present)
    kdml.multihead_attention(q, k, v, heads=heads, bias=bias, mask=mask, mask_type=kind,
                             relative_position_bias=_bias_4d(ctx, node, ins, 5, stats), past_key=pk, past_value=pv,
                             scale=float(_attr(node, "scale", 1.0 / math.sqrt(head))),
                             mask_filter_value=float(_attr(node, "mask_filter_value", -10000.0)),
                             causal=bool(_attr(node, "unidirectional", 0)), present=presents, out=out,
                             allow_half_precision=half_weights(ctx), device=ctx.device)
    outs: list[Any] = [DeviceValue(out, (batch, seq, widths[2]), dt)]
    if present is not None:
        outs.append(DeviceValue(present, (2, batch, heads, total, widths[2] // heads), dt))
    return outs


def _h_mha(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    """com.microsoft MultiHeadAttention: query [batch, sequence, hidden] or packed [batch, sequence,
    heads, 3, head size]; key / value [batch, keys, hidden], packed key [batch, keys, heads, 2, head
    size], or 4-D [batch, heads, keys, head size] (keys and values projected already: the operator's
    past, no new rows); key_padding_mask forms as Attention's; attention_bias; past / present."""
    _refuse(node, {}, 3)
    if any(i < len(ins) and ins[i] is not None for i in (8, 9)):
        raise FallbackNeeded("past_sequence_length / cache_indirection")
    dt = _floats(node, [v for i, v in enumerate(ins[:8]) if v is not None and i != 4 and 0 not in _value_shape(v)])
    q, k, v = need(ctx, node, ins, 0, stats), _dev(ctx, node, ins, 1, stats), _dev(ctx, node, ins, 2, stats)
    heads = int(_attr(node, "num_heads"))
    pk, pv = _past(ctx, node, ins, 6, stats), _past(ctx, node, ins, 7, stats)
    if k is not None and k.desc.dimension_count == 4:  # cross attention on a projected cache
        if pk is not None:
            raise FallbackNeeded("a 4-D key with past_key")
        pk, pv, k, v = k, v, None, None
    batch, seq = q.desc.sizes[:2]
    qs = q.desc.sizes
    d = qs[-1] if len(qs) == 5 else qs[-1] // heads
    if k is not None:
        keys = k.desc.sizes[1]
    else:
        keys = seq if len(qs) == 5 else 0
    past = pk.desc.sizes[2] if pk is not None else 0
    if v is not None:
        dv = v.desc.sizes[-1] // heads
    else:
        dv = pv.desc.sizes[-1] if pv is not None and k is None and len(qs) != 5 else d
    mask, kind = _mask(ctx, node, ins, 4, stats, batch, seq, past + keys, past)
    out = ctx.out_tensor((batch, seq, heads * dv), dt)
    outs: list[Any] = [DeviceValue(out, (batch, seq, heads * dv), dt)]
    presents: list[kdml.Tensor | None] = []
    for j, width in ((1, d), (2, dv)):
        p = ctx.out_tensor((batch, heads, past + keys, width), dt) if len(node.output) > j and node.output[j] else None
        presents.append(p)
        outs.append(None if p is None else DeviceValue(p, (batch, heads, past + keys, width), dt))
    kdml.multihead_attention(q, k, v, heads=heads, bias=_dev(ctx, node, ins, 3, stats), mask=mask, mask_type=kind,
                             relative_position_bias=_bias_4d(ctx, node, ins, 5, stats), past_key=pk, past_value=pv,
                             scale=float(_attr(node, "scale", 1.0 / math.sqrt(d))),
                             mask_filter_value=float(_attr(node, "mask_filter_value", -10000.0)),
                             causal=bool(_attr(node, "unidirectional", 0)),
                             present=_presents(presents),
                             out=out, allow_half_precision=half_weights(ctx), device=ctx.device)
    return outs


def _h_gqa(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    """com.microsoft GroupQueryAttention on MULTIHEAD_ATTENTION1: batch b's past is its first
    seqlens_k[b] + 1 - sequence rows (none on the first prompt, sequence == total_sequence_length),
    causal; the present outputs [batch, kv heads, max(past, total_sequence_length), head size],
    zeros past each batch's keys; do_rotary: the query and new keys rotated first (rotary.py)."""
    _refuse(node, {"local_window_size": -1, "softcap": 0.0, "smooth_softmax": 0, "qk_output": 0,
                   "sliding_window_cache": 0, "k_quant_type": "NONE", "v_quant_type": "NONE", "causal": 1}, 3)
    if any(i < len(ins) and ins[i] is not None for i in (9, 10, 11, 12, 13, 14, 15)):
        raise FallbackNeeded("position_ids / attention_bias / head_sink / quantization / qk norm inputs")
    dt = _floats(node, [v for v in ins[:5] if v is not None and 0 not in _value_shape(v)])
    heads, kv_heads = int(_attr(node, "num_heads")), int(_attr(node, "kv_num_heads"))
    total_v = ctx.host(ins[6], stats)
    total_len = int(np.asarray(total_v).reshape(-1)[0])
    q, k, v = need(ctx, node, ins, 0, stats), _dev(ctx, node, ins, 1, stats), _dev(ctx, node, ins, 2, stats)
    batch, seq = q.desc.sizes[:2]
    if k is None:  # packed [batch, sequence, (heads + 2 kv heads) x head size]
        d = q.desc.sizes[2] // (heads + 2 * kv_heads)
        q, k, v = _columns(ctx, q, (heads * d, kv_heads * d, kv_heads * d))
    d = q.desc.sizes[2] // heads
    pk, pv = _past(ctx, node, ins, 3, stats), _past(ctx, node, ins, 4, stats)
    cap = pk.desc.sizes[2] if pk is not None else 0
    first = seq == total_len
    seqlens = as_device(ctx, ins[5], stats, node.input[5])
    if _value_dtype(seqlens) != np.int32:
        raise FallbackNeeded(f"seqlens_k of {_value_dtype(seqlens)}")
    psl = None
    if pk is not None:
        psl = kdml.fill((batch,), 0, kdml.DataType.INT32, device=ctx.device) if first else \
            kdml.add(seqlens.tensor, np.int32(1 - seq), device=ctx.device)
        ctx.attach(seqlens, psl)
    if int(_attr(node, "do_rotary", 0)):
        pos = None if psl is None else psl
        q, k = (rotate(ctx, node, t, ins[7], ins[8], pos, node.input[7], node.input[8], stats, heads=h,
                       interleaved=bool(_attr(node, "rotary_interleaved", 0)))
                for t, h in ((q, heads), (k, kv_heads)))
    rows = max(cap, total_len)
    out = ctx.out_tensor((batch, seq, heads * d), dt)
    outs: list[Any] = [DeviceValue(out, (batch, seq, heads * d), dt)]
    presents: list[kdml.Tensor | None] = []
    for j in (1, 2):
        p = ctx.out_tensor((batch, kv_heads, rows, d), dt) if len(node.output) > j and node.output[j] else None
        presents.append(p)
        outs.append(None if p is None else DeviceValue(p, (batch, kv_heads, rows, d), dt))
    scale = float(_attr(node, "scale", 0.0)) or 1.0 / math.sqrt(d)
    if pk is None and any(p is not None for p in presents) and rows != seq:
        raise FallbackNeeded("present outputs longer than the sequence without past tensors")
    kdml.multihead_attention(q, k, v, heads=heads, kv_heads=kv_heads, past_key=pk, past_value=pv,
                             past_sequence_lengths=psl, scale=scale, causal=True,
                             present=_presents(presents),
                             out=out, allow_half_precision=half_weights(ctx), device=ctx.device)
    return outs


ATTENTION_HANDLERS = {"Attention": _h_attention, "MultiHeadAttention": _h_mha, "GroupQueryAttention": _h_gqa}

