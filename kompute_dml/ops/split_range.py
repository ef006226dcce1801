"""Values larger than one storage-buffer binding (maxStorageBufferRange: 128 MiB on lavapipe, 4 GiB
on NVIDIA) split over dispatches: an operator's planner is called on parts of its tensors (the
outermost dimensions cut into as few parts as keep every tensor's part within one binding window),
and each part's plans are told which bytes of each tensor they touch (DispatchPlan.windows: a
byte delta and span per binding-list entry, the delta also added to the tensor's offset word), so
runtime/encode.py binds each buffer larger than the range as a window starting there (kp patch
level 14). CompiledOperator refuses, at compile, a dispatch that would bind more than a window
(ops/base.py): an operator without a splitting planner keeps its earlier limit. docs/large_values.md.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..core.ints import cdiv
from ..core.tensor_desc import TensorDesc
from ..runtime import DispatchPlan, binding_window
from ..runtime.plans import Plan

__all__ = ["binding_window", "fits", "span_bytes", "split_outer"]

SLACK = 16  # a window's start is aligned down by up to `align` bytes; vector loads round to 16


def span_bytes(desc: TensorDesc) -> int:
    """The bytes from a tensor's first element to the end of its last, in whole 32-bit words
    (what a shader reading words may touch)."""
    last = sum((s - 1) * st for s, st in zip(desc.sizes, desc.effective_strides))
    return cdiv((last + 1) * desc.data_type.size, 4) * 4


def fits(descs: Sequence[TensorDesc], window: tuple[int, int]) -> bool:
    """Every tensor within one binding window (a window of 0 bytes: no limit)."""
    rng, align = window
    return not rng or all(span_bytes(d) + align + SLACK <= rng for d in descs)


def _part(d: TensorDesc, axis: int | None, start: int, n: int) -> tuple[TensorDesc, int]:
    """`n` elements of dimension `axis` from `start`: the part's descriptor (the parent's strides)
    and its byte delta; a tensor without the axis (None) is whole."""
    if axis is None:
        return d, 0
    sizes = list(d.sizes)
    sizes[axis] = n
    st = d.effective_strides
    return TensorDesc(d.data_type, tuple(sizes), tuple(st)), start * st[axis] * d.data_type.size


def _shift(plan: Plan, entries: Sequence[int], deltas: Sequence[int], descs: Sequence[TensorDesc]) -> Plan:
    """A part's plan over the whole tensors: each entry's delta added to its offset words, and
    the bytes it touches declared (windows)."""
    if not isinstance(plan, DispatchPlan):
        raise TypeError("split_outer: only dispatch plans can run on part of a value")
    delta = dict(zip(entries, deltas))
    push = list(plan.push)
    for word, idx, unit in plan.offset_slots:
        if delta.get(idx):
            if delta[idx] % unit:
                raise ValueError(f"split_outer: a part starts {delta[idx]} bytes in, not a whole number of the "
                                 f"plan's {unit}-byte offset units")
            push[word] = (push[word] + delta[idx] // unit) & 0xFFFFFFFF
    windows = tuple((e, dl, span_bytes(d)) for e, dl, d in zip(entries, deltas, descs))
    return DispatchPlan(variant=plan.variant, bindings=plan.bindings, push=tuple(push), groups=plan.groups,
                        writes=plan.writes, offset_slots=plan.offset_slots, spec=plan.spec, windows=windows)


def split_outer(descs: Sequence[TensorDesc], axes: Sequence[Sequence[int | None]], window: tuple[int, int],
                plan: Callable[[list[TensorDesc]], Sequence[Any]], entries: Sequence[int] | None = None) -> list[Any]:
    """`plan(descs)` where every tensor fits one binding window; else the value cut along
    axes[0] (per tensor its dimension, None where the tensor does not vary along it; the first
    tensor with the axis gives its length) into the fewest equal parts whose tensors fit, each
    part planned as plan(part descs) and shifted to its place; a part that one index along the
    axis still does not fit is cut along axes[1], and so on. `entries`: the tensors' binding-list
    indices (default 0, 1, ...). Plans a part's planner makes must address the tensors through
    their offset words only (every dispatch plan here does)."""
    entries = list(entries) if entries is not None else list(range(len(descs)))
    rng, align = window
    limit = rng - align - SLACK

    def rec(ds: list[TensorDesc], deltas: list[int], level: int) -> list[Any]:
        if fits(ds, window) or level == len(axes):
            plans = list(plan(ds))
            return plans if not any(deltas) and level == 0 else [_shift(p, entries, deltas, ds) for p in plans]
        ax = axes[level]
        length = next(d.sizes[a] for d, a in zip(ds, ax) if a is not None)
        n = length
        while n > 1 and any(span_bytes(_part(d, a, 0, n)[0]) > limit for d, a in zip(ds, ax)):
            n = cdiv(n, 2) if n > 2 else 1  # halving keeps the parts few and equal
        parts = cdiv(length, n)
        n = cdiv(length, parts)
        out: list[Any] = []
        for start in range(0, length, n):
            m = min(n, length - start)
            cut = [_part(d, a, start, m) for d, a in zip(ds, ax)]
            out += rec([c[0] for c in cut], [dl + c[1] for dl, c in zip(deltas, cut)], level + 1)
        return out

    return rec(list(descs), [0] * len(descs), 0)
