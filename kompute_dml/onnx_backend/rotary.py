"""Rotary position embedding on the device (com.microsoft RotaryEmbedding, GroupQueryAttention's
do_rotary): out = x * C + swap(x) * S per head, where swap exchanges each rotated pair (the two
halves of the head, or neighbours where interleaved) and C / S are rows of tables made once from
the cos / sin caches, picked by position. The two halves: tables [cos, cos] and [sin, sin], and
ROTARY_EMBEDDING (kdml.rotary_embedding) negates the upper half as it reads it: x1 cos - x2 sin is
x1 cos + (-x2) sin, the same two products and one sum, each rounded to the type, as onnxruntime's
CPU kernel rounds them in float32. Dispatches: the two table rows (GATHER by position), then one.
Interleaved (neighbours): [cos, cos] and [-sin, sin] with each value twice, the swap by GATHER on
the last axis, two products and a sum (ELEMENT_WISE_MULTIPLY, ADD1). The caches must be constants;
a rotary dimension below the head size runs on the CPU (FallbackNeeded)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

import kompute_dml as kdml

from .values import FallbackNeeded, RunStats

if TYPE_CHECKING:
    from .context import NodeContext


def _tables(ctx: NodeContext, cos_v: Any, sin_v: Any, names: tuple[str, str], dt: np.dtype, interleaved: bool,
            stats: RunStats) -> tuple[kdml.Tensor, kdml.Tensor, kdml.Tensor | None, int]:
    """(C table [positions, head size], S table, the swap's indices (interleaved only), head size),
    once per plan."""
    key = ("rotary", names, str(dt), interleaved)
    hit = ctx.memo.get(key)
    if hit is not None:
        return hit
    if not all(ctx.is_constant(n) for n in names):
        raise FallbackNeeded("rotary cos / sin caches that are not constants")
    cos, sin = (np.asarray(ctx.host(v, stats)) for v in (cos_v, sin_v))
    if cos.ndim != 2 or cos.shape != sin.shape:
        raise FallbackNeeded(f"cos / sin caches of shapes {cos.shape}, {sin.shape}")
    half = cos.shape[1]
    if interleaved:
        c = np.repeat(cos, 2, axis=1)
        s = np.stack([-sin, sin], axis=2).reshape(cos.shape[0], 2 * half)
        idx = np.arange(2 * half).reshape(half, 2)[:, ::-1].reshape(-1)
    else:  # (ROTARY_EMBEDDING negates and swaps the halves itself: no indices)
        c, s = np.concatenate([cos, cos], 1), np.concatenate([sin, sin], 1)
        idx = None
    made = (*(ctx.to_device(np.ascontiguousarray(a.astype(dt)), stats) for a in (c, s)),
            None if idx is None else ctx.to_device(idx.astype(np.int32), stats), 2 * half)
    ctx.memo[key] = made
    return made


def positions(ctx: NodeContext, batch: int, seq: int, past: kdml.Tensor | None, stats: RunStats) -> kdml.Tensor:
    """[batch or 1, seq] int32 positions: past[b] + i (past: INT32 [batch] on the device), else i."""
    steps = ctx.to_device(np.arange(seq, dtype=np.int32).reshape(1, seq), stats)
    if past is None:
        return steps
    p = kdml.Tensor.trusted(past.buffer, kdml.TensorDesc(kdml.DataType.INT32, (batch, 1)), past.offset)
    return kdml.add(p, steps, out=ctx.out_tensor((batch, seq), np.int32), device=ctx.device)


def rotate(ctx: NodeContext, node: onnx.NodeProto, x: kdml.Tensor, cos_v: Any, sin_v: Any, past: kdml.Tensor | None,
           cos_name: str, sin_name: str, stats: RunStats, *, heads: int, interleaved: bool,
           pos: kdml.Tensor | None = None, bhsd: bool = False) -> kdml.Tensor:
    """x [batch, seq, heads x head size] (bhsd: [batch, heads, seq, head size]) rotated: a packed
    tensor of x's shape. Positions: `pos` ([batch or 1, seq] indices), else past[b] + i."""
    dt = x.desc.data_type.numpy_dtype
    c_tab, s_tab, idx, d = _tables(ctx, cos_v, sin_v, (cos_name, sin_name), dt, interleaved, stats)
    sizes, st = x.desc.sizes, x.desc.effective_strides
    if bhsd:
        b, h, s, dd = sizes
        x4 = (b, s, h, dd), (st[0], st[2], st[1], st[3])
    else:
        b, s, hidden = sizes
        dd = hidden // heads
        h = heads
        x4 = (b, s, h, dd), (st[0], st[1], dd * st[2], st[2])
    if dd != d:
        raise FallbackNeeded(f"a rotary dimension {d} other than the head size {dd}")
    if pos is None:
        pos = positions(ctx, b, s, past, stats)
    pb = pos.desc.sizes[0]
    xv = kdml.Tensor.trusted(x.buffer, kdml.TensorDesc(x.desc.data_type, *x4), x.offset)
    rows = []
    for tab in (c_tab, s_tab):
        g = kdml.gather(tab, pos, axis=0, out=ctx.out_tensor((pb, s, d), dt), device=ctx.device)
        rows.append(kdml.Tensor.trusted(g.buffer, kdml.TensorDesc(g.desc.data_type, (b, s, h, d),
                                                                  (s * d if pb > 1 else 0, d, 0, 1)), g.offset))
    out = ctx.out_tensor((b, h, s, d) if bhsd else (b, s, h * d), dt)
    view = (b, s, h, d), ((h * s * d, d, s * d, 1) if bhsd else (s * h * d, h * d, d, 1))
    ov = kdml.Tensor.trusted(out.buffer, kdml.TensorDesc(out.desc.data_type, *view), out.offset)
    if not interleaved:
        kdml.rotary_embedding(xv, rows[0], rows[1], out=ov, device=ctx.device)
        return out
    swapped = kdml.gather(xv, idx, axis=3, out=ctx.out_tensor((b, s, h, d), dt), device=ctx.device)
    a = kdml.mul(xv, rows[0], out=ctx.out_tensor((b, s, h, d), dt), device=ctx.device)
    c = kdml.mul(swapped, rows[1], out=ctx.out_tensor((b, s, h, d), dt), device=ctx.device)
    kdml.add(a, c, out=ov, device=ctx.device)
    return out
