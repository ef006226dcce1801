"""The views and checks cache_padding.py makes: key rows of a [batch, heads, keys, head size] tensor
through its strides, and whether a padded run's output agrees with the unpadded one."""

from __future__ import annotations

from typing import Any

import numpy as np

import kompute_dml as kdml

from .values import DeviceValue


def agrees(r: np.ndarray, p: np.ndarray, tol: float) -> bool:
    """`p` equals `r` (integers), or differs by at most tol x r's largest finite magnitude where r is
    finite and is not finite where r is not."""
    if r.dtype.kind != "f":
        return bool(np.array_equal(r, p))
    finite = np.isfinite(r)
    if not np.array_equal(finite, np.isfinite(p)) or not np.array_equal(r[~finite], p[~finite]):
        return False
    if not finite.any():
        return True
    return float(np.max(np.abs(p[finite] - r[finite]))) <= tol * max(float(np.max(np.abs(r[finite]))), 1e-30)


def key_rows(t: kdml.Tensor, start: int, stop: int) -> kdml.Tensor:
    """Key rows start .. stop - 1 of `t` ([batch, heads, keys, head size]; start < 0: rows before it,
    within the tensor it was taken from): a view through t's strides, without views.py's general
    indexing (a step makes one per present)."""
    d = t.desc
    strides = d.effective_strides
    sizes = (*d.sizes[:2], stop - start, *d.sizes[3:])
    return kdml.Tensor.trusted(t.buffer, kdml.TensorDesc(d.data_type, sizes, strides),
                               t.offset + start * strides[2] * d.data_type.size)


def rows_from(t: kdml.Tensor, start: int) -> kdml.Tensor:
    """`t` from its key row `start` on (negative: that many rows before it, widened)."""
    return key_rows(t, start, t.shape[2])


def forget(views: dict[int, Any], key: int) -> Any:
    return lambda _ref: views.pop(key, None)


def rank4(v: Any) -> bool:
    return len(shape_of(v)) == 4


def shape_of(v: Any) -> tuple[int, ...]:
    return v.shape if isinstance(v, (DeviceValue, np.ndarray)) else np.shape(v)


def dtype_of(v: Any) -> Any:
    return v.dtype if isinstance(v, (DeviceValue, np.ndarray)) else np.asarray(v).dtype
