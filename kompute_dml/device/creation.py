"""Creation functions (CuPy's): `kdml.zeros / ones / empty / full / arange` and their `*_like`
forms, on `device=` (default: the process-wide default device) or, for `*_like`, the
prototype's. Shapes are an int or a tuple (`()` gives a 0-d tensor, array_methods.py); dtype
is any numpy dtype DirectML holds or a DataType, float32 by default (arange: from its
arguments, Python floats as float32, Python integers as int64).

`zeros` and `empty` are a zeroed device allocation; `full` / `ones` upload one element and
copy it over the shape on the device (COPY from a stride-0 view); `arange` uploads the values
(made on the host: no operator generates a sequence).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..core.errors import invalid
from ..core.inputs import conform
from ..core.tensor_desc import TensorDesc
from ..functional import default_device
from ..functional.elementwise import broadcast_view
from ..ops.identity import copy as device_copy
from .array_methods import _dtype, _shape, as_0d
from .memory import Tensor

_FLOAT32 = np.dtype(np.float32)


def _desc(shape: Any, dtype: Any) -> tuple[TensorDesc, bool]:
    sizes = _shape(shape)
    if any(v < 1 for v in sizes):
        raise invalid("shape", f"{sizes}: sizes must be positive (DirectML tensors have no empty dimensions)")
    return TensorDesc(_dtype(dtype), sizes or (1,)), sizes == ()


def empty(shape: Any, dtype: Any = _FLOAT32, device: Any = None) -> Tensor:
    """A new tensor of `shape` and `dtype` (zeroed: the device clears new buffers)."""
    desc, zero_d = _desc(shape, dtype)
    t = (device or default_device()).empty(desc)
    return as_0d(t) if zero_d else t


def zeros(shape: Any, dtype: Any = _FLOAT32, device: Any = None) -> Tensor:
    return empty(shape, dtype, device)


def full(shape: Any, fill_value: Any, dtype: Any = None, device: Any = None) -> Tensor:
    """`fill_value` in every element (dtype: the value's, float32 for a Python float, int64 for a
    Python int, where none is given); the value must survive the conversion."""
    if dtype is None:
        dtype = _FLOAT32 if isinstance(fill_value, float) else (
            np.int64 if isinstance(fill_value, int) and not isinstance(fill_value, bool) else np.asarray(fill_value).dtype)
    desc, zero_d = _desc(shape, dtype)
    dev = device or default_device()
    value = np.asarray(fill_value)
    if value.size != 1:
        raise invalid("fill_value", f"must be one value, got shape {value.shape}")
    python = isinstance(fill_value, (bool, int, float))
    one = dev.tensor(conform(value.reshape(1), desc.data_type.numpy_dtype, "fill_value", python=python))
    t = device_copy(broadcast_view(one, desc.sizes, "fill_value")) if math.prod(desc.sizes) > 1 else one
    return as_0d(t) if zero_d else t


def ones(shape: Any, dtype: Any = _FLOAT32, device: Any = None) -> Tensor:
    return full(shape, 1, dtype, device)


def arange(start: Any, stop: Any = None, step: Any = 1, dtype: Any = None, device: Any = None) -> Tensor:
    """numpy.arange's values (start, stop, step), uploaded."""
    values = np.arange(start, stop, step) if stop is not None else np.arange(start)
    if values.size == 0:
        raise invalid("stop", "the range is empty (DirectML tensors have no empty dimensions)")
    if dtype is None:
        dtype = _FLOAT32 if values.dtype.kind == "f" else values.dtype
    dt = _dtype(dtype)
    return (device or default_device()).tensor(values.astype(dt.numpy_dtype))


def _like(proto: Tensor, dtype: Any) -> tuple[tuple[int, ...], Any, Any]:
    if not isinstance(proto, Tensor):
        raise invalid("a", f"must be a kompute_dml Tensor, got {type(proto).__name__}")
    return proto.shape, proto.dtype if dtype is None else dtype, proto.device


def empty_like(a: Tensor, dtype: Any = None) -> Tensor:
    return empty(*_like(a, dtype))


def zeros_like(a: Tensor, dtype: Any = None) -> Tensor:
    return zeros(*_like(a, dtype))


def ones_like(a: Tensor, dtype: Any = None) -> Tensor:
    return ones(*_like(a, dtype))


def full_like(a: Tensor, fill_value: Any, dtype: Any = None) -> Tensor:
    shape, dt, dev = _like(a, dtype)
    return full(shape, fill_value, dt, dev)


__all__ = ["arange", "empty", "empty_like", "full", "full_like", "ones", "ones_like", "zeros", "zeros_like"]
