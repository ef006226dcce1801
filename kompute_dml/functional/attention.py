"""kdml.multihead_attention: MULTIHEAD_ATTENTION (or MULTIHEAD_ATTENTION1 where the key / value
heads are fewer than the query's or past sequence lengths are given) on arrays (ops/attention.py,
docs/attention.md)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..core.dtypes import DataType
from ..core.errors import invalid
from ..core.tensor_desc import TensorDesc
from ..device.device import Device
from ..device.memory import Tensor
from ..ops.attention import MultiheadAttention1Desc, MultiheadAttentionDesc, MultiheadAttentionMaskType
from . import _packed, as_tensor, check_out, compile_cached, pooled_empty
from .elementwise import _operands, broadcast_view

MT = MultiheadAttentionMaskType


def _view(t: Tensor, sizes: tuple[int, ...], strides: tuple[int, ...]) -> Tensor:
    """t's elements seen with other sizes and strides (a reshape of leading 1s or a broadcast)."""
    return Tensor.trusted(t.buffer, TensorDesc(t.desc.data_type, sizes, strides), t.offset)


def _int32(x: Any, dev: Device, field: str, types: tuple[DataType, ...] = (DataType.INT32,)) -> Tensor:
    if not isinstance(x, Tensor):
        x = np.asarray(x)
        if x.dtype.kind in "iub":
            x = x.astype(np.int32)
    t = as_tensor(x, dev, field)
    if t.desc.data_type not in types:
        raise invalid(field, f"must be {' or '.join(d.name for d in types)}, got {t.desc.data_type.name}")
    return t


def _mask(mask: Any, kind: Any, dev: Device, shape4: tuple[int, int, int, int]) -> tuple[Tensor, int]:
    """The mask as the operator takes it for its type (None: KEY_SEQUENCE_LENGTH for a 1-D mask,
    else BOOLEAN): lengths [batch] -> [1, batch]; a BOOLEAN [batch, keys] is a key padding
    mask ([batch, 1, 1, keys]), any other shape broadcasts to [batch, heads, sequence, keys]."""
    t = _int32(mask, dev, "mask")
    d = t.desc
    if kind is None:
        kind = MT.KEY_SEQUENCE_LENGTH if d.dimension_count == 1 else MT.BOOLEAN
    kind = MT(int(kind))
    st = d.effective_strides
    if kind == MT.KEY_SEQUENCE_LENGTH and d.dimension_count == 1:
        t = _view(t, (1, d.sizes[0]), (0, st[0]))
    elif kind == MT.BOOLEAN:
        if d.dimension_count == 2:
            t = _view(t, (d.sizes[0], 1, 1, d.sizes[1]), (st[0], 0, 0, st[1]))
        t = broadcast_view(t, shape4, "mask")
    return t, int(kind)


def multihead_attention(query: Any, key: Any = None, value: Any = None, *, heads: int, kv_heads: int | None = None,
                        bias: Any = None, mask: Any = None, mask_type: Any = None, relative_position_bias: Any = None,
                        past_key: Any = None, past_value: Any = None, past_sequence_lengths: Any = None,
                        scale: float | None = None, mask_filter_value: float = -10000.0, causal: bool = False,
                        split_heads: bool = False, present: bool | tuple[Tensor | None, Tensor | None] = False,
                        allow_half_precision: bool = False, out: Tensor | None = None,
                        device: Device | None = None) -> Any:
    """Multi-head attention (DML_MULTIHEAD_ATTENTION; MULTIHEAD_ATTENTION1 where `kv_heads` differs
    from `heads` or `past_sequence_lengths` is given). `query` [batch, sequence, heads x head size]
    or stacked [batch, sequence, heads, 2 or 3, head size] (query and key, or query, key and value),
    `key` [batch, keys, kv_heads x head size] or stacked [batch, keys, heads, 2, head size] (key and
    value), `value` [batch, keys, kv_heads x value head size]; with `split_heads`, query / key / value
    and the output are [batch, sequence, heads, head size] (any strides). `past_key` / `past_value`
    [batch, kv_heads, past, head size] precede the new keys. `mask` (int32) by `mask_type` (default:
    one value per batch -> KEY_SEQUENCE_LENGTH, else BOOLEAN; a 2-D BOOLEAN mask is [batch, keys], any
    other broadcasts to [batch, heads, sequence, keys]); `relative_position_bias` broadcasts to [batch,
    heads, sequence, keys]. `scale` defaults to 1 / sqrt(head size). Returns the output, or with
    `present` (output, present key, present value), each [batch, kv_heads, past + keys, head size]:
    True for new tensors, or a pair of Tensors (either None: not written) to write them to.
    `allow_half_precision` (DML_EXECUTION_FLAG_ALLOW_HALF_PRECISION_COMPUTATION): on the tensor cores
    each softmax weight is one float16, and FLOAT32 runs there too, converted to float16 as it loads
    (docs/attention.md's looser bounds)."""
    kv_heads = heads if kv_heads is None else kv_heads
    names = ("query", "key", "value", "bias", "relative_position_bias", "past_key", "past_value")
    given = [(n, v) for n, v in zip(names, (query, key, value, bias, relative_position_bias, past_key, past_value))
             if v is not None]
    dev, tensors = _operands(tuple(v for _, v in given), tuple(n for n, _ in given), device)
    t = dict(zip((n for n, _ in given), tensors))
    q, k, v = t["query"], t.get("key"), t.get("value")
    dt = q.desc.data_type
    qs, stacked_q = q.desc.sizes, q.desc.dimension_count == 5
    batch, seq = qs[0], qs[1]
    dqk = qs[-1] if stacked_q or split_heads else qs[-1] // heads
    if k is not None:
        keys = k.desc.sizes[1]
    elif stacked_q:
        keys = seq
    else:
        keys = 0
    pk, pv = t.get("past_key"), t.get("past_value")
    past = pk.desc.sizes[-2] if pk is not None else 0
    if v is not None:
        dv = v.desc.sizes[-1] if split_heads else v.desc.sizes[-1] // kv_heads
    elif pv is not None and k is None and not (stacked_q and qs[3] == 3):
        dv = pv.desc.sizes[-1]
    else:
        dv = dqk
    total = past + keys
    shape4 = (batch, heads, seq, total)
    m, kind = (None, 0) if mask is None else _mask(mask, mask_type, dev, shape4)
    rb = t.get("relative_position_bias")
    if rb is not None:
        rb = broadcast_view(rb, shape4, "relative_position_bias")
    psl = None if past_sequence_lengths is None else _int32(past_sequence_lengths, dev, "past_sequence_lengths",
                                                               (DataType.INT32, DataType.UINT32))
    out_sizes = (batch, seq, heads, dv) if split_heads else (batch, seq, heads * dv)
    if out is not None:
        check_out(out, dev, out_sizes, dt)
    o_desc = out.desc if out is not None else _packed(dt, out_sizes)
    given_presents = present if isinstance(present, tuple) else None
    if given_presents is not None:
        p_desc = tuple(None if p is None else p.desc for p in given_presents)
    elif present:
        p_desc = (_packed(dt, (batch, kv_heads, total, dqk)), _packed(dt, (batch, kv_heads, total, dv)))
    else:
        p_desc = (None, None)
    forms = {"query_tensor": q, "key_tensor": k, "value_tensor": v, "stacked_query_key_tensor": None,
             "stacked_key_value_tensor": None, "stacked_query_key_value_tensor": None}
    if stacked_q:
        forms["query_tensor"] = None
        forms["stacked_query_key_value_tensor" if qs[3] == 3 else "stacked_query_key_tensor"] = q
        forms["key_tensor"] = None if qs[3] == 3 or k is None else k
    if k is not None and k.desc.dimension_count == 5:
        forms["key_tensor"], forms["stacked_key_value_tensor"] = None, k
    inputs = {**forms, "bias_tensor": t.get("bias"), "mask_tensor": m, "relative_position_bias_tensor": rb,
              "past_key_tensor": pk, "past_value_tensor": pv}
    fields: dict[str, Any] = {f: None if x is None else x.desc for f, x in inputs.items()}
    common: dict[str, Any] = dict(output_tensor=o_desc, output_present_key_tensor=p_desc[0], output_present_value_tensor=p_desc[1],
                  scale=1.0 / math.sqrt(dqk) if scale is None else scale, mask_filter_value=mask_filter_value,
                  mask_type=kind, causal=causal, split_heads=split_heads)
    if kv_heads != heads or psl is not None:
        desc: Any = MultiheadAttention1Desc(**fields, past_sequence_lengths_tensor=None if psl is None else psl.desc,
                                            query_head_count=heads, key_value_head_count=kv_heads, **common)
        bound = [*inputs.values(), psl]
    else:
        desc = MultiheadAttentionDesc(**fields, head_count=heads, **common)
        bound = list(inputs.values())
    op = compile_cached(dev, desc, bool(allow_half_precision))
    y = out if out is not None else pooled_empty(dev, o_desc)
    presents = list(given_presents) if given_presents is not None else \
        [pooled_empty(dev, d) if d is not None else None for d in p_desc]
    op.execute(bound, [y, *presents])
    return (y, *presents) if present is not False else y
