"""A mixture of experts' products without their gathered weights (fusions.py's patterns): Gather(W,
idx) -> MatMul(., x), as transformers' "batched_mm" experts export (Mixtral, Qwen-MoE, OLMoE):

    W (E, M, K) experts' weights, idx (S..) each slot's expert, x (S.., K, 1) each slot's input:
    y[s] = W[idx[s]] @ x[s]                                                       (S.., M, 1)

Unfused, the Gather writes every slot's whole expert (S x M x K values: 4 GiB for 2,048 slots of a
2048 x 256 float32 expert, past a device's maxStorageBufferRange) and the MatMul reads it back. Fused,
one GEMM multiplies every slot's input by every expert, x (S, K) @ W.reshape(E*M, K)^T -> (S, E, M),
and GATHER_ND (batch_dims 1) keeps each slot's own expert's row: E/K of the gathered bytes, E times the
products the slots need (the experts of a layer are few; the GEMM runs at the device's GEMM speed where
the batched products are one row each).

Each kept value is the same dot product of the same float32 (or float16) operands; its summation order
is GEMM's (docs/gemm.md), not the unfused batched product's, so the result agrees to rounding
(tests/test_fusion_experts.py). Float32 / float16 W and x of one type, a Gather along axis 0 of a 3-D W,
x one column per slot with the slots' shape idx's; anything else, allow_half_precision and empty
values run the two nodes one by one (FallbackNeeded)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

import kompute_dml as kdml

from .graph import _attr, float_product
from .half_precision import use_half
from .handlers_math import _operands
from .handlers_values import as_device, reshaped
from .values import _FLOAT_OUT, DeviceValue, FallbackNeeded, RunStats, _value_dtype, _value_shape

if TYPE_CHECKING:
    from .context import NodeContext
    from .rep import BackendRep


def check_gathered_matmul(rep: BackendRep, nodes: list[onnx.NodeProto]) -> str:
    """Why Gather -> MatMul is not a float product of gathered experts' weights ("" where it is)."""
    gather, mm = nodes
    if int(_attr(gather, "axis", 0)) != 0:
        return f"a Gather along axis {_attr(gather, 'axis', 0)} (the experts' axis must be 0)"
    return float_product(rep, mm)


def run_gathered_matmul(ctx: NodeContext, nodes: list[onnx.NodeProto], lookup: Callable[[str], Any],
                        stats: RunStats) -> list[Any]:
    gather, mm = nodes
    w, idx, x = lookup(gather.input[0]), lookup(gather.input[1]), lookup(mm.input[1])
    dt = _value_dtype(w)
    if dt not in _FLOAT_OUT or _value_dtype(x) != dt or use_half(ctx, dt):
        raise FallbackNeeded(f"operands of {dt}, {_value_dtype(x)} (or half precision)")
    ws, qs, xs = _value_shape(w), tuple(_value_shape(idx)), tuple(_value_shape(x))
    if len(ws) != 3 or xs != (*qs, ws[2], 1) or 0 in ws or 0 in xs:
        raise FallbackNeeded(f"experts {ws}, indices {qs} and inputs {xs} (x must be indices' shape + (K, 1))")
    e, m, k = ws
    s = math.prod(qs)
    wv = reshaped(ctx, as_device(ctx, w, stats, gather.input[0]), (e * m, k), stats)
    xv = reshaped(ctx, as_device(ctx, x, stats, mm.input[1]), (s, k), stats)
    every = DeviceValue(ctx.out_tensor((s, e, m), dt), (s, e, m), np.dtype(dt))
    flat = reshaped(ctx, every, (s, e * m), stats)
    kdml.gemm(xv.tensor, wv.tensor, trans_b=True, out=flat.tensor, device=ctx.device)
    (ti,) = _operands(ctx, gather, [reshaped(ctx, idx, (s, 1), stats)], stats, names=[gather.input[1]])
    shape = (*qs, m, 1)
    out = ctx.out_tensor((s, m), dt)
    kdml.gather_nd(every.tensor, ti, 1, out=out, device=ctx.device)
    return [reshaped(ctx, DeviceValue(out, (s, m), np.dtype(dt)), shape, stats)]


def experts_patterns(pattern: Callable[..., Any]) -> list[Any]:
    return [pattern("Gather+MatMul", ("Gather", "MatMul"), ((0, 1, 0),), "GEMM", check_gathered_matmul,
                    run_gathered_matmul)]
