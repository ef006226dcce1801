"""A model's steady run with its host copies (the inputs into host-visible memory, the outputs out
of it: runtime/staging.CopyPool) forced into 1, 2 and 4 parts over the device's copy threads, and
the policy's parts (at least PARALLEL_BYTES per part), rounds interleaved. At batch 8 an image
family's input is 4.8 MB. ms per run (median).

    python -m benchmarks.copy_threads [--families mobilenet-v3-small,efficientnet-b0] [--batch 8] [--rounds 15]
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from kompute_dml.bench import families
from kompute_dml.bench.timing import interleaved, median
from kompute_dml.onnx_backend import Backend
from kompute_dml.runtime import staging


def _runner(rep: Any, feeds: dict[str, np.ndarray], parts: int | None) -> Any:
    copies, default = rep.device.engine.staging.copies, staging.PARALLEL_BYTES

    def run() -> None:
        copies.threads = parts or staging.COPY_THREADS
        staging.PARALLEL_BYTES = 1 if parts else default  # forced: every copy in `parts` parts
        try:
            rep.run(feeds)
        finally:
            staging.PARALLEL_BYTES = default

    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--families", default="mobilenet-v3-small,efficientnet-b0")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    print(f"copy threads {staging.COPY_THREADS}, PARALLEL_BYTES {staging.PARALLEL_BYTES}")
    print("| family | input MB | policy's parts | 1 part ms | 2 parts ms | 4 parts ms | policy ms |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name in args.families.split(","):
        rep = Backend.prepare(str(families.build(name, "small")), "CPU")
        feeds = families.feeds(name, args.batch, 128, np.random.default_rng(0), "small")
        nbytes = sum(np.asarray(v).nbytes for v in feeds.values())
        fns = {str(k): _runner(rep, feeds, k) for k in (1, 2, 4)} | {"policy": _runner(rep, feeds, None)}
        t = {k: median(v) * 1e3 for k, v in interleaved(fns, args.rounds, warmup=5, prime=True).items()}
        parts = rep.device.engine.staging.copies.parts(nbytes)
        print(f"| {name} | {nbytes / 1e6:.1f} | {parts} | {t['1']:.3f} | {t['2']:.3f} | {t['4']:.3f} | {t['policy']:.3f} |",
              flush=True)
        rep.release()


if __name__ == "__main__":
    main()
