"""The error of ACTIVATION_LOG_SOFTMAX1 against numpy's float64 log-softmax
(tests/activation_reference.py) over rows of n elements (the fast and the general variants) at
several scales of N(0, scale) inputs, per type: the largest part of |y - ref| beyond 3 u |ref|
in units of u = 2^-24 (docs/log_softmax.md's bound: (16 + 3 ln n) u), the largest error as a
fraction of that bound (FLOAT16: the part beyond half a float16 spacing at the result, its one
rounding), and how many results are ref rounded to the type.
`python tools/measure_log_softmax.py [--rows R] [--seeds S]` (the figures docs/log_softmax.md quotes)."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import kompute_dml as kdml

U = 2.0**-24
LENGTHS = (2, 7, 64, 1000, 2048, 5000, 20000)
SCALES = (0.01, 1.0, 30.0, 1e3)


def main() -> None:
    from activation_reference import log_softmax_bound, log_softmax_ref

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--seeds", type=int, default=2)
    args = ap.parse_args()
    dev = kdml.Device()
    print(f"device: {dev.name}")
    print("| type | n | variant | largest (abs(y - ref) - 3 u abs(ref)) / u | (16 + 3 ln n) | largest error / bound | "
          "results equal to ref rounded to the type |")
    print("| --- | ---: | --- | ---: | ---: | ---: | ---: |")
    for dt in (np.float32, np.float16):
        for n in LENGTHS:
            extra = ratio = 0.0
            same = total = 0
            variant = ""
            for seed in range(args.seeds):
                rng = np.random.default_rng(seed)
                for scale in SCALES:
                    x = (rng.standard_normal((max(1, args.rows * 64 // n), n)) * scale).astype(dt)
                    ref = log_softmax_ref(x, (1,))
                    y = kdml.log_softmax(x, device=dev)
                    variant = dev.compile(kdml.ActivationLogSoftmax1Desc(y.desc, y.desc, (1,))).variants[0]
                    got = y.numpy()
                    err = np.abs(got.astype(np.float64) - ref)
                    half = 0.5 * np.spacing(np.abs(got)).astype(np.float64) if dt == np.float16 else 0.0
                    # FLOAT16: the part beyond its one rounding (half a float16 spacing) against the float32 bound
                    beyond = np.maximum(err - half, 0.0)
                    extra = max(extra, float((beyond - 3 * U * np.abs(ref)).max()) / U)
                    ratio = max(ratio, float((beyond / log_softmax_bound(ref, n)).max()))
                    same += int(np.count_nonzero(got == ref.astype(dt)))
                    total += got.size
            print(f"| {np.dtype(dt).name} | {n} | {variant} | {extra:.2f} | {16 + 3 * math.log(n):.1f} | {ratio:.3f} | "
                  f"{100 * same / total:.2f}% |")


if __name__ == "__main__":
    main()
