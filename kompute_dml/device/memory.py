"""Buffers (device memory, in whole 16-byte units) and Tensors (a desc laid over a buffer range).

A Buffer checks its arguments and holds a runtime DeviceMemory, which owns the kp side
(device-local words, the mapped staging copy, lazy coherence); all Vulkan work goes
through the device's Engine.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from ..core.dtypes import DataType
from ..core.errors import DMLError, InvalidArgumentError, OutOfMemoryError, invalid
from ..core.inputs import as_host_array, conform, is_python_data
from ..core.ints import as_int, cdiv
from ..core.tags import tag
from ..core.tensor_desc import MINIMUM_BUFFER_TENSOR_ALIGNMENT, TensorDesc, packed_strides, validate_desc

if TYPE_CHECKING:
    from ..runtime import DeviceMemory
    from .device import Device


def _as_bytes_view(data: object) -> memoryview:
    if isinstance(data, np.ndarray):
        if data.dtype.hasobject:
            raise invalid("data", "a numpy array of Python objects (dtype object) has no raw bytes to upload")
        return np.ascontiguousarray(data).reshape(-1).view(np.uint8).data
    if isinstance(data, (bytes, bytearray, memoryview)):
        return memoryview(data).cast("B")
    raise invalid("data", f"must be bytes, bytearray or a numpy array, got {type(data).__name__}")


def largest_buffer(limits: Mapping[str, Any]) -> int:
    """The largest buffer a device takes: whole 32-bit words within maxMemoryAllocationSize
    rounded down to 64 KiB (one allocation holds it, at the drivers' allocation granularity;
    NVIDIA: 4 GiB - 2 MiB), and within 4 GiB - 4 (sizes and element indices are 32-bit words).
    A buffer beyond maxStorageBufferRange is bound a window at a time (runtime/encode.py, kp
    patch level 14): the operators that split a value over dispatches take it
    (ops/split_range.py), the others refuse it (UnsupportedError); without
    maxMemoryAllocationSize (a Vulkan 1.0 device) the largest is maxStorageBufferRange."""
    alloc = limits.get("max_memory_allocation_size")
    if not alloc:
        return int(limits["max_storage_buffer_range"]) // 4 * 4
    return min(alloc - alloc % 65536, (1 << 32) - 4)


def buffer_words(nbytes: int, largest: int) -> int:
    """32-bit words allocated for a buffer of `nbytes`: whole 16-byte units (so that uvec4
    accesses never leave the allocation), or whole words where 16-byte units would pass the
    largest buffer (maxStorageBufferRange 4 GiB - 1: its last 16-byte unit)."""
    words16 = cdiv(nbytes, 16) * 4
    return words16 if words16 * 4 <= largest else cdiv(nbytes, 4)


_RANGE_RULE = "an integer (offset and size are integers)"


class Buffer:
    """A range of device memory, `nbytes` long (allocated in whole 16-byte units), zeroed;
    `zeroed=False` skips the fill: contents are undefined until written (for buffers whose
    every read byte is written first, e.g. the ONNX backend's plan buffers); with it,
    `later=True` makes the device memory on another thread while the caller goes on, the
    first use waiting for it (the ONNX plans: an H100 takes about 20 us per MiB)."""

    def __init__(self, device: Device, nbytes: int, *, zeroed: bool = True, later: bool = False) -> None:
        nbytes = as_int(nbytes, "nbytes")
        if nbytes < 1:
            raise invalid("nbytes", f"must be at least 1, got {nbytes}")
        largest = largest_buffer(device.limits)
        words = buffer_words(nbytes, largest)
        if words * 4 > largest:
            alloc = device.limits.get("max_memory_allocation_size")
            raise invalid(
                "nbytes",
                f"{nbytes} bytes take {words * 4} bytes of whole 32-bit words, beyond what one allocation holds "
                f"(maxMemoryAllocationSize {alloc} bytes, in 64 KiB units, or 4 GiB; maxStorageBufferRange "
                f"{device.limits['max_storage_buffer_range']} bytes where the device reports no allocation size); "
                f"the largest buffer on this device is {largest} bytes",
            )
        self.device = device
        self.nbytes = nbytes
        # The runtime side; released (and returned to the memory budget) with this Buffer.
        self.memory: DeviceMemory = device.engine.allocate(words, zeroed, later)
        self.serial = self.memory.serial

    def __repr__(self) -> str:
        return f"Buffer(nbytes={self.nbytes}, serial={self.serial})"

    def _check_range(self, offset: object, nbytes: object, field: str) -> tuple[int, int]:
        off, n = as_int(offset, field, _RANGE_RULE), as_int(nbytes, field, _RANGE_RULE)
        if off < 0 or n < 0:
            raise invalid(field, f"offset ({off}) and size ({n}) must not be negative")
        if off + n > self.nbytes:
            raise invalid(field, f"range [{off}, {off + n}) runs past the buffer's end ({self.nbytes} bytes)")
        return off, n

    def write(self, data: object, offset: int = 0) -> None:
        view = _as_bytes_view(data)
        off, n = self._check_range(offset, view.nbytes, "data")
        if n:
            # a contiguous numpy array goes as a view of itself, so memory the device reads
            # directly (Device.host_array) is recognised by the runtime
            raw = data.reshape(-1).view(np.uint8) if isinstance(data, np.ndarray) and data.flags.c_contiguous \
                else np.frombuffer(view, dtype=np.uint8)
            self.memory.write(off, raw)

    def read(self, offset: int = 0, nbytes: int | None = None) -> bytes:
        if nbytes is None:  # to the end
            nbytes = self.nbytes - as_int(offset, "read", _RANGE_RULE)
        off, n = self._check_range(offset, nbytes, "read")
        return self.memory.read(off, n)

    def read_into(self, out: np.ndarray, offset: int = 0) -> None:
        """Fill `out` (a writable, C-contiguous numpy array) with its nbytes bytes from
        `offset` on: a download without allocating (into `Device.host_array` memory, the
        device writes the array itself)."""
        if not isinstance(out, np.ndarray) or not out.flags.c_contiguous or not out.flags.writeable:
            raise invalid("out", "must be a writable C-contiguous numpy array")
        off, n = self._check_range(offset, out.nbytes, "out")
        if n:
            self.memory.read_into(off, out)


# Data up to this size whose last 16-byte unit is partial goes up zero-padded in one transfer;
# larger data takes a fill submission first (the allocation's tail must be zero).
_PAD_COPY_BYTES = 1 << 20


def buffer_with(device: Device, data: np.ndarray, nbytes: int | None = None) -> Buffer:
    """A new buffer of `nbytes` (default: the data's size) holding `data` (contiguous) at its
    start, every other byte of its allocation zero: one transfer and no fill submission where
    the data fills the allocation or the allocation is small (a fill is a submission and a
    wait: ~0.2 ms on the H100, many per plan of small constants)."""
    _as_bytes_view(data)  # the documented error for what is not plain data
    raw = data.reshape(-1).view(np.uint8)
    n = raw.nbytes
    size = max(n, nbytes or 0)
    alloc = 4 * buffer_words(size, largest_buffer(device.limits)) if size >= 1 else 0
    pad = alloc != n and alloc <= _PAD_COPY_BYTES
    buf = Buffer(device, size, zeroed=alloc != n and not pad)
    if pad:
        padded = np.zeros(alloc, np.uint8)
        padded[:n] = raw
        raw = padded
    if raw.nbytes:  # nothing binds the new buffer yet: the copy goes with the next submission (deferred_writes.py)
        buf.memory.write(0, raw, settle=False)
    return buf


class Tensor:
    """A binding: the range of `buffer` starting at byte `offset`, laid out by `desc`.

    Array-like (README.md, "Tensors as arrays"): dtype, shape, ndim, size, nbytes, device,
    len(), numpy's __array__ (a download), a repr with the values, basic indexing (a view or a
    copy: kompute_dml/device/views.py), strict write_numpy.

    Immutable (make a new Tensor for another range). `binding_key` names what it binds
    (buffer serial, offset, the desc's core.tags.tag): a compiled operator remembers the bindings whose
    checks passed by these keys, and the checks depend on nothing else (ops/base.py)."""

    __slots__ = ("__weakref__", "binding_key", "buffer", "desc", "offset")
    buffer: Buffer
    desc: TensorDesc
    offset: int
    binding_key: tuple[int, int, int]

    def __init__(self, buffer: Buffer, desc: TensorDesc, offset: int = 0) -> None:
        if not isinstance(buffer, Buffer):
            raise invalid("buffer", f"must be a kompute_dml Buffer, got {type(buffer).__name__}")
        validate_desc(desc, "desc")
        offset = as_int(offset, "offset")
        check_binding_range(buffer, desc, offset, "tensor")
        _fill(self, buffer, desc, offset)

    @classmethod
    def whole(cls, buffer: Buffer, desc: TensorDesc) -> Tensor:
        """The library's own tensor over all of a buffer it has just made for a valid `desc`
        (buffer.nbytes == desc.byte_size): nothing left to check (the functional helpers'
        outputs, made on every call)."""
        assert buffer.nbytes == desc.byte_size and desc._valid
        t = object.__new__(cls)
        _fill(t, buffer, desc, 0)
        return t

    @classmethod
    def scratch(cls, device: Device, desc: TensorDesc) -> Tensor:
        """An operator's working memory (split-K's partial sums and the like): a new buffer for `desc`,
        not zeroed (its first dispatch writes every word a later one reads), made on another thread
        while the caller goes on (Buffer's `later`)."""
        return cls.whole(Buffer(device, desc.byte_size, zeroed=False, later=True), desc)

    @classmethod
    def trusted(cls, buffer: Buffer, desc: TensorDesc, offset: int) -> Tensor:
        """The library's own tensor for a valid `desc` whose range lies within one already
        checked (a view of a caller's binding through a desc built from it); the operator
        checks the binding anyway the first time it sees it (ops/base.py)."""
        t = object.__new__(cls)
        _fill(t, buffer, desc, offset)
        return t

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"Tensor is immutable: make a new Tensor instead of setting {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"Tensor is immutable: {name!r} cannot be deleted")

    # ---- the array protocol (README.md, "Tensors as arrays") ----------------------
    @property
    def device(self) -> Device:
        return self.buffer.device

    @property
    def data_type(self) -> DataType:
        return self.desc.data_type

    @property
    def dtype(self) -> np.dtype:
        """The numpy dtype of the elements."""
        return self.desc.data_type.numpy_dtype

    @property
    def shape(self) -> tuple[int, ...]:
        return self.desc.sizes

    @property
    def ndim(self) -> int:
        return len(self.desc.sizes)

    @property
    def size(self) -> int:
        """The number of elements."""
        return math.prod(self.desc.sizes)

    @property
    def nbytes(self) -> int:
        """Bytes of the elements (size x itemsize; not the bound range, desc.byte_size)."""
        return self.size * self.desc.data_type.size

    def __len__(self) -> int:
        return self.desc.sizes[0]

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        """A download (numpy's array protocol). The elements live on the device, so there is
        no array to share: copy=False raises ValueError, as numpy 2 asks."""
        if copy is False:
            raise ValueError("a kompute_dml Tensor cannot be viewed without a copy: its elements are on the device")
        arr = self.numpy()
        return arr if dtype is None else arr.astype(dtype, copy=False)

    def __getitem__(self, key: Any) -> Tensor:
        """Basic indexing (integers, slices with steps, ..., None): a view of the same buffer
        where DirectML can bind one, else a copy (kompute_dml/device/views.py says which)."""
        if _slicer is None:  # kompute_dml/device/views.py registers itself when kompute_dml is imported
            raise DMLError("kompute_dml.device.views is not loaded (import kompute_dml)")
        return _slicer(self, key)

    def __repr__(self) -> str:
        d = self.desc
        extra = "" if d.strides is None else f", strides={d.strides}"
        extra += f", offset={self.offset}" if self.offset else ""
        dev = self.buffer.device
        where = f"device={dev.name!r}"
        try:
            values = np.array2string(self.numpy(), separator=", ", threshold=64, edgeitems=3, prefix="Tensor(")
        except DMLError as e:  # a closed device: say so, a repr must not raise
            values = f"<unreadable: {e}>"
        return f"Tensor({values}, dtype={self.dtype}, shape={self.shape}{extra}, {where})"

    def numpy(self, out: np.ndarray | None = None) -> np.ndarray:
        """The elements, read through the strides, as a new array of shape desc.sizes, or
        into `out` (a writable C-contiguous array of that shape and type: with one from
        Device.host_array, a packed tensor is written there by the device itself)."""
        d = self.desc
        span = calc_span_bytes(d)
        if out is not None and (not isinstance(out, np.ndarray) or out.shape != d.sizes
                                or out.dtype != d.data_type.numpy_dtype or not out.flags.c_contiguous
                                or not out.flags.writeable):
            raise invalid("out", f"must be a writable C-contiguous {d.data_type.numpy_dtype} array of shape {d.sizes}")
        if d.effective_strides == packed_strides(d.sizes):  # straight into the result
            if out is None:
                out = np.empty(d.sizes, dtype=d.data_type.numpy_dtype)
            self.buffer.memory.read_into(self.offset, out)
            return out
        if out is not None:
            np.copyto(out, self.numpy())
            return out
        raw = np.empty(span // d.data_type.size, dtype=d.data_type.numpy_dtype)
        self.buffer.memory.read_into(self.offset, raw)
        view = np.lib.stride_tricks.as_strided(
            raw, shape=d.sizes, strides=tuple(s * d.data_type.size for s in d.effective_strides), writeable=False
        )
        return np.array(view)

    def write_numpy(self, array: Any, *, cast: bool = False) -> None:
        """Write every element of a packed tensor from `array` (any input kompute_dml.core.inputs
        takes: numpy, Python numbers and lists, CPU __array__ / __dlpack__ objects).

        Strict, like CuPy's ndarray.set: the shape must be the tensor's (a scalar fills a
        one-element tensor) and the element type the tensor's, or a value-preserving
        conversion (kompute_dml/core/inputs.py: numpy's 'safe' casts, Python values that fit);
        anything else raises InvalidArgumentError before a byte is written. `cast=True`
        converts the type whatever the values (numpy's astype: wraps, rounds, overflows)."""
        d = self.desc
        if d.effective_strides != packed_strides(d.sizes):
            raise InvalidArgumentError("desc.strides: write_numpy needs a packed tensor")
        python = is_python_data(array)  # numpy's guess at its type is checked by conform
        arr = as_host_array(array, "array", dml=not python)
        shape = tuple(arr.shape)
        if shape != d.sizes and not (shape == () and d.sizes == (1,)):
            rule = "size" if math.prod(shape) != math.prod(d.sizes) else "shape"
            raise invalid("array", f"has shape {shape}, the tensor {d.sizes}: another {rule} (write_numpy does "
                                   "not reshape; reshape the array first)")
        arr = conform(arr, d.data_type.numpy_dtype, "array", python=python, cast=cast)
        self.buffer.write(np.ascontiguousarray(arr), self.offset)


# Basic indexing (Tensor.__getitem__) lives in kompute_dml/device/views.py, which needs the copy
# operator; the operators sit above this module, so views.py registers itself here.
_slicer: Callable[[Tensor, Any], Tensor] | None = None


def register_slicer(fn: Callable[[Tensor, Any], Tensor]) -> None:
    global _slicer
    _slicer = fn


# Tensor.__setattr__ refuses every assignment: its slots are set through their descriptors
# (a helper's output Tensor is made on every call: about half the cost of object.__setattr__)
_SET_BUFFER, _SET_DESC, _SET_OFFSET, _SET_KEY = (Tensor.__dict__[n].__set__ for n in ("buffer", "desc", "offset", "binding_key"))


def _fill(t: Tensor, buffer: Buffer, desc: TensorDesc, offset: int) -> None:
    _SET_BUFFER(t, buffer)
    _SET_DESC(t, desc)
    _SET_OFFSET(t, offset)
    _SET_KEY(t, (buffer.serial, offset, tag(desc)))


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
