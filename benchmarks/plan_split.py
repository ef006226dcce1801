"""Where the planning of a new input signature goes, without a profiler's overhead: the time
spent inside a few runtime entry points (allocations, descriptor sets, uploads, host memory,
the program's recording) during the first run of --shape after --after, out of its planning.

    PYTHONPATH=. python3 benchmarks/plan_split.py --model minilm --after 1x16 --shape 8x128
"""

from __future__ import annotations

import argparse
import collections
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import encoder_speed

from kompute_dml import device, recording
from kompute_dml.onnx_backend import Backend
from kompute_dml.onnx_impl import device_graph
from kompute_dml.runtime import engine, inflight, pipelines, replay, staging

SPOTS = {  # name -> (owner, attribute)
    "Engine.allocate": (engine.Engine, "allocate"),
    "PipelineCache.get (descriptor sets)": (pipelines.PipelineCache, "get"),
    "Staging.upload": (staging.Staging, "upload"),
    "HostMemory.__init__": (staging.HostMemory, "__init__"),
    "Recording.compile (the program)": (device.Recording, "compile"),
    "Device.compile (operators)": (device.Device, "compile"),
    "shape siblings": (device_graph, "_prepare_siblings"),
    "Recording.flush (heads started while planning)": (recording.Recording, "flush"),
    # after planning: the program's first run
    "run: Engine._encode (recording the program)": (engine.Engine, "_encode"),
    "run: Engine._launch (submission and wait)": (engine.Engine, "_launch"),
    "run: host_copy (outputs to result arrays)": (device_graph, "host_copy"),
    "run: GraphPlan._result_array": (device_graph.GraphPlan, "_result_array"),
}
INNER = {  # timed wherever they are called (inside the spots above too)
    "heads: InFlight.finish (waits)": (inflight.InFlight, "finish"),
    "heads: Replay.own (recording)": (replay.Replay, "own"),
    "heads: InFlight.start (submission)": (inflight.InFlight, "start"),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="minilm", choices=("bert256", "minilm"))
    ap.add_argument("--after", type=encoder_speed.parse_shapes, default=[(1, 16)])
    ap.add_argument("--shape", type=encoder_speed.parse_shapes, default=[(8, 128)])
    args = ap.parse_args()
    import onnx

    model = encoder_speed.load_model(args.model)
    rep = Backend.prepare(onnx.load(str(model.path)), "CPU")
    rng = np.random.default_rng(0)
    for b, s in args.after:
        rep.run(encoder_speed.bert_models.random_feeds(b, s, model.vocab, rng))
    spent: collections.Counter[str] = collections.Counter()
    calls: collections.Counter[str] = collections.Counter()
    depth = [0]

    def timed(name: str, fn):  # outermost calls only (allocate may call itself)
        def wrapper(*a, **k):
            if depth[0]:
                return fn(*a, **k)
            depth[0] += 1
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                spent[name] += time.perf_counter() - t
                calls[name] += 1
                depth[0] -= 1
        return wrapper

    for name, (owner, attr) in SPOTS.items():
        setattr(owner, attr, timed(name, getattr(owner, attr)))
    # inside the recording (not outermost, so timed on their own): new descriptor sets
    nested: collections.Counter[str] = collections.Counter()

    def inner(name: str, fn):
        def wrapper(*a, **k):
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                nested[name] += time.perf_counter() - t
                nested[name + " calls"] += 1
        return wrapper

    for name, (owner, attr) in INNER.items():
        setattr(owner, attr, inner(name, getattr(owner, attr)))
    real_algorithm = rep.device.engine.pipelines.manager.kdml_algorithm
    created: list[str] = []

    class Manager:  # the engine's kp Manager, its descriptor sets and new pipelines timed
        def __getattr__(self, attr: str):
            return getattr(rep.device.engine.pipelines.__dict__["_real_manager"], attr)

        def kdml_algorithm(self, *a):
            t = time.perf_counter()
            try:
                return real_algorithm(*a)
            finally:
                nested["kdml_algorithm (descriptor sets)"] += time.perf_counter() - t
                nested["kdml_algorithm calls"] += 1

        def kdml_prepare_program(self, spirv, *a):
            before = rep.device.stats()["pipelines_created"]
            t = time.perf_counter()
            handle = rep.device.engine.pipelines.__dict__["_real_manager"].kdml_prepare_program(spirv, *a)
            nested["kdml_prepare_program (pipelines)"] += time.perf_counter() - t
            if rep.device.stats()["pipelines_created"] > before:
                created.append(next(v for v, d in rep.device.engine.pipelines._spirv.items() if d is spirv))
            return handle

    cache = rep.device.engine.pipelines
    cache.__dict__["_real_manager"] = cache.manager
    cache.manager = Manager()
    import gc

    def gc_time(phase: str, info: dict) -> None:  # the garbage collector's own time
        if phase == "start":
            gc_time.t0 = time.perf_counter()  # type: ignore[attr-defined]
        else:
            spent["garbage collection"] += time.perf_counter() - gc_time.t0  # type: ignore[attr-defined]
            calls["garbage collection"] += 1

    gc.callbacks.append(gc_time)
    for b, s in args.shape:
        spent.clear()
        calls.clear()
        nested.clear()
        created.clear()
        t0 = time.perf_counter()
        rep.run(encoder_speed.bert_models.random_feeds(b, s, model.vocab, rng))
        total = time.perf_counter() - t0
        plan = rep.last_run.plan_seconds
        print(f"{args.model} {b}x{s} first run {1e3 * total:.1f} ms, planning {1e3 * plan:.1f} ms:")
        in_plan = sum(sec for name, sec in spent.items() if not name.startswith("run: "))
        in_run = sum(sec for name, sec in spent.items() if name.startswith("run: "))
        for name, sec in spent.most_common():
            print(f"  {name:<44} {1e3 * sec:8.2f} ms in {calls[name]} calls")
        print(f"  {'the rest of planning':<44} {1e3 * (plan - in_plan):8.2f} ms")
        print(f"  {'the rest of the first run':<44} {1e3 * (total - plan - in_run):8.2f} ms")
        print(f"  of which new descriptor sets: {1e3 * nested['kdml_algorithm (descriptor sets)']:.2f} ms in "
              f"{nested['kdml_algorithm calls']} calls; pipelines: {1e3 * nested['kdml_prepare_program (pipelines)']:.2f}"
              f" ms, created {len(created)} {created}")
        for name in INNER:
            if nested[name + " calls"]:
                print(f"  {name}: {1e3 * nested[name]:.2f} ms in {nested[name + ' calls']} calls")


if __name__ == "__main__":
    main()
