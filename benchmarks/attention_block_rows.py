"""MULTIHEAD_ATTENTION's blocked kernel (FLOAT32) with 64 and with 32 query rows per work group, at
encoder shapes from few work groups to many: the measurements behind
DevicePolicy.attention_blocked32_max_groups (runtime/attention_policy.py). Each figure is the slope of
N executions of one compiled operator in one recording (timing.slopes); the grid column counts the
work groups at 64 rows (batch x heads x blocks of 64 query rows).

    python -m benchmarks.attention_block_rows [--rounds 5] [--n 20]
"""

from __future__ import annotations

import argparse
import dataclasses

import numpy as np

import kompute_dml as kdml
from kompute_dml.bench.timing import slopes
from kompute_dml.ops.contract import attention as C

# (batch, heads, query rows = keys, head size)
SHAPES = [(8, 4, 128, 64), (1, 4, 128, 64), (8, 12, 128, 64), (1, 12, 128, 64), (8, 4, 197, 64), (1, 4, 197, 64),
          (32, 12, 197, 64), (64, 4, 256, 64), (8, 4, 64, 64), (1, 4, 64, 32), (8, 8, 128, 32)]


def timed(dev: kdml.Device, rows: int, b: int, h: int, s: int, d: int, rounds: int, n: int) -> tuple[float, str]:
    """Seconds per execution with `rows` query rows per work group (C.MHA_BLOCK_ROWS narrowed to it,
    so the kernel takes that variant whatever the grid), and the variant."""
    keep = C.MHA_BLOCK_ROWS
    C.MHA_BLOCK_ROWS = (rows,)
    try:
        x = np.random.default_rng(0).standard_normal((b, s, h * d)).astype(np.float32)
        q, k, v = dev.tensor(x), dev.tensor(x[::-1].copy()), dev.tensor(x * 0.5)
        out = dev.empty(kdml.TensorDesc(kdml.DataType.FLOAT32, (b, s, h * d)))
        op = dev.compile(kdml.MultiheadAttentionDesc(q.desc, k.desc, v.desc, None, None, None, None, None, None, None,
                                                     None, out.desc, None, None, 1 / np.sqrt(d), -1e4, h))
    finally:
        C.MHA_BLOCK_ROWS = keep
    ins = [q, k, v] + [None] * 8
    op.execute(ins, [out, None, None])

    def run(count: int) -> None:
        with dev.record() as rec:
            for _ in range(count):
                rec.execute(op, ins, [out, None, None])

    return slopes({"op": run}, rounds, n)["op"], op.variants[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--n", type=int, default=20)
    args = ap.parse_args()
    dev = kdml.Device()
    dev.policy = dataclasses.replace(dev.policy, attention_kernel="blocked")
    print(f"device: {dev.name}; FLOAT32, us per execution at 64 / 32 query rows per work group")
    for b, h, s, d in SHAPES:
        (t64, v64), (t32, v32) = (timed(dev, r, b, h, s, d, args.rounds, args.n) for r in (64, 32))
        print(f"{b:3d} x {h:2d} heads x {s:3d} rows, d{d}: grid {b * h * -(-s // 64):5d}  {t64 * 1e6:8.1f} ({v64}) / "
              f"{t32 * 1e6:8.1f} ({v32})  64 / 32 rows: {t64 / t32:.2f}", flush=True)
    dev.close()


if __name__ == "__main__":
    main()
