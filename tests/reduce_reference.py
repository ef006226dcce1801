"""An independent numpy reference of DirectML REDUCE (tests/test_reduce.py): float64 for floats,
int64 for integers, with the reduced axes kept as size 1, and the error bound each float result
must meet (ops/reduce.py's docstring, docs/reduce.md)."""

from __future__ import annotations

import numpy as np

U = 2.0 ** -24  # float32's unit roundoff


def _rows(x: np.ndarray, axes: tuple[int, ...]) -> tuple[np.ndarray, tuple[int, ...]]:
    """x with the reduced axes moved last and flattened row-major (their index order), and the
    kept-dims shape."""
    keep = tuple(1 if d in axes else s for d, s in enumerate(x.shape))
    outer = [d for d in range(x.ndim) if d not in axes]
    moved = np.transpose(x, outer + sorted(axes))
    return moved.reshape((*moved.shape[:len(outer)], -1)), keep


def reference(x: np.ndarray, fn: str, axes: tuple[int, ...]) -> np.ndarray:
    """The exact (float64 / int64) result; integer sums and products wrap to the input's width."""
    r, keep = _rows(x, axes)
    if fn in ("ARGMAX", "ARGMIN"):
        # numpy's argmax / argmin: the first index of the extreme, a NaN's first index if any
        idx = np.argmax(r, axis=-1) if fn == "ARGMAX" else np.argmin(r, axis=-1)
        return idx.astype(np.int64).reshape(keep)
    if x.dtype.kind in "iu":
        v = r.astype(np.int64)
        with np.errstate(over="ignore"):
            out = {"MAX": lambda: v.max(-1), "MIN": lambda: v.min(-1), "SUM": lambda: v.sum(-1),
                   "L1": lambda: np.abs(v).sum(-1), "SUM_SQUARE": lambda: (v * v).sum(-1),
                   "MULTIPLY": lambda: _wrapping_prod(v)}[fn]()
        return out.astype(x.dtype).reshape(keep)  # modulo 2^bits, as the device wraps
    v = r.astype(np.float64)
    with np.errstate(all="ignore"):
        if fn == "LOG_SUM_EXP":
            m = v.max(-1, keepdims=True)
            finite = np.where(np.isfinite(m), m, 0.0)
            out = np.log(np.exp(v - finite).sum(-1)) + finite[..., 0]
            out = np.where(np.isfinite(m[..., 0]), out, m[..., 0])
        else:
            out = {"MAX": lambda: v.max(-1), "MIN": lambda: v.min(-1), "SUM": lambda: v.sum(-1),
                   "AVERAGE": lambda: v.mean(-1), "L1": lambda: np.abs(v).sum(-1),
                   "L2": lambda: np.sqrt((v * v).sum(-1)), "SUM_SQUARE": lambda: (v * v).sum(-1),
                   "LOG_SUM": lambda: np.log(v.sum(-1)), "MULTIPLY": lambda: v.prod(-1)}[fn]()
    return out.reshape(keep)


def _wrapping_prod(v: np.ndarray) -> np.ndarray:
    out = np.ones(v.shape[:-1], np.int64)
    for k in range(v.shape[-1]):
        out = (out * v[..., k]) & 0xFFFFFFFF  # keep 32 bits: int64 never overflows
    return out


def bound(x: np.ndarray, fn: str, axes: tuple[int, ...], ref: np.ndarray, f16: bool) -> np.ndarray:
    """The largest |device - reference| allowed per output element (ops/reduce.py's bounds)."""
    r, keep = _rows(x.astype(np.float64), axes)
    n = r.shape[-1]
    a = np.abs(ref)
    with np.errstate(all="ignore"):
        if fn in ("MAX", "MIN"):
            e = np.zeros(ref.shape)
        elif fn in ("SUM", "L1"):
            e = (n + 1) * U * np.abs(r).sum(-1).reshape(keep)
        elif fn == "AVERAGE":
            e = (n + 2) * U * np.abs(r).sum(-1).reshape(keep) / n
        elif fn == "SUM_SQUARE":
            e = (n + 2) * U * (r * r).sum(-1).reshape(keep)
        elif fn == "L2":
            e = (n + 2) * U * a / 2 + 4 * U * a
        elif fn == "LOG_SUM":
            s = np.abs(r).sum(-1).reshape(keep)
            e = (n + 1) * U * s / np.exp(ref) + 2.0 ** -21 + 4 * U * a
        elif fn == "LOG_SUM_EXP":
            m = r.max(-1, keepdims=True)
            spread = np.abs(r - m).max(-1).reshape(keep)
            e = (n + 6 + 4 * spread) * U + 2.0 ** -21 + 4 * U * a
        elif fn == "MULTIPLY":
            e = (n + 1) * U * a + 2.0 ** -149
        else:
            raise ValueError(fn)
    if f16:
        e = e * (1 + 2.0 ** -11) + 2.0 ** -11 * a + 2.0 ** -25
    return e
