"""The helpers of RESAMPLE2 (ops/resample.py, docs/resample.md): kdml.resample (the DirectML
descriptor's terms: scales, pixel offsets, rounding direction) and kdml.resize (ONNX Resize's:
coordinate_transformation_mode, nearest_mode, sizes or scales, roi, axes, keep_aspect_ratio_policy,
cubic_coeff_a, exclude_outside, extrapolation_value), which maps each axis onto RESAMPLE2's relation
InputX = (OutputX - OutputPixelOffset) / Scale - InputPixelOffset in exact rational arithmetic.

Axes that resample nothing (the same size, the identity mapping) are dropped where of size 1 and
merged with their neighbours where both tensors' layouts allow, so inputs of more than RESAMPLE2's
4 dimensions (N, C, D, H, W volumes) run when at most 4 axes remain; UnsupportedError names x
otherwise. The result is a new packed Tensor from the device's buffer pool, or `out=` (the output's
shape and x's type, any strides)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np

from ..core.errors import UnsupportedError, invalid
from ..core.ints import as_int, as_int_tuple
from ..core.tensor_desc import TensorDesc
from ..device.memory import Tensor
from ..ops.cumulative import AxisDirection
from ..ops.resample import InterpolationMode, Resample2Desc, exact
from . import _packed, check_out, compile_cached, pooled_empty
from .elementwise import _operands

if TYPE_CHECKING:
    from ..device.device import Device

_MODES = {"nearest": InterpolationMode.NEAREST_NEIGHBOR, "linear": InterpolationMode.LINEAR,
          "cubic": InterpolationMode.CUBIC}
# the largest float32: ONNX's mappings onto a single input position (an axis of length 1) take it
# as their scale, as onnxruntime's DirectML provider does
FLT_MAX = Fraction(float(np.finfo(np.float32).max))
_HALF = Fraction(1, 2)


def _mode(mode: Any) -> InterpolationMode:
    if isinstance(mode, str):
        if mode.lower() not in _MODES:
            raise invalid("mode", f"must be one of {sorted(_MODES)}, got {mode!r}")
        return _MODES[mode.lower()]
    try:
        return InterpolationMode(mode)
    except ValueError:
        raise invalid("mode", f"must be 'nearest', 'linear', 'cubic' or an InterpolationMode, got {mode!r}") from None


def _per_axis(values: Any, n: int, name: str, default: Any) -> list[Any]:
    if values is None:
        return [default] * n
    v = list(np.asarray(values).reshape(-1).tolist()) if not isinstance(values, Sequence) else list(values)
    if len(v) != n:
        raise invalid(name, f"must hold {n} values (one per axis), got {len(v)}")
    return v


def _view(t: Tensor, sizes: list[int], strides: list[int]) -> Tensor:
    return Tensor.trusted(t.buffer, TensorDesc(t.desc.data_type, tuple(sizes), tuple(strides)), t.offset)


def _run(dev: Device, t: Tensor, shape: tuple[int, ...], mode: InterpolationMode, increasing: bool,
         axes: list[tuple[Fraction, Fraction, Fraction, bool]], a: Any, exclude: bool, extrapolation: float | None,
         antialias: bool, out: Tensor | None) -> Tensor:
    """RESAMPLE2 of t to `shape` with per axis (scale, input offset, output offset, identity)."""
    dt = t.desc.data_type
    if out is not None:
        check_out(out, dev, shape, dt)
        y = out
    else:
        y = pooled_empty(dev, _packed(dt, shape))
    xs, ys = list(t.desc.effective_strides), list(y.desc.effective_strides)
    dims: list[list[Any]] = [[n, m, sx, sy, *p] for n, m, sx, sy, p in zip(t.desc.sizes, shape, xs, ys, axes)]
    kept = [d for d in dims if not (d[7] and d[0] == 1)] or dims[-1:]
    merged: list[list[Any]] = []
    for d in kept:  # neighbouring identity axes merge where both layouts allow
        p = merged[-1] if merged else None
        if p is not None and p[7] and d[7] and p[2] == d[2] * d[0] and p[3] == d[3] * d[1]:
            p[0], p[1], p[2], p[3] = p[0] * d[0], p[1] * d[1], d[2], d[3]
        else:
            merged.append(list(d))
    if len(merged) > 4:
        raise UnsupportedError(f"x: RESAMPLE2 takes at most 4 dimensions; x {t.desc.sizes} -> {shape} leaves "
                               f"{len(merged)} after merging the axes that do not resample")
    xv = _view(t, [d[0] for d in merged], [d[2] for d in merged])
    yv = _view(y, [d[1] for d in merged], [d[3] for d in merged])
    desc = Resample2Desc(xv.desc, yv.desc, mode, AxisDirection.INCREASING if increasing else AxisDirection.DECREASING,
                         tuple(d[4] for d in merged), tuple(d[5] for d in merged), tuple(d[6] for d in merged),
                         a, bool(exclude), extrapolation, bool(antialias))
    compile_cached(dev, desc).execute([xv], [yv])
    return y


def resample(x: Any, scales: Any = None, *, sizes: Any = None, mode: Any = "nearest",
             rounding_direction: AxisDirection = AxisDirection.DECREASING, input_pixel_offsets: Any = None,
             output_pixel_offsets: Any = None, cubic_coeff_a: float = -0.75, exclude_outside: bool = False,
             extrapolation_value: float | None = None, antialias: bool = False, out: Tensor | None = None,
             device: Device | None = None) -> Tensor:
    """DML_RESAMPLE2: y[o] interpolated at InputX = (o - output_pixel_offsets) / scales -
    input_pixel_offsets per axis (defaults: 0.5 and -0.5, pixel centres), nearest rounded by
    `rounding_direction`; `sizes` (the output's) default to floor(x.shape * scales), `scales` to
    sizes / x.shape (exactly). FLOAT32 / FLOAT16; kompute_dml's CUBIC and extrapolation extensions
    as the descriptor's (ops/resample.Resample2Desc)."""
    dev, (t,) = _operands((x,), ("x",), device if device is not None or not isinstance(out, Tensor) else out.device)
    n = t.desc.dimension_count
    if scales is None and sizes is None:
        raise invalid("scales", "scales or sizes must be given")
    sc = [exact(v, f"scales[{i}]") for i, v in enumerate(_per_axis(scales, n, "scales", None))] if scales is not None else None
    if sizes is not None:
        shape = as_int_tuple(tuple(_per_axis(sizes, n, "sizes", 1)), "sizes")
    else:
        assert sc is not None
        shape = tuple(math.floor(s * d) for s, d in zip(sc, t.desc.sizes))
    for i, m in enumerate(shape):
        if m < 1:
            raise invalid(f"sizes[{i}]", f"must be >= 1, got {m}")
    if sc is None:
        sc = [Fraction(m, d) for m, d in zip(shape, t.desc.sizes)]
    ips = [exact(v, f"input_pixel_offsets[{i}]") for i, v in enumerate(_per_axis(input_pixel_offsets, n, "input_pixel_offsets", 0.5))]
    ops = [exact(v, f"output_pixel_offsets[{i}]") for i, v in enumerate(_per_axis(output_pixel_offsets, n, "output_pixel_offsets", -0.5))]
    axes = [(s, ip, op, d == m and s == 1 and ip + op == 0) for s, ip, op, d, m in zip(sc, ips, ops, t.desc.sizes, shape)]
    increasing = AxisDirection(rounding_direction) == AxisDirection.INCREASING
    return _run(dev, t, shape, _mode(mode), increasing, axes, cubic_coeff_a, exclude_outside, extrapolation_value,
                antialias, out)


def _coordinates(ctm: str, n: int, s: Fraction, roi: tuple[Fraction, Fraction]) -> tuple[Fraction, Fraction, Fraction]:
    """ONNX's coordinate_transformation_mode as RESAMPLE2's (scale, input offset, output offset).
    ONNX's length_resized is n * s (fractional where a scale gives it, as onnx's reference takes
    it; onnxruntime's CPU kernels take the integer output size there)."""
    length = n * s
    if ctm == "half_pixel" or (ctm == "pytorch_half_pixel" and length > 1):
        return s, _HALF, -_HALF
    if ctm == "pytorch_half_pixel":  # one output: x_original = 0
        return Fraction(1), Fraction(0), Fraction(0)
    if ctm == "half_pixel_symmetric":  # the centre of the implicit region to the output's centre
        offset = Fraction(n, 2) * (1 - math.floor(length) / length)
        return s, _HALF - offset, -_HALF
    if ctm == "align_corners":
        return ((length - 1) / (n - 1) if length != 1 and n > 1 else FLT_MAX), Fraction(0), Fraction(0)
    if ctm == "asymmetric":
        return s, Fraction(0), Fraction(0)
    if ctm == "tf_half_pixel_for_nn":
        return s, Fraction(0), -_HALF
    if ctm == "tf_crop_and_resize":
        start, end = roi
        if length == 1:
            return Fraction(1), -(start + end) / 2 * (n - 1), Fraction(0)
        span = (end - start) * (n - 1)
        return ((length - 1) / span if span else FLT_MAX), -start * (n - 1), Fraction(0)
    raise invalid("coordinate_transformation_mode", f"{ctm!r} is not an ONNX coordinate_transformation_mode")


_NEAREST = {"round_prefer_floor": (True, _HALF), "round_prefer_ceil": (False, -_HALF), "floor": (False, Fraction(0)),
            "ceil": (True, Fraction(0))}


def resize_target(in_shape: Sequence[int], sizes: Any, scales: Any, axes: list[int],
                  policy: str = "stretch") -> tuple[list[int], list[Fraction]]:
    """ONNX Resize's output sizes and the coordinate scales of every axis: floor(size * scale)
    (exactly) from scales; from sizes, sizes / input sizes, or with keep_aspect_ratio_policy one
    common ratio (the smallest or the largest) and sizes rounded half up."""
    shape = list(in_shape)
    sc = [Fraction(1)] * len(shape)
    if (sizes is None) == (scales is None):
        raise invalid("sizes", "exactly one of sizes and scales must be given")
    if scales is not None:
        for i, (a, v) in enumerate(zip(axes, _per_axis(scales, len(axes), "scales", None))):
            sc[a] = exact(v, f"scales[{i}]")
            if sc[a] <= 0:
                raise invalid(f"scales[{i}]", f"must be > 0, got {v!r}")
            shape[a] = math.floor(shape[a] * sc[a])
        return shape, sc
    want = as_int_tuple(tuple(_per_axis(sizes, len(axes), "sizes", 1)), "sizes")
    ratios = [Fraction(m, shape[a]) for a, m in zip(axes, want)]
    if policy != "stretch":
        if policy not in ("not_larger", "not_smaller"):
            raise invalid("keep_aspect_ratio_policy", f"must be stretch, not_larger or not_smaller, got {policy!r}")
        common = min(ratios) if policy == "not_larger" else max(ratios)
        ratios = [common] * len(axes)
        want = tuple(math.floor(common * shape[a] + _HALF) for a in axes)
    for a, m, r in zip(axes, want, ratios):
        shape[a], sc[a] = m, r
    return shape, sc


def resize(x: Any, sizes: Any = None, scales: Any = None, *, mode: Any = "nearest",
           coordinate_transformation_mode: str = "half_pixel", nearest_mode: str = "round_prefer_floor",
           cubic_coeff_a: float = -0.75, exclude_outside: bool = False, extrapolation_value: float = 0.0,
           roi: Any = None, axes: Any = None, keep_aspect_ratio_policy: str = "stretch", antialias: bool = False,
           out: Tensor | None = None, device: Device | None = None) -> Tensor:
    """ONNX Resize (opsets 11-19) on RESAMPLE2: `sizes` or `scales` (one value per axis of `axes`,
    default every axis; scales taken at their exact binary value), `roi` ([starts..., ends...] per
    axis, tf_crop_and_resize only, whose outputs outside the input take `extrapolation_value`).
    `antialias` (linear and cubic) widens the kernel when downsampling (kompute_dml's extension of
    RESAMPLE2, DirectML's RESAMPLE3 Antialiased)."""
    dev, (t,) = _operands((x,), ("x",), device if device is not None or not isinstance(out, Tensor) else out.device)
    r = t.desc.dimension_count
    if r < 1:
        raise invalid("x", "must have at least one dimension")
    ax = [as_int(a, "axes") for a in (_per_axis(axes, len(axes), "axes", 0) if axes is not None else range(r))]
    if any(not -r <= a < r for a in ax) or len({a % r for a in ax}) != len(ax):
        raise invalid("axes", f"must be distinct axes of x's {r} dimensions, got {ax}")
    ax = [a % r for a in ax]
    shape, sc = resize_target(t.desc.sizes, sizes, scales, ax, keep_aspect_ratio_policy)
    for i, m in enumerate(shape):
        if m < 1:
            raise invalid("sizes", f"the output's dimension {i} would be {m}; kompute_dml's outputs are not empty")
    ctm = coordinate_transformation_mode
    bounds = [(Fraction(0), Fraction(1))] * r
    if ctm == "tf_crop_and_resize":
        if roi is None:
            raise invalid("roi", "tf_crop_and_resize needs roi")
        v = [exact(b, "roi") for b in _per_axis(roi, 2 * len(ax), "roi", 0)]
        for i, a in enumerate(ax):
            bounds[a] = (v[i], v[i + len(ax)])
    im = _mode(mode)
    if nearest_mode not in _NEAREST:
        raise invalid("nearest_mode", f"must be one of {sorted(_NEAREST)}, got {nearest_mode!r}")
    increasing, nudge = _NEAREST[nearest_mode] if im == InterpolationMode.NEAREST_NEIGHBOR else (False, Fraction(0))
    per_axis = []
    for a in range(r):
        n, m = t.desc.sizes[a], shape[a]
        s, ip, op = _coordinates(ctm, n, sc[a], bounds[a])
        identity = n == m and s == 1 and ip + op == 0
        per_axis.append((s, ip + nudge, op, identity))
    extra = float(extrapolation_value) if ctm == "tf_crop_and_resize" else None
    return _run(dev, t, tuple(shape), im, increasing, per_axis, cubic_coeff_a, exclude_outside, extra, antialias, out)


__all__ = ["resample", "resize", "resize_target"]
