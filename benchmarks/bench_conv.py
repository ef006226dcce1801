"""CONVOLUTION (the layers of ResNet, MobileNet, ViT and Whisper) against PyTorch CUDA's conv in the
same process, and onnxruntime's CPU Conv.

    python -m benchmarks.bench_conv [--rounds 5] [--n 20]
    python -m benchmarks.bench_conv --small          # lavapipe: small shapes
    python -m benchmarks.bench_conv --kernels [--tiles] [--json out.json]   # tiled vs tensor cores
    python -m benchmarks.bench_conv --kernels --quick                       # lavapipe: a check of the script
    python -m benchmarks.bench_conv --pointwise    # 1 x 1 layers on each FLOAT32 kernel (bench_conv_pointwise.py)
    python -m benchmarks.bench_conv --swish-forms  # GEMM's Swish / HardSwish epilogue forms (benchmarks/overlay_act.py)
    python -m benchmarks.bench_conv --depthwise    # depthwise layers, one output per invocation and rows (bench_conv_depthwise.py)

Ours runs N executions of one compiled operator in one recording; torch N launches then a
synchronize; each sample is the slope (t(N) - t(1)) / (N - 1) (timing.slopes); onnxruntime one
session run per sample. TFLOPS = 2 x output elements x CinG x window / time; ratios = peer time /
ours (> 1: ours faster). Each row's output is checked against onnxruntime (max |difference|).

--kernels (benchmarks/bench_conv_kernels.py): ResNet-50's largest layers (3x3 256 channels at 14 x
14, 3x3 512 at 7 x 7, 1x1 1024 -> 256 at 14 x 14; batch 8 and 32) on the tiled kernel and the tensor
cores (FLOAT16, and FLOAT32 under allow_half_precision with the filter converted as it loads or
FLOAT16), beside torch's cuDNN (fp16; fp32 with TF32 allowed, and without), as TFLOPS, ratios and
each kernel's fraction of the device's f16 cooperative-matrix ceiling (benchmarks/coop_peak_f16.py).
"""

from __future__ import annotations

import argparse

import numpy as np

import kompute_dml as kdml
from kompute_dml.bench.gpu_peers import cuda_torch
from kompute_dml.bench.timing import interleaved, median, slopes

DT = kdml.DataType

# (name, x sizes, filter sizes, strides, padding, groups, dtype)
ROWS = [
    ("resnet stem 7x7/2 b1", (1, 3, 224, 224), (64, 3, 7, 7), (2, 2), (3, 3), 1, DT.FLOAT32),
    ("effnet stem 3x3/2 b1", (1, 3, 224, 224), (32, 3, 3, 3), (2, 2), (1, 1), 1, DT.FLOAT32),
    ("mbv3 stem 3x3/2 b1", (1, 3, 224, 224), (16, 3, 3, 3), (2, 2), (1, 1), 1, DT.FLOAT32),
    ("resnet 3x3 64 56x56 b1", (1, 64, 56, 56), (64, 64, 3, 3), (1, 1), (1, 1), 1, DT.FLOAT32),
    ("resnet 3x3 64 56x56 b8", (8, 64, 56, 56), (64, 64, 3, 3), (1, 1), (1, 1), 1, DT.FLOAT32),
    ("resnet 3x3 256 14x14 b8", (8, 256, 14, 14), (256, 256, 3, 3), (1, 1), (1, 1), 1, DT.FLOAT32),
    ("resnet 1x1 256->64 56x56 b8", (8, 256, 56, 56), (64, 256, 1, 1), (1, 1), (0, 0), 1, DT.FLOAT32),
    ("depthwise 3x3 96 56x56 b8", (8, 96, 56, 56), (96, 1, 3, 3), (1, 1), (1, 1), 96, DT.FLOAT32),
    ("vit patches 16x16/16 b8", (8, 3, 224, 224), (768, 3, 16, 16), (16, 16), (0, 0), 1, DT.FLOAT32),
    ("whisper conv1d 80->384 k3 b1", (1, 80, 3000), (384, 80, 3), (1,), (1,), 1, DT.FLOAT32),
    ("resnet 3x3 64 56x56 b8 f16", (8, 64, 56, 56), (64, 64, 3, 3), (1, 1), (1, 1), 1, DT.FLOAT16),
]


def _small(sizes: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(s if i < 2 else max(4, s // 4) for i, s in enumerate(sizes))


def _ort_conv(x: np.ndarray, w: np.ndarray, strides: tuple[int, ...], pad: tuple[int, ...], groups: int) -> object:
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    dt = TensorProto.FLOAT16 if x.dtype == np.float16 else TensorProto.FLOAT
    node = helper.make_node("Conv", ["x", "w"], ["y"], strides=list(strides), pads=list(pad) * 2, group=groups)
    g = helper.make_graph([node], "c", [helper.make_tensor_value_info("x", dt, list(x.shape))],
                          [helper.make_tensor_value_info("y", dt, None)], [numpy_helper.from_array(w, "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--kernels", action="store_true", help="tiled vs tensor cores on ResNet-50's largest layers")
    ap.add_argument("--quick", action="store_true", help="--kernels on small shapes (lavapipe: the emulated family)")
    ap.add_argument("--tiles", action="store_true", help="--kernels: also each tensor-core tile forced")
    ap.add_argument("--json", help="--kernels: write the rows there")
    ap.add_argument("--pointwise", action="store_true", help="1 x 1 layers on each FLOAT32 kernel and GEMM's")
    ap.add_argument("--half", action="store_true", help="--pointwise: FLOAT16 layers (tiled, tensor cores, GEMM)")
    ap.add_argument("--swish-forms", action="store_true", help="the FusedActivation epilogue's forms (overlay_act.py)")
    ap.add_argument("--depthwise", action="store_true", help="depthwise layers: the direct kernel by outputs and by rows")
    args = ap.parse_args()
    if args.depthwise:
        from benchmarks.bench_conv_depthwise import run_depthwise

        run_depthwise(args)
        return
    if args.swish_forms:
        from benchmarks.bench_conv_pointwise import run_forms

        run_forms(args)
        return
    if args.pointwise:
        from benchmarks.bench_conv_pointwise import run_pointwise

        run_pointwise(args)
        return
    if args.kernels:
        from benchmarks.bench_conv_kernels import run_kernels

        run_kernels(args)
        return
    torch = None if args.small else cuda_torch()
    dev = kdml.Device()
    print(f"device: {dev.name}; torch: {torch.cuda.get_device_name() if torch else 'none'}")
    print("layer | ours ms | TFLOPS | x torch | x onnxruntime CPU | max |ours - onnxruntime|")
    rng = np.random.default_rng(0)
    for name, xs, ws, st, pad, groups, dt in ROWS:
        xs = _small(xs) if args.small else xs
        npd = dt.numpy_dtype
        x = rng.standard_normal(xs).astype(npd)
        w = (rng.standard_normal(ws) / np.sqrt(np.prod(ws[1:]))).astype(npd)
        tx, tw = dev.tensor(x), dev.tensor(w)
        y = kdml.conv(tx, tw, strides=st, start_padding=pad, end_padding=pad, groups=groups)
        op = kdml.functional.compile_cached(dev, kdml.ConvolutionDesc(
            tx.desc, tw.desc, None, y.desc, kdml.ConvolutionMode.CROSS_CORRELATION, kdml.ConvolutionDirection.FORWARD,
            st, (1,) * len(st), pad, pad, (0,) * len(st), groups))

        def ours(k: int, op=op, tx=tx, tw=tw, y=y) -> None:
            with dev.record() as rec:
                for _ in range(k):
                    rec.execute(op, [tx, tw, None], [y])

        runs = {"ours": ours}
        if torch is not None:
            cx, cw = torch.from_numpy(x).cuda(), torch.from_numpy(w).cuda()
            f = {1: torch.nn.functional.conv1d, 2: torch.nn.functional.conv2d}[len(st)]

            def theirs(k: int, cx=cx, cw=cw, f=f, st=st, pad=pad, groups=groups) -> None:
                for _ in range(k):
                    f(cx, cw, stride=st, padding=pad, groups=groups)
                torch.cuda.synchronize()

            runs["torch"] = theirs
        t = slopes(runs, args.rounds, args.n)
        sess = _ort_conv(x, w, st, pad, groups)
        feeds = {"x": x}
        cpu = median(interleaved({"ort": lambda s=sess, f=feeds: s.run(None, f)}, args.rounds)["ort"])
        want = sess.run(None, feeds)[0]
        diff = float(np.abs(y.numpy().astype(np.float64) - want.astype(np.float64)).max())
        flops = 2 * y.desc.element_count * (ws[1] * int(np.prod(ws[2:])))
        vs_torch = f"{t['torch'] / t['ours']:.2f}" if "torch" in t else "n/a"
        print(f"{name} | {t['ours'] * 1e3:.3f} | {flops / t['ours'] / 1e12:.2f} | {vs_torch} | {cpu / t['ours']:.1f} | "
              f"{diff:.2e}")


if __name__ == "__main__":
    main()
