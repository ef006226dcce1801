"""The kp side of a buffer: device memory as 32-bit words, and its mapped staging copy.

Every data type travels as raw 32-bit words, so no optional Vulkan feature is needed to
move bytes. One kp tensor of type `device` is device-local memory plus a host-visible
staging copy. The staging copy is kept coherent lazily: host writes go staging -> device
at once; after a submission writes the memory (`device_newer`), the next host read pulls
device -> staging first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from .engine import Engine


class DeviceMemory:
    """`words` 32-bit words on one Engine's device; `serial` is unique in the process."""

    __slots__ = ("__weakref__", "device_newer", "engine", "host", "serial", "tensor", "words")

    def __init__(self, engine: Engine, tensor: Any, words: int, serial: int) -> None:
        self.engine = engine
        self.tensor = tensor  # the kp tensor (freed with its last reference)
        self.words = words
        self.serial = serial
        # kp 0.9's data() returns an array with stride 0 (every element aliases the first),
        # so the mapping is re-strided over all of its words.
        raw = tensor.data()
        self.host = np.lib.stride_tricks.as_strided(raw, shape=(words,), strides=(4,)).view(np.uint8)
        self.device_newer = False  # a submission wrote it since the staging copy was filled

    def __repr__(self) -> str:
        return f"DeviceMemory(words={self.words}, serial={self.serial})"

    def write(self, offset: int, data: np.ndarray) -> None:
        """Copy `data` (uint8) to bytes [offset, offset + len) of the memory."""
        engine = self.engine
        with engine.lock:
            engine.check_open()  # the mapping is gone once the device is closed
            self._pull()
            self.host[offset : offset + data.size] = data
            engine.sync_to_device(self)

    def read(self, offset: int, nbytes: int) -> bytes:
        engine = self.engine
        with engine.lock:
            engine.check_open()
            self._pull()
            return self.host[offset : offset + nbytes].tobytes()

    def _pull(self) -> None:
        if self.device_newer:
            self.engine.sync_to_host(self)
            self.device_newer = False
