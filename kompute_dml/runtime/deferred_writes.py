"""Writes to memory that no submission binds yet (a new buffer's contents, a model's constants:
Engine.write with settle=False), gathered in the staging slots and sent as one copy submission.

A write through staging is a submission and a wait of its own. A model's first run wrote its
weights, biases and operator tables that way, one each (over a hundred for ResNet-50, whose warm
first run on an H200 went from 0.210 to 0.112 s with this module and onnx_backend/file_weights.py:
benchmarks/RESULTS.md, cold_start). Here a write copies its bytes into the
current slot at once and adds a copy region; the regions go to the device in one submission,
without a wait, before the engine's next submission of any kind (Engine.submit's paths, fills,
reads, staging transfers: the queue then runs the copies first, and every submission starts with a
global barrier) or when the slot is full. A slot is refilled only after its copies completed.
Staging's own transfers first wait for every deferred copy (they reuse the slots)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import kp
import numpy as np

from .encode import global_barrier

if TYPE_CHECKING:
    from .memory import DeviceMemory
    from .staging import Staging


class DeferredWrites:
    """The deferred writes of one Engine's staging slots (callers hold the engine's lock)."""

    def __init__(self, staging: Staging, slots: int) -> None:
        self.staging = staging
        self.slot = 0  # the slot being filled
        self.used = 0  # its bytes taken, by copies submitted or not
        # per destination serial: its memory, kp tensor and (slot offset, offset, size) triples
        self.regions: dict[int, tuple[DeviceMemory, Any, list[int]]] = {}
        self.running: list[list[Any]] = [[] for _ in range(slots)]  # per slot: its submitted sequences
        self.idle: list[Any] = []  # sequences to record again
        self.submissions = 0  # (tests: how many submissions the writes took)

    def add(self, dst: DeviceMemory, offset: int, data: np.ndarray) -> None:
        """Bytes [offset, offset + len(data)) of `dst` <- `data` (contiguous uint8), copied now."""
        pos, n = 0, data.size
        while pos < n:
            bytes_, _ = self.staging._slot(self.slot)
            if self.used == bytes_.size:
                self.submit()
                self._next_slot()
                continue
            k = min(bytes_.size - self.used, n - pos)
            self.staging.copies.copy(bytes_[self.used : self.used + k], data[pos : pos + k])
            if dst.serial not in self.regions:  # (memory made later is waited for here, as a transfer would)
                self.regions[dst.serial] = (dst, dst.tensor, [])
            self.regions[dst.serial][2].extend((self.used, offset + pos, k))
            self.used += k
            pos += k

    def submit(self) -> None:
        """Start the gathered copies on the device (no wait)."""
        if not self.regions:
            return
        src = self.staging._slot(self.slot)[1].tensor
        seq = self.idle.pop() if self.idle else self.staging.manager.sequence()
        seq.record(global_barrier())  # after every earlier submission's access to the destinations
        for _, dst, triples in self.regions.values():
            seq.record(kp.OpCopyRegions(src, dst, triples))
        self.regions = {}
        self.running[self.slot].append(seq)
        self.submissions += 1
        self.staging._run(seq.kdml_submit)

    def settle(self) -> None:
        """Submit what is gathered and wait for every deferred copy."""
        self.submit()
        for s in range(len(self.running)):
            self._wait(s)
        self.used = 0

    def _next_slot(self) -> None:
        self.slot = (self.slot + 1) % len(self.running)
        self._wait(self.slot)
        self.used = 0

    def _wait(self, s: int) -> None:
        running, self.running[s] = self.running[s], []
        for i, seq in enumerate(running):
            try:
                self.staging._run(seq.kdml_wait)
            except BaseException:
                self.running[s] = running[i:]  # (a device loss: nothing is reused)
                raise
            seq.clear()  # holds no destination's buffer
            self.idle.append(seq)
