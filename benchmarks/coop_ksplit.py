"""Few-row tensor-core products with K split over the subgroups (TileConfig.ksplit), against the
default tile, gemv and torch._int_mm; and where gemv should hand few-row products to the tensor
cores (policy.GEMV_MAX_M: `--configs ""` times the defaults alone).

    python -m benchmarks.coop_ksplit [--rows 1,4,8,16,32,64] [--sizes 4096x4096,...]
        [--configs 16x32x512/16x16/k4,...] [--rounds 5] [--json out.json]
    python -m benchmarks.coop_ksplit --rows 4,8,12,16,24,32 --configs "" --sizes 384x1536,...  # the crossover

Few-row products stream B once; a work group of the default thin tile (16 x 32, BK 128, one
shared stage) keeps only its one step of A and B in flight, so the product runs at the memory
latency, not its bandwidth. With ksplit = S, S subgroups (or groups of them) each multiply 1/S of
a step S times as deep: S times the bytes in flight per work group.

Per M x K x N (M from --rows, K x N from --sizes), all in the same interleaved rounds
(bench_coop.time_interleaved: N executions per recorded sequence, median), B column-major (the
ONNX backend's layout for the tensor cores), s8 x s8 and quantized (u8 A with a zero point,
per-column scales, bias), FLOAT32 out:
  default      the dispatcher's own tile for the coopmat family ("default Brow": B row-major)
  <config>     each --configs entry: BMxBNxBK/WMxWN[/kS][/s2][/t] (tensor-core options: lean, one
               shared stage unless /s2, a row-major B kept so unless /t); B column-major, or
               row-major with --b-row-major; refused ones are listed with the reason
  gemv         the gemv family, B row-major (its layout), wherever it accepts M
  torch        torch._int_mm (A padded to 32 rows), s8 only, where torch with CUDA is there
Every case is checked bitwise on sampled rows against numpy int64 first (FAIL: timing void). The
SUMMARY gives per shape the fastest of the default and the --configs cases in their B layout
(column-major, or row-major with --b-row-major), the default's time in that layout over it,
torch's over the default's with B column-major, and gemv's over the faster default layout's
(> 1: the tensor cores win).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import numpy as np

import kompute_dml as kdml
from benchmarks.bench_coop import Ours, cfg_name, finish, random_inputs, time_interleaved, torch_peers
from kompute_dml.core.errors import UnsupportedError
from kompute_dml.ops.matmul_coop import CAPABILITY as COOP_CAPABILITY
from kompute_dml.ops.matmul_coop import TileConfig

SIZES = "4096x4096,4096x11008,11008x4096,768x3072,3072x768"
CONFIGS = ("16x32x256/16x16/k2,16x32x512/16x16/k4,16x16x512/16x16/k4,16x16x1024/16x16/k8,16x64x512/16x32/k4,"
           "32x32x512/16x16/k4,32x64x256/32x16/k2,32x32x256/32x16/k2,64x64x256/32x32/k2,64x32x256/32x16/k4")
SAMPLE_ROWS = 4


def pairs(text: str) -> list[tuple[int, int]]:
    return [(int(k), int(n)) for k, n in (p.lower().split("x") for p in text.split(","))]


def coop_device() -> kdml.Device | None:
    """The device, or None (saying why) where it has no cooperative matrices: nothing to compare."""
    dev = kdml.Device()
    if COOP_CAPABILITY in dev.capabilities:
        return dev
    print(f"{dev.name} has no {COOP_CAPABILITY} capability: nothing to compare")
    return None


def parse_config(text: str) -> TileConfig:
    """BMxBNxBK/WMxWN[/kS][/s2][/t] -> a TileConfig with the tensor cores' options (lean, a row-major
    B kept row-major; /t: transposed into k-contiguous tiles)."""
    parts = text.split("/")
    bm, bn, bk = (int(x) for x in parts[0].split("x"))
    wm, wn = (int(x) for x in parts[1].split("x"))
    opts = {p[0]: int(p[1:] or 1) for p in parts[2:]}
    return TileConfig(bm, bn, bk, wm, wn, stages=opts.get("s", 1), lean=True, b_rows="r" if "t" in opts else "n",
                      ksplit=opts.get("k", 1))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", default="1,4,8,16,32,64", help="M values, comma-separated")
    ap.add_argument("--sizes", default=SIZES, help="KxN pairs, comma-separated")
    ap.add_argument("--configs", default=CONFIGS, help="BMxBNxBK/WMxWN[/kS][/s2], comma-separated")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--no-quant", action="store_true", help="s8 only")
    ap.add_argument("--b-row-major", action="store_true", help="the --configs cases with B row-major")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    dev = coop_device()
    if dev is None:
        return 0
    configs = {cfg_name(c): c for c in map(parse_config, filter(None, args.configs.split(",")))}
    rng = np.random.default_rng(0)
    rows_out: list[dict[str, Any]] = []
    ok = True
    summary = []
    whats = ("s8",) if args.no_quant else ("s8", "quant")
    for k, n in pairs(args.sizes):
        for m in (int(x) for x in args.rows.split(",")):
            a8, b = random_inputs(rng, m, k, n, np.int8)
            au, _ = random_inputs(rng, m, k, n, np.uint8)
            up: dict[Any, Any] = {}
            cases: dict[str, Ours] = {}
            refused: dict[str, str] = {}
            for what, a, quant in (("s8", a8, False), ("quant", au, True))[:len(whats)]:
                common = {"quant": quant, "uploads": up}
                cases[f"{what} default"] = Ours(dev, a, b, b_colmajor=True, family="coopmat", **common)
                cases[f"{what} default Brow"] = Ours(dev, a, b, b_colmajor=False, family="coopmat", **common)
                try:
                    cases[f"{what} gemv"] = Ours(dev, a, b, b_colmajor=False, family="gemv", **common)
                except UnsupportedError as e:
                    refused["gemv"] = str(e).split(": ", 2)[-1]
                for name, cfg in configs.items():
                    try:
                        cases[f"{what} {name}"] = Ours(dev, a, b, b_colmajor=not args.b_row_major, config=cfg, **common)
                    except UnsupportedError as e:
                        refused[name] = str(e).split(": ", 2)[-1]
            sample = np.unique(np.linspace(0, m - 1, SAMPLE_ROWS).astype(int))
            checks = {name: c.check(sample) for name, c in cases.items()}
            ok &= all(checks.values())
            makes = {name: c.run for name, c in cases.items()}
            peer = (torch_peers(a8, b, None) or {}).get("torch_int_mm_Bcol")
            if peer is not None:
                makes["s8 torch"] = peer
            t = time_interleaved(makes, args.rounds)
            print(f"  {m}x{k}x{n}:")
            for name, sec in t.items():
                note = "" if name not in cases else cases[name].op.variants[0] + ("" if checks[name] else "  FAIL")
                print(f"    {name:40s} {sec * 1e6:9.2f} us  {note}")
            for name, why in refused.items():
                print(f"    {name:40s} refused: {why}")
            base = "default Brow" if args.b_row_major else "default"   # the default in the configs' B layout
            for what in whats:
                coop = {key: t[key] for key in (f"{what} {base}", *(f"{what} {name}" for name in configs)) if key in t}
                best = min(coop, key=lambda key: coop[key])
                fastest_default = min(t[f"{what} default"], t[f"{what} default Brow"])
                summary.append((m, k, n, what, best[len(what) + 1:], coop[best] * 1e6, t[f"{what} {base}"] * 1e6,
                                t[f"{what} default"] * 1e6, t[f"{what} default Brow"] * 1e6,
                                t.get(f"{what} gemv", 0.0) * 1e6, t.get("s8 torch", 0.0) * 1e6,
                                t.get(f"{what} gemv", float("nan")) / fastest_default))
            rows_out.append({"shape": [m, k, n], "seconds": t, "checks": checks, "refused": refused})
    print("\nSUMMARY (us; ratios > 1: the best configuration is faster)")
    print(f"  {'M x K x N':>16s} {'case':>6s} {'best':>36s} {'us':>8s} {'default':>8s} {'Brow':>8s} {'gemv':>8s} "
          f"{'torch':>8s} {'def/best':>8s} {'torch/def':>9s} {'gemv/def':>8s}")
    for m, k, n, what, best, tb, tbase, td, tr, tg, tt, gd in summary:
        print(f"  {f'{m}x{k}x{n}':>16s} {what:>6s} {best:>36s} {tb:8.2f} {td:8.2f} {tr:8.2f} {tg:8.2f} {tt:8.2f} "
              f"{tbase / tb:8.3f} {tt / td:9.3f} {gd:8.3f}")
    return finish(rows_out, args.json, ok)


if __name__ == "__main__":
    sys.exit(main())
