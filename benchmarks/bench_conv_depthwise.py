"""Depthwise convolutions (EfficientNet-B0's and MobileNetV3-small's 3 x 3 and 5 x 5 layers with their
activations, ConvNeXt-Tiny's 7 x 7 layers, batch 1 and 8) on the direct kernel with one output per invocation
and on its row variants (4 outputs of a row per invocation: ops/conv_direct.py; a 7 x 7 window has none, so
both columns are its one kernel), FLOAT32 and FLOAT16, whether both give the same
bits, and torch CUDA's conv2d (cuDNN, the convolution alone) beside them. us per execution (the slope
over N recorded executions, median of rounds: kompute_dml.bench.timing). The rows / single column sets
coop_policy.DIRECT_ROW_MIN_OUTPUTS's table.

    python -m benchmarks.bench_conv --depthwise [--rounds 5] [--n 20]
"""

from __future__ import annotations

from typing import Any
from unittest import mock

import numpy as np

import kompute_dml as kdml
from kompute_dml.bench.cases import executions
from kompute_dml.bench.gpu_peers import cuda_torch
from kompute_dml.bench.timing import slopes
from kompute_dml.ops.convolution import compile_convolution

DT = kdml.DataType
TD = kdml.TensorDesc
SWISH = kdml.ActivationSwishDesc(None, None)
HARD_SWISH = kdml.ActivationHardSwishDesc(None, None)
RELU = kdml.ActivationReluDesc(None, None)
# (channels, input height = width, window, stride, activation)
EFFICIENTNET = [(32, 112, 3, 1), (96, 112, 3, 2), (144, 56, 3, 1), (144, 56, 5, 2), (240, 28, 5, 1), (240, 28, 3, 2),
                (480, 14, 3, 1), (480, 14, 5, 1), (672, 14, 5, 1), (672, 14, 5, 2), (1152, 7, 5, 1), (1152, 7, 3, 1)]
MOBILENET = [(16, 112, 3, 2, RELU), (72, 56, 3, 2, RELU), (88, 28, 3, 1, RELU), (96, 28, 5, 2, HARD_SWISH),
             (240, 14, 5, 1, HARD_SWISH), (120, 14, 5, 1, HARD_SWISH), (288, 14, 5, 2, HARD_SWISH),
             (576, 7, 5, 1, HARD_SWISH)]
CONVNEXT = [(96, 56, 7, 1, None), (192, 28, 7, 1, None), (384, 14, 7, 1, None), (768, 7, 7, 1, None)]
LAYERS = [(*row, SWISH) for row in EFFICIENTNET] + MOBILENET + CONVNEXT


def _compiled(dev: Any, desc: Any, rows: bool) -> Any:
    with mock.patch("kompute_dml.ops.conv_direct.direct_rows", lambda *args: rows):
        return compile_convolution(dev, desc, kernel="direct")


def run_depthwise(args: Any) -> None:
    torch = cuda_torch()
    dev = kdml.Device()
    print(f"device: {dev.name}; torch: {torch.cuda.get_device_name() if torch else 'none'}")
    print("| layer | type | single us | rows us | single / rows | same bits | torch us | rows x torch | variants |")
    print("| --- | --- | ---: | ---: | ---: | --- | ---: | ---: | --- |")
    rng = np.random.default_rng(0)
    for dt in (DT.FLOAT32, DT.FLOAT16):
        for n in (1, 8):
            for c, hw, win, stride, act in LAYERS:
                npt = dt.numpy_dtype
                x = rng.standard_normal((n, c, hw, hw)).astype(npt)
                w = (rng.standard_normal((c, 1, win, win)) / win).astype(npt)
                b = rng.standard_normal((1, c, 1, 1)).astype(npt)
                ins = [dev.tensor(a) for a in (x, w, b)]
                pad = win // 2
                side = (hw + 2 * pad - win) // stride + 1
                od = TD(dt, (n, c, side, side))
                desc = kdml.ConvolutionDesc(ins[0].desc, ins[1].desc, ins[2].desc, od, strides=(stride, stride),
                                            start_padding=(pad, pad), end_padding=(pad, pad), group_count=c,
                                            fused_activation=act)
                ops = {"single": _compiled(dev, desc, False), "rows": _compiled(dev, desc, True)}
                outs = {k: [kdml.Tensor(dev.buffer(od.byte_size), od, 0) for _ in range(2)] for k in ops}
                for k, op in ops.items():
                    op.execute(ins, [outs[k][0]])
                same = np.array_equal(outs["single"][0].numpy().view(np.uint8), outs["rows"][0].numpy().view(np.uint8))
                runs: dict[str, Any] = {k: executions(dev, op, ins, outs[k]) for k, op in ops.items()}
                if torch is not None:
                    cx, cw = torch.from_numpy(x).cuda(), torch.from_numpy(w).cuda()

                    def theirs(k: int, cx: Any = cx, cw: Any = cw, s: int = stride, p: int = pad, g: int = c) -> None:
                        for _ in range(k):
                            torch.nn.functional.conv2d(cx, cw, stride=s, padding=p, groups=g)
                        torch.cuda.synchronize()

                    runs["torch"] = theirs
                t = {k: v * 1e6 for k, v in slopes(runs, args.rounds, args.n).items()}
                act_name = type(act).__name__[10:-4].lower() if act is not None else "none"
                torch_us = f"{t['torch']:.1f}" if "torch" in t else "-"
                ratio = f"{t['torch'] / t['rows']:.2f}" if "torch" in t else "-"
                print(f"| {n}x{c} {hw}x{hw} dw{win}/{stride} +{act_name} | {dt.name.lower()} | {t['single']:.1f} | "
                      f"{t['rows']:.1f} | {t['single'] / t['rows']:.2f} | {same} | {torch_us} | {ratio} | "
                      f"{ops['single'].variants[0]}, {ops['rows'].variants[0]} |", flush=True)
    dev.close()
