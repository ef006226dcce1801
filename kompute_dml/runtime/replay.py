"""Cached submissions (Replay) and the shared sequence their first runs go through.

A submission is encoded once (its kp operations: descriptor sets and dispatches) when its
key is first seen. Its first run is recorded into one kp sequence the engine shares between
all first runs (`FirstRuns`: fence-completed, re-recorded for each new submission, emptied
after each run so that it holds no buffer alive); only a submission that runs again gets a
kp sequence of its own, recorded once from the same operations and replayed from then on.
A first execution on new buffers, which may never repeat, thus creates no command buffer
and no fence: on the H100 the first submission of a new sequence was the largest part of
such an execution (`benchmarks/first_call.py --breakdown`: run 1 against run 2).
Submissions made without waiting, and those run while a Device.profile is open, take their
own sequence (or the profile's) at once.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable
from typing import Any

from .encode import EncodedDispatch, Order, levels, record_dispatches
from .plans import Plan

SPIN_DEFAULT_NS = 250_000  # the kp patch's default poll before a blocking wait
# Sequences that run recordings' heads (Heads): a plan flushes every few milliseconds, and a
# head has long finished by the time its sequence comes round again.
HEAD_SEQUENCES = 4


class HostCopies:
    """Host copies to make as soon as a submission completes, in the native call that waits for it
    (kp's kdml_wait_copy: the GIL released once for both, not taken back after the wait and
    released again for the copy; docs/serving.md): (destination address, source address, bytes)
    each, memory the caller keeps alive. `done` says they were made; where not (a first run, a
    profiled run), the caller makes them."""

    __slots__ = ("done", "items")

    def __init__(self, items: list[tuple[int, int, int]]) -> None:
        self.items, self.done = items, False


def complete(seq: Any, copies: HostCopies | None = None) -> None:
    """kdml_submit then kdml_wait (with `copies`: kdml_wait_copy): the GIL released while the
    device runs the sequence. Every first run goes through it (a cached submission's later runs
    wait in runtime/inflight.py, after the engine's lock): kp's kdml_run (submit and wait in one call) holds the GIL
    throughout its wait, so another thread's Python work (a second device's run, the caller's
    own threads) stopped while a device ran (`python -m benchmarks.gil_probe`, docs/serving.md)."""
    seq.kdml_submit()
    if copies is not None and copies.items:
        seq.kdml_wait_copy(copies.items)
        copies.done = True
    else:
        seq.kdml_wait()


class Replay:
    """A cached submission: its encoded operations, its kp sequence once it has one (None
    before its second run, and for a submission with nothing to run) and the serials of the
    buffers it binds."""

    __slots__ = ("dispatches", "generation", "live", "memories", "pending", "ran", "running", "seq", "spin_ns",
                 "waiting")

    def __init__(self, memories: frozenset[int], dispatches: list[tuple[EncodedDispatch, tuple[Any, Plan]]]) -> None:
        self.dispatches = dispatches  # (encoded command, (operator, plan)): recorded, and for Profile.run
        self.live = True  # False once out of the replay cache (Engine.rerun then refuses it)
        self.running = False  # submitted without waiting, not yet waited for (inflight.py)
        self.generation = 0  # how often it was submitted without waiting
        self.memories = memories
        # something to run and no sequence of its own yet; `ran`: its first run is done
        self.pending = not all(d.skip for d, _ in dispatches)
        self.ran = False
        self.seq: Any = None  # its own kp sequence (own), submitted and waited for by inflight.py
        self.spin_ns = SPIN_DEFAULT_NS  # how long its next wait polls (Engine.set_adaptive_spin)
        # held by the one thread that waits for its submission (inflight.py); re-entrant: a buffer's
        # finalizer run by the collector inside that wait (Engine._released) may settle the same submission
        self.waiting = threading.RLock()

    def own(self, seq: Any, order: Order = levels) -> None:
        """Record the submission into `seq` (in `order`: the engine's), its own sequence from now on."""
        record_dispatches(seq, [d for d, _ in self.dispatches], order=order)
        self.seq, self.pending = seq, False


class FirstRuns:
    """The kp sequence every submission's first run is recorded into (callers hold the
    engine's lock)."""

    def __init__(self, manager: Any, guarded: Callable[[Callable[[], object]], None]) -> None:
        self._manager = manager
        self._guarded = guarded  # runs a kp call that waits, its failure as DeviceError
        self._seq: Any = None
        self.runs = 0
        self.order: Order = levels  # the engine's (Engine.set_order)

    def run(self, replay: Replay) -> None:
        """Record `replay`'s operations into the shared sequence, run it and wait."""
        seq = self._seq
        if seq is None:
            seq = self._seq = self._manager.sequence()
        replay.ran = True
        try:
            record_dispatches(seq, [d for d, _ in replay.dispatches], order=self.order)  # the first record() resets it
            self._guarded(lambda: complete(seq))
        finally:
            seq.clear()  # drops the operations (and what they hold); re-recorded before any rerun
        self.runs += 1


class Heads:
    """The kp sequences that run recordings' heads (Recording.flush): executions started
    without waiting while the rest of their recording is still being recorded, so the device
    runs them while the host goes on (a model's new input signature: its first layers run
    while the later ones are planned). A ring of HEAD_SEQUENCES fence-completed sequences,
    created once per engine; taking one back waits for what it ran last (callers hold the
    engine's lock)."""

    def __init__(self, manager: Any, inflight: Any) -> None:
        self._manager = manager
        self._inflight = inflight  # runtime/inflight.py: host accesses wait for a running head
        self.order: Order = levels  # the engine's (Engine.set_order)
        self._ring: collections.deque[tuple[Any, Replay]] = collections.deque()

    def start(self, replay: Replay, lock: Any) -> None:
        """Record `replay` (not a cached submission: it runs once) into a sequence and submit it."""
        if len(self._ring) < HEAD_SEQUENCES:
            seq = self._manager.sequence()
        else:
            seq, old = self._ring.popleft()
            self._inflight.finish(old)
            seq.clear()  # drops the operations (and the buffers they hold) of the head it ran
        replay.own(seq, self.order)
        self._ring.append((seq, replay))
        self._inflight.start(replay, lock)

    def settle(self) -> None:
        """Wait for every head still running."""
        for _seq, replay in self._ring:
            self._inflight.finish(replay)
