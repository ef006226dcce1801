"""Independent float64 references of ACTIVATION_SOFTMAX1 and ACTIVATION_GELU, and the error
bounds docs/softmax.md and docs/gelu.md state, written from the pages' formulas and those
documents, not from the shaders.

- softmax_ref: numpy's float64 evaluation of exp(x - max) / sum(exp(x - max)) over `axes` (the
  float32 / float16 inputs are exact in float64; np.max propagates NaN; a row of only -inf gives
  (-inf) - (-inf) = NaN, a row holding +inf gives inf - inf = NaN: the rows the operator makes NaN).
- log_softmax_ref: numpy's float64 (x - max) - log(sum(exp(x - max))) over `axes` (NaN rows as
  softmax_ref's; an element of -inf gives -inf).
- hardmax_ref: 1 at numpy's argmax of each row (the reduced axes moved last, in their order, and
  flattened: the first maximum in the row's row-major order; np.argmax returns the first NaN where
  there is one), 0 elsewhere.
- gelu_ref: x * 0.5 * (1 + erf(x / sqrt 2)) in float64 through math.erfc (1 + erf(-z) = erfc(z)
  without the cancellation that makes float64's 1 + erf(x / sqrt 2) zero below x = -8.3), with
  the limits GELU(+inf) = +inf and GELU(-inf) = -0.
"""

from __future__ import annotations

import math

import numpy as np

U = 2.0**-24  # float32 unit roundoff
FLT_MIN = 2.0**-126  # smallest normal float32
GELU_REL = 2.0**-21  # docs/gelu.md: relative bound of the float32 result where it is normal

_erfc = np.vectorize(math.erfc, otypes=[np.float64])


def softmax_ref(x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    x64 = np.asarray(x, np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        m = np.max(x64, axis=axes, keepdims=True)
        e = np.exp(x64 - m)
        return e / np.sum(e, axis=axes, keepdims=True)


def log_softmax_ref(x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    x64 = np.asarray(x, np.float64)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        d = x64 - np.max(x64, axis=axes, keepdims=True)
        return d - np.log(np.sum(np.exp(d), axis=axes, keepdims=True))


def hardmax_ref(x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    red = sorted(set(axes))
    rest = [d for d in range(x.ndim) if d not in red]
    t = np.transpose(np.asarray(x), rest + red)
    rows = t.reshape(*t.shape[:len(rest)], -1)
    hot = (np.arange(rows.shape[-1]) == np.argmax(rows, axis=-1)[..., None]).astype(np.float64)
    return np.transpose(hot.reshape(t.shape), np.argsort(rest + red))


def gelu_ref(x: np.ndarray) -> np.ndarray:
    x64 = np.asarray(x, np.float64)
    with np.errstate(invalid="ignore"):
        y = x64 * 0.5 * _erfc(-x64 / math.sqrt(2))
    return np.where(np.isneginf(x64), -0.0, y)


def softmax_bound(ref: np.ndarray, n: int) -> np.ndarray:
    """docs/softmax.md, float32 results: |y - ref| <= (20 + ln n) u ref + u / e + 2^-126, n the
    elements of a row."""
    return (20 + math.log(n)) * U * np.abs(ref) + U / math.e + FLT_MIN


def log_softmax_bound(ref: np.ndarray, n: int) -> np.ndarray:
    """docs/log_softmax.md, float32 results: |y - ref| <= 3 u |ref| + (16 + 3 ln n) u, n the
    elements of a row."""
    return 3 * U * np.abs(ref) + (16 + 3 * math.log(n)) * U


def gelu_bound(ref: np.ndarray) -> np.ndarray:
    """docs/gelu.md, float32 results: |y - ref| <= 2^-21 |ref| + 2^-126."""
    return GELU_REL * np.abs(ref) + FLT_MIN


def check_close(got: np.ndarray, ref: np.ndarray, bound32: np.ndarray, what: str) -> float:
    """Assert got within the bound of ref: NaN exactly where ref is NaN; float16 results also
    within half a float16 spacing at |got| (the one rounding of the float32 result). Returns the
    largest error as a fraction of the allowed one."""
    got64 = got.astype(np.float64)
    nan_ref, nan_got = np.isnan(ref), np.isnan(got64)
    bad = np.argwhere(nan_ref != nan_got)
    assert bad.size == 0, f"{what}: NaN mismatch at {bad[:4].tolist()}: got {got[tuple(bad[0])]} want {ref[tuple(bad[0])]}"
    ok = ~nan_ref & (got64 != ref)  # equal values (infinities included) need no bound
    allowed = bound32.copy()
    with np.errstate(invalid="ignore", over="ignore"):
        if got.dtype == np.float16:
            allowed = allowed + 0.5 * np.spacing(np.abs(got)).astype(np.float64)
        err = np.where(ok, np.abs(got64 - ref), 0.0)
        ratio = np.where(ok, err / np.where(ok, allowed, 1.0), 0.0)
    worst = np.unravel_index(int(np.argmax(ratio)), ratio.shape) if ratio.size else ()
    assert ratio.size == 0 or ratio[worst] <= 1.0, (
        f"{what}: error {err[worst]:.3e} above the bound {allowed[worst]:.3e} at {list(worst)}: "
        f"got {got[worst]!r} want {ref[worst]!r}")
    return float(ratio[worst]) if ratio.size else 0.0
