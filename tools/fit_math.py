#!/usr/bin/env python3
"""Derives the float32 constants of shaders/inv_trig_math.glsl, hyp_math.glsl and pow_math.glsl
(ELEMENT_WISE_ATAN, ASIN, ACOS, SINH, COSH, ASINH, ATANH, POW) and measures each polynomial
alone, evaluated in numpy float32 operation by operation as the shaders do (Horner, then the
sum), against float64 over 2^20 points of its interval.

Polynomials (weighted least squares on Chebyshev nodes in s = x^2 or f, relative error of the
function, coefficients rounded to float32 one at a time from the highest degree down, the lower
ones refitted after each rounding, as tools/fit_gelu.py does):
- odd functions on [0, top]: f(x) = x + x (s P(s)), s = x^2 (ATAN on [0, 7/16], ASIN on
  [0, 1/2], SINH on [0, 1], ASINH and ATANH on [0, 1/2]);
- COSH on [0, 1]: 1 + s / 2 + s^2 P(s) (s = x^2 exactly as hi + lo);
- POW's 2^f = 1 + f ln 2 + f^2 Q(f) on [-1/2, 1/2] (f ln 2 exactly as hi + lo).
POW's table: x = 2^k z with z in [OFF, 2 OFF) (OFF = 0x3F330000, so z = 1 lies inside a
subinterval), 32 subintervals by z's top 5 significand bits (of its offset from OFF); per
subinterval invc = float32(1 / its centre) (1 exactly where z = 1 lies) and -log2(invc) as
hi + lo float32s. `python tools/fit_math.py` prints all of them as GLSL."""

from __future__ import annotations

import math

import numpy as np

f32 = np.float32
POW_OFF = 0x3F330000
POW_BITS = 5  # 2^5 subintervals


def seqfit(g, w, lo: float, hi: float, deg: int, n: int = 2000) -> np.ndarray:
    """float32 coefficients c (power basis in u) minimising sum (w(u) (g(u) - sum c_k u^k))^2 on
    Chebyshev nodes of [lo, hi]; rounded to float32 from the highest degree down, the lower ones
    refitted each time."""
    u = np.cos(np.pi * (np.arange(n) + 0.5) / n) * (hi - lo) / 2 + (hi + lo) / 2
    y, wt = g(u), w(u)
    vander = np.vander(u, deg + 1, increasing=True)
    coefs: dict[int, float] = {}
    free = list(range(deg + 1))
    while free:
        resid = y - sum(c * u**k for k, c in coefs.items())
        sol, *_ = np.linalg.lstsq(vander[:, free] * wt[:, None], resid * wt, rcond=None)
        coefs[free[-1]] = float(f32(sol[-1]))
        free = free[:-1]
    return np.array([coefs[k] for k in range(deg + 1)], np.float32)


def horner(c: np.ndarray, u: np.ndarray) -> np.ndarray:
    p = np.full_like(u, c[-1])
    for k in range(len(c) - 2, -1, -1):
        p = f32(p * u + c[k])
    return p


def ulps(got: np.ndarray, ref: np.ndarray) -> float:
    ulp = np.exp2(np.floor(np.log2(np.abs(ref))) - 23)
    return float(np.max(np.abs(got.astype(np.float64) - ref) / ulp))


ODD = {  # name: (float64 function, top of the interval, degree of P)
    "atan": (np.arctan, 7 / 16, 6),
    "asin": (np.arcsin, 0.5, 6),
    "sinh": (np.sinh, 1.0, 4),
    "asinh": (np.arcsinh, 0.5, 6),
    "atanh": (np.arctanh, 0.5, 6),
}


def fit_odd(name: str) -> tuple[np.ndarray, float]:
    """x + x (s P(s)): P fitted to (f(x) - x) / x^3 at s = x^2, weighted by x^3 / f(x)."""
    fn, top, deg = ODD[name]
    x_of = np.sqrt
    c = seqfit(lambda s: (fn(x_of(s)) - x_of(s)) / (s * x_of(s)),
               lambda s: s * x_of(s) / np.abs(fn(x_of(s))), 0.0, top * top, deg)
    t = np.linspace(2.0**-12, top, 1 << 20).astype(np.float32)
    s = f32(t * t)
    got = f32(t + f32(t * f32(s * horner(c, s))))
    return c, ulps(got, fn(t.astype(np.float64)))


def split(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Veltkamp: a = hi + lo, 12 significant bits each (float32 operations)."""
    c = f32(a * f32(4097))
    hi = f32(c - f32(c - a))
    return hi, f32(a - hi)


def two_prod(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """a b = p + e exactly (Dekker, no fused multiply-add)."""
    p = f32(a * b)
    ah, al = split(a)
    bh, bl = split(b)
    return p, f32(f32(f32(f32(f32(ah * bh) - p) + f32(ah * bl)) + f32(al * bh)) + f32(al * bl))


def fit_cosh() -> tuple[np.ndarray, float]:
    """cosh(x) = 1 + s / 2 + s^2 P(s), s = x^2 = sh + sl exactly: (1 + sh / 2 as an exact sum)
    + (sl / 2 + sh^2 P(sh))."""
    c = seqfit(lambda s: (np.cosh(np.sqrt(s)) - 1 - s / 2) / (s * s), lambda s: s * s / np.cosh(np.sqrt(s)),
               0.0, 1.0, 4)
    t = np.linspace(2.0**-12, 1.0, 1 << 20).astype(np.float32)
    sh, sl = two_prod(t, t)
    w = f32(sh * f32(0.5))
    h = f32(f32(1) + w)
    e = f32(f32(f32(1) - h) + w)
    got = f32(h + f32(e + f32(f32(sl * f32(0.5)) + f32(f32(sh * sh) * horner(c, sh)))))
    return c, ulps(got, np.cosh(t.astype(np.float64)))


def fit_exp2() -> tuple[np.ndarray, float]:
    """2^f = 1 + f ln 2 + f^2 Q(f) on [-1/2, 1/2], f ln 2 = ph + pl exactly (ln 2 = L1 + L2):
    (1 + ph as an exact sum) + (pl + f L2 + f^2 Q(f))."""
    c = seqfit(lambda f: (np.exp2(f) - 1 - f * math.log(2)) / np.where(f == 0, 1, f * f) + np.where(f == 0, 0.5 * math.log(2)**2, 0),
               lambda f: f * f / np.exp2(f) + 1e-30, -0.5, 0.5, 5)
    t = np.linspace(-0.5, 0.5, 1 << 20).astype(np.float32)
    l1 = f32(math.log(2))
    l2 = f32(math.log(2) - float(l1))
    ph, pl = two_prod(t, np.full_like(t, l1))
    h = f32(f32(1) + ph)
    e = f32(f32(f32(1) - h) + ph)
    got = f32(h + f32(e + f32(f32(pl + f32(t * l2)) + f32(f32(t * t) * horner(c, t)))))
    return c, ulps(got, np.exp2(t.astype(np.float64)))


def pow_table() -> list[tuple[float, float, float]]:
    """(invc, -log2(invc) hi, lo) per subinterval of z in [OFF, 2 OFF)."""
    rows = []
    one = (0x3F800000 - POW_OFF) >> (23 - POW_BITS)  # the subinterval holding z = 1
    for i in range(1 << POW_BITS):
        lo_b = POW_OFF + (i << (23 - POW_BITS))
        hi_b = lo_b + (1 << (23 - POW_BITS))
        a, b = (np.array([lo_b, hi_b], np.uint32).view(np.float32).astype(np.float64))
        invc = 1.0 if i == one else float(f32(2.0 / (a + b)))
        v = -math.log2(invc)
        h = float(f32(v))
        rows.append((invc, h, float(f32(v - h))))
    return rows


def glsl_list(c: np.ndarray) -> str:
    return ", ".join(f"{float(v):.9e}" for v in c)


def main() -> None:
    for name in ODD:
        c, err = fit_odd(name)
        print(f"// {name}: P = {glsl_list(c)}  ({err:.3f} ulp)")
    c, err = fit_cosh()
    print(f"// cosh: P = {glsl_list(c)}  ({err:.3f} ulp)")
    c, err = fit_exp2()
    print(f"// exp2: Q = {glsl_list(c)}  ({err:.3f} ulp)")
    rows = pow_table()
    print("// pow table (invc, logc hi, logc lo):")
    for name, k in (("UM_POW_INVC", 0), ("UM_POW_LOGC_HI", 1), ("UM_POW_LOGC_LO", 2)):
        vals = ", ".join(f"{r[k]:.9e}" for r in rows)
        print(f"const float {name}[{len(rows)}] = float[]({vals});")
    pio = {"atan(1/2)": math.atan(0.5), "atan(1)": math.atan(1.0), "atan(3/2)": math.atan(1.5), "pi/2": math.pi / 2,
           "pi": math.pi, "1/ln2": 1 / math.log(2), "ln2": math.log(2)}
    for name, v in pio.items():
        h = float(f32(v))
        print(f"// {name}: hi {h:.9e} lo {float(f32(v - h)):.9e}")


if __name__ == "__main__":
    main()
