"""Submissions the host has not waited for: `execute(..., wait=False)` and
`Recording.submit(wait=False)` return a Submission with `wait()` and `done()`.

The device runs submissions in queue order, and every submission starts with a global
barrier (encode.py), so later work on the device sees what earlier work wrote without the
host waiting in between. The host waits only where it must:
- before it reads or writes a buffer an unfinished submission binds (Engine.read_into /
  write: "reading a tensor waits for the work that writes it"), and before such a buffer is
  freed;
- before the same cached kp sequence is submitted again (a command buffer runs once at a
  time);
- in Device.synchronize() and Device.close().
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from .replay import SPIN_DEFAULT_NS

# A device check of an execution in a submission (ops/device_check.py): (the check, occurrence,
# bound tensors, operator name, recording scope: None for an eager execution); `check.error(k,
# bound)` is its error once the submission completed, or None
Pending = tuple[Any, int, Sequence[Any], str, "str | None"]


class InFlight:
    """The cached submissions (replay.Replay) running on the device, by id. Callers hold the
    engine's lock, except `wait_owned`: the thread that submitted a run waits for it outside
    that lock, so other threads submit meanwhile (another model's run, another device's copies).
    Whoever waits holds the submission's `waiting` lock, so a kp sequence is waited for by one
    thread at a time; the submitter's wait needs no engine lock, so a thread that holds it and
    waits for the same submission (a host read, a free) cannot deadlock with it."""

    def __init__(self, guarded: Callable[[Callable[[], object]], None]) -> None:
        self._guarded = guarded  # runs a kp wait, its failure as DeviceError
        self._running: dict[int, Any] = {}

    def __len__(self) -> int:
        return len(self._running)

    def start(self, replay: Any, lock: Any) -> Submission:
        self._submit(replay)
        return Submission(self, replay, replay.generation, lock)

    def _submit(self, replay: Any) -> None:
        self._guarded(replay.seq.kdml_submit)
        replay.generation += 1
        replay.running = True
        self._running[id(replay)] = replay

    def finish(self, replay: Any) -> None:
        if not replay.running:
            return
        with replay.waiting:
            if replay.running:
                self._wait(replay, replay.seq.kdml_wait)

    def start_owned(self, replay: Any, copies: Any) -> Owned:
        """Submit `replay` for the calling thread to wait for after it let go of the engine's lock."""
        t0 = time.perf_counter()
        self._submit(replay)
        return Owned(replay, copies, t0, replay.generation)

    def wait_owned(self, owned: Any, spin_cap_ns: int = 0) -> Any:
        """The submitting thread's wait (`owned`: what start_owned returned; anything else is
        returned as it is), with the output copies (replay.HostCopies) made in the wait's native
        call where it is still running; at once where another thread waited for it already (then
        the copies are left undone). With `spin_cap_ns`, the replay's next wait polls up to twice
        this run's time (Engine.set_adaptive_spin)."""
        if not isinstance(owned, Owned):
            return owned
        replay, copies = owned.replay, owned.copies
        seq, items = replay.seq, copies.items if copies is not None else None
        wait = (lambda: seq.kdml_wait_copy(items)) if items else seq.kdml_wait  # (made before the lock is taken)
        with replay.waiting:
            if replay.running and replay.generation == owned.generation:
                self._wait(replay, wait)
                if items:
                    copies.done = True
        if spin_cap_ns:
            replay.spin_ns = min(spin_cap_ns, max(SPIN_DEFAULT_NS, int(2e9 * (time.perf_counter() - owned.t0))))
        return None

    def _wait(self, replay: Any, wait: Callable[[], object]) -> None:
        try:
            self._guarded(wait)
        finally:
            replay.running = False
            self._running.pop(id(replay), None)

    def settle(self, serial: int | None = None) -> None:
        """Wait for every running submission (that binds buffer `serial`, when given)."""
        for replay in list(self._running.values()):
            if serial is None or serial in replay.memories:
                self.finish(replay)


class Owned:
    """A replayed run submitted under the engine's lock, for the submitting thread to wait for
    after it (InFlight.wait_owned)."""

    __slots__ = ("copies", "generation", "replay", "t0")

    def __init__(self, replay: Any, copies: Any, t0: float, generation: int) -> None:
        self.replay, self.copies, self.t0, self.generation = replay, copies, t0, generation


class Submission:
    """One submission the host did not wait for."""

    __slots__ = ("_generation", "_inflight", "_lock", "_replay")

    def __init__(self, inflight: InFlight | None, replay: Any, generation: int, lock: Any) -> None:
        self._inflight, self._replay, self._generation, self._lock = inflight, replay, generation, lock

    def _current(self) -> bool:
        r = self._replay
        return r is not None and r.running and r.generation == self._generation

    def done(self) -> bool:
        """True once the device finished this submission (never blocks)."""
        with self._lock:
            return not self._current() or bool(self._replay.seq.kdml_done())

    def wait(self) -> None:
        """Return once the device finished this submission (at once if it had)."""
        with self._lock:
            if self._current() and self._inflight is not None:
                self._inflight.finish(self._replay)

    def __repr__(self) -> str:
        return f"Submission(done={self.done()})"


def finished(lock: Any) -> Submission:
    """A Submission with nothing to wait for (an execution with nothing to run)."""
    return Submission(None, None, 0, lock)


def raise_first(pending: Sequence[Pending]) -> None:
    """Raise the first failed check of a completed submission, in execution order: inside a
    recording (`scope` not None) noted with the operator and the recording's scope (Recording.scope:
    the ONNX plan's node), and `recorded_scope` set for callers that map it further
    (onnx_backend/device_graph.py)."""
    for check, k, bound, name, scope in pending:
        err = check.error(k, bound)
        if err is not None:
            err.recorded_scope = scope  # type: ignore[attr-defined]
            if scope is not None:
                where = f" (recorded in {scope!r})" if scope else ""
                err.add_note(f"raised when the recorded submission completed: its {name} execution{where}")
            raise err


class CheckedSubmission:
    """A Submission of executions with device checks: `wait()` raises the
    first failed check once the device is done. (Reading a bound buffer instead waits without
    raising; the output is then unchanged.)"""

    __slots__ = ("_pending", "_sub")

    def __init__(self, sub: Any, pending: Sequence[Pending]) -> None:
        self._sub, self._pending = sub, pending

    def done(self) -> bool:
        return bool(self._sub.done())

    def wait(self) -> None:
        self._sub.wait()
        pending, self._pending = self._pending, ()
        raise_first(pending)


def settle(sub: Any, pending: Sequence[Pending]) -> Any:
    """After a submission of checked executions: raise the first failed check where it was
    waited for (`sub` None), else the Submission whose wait() raises it."""
    if sub is None:
        raise_first(pending)
        return None
    return CheckedSubmission(sub, pending)
