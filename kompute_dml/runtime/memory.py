"""The kp side of a buffer: device memory as 32-bit words, and nothing on the host.

Every data type travels as raw 32-bit words, so no optional Vulkan feature is needed to
move bytes. A DeviceMemory is one kp storage tensor (device-local memory without a staging
copy, kp patch level 8); reads and writes move exactly the bytes asked for, through the
engine's staging slots (runtime/staging.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..core.errors import DeviceError, DMLError, OutOfMemoryError

if TYPE_CHECKING:
    from .engine import Engine
    from .staging import HostMemory


def allocation_error(e: BaseException, nbytes: int) -> DMLError:
    """What a failed allocation of `nbytes` raises: kp's C++ exceptions (RuntimeError), a fill's
    DeviceError or MemoryError, as OutOfMemoryError where memory ran out, else DeviceError."""
    msg = str(e)
    if isinstance(e, MemoryError):
        return OutOfMemoryError(f"could not allocate {nbytes} bytes: {msg}")
    if "OutOfDeviceMemory" in msg or "OutOfHostMemory" in msg or "memory" in msg.lower():
        return OutOfMemoryError(f"could not allocate {nbytes} bytes of device memory: {msg}")
    return DeviceError(f"buffer allocation failed: {msg}")


class DeviceMemory:
    """`words` 32-bit words on one Engine's device; `serial` is unique in the process.
    `pending`: memory still being made on a thread of kp's (Engine.allocate's `later`), whose
    first use waits for it."""

    __slots__ = ("__weakref__", "_pending", "_tensor", "engine", "serial", "words")

    def __init__(self, engine: Engine, tensor: Any, words: int, serial: int, pending: Any = None) -> None:
        self.engine = engine
        self._tensor = tensor  # the kp storage tensor (freed with its last reference)
        self._pending = pending  # kp.KdmlPendingStorage, until the tensor is taken from it
        self.words = words
        self.serial = serial

    @property
    def tensor(self) -> Any:
        """The kp storage tensor; memory made later is waited for here, at its first use (encoding
        an execution that binds it, a transfer), which raises its failure (allocation_error)."""
        return self._tensor if self._tensor is not None else self._made()

    @property
    def ready(self) -> bool:
        """Whether the memory exists (its first use will not wait)."""
        return self._tensor is not None or bool(self._pending.ready())

    def _made(self) -> Any:
        try:
            self._tensor = self._pending.get()  # the GIL released while it waits
        except (MemoryError, RuntimeError) as e:
            raise allocation_error(e, self.words * 4) from e
        self._pending = None
        return self._tensor

    def __repr__(self) -> str:
        return f"DeviceMemory(words={self.words}, serial={self.serial})"

    def write(self, offset: int, data: np.ndarray, settle: bool = True) -> None:
        """Copy `data` (uint8) to bytes [offset, offset + len) of the memory (Engine.write)."""
        self.engine.write(self, offset, np.ascontiguousarray(data).reshape(-1), settle)

    def read_into(self, offset: int, out: np.ndarray) -> None:
        """Fill `out` (a writable, contiguous array) with the bytes from `offset` on."""
        flat = out.reshape(-1).view(np.uint8)
        self.engine.read_into(self, offset, flat)

    def read(self, offset: int, nbytes: int) -> bytes:
        out = np.empty(nbytes, dtype=np.uint8)
        if nbytes:
            self.read_into(offset, out)
        return out.tobytes()


class HostRange:
    """Bytes [offset, offset + nbytes) of host memory, bound to a recorded transfer like a
    tensor (encode.py reads `.buffer.memory` and `.offset`): Recording.copy_in / copy_out."""

    __slots__ = ("memory", "nbytes", "offset")

    def __init__(self, memory: HostMemory, offset: int, nbytes: int) -> None:
        self.memory, self.offset, self.nbytes = memory, offset, nbytes

    @property
    def buffer(self) -> HostRange:
        return self
