"""A product written in a transposed layout in one GEMM dispatch (fusions.py's patterns): MatMul ->
Transpose whose perm keeps the last axis last, as an attention's context (softmax(Q K^T) V) ->
Transpose(0, 2, 1, 3) is exported where the attention chain is not fused or runs unfused (Whisper's
encoder past DevicePolicy.attention_fused_max_flops: Fusion.within). DML_GEMM's output is any
strided view (DirectML's strides): the product's [.., M, N] view of the transposed tensor, so the
Transpose never exists as a copy and the Reshape after it (heads merged) is a view of a packed tensor
where it was a copy of a strided one.

GEMM's sums do not depend on the output's layout (docs/gemm.md), so the result is the unfused bits
(`tests/test_fusion_transpose.py`). Float32 or float16 products of ranks 2 and up; other types,
1-D operands, a perm that moves the last axis or of another rank, and allow_half_precision run the
two nodes one by one (FallbackNeeded)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

import kompute_dml as kdml

from .graph import _attr, float_product
from .half_precision import use_half
from .handlers_values import as_device, strided
from .values import _FLOAT_OUT, DeviceValue, FallbackNeeded, RunStats, _value_dtype, _value_shape

if TYPE_CHECKING:
    from .context import NodeContext
    from .rep import BackendRep


def check_matmul_transpose(rep: BackendRep, nodes: list[onnx.NodeProto]) -> str:
    """Why the chain is not a product and a transposition keeping its rows' columns together ("" where it is)."""
    mm, tr = nodes
    why = float_product(rep, mm)
    if why:
        return why
    perm = _attr(tr, "perm", None)
    if perm is None or len(perm) < 2 or list(perm)[-1] != len(perm) - 1:
        return f"perm {perm} (the last axis must stay last)"
    return ""


def run_matmul_transpose(ctx: NodeContext, nodes: list[onnx.NodeProto], lookup: Callable[[str], Any],
                         stats: RunStats) -> list[Any]:
    mm, tr = nodes
    ins = [lookup(mm.input[0]), lookup(mm.input[1])]
    dt = _value_dtype(ins[0])
    if dt not in _FLOAT_OUT or _value_dtype(ins[1]) != dt or use_half(ctx, dt):
        raise FallbackNeeded(f"operands of {dt}, {_value_dtype(ins[1])} (or half precision)")
    sa, sb = _value_shape(ins[0]), _value_shape(ins[1])
    perm = [int(p) for p in _attr(tr, "perm")]
    try:
        batch = tuple(int(d) for d in np.broadcast_shapes(sa[:-2], sb[:-2]))
    except ValueError:
        raise FallbackNeeded("batch shapes that do not broadcast (the MatMul says so)") from None
    if len(sa) < 2 or len(sb) < 2 or sa[-1] != sb[-2] or len(perm) != len(batch) + 2 or sorted(perm) != list(range(len(perm))) \
            or 0 in sa or 0 in sb:
        raise FallbackNeeded(f"a product of {sa} and {sb} transposed by {perm}")
    shape = (*batch, sa[-2], sb[-1])
    out_shape = tuple(shape[p] for p in perm)
    out = DeviceValue(ctx.out_tensor(out_shape, dt), out_shape, np.dtype(dt))
    st = out.tensor.desc.effective_strides
    view = strided(out, shape, tuple(st[perm.index(i)] for i in range(len(shape))))  # the product's view
    a, b = (as_device(ctx, ins[i], stats, mm.input[i]).tensor for i in range(2))
    kdml.matmul(a, b, out=view.tensor, device=ctx.device)
    return [out]


def matmul_transpose_patterns(pattern: Callable[..., Any]) -> list[Any]:
    return [pattern("MatMul+Transpose", ("MatMul", "Transpose"), ((0, 1, 0),), "GEMM", check_matmul_transpose,
                    run_matmul_transpose)]
