"""Engine: the one owner of a Device's execution (the kp Manager and everything made from it).

It holds the lock (kp is not thread-safe: every kp call happens under one re-entrant lock but the siblings' compiles, whose
registry kp locks, and the wait for a replayed run, made after the lock by the thread that submitted it: inflight.py),
allocation under the memory budget, the pipeline cache, the replay cache, the helpers' buffer pool, and submission.
Everything above it (memory.Buffer, ops/base.CompiledOperator, device.Device, recording.Recording) calls the public
methods here.

Submission has one path, for eager executions and recordings alike: a list of executions, each (plans, bound tensors),
under a key naming the operators, buffers and offsets. The first submission of a key encodes the plans (kp operations,
each with a descriptor set of its own) and caches them; its first run is recorded into a sequence shared by all first
runs, its second into a kp sequence of its own with its barriers, which every later one replays without encoding or
recording anything (runtime/replay.py).
"""

from __future__ import annotations

import collections
import contextlib
import gc
import itertools
import os
import threading
import weakref
from collections.abc import Hashable, Sequence
from typing import Any

import kp
import numpy as np

from ..core.errors import DeviceError, OutOfMemoryError
from .budget import MemoryBudget
from .capture import CaptureSlot
from .counters import engine_stats
from .disk_cache import DiskPipelineCache
from .encode import EncodeCache, Order, global_barrier
from .inflight import InFlight, Owned, Submission, finished
from .later import SPARE_WORDS, MadeLater
from .manager import create_manager
from .memory import DeviceMemory, HostRange, allocation_error
from .pipelines import Programs
from .plans import DispatchPlan, Plan
from .pool import BufferPool
from .profile import Profile
from .replay import FirstRuns, Heads, HostCopies, Replay
from .staging import HostMemory, Staging, host_origin

# One execution of an operator: its plans and the bound tensors (inputs then outputs; None
# where an optional tensor is absent).
Work = tuple[Sequence[Plan], Sequence[Any]]

REPLAY_CAPACITY = 256

_serials = itertools.count(1)


def _memories(work: Sequence[Work]) -> frozenset[int]:
    """The serials of the memories executions bind."""
    serials = set()
    for _plans, bound in work:
        for t in bound:
            if t is not None:
                serials.add(t.buffer.memory.serial)
    return frozenset(serials)


class Engine:
    """The kp Manager of one Vulkan physical device and everything that runs on it (`requested`
    restricts the optional capabilities enabled; None: all the device has)."""

    def __init__(self, index: int, requested: frozenset[str] | None, *, memory_budget: int, max_allocations: int,
                 host_memory: bool, device_name: str = "") -> None:
        self.lock = threading.RLock()
        try:
            self.manager = create_manager(index, requested)
        except Exception as e:  # kp raises plain RuntimeError
            raise DeviceError(f"could not create a Vulkan device on {device_name or index}: {e}") from e
        self.closed = False
        enabled: list[Any] = self.manager.kdml_enabled_features()
        self.capabilities = frozenset(str(n) for n in enabled)
        # (M, N, K, A, B, C, result (VkComponentTypeKHR), saturating, scope[, work-group invocations]) per shape
        ints = lambda got: tuple(tuple(int(v) for v in s) for s in got)  # noqa: E731
        self.cooperative_matrix_shapes: tuple[tuple[int, ...], ...] = ints(self.manager.kdml_cooperative_matrix_shapes())
        self.cooperative_matrix_flexible_shapes = ints(self.manager.kdml_cooperative_matrix_flexible_shapes())  # workgroup scope
        (self.cooperative_matrix2_limits,) = ints([self.manager.kdml_cooperative_matrix2_limits()])
        self.budget = MemoryBudget(memory_budget, max_allocations, host_memory)
        self.programs = Programs(self.manager, self.capabilities)
        self.encoded = EncodeCache()  # dispatches encoded for one submission, bound again by later ones
        # One pipeline cache per device, kept on disk between processes (KDML_CACHE_DIR)
        self.disk_cache = DiskPipelineCache.for_manager(self.manager)
        self.pool = BufferPool()
        self._misc_seq = self.manager.sequence()  # buffer fills
        self.staging = Staging(self.manager, self.guarded)
        self._host: weakref.WeakValueDictionary[int, HostMemory] = weakref.WeakValueDictionary()
        self.inflight = InFlight(self.guarded)
        self.first_runs = FirstRuns(self.manager, self.guarded)  # runtime/replay.py
        self.heads = Heads(self.manager, self.inflight)  # recordings' heads (start_head)
        self.sequences_created = 0  # kp sequences of cached submissions (their second runs)
        self.prepared_variants: set[Any] = set()  # pipelines made before first use (onnx_backend/device_graph.py)
        self._capture = CaptureSlot()  # Device.capture(): per thread, the Recording executions go into
        self.profile: Profile | None = None  # set while Device.profile() is open
        self.completion_word = False  # replays complete by a completion word where kp has them (DevicePolicy.completion)
        self._spin_cap_ns = 0  # adaptive waits (set_adaptive_spin): poll up to 2x the last run, at most this
        self.shared_first_runs = False  # first runs through the shared sequence (DevicePolicy.first_run), else their own
        self.pipeline_threads = 1  # new pipelines compiled at once (DevicePolicy.pipeline_threads)
        self._replays: collections.OrderedDict[Hashable, Replay] = collections.OrderedDict()
        self._live: weakref.WeakValueDictionary[int, DeviceMemory] = weakref.WeakValueDictionary()
        self.later = MadeLater()  # memory made on kp's thread, and the small spares (runtime/later.py)
        self.dummy = self.allocate(4)  # bound where an optional tensor is absent

    # ---- memory ------------------------------------------------------------------------
    def set_order(self, order: Order) -> None:  # submissions from now on in encode.levels or encode.program_order
        self.first_runs.order = self.heads.order = order

    def check_open(self) -> None:
        if self.closed:
            raise DeviceError("the device has been closed")

    def allocate(self, words: int, zeroed: bool = True, later: bool = False) -> DeviceMemory:
        """`words` zeroed 32-bit words of device memory (no host copy), under the budget; `zeroed=False` skips
        the fill (and its submission): contents undefined until written. `later` (unzeroed only): made on a
        thread of kp's, off the GIL, while the caller goes on; its first use waits for it and raises its failure."""
        with self.lock:
            self.check_open()
            if not zeroed and not later and words <= SPARE_WORDS:
                spare = self.later.spare(lambda: self._allocate(SPARE_WORDS, False, True))
                if spare is not None:
                    spare.words = words  # what the caller sees (the budget counts the whole spare)
                    return spare
            return self._allocate(words, zeroed, later)

    def _allocate(self, words: int, zeroed: bool, later: bool) -> DeviceMemory:
        nbytes = words * 4
        if not self.budget.fits(nbytes):  # pooled buffers, then what only a reference cycle still holds (a dropped
            self.pool.trim()  # model's plans: CPython collects cycles by object counts, never by device memory)
            gc.collect()
        self.budget.check(nbytes)
        try:
            if later and not zeroed:
                memory = DeviceMemory(self, None, words, next(_serials), self.manager.kdml_storage_later(words))
                self.later.started(memory)
            else:
                memory = DeviceMemory(self, self.manager.kdml_storage(words), words, next(_serials))
                if zeroed:
                    self._transfer_ops([kp.OpFillRegions(memory.tensor, [0, nbytes], 0)])
        except (MemoryError, RuntimeError) as e:  # kp's C++ exceptions, or the fill's DeviceError
            raise allocation_error(e, nbytes) from e
        self.budget.take(nbytes)
        self._live[memory.serial] = memory
        weakref.finalize(memory, Engine._released, weakref.ref(self), memory.serial, nbytes)  # back to the budget
        return memory

    def allocating(self) -> bool:
        """Whether memory made later is still being made (the driver holds submissions up meanwhile)."""
        return self.later.pending()

    def host_memory(self, nbytes: int) -> HostMemory:
        """Host-visible memory the device's transfer commands read and write directly
        (Device.host_array); a transfer from or to it skips the staging copy."""
        with self.lock:
            self.check_open()
            try:
                mem = HostMemory(self.manager, nbytes, next(_serials))
            except RuntimeError as e:
                raise OutOfMemoryError(f"could not allocate {nbytes} bytes of host-visible memory: {e}") from e
            self._host[id(mem)] = mem
            # its recorded transfers (Staging._direct_copy) hold its kp tensor: dropped with it
            weakref.finalize(mem, Engine._host_released, weakref.ref(self), mem.serial)
            return mem

    def host_range(self, data: np.ndarray) -> HostRange | None:
        """Where `data` (contiguous) lies in host memory of this engine (host_memory), else None."""
        return None if (where := host_origin(data, self._host)) is None else HostRange(*where, data.nbytes)

    def write(self, memory: DeviceMemory, offset: int, data: np.ndarray, settle: bool = True) -> None:
        """Bytes [offset, offset + len(data)) of `memory` <- `data` (uint8) after the work binding it; `settle=False`:
        no unfinished work reads the range (a new buffer, constant_arena.py), the copy waits for the next submission."""
        with self.lock:
            self.check_open()
            if not settle:
                return self.staging.deferred.add(memory, offset, data)
            self.inflight.settle(memory.serial)
            self.staging.upload(memory, offset, data, host_origin(data, self._host))

    def read_into(self, memory: DeviceMemory, offset: int, out: np.ndarray) -> None:
        """`out` (contiguous uint8) <- bytes [offset, offset + len(out)) of `memory`."""
        with self.lock:
            self.check_open()
            self.inflight.settle(memory.serial)
            self.staging.download(memory, offset, out, host_origin(out, self._host))

    @staticmethod
    def _released(engine_ref: weakref.ref[Engine], serial: int, nbytes: int) -> None:
        engine = engine_ref()
        if engine is None:
            return
        with engine.lock:
            engine.budget.give_back(nbytes)
            if engine.closed:
                return
            engine.inflight.settle(serial)
            engine.staging.forget(serial)
            for key in [k for k, r in engine._replays.items() if serial in r.memories]:
                engine._replays.pop(key).live = False

    @staticmethod
    def _host_released(engine_ref: weakref.ref[Engine], serial: int) -> None:
        if (engine := engine_ref()) is not None:
            with engine.lock:
                if not engine.closed:
                    engine.staging.forget(serial)

    def _transfer_ops(self, ops: list[Any]) -> None:
        """Run transfer commands (fills) after one global barrier (a word-completed execution's fence may be unwaited)."""
        with self.lock:
            self.check_open()
            seq = self._misc_seq
            seq.clear()
            seq.record(global_barrier())
            for op in ops:
                seq.record(op)
            self.staging.deferred.submit()
            self.guarded(seq.kdml_run)

    @staticmethod
    def guarded(call: Any) -> None:
        """Run a kp submission or wait, a kp failure as DeviceError."""
        try:
            call()
        except RuntimeError as e:
            raise DeviceError(f"Vulkan submission failed (device lost?): {e}") from e

    # ---- submission --------------------------------------------------------------------
    def submit(self, key: Hashable, work: Sequence[Work], wait: bool = True,
               labels: Sequence[Any] = ()) -> tuple[Replay, Submission | None]:
        """Run executions in one submission and wait (`wait=False`: return a Submission to
        wait for). `key` names what the executions bind (operators, buffer serials, offsets):
        equal keys replay one cached kp sequence. Returns that cached submission, for
        `rerun`, and the Submission (None when waited). `labels`: the executions' operator
        names (Device.profile rows)."""
        with self.lock:
            if self.closed:  # (inline: every eager execution's path)
                raise DeviceError("the device has been closed")
            replay = self._replays.get(key)
            if replay is None:
                replay = self._encode(work, labels)
                self._cache(key, replay)
            else:
                self._replays.move_to_end(key)
            launched = self._launch(replay, wait, owned=True)
        return replay, self.inflight.wait_owned(launched, self._spin_cap_ns)

    def start_head(self, work: Sequence[Work], labels: Sequence[Any] = ()) -> list[Any]:
        """Encode executions and start them on the device without waiting: the head of a
        recording still being recorded (Recording.flush). Returns their encoded operations,
        the start of the submission the whole recording becomes (run_rest)."""
        with self.lock:
            self.check_open()
            replay = self._encode(work, labels)
            self.staging.deferred.submit()
            if replay.pending:
                self.heads.start(replay, self.lock)
            return replay.dispatches

    def run_rest(self, key: Hashable, work: Sequence[Work], labels: Sequence[Any], done: int,
                 head: list[Any]) -> Replay:
        """The first run of a recording whose first `done` executions already ran as heads
        (start_head returned their operations, `head`): run the rest and wait, then every
        head. Returns the whole submission, cached under `key` like `submit`'s, whose next
        run runs everything (its own sequence: it counts as run once)."""
        with self.lock:
            self.check_open()
            rest = self._encode(work[done:], labels[done:])
            whole = Replay(_memories(work), head + rest.dispatches)
            whole.ran = True
            self._cache(key, whole)
            try:
                self._launch(rest, True)  # begins with a global barrier: after the heads on the device
            finally:
                self.heads.settle()
            return whole

    def _cache(self, key: Hashable, replay: Replay) -> None:
        self._replays[key] = replay
        self._replays.move_to_end(key)
        if len(self._replays) > REPLAY_CAPACITY:
            self._replays.popitem(last=False)[1].live = False

    def rerun(self, replay: Replay, wait: bool = True, copies: HostCopies | None = None) -> bool | Submission | None:
        """Submit again what `submit` returned, for an execution of the same key, without the cache
        lookup: an eager operator's repeated call. False, having run nothing, when the submission has left the
        cache since (then `submit`); else what `submit` returns (None when waited). `copies`: host copies to
        make in the wait's native call where it can (replay.HostCopies)."""
        with self.lock:
            if self.closed:  # (inline: an eager operator's repeated call)
                raise DeviceError("the device has been closed")
            if not replay.live:
                return False
            launched = self._launch(replay, wait, copies, owned=True)
        return self.inflight.wait_owned(launched, self._spin_cap_ns)

    def _launch(self, replay: Replay, wait: bool, copies: HostCopies | None = None,
                owned: bool = False) -> Submission | Owned | None:
        """Run a cached submission and wait, or start it (nothing where it has nothing to
        run: e.g. an exact in-place copy). Every execution's path: called under the lock.
        A first run goes through the shared sequence, a later one through the submission's
        own, recorded at its second run (runtime/replay.py). `owned`: a replayed run is only
        submitted, and returned as an inflight.Owned for the caller to wait for once it let go
        of the lock (InFlight.wait_owned), so other threads submit while the device runs it."""
        self.staging.deferred.submit()  # (copies the executions may read)
        if replay.seq is None:
            if not replay.pending:
                return None if wait else finished(self.lock)
            if self.profile is None:  # (a profile runs its own sequence: profile.py)
                if wait and not replay.ran and self.shared_first_runs:
                    self.first_runs.run(replay)
                    return None
                replay.own(self.manager.kdml_word_sequence() if self.completion_word else self.manager.sequence(),
                           self.first_runs.order)
                self.sequences_created += 1
        if replay.running:  # its command buffer is still on the device
            self.inflight.finish(replay)
        if self.profile is not None:
            self.profile.run(replay)
        elif wait:
            cap = self._spin_cap_ns
            if cap:  # (process-wide in kp: set at every submission; another thread's may apply to this wait)
                kp.kdml_set_wait_spin_ns(replay.spin_ns)
            sub = self.inflight.start_owned(replay, copies)
            if owned:
                return sub
            self.inflight.wait_owned(sub, cap)
        else:
            return self.inflight.start(replay, self.lock)
        return None if wait else finished(self.lock)

    def set_adaptive_spin(self, cap_us: int) -> None:
        """Waits for a cached submission poll up to twice its previous duration, at most
        `cap_us` (0: the fixed default), before they block: a blocked wait wakes up late
        (policy.WAIT_SPIN_CAP_US). KDML_WAIT_SPIN_US, where set, fixes the poll instead."""
        self._spin_cap_ns = 0 if os.environ.get("KDML_WAIT_SPIN_US") is not None else 1000 * max(0, int(cap_us))

    @property
    def capturing(self) -> Any:
        """The Recording this thread's executions go into (Device.capture), else None."""
        return self._capture.rec

    def capture_into(self, rec: Any) -> Any:  # Device.capture
        return self._capture.into(rec)

    def synchronize(self) -> None:
        with self.lock:  # every submission made without waiting
            self.staging.deferred.settle()
            self.inflight.settle()

    def _encode(self, work: Sequence[Work], labels: Sequence[Any] = ()) -> Replay:
        names = list(labels) + [""] * (len(work) - len(labels))
        self.programs.prepare_many([p for ps, _ in work for p in ps if isinstance(p, DispatchPlan)], self.pipeline_threads)
        dispatches = [(self.encoded.encode(plan, bound, self.programs, self.dummy), (name, plan))
                      for (plans, bound), name in zip(work, names) for plan in plans]
        return Replay(_memories(work), dispatches)

    # ---- state ---------------------------------------------------------------------------
    def prepare_many(self, plans: Sequence[DispatchPlan]) -> int:
        """Make the pipelines `plans` use, binding nothing (Device.warmup, siblings.py); returns how many were new."""
        with self.lock:
            self.check_open()
            return self.programs.prepare_many(plans, self.pipeline_threads)

    def stats(self) -> dict[str, int]:
        return engine_stats(self, self._replays.values(), len(self._live))

    def close(self) -> None:
        """Release every Vulkan object; later calls raise DeviceError."""
        self.programs.stop()  # (background pipelines: none compiling while the device goes)
        with self.lock:
            if self.closed:
                return
            with contextlib.suppress(DeviceError):
                self.staging.deferred.settle()
                self.inflight.settle()
                # one fence-completed submission after all others: word-completed ones no fence covered
                self._transfer_ops([])  # yet are then retired for Vulkan before their descriptor sets go
            for replay in self._replays.values():
                replay.live = False
            self._replays.clear()
            self.encoded.clear()
            self.later.spares.clear()
            self.closed = True
            self.staging.copies.close()
            self.manager.destroy()  # waits for the device, writes the pipeline cache file (disk_cache.py)
