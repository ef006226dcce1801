"""1 x 1 convolutions (MobileNetV3's and EfficientNet-B0's pointwise layers) on each FLOAT32 kernel:
the policy's choice, the tiled and lanes convolution kernels and GEMM's kernels (ops/conv_pointwise.py),
with torch CUDA's conv2d (cuDNN, its default TF32 allowed) beside them. us per execution (the slope
over N recorded executions, median of rounds: kompute_dml.bench.timing), and the policy's x torch.
--half: the same layers in FLOAT16 on the tiled and tensor-core convolution kernels and GEMM's (the
GEMM policy's kernel, and its tiled one forced: gemm-tiled), torch in float16.

    python -m benchmarks.bench_conv --pointwise [--half] [--rounds 5] [--n 20]
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

import kompute_dml as kdml
from kompute_dml.bench.cases import executions
from kompute_dml.bench.gpu_peers import cuda_torch
from kompute_dml.bench.timing import slopes
from kompute_dml.ops.convolution import compile_convolution

DT = kdml.DataType
TD = kdml.TensorDesc
HARD_SWISH = kdml.ActivationHardSwishDesc(None, None)
RELU = kdml.ActivationReluDesc(None, None)
SWISH = kdml.ActivationSwishDesc(None, None)
# (batch, input channels, output channels, height = width, activation): MobileNetV3-small's and
# EfficientNet-B0's pointwise layers, then ResNet-50's bottleneck 1 x 1 layers, then EfficientNet-B0's
# 16 -> 96 expansion at 112 x 112 with and without its SiLU, and its batch-8 SiLU expansions after it
ROWS = [(1, 16, 72, 56, None), (1, 24, 88, 28, None), (1, 40, 240, 14, HARD_SWISH), (1, 48, 288, 14, HARD_SWISH),
        (1, 96, 576, 7, HARD_SWISH), (1, 576, 96, 7, None), (1, 120, 48, 14, None), (8, 16, 72, 56, None),
        (8, 40, 240, 14, HARD_SWISH), (8, 96, 576, 7, HARD_SWISH), (8, 576, 96, 7, None), (8, 1152, 320, 7, None),
        (1, 64, 256, 56, RELU), (1, 1024, 256, 14, RELU), (8, 256, 64, 56, RELU), (8, 1024, 256, 14, RELU),
        (8, 512, 2048, 7, None), (1, 16, 96, 112, SWISH), (1, 16, 96, 112, None), (8, 16, 96, 112, SWISH),
        (8, 16, 96, 112, None), (8, 24, 144, 56, SWISH), (8, 40, 240, 28, SWISH), (8, 80, 480, 14, SWISH)]
KERNELS = {False: (None, "tiled", "lanes", "gemm", "gemm-tiled", "gemm-stream"), True: (None, "tiled", "coopmat", "gemm", "gemm-tiled")}


def run_pointwise(args: Any) -> None:
    torch = cuda_torch()
    dev = kdml.Device()
    half = bool(getattr(args, "half", False))
    kernels, npt, dt = KERNELS[half], (np.float16 if half else np.float32), (DT.FLOAT16 if half else DT.FLOAT32)
    if "cooperative_matrix" not in dev.capabilities:  # lavapipe: the tensor-core kernel's emulation
        kernels = tuple("coopmat-emulated" if k == "coopmat" else k for k in kernels)
    names = [k or "policy" for k in kernels]
    print(f"device: {dev.name}; torch: {torch.cuda.get_device_name() if torch else 'none'}; {dt.name}")
    print(f"| layer | {' | '.join(f'{k} us' for k in names)} | torch us | policy x torch | policy's variants |")
    print(f"| --- | {' | '.join('---:' for _ in names)} | ---: | ---: | --- |")
    rng = np.random.default_rng(0)
    for n, cin, cout, hw, act in ROWS:
        x = rng.standard_normal((n, cin, hw, hw)).astype(npt)
        w = (rng.standard_normal((cout, cin, 1, 1)) / np.sqrt(cin)).astype(npt)
        b = rng.standard_normal((1, cout, 1, 1)).astype(npt)
        tx, tw, tb = dev.tensor(x), dev.tensor(w), dev.tensor(b)
        od = TD(dt, (n, cout, hw, hw))
        desc = kdml.ConvolutionDesc(tx.desc, tw.desc, tb.desc, od, fused_activation=act)
        ys = [kdml.Tensor(dev.buffer(od.byte_size), od, 0) for _ in range(2)]
        ops = {k or "policy": _compiled(dev, desc, k) for k in kernels}
        runs: dict[str, Any] = {name: executions(dev, op, [tx, tw, tb], ys) for name, op in ops.items()}
        if torch is not None:
            cx, cw, cb = (torch.from_numpy(a).cuda() for a in (x, w, b.reshape(-1)))
            def theirs(k: int, cx: Any = cx, cw: Any = cw, cb: Any = cb, act: Any = act,
                       f: Any = torch.nn.functional) -> None:
                for _ in range(k):
                    y = f.conv2d(cx, cw, cb)
                    if act is not None:
                        {RELU: f.relu, SWISH: f.silu}.get(act, f.hardswish)(y)
                torch.cuda.synchronize()

            runs["torch"] = theirs
        t = slopes(runs, args.rounds, args.n)
        name = f"{n}x{cin}->{cout} {hw}x{hw}{'' if act is None else ' +' + type(act).__name__[10:-4].lower()}"
        cells = " | ".join(f"{t[k] * 1e6:.1f}" for k in names)
        torch_us = f"{t['torch'] * 1e6:.1f}" if "torch" in t else "-"
        ratio = f"{t['torch'] / t['policy']:.2f}" if "torch" in t else "-"
        print(f"| {name} | {cells} | {torch_us} | {ratio} | {', '.join(ops['policy'].variants)} "
              f"(gemm: {', '.join(ops['gemm'].variants)}) |", flush=True)
    dev.close()


def _compiled(dev: Any, desc: Any, kernel: str | None) -> Any:
    """compile_convolution's op on `kernel`; "gemm-tiled" / "gemm-stream": GEMM's kernels with GEMM's tiled family
    or its streaming kernel (ops/gemm_stream.py, where the layer's layout allows it) forced."""
    if kernel not in ("gemm-tiled", "gemm-stream"):
        return compile_convolution(dev, desc, kernel=kernel)
    from unittest import mock

    from kompute_dml.ops import conv_pointwise, gemm

    forced = functools.partial(gemm.compile_gemm, kernel=kernel[5:])
    with mock.patch.object(conv_pointwise, "compile_gemm", forced):
        return compile_convolution(dev, desc, kernel="gemm")


def _versus_policy(dev: Any, ops: dict[str, Any], ins: list[Any], od: Any, args: Any) -> tuple[dict, dict]:
    """Each op of `ops` (one named "policy") run once and timed (timing.slopes): its us and whether its
    output's bits equal the policy's."""
    outs = {k: [kdml.Tensor(dev.buffer(od.byte_size), od, 0) for _ in range(2)] for k in ops}
    for k, op in ops.items():
        op.execute(ins, [outs[k][0]])
    ref = outs["policy"][0].numpy().view(np.uint32)
    same = {k: np.array_equal(outs[k][0].numpy().view(np.uint32), ref) for k in ops}
    t = slopes({k: executions(dev, op, ins, outs[k]) for k, op in ops.items()}, args.rounds, args.n)
    return {k: v * 1e6 for k, v in t.items()}, same


# --swish-forms: EfficientNet-B0's SiLU expansion (first at 28 x 28, where the clock rises) and MobileNetV3's
# HardSwish layers on the overlay's epilogues (benchmarks/overlay_act.py), beside the policy's
FORM_ROWS = [(1, 16, 96, 28, SWISH), (1, 16, 96, 112, SWISH), (8, 16, 96, 112, SWISH),
             (8, 24, 96, 28, HARD_SWISH), (8, 40, 240, 14, HARD_SWISH),
             (1, 96, 576, 7, HARD_SWISH)]


def run_forms(args: Any) -> None:
    import dataclasses

    from benchmarks import overlay_act

    overlay_act.load()
    dev = kdml.Device()
    print(f"device: {dev.name}")
    rng = np.random.default_rng(0)
    for n, cin, cout, hw, act in FORM_ROWS:
        x = rng.standard_normal((n, cin, hw, hw)).astype(np.float32)
        w = (rng.standard_normal((cout, cin, 1, 1)) / np.sqrt(cin)).astype(np.float32)
        b = rng.standard_normal((1, cout, 1, 1)).astype(np.float32)
        ins = [dev.tensor(a) for a in (x, w, b)]
        od = TD(DT.FLOAT32, (n, cout, hw, hw))
        desc = kdml.ConvolutionDesc(ins[0].desc, ins[1].desc, ins[2].desc, od, fused_activation=act)
        policy = compile_convolution(dev, desc, kernel="gemm")
        blk = policy.plans[0].variant.removeprefix("gemm_f32_b")[:1]
        if not policy.plans[0].variant.startswith("gemm_f32_b") or blk not in "24":
            print(f"{n}x{cin}->{cout} {hw}x{hw}: the policy runs {policy.variants}, not one of the overlay's blocks")
            continue
        ops = {"policy": policy}
        for form in overlay_act.FORMS:
            op = compile_convolution(dev, desc, kernel="gemm")
            op.plans[0] = dataclasses.replace(op.plans[0], variant=f"gemmab_f32_b{blk}_s{form}")
            ops[f"s{form}"] = op
        t, same = _versus_policy(dev, ops, ins, od, args)
        print(f"{n}x{cin}->{cout} {hw}x{hw} {type(act).__name__[10:-4]} ({policy.variants[0]}): us, bits equal the policy's")
        for k in ops:
            label = "policy" if k == "policy" else f"{k} {overlay_act.FORMS[int(k[1:])]}"
            print(f"  {label:48s} {t[k]:7.1f}  {same[k]}", flush=True)
    dev.close()
