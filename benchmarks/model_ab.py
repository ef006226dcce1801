"""The shared loop of the A/B overlays (benchmarks/barrier_levels.py, benchmarks/dql_keys.py): a
family's model prepared twice on one device, each copy by its own `make` (which plans it under
the setting it compares and says what it counts), then their steady runs timed in interleaved
rounds with the GPU's clock held; one markdown row per family and shape."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import numpy as np

from kompute_dml.bench import families, gpu_clock
from kompute_dml.bench.timing import interleaved, median

# (model path, feeds) -> (the prepared model, planned and run, and its count for the table)
Make = Callable[[str, dict[str, Any]], tuple[Any, str]]


def arguments(doc: str, families_default: str) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--families", default=families_default)
    ap.add_argument("--shapes", default="1x128,8x128")
    ap.add_argument("--size", default="small")
    ap.add_argument("--rounds", type=int, default=15)
    return ap.parse_args()


def table(args: argparse.Namespace, counted: str, makes: dict[str, Make]) -> None:
    """Print the table: per family and shape, each make's count (`counted` names it) and ms per
    run, and the second's time over the first's."""
    (a, b) = makes
    print(f"| family | shape | {counted}: {a} / {b} | {a} ms | {b} ms | {b} / {a} |")
    print("| --- | --- | --- | ---: | ---: | ---: |")
    for name in args.families.split(","):
        path = str(families.build(name, args.size))
        for shape in args.shapes.split(","):
            batch, seq = (int(v) for v in shape.split("x"))
            feeds = families.feeds(name, batch, seq, np.random.default_rng(0), args.size)
            made = {k: make(path, feeds) for k, make in makes.items()}
            outs = [made[k][0].run(feeds) for k in (a, b)]
            same = all(np.array_equal(x, y) for x, y in zip(*outs))
            runs = {k: (lambda r=rep, f=feeds: r.run(f)) for k, (rep, _) in made.items()}
            gpu_clock.hold(runs[a], gpu_clock.WARM_SECONDS)
            t = {k: median(v) * 1e3 for k, v in interleaved(runs, args.rounds, warmup=3, prime=True).items()}
            print(f"| {name} | {shape} | {made[a][1]} / {made[b][1]} | {t[a]:.3f} | {t[b]:.3f} | {t[b] / t[a]:.3f} |"
                  + ("" if same else " (outputs differ)"), flush=True)
            for rep, _ in made.values():
                rep.release()
