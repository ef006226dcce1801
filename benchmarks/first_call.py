"""First calls in a fresh process: compile + first execute of integer products against the
same execute repeated, with the pipeline cache on disk (runtime/disk_cache.py) or without.

    python benchmarks/first_call.py                 # uses KDML_CACHE_DIR (default ~/.cache/kompute_dml)
    KDML_CACHE_DIR=off python benchmarks/first_call.py
    python benchmarks/first_call.py --shapes 4096x4096x4096 512x384x1536

Run it twice with the cache on: the second process reads what the first compiled
(`pipeline_cache_loaded_bytes` in its last line). Prints one line per shape.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import time

import numpy as np

import kompute_dml as kdml


def _desc(m: int, k: int, n: int) -> kdml.MatrixMultiplyIntegerToFloatDesc:
    f32 = kdml.TensorDesc(kdml.DataType.FLOAT32, (1, 1, 1, 1))
    return kdml.MatrixMultiplyIntegerToFloatDesc(
        kdml.TensorDesc(kdml.DataType.INT8, (1, 1, m, k)), f32, None, kdml.TensorDesc(kdml.DataType.INT8, (1, 1, k, n)),
        f32, None, None, kdml.TensorDesc(kdml.DataType.FLOAT32, (1, 1, m, n)),
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", nargs="+", default=["4096x4096x4096", "512x384x1536", "520x384x1536", "128x384x1536"])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--breakdown", action="store_true", help="also time the parts of a first execution")
    args = ap.parse_args()
    t0 = time.perf_counter()
    dev = kdml.Device()
    open_ms = (time.perf_counter() - t0) * 1e3
    rng = np.random.default_rng(0)
    print(f"device {dev.name}: opened in {open_ms:.1f} ms, {json.dumps(dev.stats())}")
    for shape in args.shapes:
        m, k, n = (int(v) for v in shape.split("x"))
        a = dev.tensor(rng.integers(-128, 128, (1, 1, m, k), dtype=np.int8))
        b = dev.tensor(rng.integers(-128, 128, (1, 1, k, n), dtype=np.int8))
        s = dev.tensor(np.array([[[[0.5]]]], np.float32))
        out = dev.empty(kdml.TensorDesc(kdml.DataType.FLOAT32, (1, 1, m, n)))
        ins = [a, s, None, b, s, None, None]
        built = dev.stats()["pipelines_created"]
        t0 = time.perf_counter()
        op = dev.compile(_desc(m, k, n))
        t1 = time.perf_counter()
        op.execute(ins, [out])
        t2 = time.perf_counter()
        steady = []
        for _ in range(args.repeats):
            t3 = time.perf_counter()
            op.execute(ins, [out])
            steady.append(time.perf_counter() - t3)
        st = statistics.median(steady)
        print(f"{shape}: compile {1e3 * (t1 - t0):.2f} ms, first execute {1e3 * (t2 - t1):.2f} ms, "
              f"steady {1e3 * st:.3f} ms, first-call overhead {1e3 * (t2 - t0 - st):.2f} ms, "
              f"pipelines built {dev.stats()['pipelines_created'] - built}")
    if args.breakdown:
        breakdown(dev, rng, args.repeats)
    print(json.dumps(dev.stats()))
    dev.close()


def breakdown(dev: kdml.Device, rng: np.random.Generator, repeats: int) -> None:
    """Where a first execution on new buffers spends its time (a 64^3 product): the binding
    checks, encoding (kp algorithm = descriptor set, kp dispatch), the first run (recorded
    into the engine's shared sequence, run and waited: what a first execution does), then
    what the submission's second run adds (its own kp sequence created and recorded, own
    run 1) and a third (own run 2); then the kp steps alone (a sequence created, an
    algorithm created, a word-completed sequence re-recorded and run, dropping the last
    iteration's own sequence)."""
    from kompute_dml.runtime.encode import encode, record_dispatches

    m = k = n = 64
    op = dev.compile(_desc(m, k, n))
    engine = dev.engine
    names = ("bind", "encode", "first run", "own record", "own run 1", "own run 2", "new sequence",
             "new algorithm", "re-record", "run re-recorded", "drop")
    times: dict[str, list[float]] = {name: [] for name in names}
    scratch = engine.manager.kdml_word_sequence()
    replay = None
    for _ in range(repeats):
        a = dev.tensor(rng.integers(-128, 128, (1, 1, m, k), dtype=np.int8))
        b = dev.tensor(rng.integers(-128, 128, (1, 1, k, n), dtype=np.int8))
        s = dev.tensor(np.array([[[[0.5]]]], np.float32))
        out = dev.empty(kdml.TensorDesc(kdml.DataType.FLOAT32, (1, 1, m, n)))
        clock = [time.perf_counter()]
        replay = None  # the last iteration's submission: its own kp sequence is destroyed here
        clock.append(time.perf_counter())
        bound, _key = op.bind([a, s, None, b, s, None, None], [out])
        clock.append(time.perf_counter())
        with engine.lock:
            replay = engine._encode([(op.plans, bound)])
            clock.append(time.perf_counter())
            engine.first_runs.run(replay)
            clock.append(time.perf_counter())
            replay.own(engine.manager.kdml_word_sequence())
            clock.append(time.perf_counter())
            for _run in range(2):
                replay.run()
                clock.append(time.perf_counter())
            engine.manager.kdml_word_sequence()
            clock.append(time.perf_counter())
            engine.pipelines._entries.clear()  # a new descriptor set for the same buffers
            dispatches = [encode(plan, bound, engine.pipelines, engine.dummy) for plan in op.plans]
            clock.append(time.perf_counter())
            scratch.clear()
            record_dispatches(scratch, dispatches)
            clock.append(time.perf_counter())
            scratch.kdml_run()
            clock.append(time.perf_counter())
        steps = [b - a for a, b in itertools.pairwise(clock)]
        steps = steps[1:] + steps[:1]  # "drop" (the first step) last
        for name, v in zip(names, steps):
            times[name].append(v * 1e6)
    del replay
    print("first execution on new buffers, median us: " + ", ".join(f"{k} {statistics.median(v):.1f}" for k, v in times.items()))
    calls: list[list[float]] = [[], [], []]
    for _ in range(repeats):  # the whole op.execute: first, second and third run on new buffers
        a = dev.tensor(rng.integers(-128, 128, (1, 1, m, k), dtype=np.int8))
        b = dev.tensor(rng.integers(-128, 128, (1, 1, k, n), dtype=np.int8))
        s = dev.tensor(np.array([[[[0.5]]]], np.float32))
        out = dev.empty(kdml.TensorDesc(kdml.DataType.FLOAT32, (1, 1, m, n)))
        for i in range(3):
            t0 = time.perf_counter()
            op.execute([a, s, None, b, s, None, None], [out])
            calls[i].append((time.perf_counter() - t0) * 1e6)
    print("op.execute on new buffers, median us: " + ", ".join(
        f"{name} {statistics.median(v):.1f}" for name, v in zip(("first", "second", "third"), calls)))


if __name__ == "__main__":
    main()
