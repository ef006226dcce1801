"""What the sliding-window operators share (ops/convolution.py, ops/pooling.py): their per-axis
arrays (Strides, Dilations, StartPadding, ...), the forward output sizes, and the (D, H, W) /
(N, C, D, H, W) forms their shaders' constants take for 1- to 3-D windows."""

from __future__ import annotations

from typing import Any

from ..core.errors import invalid
from ..core.ints import as_int_tuple
from ..core.tensor_desc import TensorDesc


def spatial_array(desc: Any, name: str, n: int, default: int, least: int) -> tuple[int, ...]:
    """The descriptor's array `name` of DimensionCount (`n`) values, each >= `least`; empty means
    `default` on every axis (a negative `default`: the array is required)."""
    v = as_int_tuple(getattr(desc, name, ()) or (), name)
    if not v:
        if default < 0:
            raise invalid(name, f"must hold DimensionCount ({n}) values, got none")
        return (default,) * n
    if len(v) != n:
        raise invalid(name, f"must hold DimensionCount ({n}) values, got {len(v)}")
    for i, a in enumerate(v):
        if a < least:
            raise invalid(f"{name}[{i}]", f"must be >= {least}, got {a}")
    return v


def output_sizes(in_sizes: tuple[int, ...], window: tuple[int, ...], strides: tuple[int, ...],
                 dilations: tuple[int, ...], start: tuple[int, ...], end: tuple[int, ...]) -> tuple[int, ...]:
    """The pages' forward output sizes (spatial axes only), the window dilated; a size < 1 is
    returned as is."""
    return tuple((i + s + e - ((k - 1) * d + 1)) // st + 1
                 for i, k, st, d, s, e in zip(in_sizes, window, strides, dilations, start, end))


def three(values: tuple[int, ...], fill: int) -> list[int]:
    """Spatial values as (D, H, W): missing leading axes take `fill`."""
    return [fill] * (3 - len(values)) + list(values)


def strides5(t: TensorDesc | None) -> list[int]:
    """A tensor's element strides as (N, C, D, H, W) (missing spatial axes 0; an absent tensor all 0)."""
    if t is None:
        return [0] * 5
    s = list(t.effective_strides)
    return s[:2] + [0] * (5 - len(s)) + s[2:]
