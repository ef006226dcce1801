"""Serving one prepared model to many callers: `Batcher`, a dynamic batcher (docs/serving.md).

`BackendRep.run` is safe from any number of threads (one run at a time per prepared model:
`rep.state.lock`); small requests then pay a whole run each. A Batcher gathers requests along
the batch axis (axis 0 of every input) up to `max_batch` rows or until the oldest waiting
request has waited `max_delay_ms`, runs them as one batch and hands each request its rows of
every output, in order (the worker wakes only to start a deadline or when a batch is full, not
at every request: each wake-up is a GIL hand-over that delays the batch). The default delay, 0,
runs what waits as soon as the device is free: the requests that came during a run form the next
batch (docs/serving.md measures both):

    with Batcher(rep, max_batch=8) as batcher:
        future = batcher.submit({"input_ids": ids, "attention_mask": mask})   # batch 1 each
        outputs = future.result()          # rep.run's outputs, this request's rows

Only requests of one signature (input names, dtypes, every size but the batch axis) share a
batch; requests of others wait for a batch of their own, in arrival order. A request that
rep.check_inputs refuses fails its own future at submit. A batch whose run fails, or whose
outputs do not all have the batch's rows on axis 0, is run again request by request, so an
error reaches only the request that causes it. `close()` runs what is pending (or, with
`cancel_pending=True`, cancels it) and stops the worker thread; a submit after it raises.

A request's rows equal its run alone where the model computes every row by itself (float
encoders: products, normalizations and softmax are per row); dynamically quantized models
quantize a whole batch with one scale, so their rows depend on their batch-mates.
"""

from __future__ import annotations

import collections
import itertools
import queue
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(eq=False)
class _Request:
    feeds: dict[str, np.ndarray]
    rows: int
    key: tuple[Any, ...]
    future: Future[Any]
    arrived: float = field(default_factory=time.monotonic)


class Batcher:
    """Dynamic batching of requests to one prepared model (`rep`: a BackendRep, or anything
    with its `run(feeds)`, `feed_names` and `check_inputs(feeds)`). `max_batch`: the most rows
    one batch takes (a larger request runs alone); `max_delay_ms`: how long the oldest waiting
    request waits for others. `stats`: batches and requests run so far, and the worker's seconds
    in `rep.run` (`run_s`) and waiting for a batch to fill (`gather_s`)."""

    def __init__(self, rep: Any, max_batch: int = 8, max_delay_ms: float = 0.0, *, name: str = "kdml-batcher") -> None:
        if isinstance(max_batch, bool) or not isinstance(max_batch, int) or max_batch < 1:
            raise ValueError(f"max_batch: must be an integer >= 1, got {max_batch!r}")
        if not isinstance(max_delay_ms, (int, float)) or not max_delay_ms >= 0:
            raise ValueError(f"max_delay_ms: must be a number >= 0, got {max_delay_ms!r}")
        self.rep, self.max_batch, self.max_delay = rep, max_batch, max_delay_ms / 1000.0
        self.stats: dict[str, float] = {"batches": 0, "requests": 0, "rerun_alone": 0, "run_s": 0.0, "gather_s": 0.0}
        self._queue: collections.deque[_Request] = collections.deque()
        self._rows: collections.Counter[tuple[Any, ...]] = collections.Counter()  # waiting rows per signature
        self._cond = threading.Condition()
        self._closing = False
        self._cancel = False
        # A second thread hands results back: waking each caller costs the waker tens of us on a
        # VM (an inter-processor interrupt per thread), time the worker spends running the next batch
        # (request, its result, whether that is an exception) per request of a batch, in order
        self._handback: queue.SimpleQueue[list[tuple[_Request, Any, bool]] | None] = queue.SimpleQueue()
        self._answerer = threading.Thread(target=self._hand_back, name=f"{name}-results", daemon=True)
        self._answerer.start()
        self._worker = threading.Thread(target=self._serve, name=name, daemon=True)
        self._worker.start()

    # ---- callers ------------------------------------------------------------------
    def submit(self, feeds: Mapping[str, Any] | Sequence[Any]) -> Future[Any]:
        """Queue one request (a dict of input name -> array, or arrays in `rep.feed_names`
        order; axis 0 is the batch axis); the future's result is rep.run's outputs for its rows."""
        future: Future[Any] = Future()
        try:
            named = dict(feeds) if isinstance(feeds, Mapping) else dict(zip(self.rep.feed_names, feeds, strict=True))
            arrays = {n: np.asarray(v) for n, v in named.items()}
            self.rep.check_inputs(arrays)
            sizes = {a.shape[0] if a.ndim else -1 for a in arrays.values()}
            if len(sizes) != 1 or -1 in sizes:
                raise ValueError(f"every input needs the same size on the batch axis (axis 0), got "
                                 f"{ {n: a.shape for n, a in arrays.items()} }")
        except Exception as e:  # the request's own error: its future's
            future.set_exception(e)
            return future
        key = tuple(sorted((n, a.dtype.str, a.shape[1:]) for n, a in arrays.items()))
        with self._cond:
            if self._closing:
                raise RuntimeError("the Batcher is closed: no new requests")
            request = _Request(arrays, sizes.pop(), key, future)
            self._queue.append(request)
            self._rows[key] += request.rows
            first = self._queue[0]
            if first is request or self._rows[first.key] >= self.max_batch:
                self._cond.notify()  # a deadline to start, or a full batch
        return future

    def close(self, cancel_pending: bool = False, timeout: float | None = None) -> None:
        """Stop taking requests; run the pending ones (`cancel_pending`: cancel them) and wait
        for the worker (at most `timeout` seconds)."""
        with self._cond:
            self._closing = True
            self._cancel = self._cancel or cancel_pending
            self._cond.notify_all()
        self._worker.join(timeout)
        self._answerer.join(timeout)

    def __enter__(self) -> Batcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- the worker ------------------------------------------------------------------
    def _serve(self) -> None:
        try:
            while True:
                batch = self._next_batch()
                if batch is None:
                    return
                if batch:
                    self._run(batch)
        finally:
            self._handback.put(None)

    def _hand_back(self) -> None:
        while (answers := self._handback.get()) is not None:
            for r, value, failed in answers:
                if failed:
                    r.future.set_exception(value)
                else:
                    r.future.set_result(value)

    def _next_batch(self) -> list[_Request] | None:
        """The requests of the next batch ([] where all were cancelled), None once closed and empty."""
        t0 = time.perf_counter()
        with self._cond:
            while not self._queue and not self._closing:
                self._cond.wait()
            if self._cancel:
                while self._queue:
                    self._queue.popleft().future.cancel()
                self._rows.clear()
            if not self._queue:
                return None
            first = self._queue[0]
            while not self._closing:
                left = self._deadline(first) - time.monotonic()
                if self._rows[first.key] >= self.max_batch or left <= 0:
                    break
                self._cond.wait(left)
            if self._cancel:
                return []
            batch: list[_Request] = []
            rest: collections.deque[_Request] = collections.deque()
            rows = 0
            for r in self._queue:
                if r.key == first.key and (not batch or rows + r.rows <= self.max_batch):
                    batch.append(r)
                    rows += r.rows
                else:
                    rest.append(r)
            self._queue = rest
            self._rows[first.key] -= rows
            if not self._rows[first.key]:
                del self._rows[first.key]
        self.stats["gather_s"] += time.perf_counter() - t0
        return [r for r in batch if r.future.set_running_or_notify_cancel()]

    def _deadline(self, first: _Request) -> float:
        """When the batch led by `first` starts without a full batch (time.monotonic(); benchmark
        overlays change the rule: benchmarks/batcher_refill.py)."""
        return first.arrived + self.max_delay

    def _run(self, batch: list[_Request]) -> None:
        self.stats["batches"] += 1
        self.stats["requests"] += len(batch)
        t0 = time.perf_counter()
        try:
            self._answer(batch)
        finally:
            self.stats["run_s"] += time.perf_counter() - t0

    def _answer(self, batch: list[_Request]) -> None:
        if len(batch) > 1:
            try:
                outs = self.rep.run({n: np.concatenate([r.feeds[n] for r in batch]) for n in batch[0].feeds})
                parts = _split(outs, [r.rows for r in batch])
            except Exception:
                parts = None  # run each alone below: an error reaches only its request
            if parts is not None:
                self._handback.put([(r, p, False) for r, p in zip(batch, parts)])
                return
            self.stats["rerun_alone"] += 1
        answers = []
        for r in batch:
            try:
                answers.append((r, self.rep.run(r.feeds), False))
            except Exception as e:
                answers.append((r, e, True))
        self._handback.put(answers)


def _split(outs: Any, rows: list[int]) -> list[Any] | None:
    """Each request's rows of every output (views), None where an output is not an array with
    the batch's rows on axis 0."""
    total = sum(rows)
    if not all(isinstance(v, np.ndarray) and v.ndim and v.shape[0] == total for v in outs):
        return None
    bounds = np.cumsum([0, *rows])
    parts = [[v[a:b] for v in outs] for a, b in itertools.pairwise(bounds)]
    make = type(outs)
    return [make(*p) if hasattr(outs, "_fields") else make(p) for p in parts]


__all__ = ["Batcher"]
