"""The largest error of MULTIHEAD_ATTENTION's kernels as a fraction of docs/attention.md's bound
(tests/attention_reference.py), over tests/test_attention.py's cases and several seeds, per kernel
and type: `python tools/measure_attention.py [--seeds N]` (the figures docs/attention.md quotes)."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import kompute_dml as kdml


def main() -> None:
    import test_attention as ta

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seeds", type=int, default=4)
    args = ap.parse_args()
    dev = kdml.Device()
    print(f"device: {dev.name}")
    for kernel in ("rows", "tiled", "blocked"):  # (blocked: from one row, as the tests force it)
        dev.policy = dataclasses.replace(dev.policy, attention_kernel=kernel, attention_blocked_min_rows=1)
        for t, dt in ta.FLOATS.items():
            worst, where = 0.0, ""
            for name, case in ta.CASES.items():
                for seed in range(args.seeds):
                    _op, ratio = ta.run_case(dev, np.random.default_rng(seed), case, dt)
                    if ratio > worst:
                        worst, where = ratio, f"{name} seed {seed}"
            print(f"{kernel:7s} {t}: largest error / bound {worst:.4f} ({where})")


if __name__ == "__main__":
    main()
