"""SQUEEZE_EXCITATION (ops/squeeze_excitation.py) at MobileNetV3-small's and EfficientNet-B0's
blocks, batch 1 and 8, beside what it replaces and with parts left out (benchmarks/overlay_se.py):

- product: the one dispatch (fusion_se runs it where an image has at most MEAN_ELEMENTS elements);
- pool+se: global AVERAGE_POOLING then the gate on the means (fusion_se past MEAN_ELEMENTS);
- scaled: the product also writing x * gate (ScaledOutputTensor: the block's Mul in the same
  dispatch, fusion_se.py where DevicePolicy.se_scale_max_elements allows); se+mul: the product, then
  ELEMENT_WISE_MULTIPLY of x by the broadcast gate (the two dispatches it replaces);
- chain: the unfused chain on the device (AVERAGE_POOLING, then two 1 x 1 CONVOLUTIONs with their
  fused activations), as float16 blocks run;
- before: the kernel before the means spread over invocations and the quad loads;
- u8q4, u4q3: the product with more of the products' loads issued together (UNROLL scalars, UNROLL_Q quads);
- -means, -hidden, -gate, -all: the product with those phases left out (wrong by design);
- torch: adaptive_avg_pool2d, conv2d, relu, conv2d, hardsigmoid on CUDA (inputs on the GPU).

Each figure is the median slope over N executions of one recording (kompute_dml.bench.timing), us,
every execution writing the same output, so each waits for the one before (a latency, as in a
model);
"x before" is before / product, "x torch" torch / product.

    python -m benchmarks.bench_se [--rounds 5] [-n 20] [--dtype float32|float16] [--mean-lanes 0,3,5]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from typing import Any
from unittest import mock

import numpy as np

import kompute_dml as kdml
from kompute_dml.bench.cases import executions
from kompute_dml.bench.gpu_peers import cuda_torch
from kompute_dml.bench.timing import slopes
from kompute_dml.ops import squeeze_excitation as se_op
from kompute_dml.ops.matmul_coop import subgroup_size

from . import overlay_se as ov

DT = kdml.DataType
TD = kdml.TensorDesc
RELU = kdml.ActivationReluDesc(None, None)
HSIG = kdml.ActivationHardSigmoidDesc(None, None, 1 / 6, 0.5)
# (channels, hidden, side): MobileNetV3-small's SE blocks, then EfficientNet-B0's
BLOCKS = [(16, 8, 56), (96, 24, 14), (240, 64, 14), (120, 32, 14), (144, 40, 14), (288, 72, 7), (576, 144, 7),
          (96, 4, 56), (144, 6, 28), (240, 10, 28), (480, 20, 14), (672, 28, 14), (1152, 48, 7)]
BATCHES = (1, 8)


def _contenders(dev: Any, dt: Any, n: int, c: int, r: int, side: int, rng: np.random.Generator,
                torch: Any, lanes: list[int]) -> dict[str, Any]:
    npd = dt.numpy_dtype
    x = rng.standard_normal((n, c, side, side)).astype(npd)
    w1 = (rng.standard_normal((r, c)) / np.sqrt(c)).astype(npd)
    w2 = (rng.standard_normal((c, r)) / np.sqrt(r)).astype(npd)
    b1, b2 = rng.standard_normal(r).astype(npd), rng.standard_normal(c).astype(npd)
    tx, tw1, tb1, tw2, tb2 = (dev.tensor(a) for a in (x, w1, b1, w2, b2))
    yd = TD(dt, (n, c))
    ys = [kdml.Tensor(dev.buffer(yd.byte_size), yd, 0), None]  # one output: each execution waits for the last
    zd = TD(dt, x.shape)
    z = kdml.Tensor(dev.buffer(zd.byte_size), zd, 0)

    ins = [tx, tw1, tb1, tw2, tb2]
    se = kdml.SqueezeExcitationDesc(tx.desc, tw1.desc, tb1.desc, tw2.desc, tb2.desc, yd, RELU, HSIG)
    runs: dict[str, Any] = {"product": executions(dev, dev.compile(se), ins, [ys])}
    for lg in lanes:  # the means on 2^lg invocations per channel, forced
        with mock.patch.dict(os.environ, {se_op.MEAN_LANES_ENV: str(lg)}):
            runs[f"mp{lg}"] = executions(dev, dev.compile(se), ins, [ys])
    # the pool first, then the gate on the (n, c, 1) means; and the unfused chain
    md = TD(dt, (n, c, 1, 1))
    m = kdml.Tensor(dev.buffer(md.byte_size), md, 0)
    pool = dev.compile(kdml.AveragePoolingDesc(tx.desc, md, (side, side)))
    gate = dev.compile(kdml.SqueezeExcitationDesc(TD(dt, (n, c, 1)), tw1.desc, tb1.desc, tw2.desc, tb2.desc, yd, RELU,
                                                  HSIG))
    hd, gd = TD(dt, (n, r, 1, 1)), TD(dt, (n, c, 1, 1))
    h, g = (kdml.Tensor(dev.buffer(d.byte_size), d, 0) for d in (hd, gd))
    cw1, cb1 = tw1.reshape(r, c, 1, 1), tb1.reshape(1, r, 1, 1)
    cw2, cb2 = tw2.reshape(c, r, 1, 1), tb2.reshape(1, c, 1, 1)
    conv1 = dev.compile(kdml.ConvolutionDesc(md, cw1.desc, cb1.desc, hd, fused_activation=RELU))
    conv2 = dev.compile(kdml.ConvolutionDesc(hd, cw2.desc, cb2.desc, gd, fused_activation=HSIG))
    m3 = m.reshape(n, c, 1)

    def pool_se(k: int) -> None:
        with dev.record() as rec:
            for _ in range(k):
                rec.execute(pool, [tx], [m])
                rec.execute(gate, [m3, tw1, tb1, tw2, tb2], ys)

    def chain(k: int) -> None:
        with dev.record() as rec:
            for _ in range(k):
                rec.execute(pool, [tx], [m])
                rec.execute(conv1, [m, cw1, cb1], [h])
                rec.execute(conv2, [h, cw2, cb2], [g])

    runs["pool+se"], runs["chain"] = pool_se, chain
    y4 = ys[0].reshape(n, c, 1, 1)
    gate_b = kdml.Tensor.trusted(y4.buffer, TD(dt, x.shape, (c, 1, 0, 0)), y4.offset)  # the gate broadcast
    product, mul = dev.compile(se), dev.compile(kdml.ElementWiseMultiplyDesc(tx.desc, gate_b.desc, zd))
    runs["scaled"] = executions(dev, dev.compile(dataclasses.replace(se, scaled_output_tensor=zd)), ins, [[ys[0], z]])

    def se_mul(k: int) -> None:
        with dev.record() as rec:
            for _ in range(k):
                rec.execute(product, ins, ys)
                rec.execute(mul, [tx, gate_b], [z])

    runs["se+mul"] = se_mul
    if dt == DT.FLOAT32:  # the overlay's kernels in the product's plan
        variants = [("before", ov.SE_BEFORE.name(t="f32")), *((u, ov.SE_UNROLL.name(u=u, t="f32")) for u in ov.UNROLLS),
                    *((f"-{label}", ov.SE_ABLATION.name(abl=a, t="f32")) for a, label in ov.ABLATIONS.items())]
        for name, variant in variants:
            op = dev.compile(se)
            op.plans[0] = dataclasses.replace(op.plans[0], variant=variant)
            runs[name] = executions(dev, op, ins, [ys])
    if torch is not None:
        f = torch.nn.functional
        cx, cw1t, cb1t, cw2t, cb2t = (torch.from_numpy(a).cuda() for a in (x, w1.reshape(r, c, 1, 1), b1,
                                                                          w2.reshape(c, r, 1, 1), b2))

        def theirs(k: int) -> None:  # (CUDA orders the kernels of one stream)
            for _ in range(k):
                f.hardsigmoid(f.conv2d(f.relu(f.conv2d(f.adaptive_avg_pool2d(cx, 1), cw1t, cb1t)), cw2t, cb2t))
            torch.cuda.synchronize()

        runs["torch"] = theirs
    return runs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("-n", type=int, default=20)
    ap.add_argument("--dtype", choices=("float32", "float16"), default="float32")
    ap.add_argument("--mean-lanes", default="", help="comma-separated log2 P to force beside the plan's (mp0, ...)")
    args = ap.parse_args()
    dt = DT.FLOAT32 if args.dtype == "float32" else DT.FLOAT16
    ov.load()
    torch = cuda_torch()
    dev = kdml.Device()
    print(f"device: {dev.name}; torch: {torch.cuda.get_device_name() if torch else 'none'}; {dt.name}")
    lanes = [int(v) for v in args.mean_lanes.split(",") if v]
    names = ["product", *(f"mp{lg}" for lg in lanes), "scaled", "se+mul", "pool+se", "chain"]
    if dt == DT.FLOAT32:
        names += [*ov.UNROLLS, "before", *(f"-{label}" for label in ov.ABLATIONS.values())]
    names += ["torch"] if torch else []
    print(f"| block | mp | {' | '.join(names)} | x before | x torch |")
    print(f"| --- | ---: |{' ---: |' * (len(names) + 2)}")
    rng = np.random.default_rng(0)
    for n in BATCHES:
        for c, r, side in BLOCKS:
            runs = _contenders(dev, dt, n, c, r, side, rng, torch, lanes)
            t = slopes(runs, args.rounds, args.n)
            cells = " | ".join(f"{t[k] * 1e6:.1f}" for k in names)
            ratios = " | ".join(f"{t[k] / t['product']:.2f}" if k in t else "-" for k in ("before", "torch"))
            hw = side * side  # packed: quads where the positions are a multiple of 4
            mp = se_op.mean_lanes_log2(c, hw // 4 if hw % 4 == 0 else hw, subgroup_size(dev))
            print(f"| {n}x{c}->{r} {side}x{side} | {mp} | {cells} | {ratios} |", flush=True)
    dev.close()


if __name__ == "__main__":
    main()
