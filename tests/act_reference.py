"""The numpy reference of kompute_dml/ops/activation_params.py's operators, written from the
DirectML pages' formulas (not from the shader): the exact operators as float32 steps in numpy
(each product and sum rounded to float32, as the module documents), the others in float64 with
the parameters rounded to float32 and, where the operator rounds an inner product or quotient
first (CELU's x / alpha, SCALED_TANH's, PARAMETRIC_SOFTPLUS's beta x, SWISH's scale x), that value rounded to
float32 too. Used by tests/test_activation_params.py and tools/measure_unary.py --params."""

from __future__ import annotations

from typing import Any

import numpy as np

F = np.float32


def _p(v: float) -> np.float32:
    return F(v)


def _f32(x: np.ndarray) -> np.ndarray:
    """float16 / float32 input widened exactly to float32."""
    return x.astype(np.float32)


def _hard_sigmoid32(x: np.ndarray, alpha: float, beta: float) -> np.ndarray:
    s = (_p(alpha) * x).astype(F) + _p(beta)  # the product rounded, then the sum
    s = np.where(s > F(1), F(1), s)  # strict comparisons: -0 stays -0, NaN stays NaN
    return np.where(s < F(0), F(0), s).astype(F)


def exact32(helper: str, x: np.ndarray, **p: Any) -> np.ndarray:
    """The exact operators' result in float32 (to be rounded once to x's type)."""
    v = _f32(x)
    with np.errstate(all="ignore"):
        if helper == "leaky_relu":
            return np.where((v >= 0) | np.isnan(v), v, _p(p.get("alpha", 0.01)) * v).astype(F)
        if helper == "hard_sigmoid":
            return _hard_sigmoid32(v, p.get("alpha", 0.2), p.get("beta", 0.5))
        if helper == "hard_swish":
            return (v * _hard_sigmoid32(v, p.get("alpha", 1 / 6), p.get("beta", 0.5))).astype(F)
        if helper == "thresholded_relu":
            return np.where(v > _p(p.get("alpha", 1.0)), v, F(0)).astype(F)
        if helper == "shrink":
            b, t = _p(p.get("bias", 0.0)), _p(p.get("threshold", 0.5))
            return np.where(v > t, v - b, np.where(v < -t, v + b, F(0))).astype(F)
        if helper == "linear":
            return ((_p(p.get("alpha", 1.0)) * v).astype(F) + _p(p.get("beta", 0.0))).astype(F)
        if helper == "threshold":  # max(x, min); NaN stays NaN
            lo = _p(p.get("min", -np.finfo(F).max))
            return np.where(v < lo, lo, v).astype(F)
        if helper == "clip":
            lo, hi = _p(p.get("min", -np.finfo(F).max)), _p(p.get("max", np.finfo(F).max))
            y = np.where(v > hi, hi, v)
            return np.where(y < lo, lo, y).astype(F)
    raise KeyError(helper)


def _expm1(x: np.ndarray) -> np.ndarray:
    return np.expm1(x)


def swish_terms(x: np.ndarray, scale: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """ACTIVATION_SWISH's factors in float64: x widened and sigmoid(t), t = SigmoidInputScale * x
    rounded to float32 (the operator's first rounding); sigmoid as 1 / (1 + exp(-t)), or
    exp(t) / (1 + exp(t)) below 0 (no overflow)."""
    with np.errstate(all="ignore"):  # NaN payloads widened
        v = _f32(x).astype(np.float64)
        t = (_p(scale) * _f32(x)).astype(F).astype(np.float64)
        e = np.exp(-np.abs(t))
        s = np.where(t >= 0, 1.0 / (1.0 + e), e / (1.0 + e))
    return v, np.where(np.isnan(t), np.nan, s)


def reference64(helper: str, x: np.ndarray, **p: Any) -> np.ndarray:
    """The transcendental operators in float64 (their inner rounded steps in float32)."""
    with np.errstate(all="ignore"):
        v = _f32(x).astype(np.float64)
        if helper == "elu":
            a = float(_p(p.get("alpha", 1.0)))
            return np.where((v >= 0) | np.isnan(v), v, a * _expm1(v))
        if helper == "celu":
            a32 = _p(p.get("alpha", 1.0))
            q = (_f32(x) / a32).astype(F).astype(np.float64)  # the quotient rounded to float32
            r = np.where((v >= 0) | np.isnan(v), v, float(a32) * _expm1(q))
            return np.where(r == 0, 0.0, r)  # max(0, x) + min(0, ...) is never -0
        if helper == "selu":
            a, g = float(_p(p.get("alpha", 1.67326319217681884765625))), float(_p(p.get("gamma", 1.05070102214813232421875)))
            return np.where(v > 0, g * v, np.where(v == 0, g * 0.0, g * a * _expm1(v)))  # Alpha exp(0) - Alpha = +0
        if helper == "scaled_tanh":
            a, b = _p(p.get("alpha", 1.0)), _p(p.get("beta", 1.0))
            t = (b * _f32(x)).astype(F).astype(np.float64)
            return float(a) * np.tanh(t)
        if helper == "swish":
            x64, sig = swish_terms(x, p.get("sigmoid_input_scale", 1.0))
            return x64 * sig
        if helper == "parametric_softplus":
            a, b = _p(p.get("alpha", 1.0)), _p(p.get("beta", 1.0))
            t = (b * _f32(x)).astype(F).astype(np.float64)
            return float(a) * np.logaddexp(0.0, t)
    return exact32(helper, x, **p).astype(np.float64)
