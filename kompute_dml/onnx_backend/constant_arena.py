"""A prepared model's constants on the device, packed into a few large buffers.

A model's first run uploads the constants its operators read (weights, biases, tables; each
layout once: transfers.ValueTransfers._constant_on_device). A buffer each cost a Vulkan
allocation each: on the H100 host about 0.3-0.4 ms, a fifth of ResNet-18's warm first run (62
weights). Here they share chunks instead: a constant takes the next ALIGN-aligned range of the
current chunk, padded with zeros to whole 16-byte units (what a buffer's own allocation gives an
operator that reads whole words or vectors); a chunk is made for the rest of the model's
constants (their bytes, between 1 MiB and CHUNK_BYTES, within the device's largest buffer),
and a constant of more than a quarter of that keeps a buffer of its own.

A range is written once, before any plan binds it (its constant is uploaded where a plan first
asks for it), so its write does not wait for the submissions in flight that read other ranges
of the chunk (Engine.write's `settle`): it is deferred to the engine's next submission
(runtime/deferred_writes.py), the device orders the copy after them (every submission starts
with a global barrier) and nothing reads the range before the copy."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

import kompute_dml as kdml
from kompute_dml.device.memory import largest_buffer, packed_desc_for

from .graph import _np_dtype_of_onnx

CHUNK_BYTES = 32 << 20
MIN_CHUNK_BYTES = 1 << 20
ALIGN = 256  # past every device's minStorageBufferOffsetAlignment


class ConstantArena:
    """Chunks of one device; `expected` bytes: the model's constants, the first chunk's size."""

    def __init__(self, device: kdml.Device, expected: int) -> None:
        self.device = device
        self.left = expected  # bytes the model's constants may still take
        self.chunk: kdml.Buffer | None = None
        self.used = 0
        self.chunks = 0
        self.largest = min(CHUNK_BYTES, largest_buffer(device.limits), int(device.limits["max_storage_buffer_range"]))

    def tensor(self, arr: np.ndarray) -> kdml.Tensor:
        """A packed tensor of `arr` (contiguous) on the device."""
        desc = packed_desc_for(arr)
        raw = arr.reshape(-1).view(np.uint8)
        n = raw.nbytes
        size = -(-max(n, desc.byte_size) // 16) * 16  # (DirectML's sizes round to whole words)
        if size * 4 > self.largest:
            return self.device.tensor(arr)  # a buffer of its own
        offset = -(-self.used // ALIGN) * ALIGN
        if self.chunk is None or offset + size > self.chunk.nbytes:
            want = max(size, MIN_CHUNK_BYTES, min(self.left, self.largest))
            self.chunk = kdml.Buffer(self.device, min(want, self.largest), zeroed=False)
            self.chunks += 1
            offset = 0
        if size != n:
            padded = np.zeros(size, np.uint8)
            padded[:n] = raw
            raw = padded
        self.chunk.memory.write(offset, raw, settle=False)
        self.used = offset + size
        self.left = max(0, self.left - size)
        return kdml.Tensor(self.chunk, desc, offset)


def expected_bytes(constants: dict[str, Any]) -> int:
    """The bytes of a model's initializers (TensorProtos), as stored (4 per element of a type numpy lacks)."""
    total = 0
    for t in constants.values():
        dt = _np_dtype_of_onnx(t.data_type)
        total += math.prod(int(d) for d in t.dims) * (dt.itemsize if dt is not None else 4)
    return total
