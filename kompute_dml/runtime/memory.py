"""The kp side of a buffer: device memory as 32-bit words, and nothing on the host.

Every data type travels as raw 32-bit words, so no optional Vulkan feature is needed to
move bytes. A DeviceMemory is one kp storage tensor (device-local memory without a staging
copy, kp patch level 8); reads and writes move exactly the bytes asked for, through the
engine's staging slots (runtime/staging.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from .engine import Engine
    from .staging import HostMemory


class DeviceMemory:
    """`words` 32-bit words on one Engine's device; `serial` is unique in the process."""

    __slots__ = ("__weakref__", "engine", "serial", "tensor", "words")

    def __init__(self, engine: Engine, tensor: Any, words: int, serial: int) -> None:
        self.engine = engine
        self.tensor = tensor  # the kp storage tensor (freed with its last reference)
        self.words = words
        self.serial = serial

    def __repr__(self) -> str:
        return f"DeviceMemory(words={self.words}, serial={self.serial})"

    def write(self, offset: int, data: np.ndarray) -> None:
        """Copy `data` (uint8) to bytes [offset, offset + len) of the memory."""
        self.engine.write(self, offset, np.ascontiguousarray(data).reshape(-1))

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
