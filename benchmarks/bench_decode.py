"""The small-M ("decode") MATRIX_MULTIPLY_INTEGER_TO_FLOAT family (gemv) against coopmat and PyTorch.

On the H100:   python -m benchmarks.bench_decode [--rounds 7] [--no-sweep] [--json out.json]
Anywhere (lavapipe, no torch needed): python -m benchmarks.bench_decode --quick
Per shape M x K x N (M in 1, 2, 4, 8, 16, 32 with K = N = 4096, and M x 4096 x 11008 / M x 11008 x
4096 for M = 1, 16), all timed in the same interleaved rounds (bench_coop.time_interleaved: N
executions per recorded sequence, seconds per execution = median over rounds):
  gemv_quant      ours, gemv family, default variant (OpSDot where the device has it) and configuration:
                  u8 A with a zero point, s8 B row-major, per-column B scale, (N,) bias, FLOAT32 out
                  (the quantized-transformer case, bench_coop.py's `quant` row)
  gemv_gemm       the same kernel, s8 x s8, unit scales, no zero point or bias
  gemv_quant_Bcol the quant case with B column-major (k contiguous: the `_c` variants)
  gemv_port_quant the portable variant (no integer dot product) on the quant case
  coop_quant      the coopmat family (tensor cores) on the quant case, where the device has them
  torch_int_mm+dequant   bench_coop.torch_peers: A ^ 0x80, torch._int_mm (A padded to 32 rows, B
                  column-major), scales, zero-point correction, bias: the issue's reference
  torch_int_mm_Bcol      torch._int_mm alone (s8 x s8, int32 out)
  torch_f16       torch float16 x @ W (B row-major), a reference point
Every `ours` row is first checked bitwise on sampled rows against numpy int64 (FAIL: timing void).
TOPS = 2*M*N*K / s / 1e12; GB/s of B = K*N bytes / s (the H100's HBM3 streams about 3000: a row near
that is memory-bound); `torch/ours` > 1: ours faster. Then (unless --no-sweep) the quant case
through alternative gemv configurations (ops/matmul_gemv.sweep_configs: WG, MT, NCOL x NL, KC), each
checked, timed in interleaved rounds; `best` names the fastest per shape. SUMMARY is printed last.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import numpy as np

import kompute_dml as kdml
from benchmarks.bench_coop import Ours, random_inputs, time_interleaved, torch_peers
from kompute_dml.ops.matmul_coop import CAPABILITY as COOP_CAPABILITY
from kompute_dml.ops.matmul_coop import subgroup_size
from kompute_dml.ops.matmul_gemv import DOT_CAPABILITY, GemvConfig, compile_gemv, default_config, sweep_configs

SHAPES = [(m, 4096, 4096) for m in (1, 2, 4, 8, 16, 32)] + [(1, 4096, 11008), (16, 4096, 11008), (1, 11008, 4096),
                                                            (16, 11008, 4096)]
QUICK_SHAPES = [(1, 512, 512), (4, 512, 512), (16, 512, 512)]
SAMPLE_ROWS = 4


def cfg_name(c: GemvConfig) -> str:
    return f"wg{c.wg} mt{c.mt} {c.nl}x{c.ncol}col kc{c.kc}"


def gemv_case(dev: kdml.Device, a: np.ndarray, b: np.ndarray, quant: bool, *, dot: bool | None = None,
              config: GemvConfig | None = None, uploads: dict[Any, Any] | None = None, b_col: bool = False) -> Ours:
    """bench_coop.Ours (inputs, scales, bias, its expected rows) with the operator recompiled on the
    gemv family: `dot` the variant, `config` the specialization constants (None: the defaults)."""
    case = Ours(dev, a, b, b_colmajor=b_col, quant=quant, family="gemv", uploads=uploads)
    if dot is not None or config is not None:
        case.op = compile_gemv(dev, case.op.desc, dot=dot, config=config)
    return case


def exact(case: Ours, rows: np.ndarray) -> bool:
    """Bitwise against numpy int64 -> float32 (every family here sums integers exactly)."""
    case.run(1)()
    got = case.out.numpy()[rows]
    return bool(np.array_equal(got.view(np.uint32), case.expected_rows(rows).view(np.uint32)))


def torch_f16(a: np.ndarray, b: np.ndarray) -> dict[str, Any]:
    try:
        import torch
    except ImportError:
        return {}
    if not torch.cuda.is_available():
        return {}
    x = torch.from_numpy(a.astype(np.float16)).cuda()
    w = torch.from_numpy(b.astype(np.float16)).cuda()
    out = torch.empty((a.shape[0], b.shape[1]), dtype=torch.float16, device="cuda")

    def make(count: int) -> Any:
        def call() -> None:
            for _ in range(count):
                torch.matmul(x, w, out=out)
            torch.cuda.synchronize()
        return call
    return {"torch_f16": make}


def run_shape(dev: kdml.Device, shape: tuple[int, int, int], rounds: int, sweep: bool,
              rng: np.random.Generator) -> dict[str, Any]:
    m, k, n = shape
    ops = 2.0 * m * n * k
    rows = np.unique(np.linspace(0, m - 1, SAMPLE_ROWS).astype(int))
    a8, b = random_inputs(rng, m, k, n, np.int8)
    au, _ = random_inputs(rng, m, k, n, np.uint8)
    uploads: dict[Any, Any] = {}
    cases: dict[str, Ours] = {"gemv_quant": gemv_case(dev, au, b, True, uploads=uploads),
                              "gemv_gemm": gemv_case(dev, a8, b, False, uploads=uploads),
                              "gemv_quant_Bcol": gemv_case(dev, au, b, True, uploads=uploads, b_col=True)}
    if DOT_CAPABILITY in dev.capabilities:
        cases["gemv_port_quant"] = gemv_case(dev, au, b, True, dot=False, uploads=uploads)
    if COOP_CAPABILITY in dev.capabilities:
        cases["coop_quant"] = Ours(dev, au, b, b_colmajor=False, quant=True, family="coopmat", uploads=uploads)
    checks = {name: exact(c, rows) for name, c in cases.items()}
    makes = {name: c.run for name, c in cases.items()}
    makes.update((torch_peers(a8, b, None) or {}) | (torch_peers(au, b, cases["gemv_quant"]) or {}) | torch_f16(au, b))
    makes.pop("torch_int_mm_Brow", None)
    t = time_interleaved(makes, rounds)
    print(f"  {m}x{k}x{n}:")
    for name, sec in t.items():
        note = ""
        if name in cases:
            c = cases[name]
            note = f"{c.op.variants[0]} spec {c.op.plans[0].spec}" + ("" if checks[name] else "  FAIL")
        print(f"    {name:22s} {sec * 1e6:9.2f} us {ops / sec / 1e12:8.3f} TOPS {k * n / sec / 1e9:8.1f} GB/s of B  {note}")
    ref = t.get("torch_int_mm+dequant")
    for peer in ("torch_int_mm+dequant", "torch_f16"):
        if peer in t:
            for name in ("gemv_quant", "coop_quant"):
                if name in t:
                    print(f"    ratio torch/ours {peer} / {name}: {t[peer] / t[name]:.3f}")
    row: dict[str, Any] = {"shape": [m, k, n], "seconds": t, "checks": checks,
                           "variants": {nm: c.op.variants[0] for nm, c in cases.items()}}
    if sweep:
        row["sweep"] = sweep_shape(dev, au, b, rounds, rows, uploads)
        best = min(row["sweep"], key=lambda r: r["seconds"]) if row["sweep"] else None
        row["best"] = best
        if best:
            gain = t["gemv_quant"] / best["seconds"]
            print(f"    best: {best['config']} {best['seconds'] * 1e6:.2f} us ({gain:.3f}x of the default)")
    row["ratio_vs_dequant"] = (ref / t["gemv_quant"]) if ref else None
    return row


def sweep_shape(dev: kdml.Device, au: np.ndarray, b: np.ndarray, rounds: int, rows: np.ndarray,
                uploads: dict[Any, Any]) -> list[dict[str, Any]]:
    """The quant case through sweep_configs, timed in interleaved rounds of their own."""
    m = au.shape[0]
    sg = subgroup_size(dev)
    cases: dict[str, Ours] = {}
    out = []
    for cfg in sweep_configs(m, sg, gpu=dev.device_type != "cpu"):
        name = cfg_name(cfg)
        if name in cases:
            continue
        try:
            case = gemv_case(dev, au, b, True, config=cfg, uploads=uploads)
        except kdml.UnsupportedError as e:
            print(f"    sweep {name:30s} cannot run: {str(e).split(': ', 2)[-1][:90]}")
            continue
        if not exact(case, rows):
            print(f"    sweep {name:30s} FAIL")
            continue
        cases[name] = case
    t = time_interleaved({nm: c.run for nm, c in cases.items()}, max(3, rounds // 2)) if cases else {}
    ops = 2.0 * au.shape[0] * au.shape[1] * b.shape[1]
    for name, sec in sorted(t.items(), key=lambda kv: kv[1]):
        print(f"    sweep {name:30s} {sec * 1e6:9.2f} us {ops / sec / 1e12:8.3f} TOPS  {cases[name].op.variants[0]}")
        out.append({"config": name, "spec": list(cases[name].op.plans[0].spec), "seconds": sec})
    return out


def summary(rows: list[dict[str, Any]]) -> None:
    print("\nSUMMARY (us per execution; torch/ours > 1: ours faster)")
    print(f"  {'M x K x N':>16s} {'gemv':>9s} {'best cfg':>9s} {'port':>9s} {'B col':>9s} {'coop':>9s} {'int_mm+dq':>10s} "
          f"{'f16':>9s} {'dq/gemv':>8s}  best configuration")
    def cell(t: dict[str, float], key: str) -> str:
        return f"{t[key] * 1e6:9.2f}" if key in t else f"{'-':>9s}"

    for r in rows:
        t = r["seconds"]
        us = lambda key: cell(t, key)  # noqa: E731, B023 (used within this iteration)
        best = r.get("best")
        ratio = f"{r['ratio_vs_dequant']:8.3f}" if r.get("ratio_vs_dequant") else f"{'-':>8s}"
        print(f"  {'x'.join(map(str, r['shape'])):>16s} {us('gemv_quant')} "
              f"{best['seconds'] * 1e6 if best else float('nan'):9.2f} {us('gemv_port_quant')} {us('gemv_quant_Bcol')} {us('coop_quant')} "
              f"{us('torch_int_mm+dequant'):>10s} {us('torch_f16')} {ratio}  {best['config'] if best else '-'}"
              + ("" if all(r["checks"].values()) else "  FAIL"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--quick", action="store_true", help="small shapes (a dry run; lavapipe)")
    ap.add_argument("--no-sweep", action="store_true", help="skip the configuration sweep")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    dev = kdml.Device()
    sg = subgroup_size(dev)
    print(f"device: {dev.name}; subgroup size {sg}; capabilities: {', '.join(sorted(dev.capabilities)) or 'none'}; "
          f"default gemv configs: " + "; ".join(f"M={m}: {cfg_name(default_config(m, sg, gpu=dev.device_type != 'cpu'))}"
                                               for m in (1, 2, 4, 8, 16)))
    rng = np.random.default_rng(2026)
    t0 = time.perf_counter()
    rows = [run_shape(dev, s, args.rounds, not args.no_sweep, rng) for s in (QUICK_SHAPES if args.quick else SHAPES)]
    summary(rows)
    ok = all(all(r["checks"].values()) for r in rows)
    print(f"\ncorrectness: {'all OK' if ok else 'FAILURES (timings void)'}; {time.perf_counter() - t0:.0f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": dev.name, "rows": rows}, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
