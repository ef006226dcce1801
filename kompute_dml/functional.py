"""Functional helpers: allocate a packed output, compile (cached), execute, return it.

Each accepts kompute_dml Tensors or numpy arrays (uploaded to the tensor's device, or to
`device=`, or to the process-wide default device, `kdml.default_device()`).
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from .device import Device
from .errors import invalid
from .memory import Tensor
from .ops.identity import ActivationIdentityDesc, CopyDesc
from .tensor_desc import TensorDesc

_default: Device | None = None
_default_lock = threading.Lock()


def default_device() -> Device:
    """The device functional helpers use when given numpy arrays (device 0, highest level)."""
    global _default
    with _default_lock:
        if _default is None or _default._closed:
            _default = Device()
        return _default


def _device_of(*values: Any, device: Device | None = None) -> Device:
    if device is not None:
        return device
    for v in values:
        if isinstance(v, Tensor):
            return v.device
    return default_device()


def as_tensor(x: Any, device: Device, field: str = "x") -> Tensor:
    if isinstance(x, Tensor):
        if x.device is not device:
            raise invalid(field, "belongs to another Device")
        return x
    if isinstance(x, (np.ndarray, np.generic, list, tuple, int, float)):
        return device.tensor(np.asarray(x))
    raise invalid(field, f"must be a Tensor or a numpy array, got {type(x).__name__}")


_compile_cache: dict[tuple[int, Any], Any] = {}


def compile_cached(device: Device, desc: Any) -> Any:
    """dev.compile with a per-device cache keyed by the (hashable) descriptor."""
    key = (id(device), desc)
    op = _compile_cache.get(key)
    if op is None or op.device is not device:
        op = device.compile(desc)
        if len(_compile_cache) > 512:
            _compile_cache.clear()
        _compile_cache[key] = op
    return op


def _packed_like(desc: TensorDesc) -> TensorDesc:
    return TensorDesc(desc.data_type, desc.sizes)


def _unary_copy(x: Any, desc_type: type, out: Tensor | None, device: Device | None) -> Tensor:
    dev = _device_of(x, out, device=device)
    t = as_tensor(x, dev)
    if out is None:
        out = dev.empty(_packed_like(t.desc))
    op = compile_cached(dev, desc_type(t.desc, out.desc))
    op.execute([t], [out])
    return out


def identity(x: Any, *, out: Tensor | None = None, device: Device | None = None) -> Tensor:
    """DML_ACTIVATION_IDENTITY: FLOAT32/FLOAT16, 1-8 dimensions; output packed unless `out` is given."""
    return _unary_copy(x, ActivationIdentityDesc, out, device)


def copy(x: Any, *, out: Tensor | None = None, device: Device | None = None) -> Tensor:
    """Strided element-wise copy of any of the eleven data types (ONNX Identity)."""
    return _unary_copy(x, CopyDesc, out, device)
