"""ACTIVATION_SOFTMAX1 (last axis: attention scores, batch x heads x seq x seq) and ACTIVATION_GELU
(a BERT intermediate activation, batch x seq x 4 hidden) against PyTorch CUDA in the same process.

    python -m benchmarks.bench_activation            # GPU rows (torch CUDA if importable)
    python -m benchmarks.bench_activation --small    # lavapipe rows, no torch
    python -m benchmarks.bench_activation --geometries   # softmax rows on each candidate geometry

Ours runs N executions in one `with dev.record() as rec:` (two outputs, alternating); torch runs N
launches (torch.softmax(x, -1), torch.nn.functional.gelu(x): the exact erf GELU), then
synchronizes. A sample is the slope (t(N) - t(1)) / (N - 1) (timing.slopes); contenders
alternate; the figure is the median over rounds. GB/s = (input + output bytes) / time; ratio = torch time / ours (> 1:
ours is faster). Each result is also checked against a float64 reference (max abs error).
With --geometries, each softmax row of GEOMETRY_ROWS runs on the geometry the plan picks and on
each candidate (KDML_SOFTMAX_GEOMETRY, ops/softmax_geometry.py), torch beside; a candidate whose
bits differ from the plan's is marked with its largest difference.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
from collections.abc import Iterator
from typing import Any

import numpy as np

import kompute_dml as kdml
from kompute_dml.bench.cases import executions
from kompute_dml.bench.timing import repeater, slopes
from kompute_dml.ops.softmax_geometry import FORCE_ENV

DT = kdml.DataType
GPU_ROWS = [("softmax", DT.FLOAT32, (1, 12, 16, 16)), ("softmax", DT.FLOAT32, (8, 12, 128, 128)),
            ("softmax", DT.FLOAT32, (64, 12, 256, 256)), ("softmax", DT.FLOAT32, (8, 12, 512, 512)),
            ("softmax", DT.FLOAT32, (8, 12, 127, 127)), ("softmax", DT.FLOAT16, (64, 12, 256, 256)),
            ("softmax", DT.FLOAT32, (64, 12, 256, 1000)), ("softmax", DT.FLOAT32, (8, 4, 1500, 1500)),
            ("softmax", DT.FLOAT16, (8, 4, 1500, 1500)),
            ("gelu", DT.FLOAT32, (1, 16, 1536)), ("gelu", DT.FLOAT32, (8, 128, 1536)),
            ("gelu", DT.FLOAT32, (64, 256, 1536)), ("gelu", DT.FLOAT16, (64, 256, 1536))]
# softmax rows and the geometries timed beside the plan's (ops/softmax_geometry.py)
GEOMETRY_ROWS = [
    (DT.FLOAT32, (8, 4, 1500, 1500), ("l256_k8", "l256_k3v", "l128_k3v", "l128_k4v")),
    (DT.FLOAT16, (8, 4, 1500, 1500), ("l32_k32", "l128_k3v", "l64_k3v", "l64_k4v")),
    (DT.FLOAT32, (64, 12, 256, 1000), ("l32_k32", "l256_k3v", "l128_k3v", "l64_k4v")),
    (DT.FLOAT32, (8, 12, 512, 512), ("l32_k16", "l64_k3v", "l32_k4v")),
    (DT.FLOAT32, (64, 12, 256, 256), ("l32_k8", "l32_k3v", "l16_k4v")),
    (DT.FLOAT16, (64, 12, 256, 256), ("l32_k4", "l32_k3v", "l16_k4v")),
    (DT.FLOAT32, (8, 12, 128, 128), ("l32_k4", "l16_k4v")),
]
SMALL_ROWS = [("softmax", DT.FLOAT32, (1, 12, 16, 16)), ("softmax", DT.FLOAT32, (2, 12, 128, 128)),
              ("gelu", DT.FLOAT32, (1, 16, 1536)), ("gelu", DT.FLOAT32, (2, 128, 1536))]


def reference(kind: str, x: np.ndarray) -> np.ndarray:
    x64 = x.astype(np.float64)
    if kind == "softmax":
        e = np.exp(x64 - x64.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)
    erfc = np.vectorize(math.erfc, otypes=[np.float64])
    return x64 * 0.5 * erfc(-x64 / math.sqrt(2)) if x.size <= 1 << 22 else None  # type: ignore[return-value]


def geometries(dev: kdml.Device, torch: Any, rounds: int, n: int) -> None:
    """GEOMETRY_ROWS: the plan's geometry against each candidate's (and torch), us and torch / ours."""
    print("| type | shape | plan | torch us | " + " | ".join(f"geometry {i + 1}" for i in range(4)) + " |")
    print("| --- | --- | --- | ---: |" + " --- |" * 4)
    rng = np.random.default_rng(0)
    for dt, shape, candidates in GEOMETRY_ROWS:
        x = (rng.standard_normal(shape) * 4.0).astype(dt.numpy_dtype)
        d = kdml.TensorDesc(dt, shape)
        xt = kdml.Tensor(dev.buffer(x.tobytes()), d, 0)
        runs: dict[str, Any] = {}
        for g in ("", *candidates):
            with _forced(g):
                op = dev.compile(kdml.ActivationSoftmax1Desc(d, d, (len(shape) - 1,)))
            if g and not op.variants[0].endswith("_" + g):  # not in the family, or too small for the row
                raise SystemExit(f"geometry {g} does not run {dt.name} rows of {shape[-1]}: got {op.variants[0]}")
            outs = [kdml.Tensor(dev.buffer(d.byte_size), d, 0) for _ in range(2)]
            runs[g or "plan"] = (op, outs)
        contenders: dict[str, Any] = {name: executions(dev, op, [xt], outs) for name, (op, outs) in runs.items()}
        if torch is not None:
            tx = torch.from_numpy(x).cuda()
            make = repeater(lambda tx=tx: torch.softmax(tx, -1), torch.cuda.synchronize)
            contenders["torch"] = lambda n, make=make: make(n)()
        med = slopes(contenders, rounds, n)
        plan_out = runs["plan"][1][0].numpy()
        cells = []
        for g in candidates:
            got = runs[g][1][0].numpy()
            same = np.array_equal(got.view(np.uint8), plan_out.view(np.uint8))
            diff = "" if same else f", d {np.max(np.abs(got.astype(np.float64) - plan_out)):.1e}"
            ratio = f" ({med['torch'] / med[g]:.2f}x)" if "torch" in med else ""
            cells.append(f"{g} {med[g] * 1e6:.1f}{ratio}{diff}")
        t_us = f"{med['torch'] * 1e6:.1f}" if "torch" in med else "-"
        plan = runs["plan"][0].variants[0].split("_", 2)[2]
        ratio = f" ({med['torch'] / med['plan']:.2f}x)" if "torch" in med else ""
        print(f"| {dt.name} | {'x'.join(map(str, shape))} | {plan} {med['plan'] * 1e6:.1f}{ratio} | {t_us} | "
              + " | ".join(cells) + " |", flush=True)


@contextlib.contextmanager
def _forced(geometry: str) -> Iterator[None]:
    prior = os.environ.pop(FORCE_ENV, None)
    if geometry:
        os.environ[FORCE_ENV] = geometry
    try:
        yield
    finally:
        os.environ.pop(FORCE_ENV, None)
        if prior is not None:
            os.environ[FORCE_ENV] = prior


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("-n", type=int, default=20)
    ap.add_argument("--geometries", action="store_true", help="softmax rows on each candidate geometry")
    args = ap.parse_args()
    torch = None
    if not args.small:
        try:
            import torch as _torch

            torch = _torch if _torch.cuda.is_available() else None
        except ImportError:
            pass
    dev = kdml.Device()
    print(f"device: {dev.name}; torch: {torch.__version__ + ' ' + torch.cuda.get_device_name() if torch else '-'}")
    if args.geometries:
        geometries(dev, torch, args.rounds, args.n)
        dev.close()
        return
    print("| op | type | shape | ours us | ours GB/s | torch us | torch GB/s | ratio | variant | max abs err |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | --- | ---: |")
    rng = np.random.default_rng(0)
    for kind, dt, shape in SMALL_ROWS if args.small else GPU_ROWS:
        x = (rng.standard_normal(shape) * (4.0 if kind == "softmax" else 2.0)).astype(dt.numpy_dtype)
        xt = kdml.Tensor(dev.buffer(x.tobytes()), kdml.TensorDesc(dt, shape), 0)
        d = kdml.TensorDesc(dt, shape)
        desc = kdml.ActivationSoftmax1Desc(d, d, (len(shape) - 1,)) if kind == "softmax" else kdml.ActivationGeluDesc(d, d)
        op = dev.compile(desc)
        outs = [kdml.Tensor(dev.buffer(d.byte_size), d, 0) for _ in range(2)]

        contenders: dict[str, Any] = {"ours": executions(dev, op, [xt], outs)}
        if torch is not None:
            tx = torch.from_numpy(x).cuda()
            fn = ((lambda tx=tx: torch.softmax(tx, -1)) if kind == "softmax"
                  else (lambda tx=tx: torch.nn.functional.gelu(tx)))

            make = repeater(fn, torch.cuda.synchronize)
            contenders["torch"] = lambda n, make=make: make(n)()
        med = slopes(contenders, args.rounds, args.n)
        nbytes = 2 * x.nbytes
        ref = reference(kind, x)
        err = float(np.nanmax(np.abs(outs[0].numpy().astype(np.float64) - ref))) if ref is not None else float("nan")
        t_us = med["torch"] * 1e6 if "torch" in med else float("nan")
        ratio = med["torch"] / med["ours"] if "torch" in med else float("nan")
        print(f"| {kind} | {dt.name} | {'x'.join(map(str, shape))} | {med['ours'] * 1e6:.1f} | "
              f"{nbytes / med['ours'] / 1e9:.0f} | {t_us:.1f} | {nbytes / (t_us * 1e-6) / 1e9:.0f} | {ratio:.2f} | "
              f"{op.variants[0]} | {err:.2e} |", flush=True)
    dev.close()


if __name__ == "__main__":
    main()
