"""The cooperative-matrix (tensor core) MATRIX_MULTIPLY_INTEGER_TO_FLOAT kernels against torch._int_mm.

Run on a GPU whose kompute_dml Device has the `cooperative_matrix` capability (the H100):
    python -m benchmarks.bench_coop [--rounds 7] [--sweep | --ablate] [--json out.json]
1. Correctness first: small and odd shapes through every load mode, and sampled rows of each
   timed shape, against numpy int64 (bitwise FLOAT32); FAIL lines mean the timings are void.
2. Timing, per shape (M x K x N): ours = N executions in one `dev.record()` (the recorded
   sequence replays), seconds per execution = median over rounds; torch = N launches then
   torch.cuda.synchronize(), same accounting, rounds interleaved with ours. Rows:
     gemm  s8 x s8, unit scales, no zero point or bias (ours still runs its epilogue and
           writes FLOAT32) vs torch._int_mm (int32 out) with B column-major (cuBLASLt's fast
           layout; M padded to 32 when M <= 16, which _int_mm needs). Ours with B row-major
           (`_rr`, staged transposed) and column-major (`_rc`); also (unless --no-compare) the
           same B row-major gemm through the `dot` family (OpSDot, no tensor cores; where the
           device has integer_dot_product) and the portable `gpu` family (float FMAs).
     quant u8 A with a zero point, s8 B, per-column B scale, (N,) bias, FLOAT32 out (the
           quantized-transformer case) vs torch: A ^ 0x80 -> int8, _int_mm, then
           acc * s + (K*za'*zb - za'*colsum(B)) * s + bias - rowsum(A')*zb*s (colsum of the
           weight precomputed, as onnxruntime pre-packs it). Ours with B row-major (ONNX's
           weight layout) and column-major (the peer's): `ratio ours_quant_Bcol / ours_gemm_Bcol`
           is what the zero point, scales and bias cost in one layout.
   TOPS = 2*M*N*K / s / 1e12; ratio = torch seconds / ours seconds (> 1: ours faster).
3. --sweep: the same shapes through alternative tile configurations (specialization
   constants BM BN BK WM WN GROUP_M and the row-major-B staging), each checked on sampled
   rows before it is timed, to pick the defaults of kompute_dml/ops/matmul_coop.py.
--staging: in place of the timing table, the staging options of TileConfig against the default
(coop_ablate.staging; SUMMARY staging printed last; about 3-4 minutes on the H100).
--ablate: after the timing, which part of the kernel costs the time (coop_ablate.py:
variants that leave one part out, wrong results by design), then a compact summary table LAST.
--family dot|coopmat-emulated times that family in place of `coopmat` (coopmat-emulated runs on
any device: a slow dry run of the script).
Budget: the sweep stops once --budget seconds (default 270) have passed since the start.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import numpy as np

import kompute_dml as kdml
from benchmarks.coop_ablate import ablate, staging, staging_summary, summary
from benchmarks.overlay_ablation import compile_ablation
from kompute_dml.bench.timing import batched, repeater
from kompute_dml.ops.matmul_coop import FAMILIES, LARGE, MEDIUM, NARROW, TileConfig, compile_coop
from kompute_dml.ops.matmul_integer import compile_matmul_integer

D = kdml.DataType
SHAPES = [(8192, 8192, 8192), (4096, 4096, 4096), (512, 384, 1536), (128, 384, 1536), (1, 4096, 4096), (16, 4096, 4096)]
QUICK_SHAPES = [(64, 256, 96), (16, 512, 64)]
SWEEP = [
    LARGE, MEDIUM, NARROW,
    TileConfig(128, 128, 32, 64, 32), TileConfig(128, 128, 64, 64, 64), TileConfig(128, 128, 64, 32, 64),
    TileConfig(128, 256, 32, 64, 64), TileConfig(256, 128, 32, 64, 64), TileConfig(128, 128, 64, 64, 32, b_rows="n"),
    TileConfig(128, 128, 64, 64, 32, group_m=1), TileConfig(128, 128, 64, 64, 32, group_m=16),
    TileConfig(64, 128, 64, 32, 32), TileConfig(32, 128, 64, 32, 32), TileConfig(16, 64, 128, 16, 16),
    TileConfig(16, 32, 256, 16, 16), TileConfig(16, 128, 64, 16, 32),
]
SAMPLE_ROWS = 4  # rows of a timed shape compared with numpy int64
BATCH_TARGET = 0.05  # seconds per timed call (N executions)


def cfg_name(c: TileConfig) -> str:
    opts = (f"{'' if c.b_rows == 'r' else ' Brow'}{'' if c.stages == 2 else f' {c.stages}st'}"
            f"{' lean' if c.lean else ''}{f' ksplit {c.ksplit}' if c.ksplit > 1 else ''}")
    return f"{c.bm}x{c.bn}x{c.bk} w{c.wm}x{c.wn} g{c.group_m}{opts}"


# ---- one operator on the device ---------------------------------------------------------------
class Ours:
    """One MATRIX_MULTIPLY_INTEGER_TO_FLOAT case on the device, its inputs bound."""

    def __init__(self, dev: kdml.Device, a: np.ndarray, b: np.ndarray, *, b_colmajor: bool, quant: bool,
                 out_dt: kdml.DataType = D.FLOAT32, family: str = "coopmat", config: TileConfig | None = None,
                 rng: np.random.Generator | None = None, uploads: dict[Any, Any] | None = None,
                 ablation: int = 0, sums: str | None = None) -> None:
        rng = rng or np.random.default_rng(0)
        m, k = a.shape
        n = b.shape[1]
        self.dev, self.a, self.b, self.quant = dev, a, b, quant
        a_desc = kdml.TensorDesc(D.from_numpy(a.dtype), (m, k))
        b_desc = kdml.TensorDesc(D.from_numpy(b.dtype), (k, n), (1, k) if b_colmajor else None)
        b_buf = np.ascontiguousarray(b.T) if b_colmajor else b
        self.a_scale = np.array([[0.02 if quant else 1.0]], np.float32)
        self.b_scale = (rng.uniform(0.005, 0.02, (1, n)) if quant else np.ones((1, 1))).astype(np.float32)
        zp = (lambda: int(rng.integers(100, 156))) if a.dtype == np.uint8 else (lambda: int(rng.integers(-28, 28)))
        self.azp = np.array([[zp()]], a.dtype) if quant else None
        self.bias = rng.standard_normal(n).astype(np.float32) if quant else None
        f = kdml.TensorDesc
        uploads = {} if uploads is None else uploads  # arrays already on the device, by identity
        t = lambda x: uploads.setdefault((id(x), x.shape), dev.tensor(x))  # noqa: E731
        desc = kdml.MatrixMultiplyIntegerToFloatDesc(
            a_desc, f(out_dt, (1, 1)), f(a_desc.data_type, (1, 1)) if quant else None, b_desc,
            f(out_dt, self.b_scale.shape), None, f(out_dt, (m, n), (0, 1)) if quant else None, f(out_dt, (m, n)))
        if ablation:
            self.op = compile_ablation(dev, desc, ablation, config)
        elif config is not None or sums is not None:
            self.op = compile_coop(dev, desc, family=family, config=config, sums=sums)
        else:
            self.op = compile_matmul_integer(dev, desc, kernel=family)
        self.b_buf = b_buf  # (kept alive: `uploads` is keyed by identity)
        bias_t = kdml.Tensor(dev.tensor(self.bias).buffer, desc.bias_tensor) if quant else None
        self.ins = [t(a), dev.tensor(self.a_scale.astype(out_dt.numpy_dtype)), dev.tensor(self.azp) if quant else None,
                    kdml.Tensor(t(b_buf).buffer, b_desc), dev.tensor(self.b_scale.astype(out_dt.numpy_dtype)), None, bias_t]
        self.out = dev.empty(desc.output_tensor)

    def expected_rows(self, rows: np.ndarray) -> np.ndarray:
        """The kernel's result on `rows`: int64 sums, then float32(S) * (sa * sb) + bias."""
        a = self.a[rows].astype(np.int64) - (int(self.azp[0, 0]) if self.quant else 0)
        s = a @ self.b.astype(np.int64)
        res = s.astype(np.float32) * (self.a_scale[0, 0] * self.b_scale) + (self.bias if self.quant else np.float32(0))
        return res.astype(self.out.desc.data_type.numpy_dtype)

    def check(self, rows: np.ndarray | None = None) -> bool:
        self.run(1)()
        got = self.out.numpy()
        rows = np.arange(got.shape[0]) if rows is None else rows
        exp = self.expected_rows(rows)
        if not self.op.variants[0].startswith("mmc8"):  # the portable families sum in float: not bitwise
            return bool(np.allclose(got[rows], exp, rtol=1e-6, atol=1e-6))
        return bool(np.array_equal(got[rows].view(np.uint32 if got.dtype == np.float32 else np.uint16),
                                   exp.view(np.uint32 if exp.dtype == np.float32 else np.uint16)))

    def run(self, n: int) -> Any:
        def call() -> None:
            with self.dev.record() as r:
                for _ in range(n):
                    r.execute(self.op, self.ins, [self.out])
        return call


# ---- torch peers -----------------------------------------------------------------------------
def torch_peers(a: np.ndarray, b: np.ndarray, quant_case: Ours | None) -> dict[str, Any] | None:
    """Make-functions (N -> callable doing N launches then synchronize) for torch._int_mm with B
    column-major and row-major, and (quant_case) _int_mm plus dequantization."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    cuda = torch.device("cuda")
    m, k = a.shape
    n = b.shape[1]
    mp = m if m > 16 else 32
    a_pad = np.zeros((mp, k), a.dtype)
    a_pad[:m] = a
    a_dev = torch.from_numpy(a_pad).to(cuda)
    b_cm = torch.from_numpy(np.ascontiguousarray(b.T)).to(cuda).t()
    b_rm = torch.from_numpy(np.ascontiguousarray(b)).to(cuda)
    acc = torch.empty((mp, n), dtype=torch.int32, device=cuda)

    def batch(step: Any) -> Any:
        return repeater(step, torch.cuda.synchronize)

    peers: dict[str, Any] = {}
    if a.dtype == np.int8:
        peers["torch_int_mm_Bcol"] = batch(lambda: torch._int_mm(a_dev, b_cm, out=acc))
        peers["torch_int_mm_Brow"] = batch(lambda: torch._int_mm(a_dev, b_rm, out=acc))
    if quant_case is not None:
        q = quant_case
        a8 = torch.empty((mp, k), dtype=torch.int8, device=cuda)
        a8_u = a8.view(torch.uint8)
        za = int(q.azp[0, 0]) - 128  # a - za == (a ^ 0x80 as int8) - (za - 128)
        s = torch.from_numpy((q.a_scale[0, 0] * q.b_scale).astype(np.float32)).to(cuda)  # (1, N)
        colsum = b.astype(np.int64).sum(0)
        col = (q.a_scale[0, 0] * q.b_scale[0].astype(np.float64)) * (-za * colsum) + q.bias
        col_dev = torch.from_numpy(col.astype(np.float32)).to(cuda)
        out = torch.empty((m, n), dtype=torch.float32, device=cuda)
        acc_m = acc[:m]

        def full() -> None:
            torch.bitwise_xor(a_dev, 128, out=a8_u)
            torch._int_mm(a8, b_cm, out=acc)
            torch.mul(acc_m, s, out=out)
            out.add_(col_dev)   # B has no zero point: no rowsum(A) term
        peers["torch_int_mm+dequant"] = batch(full)
    return peers


# ---- timing ----------------------------------------------------------------------------------
def time_interleaved(makes: dict[str, Any], rounds: int) -> dict[str, float]:
    """Median seconds per execution of each make(N), N for BATCH_TARGET seconds a call (timing.batched)."""
    return batched(makes, rounds, BATCH_TARGET)


def finish(rows: Any, path: str | None, ok: bool) -> int:
    """A benchmark's end: its rows written to `path` (JSON) where given, the correctness line, the exit status."""
    if path:
        with open(path, "w") as f:
            json.dump(rows, f, indent=1)
    print("correctness:", "all OK" if ok else "FAIL")
    return 0 if ok else 1


def random_inputs(rng: np.random.Generator, m: int, k: int, n: int, a_dtype: Any) -> tuple[np.ndarray, np.ndarray]:
    lo = 0 if a_dtype == np.uint8 else -128
    a = rng.integers(lo, lo + 256, (m, k), dtype=np.int16).astype(a_dtype)
    b = rng.integers(-128, 128, (k, n), dtype=np.int16).astype(np.int8)
    return a, b


# ---- the three parts -------------------------------------------------------------------------
def correctness(dev: kdml.Device, family: str, rng: np.random.Generator) -> bool:
    ok = True
    print("correctness (whole outputs, bitwise against numpy int64 -> float32):")
    for (m, k, n), a_dt, b_col, quant, out_dt in [
        ((37, 100, 45), np.int8, False, False, D.FLOAT32), ((64, 256, 80), np.uint8, False, True, D.FLOAT32),
        ((130, 512, 96), np.uint8, True, True, D.FLOAT32), ((33, 64, 48), np.int8, True, False, D.FLOAT32),
        ((200, 1000, 300), np.uint8, False, True, D.FLOAT32), ((48, 4096, 64), np.int8, False, False, D.FLOAT32),
    ]:
        a, b = random_inputs(rng, m, k, n, a_dt)
        case = Ours(dev, a, b, b_colmajor=b_col, quant=quant, out_dt=out_dt, family=family, rng=rng)
        good = case.check()
        ok &= good
        print(f"  {m}x{k}x{n} {'u8' if a_dt == np.uint8 else 's8'}xs8 B {'col' if b_col else 'row'}-major "
              f"{'quant' if quant else 'gemm'} {case.op.variants[0]}: {'OK' if good else 'FAIL'}")
    return ok


def timing(dev: kdml.Device, shapes: list[tuple[int, int, int]], rounds: int, family: str, compare: bool,
           rng: np.random.Generator) -> list[dict[str, Any]]:
    rows = []
    print(f"\ntiming (median of {rounds} rounds; TOPS = 2MNK/s; ratio = torch s / ours s):")
    for m, k, n in shapes:
        ops = 2.0 * m * n * k
        sample = np.unique(np.linspace(0, m - 1, SAMPLE_ROWS).astype(int))
        a8, b = random_inputs(rng, m, k, n, np.int8)
        au, _ = random_inputs(rng, m, k, n, np.uint8)
        cases = {"ours_gemm_Brow": Ours(dev, a8, b, b_colmajor=False, quant=False, family=family, rng=rng),
                 "ours_gemm_Bcol": Ours(dev, a8, b, b_colmajor=True, quant=False, family=family, rng=rng),
                 "ours_quant_Brow": Ours(dev, au, b, b_colmajor=False, quant=True, family=family, rng=rng),
                 # the quantized product with B in the peer's layout (torch + dequant multiplies B column-major)
                 "ours_quant_Bcol": Ours(dev, au, b, b_colmajor=True, quant=True, family=family, rng=rng)}
        if compare:
            for other in ("dot", "gpu"):
                if other != family and (other == "gpu" or FAMILIES[other][1] in dev.capabilities):
                    cases[f"{other}_gemm_Brow"] = Ours(dev, a8, b, b_colmajor=False, quant=False, family=other, rng=rng)
        checks = {name: c.check(sample) for name, c in cases.items()}
        makes = {name: c.run for name, c in cases.items()}
        makes.update((torch_peers(a8, b, None) or {}) | (torch_peers(au, b, cases["ours_quant_Brow"]) or {}))
        t = time_interleaved(makes, rounds)
        row = {"shape": [m, k, n], "seconds": t, "checks": checks,
               "variants": {name: c.op.variants[0] for name, c in cases.items()},
               "spec": {name: list(c.op.plans[0].spec) for name, c in cases.items()}}
        rows.append(row)
        print(f"  {m}x{k}x{n}:")
        for name, sec in t.items():
            note = ""
            if name in cases:
                note = f"{cases[name].op.variants[0]} spec {cases[name].op.plans[0].spec}" + ("" if checks[name] else "  FAIL")
            print(f"    {name:22s} {sec * 1e3:9.4f} ms {ops / sec / 1e12:8.2f} TOPS  {note}")
        best = t.get("torch_int_mm_Bcol")
        if best:
            for name in ("ours_gemm_Brow", "ours_gemm_Bcol", "dot_gemm_Brow", "gpu_gemm_Brow"):
                if name in t:
                    print(f"    ratio {name} / torch_int_mm_Bcol: {best / t[name]:.3f}")
        for name in ("dot_gemm_Brow", "gpu_gemm_Brow"):
            if name in t:
                print(f"    ratio ours_gemm_Brow / {name}: {t[name] / t['ours_gemm_Brow']:.3f}")
        if "torch_int_mm+dequant" in t:
            for name in ("ours_quant_Brow", "ours_quant_Bcol"):
                print(f"    ratio {name} / torch_int_mm+dequant: {t['torch_int_mm+dequant'] / t[name]:.3f}")
        print(f"    ratio ours_quant_Bcol / ours_gemm_Bcol (the quantized epilogue's cost): "
              f"{t['ours_gemm_Bcol'] / t['ours_quant_Bcol']:.3f}")
    return rows


def sweep(dev: kdml.Device, shapes: list[tuple[int, int, int]], rounds: int, family: str,
          rng: np.random.Generator, deadline: float) -> list[dict[str, Any]]:
    rows = []
    print(f"\nsweep (s8 x s8 gemm, B row-major unless noted; median of {rounds} rounds):")
    for m, k, n in shapes:
        ops = 2.0 * m * n * k
        a, b = random_inputs(rng, m, k, n, np.int8)
        sample = np.unique(np.linspace(0, m - 1, SAMPLE_ROWS).astype(int))
        print(f"  {m}x{k}x{n}:")
        uploads: dict[Any, Any] = {}
        for cfg in SWEEP:
            if time.perf_counter() > deadline:
                print("    (sweep stopped: --budget seconds spent)")
                return rows
            try:
                case = Ours(dev, a, b, b_colmajor=False, quant=False, family=family, config=cfg, rng=rng, uploads=uploads)
            except kdml.UnsupportedError as e:
                print(f"    {cfg_name(cfg):28s} cannot run: {str(e).split(': ', 2)[-1][:90]}")
                continue
            good = case.check(sample)
            sec = time_interleaved({"x": case.run}, rounds)["x"] if good else float("nan")
            rows.append({"shape": [m, k, n], "config": cfg_name(cfg), "seconds": sec, "check": good})
            print(f"    {cfg_name(cfg):28s} {sec * 1e3:9.4f} ms {ops / sec / 1e12:8.2f} TOPS" + ("" if good else "  FAIL"))
            del case
    return rows


def parse_staging_shapes(text: str | None) -> list[tuple[tuple[int, int, int], bool]] | None:
    """'8192x8192x8192,4096x4096x4096q' -> [((8192, 8192, 8192), False), ((4096, 4096, 4096), True)]."""
    if not text:
        return None
    out = []
    for item in text.split(","):
        quant = item.endswith("q")
        m, k, n = (int(v) for v in item.rstrip("q").split("x"))
        out.append(((m, k, n), quant))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--sweep", action="store_true", help="also time alternative tile configurations")
    ap.add_argument("--family", default="coopmat", choices=list(FAMILIES), help="the family timed as ours")
    ap.add_argument("--no-compare", action="store_true", help="skip the dot and gpu family rows")
    ap.add_argument("--quick", action="store_true", help="small shapes only (a dry run)")
    ap.add_argument("--ablate", action="store_true", help="also time the ablation variants (coop_ablate.py)")
    ap.add_argument("--staging", action="store_true",
                    help="time the staging options of TileConfig against the default (coop_ablate.staging) "
                         "in place of the timing table")
    ap.add_argument("--staging-shapes", help="--staging on these shapes only: MxKxN (s8 gemm) or MxKxNq "
                                             "(quantized), comma-separated")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--budget", type=float, default=270.0, help="seconds after which the sweep stops (default 270)")
    args = ap.parse_args()
    dev = kdml.Device()
    print(f"device: {dev.name}; capabilities: {', '.join(sorted(dev.capabilities)) or 'none'}; "
          f"matmul family: {dev.policy.matmul_family}")
    cap = FAMILIES[args.family][1]
    if cap is not None and cap not in dev.capabilities:
        print(f"no {cap} capability on this device: nothing to measure (--family coopmat-emulated runs anywhere)")
        return 2
    rng = np.random.default_rng(2026)
    t0 = time.perf_counter()
    ok = correctness(dev, args.family, rng)
    shapes = QUICK_SHAPES if args.quick else SHAPES
    result: dict[str, Any] = {"device": dev.name, "correct": ok}
    if args.staging:
        result["staging"] = staging(dev, args.rounds, rng, Ours, time_interleaved, torch_peers, random_inputs, cfg_name,
                                    args.family, args.quick, parse_staging_shapes(args.staging_shapes))
    else:
        result["timing"] = timing(dev, shapes, args.rounds, args.family, not args.no_compare, rng)
    if args.sweep:
        result["sweep"] = sweep(dev, shapes, max(3, args.rounds // 2), args.family, rng, t0 + args.budget)
    if args.ablate and args.family == "coopmat":
        result["ablation"] = ablate(dev, args.rounds, rng, Ours, time_interleaved, torch_peers, random_inputs, cfg_name)
        summary(result["ablation"], result.get("timing", []))
    if "staging" in result:
        staging_summary(result["staging"])
    print(f"\ncorrectness: {'all OK' if ok else 'FAILURES (timings void)'}; {time.perf_counter() - t0:.0f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
