"""The pipelines a model's first run compiles, each call timed: which shaders a cold driver cache
makes a first run wait for. Run it in a fresh process with an empty pipeline cache and the NVIDIA
driver's shader cache off; to see each pipeline's own time, one compile at a time and each flush
compiling its own (as before the plan's flushes waited for their pipelines: runtime/plan_flush.py):

    __GL_SHADER_DISK_CACHE=0 KDML_CACHE_DIR=$(mktemp -d) KDML_PIPELINE_THREADS=1 KDML_PLAN_FLUSH_COMPILING=1 \\
        python -m benchmarks.pipeline_compiles --family whisper-encoder-fp16 [--shape 8x128]

One line per Programs.prepare_many call that made pipelines (the variants it made, milliseconds),
after the first run's wall time and its planning time.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--family", default="whisper-encoder-fp16", help="a family of kompute_dml.bench.families")
    ap.add_argument("--size", default="small")
    ap.add_argument("--shape", default="8x128", help="batch x sequence of the first run")
    args = ap.parse_args()
    from kompute_dml.bench import families
    from kompute_dml.onnx_backend import Backend
    from kompute_dml.runtime.pipelines import Programs

    b, s = (int(v) for v in args.shape.split("x"))
    path = families.build(args.family, args.size)
    feeds = families.feeds(args.family, b, s, np.random.default_rng(0), args.size)
    calls: list[tuple[list[str], float]] = []
    many = Programs.prepare_many

    def timed(self: Any, plans: Any, threads: int) -> int:
        todo = sorted({p.variant for p in plans if not self.has(p)})
        t0 = time.perf_counter()
        made = many(self, plans, threads)
        if made:
            calls.append((todo, time.perf_counter() - t0))
        return made

    Programs.prepare_many = timed  # type: ignore[method-assign]
    rep = Backend.prepare(str(path), "CPU")
    t0 = time.perf_counter()
    rep.run(feeds)
    print(f"{args.family} {args.shape}: first run {(time.perf_counter() - t0) * 1e3:.0f} ms, "
          f"planning {rep.last_run.plan_seconds * 1e3:.0f} ms")
    for variants, seconds in calls:
        print(f"  {seconds * 1e3:8.1f} ms  {', '.join(variants)}")


if __name__ == "__main__":
    main()
