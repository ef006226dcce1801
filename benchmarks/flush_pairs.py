"""Paired first runs with and without flushing while planning (DevicePolicy.plan_flush_ms,
onnx_impl/device_graph.py), in one process: each round runs one new sequence length per
setting, the settings' order alternating, so that a host whose speed drifts (lent hosts'
plain Python loops vary up to 2x from second to second) reaches both alike. Prints per
setting the median first run and planning, and the median paired difference.

    PYTHONPATH=. python3 benchmarks/flush_pairs.py --model minilm --batch 64 --seq 256 --rounds 8
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import encoder_speed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="minilm", choices=tuple(encoder_speed.MODELS))
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128, help="the first round's sequence length (each round takes the next two)")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--flush-ms", type=float, default=2.0, help="the setting compared with 0 (never)")
    args = ap.parse_args()
    from kompute_dml.onnx_backend import Backend

    model = encoder_speed.load_model(args.model)
    rep = Backend.prepare(str(model.path), "CPU")
    dev = rep.device
    base = dev.policy
    rng = np.random.default_rng(0)
    rep.run(encoder_speed.bert_models.random_feeds(1, 16, model.vocab, rng))
    first: dict[float, list[float]] = {0.0: [], args.flush_ms: []}
    plan: dict[float, list[float]] = {0.0: [], args.flush_ms: []}
    seq = args.seq
    for r in range(args.rounds):
        order = (0.0, args.flush_ms) if r % 2 == 0 else (args.flush_ms, 0.0)
        for ms in order:
            dev.policy = dataclasses.replace(base, plan_flush_ms=ms)
            feeds = encoder_speed.bert_models.random_feeds(args.batch, seq, model.vocab, rng)
            seq += 1
            t0 = time.perf_counter()
            rep.run(feeds)
            first[ms].append((time.perf_counter() - t0) * 1e3)
            plan[ms].append(rep.last_run.plan_seconds * 1e3)
    dev.policy = base
    diffs = [f - n for f, n in zip(first[args.flush_ms], first[0.0])]
    print(f"{args.model} {args.batch} x {args.seq}..{seq - 1}, {args.rounds} rounds")
    for ms in first:
        print(f"  plan_flush_ms={ms:g}: first run median {statistics.median(first[ms]):.1f} ms "
              f"[{min(first[ms]):.1f}-{max(first[ms]):.1f}], planning {statistics.median(plan[ms]):.1f} ms")
    print(f"  paired difference (flushed - not): median {statistics.median(diffs):+.1f} ms "
          f"[{min(diffs):+.1f} .. {max(diffs):+.1f}]")
    rep.release()


if __name__ == "__main__":
    main()
