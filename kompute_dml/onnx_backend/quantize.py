"""Host dynamic quantization (uint8), as ONNX Runtime's CPU DynamicQuantizeMatMul does it."""

from __future__ import annotations

from typing import Any

import numpy as np


# ---------------------------------------------------------------------------------
# dynamic quantization (host)
# ---------------------------------------------------------------------------------
def dynamic_quantize_uint8(a: Any) -> tuple[np.ndarray, np.float32, np.uint8]:
    """uint8 dynamic quantization exactly as ONNX Runtime's CPU DynamicQuantizeMatMul does it.

    Range widened to include 0; scale = (max - min) / 255 (1 when max == min);
    zero point = round-half-to-even(clamp(0 - min / scale, 0, 255));
    q = clamp(round-half-to-even(a / scale) + zero point, 0, 255). float32 arithmetic.
    """
    x = np.asarray(a, dtype=np.float32)
    if x.size:
        lo = min(np.float32(np.nanmin(x)), np.float32(0.0))
        hi = max(np.float32(np.nanmax(x)), np.float32(0.0))
    else:
        lo = hi = np.float32(0.0)
    scale = np.float32(1.0) if hi == lo else np.float32((np.float32(hi) - np.float32(lo)) / np.float32(255.0))
    zp_f = np.float32(np.float32(0.0) - np.float32(lo) / scale)
    zp = np.uint8(np.rint(np.clip(zp_f, np.float32(0.0), np.float32(255.0))))
    with np.errstate(invalid="ignore"):
        q = np.clip(np.rint(x / scale) + np.float32(zp), 0.0, 255.0).astype(np.uint8)
    return q, scale, zp
