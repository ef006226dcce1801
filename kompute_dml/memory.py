"""Buffers (device memory as 32-bit words) and Tensors (a desc laid over a buffer range).

Every data type travels as raw 32-bit words, so no optional Vulkan feature is needed.
A Buffer is one kp tensor of type `device` (device-local memory plus a host-visible
staging copy). The staging copy is kept coherent lazily: writes go staging -> device
at once; after a dispatch writes the buffer, the next host read pulls device -> staging.
"""

from __future__ import annotations

import itertools
import math
import operator
from typing import TYPE_CHECKING, Any

import numpy as np

from .dtypes import DataType
from .errors import DMLError, InvalidArgumentError, OutOfMemoryError, invalid
from .tensor_desc import MINIMUM_BUFFER_TENSOR_ALIGNMENT, TensorDesc, packed_strides, validate_desc

if TYPE_CHECKING:
    from .device import Device

_serials = itertools.count(1)


def _as_bytes_view(data: object) -> memoryview:
    if isinstance(data, np.ndarray):
        if data.dtype.hasobject:
            raise invalid("data", "a numpy array of Python objects (dtype object) has no raw bytes to upload")
        return np.ascontiguousarray(data).reshape(-1).view(np.uint8).data
    if isinstance(data, (bytes, bytearray, memoryview)):
        return memoryview(data).cast("B")
    raise invalid("data", f"must be bytes, bytearray or a numpy array, got {type(data).__name__}")


def buffer_words(nbytes: int, limit: int) -> int:
    """32-bit words allocated for a buffer of `nbytes`: whole 16-byte units (so that uvec4
    accesses never leave the allocation), or whole words where 16-byte units would pass the
    device's maxStorageBufferRange (4 GiB - 1 on NVIDIA: its last 16-byte unit)."""
    words16 = -(-nbytes // 16) * 4
    return words16 if words16 * 4 <= limit else -(-nbytes // 4)


class Buffer:
    """A range of device memory, `nbytes` long (allocated in whole 16-byte units)."""

    def __init__(self, device: Device, nbytes: int) -> None:
        if isinstance(nbytes, bool):
            raise invalid("nbytes", "must be an integer")
        try:
            nbytes = operator.index(nbytes)
        except TypeError:
            raise invalid("nbytes", f"must be an integer, got {type(nbytes).__name__}") from None
        if nbytes < 1:
            raise invalid("nbytes", f"must be at least 1, got {nbytes}")
        limit = device.limits["max_storage_buffer_range"]
        if nbytes > limit:
            raise invalid(
                "nbytes",
                f"{nbytes} exceeds the device's maxStorageBufferRange ({limit} bytes): a buffer must be "
                "bindable as one storage buffer; split the data over several buffers",
            )
        words = buffer_words(nbytes, limit)
        if words * 4 > limit:
            raise invalid(
                "nbytes",
                f"{nbytes} bytes round up to {words * 4} bytes of whole 32-bit words, beyond the device's "
                f"maxStorageBufferRange ({limit} bytes), so no shader could bind the buffer whole; "
                f"the largest buffer on this device is {limit // 4 * 4} bytes",
            )
        self.device = device
        self.nbytes = nbytes
        self.serial = next(_serials)
        with device._lock:  # no close() between the allocation and taking its mapping
            self._kp = device._alloc_words(words)
            device._track_buffer(self)  # at once: the finalizer returns the memory to the budget
            # The mapped staging memory. kp 0.9's data() returns an array with stride 0
            # (every element aliases the first), so re-stride it over the whole mapping.
            raw = self._kp.data()
        self._host = np.lib.stride_tricks.as_strided(raw, shape=(words,), strides=(4,)).view(np.uint8)
        self._device_newer = False

    def __repr__(self) -> str:
        return f"Buffer(nbytes={self.nbytes}, serial={self.serial})"

    def _check_range(self, offset: object, nbytes: object, field: str) -> tuple[int, int]:
        try:
            off = operator.index(offset)  # type: ignore[arg-type]
            n = operator.index(nbytes)  # type: ignore[arg-type]
        except TypeError:
            raise invalid(field, "offset and size must be integers") from None
        if off < 0 or n < 0:
            raise invalid(field, f"offset ({off}) and size ({n}) must not be negative")
        if off + n > self.nbytes:
            raise invalid(field, f"range [{off}, {off + n}) runs past the buffer's end ({self.nbytes} bytes)")
        return off, n

    def write(self, data: object, offset: int = 0) -> None:
        view = _as_bytes_view(data)
        off, n = self._check_range(offset, view.nbytes, "data")
        if n == 0:
            return
        with self.device._lock:
            self.device._check_open()  # the mapping is gone once the device is closed
            self._pull()
            self._host[off : off + n] = np.frombuffer(view, dtype=np.uint8)
            self.device._sync_to_device([self._kp])

    def read(self, offset: int = 0, nbytes: int | None = None) -> bytes:
        if nbytes is None:
            nbytes = self.nbytes - operator.index(offset) if isinstance(offset, int) else 0
        off, n = self._check_range(offset, nbytes, "read")
        with self.device._lock:
            self.device._check_open()
            self._pull()
            return self._host[off : off + n].tobytes()

    def _pull(self) -> None:
        if self._device_newer:
            self.device._sync_to_host([self._kp])
            self._device_newer = False

    def numpy_words(self) -> np.ndarray:
        """A copy of the whole buffer as bytes (uint8)."""
        return np.frombuffer(self.read(), dtype=np.uint8).copy()


class Tensor:
    """A binding: the range of `buffer` starting at byte `offset`, laid out by `desc`."""

    def __init__(self, buffer: Buffer, desc: TensorDesc, offset: int = 0) -> None:
        if not isinstance(buffer, Buffer):
            raise invalid("buffer", f"must be a kompute_dml Buffer, got {type(buffer).__name__}")
        validate_desc(desc, "desc")
        if isinstance(offset, bool):
            raise invalid("offset", "must be an integer")
        try:
            offset = operator.index(offset)
        except TypeError:
            raise invalid("offset", f"must be an integer, got {type(offset).__name__}") from None
        check_binding_range(buffer, desc, offset, "tensor")
        self.buffer = buffer
        self.desc = desc
        self.offset = offset

    @property
    def device(self) -> Device:
        return self.buffer.device

    @property
    def data_type(self) -> DataType:
        return self.desc.data_type

    @property
    def shape(self) -> tuple[int, ...]:
        return self.desc.sizes

    def __repr__(self) -> str:
        d = self.desc
        return f"Tensor({d.data_type.name}, sizes={d.sizes}, strides={d.strides}, offset={self.offset})"

    def numpy(self) -> np.ndarray:
        """The elements, read through the strides, as a new array of shape desc.sizes."""
        d = self.desc
        span = calc_span_bytes(d)
        raw = np.frombuffer(self.buffer.read(self.offset, span), dtype=d.data_type.numpy_dtype)
        view = np.lib.stride_tricks.as_strided(
            raw, shape=d.sizes, strides=tuple(s * d.data_type.size for s in d.effective_strides), writeable=False
        )
        return np.array(view)

    def write_numpy(self, array: Any) -> None:
        """Write a packed tensor's elements (only valid for packed descs)."""
        d = self.desc
        if d.effective_strides != packed_strides(d.sizes):
            raise InvalidArgumentError("desc.strides: write_numpy needs a packed tensor")
        arr = np.ascontiguousarray(array, dtype=d.data_type.numpy_dtype).reshape(d.sizes)
        self.buffer.write(arr, self.offset)


def calc_span_bytes(desc: TensorDesc) -> int:
    """Bytes from element 0 to the end of the last element (no rounding)."""
    last = sum((s - 1) * st for s, st in zip(desc.sizes, desc.effective_strides))
    return (last + 1) * desc.data_type.size


def check_binding_range(buffer: Buffer, desc: TensorDesc, offset: int, field: str) -> None:
    if offset < 0:
        raise invalid(f"{field}.offset", f"must not be negative, got {offset}")
    if offset % MINIMUM_BUFFER_TENSOR_ALIGNMENT:
        raise invalid(f"{field}.offset", f"must be a multiple of 16 bytes, got {offset}")
    align = desc.guaranteed_base_offset_alignment
    if align and offset % align:
        raise invalid(f"{field}.offset", f"must be a multiple of guaranteed_base_offset_alignment ({align}), got {offset}")
    if offset + desc.byte_size > buffer.nbytes:
        raise invalid(
            f"{field}.buffer",
            f"offset {offset} + total_tensor_size_in_bytes {desc.byte_size} exceeds the buffer's {buffer.nbytes} bytes",
        )


def packed_desc_for(array: np.ndarray) -> TensorDesc:
    dt = DataType.from_numpy(array.dtype)
    sizes = tuple(array.shape) if array.ndim else (1,)
    if math.prod(sizes) == 0:
        raise invalid("array.shape", f"DirectML tensors have no empty dimensions, got {array.shape}")
    return TensorDesc(dt, sizes)


__all__ = ["Buffer", "DMLError", "OutOfMemoryError", "Tensor"]
