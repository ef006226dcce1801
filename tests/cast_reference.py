"""An independent numpy reference of CAST's rules (docs/cast.md), written from the rules, not
from shaders/cast.comp: integer -> integer through int64 (numpy's astype wraps), float ->
integer by np.trunc in float64 then np.clip to the output's range (NaN -> 0), integer -> float
by numpy's correctly rounded conversions (int64 -> float64 is exact below 2^53, then one
rounding to nearest even), FLOAT32 -> FLOAT16 by numpy (nearest even), FLOAT16 -> FLOAT32 exact
in value; NaN bit patterns built explicitly."""

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
        v = np.trunc(x.astype(np.float64))
        v = np.where(np.isnan(v), 0.0, np.clip(v, info.min, info.max))
        return v.astype(np.int64).astype(odt)
    if np.dtype(odt).kind == "f":
        return x.astype(np.int64).astype(np.float64).astype(odt)
    return x.astype(np.int64).astype(odt)
