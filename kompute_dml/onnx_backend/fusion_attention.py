"""The exported graphs' attention as one MULTIHEAD_ATTENTION dispatch (fusions.py's patterns):

MatMul(Q, K^T) | FusedMatMul(Q, K^T, alpha) -> [Mul(., c) | Div(., c)] -> [Add(., mask)] ->
Softmax(last axis) -> [Cast to its own type, up to twice] -> MatMul(., V)

as torch.onnx.export's TorchScript exporter writes BERT / RoBERTa / DistilBERT (FusedMatMul after
onnxruntime's fusions), GPT-2, Llama, ViT and Whisper, and

MatMul(Mul(Q, c), Mul(K^T, c')) -> [Add(., mask)] -> Softmax(last axis) -> [IsNaN -> Where(isnan, 0, .)]
-> MatMul(., V)

as its dynamo exporter (torch.export and onnxscript, the default since torch 2.9) writes
scaled_dot_product_attention: the scale split as sqrt(scale) on each side, a boolean mask as
Where(mask, 0, -inf), and the weights of a row whose every score is -inf (NaN) set to 0.

Q [batch, heads, seq, head], K^T [batch, heads, head, keys] and V [batch, heads, keys, head] (rank
3: one head) as the Transposes make them, bound through their strides with the operator's
split_heads extension (no copy); the scale is alpha times c (or over c; times c c' before the
product), the additive mask (a causal mask through Where / Add included) the operator's relative
position bias, broadcast. After IsNaN -> Where the rows the mask leaves no key get zeros: the
mask's row maximum > -inf selects the operator's row or 0, as the ONNX Attention handler does (a
row made NaN by a NaN or infinite score stays NaN). The result [batch, heads, seq, head] as the last
MatMul's, or, where the chain goes on into the exported Transpose(perm 0, 2, 1, 3), that
Transpose's [batch, seq, heads, head], packed: the operator's own output layout, so the Reshape to
[batch, seq, hidden] after it is a view instead of a copy per layer. Every intermediate must be
read only by the chain (fusions._match) and c a constant scalar; shapes the operator does not take
(batch dimensions that broadcast, a mask that does not broadcast to the scores) run the chain node
by node (FallbackNeeded, which Fusion.run turns into Unfused). The float32 arithmetic differs from
the unfused nodes' only in rounding (the scores are never rounded to the type, the scale is one
product): within the families' tolerance (tests/test_model_families.py). A float16 chain's Softmax
rounds its weights to float16: the operator keeps them so too (allow_half_precision: the tensor
cores' float16-weight kernel, docs/attention.md)."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

import kompute_dml as kdml

from ..core.layout import merge_dims
from ..ops.attention_gemm import shape_takes
from ..ops.attention_layout import COOP_ROWS, blocked_takes, coop_takes
from ..runtime.attention_policy import fused_max_flops
from .graph import _attr, constant_float, positive_zero_constant
from .half_precision import half_weights
from .handlers_nn import _opset
from .handlers_values import as_device
from .values import _FLOAT_OUT, DeviceValue, FallbackNeeded, RunStats, _value_dtype

if TYPE_CHECKING:
    from .context import NodeContext
    from .rep import BackendRep


def _roles(nodes: list[onnx.NodeProto]) -> dict[str, Any]:
    """The chain's nodes by role: head (Q K^T), last (the product with V), "pre" (the Muls of Q and
    K^T before the head: the dynamo export's), the optional ones by op type, and "transpose" where
    the chain ends in the Transpose after the last product."""
    tail = {"transpose": nodes[-1]} if nodes[-1].op_type == "Transpose" else {}
    inner = nodes[:-1] if tail else nodes
    k = next(i for i, n in enumerate(inner) if n.op_type in ("MatMul", "FusedMatMul"))
    return {"head": inner[k], "last": inner[-1], "pre": inner[:k], **{n.op_type: n for n in inner[k + 1:-1]}, **tail}


def _pre_scale(rep: Any, node: onnx.NodeProto) -> tuple[str, float] | None:
    """A pre-scale Mul's (operand, constant scalar factor), the constant on either side; None if
    neither side is one."""
    for data, c in ((0, 1), (1, 0)):
        v = _constant_scalar(rep, node.input[c], node.input[data])
        if v is not None:
            return node.input[data], v
    return None


def _nan_guard_check(rep: BackendRep, where: onnx.NodeProto) -> str:
    """IsNaN -> Where(isnan, value, softmax): the value one constant +0.0 (the guard writes +0; more
    elements could broadcast the result up)."""
    reason = positive_zero_constant(rep, where.input[1])
    if not reason and rep.constant_host(where.input[1]).size != 1:
        reason = f"Where's value has {rep.constant_host(where.input[1]).size} elements"
    return reason


def _constant_scalar(rep: BackendRep, name: str, beside: str) -> float | None:
    """The finite, non-zero value of a one-element constant whose rank is no higher than the
    declared rank of `beside` (the other operand: a higher rank would broadcast the product up);
    None otherwise."""
    v = constant_float(rep, name)
    rank = rep._declared_rank(beside)
    if v is None or not np.isfinite(v) or v == 0.0 or rep.constant_host(name).ndim > (0 if rank is None else rank):
        return None
    return v


def check_attention(rep: BackendRep, nodes: list[onnx.NodeProto]) -> str:
    """Why the chain is not an exact attention ("" where it is)."""
    r = _roles(nodes)
    head = r["head"]
    for pre in r["pre"]:
        if _pre_scale(rep, pre) is None:
            return "a Mul before the scores without a constant scalar operand"
    if "Where" in r and (reason := _nan_guard_check(rep, r["Where"])):
        return reason
    dts = {rep._elem_dtype(n) for n in (*head.input[:2], r["last"].input[1])}
    if not dts <= _FLOAT_OUT | {None}:
        return f"products of {sorted(map(str, dts - {None}))}"
    if head.op_type == "FusedMatMul" and any(int(_attr(head, a, 0)) for a in ("transA", "transBatchA", "transBatchB")):
        return "FusedMatMul with transA / transBatch"
    for op in ("Mul", "Div"):
        if op in r and _constant_scalar(rep, r[op].input[1], r[op].input[0]) is None:
            return f"the {op}'s operand is not a constant scalar"
    if "transpose" in r:
        perm = [int(v) for v in _attr(r["transpose"], "perm", [])]
        # (a rank the graph does not declare, as after onnxruntime's contrib fusions: checked at run time)
        if perm != [0, 2, 1, 3] or rep._declared_rank(r["last"].output[0]) not in (4, None):
            return f"a Transpose of perm {perm} after the attention (rank {rep._declared_rank(r['last'].output[0])})"
    smx = r["Softmax"]
    rank = rep._declared_rank(smx.input[0])
    axis = int(_attr(smx, "axis", -1 if _opset(rep.model) >= 13 else 1))
    if axis != -1 and (rank is None or axis != rank - 1):
        return f"Softmax axis {axis} (rank {rank}) is not the last"
    for node in nodes:
        if node.op_type == "Cast":
            src = rep._elem_dtype(node.input[0])
            to = onnx.helper.tensor_dtype_to_np_dtype(int(_attr(node, "to", 0)))
            if src is None or np.dtype(to) != src:
                return f"a Cast from {src} to {np.dtype(to)}"
    return ""


def _bhsd(v: DeviceValue, name: str) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """(sizes, strides) of a rank-4 value, rank 3 as one head, a higher rank with its leading
    dimensions as one batch where its strides merge them (windows x batch: Twins, NesT, Hiera);
    None otherwise."""
    st = tuple(v.tensor.desc.effective_strides)
    if len(v.shape) == 4:
        return v.shape, st
    if len(v.shape) == 3:
        return (v.shape[0], 1, *v.shape[1:]), (st[0], 0, *st[1:])
    if len(v.shape) > 4:
        lead, lead_st = merge_dims(v.shape[:-3], st[:-3])
        if len(lead) == 1:
            return (lead[0], *v.shape[-3:]), (lead_st[0][0], *st[-3:])
    return None


def _split(t: kdml.Tensor, sizes: tuple[int, ...], strides: tuple[int, ...], swap: bool = False) -> kdml.Tensor:
    """[b, h, s, d] sizes / strides (swap: [b, h, d, s]) as the operator's [b, s, h, d] view."""
    b, h, s, d = sizes
    sb, sh, ss, sd = strides
    if swap:
        s, d, ss, sd = d, s, sd, ss
    return kdml.Tensor.trusted(t.buffer, kdml.TensorDesc(t.desc.data_type, (b, s, h, d), (sb, ss, sh, sd)), t.offset)


def run_attention(ctx: NodeContext, nodes: list[onnx.NodeProto], lookup: Callable[[str], Any],
                  stats: RunStats) -> list[Any]:
    r = _roles(nodes)
    head, last = r["head"], r["last"]
    names = [head.input[0], head.input[1], last.input[1]]
    pre_factor = 1.0
    for pre in r["pre"]:  # Q and K^T scaled before the product: their operands, the factors joined
        operand, factor = _pre_scale(ctx.prepared, pre)  # type: ignore[misc]
        names[names.index(pre.output[0])] = operand
        pre_factor *= factor
    q, kt, v = (as_device(ctx, lookup(n), stats, n) for n in names)
    dt = _value_dtype(q)
    if dt not in _FLOAT_OUT or _value_dtype(kt) != dt or _value_dtype(v) != dt:
        raise FallbackNeeded(f"operands of {_value_dtype(q)}, {_value_dtype(kt)}, {_value_dtype(v)}")
    views = [_bhsd(x, n) for x, n in ((q, "query"), (kt, "key"), (v, "value"))]
    if any(x is None for x in views) or (len(q.shape) > 4 and not q.shape[:-2] == kt.shape[:-2] == v.shape[:-2]):
        raise FallbackNeeded(f"operands of ranks {len(q.shape)}, {len(kt.shape)}, {len(v.shape)}")
    (qs, qst), (ks, kst), (vs, vst) = views  # type: ignore[misc]
    trans_b = head.op_type == "FusedMatMul" and bool(_attr(head, "transB", 0))
    keys = ks[2] if trans_b else ks[3]
    if qs[:2] != ks[:2] or qs[:2] != vs[:2] or (ks[2] if not trans_b else ks[3]) != qs[3] or vs[2] != keys:
        raise FallbackNeeded(f"shapes {q.shape}, {kt.shape}, {v.shape} (batch dimensions that broadcast)")
    batch, heads, seq, _ = qs
    flops = 4 * batch * heads * seq * keys * qs[3]
    policy = ctx.device.policy  # the device's measured crossovers (runtime/policy.py)
    width = max(qs[3], vs[3])
    half = half_weights(ctx, dt == np.float16)  # (float16 always; float32 under the flag)
    coop = coop_takes(policy.attention_kernel, half, width, seq, False)
    blocked = blocked_takes(policy.attention_kernel, width, seq, policy.attention_blocked_min_rows)
    # the two-GEMM kernel (ops/attention_gemm.py): the unfused chain's products less its softmax pass
    two = not coop and dt == np.float32 and shape_takes(ctx.device, batch, heads, seq, keys, qs[3], vs[3])
    if not two and flops > fused_max_flops(policy, coop, batch * heads * -(-seq // COOP_ROWS), blocked):
        raise FallbackNeeded(f"{flops:.3g} flops: the unfused chain is faster there (DevicePolicy.attention_fused_max_flops)")
    if not two and seq < policy.attention_fused_min_rows:
        raise FallbackNeeded(f"{seq} query rows: the unfused chain is faster there (DevicePolicy.attention_fused_min_rows)")
    if not two and heads > 1 and policy.attention_fused_min_rows > 1 and (kst[1] == 0 or vst[1] == 0):
        raise FallbackNeeded("key / value heads repeated (GQA's expanded heads): the unfused chain is faster there")
    scale = (float(_attr(head, "alpha", 1.0)) if head.op_type == "FusedMatMul" else 1.0) * pre_factor
    if "Mul" in r:
        scale *= float(np.asarray(ctx.host(lookup(r["Mul"].input[1]), stats)).reshape(-1)[0])
    if "Div" in r:
        scale /= float(np.asarray(ctx.host(lookup(r["Div"].input[1]), stats)).reshape(-1)[0])
    mask = None
    if "Add" in r:
        m = as_device(ctx, lookup(r["Add"].input[1]), stats, r["Add"].input[1])
        if len(q.shape) > 4:
            raise FallbackNeeded(f"a mask over scores of rank {len(q.shape)}")
        if _value_dtype(m) != dt or len(m.shape) > 4:
            raise FallbackNeeded(f"a mask of {_value_dtype(m)} {m.shape}")
        shape4 = (batch, heads, seq, keys)
        try:
            if tuple(np.broadcast_shapes(m.shape, shape4 if len(q.shape) == 4 else (batch, seq, keys))) != \
                    (shape4 if len(q.shape) == 4 else (batch, seq, keys)):
                raise ValueError
        except ValueError:
            raise FallbackNeeded(f"a mask of shape {m.shape} for scores {shape4}") from None
        mt = m.tensor
        if len(q.shape) == 3:  # [.., seq, keys] over one head
            pad = 3 - len(m.shape)
            sizes = (1,) * pad + m.shape
            st = (0,) * pad + tuple(mt.desc.effective_strides)
            mt = kdml.Tensor.trusted(mt.buffer, kdml.TensorDesc(mt.desc.data_type, (sizes[0], 1, *sizes[1:]),
                                                                (st[0], 0, *st[1:])), mt.offset)
        mask = mt
    dv = vs[3]
    sizes = (batch, heads, seq, dv)
    if "transpose" in r:  # [batch, seq, heads, dv] packed: the operator's output as it is
        if len(q.shape) != 4:
            raise FallbackNeeded(f"a Transpose after an attention of rank {len(q.shape)}")
        out_shape, ostrides = (batch, seq, heads, dv), (seq * heads * dv, dv, heads * dv, 1)
    else:
        out_shape = (batch, seq, dv) if len(q.shape) == 3 else (*q.shape[:-1], dv)
        ostrides = (heads * seq * dv, seq * dv, dv, 1)
    out = ctx.out_tensor(out_shape, dt)
    guard = mask is not None and "Where" in r  # rows the mask leaves no key: zeros (the Where's)
    raw = ctx.out_tensor(out_shape, dt) if guard else out
    kdml.multihead_attention(_split(q.tensor, qs, qst), _split(kt.tensor, ks, kst, swap=not trans_b),
                             _split(v.tensor, vs, vst), heads=heads, relative_position_bias=mask, scale=scale,
                             split_heads=True, out=_split(raw, sizes, ostrides), device=ctx.device,
                             allow_half_precision=half)
    if guard:
        _zero_empty_rows(ctx, _rows_with_keys(ctx, m, mask, dt), raw, out, sizes, ostrides, dt)
    return [DeviceValue(out, out_shape, dt)]


def _rows_with_keys(ctx: NodeContext, m: DeviceValue, mask: kdml.Tensor, dt: np.dtype) -> kdml.Tensor:
    """Whether each row of the mask (rank 4, broadcast to the scores; a view of the value m) holds a score
    above -inf: REDUCE and LOGICAL_GREATER_THAN, once per mask value and view in a run (every layer of a
    model reads one mask: the run's memo, held as long as m)."""
    key = ("rows with keys", id(m), tuple(mask.desc.sizes), tuple(mask.desc.effective_strides), mask.offset)
    hit = ctx.memo.get(key)
    if hit is not None and hit[0] is m:
        return hit[1].tensor
    pad = 4 - mask.desc.dimension_count  # right-aligned to the scores
    mask = kdml.Tensor.trusted(mask.buffer, kdml.TensorDesc(mask.desc.data_type, (1,) * pad + tuple(mask.desc.sizes),
                                                            (0,) * pad + tuple(mask.desc.effective_strides)), mask.offset)
    row = kdml.reduce_max(mask, axes=[3], out=ctx.out_tensor((*mask.desc.sizes[:3], 1), dt), device=ctx.device)
    cond = kdml.greater(row, np.array(-np.inf, dt), out=ctx.out_tensor(row.desc.sizes, np.uint8), device=ctx.device)
    value = DeviceValue(cond, tuple(cond.desc.sizes), np.dtype(np.uint8))
    ctx.memo[key] = (m, value)
    ctx.attach(m, value)  # a whole-graph plan: the condition lives as long as the mask
    return cond


def _zero_empty_rows(ctx: NodeContext, cond: kdml.Tensor, raw: kdml.Tensor, out: kdml.Tensor,
                     sizes: tuple[int, ...], strides: tuple[int, ...], dt: np.dtype) -> None:
    """out = raw where `cond` (_rows_with_keys) holds, else 0: the chain's Where(IsNaN(softmax), 0, .) on
    a row of only -inf scores. raw and out are laid out alike; `sizes` / `strides` their [batch, heads,
    seq, dv] view."""
    st = cond.desc.effective_strides
    spread = tuple(0 if n == 1 else stride for n, stride in zip(cond.desc.sizes[:3], st[:3]))

    def view(t: kdml.Tensor, dtype: Any, strides: tuple[int, ...]) -> kdml.Tensor:
        return kdml.Tensor.trusted(t.buffer, kdml.TensorDesc(dtype, sizes, strides), t.offset)

    kdml.where(view(cond, cond.desc.data_type, (*spread, 0)), view(raw, raw.desc.data_type, strides), np.zeros((), dt),
               out=view(out, out.desc.data_type, strides), device=ctx.device)


def attention_patterns(pattern: type) -> tuple[Any, ...]:
    """Every combination of the chain's optional nodes, one Pattern each (the longest first: those
    ending in the Transpose before the same chains without it; none is nested in another (Pattern.nested:
    the same run-time conditions), so an unfused one runs its products' chains); then the dynamo
    export's: Q and K^T scaled before the product, the NaN guard."""
    out = []
    for transpose, head, scale, mask, casts in itertools.product((True, False), ("MatMul", "FusedMatMul"),
                                                                 ("Mul", "Div", ""), (True, False), (2, 1, 0)):
        ops = (head, *((scale,) if scale else ()), *(("Add",) if mask else ()), "Softmax", *("Cast",) * casts, "MatMul",
               *(("Transpose",) if transpose else ()))
        edges = tuple((i, i + 1, 0) for i in range(len(ops) - 1))
        out.append(pattern("+".join(ops), ops, edges, "MULTIHEAD_ATTENTION", check_attention, run_attention,
                           ms_ops=frozenset({"FusedMatMul"}), nested=False))
    for transpose, pre, mask, guard in itertools.product((True, False), (True, False), (True, False), (True, False)):
        if not (pre or guard):
            continue  # the chains above
        ops = (*(("Mul", "Mul") if pre else ()), "MatMul", *(("Add",) if mask else ()), "Softmax",
               *(("IsNaN", "Where") if guard else ()), "MatMul", *(("Transpose",) if transpose else ()))
        at = {op: i for i, op in reversed(list(enumerate(ops)))}  # each type's first position
        smx, last = at["Softmax"], len(ops) - (2 if transpose else 1)
        edges = [(0, 2, 0), (1, 2, 1)] if pre else []
        edges += [(i, i + 1, 0) for i in range(at["MatMul"], smx)]  # the product, [the mask,] the softmax
        edges += [(smx, smx + 1, 0), (smx + 1, smx + 2, 0), (smx, smx + 2, 2), (smx + 2, last, 0)] if guard \
            else [(smx, last, 0)]
        edges += [(last, last + 1, 0)] if transpose else []
        out.append(pattern("+".join(ops), ops, tuple(edges), "MULTIHEAD_ATTENTION", check_attention, run_attention,
                           nested=False))
    return tuple(out)
