#!/usr/bin/env python3
"""Derives the float32 constants of shaders/gelu_math.glsl (GELU's normal CDF and the exp both
activation shaders share) and measures the error of that algorithm, emulated operation by
operation in numpy float32, against float64 `math.erfc` / `math.exp`.

The algorithm (docs/gelu.md): for a = |x| <= A_MAX,
    erfc(a / sqrt 2) = exp(-x^2 / 2) * R(a),   R(a) = exp(a^2 / 2) erfc(a / sqrt 2),
exp(-x^2 / 2) from x^2 / 2 split exactly into hi + lo (x's top 12 significand bits squared is
exact) and a Cody-Waite reduction exp(-(hi + lo)) = 2^-k exp(-r), |r| <= ln 2 / 2 + tiny, with
exp(-r) = 1 + r P(r) (degree EXP_DEG); R(a) piecewise over [0,1), [1,2), [2,4), [4,8),
[8, A_MAX] (the piece from a's exponent), a polynomial of degree R_DEG in a - centre. Then
    GELU(x) = x * 0.5 * erfc(a / sqrt 2)          for x < 0,
    GELU(x) = x * (1 - 0.5 * erfc(a / sqrt 2))    for x >= 0,
with erfc carried scaled by 2^64 so that no intermediate is subnormal while the result is
normal. Beyond A_MAX, GELU is x (x > 0) or -0 (x < 0: |GELU| < 2^-150 rounds to zero).

Coefficients: weighted least squares (relative error) on Chebyshev nodes, then rounded to
float32 one at a time from the highest degree down, refitting the lower ones after each
rounding. Uses numpy and the standard library only. `python tools/fit_gelu.py` prints the GLSL
constants and the measured errors (`--points N`: sweep size)."""

from __future__ import annotations

import argparse
import math

import numpy as np

A_MAX = 14.5
PIECES = ((0.0, 1.0), (1.0, 2.0), (2.0, 4.0), (4.0, 8.0), (8.0, A_MAX))
CENTRES = (0.5, 1.5, 3.0, 6.0, 11.25)
R_DEG = 9
EXP_DEG = 7
LN2_HI = 0.693145751953125  # ln 2 to 15 significant bits: k * LN2_HI is exact for |k| < 512
f32 = np.float32

_erfc = np.vectorize(math.erfc, otypes=[np.float64])
_exp = np.vectorize(math.exp, otypes=[np.float64])


def erfcx_half(a: np.ndarray) -> np.ndarray:
    """R(a) = exp(a^2 / 2) * erfc(a / sqrt 2), float64."""
    a = np.asarray(a, np.float64)
    return _exp(a * a / 2) * _erfc(a / math.sqrt(2))


def seqfit(f, lo: float, hi: float, centre: float, deg: int, fixed: dict[int, float] | None = None,
           n: int = 1000) -> np.ndarray:
    """float32 coefficients (power basis in u = v - centre) minimising the relative error."""
    xs = np.cos(np.pi * (np.arange(n) + 0.5) / n) * (hi - lo) / 2 + (hi + lo) / 2
    u = xs - centre
    y = f(xs)
    w = 1 / np.abs(y)
    coefs = dict(fixed or {})
    free = [k for k in range(deg + 1) if k not in coefs]
    vander = np.vander(u, deg + 1, increasing=True)
    while free:
        resid = y - sum(c * u**k for k, c in coefs.items())
        sol, *_ = np.linalg.lstsq(vander[:, free] * w[:, None], resid * w, rcond=None)
        coefs[free[-1]] = float(f32(sol[-1]))
        free = free[:-1]
    return np.array([coefs[k] for k in range(deg + 1)], np.float32)


def constants() -> dict[str, np.ndarray]:
    r = np.stack([seqfit(erfcx_half, lo, hi, c, R_DEG) for (lo, hi), c in zip(PIECES, CENTRES)])
    e = seqfit(lambda v: np.exp(-v), -0.3467, 0.3467, 0.0, EXP_DEG, fixed={0: 1.0})
    return {"R": r, "E": e}


# ---- the float32 emulation (each numpy float32 operation rounds once, as the shader's `precise` ones)
def _bits(x: np.ndarray) -> np.ndarray:
    return x.view(np.uint32)


def _float(b: np.ndarray) -> np.ndarray:
    return b.astype(np.uint32).view(np.float32)


def exp_neg(hi: np.ndarray, lo: np.ndarray, scale: int, e: np.ndarray) -> np.ndarray:
    """exp(-(hi + lo)) * 2^scale (shaders/gelu_math.glsl: kdml_exp_neg)."""
    log2e, ln2_hi, ln2_lo = f32(1 / math.log(2)), f32(LN2_HI), f32(math.log(2) - LN2_HI)
    k = np.rint(hi * log2e).astype(np.int32)  # roundEven
    kf = k.astype(np.float32)
    r = ((hi - kf * ln2_hi) - kf * ln2_lo) + lo
    p = e[EXP_DEG]
    for c in e[EXP_DEG - 1:0:-1]:
        p = p * r + c
    p = f32(1) + r * p
    return p * _float((127 + scale - k).astype(np.int64) << 23)


def gelu32(x: np.ndarray, k: dict[str, np.ndarray], erfc_out: list[np.ndarray] | None = None) -> np.ndarray:
    """GELU as shaders/gelu_math.glsl computes it (kdml_gelu); `erfc_out` receives the float32
    2^64 * erfc(|x| / sqrt 2) it used."""
    x = np.asarray(x, np.float32)
    with np.errstate(all="ignore"):
        a = np.abs(x)
        xh = _float(_bits(x) & np.uint32(0xFFFFF000))
        xl = x - xh
        e = exp_neg((xh * xh) * f32(0.5), (xl * (x + xh)) * f32(0.5), 64, k["E"])
        piece = np.clip((_bits(a) >> 23).astype(np.int32) - 126, 0, 4)
        u = a - np.array(CENTRES, np.float32)[piece]
        c = k["R"][piece]
        p = c[:, R_DEG]
        for j in range(R_DEG - 1, -1, -1):
            p = p * u + c[:, j]
        t = e * p  # 2^64 * erfc(a / sqrt 2)
        if erfc_out is not None:
            erfc_out.append(t)
        y = np.where(x < 0, ((x * f32(0.5)) * t) * f32(2.0**-64), x * (f32(1) - t * f32(2.0**-65)))
        y = np.where(a > f32(A_MAX), np.where(x < 0, f32(-0.0), x), y)
    return np.where(np.isnan(x), x, y).astype(np.float32)


def gelu64(x: np.ndarray) -> np.ndarray:
    """The page's formula in float64, through erfc (1 + erf(z) = erfc(-z) without cancellation)."""
    x = np.asarray(x, np.float64)
    return x * 0.5 * _erfc(-x / math.sqrt(2))


def sweep(points: int) -> np.ndarray:
    """Evenly spaced float32 bit patterns over [-A_MAX, A_MAX] (both signs)."""
    top = int(_bits(np.array([A_MAX], np.float32))[0])
    pos = np.linspace(0, top, points // 2, dtype=np.int64).astype(np.uint32)
    return np.concatenate([_float(pos), _float(pos | np.uint32(0x80000000))])


def glsl(k: dict[str, np.ndarray]) -> str:
    def fmt(v: float) -> str:
        return f"{float(v):.9e}"

    rows = ",\n    ".join(", ".join(fmt(v) for v in row) for row in k["R"])
    n = 5 * (R_DEG + 1)
    return (f"const float KDML_ERFCX_C[{n}] = float[{n}](  // piece-major: piece p's coefficient j at 10 p + j\n    {rows});\n"
            f"const float KDML_EXP_C[{EXP_DEG + 1}] = float[](" + ", ".join(fmt(v) for v in k["E"]) + ");")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--points", type=int, default=2_000_000)
    args = ap.parse_args()
    k = constants()
    print(glsl(k))
    x = sweep(args.points)
    ref = gelu64(x)
    scaled: list[np.ndarray] = []
    got = gelu32(x, k, scaled).astype(np.float64)
    normal = np.abs(ref) >= 2.0**-126
    rel = np.abs(got - ref)[normal] / np.abs(ref[normal])
    i = int(np.argmax(rel))
    print(f"GELU float32: max relative error {rel[i]:.3e} ({rel[i] / 2**-24:.2f} x 2^-24) at x = {x[normal][i]!r} "
          f"over {x.size} points; max absolute error where |GELU| < 2^-126: {np.abs(got - ref)[~normal].max():.3e}")
    z = np.abs(x.astype(np.float64)) / math.sqrt(2)
    erfc_got = scaled[0].astype(np.float64) * 2.0**-64
    erfc_ref = _erfc(z)
    tiny = erfc_ref >= 2.0**-126
    erfc_rel = np.abs(erfc_got - erfc_ref)[tiny] / erfc_ref[tiny]
    erf_abs = np.abs((1 - erfc_got) - np.vectorize(math.erf, otypes=[np.float64])(z))
    print(f"erfc(z), z = |x| / sqrt 2 in [0, {A_MAX / math.sqrt(2):.3f}]: max relative error {erfc_rel.max():.3e} "
          f"({erfc_rel.max() / 2**-24:.2f} x 2^-24) where erfc >= 2^-126; erf(z) = 1 - erfc(z) in float64 from it: "
          f"max absolute error {erf_abs.max():.3e} ({erf_abs.max() / 2**-24:.2f} x 2^-24) against math.erf")


if __name__ == "__main__":
    main()
