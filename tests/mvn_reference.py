"""An independent float64 reference of MEAN_VARIANCE_NORMALIZATION1 and the error bound of
docs/mean_variance_normalization.md, written from the formula and the bound's derivation, not
from shaders/mvn.comp.

`mvn_ref`: y = (x - mean) / sqrt(var + eps) * scale + bias in float64 (var the population
variance over `axes`; without normalize_variance y = (x - mean) * scale + bias), IEEE
semantics for NaN and infinities (a row holding one is NaN / infinite as float64 says).

`mvn_bound`: per element, the largest |computed - exact| the document allows for a float32
evaluation whose row sums have depth N (kompute_dml.ops.mean_variance_normalization
.summation_depth), with u = 2^-24 and gamma_k = k u / (1 - k u):
  E   = gamma_{N+6} * A                       A = mean |x| over the row (the mean's error)
  rho = E^2 / (var + eps)
  e_r = max(|hi - 1|, |1 - lo|), hi = (1 - gamma_{N+10})^-1/2 (1 + 4u),
        lo = (1 + rho)^-1/2 (1 + gamma_{N+10})^-1/2 (1 - 4u)   (1/sqrt's relative error)
  B_z = |z| ((1 + e_r)(1 + gamma_2) - 1) + E r (1 + e_r)(1 + gamma_2)     r = (var + eps)^-1/2
        (without normalize_variance: B_z = u |z| + E (1 + u))
  B_y = |scale| B_z (1 + u)^2 + gamma_2 |z scale| + u |bias|
  FLOAT16 output: + 2^-11 (|y| + B_y) + 2^-25 (one rounding to float16, subnormals included).
Valid for eps >= 0 and float32 intermediates that neither overflow nor flush to zero.
"""

from __future__ import annotations

import numpy as np

U = 2.0 ** -24


def gamma(k: float) -> float:
    return k * U / (1 - k * U)


def _stats(x: np.ndarray, axes: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    with np.errstate(invalid="ignore", over="ignore"):
        m = x.mean(axis=axes, keepdims=True)
        d = x - m
        v = (d * d).mean(axis=axes, keepdims=True)
        a = np.abs(x).mean(axis=axes, keepdims=True)
    return m, v, a


def mvn_ref(x: np.ndarray, scale: np.ndarray | None, bias: np.ndarray | None, axes: tuple[int, ...],
            normalize_variance: bool, eps: float) -> np.ndarray:
    """float64 result of x's shape; x, scale, bias broadcast to x's shape by numpy."""
    x = np.asarray(x, np.float64)
    m, v, _ = _stats(x, axes)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        z = (x - m) / np.sqrt(v + eps) if normalize_variance else x - m
        if scale is not None:
            z = z * np.asarray(scale, np.float64)
        if bias is not None:
            z = z + np.asarray(bias, np.float64)
    return np.broadcast_to(z, x.shape)


def mvn_bound(x: np.ndarray, scale: np.ndarray | None, bias: np.ndarray | None, axes: tuple[int, ...],
              normalize_variance: bool, eps: float, depth: int, f16_out: bool) -> np.ndarray:
    """The documented bound on |computed - mvn_ref| per element (float64, x's shape)."""
    x = np.asarray(x, np.float64)
    m, v, a = _stats(x, axes)
    s = np.ones_like(x) if scale is None else np.broadcast_to(np.abs(np.asarray(scale, np.float64)), x.shape)
    b = np.zeros_like(x) if bias is None else np.broadcast_to(np.abs(np.asarray(bias, np.float64)), x.shape)
    e = gamma(depth + 6) * a
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        if normalize_variance:
            r = 1.0 / np.sqrt(v + eps)
            z = np.abs(x - m) * r
            rho = e * e * r * r
            g = gamma(depth + 10)
            hi = (1 - g) ** -0.5 * (1 + 4 * U)
            lo = (1 + rho) ** -0.5 * (1 + g) ** -0.5 * (1 - 4 * U)
            e_r = np.maximum(hi - 1, 1 - lo)
            bz = z * ((1 + e_r) * (1 + gamma(2)) - 1) + e * r * (1 + e_r) * (1 + gamma(2))
        else:
            z = np.abs(x - m)
            bz = U * z + e * (1 + U)
        by = s * bz * (1 + U) ** 2 + gamma(2) * z * s + U * b
        if f16_out:
            y = np.abs(mvn_ref(x, scale, bias, axes, normalize_variance, eps))
            by = by + 2.0 ** -11 * (y + by) + 2.0 ** -25
    return np.broadcast_to(by, x.shape)


def assert_within(got: np.ndarray, x: np.ndarray, scale: np.ndarray | None, bias: np.ndarray | None,
                  axes: tuple[int, ...], normalize_variance: bool, eps: float, depth: int) -> None:
    """got (FLOAT32 / FLOAT16) within the bound of the float64 result; NaN exactly where it is
    NaN, infinities equal."""
    want = mvn_ref(x, scale, bias, axes, normalize_variance, eps)
    bound = mvn_bound(x, scale, bias, axes, normalize_variance, eps, depth, got.dtype == np.float16)
    g = got.astype(np.float64)
    nan_w, nan_g = np.isnan(want), np.isnan(g)
    odd = nan_w != nan_g
    assert not odd.any(), f"NaN at {np.argwhere(odd)[:4].tolist()}: got {g[odd][:4]}, want {want[odd][:4]}"
    inf = np.isinf(want) | np.isinf(g)
    assert np.array_equal(g[inf], want[inf]), f"infinities differ: got {g[inf][:4]}, want {want[inf][:4]}"
    fin = ~(nan_w | inf)
    with np.errstate(invalid="ignore"):
        err = np.abs(g - want)
    bad = fin & ~(err <= bound)
    if bad.any():
        i = tuple(np.argwhere(bad)[0])
        raise AssertionError(f"{int(bad.sum())} elements outside the bound, first at {list(i)}: got {g[i]!r}, "
                             f"want {want[i]!r}, error {err[i]:.3e} > bound {bound[i]:.3e}")
