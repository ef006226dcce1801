#!/usr/bin/env python3
"""Tiny MATRIX_MULTIPLY_INTEGER_TO_FLOAT shapes: which kernel configuration finishes soonest.

    PYTHONPATH=. python3 benchmarks/tiny_matmul.py [--shapes 16x64x64,1x64x64] [--top 6] [--repeats 2000]

Eager latency of a small product is the submission's round trip plus the kernel's own time on the
device, and for tiny shapes that time is set by the kernel's critical path (loads, barriers,
reductions), not by bandwidth or arithmetic. Per shape M x K x N, for the `gemm` case (s8 x s8,
unit scales) and the `quant` case (u8 A with a zero point, per-column B scale, bias; bench_coop.Ours):
every gemv configuration valid here (WG, MT, NCOL x NL, KC covering K in one chunk), the default
gemv configuration and the other GPU families, each checked bitwise against numpy int64 (FAIL:
left out), then timed by kp timestamps around its dispatch alone (latency.py's device time,
median of 100). The fastest --top and the automatic choice are then timed eager (`op.execute`,
median of --repeats back to back). Prints a table per case; nothing is asserted.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import statistics

import numpy as np
from bench_coop import Ours, random_inputs  # benchmarks/ (the script's directory)
from bench_decode import cfg_name, gemv_case
from latency import _device_us, _eager

import kompute_dml as kdml
from kompute_dml.errors import UnsupportedError
from kompute_dml.ops.matmul_coop import CAPABILITY as COOP_CAPABILITY
from kompute_dml.ops.matmul_coop import subgroup_size
from kompute_dml.ops.matmul_gemv import DOT_CAPABILITY, GemvConfig, default_config


def gemv_grid(m: int, k: int, n: int, subgroup: int) -> list[GemvConfig]:
    """Every row-major gemv configuration with one chunk of A covering K and a tile no wider
    than N needs (NL x NCOL <= max(N, NCOL)), MT <= the next power of two of M."""
    out = []
    for wg, mt, ncol, nl in itertools.product((32, 64, 128, 256), (1, 2, 4, 8, 16), (4, 8, 16), (1, 2, 4, 8, 16, 32)):
        if mt > 1 and mt // 2 >= m:
            continue
        if nl * ncol > max(n, ncol) or wg % nl:
            continue
        step = 4 * (wg // nl)
        kc = max(step, -(-k // step) * step)
        cfg = GemvConfig(wg, mt, ncol, nl, kc)
        out.append(cfg)
    return out


def candidates(dev: kdml.Device, a: np.ndarray, b: np.ndarray, quant: bool) -> dict[str, Ours]:
    """name -> a checked case: the automatic choice, the other families, the gemv grid."""
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
    default = default_config(a.shape[0], sg, gpu=gpu)
    for cfg in gemv_grid(a.shape[0], a.shape[1], b.shape[1], sg):
        if cfg == default:
            continue
        try:
            out[cfg_name(cfg)] = gemv_case(dev, a, b, quant, config=cfg, uploads=uploads)
        except UnsupportedError:  # this device's limits (shared memory, work-group size)
            continue
    return out


def run_case(dev: kdml.Device, m: int, k: int, n: int, quant: bool, top: int, repeats: int) -> None:
    rng = np.random.default_rng(m * 1000003 + k * 1009 + n)
    a, b = random_inputs(rng, m, k, n, np.uint8 if quant else np.int8)
    cases = candidates(dev, a, b, quant)
    timed = []
    failed = []
    for name, case in cases.items():
        if not case.check():
            failed.append(name)
            continue
        timed.append((_device_us(dev, case.op, case.ins, [case.out], repeats=100), name))
    timed.sort()
    label = f"{m}x{k}x{n} {'quant' if quant else 'gemm'}"
    default_cfg = cfg_name(default_config(m, subgroup_size(dev), gpu=dev.device_type != "cpu"))
    print(f"\n{label}: {len(timed)} configurations checked bitwise"
          + (f", FAILED (left out): {', '.join(failed)}" if failed else ""))
    print(f"  auto = {cases['auto'].op.variants[0]}; gemv = {default_cfg}")
    shown = timed[:top] + [t for t in timed if t[1] in ("auto", "gemv") and t not in timed[:top]]
    print(f"  {'configuration':32s} {'device us':>10s} {'eager us':>10s}")
    for dev_us, name in shown:
        case = cases[name]
        eager = statistics.median(_eager(case.op, case.ins, [case.out], repeats))
        print(f"  {name:32s} {dev_us:10.2f} {eager:10.2f}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", type=int, default=0)
    p.add_argument("--shapes", default="16x64x64,1x64x64,4x128x128,16x256x256",
                   help="comma-separated MxKxN")
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
                run_case(dev, m, k, n, case.strip() == "quant", args.top, args.repeats)
    finally:
        gc.enable()
        dev.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
