"""A mixture of experts' products without their gathered weights (fusions.py's patterns): Gather(W,
idx) -> MatMul, as transformers' "batched_mm" experts export (Mixtral, Qwen-MoE, OLMoE: the weights on
the left; gpt-oss: on the right; the dynamo exporter writes the Gather as GatherND(W, idx[..., None])
with batch_dims 0, the same rows):

    W (E, M, K) experts' weights, idx (S..) each slot's expert, x (S.., K, 1) each slot's input:
    y[s] = W[idx[s]] @ x[s]                                                       (S.., M, 1)
    W (E, K, M), x (S.., 1, K):  y[s] = x[s] @ W[idx[s]]                           (S.., 1, M)

Unfused, the Gather writes every slot's whole expert (S x M x K values: 4 GiB for 2,048 slots of a
2048 x 256 float32 expert, past a device's maxStorageBufferRange) and the MatMul reads it back. Fused,
one GEMM multiplies every slot's input by every expert, x (S, K) @ W.reshape(E*M, K)^T -> (S, E, M)
(the right-hand form: x (S, K) @ W (E, K, M) -> (E, S, M), batched over the experts), and GATHER_ND
(batch_dims 1, the right-hand form reading its (S, E, M) view) keeps each slot's own expert's row:
E/K of the gathered bytes, E times the products the slots need (the experts of a layer are few; the GEMM
runs at the device's GEMM speed where the batched products are one row each).

Each kept value is the same dot product of the same float32 (or float16) operands; its summation order
is GEMM's (docs/gemm.md), not the unfused batched product's, so the result agrees to rounding
(tests/test_fusion_experts.py). Float32 / float16 W and x of one type, a Gather along axis 0 of a 3-D W,
x one column (row) per slot with the slots' shape idx's; anything else, allow_half_precision and empty
values run the two nodes one by one (FallbackNeeded)."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

import kompute_dml as kdml

from .graph import _attr, float_product
from .half_precision import use_half
from .handlers_values import as_device, reshaped, strided
from .values import _FLOAT_OUT, DeviceValue, FallbackNeeded, RunStats, _value_dtype, _value_shape

if TYPE_CHECKING:
    from .context import NodeContext
    from .rep import BackendRep


def check_gathered_matmul(rep: BackendRep, nodes: list[onnx.NodeProto]) -> str:
    """Why Gather (GatherND) -> MatMul is not a float product of gathered experts' weights ("" where it is)."""
    gather, mm = nodes
    if gather.op_type == "GatherND" and int(_attr(gather, "batch_dims", 0)) != 0:
        return f"a GatherND of batch_dims {_attr(gather, 'batch_dims', 0)} (0: whole experts)"
    if gather.op_type == "Gather" and int(_attr(gather, "axis", 0)) != 0:
        return f"a Gather along axis {_attr(gather, 'axis', 0)} (the experts' axis must be 0)"
    return float_product(rep, mm)


def run_gathered_matmul(ctx: NodeContext, nodes: list[onnx.NodeProto], lookup: Callable[[str], Any],
                        stats: RunStats, right: bool = False) -> list[Any]:
    gather, mm = nodes
    x_name = mm.input[0] if right else mm.input[1]
    w, idx, x = lookup(gather.input[0]), lookup(gather.input[1]), lookup(x_name)
    if 0 in _value_shape(idx):
        raise FallbackNeeded("no slots")
    idx = as_device(ctx, idx, stats, gather.input[1])  # (uploaded under its name as it is; views of it below)
    if gather.op_type == "GatherND":  # idx (S.., 1): whole experts along W's axis 0, Gather's rows
        qs = tuple(_value_shape(idx))
        if not qs or qs[-1] != 1:
            raise FallbackNeeded(f"GatherND indices {qs} (their last dimension must be 1)")
        idx = reshaped(ctx, idx, qs[:-1], stats) if len(qs) > 1 else idx
    dt = _value_dtype(w)
    if dt not in _FLOAT_OUT or _value_dtype(x) != dt or use_half(ctx, dt):
        raise FallbackNeeded(f"operands of {dt}, {_value_dtype(x)} (or half precision)")
    ws, qs, xs = _value_shape(w), tuple(_value_shape(idx)), tuple(_value_shape(x))
    if len(ws) != 3 or xs != ((*qs, 1, ws[1]) if right else (*qs, ws[2], 1)) or 0 in ws or 0 in xs:
        raise FallbackNeeded(f"experts {ws}, indices {qs} and inputs {xs} (x must be indices' shape + "
                             f"{'(1, K)' if right else '(K, 1)'})")
    s = math.prod(qs)
    wd = as_device(ctx, w, stats, gather.input[0])
    xv = reshaped(ctx, as_device(ctx, x, stats, x_name), (s, xs[-1] if right else xs[-2]), stats)
    if right:  # W (E, K, M): x @ W[e] for every e, (E, S, M), seen as (S, E, M)
        e, _, m = ws
        every = DeviceValue(ctx.out_tensor((e, s, m), dt), (e, s, m), np.dtype(dt))
        kdml.matmul(xv.tensor, wd.tensor, out=every.tensor, device=ctx.device)
        rows = strided(every, (s, e, m), (m, s * m, 1))
    else:  # W (E, M, K): x @ W.reshape(E*M, K)^T, (S, E*M)
        e, m, k = ws
        rows = DeviceValue(ctx.out_tensor((s, e, m), dt), (s, e, m), np.dtype(dt))
        flat = reshaped(ctx, rows, (s, e * m), stats)
        kdml.gemm(xv.tensor, reshaped(ctx, wd, (e * m, k), stats).tensor, trans_b=True, out=flat.tensor, device=ctx.device)
    out = ctx.out_tensor((s, m), dt)
    kdml.gather_nd(rows.tensor, reshaped(ctx, idx, (s, 1), stats).tensor, 1, out=out, device=ctx.device)
    shape = (*qs, 1, m) if right else (*qs, m, 1)
    return [reshaped(ctx, DeviceValue(out, (s, m), np.dtype(dt)), shape, stats)]


def experts_patterns(pattern: Callable[..., Any]) -> list[Any]:
    return [pattern(f"{g}+MatMul", (g, "MatMul"), ((0, 1, k),), "GEMM", check_gathered_matmul,
                    functools.partial(run_gathered_matmul, right=k == 1)) for g in ("Gather", "GatherND") for k in (0, 1)]
