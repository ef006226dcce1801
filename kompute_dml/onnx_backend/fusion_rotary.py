"""Rotary position embedding as Llama-family models export it (transformers' rotate_half), one
ROTARY_EMBEDDING dispatch (kdml.rotary_embedding; fusions.py's patterns):

    Slice(x, D/2:) -> Neg -> Concat(., Slice(x, :D/2), axis = last) -> Mul(., sin) ;
    Mul(x, cos) ; Add(x cos, rotated sin)

along x's last axis of D (even) elements, each operand of a Mul and of the Add on either side. The
operator rounds every step as these nodes do: the unfused bits. The Slices' bounds are host values
the plan computes (shape arithmetic), so they are checked at run time: any other slice runs the
chain's nodes one by one (fusions.Unfused), as do cos / sin that do not broadcast to x's shape."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

import kompute_dml as kdml

from .graph import _attr, other_input
from .handlers_values import as_device
from .values import DeviceValue, FallbackNeeded, RunStats, _value_dtype, _value_shape

if TYPE_CHECKING:
    from .context import NodeContext
    from .rep import BackendRep

_TYPES = (np.float32, np.float16)


def check_rotary(rep: BackendRep, nodes: list[onnx.NodeProto]) -> str:
    """Why the chain is not x cos + rotate_half(x) sin ("" where it may be: the slices' bounds are
    checked at run time)."""
    hi, _neg, cat, mul_s, lo, mul_c, _add = nodes
    x = hi.input[0]
    if lo.input[0] != x or x not in mul_c.input:
        return "the Slices and the cosine's Mul do not read one x"
    if rep._elem_dtype(x) not in (*_TYPES, None):  # (None: a type the graph does not declare, checked at run time)
        return f"x of type {rep._elem_dtype(x)}"
    if len(cat.input) != 2:
        return f"a Concat of {len(cat.input)} inputs"
    rank = rep._declared_rank(x)
    axis = int(_attr(cat, "axis", 0))
    if axis != -1 and (rank is None or axis != rank - 1):
        return f"Concat axis {axis} (rank {rank}) is not the last"
    if other_input(mul_s, cat.output[0]) in (x, cat.output[0]):
        return "the sine's Mul does not read a table"
    return ""


def _picked(node: onnx.NodeProto, lookup: Callable[[str], Any], shape: tuple[int, ...]) -> range:
    """The last-axis positions a Slice of x keeps (ONNX's clamping: Python's for step 1), or Unfused."""
    args = [lookup(n) if n else None for n in node.input[:5]] + [None] * 5
    if any(a is not None and not isinstance(a, (np.ndarray, np.generic)) for a in args[1:5]):
        raise FallbackNeeded("Slice bounds that are not host values")
    starts, ends, axes, steps = (None if a is None else np.atleast_1d(a) for a in args[1:5])
    rank = len(shape)
    axes = np.arange(len(starts)) if axes is None else axes
    if len(axes) != 1 or int(axes[0]) % rank != rank - 1 or (steps is not None and int(steps[0]) != 1):
        raise FallbackNeeded("a Slice of another axis than the last, or a step")
    return range(shape[-1])[int(starts[0]):int(ends[0])]


def run_rotary(ctx: NodeContext, nodes: list[onnx.NodeProto], lookup: Callable[[str], Any],
               stats: RunStats) -> list[Any]:
    hi, _neg, cat, mul_s, lo, mul_c, add = nodes
    name = hi.input[0]
    x = lookup(name)
    dt, shape = _value_dtype(x), _value_shape(x)
    if dt not in _TYPES or not shape or 0 in shape or shape[-1] % 2:
        raise FallbackNeeded(f"x of {dt} {shape}")
    half = shape[-1] // 2
    if _picked(hi, lookup, shape) != range(half, 2 * half) or _picked(lo, lookup, shape) != range(half):
        raise FallbackNeeded("Slices that are not the two halves of the last axis")
    tables = []
    for mul, operand in ((mul_c, name), (mul_s, cat.output[0])):
        t_name = other_input(mul, operand)
        t = lookup(t_name)
        if _value_dtype(t) != dt:
            raise FallbackNeeded(f"a table of type {_value_dtype(t)}")
        try:
            full = tuple(np.broadcast_shapes(_value_shape(t), shape))
        except ValueError:
            full = None
        if full != shape:
            raise FallbackNeeded(f"a table of shape {_value_shape(t)}, not broadcast to x's {shape}")
        tables.append(as_device(ctx, t, stats, t_name).tensor)
    y = kdml.rotary_embedding(as_device(ctx, x, stats, name).tensor, *tables, sine_first=add.input[0] == mul_s.output[0],
                              out=ctx.out_tensor(shape, dt), device=ctx.device)
    return [DeviceValue(y, shape, np.dtype(dt))]


def rotary_patterns(pattern: Callable[..., Any]) -> list[Any]:
    """The chain with the rotated value on either side of the sine's Mul and the products on either
    side of the Add (positions: 0 the upper Slice, 1 Neg, 2 Concat, 3 the sine's Mul, 4 the lower
    Slice, 5 the cosine's Mul, 6 the Add)."""
    return [pattern("Slice+Neg+Concat+Mul+Slice+Mul+Add", ("Slice", "Neg", "Concat", "Mul", "Slice", "Mul", "Add"),
                    ((0, 1, 0), (1, 2, 0), (4, 2, 1), (2, 3, k_s), (3, 6, k_add), (5, 6, 1 - k_add)),
                    "ROTARY_EMBEDDING", check_rotary, run_rotary)
            for k_s, k_add in itertools.product((0, 1), (0, 1))]
