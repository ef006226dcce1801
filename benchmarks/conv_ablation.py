"""The tensor-core convolution kernel's ablations (benchmarks/overlay_conv.py) timed beside it: what
each part of `convc_<t>` costs at UNet's and ResNet-50's layers (their results are wrong by design).
FLOAT16 tensors ("f16") and FLOAT32 under allow_half_precision ("f32"); one part (no split-K), each
layer's default tile.

    python -m benchmarks.conv_ablation [--rounds 3] [--n 10] [--tiles]

--tiles: also the kernel under each tile of TILES (gemm_coop.CoopTile: BM x BN, WM x WN, BK, stages)
that runs here, beside the default tile.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os

import numpy as np

import kompute_dml as kdml
from kompute_dml.bench.timing import slopes
from kompute_dml.ops.conv_split import CONV_SPLIT_ENV
from kompute_dml.ops.convolution import compile_convolution
from kompute_dml.ops.gemm_coop import CoopTile

from . import overlay_conv as ov

DT = kdml.DataType
TD = kdml.TensorDesc
# (name, x sizes, filter sizes, padding)
ROWS = [
    ("unet 3x3 32 224x224 b8", (8, 32, 224, 224), (32, 32, 3, 3), 1),
    ("unet 3x3 64 112x112 b8", (8, 64, 112, 112), (64, 64, 3, 3), 1),
    ("unet 3x3 256 28x28 b8", (8, 256, 28, 28), (256, 256, 3, 3), 1),
    ("resnet50 3x3 256 14x14 b32", (32, 256, 14, 14), (256, 256, 3, 3), 1),
    ("resnet50 1x1 1024->256 14x14 b32", (32, 1024, 14, 14), (256, 1024, 1, 1), 0),
]
TILES = [CoopTile(64, 32, 16, 16, bk=64, stages=1), CoopTile(32, 64, 16, 16, bk=64, stages=1),
         CoopTile(32, 128, 16, 16, bk=64, stages=1), CoopTile(64, 64, 16, 16, bk=64, stages=1),
         CoopTile(128, 32, 16, 16, bk=64, stages=1), CoopTile(64, 32, 16, 16, bk=128, stages=1),
         CoopTile(32, 128, 16, 16), CoopTile(32, 32, 16, 16, bk=64, stages=1)]


def tile_name(t: CoopTile) -> str:
    return f"{t.bm}x{t.bn}/{t.wm}x{t.wn}/k{t.bk}/s{t.stages}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--n", type=int, default=10)
    ap.add_argument("--tiles", action="store_true", help="also every tile of TILES that runs here")
    ap.add_argument("--no-ablations", action="store_true")
    args = ap.parse_args()
    os.environ[CONV_SPLIT_ENV] = "1"
    dev = kdml.Device()
    ov.load()
    rng = np.random.default_rng(0)
    for name, xs, ws, pad in ROWS:
        for t, npd in (("f16", np.float16), ("f32", np.float32)):
            x = dev.tensor(rng.standard_normal(xs).astype(npd))
            w = dev.tensor((rng.standard_normal(ws) / np.sqrt(np.prod(ws[1:]))).astype(npd))
            out = (xs[0], ws[0], xs[2] + 2 * pad - ws[2] + 1, xs[3] + 2 * pad - ws[3] + 1)
            desc = kdml.ConvolutionDesc(x.desc, w.desc, None, TD(x.desc.data_type, out), start_padding=(pad, pad),
                                        end_padding=(pad, pad))
            y = dev.empty(desc.output_tensor)
            ops = {"kernel": compile_convolution(dev, desc, kernel="coopmat", allow_half_precision=t == "f32")}
            if ops["kernel"].plans[0].variant != f"convc_{t}":
                print(f"{name} {t}: {ops['kernel'].plans[0].variant}, not convc_{t}: skipped")
                continue
            for n in () if args.no_ablations else ov.ABLATIONS:
                op = compile_convolution(dev, desc, kernel="coopmat", allow_half_precision=t == "f32")
                op.plans[0] = dataclasses.replace(op.plans[0], variant=ov.CONV_ABLATION.name(part=n, t=t))
                ops[f"a{n}"] = op
            for tile in TILES if args.tiles else ():
                with contextlib.suppress(kdml.UnsupportedError):  # (a tile that cannot run here)
                    ops[tile_name(tile)] = compile_convolution(dev, desc, kernel="coopmat", config=tile,
                                                               allow_half_precision=t == "f32")
            runs = {}
            for label, op in ops.items():
                def run(k: int, op=op, ins=(x, w, None), y=y) -> None:
                    with dev.record() as rec:
                        for _ in range(k):
                            rec.execute(op, list(ins), [y])
                runs[label] = run
            med = slopes(runs, args.rounds, args.n)
            flops = 2 * np.prod(out) * np.prod(ws[1:])
            print(f"{name} {t} ({ops['kernel'].plans[0].variant} spec {tuple(ops['kernel'].plans[0].spec)}): "
                  f"kernel {med['kernel'] * 1e6:.1f} us ({flops / med['kernel'] / 1e12:.1f} TFLOP/s)")
            for label in (k for k in med if "/" in k):
                print(f"  tile {label}: {med[label] * 1e6:9.1f} us  x{med['kernel'] / med[label]:.2f} "
                      f"({flops / med[label] / 1e12:.1f} TFLOP/s)")
            for n, bits in () if args.no_ablations else ov.ABLATIONS.items():
                what = "; ".join(v for bit, v in ov.BITS.items() if bits & bit)
                print(f"  a{n}: {med[f'a{n}'] * 1e6:9.1f} us  x{med['kernel'] / med[f'a{n}']:.2f}  ({what})")
    dev.close()


if __name__ == "__main__":
    main()
