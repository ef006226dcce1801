#!/usr/bin/env python3
"""What the quantized int8 product costs over the plain one, part by part (issue 24: "the quantized
path within 10% of the plain one").

    PYTHONPATH=. python3 benchmarks/coop_quant_parts.py [--shapes 4096x4096x4096,8192x8192x8192] [--rounds 5]

Per shape M x K x N, B column-major (torch._int_mm's fast layout), all timed in the same
interleaved rounds (bench_coop.time_interleaved: N executions per recorded sequence, median):
  s8             s8 x s8, unit scales, no zero point or bias (bench_coop's `gemm`)
  s8 zp          s8 A with a zero point (the column sums of B), per-column B scales, (N,) bias
  u8             u8 A (every byte XOR 0x80 at the staging store), no zero point: A - 0 = A' + 128, so
                 the column sums of B are needed all the same
  quant          u8 A with a zero point, per-column B scales, (N,) bias: bench_coop's `quant`
  ... bytes      the same with the column sums in 16-bit lanes of plain integer code (mmc8_*), where
                 the policy's choice is OpSDot (mmc8s_*: policy.COOP_SUMS)
  ... a11        the benchmark overlay's ablation 11 (sums re-read from the shared tiles every step)
  torch          torch._int_mm (B column-major) and torch._int_mm + dequantization (its column sums of B
                 precomputed on the host: free), where torch with CUDA is installed
Every `ours` row is checked bitwise on sampled rows against numpy int64 first (FAIL: timing void).
Printed: TOPS, then each row's speed relative to s8 (`/ s8` = s8 s / this s: 1.0 = as fast).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import numpy as np
from bench_coop import (  # benchmarks/ (the script's directory)
    Ours,
    finish,
    parse_staging_shapes,
    random_inputs,
    time_interleaved,
    torch_peers,
)

import kompute_dml as kdml
from kompute_dml.errors import UnsupportedError

SAMPLE_ROWS = 4


def cases_for(dev: kdml.Device, m: int, k: int, n: int, rng: np.random.Generator, family: str) -> dict[str, Ours]:
    a8, b = random_inputs(rng, m, k, n, np.int8)
    au, _ = random_inputs(rng, m, k, n, np.uint8)
    uploads: dict[Any, Any] = {}
    cases = {"s8": Ours(dev, a8, b, b_colmajor=True, quant=False, rng=rng, uploads=uploads, family=family),
             "s8 zp": Ours(dev, a8, b, b_colmajor=True, quant=True, rng=np.random.default_rng(1), uploads=uploads,
                           family=family),
             "u8": Ours(dev, au, b, b_colmajor=True, quant=False, rng=rng, uploads=uploads, family=family),
             "quant": Ours(dev, au, b, b_colmajor=True, quant=True, rng=np.random.default_rng(1), uploads=uploads,
                           family=family)}
    for name, a in (("s8 zp", a8), ("quant", au)):
        if family == "coopmat" and cases[name].op.variants[0].startswith("mmc8s"):
            cases[f"{name} bytes"] = Ours(dev, a, b, b_colmajor=True, quant=True, rng=np.random.default_rng(1),
                                          uploads=uploads, sums="bytes")
        if family != "coopmat":
            continue
        try:
            cases[f"{name} a11"] = Ours(dev, a, b, b_colmajor=True, quant=True, rng=np.random.default_rng(1),
                                        uploads=uploads, ablation=11)
        except (UnsupportedError, RuntimeError) as e:
            print(f"    ({name} a11 skipped: {e})")
    return cases


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="4096x4096x4096,8192x8192x8192", help="MxKxN, comma-separated")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--family", default="coopmat", choices=("coopmat", "coopmat-emulated"),
                    help="coopmat-emulated: a dry run anywhere (no ablations)")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    dev = kdml.Device()
    rng = np.random.default_rng(0)
    print(f"device: {dev.name}")
    rows = []
    ok = True
    for (m, k, n), _ in parse_staging_shapes(args.shapes) or []:
        print(f"  {m}x{k}x{n}, B column-major:")
        cases = cases_for(dev, m, k, n, rng, args.family)
        sample = np.unique(np.linspace(0, m - 1, SAMPLE_ROWS).astype(int))
        checks = {name: c.check(sample) for name, c in cases.items()}
        ok &= all(checks.values())
        makes = {name: c.run for name, c in cases.items()}
        peers = torch_peers(cases["s8"].a, cases["s8"].b, None) or {}
        makes.update({k2: v for k2, v in peers.items() if k2 == "torch_int_mm_Bcol"})
        makes.update({k2: v for k2, v in (torch_peers(cases["quant"].a, cases["quant"].b, cases["quant"]) or {}).items()
                      if k2 == "torch_int_mm+dequant"})
        t = time_interleaved(makes, args.rounds)
        ops = 2.0 * m * n * k
        for name, sec in t.items():
            note = ""
            if name in cases:
                note = f"/ s8 {t['s8'] / sec:6.3f}  {cases[name].op.variants[0]}" + ("" if checks[name] else "  FAIL")
            print(f"    {name:22s} {sec * 1e3:9.4f} ms {ops / sec / 1e12:8.2f} TOPS  {note}")
        if "torch_int_mm_Bcol" in t:
            print(f"    ratio s8 / torch_int_mm_Bcol: {t['torch_int_mm_Bcol'] / t['s8']:.3f}")
        if "torch_int_mm+dequant" in t:
            for name in [c for c in cases if c.startswith("quant")]:
                print(f"    ratio {name} / torch_int_mm+dequant: {t['torch_int_mm+dequant'] / t[name]:.3f}")
        rows.append({"shape": [m, k, n], "seconds": t, "checks": checks})
    return finish(rows, args.json, ok)


if __name__ == "__main__":
    sys.exit(main())
