"""Tiny MATRIX_MULTIPLY_INTEGER_TO_FLOAT shapes: which kernel configuration finishes soonest.

    python -m benchmarks.tiny_matmul [--shapes 16x64x64,1x64x64] [--top 6] [--repeats 2000]

Eager latency of a small product is the submission's round trip plus the kernel's own time on the
device, and for tiny shapes that time is set by the kernel's critical path (loads, barriers,
reductions), not by bandwidth or arithmetic. Per shape M x K x N, for the `gemm` case (s8 x s8,
unit scales) and the `quant` case (u8 A with a zero point, per-column B scale, bias; bench_coop.Ours):
for --grid-shapes a grid of gemv configurations (WG, MT, NCOL x NL, one chunk of A covering K), the gemv family's
default (`gemv`: the tiny rule, ops/matmul_gemv.TINY_K, where it applies), the decode default it
replaces there (`gemv-decode`), the automatic choice and the other GPU families, each checked
bitwise against numpy int64 (FAIL: left out). Ranked by eager latency (`op.execute` back to back,
median of --repeats / 5), then the fastest --top and every default timed again: two medians of
--repeats each, one right after the other, the better of the two. Kernel-only device time (kp timestamps)
is not used: between sparse tiny dispatches the GPU's clocks drop, and it read 10-40 us for the same
kernel within one run on the H100. Prints a table per case; nothing is asserted.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import statistics

import numpy as np

import kompute_dml as kdml
from benchmarks.bench_coop import Ours, random_inputs
from benchmarks.bench_decode import cfg_name, gemv_case
from benchmarks.latency import eager
from kompute_dml.core.errors import UnsupportedError
from kompute_dml.core.ints import cdiv
from kompute_dml.ops.matmul_coop import CAPABILITY as COOP_CAPABILITY
from kompute_dml.ops.matmul_coop import subgroup_size
from kompute_dml.ops.matmul_gemv import DOT_CAPABILITY, GemvConfig, default_config


def gemv_grid(m: int, k: int, n: int, subgroup: int) -> list[GemvConfig]:
    """Row-major gemv configurations with one chunk of A covering K and a tile no wider than N
    needs (NL x NCOL <= max(N, NCOL)), MT <= the next power of two of M."""
    out = []
    for wg, mt, ncol, nl in itertools.product((32, 64, 128, 256), (1, 2, 4, 16), (4, 8), (2, 4, 8, 16)):
        if mt > 1 and mt // 2 >= m:
            continue
        if nl * ncol > max(n, ncol) or wg % nl:
            continue
        step = 4 * (wg // nl)
        out.append(GemvConfig(wg, mt, ncol, nl, max(1, cdiv(k, step)) * step))
    return out


def candidates(dev: kdml.Device, a: np.ndarray, b: np.ndarray, quant: bool, grid: bool) -> dict[str, Ours]:
    """name -> a case: the automatic choice, the other families, the gemv defaults (and grid)."""
    gpu = dev.device_type != "cpu"
    sg = subgroup_size(dev)
    uploads: dict = {}
    out: dict[str, Ours] = {}
    families = ["auto", "gemv", "gpu"]
    if COOP_CAPABILITY in dev.capabilities:
        families.append("coopmat")
    if DOT_CAPABILITY in dev.capabilities:
        families.append("dot")
    for fam in families:
        out[fam] = Ours(dev, a, b, b_colmajor=False, quant=quant, family=fam, uploads=uploads)
    m, k, n = a.shape[0], a.shape[1], b.shape[1]
    default = default_config(m, sg, gpu=gpu, k=k, n=n)
    decode = default_config(m, sg, gpu=gpu)
    if decode != default:
        out["gemv-decode"] = gemv_case(dev, a, b, quant, config=decode, uploads=uploads)
    for cfg in gemv_grid(m, k, n, sg) if grid else []:
        if cfg in (default, decode):
            continue
        try:
            out[cfg_name(cfg)] = gemv_case(dev, a, b, quant, config=cfg, uploads=uploads)
        except UnsupportedError:  # this device's limits (shared memory, work-group size)
            continue
    return out


def run_case(dev: kdml.Device, m: int, k: int, n: int, quant: bool, top: int, repeats: int, grid: bool) -> None:
    rng = np.random.default_rng(m * 1000003 + k * 1009 + n)
    a, b = random_inputs(rng, m, k, n, np.uint8 if quant else np.int8)
    cases = candidates(dev, a, b, quant, grid)
    failed = [name for name, case in cases.items() if not case.check()]
    eager = {name: _median_eager(case, max(50, repeats // 5)) for name, case in cases.items() if name not in failed}
    ranked = sorted(eager, key=eager.get)  # type: ignore[arg-type]
    shown = ranked[:top] + [name for name in DEFAULTS if name in eager and name not in ranked[:top]]
    best = {name: min(_median_eager(cases[name], repeats) for _ in range(2)) for name in shown}
    sg = subgroup_size(dev)
    gpu = dev.device_type != "cpu"
    print(f"\n{m}x{k}x{n} {'quant' if quant else 'gemm'}: {len(eager)} configurations checked bitwise"
          + (f", FAILED (left out): {', '.join(failed)}" if failed else ""))
    print(f"  auto = {cases['auto'].op.variants[0]}; gemv = {cfg_name(default_config(m, sg, gpu=gpu, k=k, n=n))}; "
          f"gemv-decode = {cfg_name(default_config(m, sg, gpu=gpu))}")
    print(f"  {'configuration':32s} {'eager us':>10s}")
    for name in sorted(shown, key=best.get):  # type: ignore[arg-type]
        print(f"  {name:32s} {best[name]:10.2f}")


DEFAULTS = ("auto", "gemv", "gemv-decode", "gpu", "coopmat", "dot")


def _median_eager(case: Ours, repeats: int) -> float:
    return statistics.median(eager(case.op, case.ins, [case.out], repeats))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", type=int, default=0)
    p.add_argument("--shapes", default="16x64x64,1x64x64,4x128x128,16x256x256",
                   help="comma-separated MxKxN")
    p.add_argument("--grid-shapes", default="16x64x64", help="shapes also run through the configuration grid")
    p.add_argument("--cases", default="gemm,quant", help="gemm, quant or both")
    p.add_argument("--top", type=int, default=6, help="configurations also timed eager")
    p.add_argument("--repeats", type=int, default=2000, help="eager calls per configuration")
    args = p.parse_args(argv)
    dev = kdml.Device(args.device)
    print(f"device: {dev.name} ({dev.device_type}), policy {dev.policy.name}, subgroup {subgroup_size(dev)}")
    gc.disable()
    try:
        for shape in args.shapes.split(","):
            m, k, n = (int(v) for v in shape.lower().split("x"))
            for case in args.cases.split(","):
                run_case(dev, m, k, n, case.strip() == "quant", args.top, args.repeats,
                         shape in args.grid_shapes.split(","))
    finally:
        gc.enable()
        dev.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
