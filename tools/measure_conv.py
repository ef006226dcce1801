#!/usr/bin/env python3
"""Measure CONVOLUTION (kompute_dml/ops/convolution.py) on the default device against the float64
numpy reference (tests/conv_reference.py): representative layers (ResNet's 7x7 stride-2 stem, 3x3,
1x1, depthwise, grouped, dilated, asymmetric padding, ViT's patch embedding, Whisper's Conv1d pair,
3-D; transposed 2x2 / 2 and 3x3 / 2), the automatic and the tiled kernel (in one pass and split-K in
4 parts), random inputs of several
scales, FLOAT32 and FLOAT16. Prints per layer and type the largest error relative to u S (u = 2^-24,
S = sum |x w| + |bias| per output) and that of the stated bound (K + 1) u S (+ 2^-11 |y| for FLOAT16
outputs): docs/convolution.md "Precision".

    python tools/measure_conv.py [--seeds 3]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from conv_reference import reference, reference_backward  # noqa: E402

import kompute_dml as kdml  # noqa: E402

U = 2.0 ** -24
LAYERS = {  # x sizes, filter sizes, strides, dilations, start, end, groups
    "7x7/2 p3": ((1, 3, 32, 32), (16, 3, 7, 7), (2, 2), (1, 1), (3, 3), (3, 3), 1),
    "3x3 p1 64->64": ((1, 64, 12, 12), (64, 64, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 1),
    "1x1 256->64": ((1, 256, 8, 8), (64, 256, 1, 1), (1, 1), (1, 1), (0, 0), (0, 0), 1),
    "depthwise 3x3": ((2, 32, 14, 14), (32, 1, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 32),
    "grouped 4": ((1, 32, 10, 10), (48, 8, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 4),
    "dilated 2": ((1, 16, 15, 15), (16, 16, 3, 3), (1, 1), (2, 2), (2, 2), (2, 2), 1),
    "asymmetric pads": ((1, 8, 11, 9), (8, 8, 3, 3), (2, 1), (1, 1), (0, 1), (2, 0), 1),
    "vit 16x16/16": ((1, 3, 64, 64), (32, 3, 16, 16), (16, 16), (1, 1), (0, 0), (0, 0), 1),
    "whisper k3 p1": ((1, 80, 60), (64, 80, 3), (1,), (1,), (1,), (1,), 1),
    "whisper k3/2 p1": ((1, 64, 60), (64, 64, 3), (2,), (1,), (1,), (1,), 1),
    "3-D 3x3x3": ((1, 8, 6, 6, 6), (8, 8, 3, 3, 3), (1, 1, 1), (1, 1, 1), (1, 1, 1), (1, 1, 1), 1),
    # BACKWARD (conv_transpose; filter (Cin, CoutG, window)): U-Net's 2x2 / 2 up-sampling, 3x3 / 2 p1
    "transposed 2x2/2": ((1, 64, 8, 8), (64, 32, 2, 2), (2, 2), (1, 1), (0, 0), (0, 0), 1),
    "transposed 3x3/2 p1": ((1, 32, 7, 7), (32, 32, 3, 3), (2, 2), (1, 1), (1, 1), (1, 1), 1),
}


def measure(dt: kdml.DataType, seeds: int) -> None:
    npd = dt.numpy_dtype
    for name, (xs, ws, st, dl, ps, pe, g) in LAYERS.items():
        backward = name.startswith("transposed")
        k = (ws[0] // g if backward else ws[1]) * int(np.prod(ws[2:]))
        worst_us, worst_bound = 0.0, 0.0
        for seed in range(seeds):
            rng = np.random.default_rng(seed)
            scale = (1.0, 1e-3, 100.0)[seed % 3]
            x = (rng.standard_normal(xs) * scale).astype(npd)
            w = (rng.standard_normal(ws) / np.sqrt(k)).astype(npd)
            b = rng.standard_normal(ws[1] * g if backward else ws[0]).astype(npd)
            if backward:
                want, s = reference_backward(x, w, b, st, dl, ps, pe, (0,) * len(st), g)
                got = kdml.conv_transpose(x, w, b, strides=st, dilations=dl, start_padding=ps, end_padding=pe,
                                          groups=g).numpy()
            else:
                want, s = reference(x, w, b, st, dl, ps, pe, g)
                got = kdml.conv(x, w, b, strides=st, dilations=dl, start_padding=ps, end_padding=pe, groups=g).numpy()
            err = np.abs(got.astype(np.float64) - want)
            bound = (k + 1) * U * s
            if dt == kdml.DataType.FLOAT16:
                bound = bound + np.abs(want) * 2.0 ** -11 + 2.0 ** -25
                # beyond the output's rounding (relative, or absolute among subnormals)
                err_us = np.maximum(err - np.abs(want) * 2.0 ** -11 - 2.0 ** -25, 0.0)
            else:
                err_us = err
            worst_us = max(worst_us, float(np.max(err_us / (U * s))))
            worst_bound = max(worst_bound, float(np.max(err / bound)))
        split = os.environ.get("KDML_CONV_SPLIT", "1") != "1"
        print(f"{dt.name} | {'split' if split else os.environ.get('KDML_CONV_KERNEL', 'auto')} | {name} | K = {k} | "
              f"{worst_us:.2f} | {worst_bound:.4f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=3)
    args = ap.parse_args()
    print(f"device: {kdml.Device().name}")
    print("type | kernel | layer | K | max error / (u S) | max error / bound")
    for kernel in ("auto", "tiled", "split"):  # split: the tiled kernel in 4 parts (split-K) where K allows
        os.environ["KDML_CONV_KERNEL"] = "tiled" if kernel == "split" else kernel
        os.environ["KDML_CONV_SPLIT"] = "4" if kernel == "split" else "1"
        kdml.default_device().caches.pop("compiled", None)  # the helpers' operators were chosen under the previous setting
        for dt in (kdml.DataType.FLOAT32, kdml.DataType.FLOAT16):
            measure(dt, args.seeds)


if __name__ == "__main__":
    main()
