"""MEAN_VARIANCE_NORMALIZATION1 (LayerNormalization shapes of BERT encoders) against PyTorch CUDA's
layer_norm in the same process.

    python -m benchmarks.bench_mvn [--json FILE] [--rounds 5] [--n 50]
    python -m benchmarks.bench_mvn --small          # lavapipe, no torch

Ours runs N executions of one compiled operator in one `with dev.record() as rec:`; torch runs N
`torch.nn.functional.layer_norm` launches, then synchronizes. A sample is the slope
(t(N) - t(1)) / (N - 1) (timing.slopes), so one submission's or synchronize's fixed cost cancels; contenders
alternate within each round and the figure is the median over rounds. GB/s = (bytes of x read +
bytes of y written) / time; ratio = torch time / ours (> 1: ours is faster). Each row's output is
checked against float64 numpy (max |error| printed) and its variant named.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

import kompute_dml as kdml
from kompute_dml.bench.gpu_peers import cuda_torch
from kompute_dml.bench.timing import slopes

DT = kdml.DataType

# (name, x sizes, x strides or None, axes, dtype)
ROWS = [
    ("LN 1x16x384 f32", (16, 384), None, (1,), DT.FLOAT32),
    ("LN 8x128x384 f32", (1024, 384), None, (1,), DT.FLOAT32),
    ("LN 8x128x384 f16", (1024, 384), None, (1,), DT.FLOAT16),
    ("LN 64x256x384 f32", (16384, 384), None, (1,), DT.FLOAT32),
    ("LN 64x256x384 f16", (16384, 384), None, (1,), DT.FLOAT16),
    ("LN 8x128x256 f32", (1024, 256), None, (1,), DT.FLOAT32),
    ("LN 64x256x256 f16", (16384, 256), None, (1,), DT.FLOAT16),
    ("LN 64x256x768 f32", (16384, 768), None, (1,), DT.FLOAT32),
    ("LN 64x512x1024 f32", (32768, 1024), None, (1,), DT.FLOAT32),
    ("LN 64x512x1024 f16", (32768, 1024), None, (1,), DT.FLOAT16),
    ("LN 8x128x384 f32 row pitch 448", (1024, 384), (448, 1), (1,), DT.FLOAT32),
    ("MVN 64x32x56x56 axes 2,3 f32", (64, 32, 56, 56), None, (2, 3), DT.FLOAT32),
    ("MVN 64x32x56x56 axes 0,2,3 f32 (gen)", (64, 32, 56, 56), None, (0, 2, 3), DT.FLOAT32),
]
SMALL = [(n, tuple(max(1, s // 16) if i == 0 else s for i, s in enumerate(sz)), st, ax, dt)
         for n, sz, st, ax, dt in ROWS if st is None]


def ref(x: np.ndarray, g: np.ndarray, b: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    x = x.astype(np.float64)
    m = x.mean(axis=axes, keepdims=True)
    v = ((x - m) ** 2).mean(axis=axes, keepdims=True)
    return (x - m) / np.sqrt(v + np.float32(1e-5)) * g + b


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--n", type=int, default=50)
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--rows", default="", help="keep the rows whose name contains one of these comma-separated words")
    args = ap.parse_args()
    keep = [w for w in args.rows.split(",") if w]
    torch = None if args.small else cuda_torch()
    dev = kdml.Device()
    print(f"device: {dev.name}; torch: {torch.cuda.get_device_name() if torch else 'none'}")
    rng = np.random.default_rng(0)
    results = []
    for name, sizes, strides, axes, dt in (SMALL if args.small else ROWS):
        if keep and not any(w in name for w in keep):
            continue
        npd = dt.numpy_dtype
        shape = tuple(sizes)
        pshape = tuple(s if d in axes else 1 for d, s in enumerate(shape))
        base_shape = shape if strides is None else (shape[0], strides[0])
        xb = (rng.standard_normal(base_shape) * 2 + 0.5).astype(npd)
        x_host = xb if strides is None else xb[:, :shape[1]]
        g = rng.standard_normal(pshape).astype(npd)
        b = rng.standard_normal(pshape).astype(npd)
        xt = dev.tensor(xb)
        if strides is not None:
            xt = kdml.Tensor(xt.buffer, kdml.TensorDesc(dt, shape, strides), 0)
        gt, bt = dev.tensor(g), dev.tensor(b)
        gv = kdml.functional.elementwise.broadcast_view(gt, shape, "scale")
        bv = kdml.functional.elementwise.broadcast_view(bt, shape, "bias")
        yt = dev.empty(kdml.TensorDesc(dt, shape))
        want = ref(x_host, g.astype(np.float64), b.astype(np.float64), axes)
        op = dev.compile(kdml.MeanVarianceNormalization1Desc(xt.desc, gv.desc, bv.desc, yt.desc, axes, True, 1e-5))

        def ours(k: int, op=op, ins=(xt, gv, bv), out=yt) -> None:
            with dev.record() as rec:
                for _ in range(k):
                    rec.execute(op, list(ins), [out])

        ours(2)
        err = float(np.abs(yt.numpy().astype(np.float64) - want).max())
        contenders = {"ours": ours}
        if torch is not None and axes == tuple(range(len(shape) - len(axes), len(shape))):
            tx = torch.from_numpy(np.ascontiguousarray(x_host)).cuda()
            if strides is not None:
                tb = torch.from_numpy(xb).cuda()
                tx = tb[:, :shape[1]]
            norm = shape[len(shape) - len(axes):]
            tg = torch.from_numpy(g.reshape(norm)).cuda()
            tbias = torch.from_numpy(b.reshape(norm)).cuda()

            def theirs(k: int, args=(tx, norm, tg, tbias)) -> None:
                for _ in range(k):
                    torch.nn.functional.layer_norm(*args, 1e-5)
                torch.cuda.synchronize()

            theirs(2)
            contenders["torch"] = theirs
        med = slopes(contenders, args.rounds, args.n)
        nbytes = 2 * int(np.prod(shape)) * dt.size
        row = {"name": name, "variant": op.variants[0], "max_abs_error": err, "ours_us": med["ours"] * 1e6,
               "ours_GBps": nbytes / med["ours"] / 1e9}
        if "torch" in med:
            row.update(torch_us=med["torch"] * 1e6, torch_GBps=nbytes / med["torch"] / 1e9,
                       ratio=med["torch"] / med["ours"])
        results.append(row)
        print(f"{name:38s} {row['variant']:12s} ours {row['ours_us']:8.2f} us {row['ours_GBps']:7.1f} GB/s"
              + (f" | torch {row['torch_us']:8.2f} us {row['torch_GBps']:7.1f} GB/s | ratio {row['ratio']:.2f}"
                 if "ratio" in row else "") + f" | max err {err:.2e}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"device": dev.name, "rows": results}, indent=1))
    dev.close()


if __name__ == "__main__":
    main()
