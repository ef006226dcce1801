"""What a compiled operator hands the runtime: shader dispatches and transfer commands,
described independently of the buffers they will be bound to (no kp here)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.ints import cdiv, is_int_tuple


@dataclass(frozen=True)
class DispatchPlan:
    """One shader dispatch of a compiled operator, independent of the bound buffers.

    `bindings[i]` is the index, in the operator's flat binding list (inputs, outputs, then
    the operator's constants), of the tensor bound at shader binding i (None binds the
    device's dummy buffer).
    `offset_slots` are (push-constant word, binding list index, unit in bytes): at encode
    time that tensor's byte offset divided by the unit is added to the packed word (0 for a
    plan over whole tensors; a plan over part of a tensor, DML_JOIN's, packs the part's start in
    units there); an absent tensor leaves the packed word.
    """

    variant: str
    bindings: tuple[int | None, ...]
    push: tuple[int, ...]
    groups: tuple[int, int, int]
    writes: tuple[int, ...]
    offset_slots: tuple[tuple[int, int, int], ...] = ()
    spec: tuple[int, ...] = ()  # specialization constants (uint32 words, constant_id 0, 1, ...)
    # (binding list index, byte delta, byte span): this dispatch touches only the bytes
    # [offset + delta, offset + delta + span) of that tensor (a plan over part of a value larger
    # than maxStorageBufferRange: ops/split_range.py). Where the tensor's buffer is larger than
    # maxStorageBufferRange, encode.py binds it as a window from there; a tensor without an
    # entry is taken whole (the operator checked at compile that it fits one window).
    windows: tuple[tuple[int, int, int], ...] = ()

    # What encoding a plan against new buffers reads, made once per plan (runtime/encode.py):
    # the push words as Python ints.
    @functools.cached_property
    def words(self) -> tuple[int, ...]:
        push = self.push  # PushBlock.pack's words are Python ints already
        return push if is_int_tuple(push) else tuple(int(v) for v in push)


@dataclass(frozen=True, eq=False)
class TransferPlan:
    """A transfer command on byte ranges of bound tensors' buffers, relative to the
    tensors' binding offsets: vkCmdCopyBuffer ("copy": `regions` rows are (src byte,
    dst byte, size); bindings (src, dst)) or vkCmdFillBuffer ("fill": rows are (dst byte,
    size), both multiples of 4; bindings (dst,); `value` is the 32-bit word written).

    Dense and row-contiguous copies, fills of zeros or of a repeated word: the DMA-style
    commands every Vulkan device has, and the fastest way to move bytes on lavapipe, whose
    compute shaders pay a per-lane bounds-checked loop for every buffer access."""

    kind: str
    bindings: tuple[int, ...]
    regions: np.ndarray
    writes: tuple[int, ...]
    value: int = 0

    @property
    def variant(self) -> str:
        return f"transfer:{self.kind}"

    @property
    def groups(self) -> tuple[int, int, int]:
        return (0, 0, 0)


Plan = DispatchPlan | TransferPlan


def binding_window(limits: Any) -> tuple[int, int]:
    """(maxStorageBufferRange, minStorageBufferOffsetAlignment) of a device's limits: the most
    bytes one storage-buffer binding covers, and the alignment of a binding's start. A buffer
    larger than the range is bound as windows of it (runtime/encode.py); an operator splits a
    value larger than a window over dispatches (ops/split_range.py)."""
    return int(limits["max_storage_buffer_range"]), max(16, int(limits.get("min_storage_buffer_offset_alignment") or 16))


def grid_for(invocations: int, local_size: int, max_count: int = 65535) -> tuple[int, int, int]:
    """Work-group grid covering `invocations`, folded into y beyond max_count groups."""
    groups = max(1, cdiv(invocations, local_size))
    if groups <= max_count:
        return (groups, 1, 1)
    gy = cdiv(groups, max_count)
    gx = cdiv(groups, gy)
    if gy > max_count:
        raise ValueError(f"{invocations} invocations exceed the dispatch grid")
    return (gx, gy, 1)
