"""One GPU, many callers (issue 55): batch-1 requests from --threads threads through
kompute_dml.serving.Batcher against one thread calling `rep.run` request by request, with a
single batch-of-max_batch run beside them for the latency bound.

    python -m kompute_dml.bench.batcher [--model bert256] [--seq 128] [--threads 8] [--max-batch 8]
        [--max-delay-ms 0,2] [--seconds 5]

`kompute-dml bench --scaling` runs it after kompute_dml.bench.scaling (torch exports the model).

Prints requests/s both ways and their ratio, the ratio's ceiling (max_batch requests per batch
run against one request per run: what a batcher without overhead reaches), the batcher's p50 /
p99 latency per request and both as multiples of one batch-of-max_batch run (median), the batches
the batcher ran, and where its worker's time went per batch: in `rep.run`, and gathering the next
batch (`Batcher.stats`). --seq takes a list: one row per length. The
model is a float32 random BERT (quantized models scale a batch as one: docs/serving.md), warmed
for kompute_dml.bench.gpu_clock.WARM_SECONDS before each figure.
"""

from __future__ import annotations

import argparse
import threading
import time
from typing import Any

import numpy as np

from .scaling import MODELS


def main(argv: list[str] | None = None) -> None:
    from ..onnx_backend import Backend
    from .bert_models import build_random_bert, fp32_beside

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="bert256", choices=sorted(MODELS))
    ap.add_argument("--seq", default="128", help="comma-separated sequence lengths, one row each")
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--max-batch", type=int, default=8)
    ap.add_argument("--max-delay-ms", default="0,2", help="comma-separated Batcher max_delay_ms values, one row each "
                    "(0: a batch of what waits starts as soon as the device is free)")
    ap.add_argument("--seconds", type=float, default=5.0)
    args = ap.parse_args(argv)
    rep = Backend.prepare(str(fp32_beside(build_random_bert(*MODELS[args.model]))))  # (its float32 export)
    print(f"{args.model} float32, batch-1 requests on {rep.device.name}; {args.threads} threads, "
          f"max_batch {args.max_batch}")
    print("| seq | max_delay_ms | one thread, rep.run req/s | batcher req/s | x one thread | ceiling | p50 ms | p99 ms | batch run ms "
          "| p99 / batch run | batches | worker per batch: run / gather ms |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for seq in map(int, args.seq.split(",")):
        for delay in map(float, args.max_delay_ms.split(",")):
            _row(rep, seq, delay, args)


def _row(rep: Any, seq: int, delay: float, args: Any, make: Any = None, label: str | None = None) -> None:
    """One row: `seq`-token requests through a Batcher of max_delay_ms `delay` (`make`: another Batcher
    class, a benchmark overlay's; `label`: the row's delay column then)."""
    from ..serving import Batcher
    from .bert_models import random_feeds
    from .gpu_clock import WARM_SECONDS, hold
    from .timing import median, once, percentile

    one = random_feeds(1, seq, 1000, np.random.default_rng(0), pad=False)
    batch = {k: np.repeat(v, args.max_batch, axis=0) for k, v in one.items()}
    hold(lambda: rep.run(batch), WARM_SECONDS)
    batch_ms = median([once(lambda: rep.run(batch)) for _ in range(50)]) * 1e3
    hold(lambda: rep.run(one), WARM_SECONDS)
    alone = hold(lambda: rep.run(one), args.seconds) / args.seconds
    latencies: list[float] = []
    lock = threading.Lock()
    with (make or Batcher)(rep, max_batch=args.max_batch, max_delay_ms=delay) as batcher:
        hold(lambda: batcher.submit(one).result(), WARM_SECONDS)
        before = dict(batcher.stats)
        stop = time.perf_counter() + args.seconds

        def caller() -> None:
            mine = []
            while time.perf_counter() < stop:
                t0 = time.perf_counter()
                batcher.submit(one).result()
                mine.append(time.perf_counter() - t0)
            with lock:
                latencies.extend(mine)

        ts = [threading.Thread(target=caller) for _ in range(args.threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        got = {k: batcher.stats[k] - before[k] for k in before}
    rate = len(latencies) / args.seconds
    ceiling = args.max_batch / (batch_ms / 1e3) / alone
    p50, p99 = percentile(latencies, 50) * 1e3, percentile(latencies, 99) * 1e3
    n = max(1, got["batches"])
    print(f"| {seq} | {label or f'{delay:g}'} | {alone:.0f} | {rate:.0f} | {rate / alone:.2f} | {ceiling:.2f} | {p50:.2f} | {p99:.2f} | "
          f"{batch_ms:.2f} | {p99 / batch_ms:.2f} | {got['batches']:.0f} | "
          f"{got['run_s'] / n * 1e3:.3f} / {got['gather_s'] / n * 1e3:.3f} |", flush=True)


if __name__ == "__main__":
    main()
