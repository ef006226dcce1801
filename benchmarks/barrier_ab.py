"""Barriers that name both stages (compute and transfer) against barriers that name only the
stages on their two sides (DevicePolicy.precise_barriers), interleaved in one process: a chain
of dependent element-wise dispatches and the encoders of benchmarks/encoder_speed.py.

    python benchmarks/barrier_ab.py [--models bert256,minilm] [--shapes 1x16,8x128] [--rounds 5]

Prints per case the median microseconds of each mode and their ratio (precise / both).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import encoder_speed

import kompute_dml as kdml
from kompute_dml.onnx_backend import Backend


def _median_us(fn, n: int) -> float:
    fn()
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def chain(dev: kdml.Device, precise: bool, length: int, elems: int) -> kdml.RecordedProgram:
    dev.engine.precise_barriers = precise
    x = dev.tensor(np.ones(elems, np.float32))
    with dev.capture() as rec:
        t = x
        for _ in range(length):
            t = kdml.add(t, x)
    return rec.compile()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="bert256")
    ap.add_argument("--shapes", type=encoder_speed.parse_shapes, default=encoder_speed.parse_shapes("1x16,8x128"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--runs", type=int, default=20)
    args = ap.parse_args()
    dev = kdml.Device()
    for elems in (1024, 1 << 18):
        progs = {p: chain(dev, p, 100, elems) for p in (False, True)}
        times: dict[bool, list[float]] = {False: [], True: []}
        for _ in range(args.rounds):
            for p, prog in progs.items():
                times[p].append(_median_us(prog.run, args.runs))
        both, precise = (statistics.median(times[p]) for p in (False, True))
        print(f"chain of 100 adds, {elems} floats: both stages {both:.1f} us, precise {precise:.1f} us, "
              f"ratio {precise / both:.3f}")
    for name in args.models.split(","):
        model = encoder_speed.load_model(name)
        for batch, seq in args.shapes:
            feeds = encoder_speed.bert_models.random_feeds(batch, seq, model.vocab, np.random.default_rng(0))
            reps = {}
            for p in (False, True):
                rep = Backend.prepare(str(model.path), "CPU")
                rep.device.engine.precise_barriers = p
                rep.run(feeds)  # plans and records with this mode
                reps[p] = rep
            times = {False: [], True: []}
            for _ in range(args.rounds):
                for p, rep in reps.items():
                    times[p].append(_median_us(lambda r=rep: r.run(feeds), args.runs))
            both, precise = (statistics.median(times[p]) for p in (False, True))
            print(f"{name} {batch}x{seq}: both stages {both:.1f} us, precise {precise:.1f} us, ratio {precise / both:.3f}")
            for rep in reps.values():
                rep.release()
    dev.engine.precise_barriers = dev.policy.precise_barriers


if __name__ == "__main__":
    main()
