"""First calls in a fresh process: compile + first execute of integer products against the
same execute repeated, with the pipeline cache on disk (runtime/disk_cache.py) or without.

    python -m benchmarks.first_call                 # uses KDML_CACHE_DIR (default ~/.cache/kompute_dml)
    KDML_CACHE_DIR=off python -m benchmarks.first_call
    python -m benchmarks.first_call --shapes 4096x4096x4096 512x384x1536

Run it twice with the cache on: the second process reads what the first compiled
(`pipeline_cache_loaded_bytes` in its last line). Prints one line per shape.
"""

from __future__ import annotations

import argparse
import json
import statistics
from typing import Any

import numpy as np

import kompute_dml as kdml
from kompute_dml.bench.timing import Stopwatch, once, series


def _desc(m: int, k: int, n: int) -> kdml.MatrixMultiplyIntegerToFloatDesc:
    f32 = kdml.TensorDesc(kdml.DataType.FLOAT32, (1, 1, 1, 1))
    return kdml.MatrixMultiplyIntegerToFloatDesc(
        kdml.TensorDesc(kdml.DataType.INT8, (1, 1, m, k)), f32, None, kdml.TensorDesc(kdml.DataType.INT8, (1, 1, k, n)),
        f32, None, None, kdml.TensorDesc(kdml.DataType.FLOAT32, (1, 1, m, n)),
    )


def first_call(dev: kdml.Device, rng: np.random.Generator, shape: str, repeats: int) -> str:
    """One line: compile, first execute and steady execute of an M x K x N int8 product."""
    m, k, n = (int(v) for v in shape.split("x"))
    a = dev.tensor(rng.integers(-128, 128, (1, 1, m, k), dtype=np.int8))
    b = dev.tensor(rng.integers(-128, 128, (1, 1, k, n), dtype=np.int8))
    s = dev.tensor(np.array([[[[0.5]]]], np.float32))
    out = dev.empty(kdml.TensorDesc(kdml.DataType.FLOAT32, (1, 1, m, n)))
    ins = [a, s, None, b, s, None, None]
    built = dev.stats()["pipelines_created"]
    ops: list[Any] = []
    t_compile = once(lambda: ops.append(dev.compile(_desc(m, k, n))))
    op = ops[0]
    t_first = once(lambda: op.execute(ins, [out]))
    st = statistics.median(series(lambda: op.execute(ins, [out]), repeats))
    return (f"{shape}: compile {1e3 * t_compile:.2f} ms, first execute {1e3 * t_first:.2f} ms, "
            f"steady {1e3 * st:.3f} ms, first-call overhead {1e3 * (t_compile + t_first - st):.2f} ms, "
            f"pipelines built {dev.stats()['pipelines_created'] - built}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", nargs="+", default=["4096x4096x4096", "512x384x1536", "520x384x1536", "128x384x1536"])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--breakdown", action="store_true", help="also time the parts of a first execution")
    args = ap.parse_args()
    devs: list[kdml.Device] = []
    open_ms = once(lambda: devs.append(kdml.Device())) * 1e3
    dev = devs[0]
    rng = np.random.default_rng(0)
    print(f"device {dev.name}: opened in {open_ms:.1f} ms, {json.dumps(dev.stats())}")
    for shape in args.shapes:
        print(first_call(dev, rng, shape, args.repeats))
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
    from kompute_dml.runtime.replay import complete

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
        watch = Stopwatch()
        laps: list[float] = []
        replay = None  # the last iteration's submission: its own kp sequence is destroyed here
        laps.append(watch.lap())
        bound, _key = op.bind([a, s, None, b, s, None, None], [out])
        laps.append(watch.lap())
        with engine.lock:
            replay = engine._encode([(op.plans, bound)])
            laps.append(watch.lap())
            engine.first_runs.run(replay)
            laps.append(watch.lap())
            replay.own(engine.manager.kdml_word_sequence())
            laps.append(watch.lap())
            for _run in range(2):
                complete(replay.seq)
                laps.append(watch.lap())
            engine.manager.kdml_word_sequence()
            laps.append(watch.lap())
            dispatches = [encode(plan, bound, engine.programs, engine.dummy) for plan in op.plans]
            laps.append(watch.lap())
            scratch.clear()
            record_dispatches(scratch, dispatches)
            laps.append(watch.lap())
            scratch.kdml_run()
            laps.append(watch.lap())
        steps = laps[1:] + laps[:1]  # "drop" (the first step) last
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
            calls[i].append(once(lambda a=a, b=b, s=s, out=out: op.execute([a, s, None, b, s, None, None], [out])) * 1e6)
    print("op.execute on new buffers, median us: " + ", ".join(
        f"{name} {statistics.median(v):.1f}" for name, v in zip(("first", "second", "third"), calls)))


if __name__ == "__main__":
    main()
