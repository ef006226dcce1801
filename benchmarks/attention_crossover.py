"""MULTIHEAD_ATTENTION's blocked kernel against the tiled one over query rows (FLOAT32, head size 64,
keys = queries): the crossover behind `ATTENTION_BLOCKED_MIN_ROWS` (runtime/attention_policy.py).

    python -m benchmarks.attention_crossover [--rounds 3] [--n 10]
"""

from __future__ import annotations

import argparse
import dataclasses

import numpy as np

import kompute_dml as kdml
from kompute_dml.bench.timing import slopes

from .attention_ablation import problem, recorded

SHAPES = ((8, 12, 8), (8, 12, 16), (8, 12, 24), (8, 12, 32), (8, 12, 48), (8, 12, 64), (1, 12, 64), (1, 12, 128),
          (1, 4, 1500), (32, 12, 197))  # batch, heads, rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--n", type=int, default=10)
    args = ap.parse_args()
    dev = kdml.Device()
    rng = np.random.default_rng(0)
    for b, h, s in SHAPES:
        x, out, desc = problem(dev, rng, b, h, s, np.float32)
        ops = {}
        for kernel in ("blocked", "tiled"):  # (blocked from one row: the policy's threshold is what this measures)
            dev.policy = dataclasses.replace(dev.policy, attention_kernel=kernel, attention_blocked_min_rows=1)
            ops[kernel] = dev.compile(desc)
        med = slopes(recorded(dev, ops, x, out), args.rounds, args.n)
        print(f"{b}x{s} h{h}: blocked {med['blocked'] * 1e6:8.1f} us ({ops['blocked'].plans[0].variant})  tiled "
              f"{med['tiled'] * 1e6:8.1f} us ({ops['tiled'].plans[0].variant})  tiled / blocked "
              f"{med['tiled'] / med['blocked']:.2f}", flush=True)
    dev.close()


if __name__ == "__main__":
    main()
