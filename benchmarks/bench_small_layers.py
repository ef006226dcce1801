"""The latency-bound layers of convolution nets at batch 1 and 8 (MobileNetV3, EfficientNet, ResNet's
last stage): few output tiles, so each work group's serial reduction sets the time, not the GPU's
throughput. Per layer, every candidate of the decision the device policy makes for it, forced:

- CONVOLUTION's tiled kernel with split-K into 1, 2, 4, ... parts (KDML_CONV_SPLIT; the parts'
  partial sums added by a second dispatch), the direct kernel (an invocation per output) and the
  lanes kernel (32 invocations per output channel and 4 pixels); the automatic choice
  (ops/convolution.conv_split, coop_policy.choose_conv_kernel) named;
- global AVERAGE_POOLING on the one-invocation-per-output kernel and the work-group kernel
  (KDML_POOL_KERNEL; ops/pooling.choose_pool_kernel).

Each figure is the slope of N executions of one compiled operator in one recording
(timing.slopes), in microseconds; "auto" is the automatic choice's time and what it picked; the last
column the candidates' largest disagreement relative to the output's largest magnitude (each sums in
its own order; past 1e-4 the script stops).

    python -m benchmarks.bench_small_layers [--rounds 5] [--n 20] [--quick] [--pools]
"""

from __future__ import annotations

import argparse
import math
import os
from typing import Any
from unittest import mock

import numpy as np

import kompute_dml as kdml
from kompute_dml.bench.cases import executions
from kompute_dml.bench.timing import slopes
from kompute_dml.ops import convolution as conv_op
from kompute_dml.ops import pooling as pool_op

DT = kdml.DataType
# (name, x sizes, filter sizes, groups): stride 1, padding 0 (pointwise) or (k - 1) / 2
CONVS = [
    ("mbv3 1x1 288->96 7x7", (1, 288, 7, 7), (96, 288, 1, 1), 1),
    ("mbv3 1x1 576->96 7x7", (1, 576, 7, 7), (96, 576, 1, 1), 1),
    ("mbv3 1x1 96->576 7x7", (1, 96, 7, 7), (576, 96, 1, 1), 1),
    ("mbv3 1x1 240->40 14x14", (1, 240, 14, 14), (40, 240, 1, 1), 1),
    ("mbv3 1x1 72->24 28x28", (1, 72, 28, 28), (24, 72, 1, 1), 1),
    ("mbv3 1x1 40->240 14x14", (1, 40, 14, 14), (240, 40, 1, 1), 1),
    ("mbv3 se 576->144 1x1", (1, 576, 1, 1), (144, 576, 1, 1), 1),
    ("mbv3 se 288->72 1x1", (1, 288, 1, 1), (72, 288, 1, 1), 1),
    ("mbv3 se 144->576 1x1", (1, 144, 1, 1), (576, 144, 1, 1), 1),
    ("effb0 1x1 480->80 14x14", (1, 480, 14, 14), (80, 480, 1, 1), 1),
    ("effb0 1x1 1152->192 7x7", (1, 1152, 7, 7), (192, 1152, 1, 1), 1),
    ("effb0 se 672->28 1x1", (1, 672, 1, 1), (28, 672, 1, 1), 1),
    ("effb0 se 96->4 1x1", (1, 96, 1, 1), (4, 96, 1, 1), 1),
    ("effb0 se 4->96 1x1", (1, 4, 1, 1), (96, 4, 1, 1), 1),
    ("resnet 3x3 512 7x7", (1, 512, 7, 7), (512, 512, 3, 3), 1),
    ("resnet 3x3 64 56x56", (1, 64, 56, 56), (64, 64, 3, 3), 1),
    ("mbv3 1x1 288->96 7x7 b8", (8, 288, 7, 7), (96, 288, 1, 1), 1),
    ("mbv3 1x1 576->96 7x7 b8", (8, 576, 7, 7), (96, 576, 1, 1), 1),
    ("mbv3 1x1 240->40 14x14 b8", (8, 240, 14, 14), (40, 240, 1, 1), 1),
    ("mbv3 se 576->144 1x1 b8", (8, 576, 1, 1), (144, 576, 1, 1), 1),
    ("mbv3 se 144->576 1x1 b8", (8, 144, 1, 1), (576, 144, 1, 1), 1),
    ("effb0 se 672->28 1x1 b8", (8, 672, 1, 1), (28, 672, 1, 1), 1),
    ("effb0 1x1 1152->192 7x7 b8", (8, 1152, 7, 7), (192, 1152, 1, 1), 1),
    ("depthwise 3x3 576 7x7 b8", (8, 576, 7, 7), (576, 1, 3, 3), 576),
]
POOLS = [(1, 96, 14, 14), (1, 576, 7, 7), (1, 16, 56, 56), (1, 32, 112, 112), (1, 96, 56, 56), (8, 240, 14, 14),
         (8, 576, 7, 7), (8, 2048, 7, 7), (8, 32, 112, 112), (32, 2048, 7, 7),
         (8, 144, 56, 56), (8, 480, 14, 14), (8, 672, 14, 14), (8, 1152, 7, 7), (8, 1280, 7, 7)]  # (EfficientNet-B0's, b8)
SPLITS = (1, 2, 4, 8, 16, 32)


def _env(name: str, value: str | None) -> Any:
    """os.environ with `name` set to `value` (None: unset) while the block runs."""
    env = {k: v for k, v in os.environ.items() if k != name}
    return mock.patch.dict(os.environ, env if value is None else {**env, name: value}, clear=True)


def _max_rel_diff(dev: kdml.Device, ops: dict[str, Any], ins: list[Any], y: Any) -> float:
    """The candidates' outputs against the first one's: max |difference| / max |output| (each
    candidate sums in its own order, so a few units of float32's roundoff; ValueError past 1e-4)."""
    outs = []
    for op in ops.values():
        op.execute(ins, [y])
        outs.append(y.numpy().astype(np.float64))
    worst = max(float(np.abs(o - outs[0]).max()) for o in outs) / max(float(np.abs(outs[0]).max()), 1e-30)
    if worst > 1e-4:
        raise ValueError(f"the candidates disagree: {worst:.2e} of the output's largest magnitude")
    return worst


def _variants(op: Any) -> str:
    return "+".join(p.variant for p in op.plans if hasattr(p, "variant"))


def conv_rows(dev: kdml.Device, args: argparse.Namespace) -> None:
    rng = np.random.default_rng(0)
    print("conv layer | " + " | ".join(f"split {s}" for s in SPLITS) + " | direct | lanes | auto (picked) | max rel diff")
    for name, xs, ws, groups in CONVS:
        if args.quick:
            xs, ws = (xs[0], max(1, xs[1] // 8), *xs[2:]), (max(1, ws[0] // 8), ws[1] if groups > 1 else max(1, ws[1] // 8), *ws[2:])
            groups = min(groups, xs[1])
        x = rng.standard_normal(xs).astype(np.float32)
        w = (rng.standard_normal(ws) / math.sqrt(math.prod(ws[1:]))).astype(np.float32)
        pad = tuple((k - 1) // 2 for k in ws[2:])
        tx, tw = dev.tensor(x), dev.tensor(w)
        y = kdml.conv(tx, tw, start_padding=pad, end_padding=pad, groups=groups)
        desc = kdml.ConvolutionDesc(tx.desc, tw.desc, None, y.desc, kdml.ConvolutionMode.CROSS_CORRELATION,
                                    kdml.ConvolutionDirection.FORWARD, (1, 1), (1, 1), pad, pad, (0, 0), groups)
        ops: dict[str, Any] = {}
        for s in SPLITS:
            with _env(conv_op.CONV_SPLIT_ENV, str(s)):
                op = conv_op.compile_convolution(dev, desc, kernel="tiled")
            if "split 1" in ops and s > 1 and len(op.plans) == 1:
                continue  # no room for more parts
            ops[f"split {s}"] = op
        ops["direct"] = conv_op.compile_convolution(dev, desc, kernel="direct")
        ops["lanes"] = conv_op.compile_convolution(dev, desc, kernel="lanes")
        with _env(conv_op.CONV_SPLIT_ENV, None):
            ops["auto"] = conv_op.compile_convolution(dev, desc)
        diff = _max_rel_diff(dev, ops, [tx, tw, None], y)
        t = slopes({k: executions(dev, op, [tx, tw, None], [y]) for k, op in ops.items()}, args.rounds, args.n)
        cells = [f"{t[f'split {s}'] * 1e6:.1f}" if f"split {s}" in t else "-" for s in SPLITS]
        print(f"{name} | " + " | ".join(cells) + f" | {t['direct'] * 1e6:.1f} | {t['lanes'] * 1e6:.1f} | {t['auto'] * 1e6:.1f} "
              f"({_variants(ops['auto'])}, {len(ops['auto'].plans)} dispatches) | {diff:.1e}")


def pool_rows(dev: kdml.Device, args: argparse.Namespace) -> None:
    rng = np.random.default_rng(1)
    print("global average pool | thread | group | team | auto (picked) | max rel diff")
    for xs in POOLS:
        if args.quick:
            xs = (xs[0], max(1, xs[1] // 16), *xs[2:])
        tx = dev.tensor(rng.standard_normal(xs).astype(np.float32))
        y = dev.empty(kdml.TensorDesc(DT.FLOAT32, (xs[0], xs[1], 1, 1)))
        desc = pool_op.AveragePoolingDesc(tx.desc, y.desc, tuple(xs[2:]), (1, 1), (0, 0), (0, 0))
        ops = {}
        for k in ("thread", "group", "team", None):
            with _env(pool_op.POOL_KERNEL_ENV, k):
                ops[k or "auto"] = pool_op.compile_average_pooling(dev, desc)
        diff = _max_rel_diff(dev, ops, [tx], y)
        t = slopes({k: executions(dev, op, [tx], [y]) for k, op in ops.items()}, args.rounds, args.n)
        print(f"{'x'.join(map(str, xs))} | {t['thread'] * 1e6:.1f} | {t['group'] * 1e6:.1f} | {t['team'] * 1e6:.1f} | "
              f"{t['auto'] * 1e6:.1f} ({_variants(ops['auto'])}) | {diff:.1e}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--quick", action="store_true", help="channels / 8 (lavapipe: a check of the script)")
    ap.add_argument("--pools", action="store_true", help="only the pooling rows")
    args = ap.parse_args()
    dev = kdml.Device()
    print(f"device: {dev.name}")
    if not args.pools:
        conv_rows(dev, args)
    pool_rows(dev, args)


if __name__ == "__main__":
    main()
