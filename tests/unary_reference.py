"""The numpy reference of kompute_dml/ops/elementwise_unary.py's operators (and ops/elementwise_trig.py's rows): each function in
float64 on the (exactly widened) input, then, for the exact operators, one rounding to the data
type; `ulp_error` measures the others in units in the last place of the data type. Used by
tests/test_elementwise_unary.py and tools/measure_unary.py (the bounds in
docs/elementwise_unary.md)."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np


def _round_away(x: np.ndarray) -> np.ndarray:
    return np.copysign(np.floor(np.abs(x) + 0.5), x)  # -0 and (-0.5, 0) keep their sign


def _sign(x: np.ndarray) -> np.ndarray:
    return np.where(x > 0, 1.0, np.where(x < 0, -1.0, 0.0))  # -0 and NaN: +0 (DirectML's page)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def _softsign(x: np.ndarray) -> np.ndarray:
    return np.where(np.isinf(x), np.sign(x), x / (1.0 + np.abs(x)))


def _erf(x: np.ndarray) -> np.ndarray:
    return np.frompyfunc(math.erf, 1, 1)(x).astype(np.float64)  # Python's libm erf (float64, < 1 ulp)


def _softplus(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(0.0, x)  # max(x, 0) + log1p(exp(-|x|)) in float64


# helper name -> the function on float64 values (ROUND: per rounding mode)
REFERENCE: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "abs": np.abs, "neg": np.negative, "ceil": np.ceil, "floor": np.floor, "sign": _sign,
    "reciprocal": lambda x: 1.0 / x, "sqrt": np.sqrt, "exp": np.exp, "log": np.log, "sigmoid": _sigmoid,
    "softsign": _softsign, "tanh": np.tanh, "elementwise_tanh": np.tanh, "erf": _erf, "softplus": _softplus,
    "sin": np.sin, "cos": np.cos,  # float64 libm: accurate for every float32 argument (< 1 ulp of float64)
    "tan": np.tan, "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan, "sinh": np.sinh, "cosh": np.cosh,
    "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh,  # ops/elementwise_trig.py
}
ROUND = {0: np.round, 1: np.trunc, 2: _round_away}  # DML_ROUNDING_MODE -> numpy (np.round: halves to even)


def reference64(helper: str, x: np.ndarray, rounding_mode: int = 0, steepness: float = 1.0) -> np.ndarray:
    """f(x) in float64; SOFTPLUS with a steepness s: softplus(t) / s at t = s x rounded to float32
    (the operator's documented first step: exact for s = 1 and powers of two) where finite."""
    fn = ROUND[rounding_mode] if helper == "round" else REFERENCE[helper]
    with np.errstate(all="ignore"):
        if steepness != 1.0:  # an s x beyond float32 stays as it is (the operator returns x there)
            t64 = x.astype(np.float64) * float(np.float32(steepness))
            t32 = t64.astype(np.float32).astype(np.float64)
            return fn(np.where(np.isinf(t32) & np.isfinite(t64), t64, t32)) / float(np.float32(steepness))
        return fn(x.astype(np.float64))


def rounded(ref64: np.ndarray, dtype: np.dtype) -> np.ndarray:
    with np.errstate(all="ignore"):
        return ref64.astype(dtype)


def ulp_error(got: np.ndarray, ref64: np.ndarray) -> np.ndarray:
    """|got - ref| in ulps of got's type at ref (subnormal spacing below the normal range), for
    the elements whose rounded reference is finite (the rest must match in class: check_close)."""
    info = np.finfo(got.dtype)
    with np.errstate(all="ignore"):
        a = np.maximum(np.abs(ref64), float(info.tiny))
        ulp = np.exp2(np.floor(np.log2(a)) - info.nmant)
        err = np.abs(got.astype(np.float64) - ref64) / ulp
    return np.where(np.isfinite(rounded(ref64, got.dtype)) & np.isfinite(got), err, 0.0)


def classes(a: np.ndarray) -> np.ndarray:
    return np.stack([np.isnan(a), np.isposinf(a), np.isneginf(a)])


def check_close(got: np.ndarray, ref64: np.ndarray, bound: float) -> float:
    """AssertionError unless NaN / +inf / -inf agree with the rounded reference and every other
    result is within `bound` ulps; the largest error."""
    want = rounded(ref64, got.dtype)
    bad = np.flatnonzero((classes(got) != classes(want)).any(axis=0))
    assert bad.size == 0, f"{bad.size} special-value mismatches, first input index {bad[0]}: got {got.flat[bad[0]]}, " \
                          f"want {want.flat[bad[0]]}"
    err = ulp_error(got, ref64)
    worst = int(np.argmax(err)) if err.size else 0
    assert err.size == 0 or err.flat[worst] <= bound, \
        f"{err.flat[worst]:.3f} ulp at index {worst} (got {got.flat[worst]!r}, reference {ref64.flat[worst]!r}) > {bound}"
    return float(err.max()) if err.size else 0.0


def check_exact(got: np.ndarray, ref64: np.ndarray) -> None:
    """Bit for bit the rounded reference, except that any NaN stands for a NaN."""
    want = rounded(ref64, got.dtype)
    u = {2: np.uint16, 4: np.uint32}[got.dtype.itemsize]
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan), "NaN results differ"
    gb, wb = got.view(u)[~nan], want.view(u)[~nan]
    bad = np.flatnonzero(gb != wb)
    assert bad.size == 0, f"{bad.size} results differ, first: got {gb[bad[0]]:#x}, want {wb[bad[0]]:#x}"


def float32_inputs(rng: np.random.Generator, n: int = 1 << 20) -> np.ndarray:
    """Special values (+-0, +-inf, NaNs, the subnormal and normal extremes, halves, integers),
    half of n random bit patterns and half random values in [-100, 100]."""
    special = np.array([0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000, 0x7F800001,
                        0xFFFFFFFF, 0x00000001, 0x80000001, 0x007FFFFF, 0x807FFFFF, 0x00800000, 0x80800000,
                        0x7F7FFFFF, 0xFF7FFFFF, 0x3F800000, 0xBF800000, 0x3F000000, 0xBF000000, 0x3FC00000,
                        0xC0200000, 0x4B000000, 0x4B7FFFFF, 0x4AFFFFFF, 0x3EFFFFFF, 0x42B17218, 0xC2CFF1B5],
                       np.uint32).view(np.float32)
    bits = rng.integers(0, 1 << 32, n // 2, dtype=np.uint64).astype(np.uint32).view(np.float32)
    vals = rng.uniform(-100, 100, n // 2).astype(np.float32)
    halves = (rng.integers(-1000, 1000, 256) + 0.5).astype(np.float32)
    return np.concatenate([special, halves, bits, vals])


def every_float16() -> np.ndarray:
    return np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)


def near_half_pi_multiples(n: int = 1 << 18) -> np.ndarray:
    """SIN / COS's hardest inputs: the float32 values nearest k pi / 2 and their two neighbours
    for k = 1 .. n (|x| up to ~4e5), where the reduced argument cancels the most, and the same
    for k = 2^j (j to 120) scaled up, up to float32's largest values."""
    k = np.arange(1, n + 1, dtype=np.float64)
    big = np.exp2(np.arange(20, 121, dtype=np.float64)) * np.pi / 2
    with np.errstate(over="ignore"):
        near = np.concatenate([(k * np.pi / 2), big]).astype(np.float32)
    near = near[np.isfinite(near)]
    return np.concatenate([near, np.nextafter(near, np.float32(np.inf)), np.nextafter(near, np.float32(0))])
