"""MULTIHEAD_ATTENTION's blocked kernel (FLOAT32) with 64 and with 32 query rows per work group, at
encoder shapes from few work groups to many: the measurements behind
DevicePolicy.attention_blocked32_max_groups (runtime/attention_policy.py). Both variants of one
problem are timed in the same rounds (timing.slopes over N recorded executions); the grid column
counts the work groups at 64 rows (batch x heads x blocks of 64 query rows).

    python -m benchmarks.attention_block_rows [--rounds 5] [--n 20]
"""

from __future__ import annotations

import argparse
import dataclasses

import numpy as np

import kompute_dml as kdml
from kompute_dml.bench.timing import slopes
from kompute_dml.ops.contract import attention as C

from .attention_ablation import problem, recorded

# (batch, heads, query rows = keys, head size)
SHAPES = [(8, 4, 128, 64), (1, 4, 128, 64), (8, 12, 128, 64), (1, 12, 128, 64), (8, 4, 197, 64), (1, 4, 197, 64),
          (32, 12, 197, 64), (64, 4, 256, 64), (8, 4, 64, 64), (1, 4, 64, 32), (8, 8, 128, 32)]


def compiled(dev: kdml.Device, desc: kdml.MultiheadAttentionDesc, rows: int) -> object:
    """The operator with `rows` query rows per work group (C.MHA_BLOCK_ROWS narrowed to it, so the
    kernel takes that variant whatever the grid)."""
    keep = C.MHA_BLOCK_ROWS
    C.MHA_BLOCK_ROWS = (rows,)
    try:
        return dev.compile(desc)
    finally:
        C.MHA_BLOCK_ROWS = keep


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--n", type=int, default=20)
    args = ap.parse_args()
    dev = kdml.Device()
    dev.policy = dataclasses.replace(dev.policy, attention_kernel="blocked")
    rng = np.random.default_rng(0)
    print(f"device: {dev.name}; FLOAT32, us per execution at 64 / 32 query rows per work group")
    for b, h, s, d in SHAPES:
        x, out, desc = problem(dev, rng, b, h, s, np.float32, d)
        ops = {str(rows): compiled(dev, desc, rows) for rows in (64, 32)}
        med = slopes(recorded(dev, ops, x, out), args.rounds, args.n)
        print(f"{b:3d} x {h:2d} heads x {s:3d} rows, d{d}: grid {b * h * -(-s // 64):5d}  {med['64'] * 1e6:8.1f} "
              f"({ops['64'].plans[0].variant}) / {med['32'] * 1e6:8.1f} ({ops['32'].plans[0].variant})  64 / 32 rows: "
              f"{med['64'] / med['32']:.2f}", flush=True)
    dev.close()


if __name__ == "__main__":
    main()
