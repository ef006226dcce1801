"""`python -m benchmarks.bench_conv --kernels`: CONVOLUTION's tiled kernel against its tensor-core
kernel (ops/conv_coop.py) on ResNet-50's largest layers, beside torch's cuDNN in the same process.

Per layer and type: ours "tiled" (shaders/convolution.comp) and "coopmat" (shaders/conv_coop.comp;
FLOAT32 under allow_half_precision, "coopmat f16 w" with the filter FLOAT16), each with its default
tile and split-K (and with --tiles every default tile forced); torch.nn.functional.conv2d on CUDA with
cudnn.benchmark: fp16, fp32 with TF32 allowed ("tf32") and without ("fp32"). Each figure is the slope
of N executions in one submission (ours) or N launches then a synchronize (torch), timing.slopes.
TFLOPS = 2 x output elements x CinG x window / time; "x peer" = the peer's time / ours (> 1: ours
faster; fp16 against torch fp16, FLOAT32 against torch tf32); "ceiling" = the fraction of the device's
f16 cooperative-matrix ceiling (benchmarks/coop_peak_f16.py's register-resident loop, measured first);
"err" = max |ours - float64| / max |float64| (numpy float64 convolution of the same inputs).

--quick: channels / 8, batch 2, and on a device without cooperative matrices the emulated family
(lavapipe: a check of the script, no measurement). --json FILE writes every row.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import numpy as np

import kompute_dml as kdml
from benchmarks import coop_peak_f16
from kompute_dml.bench.timing import slopes
from kompute_dml.ops.conv_coop import tile_problems
from kompute_dml.ops.convolution import compile_convolution
from kompute_dml.ops.gemm_coop import LARGE, MEDIUM, SMALL, subgroup_size

DT = kdml.DataType
TD = kdml.TensorDesc

# (name, x sizes, filter sizes, padding)
ROWS = [
    ("resnet50 3x3 256 14x14 b8", (8, 256, 14, 14), (256, 256, 3, 3), 1),
    ("resnet50 3x3 256 14x14 b32", (32, 256, 14, 14), (256, 256, 3, 3), 1),
    ("resnet50 3x3 512 7x7 b8", (8, 512, 7, 7), (512, 512, 3, 3), 1),
    ("resnet50 3x3 512 7x7 b32", (32, 512, 7, 7), (512, 512, 3, 3), 1),
    ("resnet50 1x1 1024->256 14x14 b8", (8, 1024, 14, 14), (256, 1024, 1, 1), 0),
    ("resnet50 1x1 1024->256 14x14 b32", (32, 1024, 14, 14), (256, 1024, 1, 1), 0),
]


def _quick(xs: tuple[int, ...], ws: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    return (2, xs[1] // 8, *xs[2:]), (ws[0] // 8, ws[1] // 8, *ws[2:])


def _torch_cuda(quick: bool) -> Any:
    try:
        import torch
    except ImportError:
        return None
    if quick or not torch.cuda.is_available():
        return None
    torch.backends.cudnn.benchmark = True
    return torch


def _reference(x: np.ndarray, w: np.ndarray, pad: int) -> np.ndarray:
    """float64 result of the inputs as given: numpy's sliding windows, stride 1, no torch needed."""
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    win = np.lib.stride_tricks.sliding_window_view(xp, w.shape[2:], axis=(2, 3))  # n c h w kh kw
    return np.einsum("nchwij,kcij->nkhw", win, w.astype(np.float64), optimize=True)


def _ours(dev: kdml.Device, x: np.ndarray, w: np.ndarray, pad: int, kernel: str, half: bool = False,
          config: Any = None) -> tuple[Any, list[Any], kdml.Tensor]:
    """A compiled convolution on `kernel` and its bound tensors (input, filter as given, output)."""
    out = (x.shape[0], w.shape[0], x.shape[2] + 2 * pad - w.shape[2] + 1, x.shape[3] + 2 * pad - w.shape[3] + 1)
    xd, wd = TD(DT.from_numpy(x.dtype), x.shape), TD(DT.from_numpy(w.dtype), w.shape)
    desc = kdml.ConvolutionDesc(xd, wd, None, TD(xd.data_type, out), start_padding=(pad, pad), end_padding=(pad, pad))
    op = compile_convolution(dev, desc, kernel=kernel, allow_half_precision=half, config=config)
    return op, [dev.tensor(x), dev.tensor(w), None], dev.empty(desc.output_tensor)


def _contenders(dev: kdml.Device, x: np.ndarray, w: np.ndarray, pad: int, coop: str | None,
                tiles: bool) -> dict[str, tuple[Any, list[Any], kdml.Tensor]]:
    f32 = x.dtype == np.float32
    out = {"tiled": _ours(dev, x, w, pad, "tiled")}
    if coop is None:
        return out
    out["coopmat"] = _ours(dev, x, w, pad, coop, half=f32)
    if f32:
        out["coopmat f16 w"] = _ours(dev, x, w.astype(np.float16), pad, coop, half=True)
    sg = subgroup_size(dev)
    for tile in (LARGE, MEDIUM, SMALL) if tiles else ():
        if not tile_problems(tile, sg, dev.limits, coop != "coopmat"):
            out[f"coopmat {tile.bm}x{tile.bn}"] = _ours(dev, x, w, pad, coop, half=f32, config=tile)
    return out


def run_kernels(args: argparse.Namespace) -> None:
    dev = kdml.Device()
    torch = _torch_cuda(args.quick)
    coop = "coopmat" if dev.policy.conv_family == "coopmat" else ("coopmat-emulated" if args.quick else None)
    print(f"device: {dev.name}; tensor cores: {coop or 'none'}; torch: {torch.cuda.get_device_name() if torch else 'none'}")
    ceiling = None
    if coop is not None:
        peak = coop_peak_f16.measure(dev, emulated=coop != "coopmat", quick=True, log=lambda m: None)
        best = (peak or {}).get("best")
        ceiling = best["tflops"] if best else None
        print(f"f16 cooperative-matrix ceiling: {f'{ceiling:.1f} TFLOPS' if ceiling is not None else 'none'}"
              + (" (emulated: not a measurement)" if coop != "coopmat" else " (benchmarks/coop_peak_f16.py --quick)"))
    print("layer | type | kernel | ms | TFLOPS | x peer | ceiling | err")
    rng = np.random.default_rng(0)
    rows = []
    for name, xs, ws, pad in ROWS:
        if args.quick:
            xs, ws = _quick(xs, ws)
            name = f"{name} [quick: {xs} * {ws}]"
        for npd in (np.float16, np.float32):
            x = rng.standard_normal(xs).astype(npd)
            w = (rng.standard_normal(ws) / np.sqrt(np.prod(ws[1:]))).astype(npd)
            mine = _contenders(dev, x, w, pad, coop, args.tiles)
            runs: dict[str, Any] = {}
            for label, (op, ins, y) in mine.items():
                def run(k: int, op: Any = op, ins: list[Any] = ins, y: kdml.Tensor = y) -> None:
                    with dev.record() as rec:
                        for _ in range(k):
                            rec.execute(op, ins, [y])
                runs[label] = run
            if torch is not None:
                tx, tw = torch.from_numpy(x).cuda(), torch.from_numpy(w).cuda()
                for label, tf32 in (("torch fp16", None),) if npd == np.float16 else (("torch tf32", True),
                                                                                       ("torch fp32", False)):
                    def theirs(k: int, tf32: bool | None = tf32, tx: Any = tx, tw: Any = tw, pad: int = pad) -> None:
                        if tf32 is not None:
                            torch.backends.cudnn.allow_tf32 = tf32
                        for _ in range(k):
                            torch.nn.functional.conv2d(tx, tw, padding=pad)
                        torch.cuda.synchronize()
                    runs[label] = theirs
            t = slopes(runs, args.rounds, args.n)
            ref = _reference(x, w, pad)
            flops = 2 * np.prod(mine["tiled"][2].desc.sizes) * np.prod(ws[1:])
            peer = "torch fp16" if npd == np.float16 else "torch tf32"
            for label, sec in t.items():
                row = {"layer": name, "type": np.dtype(npd).name, "kernel": label, "ms": sec * 1e3,
                       "tflops": flops / sec / 1e12}
                row["x_peer"] = t[peer] / sec if peer in t else None
                row["ceiling"] = row["tflops"] / ceiling if ceiling and label.startswith("coopmat") else None
                if label in mine:
                    got = mine[label][2].numpy().astype(np.float64)
                    row["err"] = float(np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-300))
                rows.append(row)
                fmt = lambda v, f: "n/a" if v is None else format(v, f)  # noqa: E731
                print(f"{name} | {row['type']} | {label} | {row['ms']:.4f} | {row['tflops']:.2f} | "
                      f"{fmt(row['x_peer'], '.2f')} | {fmt(row['ceiling'], '.3f')} | {fmt(row.get('err'), '.1e')}",
                      flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": dev.name, "ceiling_tflops": ceiling, "rows": rows}, f, indent=1, default=float)
