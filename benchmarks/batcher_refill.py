"""A Batcher overlay (not the product's rule): once its worker is free, it waits up to `share` x its
last run for a full batch, the callers it just answered coming back, where the product's
max_delay_ms=0 runs what waits at once. Rows of kompute_dml.bench.batcher's table, the product's
first, then one per share:

    python -m benchmarks.batcher_refill [--shares 0.25,0.5,1] [--seq 128] [--seconds 3]
    python -m benchmarks.batcher_refill --stand-in 600,100,0.1     # no model: a stand-in's run

`--stand-in DEV_US,HOST_US,SLOPE`: instead of the random BERT (which torch exports), a model whose
run holds the GIL HOST_US and then sleeps (the device, the GIL released) DEV_US x (1 + SLOPE x
(rows - 1)): the batcher's own costs (wake-ups, GIL hand-overs) on any host.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from kompute_dml.bench import batcher as bench
from kompute_dml.serving import Batcher


class RefillBatcher(Batcher):
    """The overlay: a batch starts once full or at the product's deadline, and not before `share` x
    the last run has passed since the worker became free."""

    share = 0.5

    def __init__(self, *a: Any, **k: Any) -> None:
        self._free_at = self._last_run = 0.0
        super().__init__(*a, **k)

    def _deadline(self, first: Any) -> float:
        return max(super()._deadline(first), self._free_at + self.share * self._last_run)

    def _run(self, batch: list[Any]) -> None:
        t0 = time.monotonic()
        super()._run(batch)
        self._free_at = time.monotonic()
        self._last_run = self._free_at - t0


class StandIn:
    """A model's run without a model: the GIL held `host` seconds, then `dev` x (1 + slope x (rows - 1))
    asleep; its output the input's rows."""

    feed_names = ["input_ids", "attention_mask"]

    def __init__(self, dev: float, host: float, slope: float) -> None:
        self.dev, self.host, self.slope = dev, host, slope

    def check_inputs(self, feeds: Any) -> None:
        pass

    def run(self, feeds: Any) -> Any:
        end = time.perf_counter() + self.host
        while time.perf_counter() < end:
            pass
        rows = len(feeds["input_ids"])
        time.sleep(self.dev * (1 + self.slope * (rows - 1)))
        return (feeds["input_ids"] * 2,)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shares", default="0.25,0.5,1")
    ap.add_argument("--stand-in", default=None, help="DEV_US,HOST_US,SLOPE: a stand-in model")
    ap.add_argument("--model", default="bert256")
    ap.add_argument("--seq", default="128")
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--max-batch", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=3.0)
    args = ap.parse_args()
    if args.stand_in:
        dev, host, slope = (float(v) for v in args.stand_in.split(","))
        rep: Any = StandIn(dev / 1e6, host / 1e6, slope)
        print(f"stand-in: {dev:g} us asleep (+{slope:g} per row past one), {host:g} us with the GIL; {args.threads} threads")
    else:
        from kompute_dml.bench.bert_models import build_random_bert, fp32_beside
        from kompute_dml.bench.scaling import MODELS
        from kompute_dml.onnx_backend import Backend

        rep = Backend.prepare(str(fp32_beside(build_random_bert(*MODELS[args.model]))))
        print(f"{args.model} float32 on {rep.device.name}; {args.threads} threads")
    print("| seq | max_delay_ms / refill share | one thread, rep.run req/s | batcher req/s | x one thread | ceiling | p50 ms "
          "| p99 ms | batch run ms | p99 / batch run | batches | worker per batch: run / gather ms |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for seq in map(int, args.seq.split(",")):
        bench._row(rep, seq, 0.0, args)
        for share in map(float, args.shares.split(",")):
            made = type("Refill", (RefillBatcher,), {"share": share})
            bench._row(rep, seq, 0.0, args, made, f"refill {share:g}")


if __name__ == "__main__":
    main()
