"""An independent numpy reference of DYNAMIC_QUANTIZE_LINEAR (docs/dynamic_quantize.md): ONNX
Runtime's CPU DynamicQuantizeLinear, step by step in numpy float32 arithmetic (IEEE-754: every
operation correctly rounded, subnormals kept), written from ONNX Runtime's source
(GetQuantizationParameter and MlasQuantizeLinear), not from kompute_dml's code:

    min, max = min(x), max(x) over the non-NaN elements (none: 0, 0)
    min = std::min(min, 0.f); max = std::max(max, 0.f)
    scale = max == min ? 1.f : (max - min) / float(qmax - qmin)
    zero_point = RoundHalfToEven(std::max(float(qmin), std::min(float(qmax), qmin - min / scale)))
    y = clamp(x / scale, qmin - zero_point, qmax - zero_point) rounded half to even, + zero_point

with std::min(qmax, NaN) = qmax (C++: `b < a ? b : a`) and a NaN quotient clamped to
qmin - zero_point (SSE's maxps returns its second operand when one is NaN). qmin, qmax = 0, 255 for
UINT8 (ONNX), -128, 127 for INT8 (DirectML's page; ONNX Runtime's int8 template). FLOAT16 inputs
are converted exactly to float32 first.
"""

from __future__ import annotations

import numpy as np

F32 = np.float32
RANGES = {np.dtype(np.uint8): (0, 255), np.dtype(np.int8): (-128, 127)}


def quant_range(dtype: object) -> tuple[int, int]:
    return RANGES[np.dtype(dtype)]  # type: ignore[call-overload]


def dynamic_quantize_ref(x: np.ndarray, dtype: object = np.uint8) -> tuple[np.ndarray, np.float32, int]:
    """(y of x's shape and `dtype`, scale, zero point)."""
    qmin, qmax = quant_range(dtype)
    v = np.asarray(x).astype(np.float32).reshape(-1)
    finite_or_inf = v[~np.isnan(v)]
    lo = finite_or_inf.min() if finite_or_inf.size else F32(0)
    hi = finite_or_inf.max() if finite_or_inf.size else F32(0)
    lo = F32(0) if F32(0) < lo else F32(lo)  # std::min(lo, 0.f)
    hi = F32(0) if hi < F32(0) else F32(hi)  # std::max(hi, 0.f)
    with np.errstate(all="ignore"):
        scale = F32(1) if hi == lo else F32(F32(hi - lo) / F32(qmax - qmin))
        zf = F32(F32(qmin) - F32(lo / scale))
        inner = zf if zf < F32(qmax) else F32(qmax)  # std::min(qmax, zf): NaN -> qmax
        zp = int(np.rint(F32(qmin) if inner < F32(qmin) else inner))
        q = (v / scale).astype(np.float32)
        clamped = np.where(np.isnan(q), F32(qmin - zp), np.clip(q, F32(qmin - zp), F32(qmax - zp)))
        y = np.rint(clamped).astype(np.int64) + zp
    return y.astype(dtype).reshape(np.shape(x)), scale, zp


__all__ = ["dynamic_quantize_ref", "quant_range"]
