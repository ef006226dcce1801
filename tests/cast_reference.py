"""An independent numpy reference of CAST's rules (docs/cast.md), written from the rules, not
from shaders/cast.comp: integer -> integer through int64 / uint64 (numpy's astype wraps), float
-> integer by np.trunc in float64 then saturated to the output's range in Python integers (NaN
-> 0), integer -> float rounded once to nearest even in Python integers (the magnitude cut to
the float's significand bits, then the float64 of that is exact and converts exactly), FLOAT32
-> FLOAT16 by numpy (nearest even), FLOAT16 -> FLOAT32 exact in value; NaN bit patterns built
explicitly."""

from __future__ import annotations

import numpy as np

import kompute_dml as kdml


def cast_ref(x: np.ndarray, out: kdml.DataType) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        return _cast_ref(x, out)


def _cast_ref(x: np.ndarray, out: kdml.DataType) -> np.ndarray:
    odt = out.numpy_dtype
    if x.dtype == odt:
        return x.copy()  # the same bits (NaN payloads included)
    if x.dtype.kind == "f" and np.dtype(odt).kind == "f":
        nan = np.isnan(x)
        sign = np.signbit(x)
        y = x.astype(np.float64).astype(odt)
        ybits = y.view(f"u{y.dtype.itemsize}").copy()
        if odt == np.float16:  # a quiet NaN, sign kept, payload dropped
            ybits[nan] = np.where(sign[nan], 0xFE00, 0x7E00).astype(np.uint16)
        else:  # FLOAT16 -> FLOAT32: sign, all-ones exponent, the payload shifted up by 13
            hb = x.view(np.uint16)[nan].astype(np.uint32)
            ybits[nan] = ((hb & 0x8000) << 16) | 0x7F800000 | ((hb & 0x3FF) << 13)
        return ybits.view(odt)
    if x.dtype.kind == "f":
        info = np.iinfo(odt)
        v = np.trunc(x.astype(np.float64)).ravel()
        sat = [0 if np.isnan(t) else info.max if t >= info.max else info.min if t <= info.min else int(t) for t in v]
        return np.array(sat, dtype=object).astype(odt).reshape(x.shape)
    if np.dtype(odt).kind == "f":
        bits = 24 if odt == np.float32 else 11  # significand bits, the implicit one included
        return np.array([_round_int(int(t), bits) for t in x.ravel()], np.float64).astype(odt).reshape(x.shape)
    wide = np.uint64 if x.dtype == np.uint64 else np.int64
    return x.astype(wide).astype(odt)


def _round_int(v: int, bits: int) -> float:
    """v rounded to `bits` significant bits, to nearest, ties to even (exact as a float64)."""
    mag = abs(v)
    drop = max(0, mag.bit_length() - bits)
    q, r = divmod(mag, 1 << drop)
    half = (1 << drop) >> 1
    if drop and (r > half or (r == half and q & 1)):
        q += 1
    return float(-(q << drop) if v < 0 else q << drop)
