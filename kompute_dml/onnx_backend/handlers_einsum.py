"""ONNX Einsum on the device, as onnxruntime's DirectML provider decomposes it: one or two float
operands, each subscript at most once per operand (no diagonals), ellipses broadcast as numpy
does. A subscript of one operand that the output lacks is summed first (REDUCE SUM); then, for
two operands, the subscripts both operands and the output share are the batch, those both
operands share alone are contracted, and the rest are each operand's free dimensions: each
operand is viewed (strided) in the order batch, free, contracted, merged into (batch..., M, K) and
(batch..., K, N) (a copy only where strides cannot express it, or where the batch dimensions fold into
GEMM's two only packed: handlers_values.gemm_foldable), multiplied by GEMM (kdml.matmul:
float32 sums, docs/gemm.md), and the product is viewed in the output's order. Three or more
operands, repeated subscripts and other types run on the CPU."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

import kompute_dml as kdml

from .graph import attr_text
from .handlers_values import as_device, gemm_foldable, reshaped, strided
from .values import _FLOAT_OUT, DeviceValue, FallbackNeeded, RunStats, _value_dtype, _value_shape

if TYPE_CHECKING:
    from .context import NodeContext

_ELLIPSIS_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"  # the ellipsis' dimensions (ONNX subscripts are lower case)


def parse(equation: str, ranks: list[int]) -> tuple[list[str], str]:
    """Each operand's subscripts and the output's, the ellipsis spelled as upper-case letters
    aligned from the right (numpy's broadcasting); ValueError for an equation that does not fit."""
    eq = equation.replace(" ", "")
    lhs, arrow, out = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise ValueError(f"Einsum equation {equation!r}: {len(terms)} operand terms for {len(ranks)} inputs")
    width = 0
    letters: list[str] = []
    for term, rank in zip(terms, ranks):
        named = len(term.replace("...", ""))
        if "..." in term:
            width = max(width, rank - named)
        elif named != rank:
            raise ValueError(f"Einsum equation {equation!r}: term {term!r} names {named} dimensions of a rank-{rank} input")
    ell = _ELLIPSIS_LETTERS[:width]
    for term, rank in zip(terms, ranks):
        if "..." in term:
            k = rank - len(term.replace("...", ""))
            if k < 0:
                raise ValueError(f"Einsum equation {equation!r}: term {term!r} names more dimensions than rank {rank}")
            term = term.replace("...", ell[width - k:])
        if not all(c.isalpha() for c in term):
            raise ValueError(f"Einsum equation {equation!r}: subscripts are letters")
        letters.append(term)
    if arrow:
        out = out.replace("...", ell)
    else:  # implicit: the ellipsis, then the letters used once, in alphabetical order
        counts = {c: "".join(letters).count(c) for c in "".join(letters)}
        out = ell + "".join(sorted(c for c, n in counts.items() if n == 1 and c.islower()))
    return letters, out


def _sizes(letters: list[str], shapes: list[tuple[int, ...]]) -> dict[str, int]:
    size: dict[str, int] = {}
    for term, shape in zip(letters, shapes):
        for c, n in zip(term, shape):
            if size.get(c, 1) != 1 and n not in (1, size[c]):
                raise ValueError(f"Einsum: subscript {c!r} is {size[c]} in one operand and {n} in another")
            size[c] = max(size.get(c, 1), n)
    return size


def _permuted(v: DeviceValue, term: str, order: str) -> DeviceValue:
    """v (subscripts `term`) viewed with its dimensions in `order`."""
    st = v.tensor.desc.effective_strides
    idx = [term.index(c) for c in order]
    return strided(v, tuple(v.shape[i] for i in idx), tuple(st[i] for i in idx))


def _summed(ctx: NodeContext, v: DeviceValue, term: str, keep: set[str]) -> tuple[DeviceValue, str]:
    """v summed over the subscripts outside `keep` (REDUCE SUM)."""
    axes = [i for i, c in enumerate(term) if c not in keep]
    if not axes:
        return v, term
    left = "".join(c for c in term if c in keep)
    shape = tuple(n for c, n in zip(term, v.shape) if c in keep)
    out = ctx.out_tensor(shape, v.dtype)
    kdml.reduce_sum(v.tensor, axes, False, out=out, device=ctx.device)
    return DeviceValue(kdml.Tensor(out.buffer, kdml.TensorDesc(out.desc.data_type, shape or (1,)), out.offset),
                       shape, v.dtype), left


def _h_einsum(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    if len(ins) not in (1, 2):
        raise FallbackNeeded(f"{len(ins)} operands")
    dt = _value_dtype(ins[0])
    if dt not in _FLOAT_OUT or any(_value_dtype(v) != dt for v in ins):
        raise FallbackNeeded(f"type {dt} is not float32/float16 (or the operands differ)")
    shapes = [tuple(_value_shape(v)) for v in ins]
    if any(0 in s or not s for s in shapes):
        raise FallbackNeeded("an empty or rank-0 operand")
    equation = attr_text(node, "equation")
    letters, out = parse(equation, [len(s) for s in shapes])
    if any(len(set(t)) != len(t) for t in (*letters, out)):
        raise FallbackNeeded("a repeated subscript (a diagonal)")
    missing = set(out) - set("".join(letters))
    if missing:
        raise ValueError(f"Einsum {node.name!r}: output subscripts {sorted(missing)} name no operand dimension")
    size = _sizes(letters, shapes)
    vals = [as_device(ctx, v, stats, n) for v, n in zip(ins, node.input)]
    if len(vals) == 1:
        v, term = _summed(ctx, vals[0], letters[0], set(out))
        res = _permuted(v, term, out)
        return [res if res.shape else DeviceValue(res.tensor, (), dt)]
    (a, ta), (b, tb) = (_summed(ctx, v, t, set(out) | set(letters[1 - k]))
                        for k, (v, t) in enumerate(zip(vals, letters)))
    batch = "".join(c for c in out if c in ta and c in tb)
    m = "".join(c for c in out if c in ta and c not in tb)
    n = "".join(c for c in out if c in tb and c not in ta)
    k = "".join(c for c in ta if c in tb and c not in out)
    a_batch = tuple(a.shape[ta.index(c)] for c in batch)
    b_batch = tuple(b.shape[tb.index(c)] for c in batch)
    mm, kk, nn = (math.prod(size[c] for c in s) for s in (m, k, n))
    a2 = reshaped(ctx, _permuted(a, ta, batch + m + k), (*a_batch, mm, kk), stats)
    b2 = reshaped(ctx, _permuted(b, tb, batch + k + n), (*b_batch, kk, nn), stats)
    # (batch dimensions that fold into GEMM's two only once an operand is packed: Mamba-2's (batch, chunks, heads))
    a2, b2 = gemm_foldable(ctx, a2, b2, stats)
    full = tuple(np.broadcast_shapes(a_batch, b_batch))
    y = ctx.out_tensor((*full, mm, nn), dt)
    kdml.matmul(a2.tensor, b2.tensor, out=y, device=ctx.device)
    shape = (*full, *(size[c] for c in m), *(size[c] for c in n))
    res = DeviceValue(kdml.Tensor(y.buffer, kdml.TensorDesc(y.desc.data_type, shape or (1,)), y.offset), shape, dt)
    res = _permuted(res, batch + m + n, out) if shape else res
    return [res if res.shape else DeviceValue(res.tensor, (), dt)]


EINSUM_HANDLERS = {"Einsum": _h_einsum}
