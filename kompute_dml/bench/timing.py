"""The one timing harness of `kompute-dml bench` and benchmarks/: interleaved rounds of named
callables, warm-up, medians and percentiles.

A contender is a callable that does its work and returns when the work is complete. A
synchronous call (numpy, onnxruntime, an eager `op.execute`) is one execution; a `Batched`
contender does `count` executions per call and waits once at the end (N executions in one
`dev.record()`; N CUDA launches then a synchronize), and its figure is the time per execution.
GPU work that returns before it completes (torch) is made synchronous by `sync`
(`torch.cuda.synchronize`): `repeat(step, n, sync)` is N launches then one wait.

Contenders are sampled round-robin, so that a shared machine's noise hits every one alike.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

Make = Callable[[int], Callable[[], Any]]  # N -> a callable doing N executions, then waiting

# A batch lasts about this long: one submission's or synchronize's fixed cost (~0.6 ms for a
# kp eval on the H100) then weighs about 3% of a sample.
BATCH_TARGET_S = 0.02
BATCH_MIN = 2
BATCH_MAX = 256
# With `steady`, a callable shorter than this gets one untimed call right before each of its
# samples (see `interleaved`).
STEADY_BELOW_S = 5e-3


class Batched:
    """A callable doing `count` executions per call (see the module docstring)."""

    def __init__(self, fn: Callable[[], Any], count: int) -> None:
        self.fn = fn
        self.count = count

    def __call__(self) -> None:
        self.fn()


def repeat(step: Callable[[], Any], count: int, sync: Callable[[], Any] | None = None) -> Batched:
    """`count` calls of `step`, then `sync()` once: N asynchronous launches and one wait."""
    def call() -> None:
        for _ in range(count):
            step()
        if sync is not None:
            sync()
    return Batched(call, count)


def repeater(step: Callable[[], Any], sync: Callable[[], Any] | None = None) -> Make:
    """The Make of `repeat`: N -> N calls of `step` then `sync()`."""
    return lambda count: repeat(step, count, sync)


# ---- statistics ----------------------------------------------------------------------------
def median(xs: Any) -> float:
    xs = list(xs)
    return float(np.median(xs)) if xs else float("nan")


def percentile(xs: Any, q: float) -> float:
    xs = list(xs)
    return float(np.percentile(xs, q)) if xs else float("nan")


def medians(samples: dict[str, list[float]]) -> dict[str, float]:
    return {k: median(v) for k, v in samples.items()}


def stats(xs: list[float]) -> dict[str, float]:
    """median, p10, p90, min, max of `xs`."""
    return {"median": median(xs), "p10": percentile(xs, 10), "p90": percentile(xs, 90),
            "min": float(min(xs)) if xs else float("nan"), "max": float(max(xs)) if xs else float("nan")}


# ---- sampling ------------------------------------------------------------------------------
def series(fn: Callable[[], Any], count: int, *, warmup: int = 0, per: int = 1,
           sync: Callable[[], Any] | None = None) -> list[float]:
    """Seconds per call of `count` samples back to back, each of `per` calls (then `sync()`)."""
    for _ in range(warmup):
        fn()
    if sync is not None:
        sync()
    out = []
    for _ in range(count):
        t0 = time.perf_counter()
        for _ in range(per):
            fn()
        if sync is not None:
            sync()
        out.append((time.perf_counter() - t0) / per)
    return out


def once(fn: Callable[[], Any], sync: Callable[[], Any] | None = None) -> float:
    """Seconds of one call (a first run: nothing warmed up)."""
    return series(fn, 1, sync=sync)[0]


def clocked(fn: Callable[..., Any], sink: Callable[[float], Any]) -> Callable[..., Any]:
    """`fn`, each call's seconds passed to `sink`: a part of a run, timed inside it."""
    def call(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            sink(time.perf_counter() - t0)
    return call


class Stopwatch:
    """A span opened and closed by callbacks (gc.callbacks' start and stop): `stop()` returns
    the seconds since `start()`; `lap()` those since the last start or lap (steps in a row)."""

    def __init__(self) -> None:
        self.t0 = time.perf_counter()

    def start(self) -> None:
        self.t0 = time.perf_counter()

    def stop(self) -> float:
        return time.perf_counter() - self.t0

    def lap(self) -> float:
        t, self.t0 = self.t0, time.perf_counter()
        return self.t0 - t


def _calibrate(fn: Callable[[], Any], target: float) -> tuple[int, float]:
    """(calls per sample, seconds of one call)."""
    t0 = time.perf_counter()
    fn()
    dt = time.perf_counter() - t0
    return int(min(1000, max(1, target / max(dt, 1e-7)))), dt


def interleaved(fns: dict[str, Callable[[], Any]], rounds: int, warmup: int = 2, target: float = 3e-4,
                settle: float = 0.0, steady: bool = False, rotate: bool = False, prime: bool = False) -> dict[str, list[float]]:
    """Seconds per execution of each callable: `rounds` samples each, taken round-robin. A
    sample repeats its callable until it lasts about `target` (target=0: one call), so the
    timer's resolution does not matter for microsecond calls. `settle` seconds of sleep before
    each sample let the previous contender's worker threads (onnxruntime's and OpenBLAS's spin
    after a call; lavapipe's do not) stop competing for the cores. `rotate`: each round starts
    one contender later, so that none always follows the same one (another API's GPU work).

    `steady`: time back-to-back executions. A sample otherwise starts right after the other
    contenders' (on a CPU device, a 64 MiB numpy copy), when lavapipe's worker threads have
    gone to sleep: a 64x64 identity read 60-180 us/op against 8-11 us back to back. So each
    callable shorter than STEADY_BELOW_S gets one untimed call before each of its samples;
    `prime`: every callable does."""
    for f in fns.values():
        for _ in range(warmup):
            f()
    inner, warm = {}, {}
    for k, f in fns.items():
        if steady:
            f()
        inner[k], dt = _calibrate(f, target)
        warm[k] = prime or (steady and dt < STEADY_BELOW_S)
    samples: dict[str, list[float]] = {k: [] for k in fns}
    names = list(fns)
    for r in range(rounds):
        shift = r % len(names) if rotate and names else 0
        for k in names[shift:] + names[:shift]:
            f, n = fns[k], inner[k]
            if settle:
                time.sleep(settle)
            if warm[k]:
                f()
            t0 = time.perf_counter()
            for _ in range(n):
                f()
            samples[k].append((time.perf_counter() - t0) / (n * getattr(f, "count", 1)))
    return samples


def batched(makes: dict[str, Make], rounds: int, target: float = 0.05, limit: int = 200) -> dict[str, float]:
    """Median seconds per execution of each make(N), N chosen from one timed make(1) so that a
    call lasts about `target`; one call per sample, rounds rotated (`interleaved`)."""
    fns: dict[str, Callable[[], Any]] = {}
    for name, make in makes.items():
        one = make(1)
        one()
        n = int(min(limit, max(2, target / max(once(one), 1e-6))))
        fns[name] = Batched(make(n), n)
    return medians(interleaved(fns, rounds, warmup=1, target=0, rotate=True))


def slopes(runs: dict[str, Callable[[int], Any]], rounds: int, n: int | dict[str, int], warmup: int = 2,
           prime: bool = True) -> dict[str, float]:
    """Median seconds per execution of each run(k) (k executions, then a wait) as the slope
    (t(n) - t(1)) / (n - 1): one submission's or synchronize's fixed cost cancels. `n`: one for
    all, or per run. Rounds round-robin over the runs; `prime` (the default): each timed call is
    the second of two (the first after another contender's work pays a context switch: on the
    H100 a recording timed right after torch's CUDA work read about 9 us low per execution,
    device calls 210 and 213)."""
    ns = n if isinstance(n, dict) else dict.fromkeys(runs, n)
    fns: dict[str, Callable[[], Any]] = {}
    for name, run in runs.items():
        run(warmup)
        fns[f"{name}/1"] = lambda run=run: run(1)
        fns[f"{name}/n"] = lambda run=run, k=ns[name]: run(k)
    s = interleaved(fns, rounds, warmup=0, target=0, prime=prime)
    return {name: median(max(b - a, 1e-9) / (ns[name] - 1) for a, b in zip(s[f"{name}/1"], s[f"{name}/n"]))
            for name in runs}


def batch_count(seconds: float, executions: int, target: float = BATCH_TARGET_S) -> int:
    """Executions per batch so that a batch lasts about `target`, given that `executions`
    took `seconds`; within [BATCH_MIN, BATCH_MAX]."""
    per = seconds / max(executions, 1)
    return int(min(BATCH_MAX, max(BATCH_MIN, round(target / max(per, 1e-9)))))


def choose_batch(make: Make, target: float = BATCH_TARGET_S) -> int:
    """N for a row: grow a trial batch (x4) until it lasts half the target, then scale. The
    first call of each trial size records and compiles; the second is timed."""
    n = 1
    while True:
        f = make(n)
        f()
        dt = once(f)
        if dt >= target / 2 or n >= BATCH_MAX:
            return batch_count(dt, n, target)
        n = min(BATCH_MAX, n * 4)
