"""Several prepared models on one device, a thread each, against one of them alone (issue 55:
concurrent callers on one GPU): runs per second of the random BERT (hidden 256, 3 layers) from
one thread, then from N threads at once (each its own prepared copy), after a warm-up of every
copy (kompute_dml.bench.gpu_clock). A device runs one submission at a time, so N threads gain
only what one run's host work (writing inputs, the plan lookup, submitting, copying outputs)
overlaps with another's device time: the thread that submitted a run waits for it after the
engine's lock (runtime/inflight.py). `kompute-dml bench --scaling` runs it after the GPUs'
scaling; benchmarks/shared_device.py is the overlay with every wait made under the lock.

    python -m kompute_dml.bench.shared_device [--copies 2] [--shapes 1x16,1x128,8x128,64x256] [--seconds 2]
"""

from __future__ import annotations

import argparse
import functools
import threading

import numpy as np

import kompute_dml as kdml
from kompute_dml.bench.bert_models import build_random_bert, random_feeds
from kompute_dml.bench.gpu_clock import hold, sm_clock_mhz
from kompute_dml.onnx_backend import Backend


def together(reps: list, feeds: list, seconds: float) -> tuple[list[int], int | None]:
    """Runs of each copy from a thread each, started together, in `seconds`; the SM clock meanwhile."""
    counts = [0] * len(reps)
    start = threading.Barrier(len(reps))

    def go(k: int) -> None:
        start.wait()
        counts[k] = hold(functools.partial(reps[k].run, feeds[k]), seconds)

    threads = [threading.Thread(target=go, args=(k,)) for k in range(len(reps))]
    for t in threads:
        t.start()
    mhz = sm_clock_mhz()
    for t in threads:
        t.join()
    return counts, mhz


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--copies", type=int, default=2, help="prepared copies of the model, a thread each")
    ap.add_argument("--shapes", default="1x16,1x128,8x128,64x256")
    ap.add_argument("--seconds", type=float, default=2.0)
    args = ap.parse_args(argv)
    path = str(build_random_bert(256, 3, 4))
    dev = kdml.default_device()
    reps = [Backend.prepare(path, kdml_device=dev) for _ in range(args.copies)]
    print(f"{dev.name}; {args.copies} copies of bert256, a thread each, against one thread")
    print("| batch x seq | one thread runs/s | threads runs/s | x one thread | per thread | SM MHz |")
    print("| --- | --- | --- | --- | --- | --- |")
    for shape in args.shapes.split(","):
        batch, seq = (int(v) for v in shape.split("x"))
        feeds = [random_feeds(batch, seq, 1000, np.random.default_rng(k)) for k in range(len(reps))]
        for rep, f in zip(reps, feeds):
            hold(functools.partial(rep.run, f), 1.0)
        one = hold(functools.partial(reps[0].run, feeds[0]), args.seconds) / args.seconds
        counts, mhz = together(reps, feeds, args.seconds)
        total = sum(counts) / args.seconds
        print(f"| {shape} | {one:.1f} | {total:.1f} | {total / one:.2f} | {' / '.join(str(round(c / args.seconds)) for c in counts)}"
              f" | {mhz if mhz is not None else 'n/a'} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
