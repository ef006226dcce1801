"""Where a first run of a new input shape spends its time, function by function (issues 22
and 23): each traced function's own wall time (its time minus that of the traced functions it
called), with the pipelines created, the allocations and Python's garbage collections of each
first run. Wall-clock wrappers, not cProfile: under Python 3.12 cProfile saw the copy threads'
calls (staging.host_copy) in the main thread's profile and its totals did not add up.

Like first_runs.py it prepares the model and runs it once at 1 x 5 (untimed), then times each
shape's first run in this process; run it once before to fill the pipeline cache on disk.

    PYTHONPATH=. python3 benchmarks/first_run_trace.py --model minilm --shapes 1x16,8x128,64x256
"""

from __future__ import annotations

import argparse
import collections
import gc
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import encoder_speed

import kompute_dml as kdml
from kompute_dml import recording
from kompute_dml.onnx_backend import Backend
from kompute_dml.onnx_impl import device_graph, plan_context
from kompute_dml.onnx_impl import rep as rep_mod
from kompute_dml.ops import base
from kompute_dml.runtime import engine, inflight, memory, pipelines, replay, staging

# (owner, method): traced in every call; the handlers are traced per ONNX op type
TRACED = [
    (engine.Engine, "allocate"), (engine.Engine, "write"), (engine.Engine, "read_into"), (engine.Engine, "_encode"),
    (engine.Engine, "start_head"), (engine.Engine, "_launch"), (staging.Staging, "_finish"),
    (pipelines.PipelineCache, "program"), (inflight.InFlight, "finish"), (inflight.InFlight, "start"),
    (replay.Replay, "own"), (recording.Recording, "flush"), (recording.Recording, "compile"),
    (recording.Recording, "execute"), (rep_mod.BackendRep, "_host_node"), (device_graph.GraphPlan, "__init__"),
    (device_graph.GraphPlan, "run"), (plan_context.PlanContext, "out_tensor"), (plan_context.PlanContext, "to_device"),
    (plan_context.PlanContext, "end_node"), (kdml.Device, "compile"), (base.CompiledOperator, "execute"),
    (kdml.TensorDesc, "__post_init__"), (memory.DeviceMemory, "_made"),
]


class Trace:
    """Own wall time per key of the wrapped calls (nested wrapped calls subtracted)."""

    def __init__(self) -> None:
        self.own: collections.defaultdict[str, float] = collections.defaultdict(float)
        self.calls: collections.Counter[str] = collections.Counter()
        self._stack: list[float] = []  # per open call: the time of the traced calls inside it

    def wrap(self, fn: Callable[..., Any], key: str) -> Callable[..., Any]:
        def traced(*a: Any, **k: Any) -> Any:
            self._stack.append(0.0)
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                spent = time.perf_counter() - t0
                self.own[key] += spent - self._stack.pop()
                self.calls[key] += 1
                if self._stack:
                    self._stack[-1] += spent
        return traced

    def time_all(self, fn: Callable[[], Any]) -> float:
        """Run fn, returning its seconds; what no traced call covered is '(the rest)'."""
        self.own.clear()
        self.calls.clear()
        self._stack.append(0.0)
        t0 = time.perf_counter()
        fn()
        total = time.perf_counter() - t0
        self.own["(the rest)"] = total - self._stack.pop()
        return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="minilm", choices=encoder_speed.MODELS)
    ap.add_argument("--shapes", type=encoder_speed.parse_shapes, default=encoder_speed.parse_shapes("1x16,8x128,64x256"))
    ap.add_argument("--top", type=int, default=25, help="rows per first run")
    args = ap.parse_args()
    trace = Trace()
    for owner, name in TRACED:
        setattr(owner, name, trace.wrap(getattr(owner, name), f"{owner.__name__}.{name}"))
    handler_for = rep_mod.BackendRep.handler_for
    rep_mod.BackendRep.handler_for = lambda self, node: trace.wrap(handler_for(self, node), f"handler {node.op_type}")
    created: list[tuple[float, str]] = []  # (ms, variant) of the pipelines a first run created
    program = pipelines.PipelineCache.program

    def noting_program(self: Any, plan: Any) -> int:
        new = (plan.variant, plan.spec, len(plan.push), len(plan.bindings)) not in self._programs
        t0 = time.perf_counter()
        handle = program(self, plan)
        if new:
            created.append(((time.perf_counter() - t0) * 1e3, plan.variant))
        return handle

    pipelines.PipelineCache.program = noting_program
    allocated: list[tuple[float, float]] = []  # (ms, MiB)
    allocate = engine.Engine.allocate

    def noting_allocate(self: Any, words: int, zeroed: bool = True, later: bool = False) -> Any:
        t0 = time.perf_counter()
        memory = allocate(self, words, zeroed, later)
        allocated.append(((time.perf_counter() - t0) * 1e3, words * 4 / 2**20))
        return memory

    engine.Engine.allocate = noting_allocate
    collected: list[tuple[int, float]] = []  # (generation, ms)
    gc_start = [0.0]

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            gc_start[0] = time.perf_counter()
        else:
            collected.append((info["generation"], (time.perf_counter() - gc_start[0]) * 1e3))

    gc.callbacks.append(on_gc)
    model = encoder_speed.load_model(args.model)
    rep = Backend.prepare(str(model.path), "CPU")
    rep.run(encoder_speed.bert_models.random_feeds(1, 5, model.vocab, np.random.default_rng(0)))
    for b, s in args.shapes:
        feeds = encoder_speed.bert_models.random_feeds(b, s, model.vocab, np.random.default_rng([0, b, s]))
        created.clear()
        allocated.clear()
        collected.clear()
        total = trace.time_all(lambda f=feeds: rep.run(f))
        print(f"{args.model} {b}x{s}: first run {total * 1e3:.1f} ms, planning {rep.last_run.plan_seconds * 1e3:.1f} ms")
        for key, own in sorted(trace.own.items(), key=lambda kv: -kv[1])[: args.top]:
            print(f"  {own * 1e3:8.2f} ms  {trace.calls[key]:5d}  {key}")
        print("  pipelines created (ms, variant):", ", ".join(f"{ms:.2f} {v}" for ms, v in created) or "none")
        print(f"  allocations (requests; made later: DeviceMemory._made waits): {len(allocated)}, "
              f"{sum(ms for ms, _ in allocated):.2f} ms, "
              f"{sum(mib for _, mib in allocated):.1f} MiB; largest: "
              + ", ".join(f"{mib:.1f} MiB {ms:.2f} ms" for ms, mib in sorted(allocated, key=lambda x: -x[1])[:3]))
        print("  garbage collections (generation, ms):",
              ", ".join(f"{g} {ms:.2f}" for g, ms in collected) or "none")
    rep.release()


if __name__ == "__main__":
    main()
