"""ai.onnx Attention's forms that MULTIHEAD_ATTENTION keeps inside its kernel, as the ONNX reference's
chain of operators on the device (docs/attention.md, "ONNX's Attention"): softcap (a step between the
scores and the mask) and the qk_matmul_output output (the scores themselves, in any of its four
modes). handlers_onnx_attention.py sends a node here where it has either.

    scores = Q K^T x scale            (GEMM per key / value head: the query heads of a group as one
                                       matrix of group x sequence rows; alpha = scale)
    scores = softcap x tanh(scores / softcap)        where softcap > 0
    biased = scores + bias            (the mask as handlers_onnx_attention._masks makes it: a bool
                                       mask as 0 / -inf, a float one as is, the causal frontier and
                                       the sliding window, nonpad_kv_seqlen's keys)
    P      = softmax(biased) over the keys, a row that attends no key 0
    Y      = P V                      (GEMM; 3-D inputs' [batch, sequence, heads x v head] through a
                                       strided copy)
    qk_matmul_output: mode 0 and 1 the scores after softcap, 2 biased, 3 P.

The reference scales Q and K by sqrt(scale) each, so the scores differ from it in the last bits (the
tests' tolerances); the rest rounds as it does. past_key / past_value are joined before the new keys
(present_key / present_value where named)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

import kompute_dml as kdml

from .graph import _attr
from .handlers_attention import view as _view
from .values import DeviceValue

if TYPE_CHECKING:
    from .context import NodeContext
    from .values import RunStats


def attention_chain(ctx: NodeContext, node: onnx.NodeProto, stats: RunStats, dt: Any, q4: kdml.Tensor,
                    k4: kdml.Tensor, v4: kdml.Tensor, pk: kdml.Tensor | None, pv: kdml.Tensor | None,
                    masks: tuple[Any, Any, Any, bool], causal_bias: Any, four: bool) -> list[Any]:
    """Y[, present_key, present_value[, qk_matmul_output]] of the node from q4 [b, h, s, d], k4 / v4
    [b, kv heads, keys, d / dv] views, the past, `masks` (handlers_onnx_attention._masks's result) and
    `causal_bias()` (the causal frontier as 0 / -inf where _masks left it to the operator)."""
    dev = ctx.device
    b, h, s, d = q4.desc.sizes
    kvh, keys, dv = k4.desc.sizes[1], k4.desc.sizes[2], v4.desc.sizes[3]
    g, past = h // kvh, 0 if pk is None else pk.desc.sizes[2]
    total = past + keys
    outs: list[Any] = [None] * 4
    kv = []
    for j, (new, old, width) in enumerate(((k4, pk, d), (v4, pv, dv))):
        shape = (b, kvh, total, width)
        named = len(node.output) > j + 1 and node.output[j + 1]
        if old is None and not named:  # the new keys / values as they are (GEMM reads any strides)
            kv.append(new)
            continue
        dst = ctx.out_tensor(shape, dt)
        kdml.join([old, new] if old is not None else [new], axis=2, out=dst, device=dev)
        kv.append(dst)
        if named:
            outs[j + 1] = DeviceValue(dst, shape, dt)
    # the query heads of a key / value head as one matrix: [b, kv heads, group x sequence, d] (packed)
    packed = q4.desc.effective_strides == kdml.TensorDesc(q4.desc.data_type, (b, h, s, d)).effective_strides
    qc = q4 if packed else kdml.copy(q4, out=ctx.out_tensor((b, h, s, d), dt), device=dev)
    scale = _attr(node, "scale")
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    scores = ctx.out_tensor((b, h, s, total), dt)
    grouped = (b, kvh, g * s, total), (h * s * total, g * s * total, total, 1)
    kdml.gemm(_view(qc, (b, kvh, g * s, d), (h * s * d, g * s * d, d, 1)), kv[0], trans_b=True, alpha=scale,
              out=_view(scores, *grouped), device=dev)
    cap = float(_attr(node, "softcap", 0.0))
    if cap > 0:
        c = np.array(cap, dt)
        kdml.div(scores, c, out=scores, device=dev)
        kdml.tanh(scores, out=scores, device=dev)
        kdml.mul(scores, c, out=scores, device=dev)
    mode = int(_attr(node, "qk_matmul_output_mode", 0))
    want_qk = len(node.output) > 3 and node.output[3]
    if want_qk and mode in (0, 1):
        outs[3] = DeviceValue(kdml.copy(scores, out=ctx.out_tensor(scores.desc.sizes, dt), device=dev),
                              (b, h, s, total), dt)
    mask, rb, cond, causal = masks
    bias = rb
    if mask is not None:  # INT32 1 / 0: 0 / -inf
        allowed = kdml.greater(mask, np.array(0, np.int32), out=ctx.out_tensor(mask.desc.sizes, np.uint8), device=dev)
        bias = kdml.where(allowed, np.zeros((), dt), np.array(-np.inf, dt), out=ctx.out_tensor(mask.desc.sizes, dt),
                          device=dev)
    elif causal:
        bias = causal_bias()
    if bias is not None:
        kdml.add(scores, bias, out=scores, device=dev)
    if want_qk and mode == 2:  # (nothing writes the scores after this)
        outs[3] = DeviceValue(scores, (b, h, s, total), dt)
    p = kdml.softmax(scores, axes=(-1,), out=ctx.out_tensor(scores.desc.sizes, dt), device=dev)
    if cond is not None:  # rows that attend no key: zeros (their softmax of -inf alone is NaN)
        p = kdml.where(cond, p, np.zeros((), dt), out=ctx.out_tensor(p.desc.sizes, dt), device=dev)
    if want_qk and mode == 3:
        outs[3] = DeviceValue(p, (b, h, s, total), dt)
    y_shape = (b, h, s, dv) if four else (b, s, h * dv)
    y = ctx.out_tensor(y_shape, dt)
    ctx_rows = y if four else ctx.out_tensor((b, h, s, dv), dt)
    kdml.gemm(_view(p, *grouped), kv[1], out=_view(ctx_rows, (b, kvh, g * s, dv), (h * s * dv, g * s * dv, dv, 1)),
              device=dev)
    if not four:  # [b, h, s, dv] -> [b, s, h x dv]
        kdml.copy(ctx_rows, out=_view(y, (b, h, s, dv), (s * h * dv, dv, h * dv, 1)), device=dev)
    outs[0] = DeviceValue(y, y_shape, dt)
    return outs[:len(node.output)]
