"""A quantized encoder's steady run with its normalizations writing the partial keys of their
outputs (handlers_nn.keys_for: each DynamicQuantizeLinear of them one dispatch) against the same
model without (its two dispatches), rounds interleaved: two prepared copies on one device, the
second prepared and planned with keys_for returning None. ms per run (median) and dispatches.

    python -m benchmarks.dql_keys [--families distilbert-int8,roberta-int8] [--shapes 1x128,8x128] [--rounds 15]
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator

import numpy as np

from kompute_dml.bench import families, gpu_clock
from kompute_dml.bench.timing import interleaved, median
from kompute_dml.onnx_backend import Backend, fusions, handlers_nn


@contextlib.contextmanager
def without_keys() -> Iterator[None]:
    """Normalizations write no keys while the block runs (both places that ask for them)."""
    real = handlers_nn.keys_for
    handlers_nn.keys_for = fusions.keys_for = lambda *a, **k: None
    try:
        yield
    finally:
        handlers_nn.keys_for = fusions.keys_for = real


def _dispatches(rep: Backend, feeds: dict) -> int:
    with rep.device.profile() as p:
        rep.run(feeds)
    return len(p.rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--families", default="distilbert-int8,roberta-int8")
    ap.add_argument("--shapes", default="1x128,8x128")
    ap.add_argument("--size", default="small")
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    print("| family | shape | dispatches: keys / none | keys ms | none ms | none / keys |")
    print("| --- | --- | --- | ---: | ---: | ---: |")
    for name in args.families.split(","):
        path = str(families.build(name, args.size))
        for shape in args.shapes.split(","):
            batch, seq = (int(v) for v in shape.split("x"))
            feeds = families.feeds(name, batch, seq, np.random.default_rng(0), args.size)
            keyed = Backend.prepare(path, "CPU")
            keyed.run(feeds)
            with without_keys():
                plain = Backend.prepare(path, "CPU")
                plain.run(feeds)  # planned without keys; its replays record no new work
            wants = [keyed.run(feeds), plain.run(feeds)]
            same = all(np.array_equal(a, b) for a, b in zip(*wants))
            counts = (_dispatches(keyed, feeds), _dispatches(plain, feeds))
            runs = {"keys": lambda r=keyed, f=feeds: r.run(f), "none": lambda r=plain, f=feeds: r.run(f)}
            gpu_clock.hold(runs["keys"], gpu_clock.WARM_SECONDS)
            t = {k: median(v) * 1e3 for k, v in interleaved(runs, args.rounds, warmup=3, prime=True).items()}
            print(f"| {name} | {shape} | {counts[0]} / {counts[1]} | {t['keys']:.3f} | {t['none']:.3f} | "
                  f"{t['none'] / t['keys']:.3f} |" + ("" if same else " (outputs differ!)"), flush=True)
            keyed.release()
            plain.release()


if __name__ == "__main__":
    main()
