"""Measure AVERAGE_POOLING's (both kernels: a 3x3 window and a global 56x56 one) and
BATCH_NORMALIZATION's errors against float64 numpy on the default device: the worst |error| in
units of u = 2^-24 relative to each module's scale (average: S / divisor with S = sum |x| over
the window; batch norm: |scale * n| + |bias|), float32 outputs.

    PYTHONPATH=. .venv/bin/python tools/measure_pool.py [--trials 20]
"""

from __future__ import annotations

import argparse

import numpy as np

import kompute_dml as kdml

U = 2.0 ** -24


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=20)
    args = ap.parse_args()
    rng, rng_g = np.random.default_rng(0), np.random.default_rng(1)
    worst_avg = worst_bn = worst_gap = 0.0
    for _ in range(args.trials):
        x = (rng.standard_normal((2, 8, 15, 15)) * 10.0 ** rng.integers(-3, 4)).astype(np.float32)
        got = kdml.avg_pool(x, (3, 3), strides=(2, 2), start_padding=(1, 1), end_padding=(1, 1)).numpy().astype(np.float64)
        xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=np.nan)
        win = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))[:, :, ::2, ::2]
        want = np.nanmean(win, axis=(-2, -1))
        scale = np.nanmean(np.abs(win), axis=(-2, -1))
        worst_avg = max(worst_avg, float(np.max(np.abs(got - want) / (scale * U))))
        g = (rng_g.standard_normal((1, 4, 56, 56)) * 10.0 ** rng_g.integers(-3, 4)).astype(np.float32)
        got = kdml.avg_pool(g, (56, 56)).numpy().astype(np.float64)  # the work-group kernel (K >= 256)
        g64 = g.astype(np.float64)
        err = np.abs(got - g64.mean(axis=(2, 3), keepdims=True)) / (np.abs(g64).mean(axis=(2, 3), keepdims=True) * U)
        worst_gap = max(worst_gap, float(np.max(err)))
        c = x.shape[1]
        m, v = rng.standard_normal(c).astype(np.float32), (rng.random(c) * 4 + 1e-3).astype(np.float32)
        s, b = rng.standard_normal(c).astype(np.float32), rng.standard_normal(c).astype(np.float32)
        y = kdml.batch_norm(x, m, v, s, b, epsilon=1e-5).numpy().astype(np.float64)
        r = (1, c, 1, 1)
        n = (x - m.reshape(r).astype(np.float64)) / np.sqrt(v.reshape(r).astype(np.float64) + np.float64(np.float32(1e-5)))
        ref = s.reshape(r) * n + b.reshape(r)
        worst_bn = max(worst_bn, float(np.max(np.abs(y - ref) / ((np.abs(s.reshape(r) * n) + np.abs(b.reshape(r))) * U))))
    print(f"AVERAGE_POOLING 3x3/2 pad 1 (K = 9): worst |error| = {worst_avg:.2f} u * S / divisor (tests: (K + 4) = 13)")
    print(f"AVERAGE_POOLING global 56x56 (K = 3136, work-group kernel): worst |error| = {worst_gap:.2f} u * S / divisor "
          f"(tests: ceil(K / 256) + 12 = 25)")
    print(f"BATCH_NORMALIZATION: worst |error| = {worst_bn:.2f} u * (|scale n| + |bias|) (bound 8)")


if __name__ == "__main__":
    main()
