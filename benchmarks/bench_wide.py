"""The exact 16/32-bit MATRIX_MULTIPLY_INTEGER_TO_FLOAT kernel (`wide`, shaders/matmul_wide.comp)
against our float `gpu` family and PyTorch CUDA matmuls.

Run on the H100 (or anywhere: without torch/CUDA only our rows are timed):
    python -m benchmarks.bench_wide [--rounds 7] [--sweep] [--quick] [--json out.json]
Per width (int16 x int16, int32 x int32) and shape M x K x N (1024^3, 2048^3, 4096^3,
512x384x1536; --quick: small shapes), one case: full-range random A and B, a per-tensor A zero
point and per-column B zero points (random), unit FLOAT32 scales, no bias, so that the exact
result is float32(S), S = sum_k (A - AZP)(B - BZP) rounded once.
1. Correctness first, on sampled rows of every timed case: `wide` must equal float32(S) bit for
   bit (FAIL lines void the timings), and so must `wide_i64` (the variant on 64-bit integer
   multiply-adds, where the device has shader_int64); the `gpu` family's largest error in ulps of
   float32(S) is printed (it sums in float).
2. Timing, in the same interleaved rounds (median seconds per execution; N executions per
   recorded sequence, so that a call lasts about 50 ms): ours `wide` (default block, the
   dispatcher's choice), `wide_i64`, ours `gpu`, and with torch + CUDA: torch_f64 = float64 matmul of (A - AZP) and (B - BZP) held as
   float64 on the GPU (exact for 16-bit while K * max|a'b'| < 2^53: the closest exact peer; for
   32-bit not exact, a speed reference only), torch_f32 = float32 matmul (TF32 off; not exact;
   speed reference). GOPS = 2MNK/s/1e9; ratios = other's seconds / wide's seconds (> 1: wide
   faster).
3. --sweep: every block (outputs per invocation; ops/matmul_wide.BLOCKS) of both flavours
   (32-bit words, i64) of the `wide` kernel per shape, checked then timed in one interleaved
   set; the fastest is printed per shape.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from typing import Any

import numpy as np

import kompute_dml as kdml
from benchmarks.bench_coop import time_interleaved
from kompute_dml.ops.matmul_integer import compile_matmul_integer
from kompute_dml.ops.matmul_wide import BLOCKS, DEFAULT_BLOCK, INT64_CAPABILITY, compile_wide

D = kdml.DataType
SHAPES = [(1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096), (512, 384, 1536)]
QUICK_SHAPES = [(64, 256, 96), (33, 300, 70)]
WIDTHS = {"int16": np.int16, "int32": np.int32}
SAMPLE_ROWS = 4


# ---- exact reference (as tests/test_matmul_wide.py) ------------------------------------------
def exact_sum(a1: np.ndarray, b1: np.ndarray) -> np.ndarray:
    """sum_k a1 b1 exactly (Python ints) for |a1|, |b1| < 2^33: 16-bit limbs, int64 partial sums."""
    al, ah, bl, bh = a1 & 0xFFFF, a1 >> 16, b1 & 0xFFFF, b1 >> 16
    return ((ah @ bh).astype(object) * 2**32 + (ah @ bl + al @ bh).astype(object) * 2**16
            + (al @ bl).astype(object))


def round_f32(v: int) -> float:
    """The float32 nearest to integer v (ties to even), by integer arithmetic."""
    mag, shift = abs(int(v)), max(abs(int(v)).bit_length() - 24, 0)
    if shift:
        q, r = divmod(mag, 1 << shift)
        half = 1 << (shift - 1)
        mag = q + (r > half or (r == half and q & 1))
    return math.copysign(math.ldexp(float(mag), shift), int(v))


# ---- one case on the device ----------------------------------------------------------------
class Case:
    """A, B, zero points and the operator (kernel `wide` or `gpu`, or a `wide` block), bound."""

    def __init__(self, dev: kdml.Device, data: dict[str, np.ndarray], uploads: dict[str, kdml.Tensor], kernel: str,
                 block: tuple[int, int] | None = None, int64: bool | None = None) -> None:
        a, b = data["a"], data["b"]
        m, k = a.shape
        n = b.shape[1]
        dt = D.from_numpy(a.dtype)
        f = kdml.TensorDesc
        desc = kdml.MatrixMultiplyIntegerToFloatDesc(
            f(dt, (m, k)), f(D.FLOAT32, (1, 1)), f(dt, (1, 1)), f(dt, (k, n)), f(D.FLOAT32, (1, 1)), f(dt, (1, n)),
            None, f(D.FLOAT32, (m, n)))
        if block is not None or int64 is not None:
            self.op = compile_wide(dev, desc, block, int64)
        else:
            self.op = compile_matmul_integer(dev, desc, kernel=kernel)
        self.dev, self.data = dev, data
        one = np.ones((1, 1), np.float32)
        for key in ("a", "azp", "b", "bzp"):  # uploaded once per data set
            if key not in uploads:
                uploads[key] = dev.tensor(data[key])
        self.ins = [uploads["a"], dev.tensor(one), uploads["azp"], uploads["b"], dev.tensor(one), uploads["bzp"], None]
        self.out = dev.empty(desc.output_tensor)

    def run(self, n: int) -> Any:
        def call() -> None:
            with self.dev.record() as r:
                for _ in range(n):
                    r.execute(self.op, self.ins, [self.out])
        return call

    def ulps(self, rows: np.ndarray, want: np.ndarray) -> float:
        """Largest |got - want| over sampled rows, in float32 ulps of want (0: bitwise equal)."""
        self.run(1)()
        got = self.out.numpy()[rows].astype(np.float64)
        ulp = np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)
        return float(np.max(np.abs(got - want) / ulp))


def make_data(rng: np.random.Generator, dtype: Any, m: int, k: int, n: int) -> dict[str, Any]:
    info = np.iinfo(dtype)
    return {"a": rng.integers(info.min, info.max, (m, k), dtype=dtype, endpoint=True),
            "b": rng.integers(info.min, info.max, (k, n), dtype=dtype, endpoint=True),
            "azp": rng.integers(info.min, info.max, (1, 1), dtype=dtype, endpoint=True),
            "bzp": rng.integers(info.min, info.max, (1, n), dtype=dtype, endpoint=True)}


def expected_rows(data: dict[str, Any], rows: np.ndarray) -> np.ndarray:
    a1 = data["a"][rows].astype(np.int64) - int(data["azp"][0, 0])
    b1 = data["b"].astype(np.int64) - data["bzp"].astype(np.int64)
    return np.vectorize(round_f32, otypes=[np.float64])(exact_sum(a1, b1))


def torch_peers(data: dict[str, Any]) -> dict[str, Any]:
    """make(N) -> callable (N launches, then synchronize) for float64 and float32 matmuls of the
    differences, held on the GPU in that type; {} without torch or CUDA."""
    try:
        import torch
    except ImportError:
        return {}
    if not torch.cuda.is_available():
        return {}
    torch.backends.cuda.matmul.allow_tf32 = False
    cuda = torch.device("cuda")
    a1 = data["a"].astype(np.float64) - float(data["azp"][0, 0])
    b1 = data["b"].astype(np.float64) - data["bzp"].astype(np.float64)
    peers = {}
    for name, tdt in (("torch_f64", torch.float64), ("torch_f32", torch.float32)):
        ta, tb = torch.from_numpy(a1).to(cuda, tdt), torch.from_numpy(b1).to(cuda, tdt)
        tc = torch.empty((a1.shape[0], b1.shape[1]), dtype=tdt, device=cuda)

        def make(count: int, ta: Any = ta, tb: Any = tb, tc: Any = tc) -> Any:
            def call() -> None:
                for _ in range(count):
                    torch.matmul(ta, tb, out=tc)
                torch.cuda.synchronize()
            return call
        peers[name] = make
    return peers


# ---- the parts -----------------------------------------------------------------------------
def timing(dev: kdml.Device, shapes: list[tuple[int, int, int]], rounds: int, rng: np.random.Generator,
           do_sweep: bool) -> tuple[list[dict[str, Any]], bool]:
    rows, ok = [], True
    print(f"timing (median of {rounds} interleaved rounds; GOPS = 2MNK/s/1e9; ratio = other s / wide s):")
    for width, dtype in WIDTHS.items():
        for m, k, n in shapes:
            ops = 2.0 * m * n * k
            data = make_data(rng, dtype, m, k, n)
            sample = np.unique(np.linspace(0, m - 1, SAMPLE_ROWS).astype(int))
            want = expected_rows(data, sample)
            uploads: dict[str, kdml.Tensor] = {}
            cases = {"wide": Case(dev, data, uploads, "wide")}
            if INT64_CAPABILITY in dev.capabilities and (dtype == np.int16 or k <= 1 << 16):
                cases["wide_i64"] = Case(dev, data, uploads, "wide", int64=True)
            cases["gpu"] = Case(dev, data, uploads, "gpu")
            errs = {name: c.ulps(sample, want) for name, c in cases.items()}
            ok &= all(e == 0.0 for name, e in errs.items() if name.startswith("wide"))
            makes = {name: c.run for name, c in cases.items()} | torch_peers(data)
            t = time_interleaved(makes, rounds)
            print(f"  {width} {m}x{k}x{n}:")
            for name, sec in t.items():
                note = ""
                if name in cases:
                    note = (f"{cases[name].op.variants[0]}  max error {errs[name]:.3g} ulp"
                            + ("  FAIL (must be exact)" if name.startswith("wide") and errs[name] else ""))
                elif name == "torch_f64":
                    note = "exact" if width == "int16" and k * 2.0**32 < 2.0**53 else "not exact (speed reference)"
                else:
                    note = "not exact (speed reference)"
                print(f"    {name:10s} {sec * 1e6:12.1f} us {ops / sec / 1e9:10.1f} GOPS  {note}")
            for name in t:
                if name != "wide":
                    print(f"    ratio {name} / wide: {t[name] / t['wide']:.3f}")
            row: dict[str, Any] = {"width": width, "shape": [m, k, n], "seconds": t, "max_ulps": errs,
                                   "variants": {name: c.op.variants[0] for name, c in cases.items()}}
            if do_sweep:
                row["sweep"] = sweep(dev, data, uploads, sample, want, rounds, ops)
                ok &= all(v["exact"] for v in row["sweep"].values())
            rows.append(row)
    return rows, ok


def sweep(dev: kdml.Device, data: dict[str, Any], uploads: dict[str, kdml.Tensor], sample: np.ndarray,
          want: np.ndarray, rounds: int, ops: float) -> dict[str, dict[str, Any]]:
    flavors = [False]
    if INT64_CAPABILITY in dev.capabilities and (data["a"].dtype == np.int16 or data["a"].shape[1] <= 1 << 16):
        flavors = [False, True]
    cases = {f"{tr}x{tc}{' i64' if i64 else ''}": Case(dev, data, uploads, "wide", (tr, tc), i64)
             for i64 in flavors for tr, tc in BLOCKS}
    exact = {name: c.ulps(sample, want) == 0.0 for name, c in cases.items()}
    t = time_interleaved({name: c.run for name, c in cases.items()}, max(3, rounds // 2))
    for name, sec in t.items():
        print(f"    sweep block {name} ({cases[name].op.variants[0]}): {sec * 1e6:12.1f} us "
              f"{ops / sec / 1e9:10.1f} GOPS" + ("" if exact[name] else "  FAIL"))
    best = min(t, key=lambda x: t[x])
    print(f"    fastest block: {best}")
    return {name: {"seconds": t[name], "exact": exact[name]} for name in t}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--sweep", action="store_true", help="also time every block of the wide kernel")
    ap.add_argument("--quick", action="store_true", help="small shapes only (a dry run, e.g. on lavapipe)")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    dev = kdml.Device()
    print(f"device: {dev.name}; matmul family: {dev.policy.matmul_family}; default blocks: {DEFAULT_BLOCK}")
    t0 = time.perf_counter()
    rows, ok = timing(dev, QUICK_SHAPES if args.quick else SHAPES, args.rounds, np.random.default_rng(2026),
                      args.sweep)
    print(f"\ncorrectness: {'wide exact on every sampled row' if ok else 'FAILURES (timings void)'}; "
          f"{time.perf_counter() - t0:.0f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": dev.name, "correct": ok, "rows": rows}, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
