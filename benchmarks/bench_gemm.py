#!/usr/bin/env python3
"""GEMM (shaders/gemm.comp, the portable float32-accumulating kernel) against PyTorch CUDA matmuls.

Run on the H100 (or anywhere: without torch/CUDA only our rows are timed):
    PYTHONPATH=. python3 benchmarks/bench_gemm.py [--rounds 5] [--quick] [--json out.json]
Cases: BERT-base self-attention as the ONNX backend issues it (batch 8, 12 heads, sequence 128,
head size 32: scores Q x K^T with K bound as a transposed strided view, then probs x V with V
strided), the BERT feed-forward product 1024 x 768 x 3072, and square 1024^3 / 4096^3; FLOAT32
and FLOAT16 each.
1. Correctness first, on every timed case: sampled rows of the output against the float64
   reference under docs/gemm.md's bound (tests/gemm_reference.py); FAIL voids the timings.
2. Timing, interleaved rounds, median seconds per execution (N executions per recorded sequence,
   a call lasting about 50 ms): ours; torch_f32 (TF32 off: float32 FMAs, the same arithmetic
   class) and torch_f16 (cuBLAS on tensor cores, float32 accumulation) on contiguous copies.
   GFLOPS = 2 * batch * M * N * K / s / 1e9; ratio = torch's seconds / ours (> 1: ours faster).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
from bench_coop import time_interleaved  # benchmarks/ (the script's directory)

import kompute_dml as kdml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from gemm_reference import check

D = kdml.DataType
TD = kdml.TensorDesc
SAMPLE = 8  # output rows checked per matrix (first matrices only)


def cases(quick: bool) -> list[dict[str, Any]]:
    b, h, s, d = (2, 4, 64, 32) if quick else (8, 12, 128, 32)
    out = [dict(name=f"attn_scores b{b}h{h}s{s}d{d}", kind="scores", b=b, h=h, s=s, d=d),
           dict(name=f"attn_context b{b}h{h}s{s}d{d}", kind="context", b=b, h=h, s=s, d=d)]
    for m, k, n in ([(96, 200, 130)] if quick else [(1024, 768, 3072), (1024, 1024, 1024), (4096, 4096, 4096)]):
        out.append(dict(name=f"{m}x{k}x{n}", kind="plain", m=m, k=k, n=n))
    return out


class Ours:
    """One case bound on the device: descriptor, operator, tensors, and the logical operands."""

    def __init__(self, dev: kdml.Device, case: dict[str, Any], dt: D, rng: np.random.Generator) -> None:
        npd = dt.numpy_dtype
        if case["kind"] == "plain":
            m, k, n = case["m"], case["k"], case["n"]
            a = rng.standard_normal((m, k)).astype(npd)
            b = rng.standard_normal((k, n)).astype(npd)
            at, bt = dev.tensor(a), dev.tensor(b)
            ad, bd, bview, self.batch = at.desc, bt.desc, bt, 1
            self.a, self.b = a, b
            self.m, self.n, self.k = m, n, k
        else:
            bs, h, s, d = case["b"], case["h"], case["s"], case["d"]
            # K and V as the projections store them: (B, S, H, D)
            stored = rng.standard_normal((bs, s, h, d)).astype(npd)
            st = dev.tensor(stored)
            if case["kind"] == "scores":
                a = rng.standard_normal((bs, h, s, d)).astype(npd)
                bd = TD(dt, (bs, h, d, s), (s * h * d, d, 1, h * d))  # K^T over K's storage
                self.b = np.transpose(stored, (0, 2, 3, 1))
                self.m, self.n, self.k = s, s, d
            else:
                a = np.abs(rng.standard_normal((bs, h, s, s))).astype(npd) / s
                bd = TD(dt, (bs, h, s, d), (s * h * d, d, h * d, 1))  # V (B, H, S, D) over its storage
                self.b = np.transpose(stored, (0, 2, 1, 3))
                self.m, self.n, self.k = s, d, s
            at = dev.tensor(a)
            ad, self.a, self.batch = at.desc, a, bs * h
            bview = kdml.Tensor(st.buffer, bd, st.offset)
        od = TD(dt, (*self.a.shape[:-2], self.m, self.n))
        self.out = dev.empty(od)
        self.op = dev.compile(kdml.GemmDesc(ad, bd, None, od, alpha=0.125 if case["kind"] == "scores" else 1.0))
        self.alpha = 0.125 if case["kind"] == "scores" else 1.0
        self.dev, self.ins = dev, [at, bview, None]

    def flops(self) -> float:
        return 2.0 * self.batch * self.m * self.n * self.k

    def check(self) -> bool:
        self.op.execute(self.ins, [self.out])
        got = self.out.numpy()
        a, b = self.a, np.broadcast_to(self.b, (*self.a.shape[:-2], *self.b.shape[-2:]))
        if a.ndim == 4:
            got, a, b = got[:1, :2], a[:1, :2], b[:1, :2]
        rows = slice(0, SAMPLE) if got.shape[-2] > SAMPLE else slice(None)
        try:
            check(got[..., rows, :], a[..., rows, :], b, None, False, False, self.alpha, 1.0)
            return True
        except AssertionError as e:
            print("    FAIL:", e)
            return False

    def make(self, count: int) -> Any:
        def call() -> None:
            with self.dev.record() as rec:
                for _ in range(count):
                    rec.execute(self.op, self.ins, [self.out])
        return call


def torch_peers(ours: Ours) -> dict[str, Any]:
    try:
        import torch
    except ImportError:
        return {}
    if not torch.cuda.is_available():
        return {}
    torch.backends.cuda.matmul.allow_tf32 = False
    cuda = torch.device("cuda")
    peers = {}
    for name, tdt in (("torch_f32", torch.float32), ("torch_f16", torch.float16)):
        a = torch.from_numpy(np.ascontiguousarray(ours.a.astype(np.float32))).to(cuda, tdt)
        b = torch.from_numpy(np.ascontiguousarray(ours.b.astype(np.float32))).to(cuda, tdt)
        out = torch.empty((*ours.a.shape[:-2], ours.m, ours.n), dtype=tdt, device=cuda)

        def make(count: int, a: Any = a, b: Any = b, out: Any = out) -> Any:
            def call() -> None:
                for _ in range(count):
                    torch.matmul(a, b, out=out)
                torch.cuda.synchronize()
            return call
        peers[name] = make
    return peers


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    rng = np.random.default_rng(7)
    dev = kdml.Device()
    print(f"device: {dev.name}")
    rows, ok = [], True
    for case in cases(args.quick):
        for dt in (D.FLOAT32, D.FLOAT16):
            ours = Ours(dev, case, dt, rng)
            good = ours.check()
            ok &= good
            makes = {"ours": ours.make, **torch_peers(ours)}
            secs = time_interleaved(makes, args.rounds)
            row = {"case": case["name"], "type": dt.name, "variant": ours.op.plans[0].variant, "correct": good,
                   **{f"{k}_us": v * 1e6 for k, v in secs.items()},
                   **{f"{k}_gflops": ours.flops() / v / 1e9 for k, v in secs.items()}}
            rows.append(row)
            peers = "  ".join(f"{k} {ours.flops() / v / 1e9:9.1f} GFLOPS ({v / secs['ours']:.2f}x)"
                              for k, v in secs.items() if k != "ours")
            print(f"{case['name']:<28} {dt.name:<8} {ours.op.plans[0].variant:<12} "
                  f"{'OK  ' if good else 'FAIL'} ours {secs['ours'] * 1e6:9.1f} us {ours.flops() / secs['ours'] / 1e9:9.1f} "
                  f"GFLOPS  {peers}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    dev.close()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
