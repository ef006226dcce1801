"""A model's steady run with its submissions recorded in levels (runtime/encode.levels, the
product's order: each dispatch as early as its hazards allow, a barrier between levels) against
the same dispatches in program order (a barrier before each that conflicts with one since the
last barrier), rounds interleaved: two prepared copies of the model on one device, each
recorded under its own order. ms per run (median), and each order's barriers per run.

    python -m benchmarks.barrier_levels [--families distilbert-int8,gpt2,llama] [--shapes 8x128] [--rounds 15]
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from kompute_dml.bench import families, gpu_clock
from kompute_dml.bench.timing import interleaved, median
from kompute_dml.onnx_backend import Backend
from kompute_dml.runtime import encode
from kompute_dml.runtime.encode import EncodedDispatch


def program_order(dispatches: Sequence[EncodedDispatch]) -> list[list[int]]:
    """Levels in program order: a new level at each dispatch that conflicts with the current one."""
    out: list[list[int]] = []
    written: set[int] = set()
    read: set[int] = set()
    for i, d in enumerate(dispatches):
        if d.skip:
            continue
        if not out or (d.reads & written) or (d.writes & (written | read)):
            out.append([])
            written, read = set(), set()
        out[-1].append(i)
        written |= d.writes
        read |= d.reads
    return out


@contextlib.contextmanager
def ordered_by(fn: Any, counts: list[int]) -> Iterator[None]:
    """Record submissions with `fn`'s levels while the block runs; `counts` gets each submission's barriers."""
    real = encode.levels

    def counted(ds: Sequence[EncodedDispatch]) -> list[list[int]]:
        lv = fn(ds)
        counts.append(max(len(lv) - 1, 0))
        return lv

    encode.levels = counted
    try:
        yield
    finally:
        encode.levels = real


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--families", default="distilbert-int8,gpt2,llama")
    ap.add_argument("--shapes", default="1x128,8x128")
    ap.add_argument("--size", default="small")
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    print("| family | shape | barriers: levels / program order | levels ms | program order ms | program order / levels |")
    print("| --- | --- | --- | ---: | ---: | ---: |")
    for name in args.families.split(","):
        path = str(families.build(name, args.size))
        for shape in args.shapes.split(","):
            batch, seq = (int(v) for v in shape.split("x"))
            feeds = families.feeds(name, batch, seq, np.random.default_rng(0), args.size)
            reps, barriers = {}, {}
            for label, fn in (("levels", encode.levels), ("program order", program_order)):
                counts: list[int] = []
                with ordered_by(fn, counts):
                    rep = Backend.prepare(path, "CPU")
                    rep.run(feeds)  # the plan (its first run)
                    counts.clear()
                    rep.run(feeds)  # its submissions' own sequences, recorded
                    rep.run(feeds)
                reps[label], barriers[label] = rep, sum(counts)
            runs = {k: (lambda r=r, f=feeds: r.run(f)) for k, r in reps.items()}
            gpu_clock.hold(runs["levels"], gpu_clock.WARM_SECONDS)
            t = {k: median(v) * 1e3 for k, v in interleaved(runs, args.rounds, warmup=3, prime=True).items()}
            print(f"| {name} | {shape} | {barriers['levels']} / {barriers['program order']} | {t['levels']:.3f} | "
                  f"{t['program order']:.3f} | {t['program order'] / t['levels']:.3f} |", flush=True)
            for r in reps.values():
                r.release()


if __name__ == "__main__":
    main()
