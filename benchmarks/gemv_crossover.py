#!/usr/bin/env python3
"""Where the gemv family should hand few-row products to the tensor cores (policy.GEMV_MAX_M).

    PYTHONPATH=. python3 benchmarks/gemv_crossover.py [--rows 4,8,12,16,24,32] [--sizes 384x1536,...] [--rounds 5]

Per M x K x N (M from --rows, K x N from --sizes), all timed in the same interleaved rounds
(bench_coop.time_interleaved: N executions per recorded sequence, median), s8 x s8 and the
quantized case (u8 A with a zero point, per-column B scales, (N,) bias), FLOAT32 out:
  gemv        the gemv family, B row-major (ONNX's layout, which the backend keeps for gemv)
  coop Bcol   the coopmat family, B column-major (the backend's layout for the tensor cores)
  coop Brow   the coopmat family, B row-major
  torch       torch._int_mm (A padded to 32 rows, B column-major), s8 only, where torch with CUDA is there
Every row is checked bitwise on sampled rows against numpy int64 first (FAIL: timing void). The
last table gives, per shape, gemv's time over the faster coopmat layout's (> 1: the tensor cores win).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import numpy as np
from bench_coop import Ours, finish, random_inputs, time_interleaved, torch_peers  # benchmarks/ (the script's directory)

import kompute_dml as kdml
from kompute_dml.ops.matmul_coop import CAPABILITY as COOP_CAPABILITY

SIZES = "384x1536,1536x384,768x3072,3072x768,4096x4096,4096x11008,11008x4096"
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", default="4,8,12,16,24,32", help="M values, comma-separated")
    ap.add_argument("--sizes", default=SIZES, help="KxN pairs, comma-separated")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    dev = coop_device()
    if dev is None:
        return 0
    rng = np.random.default_rng(0)
    rows_out: list[dict[str, Any]] = []
    ok = True
    summary = []
    for k, n in pairs(args.sizes):
        for m in (int(x) for x in args.rows.split(",")):
            a8, b = random_inputs(rng, m, k, n, np.int8)
            au, _ = random_inputs(rng, m, k, n, np.uint8)
            up: dict[Any, Any] = {}
            cases = {}
            for what, a, quant in (("s8", a8, False), ("quant", au, True)):
                cases[f"{what} gemv"] = Ours(dev, a, b, b_colmajor=False, quant=quant, family="gemv", uploads=up)
                cases[f"{what} coop Bcol"] = Ours(dev, a, b, b_colmajor=True, quant=quant, family="coopmat", uploads=up)
                cases[f"{what} coop Brow"] = Ours(dev, a, b, b_colmajor=False, quant=quant, family="coopmat", uploads=up)
            sample = np.unique(np.linspace(0, m - 1, SAMPLE_ROWS).astype(int))
            checks = {name: c.check(sample) for name, c in cases.items()}
            ok &= all(checks.values())
            makes = {name: c.run for name, c in cases.items()}
            makes.update({f"s8 {key}": v for key, v in (torch_peers(a8, b, None) or {}).items() if key == "torch_int_mm_Bcol"})
            t = time_interleaved(makes, args.rounds)
            print(f"  {m}x{k}x{n}:")
            for name, sec in t.items():
                note = "" if name not in cases else f"{cases[name].op.variants[0]}" + ("" if checks[name] else "  FAIL")
                print(f"    {name:22s} {sec * 1e6:9.2f} us  {note}")
            for what in ("s8", "quant"):
                coop = min(t[f"{what} coop Bcol"], t[f"{what} coop Brow"])
                summary.append((m, k, n, what, t[f"{what} gemv"] * 1e6, t[f"{what} coop Bcol"] * 1e6,
                                t[f"{what} coop Brow"] * 1e6, t[f"{what} gemv"] / coop, t.get("s8 torch_int_mm_Bcol", 0) * 1e6))
            rows_out.append({"shape": [m, k, n], "seconds": t, "checks": checks})
    print("\nSUMMARY (us; gemv / coop > 1: the tensor cores are faster)")
    print(f"  {'M x K x N':>16s} {'case':>6s} {'gemv':>8s} {'coop Bcol':>10s} {'coop Brow':>10s} {'gemv/coop':>10s} {'torch':>8s}")
    for m, k, n, what, g, cc, cr, ratio, tt in summary:
        print(f"  {f'{m}x{k}x{n}':>16s} {what:>6s} {g:8.2f} {cc:10.2f} {cr:10.2f} {ratio:10.3f} {tt:8.2f}")
    return finish(rows_out, args.json, ok)


if __name__ == "__main__":
    sys.exit(main())
