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
of the chunk (Engine.write's `settle`): the device orders the copy after them (every submission
starts with a global barrier) and nothing reads the range before the copy.

While a whole-graph plan records (`deferred`), the writes wait and go together, one transfer per
chunk, where the plan lets the device read them (PlanContext.write_staged: before each flush of the
recording, and at its end): a transfer each was a fence wait each, 146 of them, about a third of
EfficientNet-B0's warm first run on the H200's host (`benchmarks/cold_start.py`)."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
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
        self.pending: list[tuple[kdml.Buffer, int, np.ndarray]] | None = None  # (chunk, offset, bytes) held back

    @contextlib.contextmanager
    def deferred(self) -> Iterator[None]:
        """Writes held back inside (`flush` writes them), and written at the end, also on failure:
        a range handed out is always written before anything else may bind it."""
        self.pending = []
        try:
            yield
        finally:
            try:
                self.flush()
            finally:
                self.pending = None

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
        if self.pending is None:
            self.chunk.memory.write(offset, raw, settle=False)
        else:
            self.pending.append((self.chunk, offset, raw))
        self.used = offset + size
        self.left = max(0, self.left - size)
        return kdml.Tensor(self.chunk, desc, offset)

    def flush(self) -> None:
        """Write the ranges held back: per chunk one transfer of the span they fill (placed in order,
        so no range of another constant lies inside; the alignment gaps, which nothing reads, zeros)."""
        pending, i = self.pending, 0
        if not pending:
            return
        self.pending = []
        while i < len(pending):
            chunk, lo = pending[i][:2]
            j = i
            while j < len(pending) and pending[j][0] is chunk:
                j += 1
            data = np.zeros(pending[j - 1][1] + pending[j - 1][2].size - lo, np.uint8)
            for _, at, raw in pending[i:j]:
                data[at - lo:at - lo + raw.size] = raw
            chunk.memory.write(lo, data, settle=False)
            i = j


def expected_bytes(constants: dict[str, Any]) -> int:
    """The bytes of a model's initializers (TensorProtos), as stored (4 per element of a type numpy lacks)."""
    total = 0
    for t in constants.values():
        dt = _np_dtype_of_onnx(t.data_type)
        total += math.prod(int(d) for d in t.dims) * (dt.itemsize if dt is not None else 4)
    return total
