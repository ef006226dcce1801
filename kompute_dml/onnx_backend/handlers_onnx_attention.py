"""The ai.onnx domain's Attention (opset 23, 24) and RotaryEmbedding (opset 23) on the device
(docs/attention.md, "ONNX's Attention and RotaryEmbedding").

Attention runs on MULTIHEAD_ATTENTION (MULTIHEAD_ATTENTION1 where kv_num_heads < q_num_heads):
3-D [batch, sequence, heads x head size] inputs as the operator's own layout, 4-D [batch, heads,
sequence, head size] ones through split_heads (strided views), past_key / past_value as its past,
present_key / present_value as its present outputs. ONNX's causal frontier is offset by the past
alone (query i attends key j <= past + i); the operator's `causal` is offset by past + keys -
sequence, the same where the keys are as many as the queries, else the frontier is a constant
mask. attn_mask: a bool mask as the operator's BOOLEAN mask (INT32, filter value -inf), a float
one as its relative position bias, either broadcast through stride 0; a last dimension shorter than
the keys padded (False / -inf); with a mask, causal is folded into it. A query row that attends no
key is a zero row (ONNX's rule; the kernel's softmax of only -inf scores is NaN): the output is
selected against the mask's row maximum (ELEMENT_WISE_IF). Opset 25's sliding windows (left_window_size,
right_window_size: p - left <= j <= p + right for the query at position p = past + i) join the
causal frontier's constant mask (with nonpad_kv_seqlen: its allowed keys, offset per batch). softcap and
the qk_matmul_output output run as the reference's chain of operators (handlers_onnx_attention_chain.py).
What this does not take (bfloat16 / double) is refused at prepare by the node type's rule
(ops/attention_rules.py) and runs on onnxruntime's CPU provider.

RotaryEmbedding (X, cos_cache, sin_cache[, position_ids]): with constant caches, position ids and
the whole head rotated, the tables of onnx_backend/rotary.py (com.microsoft's RotaryEmbedding);
otherwise the rotation's two products and a difference / sum per half on strided views of x and
the (gathered) caches, the unrotated tail copied."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

import kompute_dml as kdml

from .graph import _attr
from .half_precision import half_weights
from .handlers_attention import _past, need
from .handlers_attention import view as _view
from .handlers_nn import _dev, _floats
from .handlers_onnx_attention_chain import attention_chain
from .rotary import rotate
from .values import DeviceValue, RunStats, _value_shape

if TYPE_CHECKING:
    from .context import NodeContext

MT = kdml.MultiheadAttentionMaskType
I32, U8 = kdml.DataType.INT32, kdml.DataType.UINT8



def _bshd(t: kdml.Tensor) -> kdml.Tensor:
    """[batch, heads, sequence, d] seen as [batch, sequence, heads, d] (the operator's split_heads)."""
    (b, h, s, d), st = t.desc.sizes, t.desc.effective_strides
    return _view(t, (b, s, h, d), (st[0], st[2], st[1], st[3]))


def _const(ctx: NodeContext, key: Any, value: np.ndarray, stats: RunStats) -> kdml.Tensor:
    hit = ctx.memo.get(key)
    if hit is None:
        hit = ctx.memo[key] = ctx.to_device(value, stats)
    return hit


def _causal(ctx: NodeContext, s: int, total: int, past: int, dt: Any, stats: RunStats,
            causal: bool = True, window: tuple[int, int] = (-1, -1)) -> kdml.Tensor:
    """[1, 1, s, total]: key j allowed for query i at position p = past + i where j <= p (`causal`)
    and p - left <= j <= p + right (the sliding window's bounds, -1: none), as 1 / 0 (INT32) or
    0 / -inf."""
    key = ("onnx-causal", s, total, past, np.dtype(dt).str, causal, window)
    hit = ctx.memo.get(key)
    if hit is None:
        diff = past + np.arange(s)[:, None] - np.arange(total)[None, :]  # p - j
        allowed = np.ones((s, total), bool) if not causal else diff >= 0
        if window[0] >= 0:
            allowed &= diff <= window[0]
        if window[1] >= 0:
            allowed &= -diff <= window[1]
        a = allowed.astype(dt) if np.dtype(dt) == np.int32 else np.where(allowed, 0, -np.inf).astype(dt)
        hit = ctx.memo[key] = ctx.to_device(a.reshape(1, 1, s, total), stats)
    return hit


def _nonpad(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats, batch: int, s: int,
            keys: int, causal: bool, window: tuple[int, int] = (-1, -1)) -> kdml.Tensor | None:
    """nonpad_kv_seqlen (opset 24) as UINT8 allowed keys [batch, 1, s or 1, keys]: j < n[b], and
    causal: j <= i + n[b] - s (which implies the first): E[i, j] <= n[b] for a constant E; a sliding
    window around p = n[b] - s + i (opset 25): p - j <= left as n[b] <= left + s - i + j, j - p <=
    right as j + s - i - right <= n[b], each a comparison of a constant with n."""
    n = _dev(ctx, node, ins, 6, stats)
    if n is None:
        return None
    if n.desc.sizes != (batch,):
        raise ValueError(f"Attention {node.name!r}: nonpad_kv_seqlen of shape {n.desc.sizes} for batch {batch}")
    n32 = kdml.cast(n, I32, out=ctx.out_tensor((batch,), np.int32), device=ctx.device)
    nb = _view(n32, (batch, 1, 1, 1), (n32.desc.effective_strides[0], 0, 0, 0))
    rows = s if causal or window != (-1, -1) else 1
    i, j = np.arange(s)[:, None], np.arange(keys)[None, :]
    e = np.broadcast_to(j + (s - i if causal else 1), (rows, keys))
    out = (batch, 1, rows, keys)
    allowed = kdml.less_equal(_const(ctx, ("onnx-nonpad", s, keys, causal, rows), e.astype(np.int32).reshape(1, 1, rows, keys), stats),
                              nb, out=ctx.out_tensor(out, np.uint8), device=ctx.device)
    for side, bound in enumerate(window):
        if bound < 0:
            continue
        c = (bound + s - i + j) if side == 0 else (j + s - i - bound)
        ct = _const(ctx, ("onnx-window", s, keys, side, bound), c.astype(np.int32).reshape(1, 1, s, keys), stats)
        ok = (kdml.greater_equal if side == 0 else kdml.less_equal)(ct, nb, out=ctx.out_tensor(out, np.uint8),
                                                                   device=ctx.device)
        allowed = kdml.logical_and(allowed, ok, out=ctx.out_tensor(out, np.uint8), device=ctx.device)
    return allowed


def _masks(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats, dt: Any, batch: int, s: int,
           keys: int, past: int, causal: bool) -> tuple[kdml.Tensor | None, kdml.Tensor | None, kdml.Tensor | None, bool]:
    """(BOOLEAN mask, relative position bias, the rows' guard condition, the operator's causal flag).
    A sliding window (opset 25) joins the causal frontier as a constant mask (offset by the past)."""
    total = past + keys
    window = (int(_attr(node, "left_window_size", -1)), int(_attr(node, "right_window_size", -1)))
    allowed = _nonpad(ctx, node, ins, stats, batch, s, keys, causal, window)
    m = _dev(ctx, node, ins, 3, stats)
    frontier = None  # the causal frontier and the window as the whole mask (INT32 1 / 0)
    if m is None and allowed is None:  # the causal frontier alone, if any
        if window != (-1, -1):  # rows may be left with no key: the guard below
            m = frontier = _causal(ctx, s, total, past, np.int32, stats, causal, window)
        elif causal and keys != s:
            return _causal(ctx, s, total, past, np.int32, stats), None, None, False
        else:
            return None, None, None, causal
    boolean = m is None or m.desc.data_type == U8 or frontier is not None
    it = np.int32 if boolean else dt
    if allowed is not None:
        causal, window = False, (-1, -1)  # in the allowed keys already
    if m is None:  # nonpad_kv_seqlen alone
        assert allowed is not None
        m = kdml.cast(allowed, I32, out=ctx.out_tensor(allowed.desc.sizes, np.int32), device=ctx.device)
        allowed = None
    sizes = m.desc.sizes
    if not 1 <= len(sizes) <= 4 or sizes[-1] > total:
        raise ValueError(f"Attention {node.name!r}: attn_mask of shape {sizes} for {total} keys")
    sizes = (1,) * (4 - len(sizes)) + sizes
    m = _view(m, sizes, (0,) * (4 - m.desc.dimension_count) + m.desc.effective_strides)
    if m.desc.data_type == U8:
        m = kdml.cast(m, I32, out=ctx.out_tensor(sizes, np.int32), device=ctx.device)
    if sizes[-1] < total:  # padded with keys that take no part
        sizes = (*sizes[:3], total)
        m = kdml.pad(m, [0] * 4, [0, 0, 0, total - m.desc.sizes[-1]], value=0 if boolean else -math.inf,
                     out=ctx.out_tensor(sizes, it), device=ctx.device)
    if allowed is not None:
        sizes = tuple(np.broadcast_shapes(sizes, allowed.desc.sizes))
        if boolean:
            a32 = kdml.cast(allowed, I32, out=ctx.out_tensor(allowed.desc.sizes, np.int32), device=ctx.device)
            m = kdml.mul(m, a32, out=ctx.out_tensor(sizes, it), device=ctx.device)
        else:
            m = kdml.where(allowed, m, np.array(-np.inf, dt), out=ctx.out_tensor(sizes, it), device=ctx.device)
    elif frontier is None and (causal or window != (-1, -1)):
        c = _causal(ctx, s, total, past, it, stats, causal, window)
        sizes = (*sizes[:2], s, total)
        m = (kdml.mul if boolean else kdml.add)(m, c, out=ctx.out_tensor(sizes, it), device=ctx.device)
    row = kdml.reduce_max(m, axes=[3], out=ctx.out_tensor((*sizes[:3], 1), it), device=ctx.device)
    cond = kdml.greater(row, np.array(0 if boolean else -np.inf, it), out=ctx.out_tensor(row.desc.sizes, np.uint8),
                        device=ctx.device)
    return (m, None, cond, False) if boolean else (None, m, cond, False)


def _softmax_in_type(node: onnx.NodeProto) -> bool:
    """Whether the weights are in the inputs' type: ONNX's softmax_precision absent (the inputs' type)
    or FLOAT16 (float16 inputs' weights are then float16)."""
    return _attr(node, "softmax_precision") in (None, onnx.TensorProto.FLOAT16)


def _h_attention(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    """ai.onnx Attention (the module's docstring); Y and, where named, present_key / present_value."""
    dt = _floats(node, [v for i, v in enumerate(ins[:6]) if v is not None and i != 3 and 0 not in _value_shape(v)])
    q, k, v = (need(ctx, node, ins, i, stats) for i in range(3))
    four = q.desc.dimension_count == 4
    if four:
        batch, heads, s, dqk = q.desc.sizes
        kv_heads, keys, dv = k.desc.sizes[1], k.desc.sizes[2], v.desc.sizes[3]
        q4, k4, v4 = q, k, v
        q, k, v = _bshd(q), _bshd(k), _bshd(v)
    else:
        heads, kv_heads = int(_attr(node, "q_num_heads", 0)), int(_attr(node, "kv_num_heads", 0))
        if heads < 1 or kv_heads < 1:
            raise ValueError(f"Attention {node.name!r}: 3-D inputs need q_num_heads and kv_num_heads")
        batch, s, _ = q.desc.sizes
        dqk, keys, dv = q.desc.sizes[2] // heads, k.desc.sizes[1], v.desc.sizes[2] // kv_heads
        q4, k4, v4 = (_bshd(_view(t, (batch, n, hd, w), (t.desc.effective_strides[0], t.desc.effective_strides[1],
                                                          w * t.desc.effective_strides[2], t.desc.effective_strides[2])))
                      for t, n, hd, w in ((q, s, heads, dqk), (k, keys, kv_heads, dqk), (v, keys, kv_heads, dv)))
    pk, pv = _past(ctx, node, ins, 4, stats), _past(ctx, node, ins, 5, stats)
    past = pk.desc.sizes[2] if pk is not None else 0
    if pk is not None and len(ins) > 6 and ins[6] is not None:
        raise ValueError(f"Attention {node.name!r}: nonpad_kv_seqlen with past_key / past_value")
    masks = _masks(ctx, node, ins, stats, dt, batch, s, keys, past, bool(_attr(node, "is_causal", 0)))
    if float(_attr(node, "softcap", 0.0)) > 0 or any(node.output[3:]):  # the reference's chain of operators
        return attention_chain(ctx, node, stats, dt, q4, k4, v4, pk, pv, masks,
                               lambda: _causal(ctx, s, past + keys, past, dt, stats), four)
    mask, rb, cond, causal = masks
    shape = (batch, heads, s, dv) if four else (batch, s, heads * dv)
    y = ctx.out_tensor(shape, dt)
    raw = y if cond is None else ctx.out_tensor(shape, dt)
    outs: list[Any] = [DeviceValue(y, shape, dt)]
    presents: list[kdml.Tensor | None] = []
    for j, width in ((1, dqk), (2, dv)):
        p_shape = (batch, kv_heads, past + keys, width)
        p = ctx.out_tensor(p_shape, dt) if len(node.output) > j and node.output[j] else None
        presents.append(p)
        outs.append(None if p is None else DeviceValue(p, p_shape, dt))
    scale = _attr(node, "scale")
    kdml.multihead_attention(q, k, v, heads=heads, kv_heads=kv_heads, mask=mask, mask_type=None if mask is None else MT.BOOLEAN,
                             relative_position_bias=rb, past_key=pk, past_value=pv,
                             scale=1.0 / math.sqrt(dqk) if scale is None else float(scale),
                             mask_filter_value=-math.inf, causal=causal, split_heads=four,
                             present=(presents[0], presents[1]) if any(p is not None for p in presents) else False,
                             out=_bshd(raw) if four else raw, device=ctx.device,
                             allow_half_precision=half_weights(ctx, dt == np.float16 and _softmax_in_type(node)))
    if cond is not None:  # rows that attend no key: zeros
        cb, ch, cs, _ = cond.desc.sizes
        cst = cond.desc.effective_strides
        if four:
            kdml.where(cond, raw, np.zeros((), dt), out=y, device=ctx.device)
        else:
            o4 = (batch, s, heads, dv), (s * heads * dv, heads * dv, dv, 1)
            kdml.where(_view(cond, (cb, cs, ch, 1), (cst[0], cst[2], cst[1], cst[3])), _view(raw, *o4),
                       np.zeros((), dt), out=_view(y, *o4), device=ctx.device)
    return outs[:len(node.output)]


def _pairs(t: kdml.Tensor, half: int, interleaved: bool) -> kdml.Tensor:
    """A [b, s, h, d] view's rotated part as [b, s, h, 2, half] (the halves) or [b, s, h, half, 2]
    (neighbours): the rotated pairs on one axis, from the view's own first element (bindings start
    on 16 bytes: a view of the second half alone would not)."""
    st = t.desc.effective_strides
    pair = ((2, half), (half * st[3], st[3])) if not interleaved else ((half, 2), (2 * st[3], st[3]))
    return _view(t, (*t.desc.sizes[:3], *pair[0]), (*st[:3], *pair[1]))


def _rotate(ctx: NodeContext, x: kdml.Tensor, cos: kdml.Tensor, sin: kdml.Tensor, out: kdml.Tensor,
            interleaved: bool, stats: RunStats) -> None:
    """out's rotated part = x1 cos - x2 sin, x2 cos + x1 sin: x cos + swap(x) (sin x (-1, 1)) over the
    pair axis (GATHER swaps, three products, a sum: each rounded as the ONNX reference rounds).
    x / out: [b, s, h, d] views; cos / sin: [b or 1, s, rot / 2]."""
    cb, s, half = cos.desc.sizes
    dt = x.desc.data_type.numpy_dtype
    x5, axis = _pairs(x, half, interleaved), 4 if interleaved else 3
    shape = x5.desc.sizes
    idx = _const(ctx, ("rotary-swap",), np.array([1, 0], np.int32), stats)
    sign = _const(ctx, ("rotary-sign", np.dtype(dt).str, interleaved),
                  np.array([-1, 1], dt).reshape((1, 2) if interleaved else (2, 1)), stats)

    def spread(c: kdml.Tensor, b: int) -> kdml.Tensor:  # [cb, s, half] over [b, s, h, pairs]
        cs = c.desc.effective_strides
        st = (cs[0] if cb > 1 else 0, cs[1], 0, *((cs[2], 0) if interleaved else (0, cs[2])))
        return _view(c, (b, s, shape[2], *shape[3:]), st)

    signed = kdml.mul(spread(sin, cb), sign, out=ctx.out_tensor((cb, s, shape[2], *shape[3:]), dt), device=ctx.device)
    swapped = kdml.gather(x5, idx, axis=axis, out=ctx.out_tensor(shape, dt), device=ctx.device)
    a = kdml.mul(x5, spread(cos, shape[0]), out=ctx.out_tensor(shape, dt), device=ctx.device)
    sst = signed.desc.effective_strides
    c = kdml.mul(swapped, _view(signed, shape, (sst[0] if cb > 1 else 0, *sst[1:])), out=ctx.out_tensor(shape, dt),
                 device=ctx.device)
    kdml.add(a, c, out=_pairs(out, half, interleaved), device=ctx.device)


def _h_rotary(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    """ai.onnx RotaryEmbedding: X [batch, sequence, hidden] (num_heads) or [batch, heads, sequence,
    head size]; cos / sin caches [positions, rot / 2] indexed by position_ids [batch, sequence], or
    [batch, sequence, rot / 2] without them."""
    dt = _floats(node, ins[:3])
    shape = _value_shape(ins[0])
    x = need(ctx, node, ins, 0, stats)
    four = len(shape) == 4
    if four:
        b, h, s, d = shape
        xv = _bshd(x)
    else:
        b, s, hidden = shape
        h = int(_attr(node, "num_heads", 0))
        if h < 1:
            raise ValueError(f"RotaryEmbedding {node.name!r}: a 3-D input needs num_heads")
        d = hidden // h
        xv = _view(x, (b, s, h, d), (s * hidden, hidden, d, 1))
    rot = int(_attr(node, "rotary_embedding_dim", 0)) or d
    interleaved = bool(_attr(node, "interleaved", 0))
    has_pos = len(ins) > 3 and ins[3] is not None
    if has_pos and rot == d and all(ctx.is_constant(n) for n in node.input[1:3]):
        pos = need(ctx, node, ins, 3, stats)  # the tables com.microsoft's RotaryEmbedding makes
        y = rotate(ctx, node, x, ins[1], ins[2], None, node.input[1], node.input[2], stats, heads=h,
                   interleaved=interleaved, pos=pos, bhsd=four)
        return [DeviceValue(y, shape, dt)]
    cos, sin = need(ctx, node, ins, 1, stats), need(ctx, node, ins, 2, stats)
    if has_pos:
        pos = need(ctx, node, ins, 3, stats)
        cos, sin = (kdml.gather(c, pos, axis=0, out=ctx.out_tensor((*pos.desc.sizes, rot // 2), dt),
                                device=ctx.device) for c in (cos, sin))
    cb, cs, half = cos.desc.sizes
    if 2 * half != rot or rot > d or cs != s or cb not in (1, b) or sin.desc.sizes != cos.desc.sizes:
        raise ValueError(f"RotaryEmbedding {node.name!r}: cos / sin of shapes {cos.desc.sizes}, {sin.desc.sizes} "
                         f"for a rotary dimension {rot}, head size {d}, batch {b}, sequence {s}")
    y = ctx.out_tensor(shape, dt)
    yv = _bshd(y) if four else _view(y, (b, s, h, d), (s * h * d, h * d, d, 1))
    if rot < d:  # the tail passes through: x copied whole, its rotated part then overwritten
        kdml.copy(x, out=y, device=ctx.device)
    _rotate(ctx, xv, cos, sin, yv, interleaved, stats)
    return [DeviceValue(y, shape, dt)]


# ai.onnx node types whose names com.microsoft's contrib ops share (handlers.DOMAIN_HANDLERS)
ONNX_ATTENTION_HANDLERS = {("Attention", ""): _h_attention, ("RotaryEmbedding", ""): _h_rotary}
