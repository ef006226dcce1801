"""Functional helpers: allocate a packed output, compile (cached), execute, return it.

Each accepts kompute_dml Tensors or anything kompute_dml/core/inputs.py takes (numpy arrays, Python
numbers and lists, CPU objects with __array__ / __dlpack__ such as torch CPU tensors), uploaded
to the tensor's device, or to `device=`, or to the process-wide default device,
`kdml.default_device()`.
This package is their machinery (the buffer pool, the compile cache, operands and outputs);
the helpers are declared by their operator modules (kompute_dml/ops/<op>.py, `OperatorSpec.helpers`)
and defined there or, where they need room, in this package's module of the same name.
"""

from __future__ import annotations

import functools
import threading
from typing import Any

import numpy as np

from ..core.dtypes import DataType
from ..core.errors import invalid
from ..core.inputs import as_host_array
from ..core.tensor_desc import TensorDesc, validate_desc
from ..device.device import Device
from ..device.memory import Buffer, Tensor, packed_desc_for
from ..runtime.selection import default_index

_default: Device | None = None
_default_lock = threading.Lock()


def default_device() -> Device:
    """The device functional helpers use when given numpy arrays: the one KDML_DEVICE names
    (an index, VULKAN:<uuid> or GPU-<uuid>: runtime/selection.py), else device 0; highest level.
    Made at the first call: KDML_DEVICE is read then."""
    global _default
    with _default_lock:
        if _default is None or _default.closed:
            _default = Device(default_index())
        return _default


def device_of(*values: Any, device: Device | None = None) -> Device:
    if device is not None:
        return device
    for v in values:
        if isinstance(v, Tensor):
            return v.device
    return default_device()


# ---- buffer reuse: the device's pool (kompute_dml/runtime/pool.py says why) --------------
def _pool_take(device: Device, nbytes: int) -> Buffer:
    engine = device.engine
    with engine.lock:
        return engine.pool.take(nbytes, lambda n: Buffer(device, n))


def pooled_empty(device: Device, desc: TensorDesc) -> Tensor:
    """An output tensor for a helper (contents undefined: the operator writes every element)."""
    validate_desc(desc, "out")
    return Tensor.whole(_pool_take(device, desc.byte_size), desc)


def pooled_upload(device: Device, array: np.ndarray) -> Tensor:
    """Upload a numpy array as a packed tensor into a pooled buffer."""
    arr = np.ascontiguousarray(array)
    desc = packed_desc_for(arr)
    buf = _pool_take(device, desc.byte_size)
    buf.write(arr)
    return Tensor(buf, desc, 0)


def as_tensor(x: Any, device: Device, field: str = "x") -> Tensor:
    if isinstance(x, Tensor):
        if x.device is not device:
            raise invalid(field, "belongs to another Device")
        return x
    # anything kompute_dml/core/inputs.py takes: numpy, Python numbers and lists, CPU
    # __array__ / __dlpack__ objects (a torch CPU tensor)
    return pooled_upload(device, as_host_array(x, field))


def compile_cached(device: Device, desc: Any, allow_half_precision: bool = False) -> Any:
    """dev.compile with a per-device cache (Device.caches) keyed by the (hashable) descriptor and the flags (not
    the kernel-forcing variables such as KDML_CONV_SPLIT: they apply to descriptors compiled after they are set)."""
    cache = device.caches.setdefault("compiled", {})
    key = (desc, bool(allow_half_precision))
    op = cache.get(key)
    if op is None:
        op = device.compile(desc, allow_half_precision=True) if allow_half_precision else device.compile(desc)
        if len(cache) > 512:
            cache.clear()
        cache[key] = op
    return op


def _packed_like(desc: TensorDesc) -> TensorDesc:
    return _packed(desc.data_type, desc.sizes)


@functools.lru_cache(maxsize=1024)
def _packed(data_type: DataType, sizes: tuple[int, ...]) -> TensorDesc:
    # cached: building a TensorDesc checks every rule (tens of microseconds), and an eager
    # functional call would otherwise build one for its output every time
    return TensorDesc(data_type, sizes)


def run_into(dev: Device, make: Any, inputs: list[Any], sizes: tuple[int, ...], dt: DataType,
             out: Tensor | None) -> Tensor:
    """A helper's operator run into `out` (checked: check_out) or a new packed tensor of `sizes` and `dt` from the
    device's pool: `make(output_desc)` gives the descriptor, compiled once per descriptor (compile_cached) before
    anything is allocated."""
    if out is not None:
        check_out(out, dev, sizes, dt)
    od = out.desc if out is not None else _packed(dt, tuple(sizes))
    op = compile_cached(dev, make(od))
    y = out if out is not None else pooled_empty(dev, od)
    op.execute(inputs, [y])
    return y


def check_out(out: Any, dev: Device, sizes: tuple[int, ...], dt: DataType, field: str = "out") -> None:
    """InvalidArgumentError naming `field` unless `out` is a Tensor of `dev` with these sizes and type."""
    if not isinstance(out, Tensor):
        raise invalid(field, f"must be a kompute_dml Tensor, got {type(out).__name__}")
    if out.device is not dev:
        raise invalid(field, "belongs to another Device")
    if out.desc.sizes != sizes:
        raise invalid(field, f"sizes must be {sizes}, got {out.desc.sizes}")
    if out.desc.data_type != dt:
        raise invalid(field, f"data type must be {dt.name}, got {out.desc.data_type.name}")


__all__ = ["as_tensor", "check_out", "compile_cached", "default_device", "device_of", "pooled_empty",
           "pooled_upload"]
