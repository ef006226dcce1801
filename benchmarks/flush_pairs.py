"""Paired first runs of new sequence lengths under two policy settings, in one process (e.g.
the plan's flushes, DevicePolicy.plan_flush_ms): each round runs one new sequence length per
setting, their order alternating, so that a host whose speed drifts reaches both alike. Prints
per setting the median first run and planning, and the median paired difference (B - A).

    PYTHONPATH=. python3 benchmarks/flush_pairs.py --model minilm --batch 64 --seq 256 --rounds 8 \\
        --a plan_flush_ms=0 --b plan_flush_ms=2
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import encoder_speed


def setting(text: str) -> dict[str, Any]:
    """'field=value,...' of DevicePolicy (numbers; 0/1 for booleans)."""
    out: dict[str, Any] = {}
    for item in filter(None, text.split(",")):
        name, value = item.split("=", 1)
        out[name.strip()] = float(value)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="minilm", choices=tuple(encoder_speed.MODELS))
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128, help="the first round's sequence length (each round takes the next two)")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--a", type=setting, default=setting("plan_flush_ms=0"), help="setting A (default: no flushes)")
    ap.add_argument("--b", type=setting, default=setting("plan_flush_ms=2"), help="setting B")
    args = ap.parse_args()
    from kompute_dml.onnx_backend import Backend

    model = encoder_speed.load_model(args.model)
    rep = Backend.prepare(str(model.path), "CPU")
    dev = rep.device
    base = dev.policy

    def apply(s: dict[str, Any]) -> None:
        fields = {k: type(getattr(base, k))(v) for k, v in s.items()}
        dev.policy = dataclasses.replace(base, **fields)

    rng = np.random.default_rng(0)
    rep.run(encoder_speed.bert_models.random_feeds(1, 16, model.vocab, rng))
    first: dict[str, list[float]] = {"A": [], "B": []}
    plan: dict[str, list[float]] = {"A": [], "B": []}
    seq = args.seq
    for r in range(args.rounds):
        for name in ("A", "B") if r % 2 == 0 else ("B", "A"):
            apply(args.a if name == "A" else args.b)
            feeds = encoder_speed.bert_models.random_feeds(args.batch, seq, model.vocab, rng)
            seq += 1
            t0 = time.perf_counter()
            rep.run(feeds)
            first[name].append((time.perf_counter() - t0) * 1e3)
            plan[name].append(rep.last_run.plan_seconds * 1e3)
    apply({})
    diffs = [b - a for a, b in zip(first["A"], first["B"])]
    print(f"{args.model} {args.batch} x {args.seq}..{seq - 1}, {args.rounds} rounds")
    for name, s in (("A", args.a), ("B", args.b)):
        print(f"  {name} {s}: first run median {statistics.median(first[name]):.1f} ms "
              f"[{min(first[name]):.1f}-{max(first[name]):.1f}], planning {statistics.median(plan[name]):.1f} ms")
    print(f"  paired difference (B - A): median {statistics.median(diffs):+.1f} ms [{min(diffs):+.1f} .. {max(diffs):+.1f}]")
    rep.release()


if __name__ == "__main__":
    main()
