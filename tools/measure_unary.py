#!/usr/bin/env python3
"""Measure kompute_dml/ops/elementwise_unary.py's operators on the default device against the
float64 numpy reference (tests/unary_reference.py): every float16 input, and 2^20 float32
inputs (special values, random bit patterns, random values in [-100, 100]) plus, per operator,
2^20 values from its interesting range. Prints, per operator and type, the largest error in ulps
and the share of results that are the correctly rounded one (docs/elementwise_unary.md)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from unary_reference import every_float16, float32_inputs, reference64, rounded, ulp_error  # noqa: E402

import kompute_dml as kdml  # noqa: E402
from kompute_dml.ops.elementwise_unary import OPS  # noqa: E402

# values where each function is hardest: near its overflow / underflow and cancellation points
RANGES = {"exp": (-104.0, 89.0), "log": (0.0, 4.0), "sigmoid": (-90.0, 20.0), "softsign": (-4.0, 4.0)}


def main() -> None:
    rng = np.random.default_rng(2024)
    dev = kdml.Device()
    print("| operator | type | inputs | max error (ulp) | correctly rounded |")
    print("| --- | --- | --- | --- | --- |")
    for op in OPS:
        if op.exact or op.rounding_mode:
            continue
        fn = getattr(kdml, op.helper)
        lo, hi = RANGES.get(op.helper, (-100.0, 100.0))
        x32 = np.concatenate([float32_inputs(rng), rng.uniform(lo, hi, 1 << 20).astype(np.float32)])
        for x in (every_float16(), x32):
            got = fn(x, device=dev).numpy()
            ref = reference64(op.helper, x)
            err = ulp_error(got, ref)
            want = rounded(ref, x.dtype)
            same = np.isnan(want) | (got == want)
            print(f"| {op.name} | {x.dtype} | {x.size} | {err.max():.3f} | {same.mean():.6f} |")


if __name__ == "__main__":
    main()
