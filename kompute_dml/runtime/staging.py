"""Transfers between host memory and device buffers, by byte range, through staging.

Device buffers are device memory only (kp storage tensors: no host copy). A transfer of k
bytes moves exactly those bytes: an upload copies them into a host-visible staging slot and
records one vkCmdCopyBuffer into the destination range; a download copies the range into a
slot and from there into the caller's array. Large transfers go in chunks of CHUNK_BYTES
over SLOTS slots, so the CPU fills (or drains) one slot while the device copies another.

The staging memory is held for the Engine's life, allocated on first use, SLOTS x
CHUNK_BYTES (16 MiB) at most; it is host-cached where the device offers such memory (kp
patch level 8), so reading it back runs at memory speed.

Host arrays the user asked the device for (`Device.host_array`, host-visible memory the
device reads and writes directly) skip the staging copy: the transfer commands copy between
that memory and the buffer.
"""

from __future__ import annotations

import collections
import os
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import kp
import numpy as np

from .deferred_writes import DeferredWrites
from .encode import ACCESS_HOST_READ, ACCESS_TRANSFER_WRITE, STAGE_HOST, STAGE_TRANSFER, global_barrier

if TYPE_CHECKING:
    from .memory import DeviceMemory

CHUNK_BYTES = 8 << 20
SLOTS = 2
RECORDED = 128  # recorded slot transfers kept for resubmission (Staging._sequence)
# Host copies of at least PARALLEL_BYTES are split over COPY_THREADS threads (numpy releases
# the GIL while it copies): one core's memcpy is below what PCIe moves. On the H100's host
# (benchmarks/RESULTS.md, the transfers section of `kompute-dml bench`) a 64 MiB upload went
# from 7.45 GB/s with one thread to 18.9-20.2 with four. Half the cores at most, so a CPU
# Vulkan device (lavapipe, whose queue thread does the device side of every copy) keeps the
# other half. Below 2 MiB one thread is faster: waking the pool costs more than it saves
# (H100 host, `benchmarks/run_breakdown.py --repeat 300`, a run's output copies with the pool /
# on one thread: BERT 256/3 8x128 (1 MiB) 268 / 98 us, MiniLM 8x128 (1.5 MiB) 282 / 117 us).
PARALLEL_BYTES = 2 << 20
COPY_THREADS = max(1, min(4, (os.cpu_count() or 1) // 2))


class CopyPool:
    """The threads that split one device's large host copies. Each Engine has its own, so that
    threads running models on several GPUs at once (issue 55) do not queue their large copies
    behind each other's in one process-wide pool, and a closed device leaves no threads. Its
    threads start at the first large copy and end with the pool (`close`) or the process."""

    def __init__(self, threads: int = COPY_THREADS) -> None:
        self.threads = threads
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    def copy(self, dst: np.ndarray, src: np.ndarray) -> None:
        """dst[:] = src (1-D uint8 arrays of one size), in parts of at least PARALLEL_BYTES over the
        pool's threads when large. (H100 host, `python -m benchmarks.copy_threads`, device call 247: a
        batch of 8 images, 4.8 MB, MobileNetV3-small's run 1.446 / 1.369 / 1.506 ms with the copies in 1 /
        2 / 4 parts, EfficientNet-B0's 2.548 / 2.547 / 2.696.)"""
        n = src.size
        parts = self.parts(n)
        if parts == 1:
            np.copyto(dst, src)
            return
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="kdml-copy")
            pool = self._pool
        step = -(-n // parts)
        rest = [pool.submit(np.copyto, dst[i : i + step], src[i : i + step]) for i in range(step, n, step)]
        np.copyto(dst[:step], src[:step])
        for f in rest:
            f.result()

    def parts(self, n: int) -> int:
        """How many parts a copy of n bytes is split into."""
        return max(1, min(self.threads, n // max(1, PARALLEL_BYTES)))

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)


_SHARED = CopyPool()  # for copies that belong to no device


def host_copy(dst: np.ndarray, src: np.ndarray, pool: CopyPool | None = None) -> None:
    """dst[:] = src (1-D uint8 arrays of one size) on `pool` (a device's; else the process's)."""
    (pool or _SHARED).copy(dst, src)


class HostMemory:
    """Host-visible memory of one device: a kp host tensor, mapped. `np.asarray(mem)` is
    its bytes as a uint8 array whose base is `mem` (so arrays made from it keep it alive,
    and `host_origin` finds it)."""

    __slots__ = ("__weakref__", "nbytes", "ptr", "serial", "tensor")

    def __init__(self, manager: Any, nbytes: int, serial: int = 0) -> None:
        words = max(1, -(-nbytes // 4))
        self.tensor = manager.tensor_t(np.zeros(words, dtype=np.uint32), kp.TensorTypes.host)
        self.nbytes = words * 4
        self.ptr: int = self.tensor.kdml_bytes().__array_interface__["data"][0]
        self.serial = serial  # unique with the DeviceMemory serials (a recorded transfer's hazards)

    @property
    def __array_interface__(self) -> dict[str, Any]:
        return {"shape": (self.nbytes,), "typestr": "|u1", "data": (self.ptr, False), "version": 3}


def host_origin(data: np.ndarray, owners: Mapping[int, HostMemory]) -> tuple[HostMemory, int] | None:
    """(host memory, byte offset) where `data` (contiguous) lies inside one of `owners`
    (keyed by their ids), else None."""
    base: Any = data
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    mem = owners.get(id(base))
    if mem is None or mem is not base or not data.flags.c_contiguous:
        return None
    start = data.__array_interface__["data"][0] - mem.ptr
    if start < 0 or start + data.nbytes > mem.nbytes:
        return None
    return mem, start


class Staging:
    """The staging slots of one Engine, and the chunked transfers through them. Callers
    hold the engine's lock.

    A slot transfer's commands (a barrier, the copy) are recorded once per (direction, slot,
    buffer, offset, size) and kept, the last RECORDED of them: re-recording a command buffer
    cost about 94 us a transfer on an H100's host (`benchmarks/minilm_profile.py at 16a7ab2`: staging
    `_submit`), a resubmission records nothing; a model's runs move the same
    ranges every time. Entries binding a released buffer are dropped (`forget`). A range's
    first transfer goes through its slot's one re-recorded sequence instead, its own is
    recorded at the second: most ranges are moved once (a plan's constants), and the first
    submission of a new command buffer cost about 0.3 ms on the H100 (benchmarks/RESULTS.md,
    first_call.py: own run 1 305.0 us against a re-recorded run's 34.2)."""

    def __init__(self, manager: Any, run: Callable[[Any], None]) -> None:
        self.manager = manager
        self._run = run  # runs a kp call that waits, its failure as DeviceError
        self._slots: list[tuple[np.ndarray, HostMemory]] = []  # (mapped bytes, memory)
        self._recorded: collections.OrderedDict[tuple[Any, ...], Any] = collections.OrderedDict()
        self._once: list[Any] = []  # per slot: the sequence of first transfers, re-recorded for each
        self._seen: collections.OrderedDict[tuple[Any, ...], None] = collections.OrderedDict()
        self.copies = CopyPool()  # this device's large host copies
        self.deferred = DeferredWrites(self, SLOTS)  # writes waiting for the next submission

    @property
    def held_bytes(self) -> int:
        return sum(mem.nbytes for _, mem in self._slots)

    def _slot(self, i: int) -> tuple[np.ndarray, HostMemory]:
        while len(self._slots) <= i:
            mem = HostMemory(self.manager, CHUNK_BYTES)
            self._slots.append((np.asarray(mem), mem))
        if self._slots[i][1].nbytes < CHUNK_BYTES:  # made while the chunk was smaller (tests set it)
            mem = HostMemory(self.manager, CHUNK_BYTES)
            self._slots[i] = (np.asarray(mem), mem)
            for key in [k for k in self._recorded if k[1] == i]:  # they copy from the old slot
                del self._recorded[key]
        return self._slots[i]

    def forget(self, serial: int) -> None:
        """Drop the recorded transfers of a released buffer or host memory (they hold its kp
        tensor)."""
        for key in [k for k in self._recorded if serial in k[2]]:
            del self._recorded[key]

    def _sequence(self, key: tuple[Any, ...], ops: Callable[[], list[Any]]) -> Any:
        seq = self._recorded.get(key)
        if seq is not None:
            self._recorded.move_to_end(key)
            return seq
        if key not in self._seen:  # a first transfer: the slot's shared sequence (idle: its waits)
            self._seen[key] = None
            while len(self._seen) > 4 * RECORDED:
                self._seen.popitem(last=False)
            while len(self._once) <= key[1]:
                self._once.append(self.manager.sequence())
            seq = self._once[key[1]]
            seq.clear()
            seq.record(global_barrier())
            for op in ops():
                seq.record(op)
            return seq
        seq = self.manager.sequence()
        seq.record(global_barrier())  # after every earlier submission's access to the buffer
        for op in ops():
            seq.record(op)
        self._recorded[key] = seq
        while len(self._recorded) > RECORDED:
            self._recorded.popitem(last=False)
        return seq

    def _direct_copy(self, key: tuple[Any, ...], ops: Callable[[], list[Any]]) -> None:
        """A transfer between the user's host memory and a buffer, recorded once per range
        like a slot's (its first through the shared sequence of index SLOTS), so a repeated
        transfer from or into `Device.host_array` re-records nothing (see the class docstring)."""
        seq = self._sequence(key, ops)
        seq.kdml_submit()
        try:
            self._run(seq.kdml_wait)
        finally:
            if len(self._once) > SLOTS and seq is self._once[SLOTS]:  # keeps no buffer alive
                seq.clear()

    def upload(self, dst: DeviceMemory, offset: int, data: np.ndarray, direct: tuple[HostMemory, int] | None) -> None:
        """Write `data` (contiguous uint8) to bytes [offset, offset + len) of `dst`."""
        self.deferred.settle()
        if direct is not None:  # the device reads the user's host array itself
            mem, start = direct
            self._direct_copy(("up", SLOTS, (dst.serial, mem.serial), start, offset, data.size),
                              lambda: [kp.OpCopyRegions(mem.tensor, dst.tensor, [start, offset, data.size])])
            return

        def fill(s: int, pos: int, k: int) -> Any:
            slot, mem = self._slot(s)
            self.copies.copy(slot[:k], data[pos : pos + k])
            return self._sequence(("up", s, (dst.serial,), offset + pos, k),
                                  lambda: [kp.OpCopyRegions(mem.tensor, dst.tensor, [0, offset + pos, k])])

        self._chunked(data.size, fill, None)

    def download(self, src: DeviceMemory, offset: int, out: np.ndarray, direct: tuple[HostMemory, int] | None) -> None:
        """Read bytes [offset, offset + len(out)) of `src` into `out` (contiguous uint8)."""
        self.deferred.settle()
        def to_host() -> Any:
            return kp.OpGlobalBarrier(ACCESS_TRANSFER_WRITE, ACCESS_HOST_READ, STAGE_TRANSFER, STAGE_HOST)

        if direct is not None:
            mem, start = direct
            self._direct_copy(("down", SLOTS, (src.serial, mem.serial), start, offset, out.size),
                              lambda: [kp.OpCopyRegions(src.tensor, mem.tensor, [offset, start, out.size]), to_host()])
            return

        def copy(s: int, pos: int, k: int) -> Any:
            mem = self._slot(s)[1]
            return self._sequence(("down", s, (src.serial,), offset + pos, k),
                                  lambda: [kp.OpCopyRegions(src.tensor, mem.tensor, [offset + pos, 0, k]), to_host()])

        def drain(s: int, pos: int, k: int) -> None:
            self.copies.copy(out[pos : pos + k], self._slots[s][0][:k])

        self._chunked(out.size, copy, drain)

    def _chunked(self, n: int, before: Callable[[int, int, int], Any],
                 after: Callable[[int, int, int], None] | None) -> None:
        """Move n bytes chunk by chunk over the slots: `before(slot, pos, k)` fills the slot
        (uploads) and returns the recorded sequence to submit; `after` drains the slot once
        it completed (downloads)."""
        pending: list[tuple[Any, int, int] | None] = [None] * SLOTS  # per slot: (sequence, pos, k)
        pos = chunk = 0
        try:
            while pos < n:
                s = chunk % SLOTS
                self._finish(pending, s, after)
                k = min(CHUNK_BYTES, n - pos)
                seq = before(s, pos, k)
                seq.kdml_submit()
                pending[s] = (seq, pos, k)
                pos += k
                chunk += 1
        finally:  # never leave a copy in flight into or out of a slot
            for s in range(SLOTS):
                self._finish(pending, s, after)

    def _finish(self, pending: list[tuple[Any, int, int] | None], s: int,
                after: Callable[[int, int, int], None] | None) -> None:
        entry = pending[s]
        if entry is None:
            return
        pending[s] = None
        seq, pos, k = entry
        self._run(seq.kdml_wait)
        if any(seq is once for once in self._once):
            seq.clear()  # keeps no buffer of a first transfer alive
        if after is not None:
            after(s, pos, k)
