"""Recording and RecordedProgram: many executions in one submission (Device.record), or
captured once and run again and again (Device.capture, Recording.compile).

A recording may start its first executions on the device before it ends (Recording.flush):
the device runs them while the host goes on recording (the ONNX backend plans a new input
signature's later layers while its first ones run). The submission or program the recording
becomes then runs only the rest at its first run, and everything at every run after.
"""

from __future__ import annotations

import functools
from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

import numpy as np

from ..core.errors import DMLError, InvalidArgumentError
from ..core.tensor_desc import TensorDesc, packed_strides
from ..runtime import DeviceMemory, Submission, TransferPlan, Work, finished
from ..runtime.inflight import Pending, settle
from .memory import Tensor

if TYPE_CHECKING:
    from ..runtime.replay import HostCopies
    from .device import Device


class Recording:
    """Executions gathered by `with dev.record() as rec:`; one submission at the end.

    Each `rec.execute` validates its bindings at once (so a bad call raises inside the
    block and nothing is submitted); dependent dispatches get memory barriers. The
    submission is cached like an eager execution's: a recording of the same operators on
    the same buffers and offsets (a loop body, say) replays one kp sequence.
    """

    def __init__(self, device: Device) -> None:
        self.device = device
        # Holding the bindings keeps the bound tensors alive until submission: a buffer
        # collected mid-recording would otherwise take its pipelines with it.
        self._keys: list[Hashable] = []
        self._work: list[Work] = []
        self._labels: list[Any] = []
        self._count = 0
        self._done = False
        # the executions started by flush(): how many, and their encoded operations
        self._flushed = 0
        self._head: list[Any] = []
        self._made = 0  # the executions before this index have all their pipelines (pipelines_made)
        # Profile rows of the executions recorded from now on carry this scope (Device.profile)
        self.scope = ""
        # the distinct compiled operators recorded, by id (the ONNX backend prepares the pipelines
        # other shapes of them take: OperatorSpec.ahead)
        self.operators: dict[int, Any] = {}
        # the executions with a device check (ops/device_check.py), in order, read once the
        # submission completed; per checked operator, how many of its executions were recorded
        self._checks: list[Pending] = []
        self._occurrences: dict[int, int] = {}
        # Called with (op, inputs, outputs) at each execute, before its bindings are checked: the
        # ONNX backend's node traces (onnx_backend/node_traces.py) see what a handler recorded
        self.observer: Any = None

    def execute(self, op: Any, inputs: Any, outputs: Any) -> None:
        if self._done:
            raise DMLError("this recording was already submitted")
        if getattr(op, "device", None) is not self.device:
            raise InvalidArgumentError("op: was compiled for another Device (or is not a compiled operator)")
        self.device.engine.check_open()
        if self.observer is not None:
            self.observer(op, inputs, outputs)
        bound, key = op.bind(inputs, outputs)
        if key is None:  # an exact in-place no-op
            return
        self._keys.append(key)
        self._work.append((op.plans, bound))
        self.operators[op] = op  # (identity hash: not id(), core/tags.py says why)
        self._labels.append((self.scope, op.support.name) if self.scope else op.support.name)
        self._count += len(op.plans)
        check = op.check
        if check is not None:  # its word's copy to the host, right after it (ops/device_check.py)
            k = self._occurrences[op] = self._occurrences.get(op, -1) + 1
            copy_key, copy_work = check.copy(k)
            self._keys.append(copy_key)
            self._work.append(copy_work)
            self._labels.append((self.scope, "check") if self.scope else "check")
            self._count += 1
            self._checks.append((check, k, bound, op.support.name, self.scope))

    @property
    def mark(self) -> tuple[int, int, int]:
        """Executions, dispatches and device checks recorded so far."""
        return len(self._work), self._count, len(self._checks)

    def splice(self, program: RecordedProgram, start: int, end: int, dispatches: int) -> None:
        """Record executions [start, end) of `program` (recorded on this device; no device check
        among them) again: the same operators on the same tensors (onnx_backend/step_reuse.py)."""
        if self._done:
            raise DMLError("this recording was already submitted")
        self._keys.extend(program._keys[start:end])
        self._work.extend(program._work[start:end])
        self._labels.extend(program._labels[start:end])
        self._count += dispatches

    def copy_in(self, host: np.ndarray, tensor: Tensor) -> None:
        """Record a copy of `host` (a contiguous array inside this device's `host_array`
        memory) into `tensor`'s elements (a packed tensor of `host.nbytes` bytes), ordered before
        the executions recorded after it: a program's inputs, written on the host between runs
        and moved by the program's own submission."""
        self._copy(host, tensor, to_host=False)

    def copy_out(self, tensor: Tensor, host: np.ndarray) -> None:
        """Record a copy of `tensor`'s elements (packed) into `host` (inside `host_array`
        memory, `tensor.nbytes` bytes), after the executions recorded before it; the host reads
        it once the submission completed."""
        self._copy(host, tensor, to_host=True)

    def copy_tensor(self, src: Tensor, dst: Tensor) -> None:
        """Record a copy of packed `src`'s elements into packed `dst` (as many bytes, in another
        buffer), ordered after the executions recorded before it: one transfer and no compiled
        operator (the ONNX backend's device outputs, a new shape at every decoder step)."""
        self._packed(src, "src")
        self._packed(dst, "dst")
        if src.nbytes != dst.nbytes:
            raise InvalidArgumentError(f"dst: {dst.nbytes} bytes, src's elements have {src.nbytes}")
        if src.buffer is dst.buffer:
            raise InvalidArgumentError("dst: must be in another buffer than src")
        self._record_copy(("copy", src.binding_key, dst.binding_key, src.nbytes), (src, dst), _copy_plan(src.nbytes), "copy")

    def copy_blocks(self, src: Tensor, dst: Tensor) -> None:
        """Record a copy of `src`'s elements into `dst`'s (one shape and type, another buffer), where
        each tensor's last two dimensions are one contiguous block (`contiguous_blocks`): one transfer
        of a region per block and no compiled operator (a padded key / value cache's views, a new shape
        at every decoder step: onnx_backend/cache_padding.py)."""
        if src.desc.data_type != dst.desc.data_type or src.shape != dst.shape or src.buffer is dst.buffer:
            raise InvalidArgumentError("dst: must have src's shape and type, in another buffer")
        self._packed(src, "src", blocks=True)
        self._packed(dst, "dst", blocks=True)
        starts = _block_starts(src)
        regions = np.stack([starts, _block_starts(dst), np.full(len(starts), src.nbytes // len(starts))], axis=1)
        regions.flags.writeable = False
        key = ("blocks", src.binding_key, dst.binding_key, regions.tobytes())
        self._record_copy(key, (src, dst), TransferPlan("copy", (0, 1), regions, (1,)), "copy")

    def zero_blocks(self, dst: Tensor) -> None:
        """Record zeros into `dst`'s elements (`contiguous_blocks`, each block a whole number of 32-bit
        words): a fill region per block."""
        self._packed(dst, "dst", blocks=True)
        starts = _block_starts(dst)
        if dst.nbytes // len(starts) % 4:
            raise InvalidArgumentError("dst: each block must be a whole number of 32-bit words")
        regions = np.stack([starts, np.full(len(starts), dst.nbytes // len(starts))], axis=1)
        regions.flags.writeable = False
        self._record_copy(("zeros", dst.binding_key, regions.tobytes()), (dst,), TransferPlan("fill", (0,), regions, (0,)),
                          "fill")

    def _copy(self, host: np.ndarray, tensor: Tensor, to_host: bool) -> None:
        self._packed(tensor, "tensor")
        engine = self.device.engine
        where = engine.host_range(host) if isinstance(host, np.ndarray) and host.flags.c_contiguous else None
        if where is None:
            raise InvalidArgumentError("host: must be a contiguous array inside this device's Device.host_array memory")
        if host.nbytes != tensor.nbytes:
            raise InvalidArgumentError(f"host: {host.nbytes} bytes, the tensor's elements have {tensor.nbytes}")
        key = ("copy", to_host, where.memory.serial, where.offset, tensor.binding_key, host.nbytes)
        self._record_copy(key, (tensor, where) if to_host else (where, tensor), _copy_plan(host.nbytes),
                          "copy out" if to_host else "copy in")

    def _packed(self, tensor: Any, field: str, blocks: bool = False) -> None:
        """InvalidArgumentError unless `tensor` is a packed Tensor of this device (`blocks`: its last two
        dimensions contiguous, contiguous_blocks) and the recording open."""
        if self._done:
            raise DMLError("this recording was already submitted")
        self.device.engine.check_open()
        if not isinstance(tensor, Tensor) or tensor.buffer.device is not self.device:
            raise InvalidArgumentError(f"{field}: must be a kompute_dml Tensor of this device")
        d = tensor.desc
        if blocks:
            if not contiguous_blocks(tensor):
                raise InvalidArgumentError(f"{field}: its last two dimensions must be contiguous (strides (..., columns, 1))")
        elif d.strides is not None and tuple(d.strides) != packed_strides(d.sizes):
            raise InvalidArgumentError(f"{field}: must be packed (its elements one contiguous byte range)")

    def _record_copy(self, key: Hashable, bound: tuple[Any, Any], plan: TransferPlan, label: str) -> None:
        self._keys.append(key)
        self._work.append(((plan,), bound))
        self._labels.append((self.scope, label) if self.scope else label)
        self._count += 1

    def flush(self) -> None:
        """Start the executions recorded since the last flush on the device now, without
        waiting, and go on recording: the device runs them while the host records the rest
        (up to the first that binds memory still being made, Buffer `later`: the next flush).
        The submission (`submit`) or program (`compile`) this recording becomes then runs
        only the rest at its first run (and waits for it and the heads, even with
        wait=False), and everything at every later run. Reading or writing
        a buffer they bind waits for them, as for any submission made without waiting.
        Nothing happens while a Device.profile is open (a profile runs one submission at a
        time)."""
        if self._done:
            raise DMLError("this recording was already submitted")
        engine = self.device.engine
        end = self._ready_end()
        if engine.profile is not None or self._flushed == end:
            return
        self._head += engine.start_head(self._work[self._flushed:end], self._labels[self._flushed:end])
        self._flushed = end

    def pipelines_made(self) -> bool:
        """Whether every execution recorded since the last flush has its pipelines made: a flush
        of one that has not compiles it there and then, one pipeline at a time (a cold driver
        cache: up to 1.8 s each on the H100), where the plan's last encode compiles them all at
        once (Programs.prepare_many). O(1) per call while the first missing one stays missing."""
        self._made = self.device.engine.programs.made_until(self._work, max(self._made, self._flushed))
        return self._made == len(self._work)

    def _ready_end(self) -> int:
        """Where the executions recorded since the last flush stop binding only memory that
        exists: a buffer still being made (Buffer `later`) and what follows it wait for the next
        flush, so that a flush never waits for an allocation."""
        for k in range(self._flushed, len(self._work)):
            for t in self._work[k][1]:
                memory = None if t is None else t.buffer.memory
                if isinstance(memory, DeviceMemory) and not memory.ready:
                    return k
        return len(self._work)

    @property
    def flushed(self) -> int:
        """How many executions flush() started."""
        return self._flushed

    def submit(self, wait: bool = True) -> Submission | None:
        """Submit the recorded executions (leaving the `with` block does, waiting); with
        `wait=False`, return at once with a Submission (`wait()`, `done()`)."""
        engine = self.device.engine
        if self._done:
            return None if wait else finished(engine.lock)
        self._done = True
        checks = self._checks
        try:
            if self._flushed:  # the rest after the heads, waited for
                engine.run_rest(tuple(self._keys), self._work, self._labels, self._flushed, self._head)
                submission = None if wait else finished(engine.lock)
            elif self._count:
                submission = engine.submit(tuple(self._keys), self._work, wait, self._labels)[1]
            else:
                submission = None if wait else finished(engine.lock)
        finally:
            self._keys, self._work, self._labels, self._checks = [], [], [], []
        return settle(submission, checks) if checks else submission  # type: ignore[no-any-return]

    def compile(self) -> RecordedProgram:
        """The recorded executions as a program to run again and again (the same buffers,
        offsets and operators each time: write new inputs into the bound buffers between
        runs). Ends the recording."""
        if self._done:
            raise DMLError("this recording was already submitted")
        self._done = True
        return RecordedProgram(self.device, tuple(self._keys), self._work, self._labels, self._count,
                               (self._flushed, self._head) if self._flushed else None, self._checks)

    def __len__(self) -> int:
        return self._count


def contiguous_blocks(t: Tensor) -> bool:
    """Whether t's last two dimensions are one contiguous block (strides (..., columns, 1)):
    Recording.copy_blocks' and zero_blocks' rule."""
    return _contiguous_blocks(t.desc)


@functools.lru_cache(maxsize=256)
def _contiguous_blocks(desc: TensorDesc) -> bool:
    # keyed by the (interned, immutable) descriptor, never the Tensor: a cache holding Tensors holds
    # their device buffers (a decoder loop's presents, none of them ever free for the buffer pool)
    st, sizes = desc.effective_strides, desc.sizes
    return len(sizes) >= 2 and st[-1] == 1 and st[-2] == sizes[-1]


def _block_starts(t: Tensor) -> np.ndarray:
    """The byte offset of each of t's [rows, columns] blocks from its binding, leading indices in order."""
    at = np.zeros(1, np.int64)
    for size, stride in zip(t.shape[:-2], t.desc.effective_strides[:-2]):
        at = (at[:, None] + np.arange(size, dtype=np.int64) * stride).reshape(-1)
    return at * t.desc.data_type.size


def _copy_plan(nbytes: int) -> TransferPlan:
    """The transfer of `nbytes` from binding 0 to binding 1, one object per size: the engine's
    encoded dispatches are cached by plan (runtime/encode.py), and a copy between the same
    tensors again (a run's device outputs into the buffers the last run's released) finds its own."""
    regions = np.array([[0, 0, nbytes]], np.int64)
    regions.flags.writeable = False  # (shared)
    return TransferPlan("copy", (0, 1), regions, (1,))


class RecordedProgram:
    """Executions recorded once (Recording.compile), submitted as one kp sequence per `run`;
    the sequence is recorded at the first run and replayed after (re-recorded only if the
    engine's replay cache dropped it)."""

    def __init__(self, device: Device, keys: tuple[Hashable, ...], work: list[Work], labels: list[Any],
                 count: int, head: tuple[int, list[Any]] | None = None, checks: list[Pending] | None = None) -> None:
        self.device = device
        self._checks = checks or []  # read after every run (ops/device_check.py)
        self._keys, self._work, self._labels = keys, work, labels
        self.dispatch_count = count
        self._replay: Any = None
        # (executions, their encoded operations) the recording started before it ended
        # (Recording.flush): the first run runs only the rest
        self._head = head

    @property
    def work(self) -> list[Work]:
        """The recorded executions: (plans, bound tensors) each."""
        return self._work

    @property
    def head_pending(self) -> bool:
        """Whether the next run is the first, which runs only what the recording did not start
        (Recording.flush)."""
        return self._head is not None

    def without_tail(self, n: int) -> RecordedProgram:
        """The same program less its last `n` executions (the ONNX backend's copies of the outputs
        into host memory, which a run that leaves them on the device does not need): another
        program over the same buffers, its own kp sequence recorded at its first run."""
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= len(self._work):
            raise InvalidArgumentError(f"n: an integer 0 .. {len(self._work)} (executions), got {n!r}")
        end = len(self._work) - n
        return RecordedProgram(self.device, self._keys[:end], self._work[:end], self._labels[:end],
                               self.dispatch_count - n, None, self._checks)

    def run(self, wait: bool = True, copies: HostCopies | None = None) -> Submission | None:
        """Run the program; an execution's failed device check (ops/device_check.py) raises once
        the run completed (with `wait=False`: from the Submission's wait()). `copies`
        (runtime/replay.HostCopies): host copies a replayed run makes in its wait's native call."""
        submission = self._run(wait, copies)
        return settle(submission, self._checks) if self._checks else submission  # type: ignore[no-any-return]

    def _run(self, wait: bool, copies: HostCopies | None = None) -> Submission | None:
        engine = self.device.engine
        if not self.dispatch_count:
            return None if wait else finished(engine.lock)
        if self._head is not None:
            done, head = self._head
            self._head = None
            self._replay = engine.run_rest(self._keys, self._work, self._labels, done, head)
            return None if wait else finished(engine.lock)
        if self._replay is not None:
            ran = engine.rerun(self._replay, wait, copies)
            if ran is not False:
                return ran  # type: ignore[return-value]
        self._replay, submission = engine.submit(self._keys, self._work, wait, self._labels)
        return submission
