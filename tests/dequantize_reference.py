"""An independent numpy reference of ELEMENT_WISE_DEQUANTIZE_LINEAR's rules (docs/dequantize.md),
written from the rules, not from shaders/dequantize.comp: the difference in int64 (exact), to
float64 (exact below 2^53) and once to float32 (nearest even: exact below 2^24), the product of
two float32 values in float64 (exact: 24 + 24 significand bits) rounded once to float32, NaN
as the quiet NaN 0x7FC00000, then (FLOAT16 outputs) numpy's float32 -> float16 (nearest even)."""

from __future__ import annotations

import numpy as np

import kompute_dml as kdml


def dequantize_ref(x: np.ndarray, scale: np.ndarray, zero_point: np.ndarray | None, out: kdml.DataType) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        d = x.astype(np.int64) - (0 if zero_point is None else zero_point.astype(np.int64))
        df = np.asarray(d).astype(np.float64).astype(np.float32)
        p = (df.astype(np.float64) * scale.astype(np.float64)).astype(np.float32)
        bits = p.view(np.uint32).copy()
        bits[np.isnan(p)] = 0x7FC00000
        p = bits.view(np.float32)
        return p if out == kdml.DataType.FLOAT32 else p.astype(np.float16)
