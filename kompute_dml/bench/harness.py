"""One row of `kompute-dml bench` and its figures, the machine, the latency section (timing:
timing.py). A row's batched contenders share one N (`choose_batch`), so that ours and a GPU
peer amortize their one wait over the same number of executions.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import platform
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .timing import BATCH_TARGET_S, Batched, Make, choose_batch, interleaved, median, repeat

# The CPU device's copy ceiling: numpy.copyto of this many bytes, sampled in the rounds of
# every memory-bound row (a GPU device's ceiling is measured once per run instead).
CEILING_BYTES = 64 << 20


# ---- one row -----------------------------------------------------------------------
@dataclass
class Case:
    """One benchmark row. `ours` is one synchronous execution (`op.execute`); `ours_batch`
    makes N executions in one `dev.record()` (used when the run times ours recorded);
    `peers` are synchronous CPU peers; `gpu_peers` make N launches then wait. `check` and
    `peer_checks` compare outputs with an independent numpy reference after the timing."""

    op: str
    dtype: str
    shape: tuple[int, ...]
    metric: str  # "GB/s" or "GOPS"
    amount: float  # bytes moved (read + written) or operations
    ours: Callable[[], Any] | None
    eager: Callable[[], Any] | None = None
    peers: dict[str, Callable[[], Any]] = field(default_factory=dict)
    check: Callable[[], bool] | None = None
    note: str = ""
    memory_bound: bool = True
    error: str | None = None
    ours_batch: Make | None = None
    gpu_peers: dict[str, Make] = field(default_factory=dict)
    peer_checks: dict[str, Callable[[], bool]] = field(default_factory=dict)
    peer_errors: dict[str, str] = field(default_factory=dict)

    def peer_names(self) -> list[str]:
        return [*self.peers, *self.gpu_peers]


def _unit(metric: str) -> str:
    return "gbps" if metric == "GB/s" else "gops"


def summarize(case: Case, times: dict[str, float], ceiling_gbps: float | None) -> dict[str, Any]:
    """A row's figures from median seconds per execution: throughput of ours and each peer,
    ratios ours / peer (as throughput: > 1 means ours is faster), and for memory-bound rows
    each contender's fraction of the copy ceiling."""
    row: dict[str, Any] = {
        "op": case.op, "dtype": case.dtype, "shape": list(case.shape), "metric": case.metric,
        "amount": case.amount, "note": case.note, "memory_bound": case.memory_bound,
    }
    u = _unit(case.metric)
    names = ["ours", *case.peer_names()]
    for k in names:
        if k in times:
            row[f"{k}_s"] = times[k]
            row[f"{k}_{u}"] = case.amount / times[k] / 1e9
    if "eager" in times:
        row["eager_s"] = times["eager"]
    for p in case.peer_names():
        if "ours_s" in row and f"{p}_s" in row:
            row[f"ratio_{p}"] = row[f"{p}_s"] / row["ours_s"]
    if ceiling_gbps and case.memory_bound:
        row["ceiling_gbps"] = ceiling_gbps
        for k in names:
            if f"{k}_gbps" in row:
                row["fraction_of_ceiling" if k == "ours" else f"fraction_of_ceiling_{k}"] = row[f"{k}_gbps"] / ceiling_gbps
    if case.error:
        row["error"] = case.error
    return row


def run_case(case: Case, rounds: int, ceiling_fn: Callable[[], Any] | None = None, *, recorded: bool = False,
             ceiling_gbps: float | None = None, batch_target: float = BATCH_TARGET_S) -> dict[str, Any]:
    """Time one row. `ceiling_fn` (a CEILING_BYTES copy) is sampled in the row's rounds when
    given; else `ceiling_gbps`, the run's one measurement, is the memory rows' ceiling.
    Batched contenders run N executions per call, N chosen for `batch_target` seconds."""
    errors = dict(case.peer_errors)
    batch: int | None = None
    fns: dict[str, Callable[[], Any]] = {}
    if recorded and case.ours_batch is not None:
        batch = choose_batch(case.ours_batch, batch_target)
        fns["ours"] = Batched(case.ours_batch(batch), batch)
    elif case.ours is not None:
        fns["ours"] = case.ours
    fns.update(case.peers)
    for k, make in case.gpu_peers.items():
        try:
            if batch is None:
                batch = choose_batch(make, batch_target)
            fns[k] = Batched(make(batch), batch)
        except Exception as e:  # a peer that cannot run this row leaves the others' figures
            errors[k] = f"{type(e).__name__}: {e}"
    if case.eager is not None:
        fns["eager"] = case.eager
    for k, f in list(fns.items()):  # one trial call each: a failing peer is reported, not fatal
        if k == "ours":
            continue
        try:
            f()
        except Exception as e:
            errors[k] = f"{type(e).__name__}: {e}"
            del fns[k]
    if ceiling_fn is not None and case.memory_bound:
        fns["ceiling"] = ceiling_fn
    # multi-threaded compute-bound CPU peers: settle between samples (see `interleaved`;
    # OpenBLAS threads spin for about 0.1 s after a call)
    settle = 0.15 if not case.memory_bound and case.peers else 0.0
    samples = interleaved(fns, rounds, settle=settle, steady=True)
    times = {k: median(v) for k, v in samples.items()}
    ceil = 2 * CEILING_BYTES / times["ceiling"] / 1e9 if "ceiling" in times else ceiling_gbps
    row = summarize(case, times, ceil)
    row["timing"] = "recorded" if "ours" in fns and isinstance(fns["ours"], Batched) else "execute"
    if batch is not None:
        row["batch"] = batch
    if case.check is not None and "ours" in fns:
        try:
            row["correct"] = bool(case.check())
        except Exception as e:
            row["correct"] = False
            row["error"] = f"check failed: {e}"
    for k, chk in case.peer_checks.items():
        if k in fns:
            try:
                row.setdefault("peer_correct", {})[k] = bool(chk())
            except Exception as e:
                errors[k] = f"check failed: {type(e).__name__}: {e}"
    if errors:
        row["peer_errors"] = errors
    row["rounds"] = rounds
    return row


# ---- machine -----------------------------------------------------------------------
def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def machine_info(dev: Any) -> dict[str, Any]:
    flags = ""
    with contextlib.suppress(OSError, StopIteration):
        flags = next(line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags"))
    policy = getattr(dev, "policy", None)
    return {
        "cpu_model": _cpu_model(),
        "cpu_cores": os.cpu_count(),
        "cpu_cores_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "cpu_features": [f for f in ("avx2", "avx512f", "avx512_vnni", "avx512vnni") if f" {f}" in flags],
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "device": dev.name,
        "device_type": getattr(dev, "device_type", None),
        "policy": policy.describe() if policy is not None else None,
        "feature_level": dev.feature_level.name,
        "kp": version("kp"),
        "kompute_dml": version("kompute_dml") or version("kompute-dml"),
        "numpy": np.__version__,
        "onnxruntime": version("onnxruntime"),
        "onnx": version("onnx"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "env": {k: os.environ[k] for k in ("LP_NUM_THREADS", "LP_NATIVE_VECTOR_WIDTH", "KDML_TRANSFER", "KDML_FEATURES",
                                           "KDML_MATMUL_KERNEL") if k in os.environ},
    }


EAGER_RUN = 20  # eager executions per back-to-back latency sample


def latency(kdml: Any, dev: Any, reps: int) -> dict[str, Any]:
    """Eager small-op latency and recorded small ops (100 per submission), all in the same
    interleaved rounds. Eager: per call of EAGER_RUN back-to-back executions (what a loop of
    eager calls sees; the torch peer's copy_ + synchronize is timed the same way), and one
    call right after a recording of 100 (the first submission after another costs more: the
    driver is still finishing the previous one)."""
    a = np.ones((64, 64), np.float32)
    x = dev.tensor(a)
    y = dev.empty(x.desc)
    op = dev.compile(kdml.ActivationIdentityDesc(x.desc, y.desc))
    outs = [dev.empty(x.desc) for _ in range(100)]
    chain = [x, *outs]

    def rec_same() -> None:
        with dev.record() as r:
            for _ in range(100):
                r.execute(op, [x], [y])

    def rec_distinct() -> None:
        with dev.record() as r:
            for o in outs:
                r.execute(op, [x], [o])

    def rec_chain() -> None:  # each reads what the previous wrote: a barrier before each
        with dev.record() as r:
            for i in range(100):
                r.execute(op, [chain[i]], [chain[i + 1]])

    s = interleaved({  # a round ends with a recording: the first sample of the next comes after it
        "eager_after_recording": lambda: op.execute([x], [y]),
        "eager_execute": repeat(lambda: op.execute([x], [y]), EAGER_RUN),
        "eager_functional": lambda: kdml.identity(x),
        "recorded_100_same_output": rec_same,
        "recorded_100_distinct_outputs": rec_distinct,
        "recorded_100_chain": rec_chain,
    }, reps, target=0)
    m = {k: median(v) for k, v in s.items()}
    return {
        "op": "ACTIVATION_IDENTITY float32 64x64",
        "eager_execute_us": m["eager_execute"] * 1e6,
        "eager_after_recording_us": m["eager_after_recording"] * 1e6,
        "eager_functional_us": m["eager_functional"] * 1e6,
        "recorded_per_op_us_same_output": m["recorded_100_same_output"] * 1e6 / 100,
        "recorded_per_op_us_distinct_outputs": m["recorded_100_distinct_outputs"] * 1e6 / 100,
        "recorded_per_op_us_chain": m["recorded_100_chain"] * 1e6 / 100,
        "reps": reps,
    }
