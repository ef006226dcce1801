#!/usr/bin/env python3
"""Experiment: s8 x s8 products whose cooperative-matrix fragments come straight from global
memory (benchmarks/shaders/coop_direct.comp, no shared-memory staging), or (--split) whose work
group splits into loader and math subgroups (benchmarks/shaders/coop_split.comp), or (--workgroup)
on workgroup-scope matrices loaded from the buffers (VK_NV_cooperative_matrix2,
benchmarks/shaders/coop_direct_wg.comp: the driver stages the tiles), against the production
kernel (the coopmat family's default tiles, B column-major) and torch._int_mm, same process.

    PYTHONPATH=. python3 benchmarks/coop_direct.py [--shapes 4096,8192] [--rounds 5] [--split | --workgroup]

The production kernel's ablation (bench_coop.py --ablate) showed its global -> shared staging is
what limits it; this asks whether the L1 cache serves fragments loaded directly faster. Ours:
N executions in one recording, seconds per execution (median of --rounds interleaved rounds);
the direct kernel writes raw int32 sums (no epilogue), the production kernel its FLOAT32 epilogue;
every case is checked on sampled rows against numpy int64 first (a FAIL voids its time).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_coop import Ours, random_inputs, time_interleaved, torch_peers
from overlay_direct import (
    WG_DIRECT_TILES,
    DirectConfig,
    SplitConfig,
    WgDirectConfig,
    compile_direct,
    compile_direct_wg,
    compile_split,
)
from overlay_peak import MAX_ACC_WORDS, workgroup_shapes

import kompute_dml as kdml

CONFIGS = [DirectConfig(2, 4, 4, 2, pf) for pf in (0, 1)] + [
    DirectConfig(2, 2, 4, 4), DirectConfig(4, 2, 2, 4), DirectConfig(2, 2, 4, 2), DirectConfig(2, 2, 2, 2),
    DirectConfig(1, 1, 4, 4), DirectConfig(2, 4, 4, 4), DirectConfig(4, 4, 2, 2)]
SPLIT_CONFIGS = [SplitConfig(2, 4, 4, 2, 8), SplitConfig(2, 4, 4, 2, 8, ahead=2), SplitConfig(2, 4, 4, 2, 12),
                 SplitConfig(2, 4, 4, 2, 6), SplitConfig(2, 4, 4, 2, 4, ahead=2), SplitConfig(2, 2, 4, 4, 4, ahead=2),
                 SplitConfig(4, 2, 2, 4, 8), SplitConfig(2, 4, 4, 2, 4)]


def wg_configs(dev: kdml.Device) -> list[WgDirectConfig]:
    """Every workgroup-scope tile, BK and prefetch choice at each work-group size the device lists
    for s8 workgroup-scope shapes whose granularity divides the tile, at most MAX_ACC_WORDS
    accumulator words per invocation."""
    out = []
    for tm, tn in ((int(v) for v in tile.split("x")) for tile in WG_DIRECT_TILES):
        for bk in (32, 64):
            for inv in sorted({int(s[9]) for s in workgroup_shapes(dev, tm, tn, bk)}):
                if tm * tn <= MAX_ACC_WORDS * inv:
                    out += [WgDirectConfig(tm, tn, bk, inv, pf) for pf in (0, 1)]
    return out


class Direct:
    def __init__(self, dev: kdml.Device, cfg: DirectConfig | SplitConfig | WgDirectConfig, a_t: kdml.Tensor,
                 bt_t: kdml.Tensor, m: int, n: int, k: int):
        self.dev, self.m, self.n = dev, m, n
        compile_for = {SplitConfig: compile_split, WgDirectConfig: compile_direct_wg}.get(type(cfg), compile_direct)
        self.op = compile_for(dev, cfg, m, n, k)  # type: ignore[operator]
        self.ins = [a_t, bt_t]
        self.out = dev.empty(kdml.TensorDesc(kdml.DataType.INT32, (m * n,)))

    def run(self, count: int):
        def call() -> None:
            with self.dev.record() as r:
                for _ in range(count):
                    r.execute(self.op, self.ins, [self.out])
        return call

    def check(self, a: np.ndarray, b: np.ndarray, rows: np.ndarray) -> bool:
        self.run(1)()
        got = self.out.numpy().reshape(self.m, self.n)[rows]
        return bool(np.array_equal(got.astype(np.int64), a[rows].astype(np.int64) @ b.astype(np.int64)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="4096,8192")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--ceiling", type=float, default=None,
                    help="the instruction ceiling in TOPS (benchmarks/coop_peak.py's best) for the fraction column")
    ap.add_argument("--split", action="store_true", help="the loader / math split kernels in place of the direct ones")
    ap.add_argument("--workgroup", action="store_true",
                    help="workgroup-scope matrices from the buffers (VK_NV_cooperative_matrix2) in place of the direct ones")
    args = ap.parse_args()
    dev = kdml.Device()
    if "cooperative_matrix" not in dev.capabilities:
        print(f"{dev.name}: no cooperative matrices; nothing to measure")
        return 2
    rng = np.random.default_rng(7)
    summary = []
    for size in (int(s) for s in args.shapes.split(",")):
        m = n = k = size
        ops = 2.0 * m * n * k
        a, b = random_inputs(rng, m, k, n, np.int8)
        rows = np.unique(np.linspace(0, m - 1, 5).astype(int))
        a_t, bt_t = dev.tensor(a.reshape(-1)), dev.tensor(np.ascontiguousarray(b.T).reshape(-1))
        cases, checks = {}, {}
        prod = Ours(dev, a, b, b_colmajor=True, quant=False)
        cases["production default (B col-major)"] = prod.run
        checks["production default (B col-major)"] = prod.check(rows)
        kind = "split" if args.split else "workgroup" if args.workgroup else "direct"
        configs = {"split": SPLIT_CONFIGS, "workgroup": wg_configs(dev), "direct": CONFIGS}[kind]
        if not configs:
            print(f"  {dev.name}: no s8 workgroup-scope shapes (cooperative_matrix_workgroup not enabled)")
        for cfg in configs:
            try:
                d = Direct(dev, cfg, a_t, bt_t, m, n, k)
            except kdml.DMLError as e:
                print(f"  {cfg.name()}: cannot run: {e}")
                continue
            label = f"{kind} {cfg.name()}"
            checks[label] = d.check(a, b, rows)
            cases[label] = d.run
        peers = torch_peers(a, b, None) or {}
        if "torch_int_mm_Bcol" in peers:
            cases["torch _int_mm B col-major"] = peers["torch_int_mm_Bcol"]
        t = time_interleaved(cases, args.rounds)
        print(f"{m}x{k}x{n} (median of {args.rounds} rounds):")
        for name, sec in t.items():
            tops = ops / sec / 1e12
            frac = f"  {tops / args.ceiling:6.1%} of ceiling" if args.ceiling else ""
            chk = {True: "OK", False: "FAIL", None: ""}[checks.get(name)]
            print(f"  {name:60s} {sec * 1e3:9.4f} ms {tops:8.1f} TOPS{frac}  {chk}")
            summary.append((size, name, tops, chk))
    print("\nSUMMARY coop_direct, TOPS")
    for size, name, tops, chk in summary:
        print(f"  {size:5d}^3 {name:60s} {tops:8.1f} {chk}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
