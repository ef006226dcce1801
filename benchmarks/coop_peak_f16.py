"""The device's float16 cooperative-matrix ceiling: f16 x f16 -> f32 at 16 x 16 x 16 (the fragments of
GEMM's and CONVOLUTION's tensor-core kernels), measured by a register-resident multiply-add loop.

    python -m benchmarks.coop_peak_f16 [--quick] [--json out.json]
    python -m benchmarks.coop_peak_f16 --emulated --quick    # any device (lavapipe): a check of the script

The kernel (benchmarks/shaders/coop_peak_f16.comp, family COOP_PEAK_F16 of the benchmark overlay
benchmarks/overlay_peak.py) is benchmarks/coop_peak.py's registers loop for float16: each subgroup
loads its fragments once, keeps ACC (1 to 16) float32 accumulators and runs `trips` x 4 rounds of
ACC independent coopMatMulAdd; rounds alternate B and B' = D - B with small-integer A, B and D in
{-1, 0, 1}, so every sum is an integer below 2^24, exact in float32 in any order, and each
accumulator ends at 2 * trips * A D, checked against numpy. A sweep over ACC x subgroups per work
group x work groups per SM (grid = --sms x that), `trips` calibrated to about --target-ms a dispatch,
timed by kp timestamps around the dispatch (median of --repeats); the best row is the ceiling
(`measure`, which benchmarks/bench_conv.py --kernels reports its kernels against). TFLOPS = 2 * 16^3
* rounds * ACC * subgroups / s / 1e12. Where the device has no cooperative matrices (or no f16
shape) it says why and exits 0.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import numpy as np

import kompute_dml as kdml
from benchmarks.coop_peak import MAX_SUBGROUPS_PER_SM, SMS, Case, subgroup_size, time_config
from benchmarks.overlay_peak import F16_SHAPE, ROUNDS_PER_TRIP, TILES, PeakConfigF16, unavailable

A_MAX, B_MAX = 4, 32  # |A| <= 4, |B| <= 32: |A B| <= 16 * 4 * 32 per multiply-add
# every partial sum an integer below 2^24: 2 * trips * |A D| + |A B| <= 128 trips + 2048
MAX_TRIPS = (2 ** 24 - 16 * A_MAX * B_MAX) // (2 * 16 * A_MAX)


def fragment_sets(rng: np.random.Generator, acc: int, sets: int) -> tuple[np.ndarray, np.ndarray]:
    """(input words, expected per set): A (16 x 16, row-major), B and B' = D - B (16 x 16,
    column-major) per set, float16; expected[s, i * NB + j] = A[s, i] @ D[s, j] (float64)."""
    na, nb = TILES[acc]
    a = rng.integers(-A_MAX, A_MAX + 1, (sets, na, 16, 16))
    b = rng.integers(-B_MAX + 1, B_MAX, (sets, nb, 16, 16))
    d = rng.integers(-1, 2, (sets, nb, 16, 16))
    col = lambda x: np.ascontiguousarray(x.transpose(0, 1, 3, 2)).reshape(sets, -1)  # noqa: E731  k contiguous
    data = np.concatenate([a.reshape(sets, -1), col(b), col(d - b)], axis=1).astype(np.float16)
    exp = np.einsum("simk,sjkn->sijmn", a.astype(np.float64), d.astype(np.float64)).reshape(sets, acc, 16, 16)
    return np.ascontiguousarray(data).view(np.uint32).reshape(-1), exp


class CaseF16(Case):
    """coop_peak.Case for the float16 loop: its data, and float32 accumulators to check."""

    def __init__(self, dev: kdml.Device, cfg: PeakConfigF16, sets: int, rng: np.random.Generator) -> None:
        self.dev, self.cfg, self.sets = dev, cfg, sets
        self.sg = subgroup_size(dev)
        words, self.expected = fragment_sets(rng, cfg.acc, sets)
        self.inp = dev.tensor(words)
        # (compile_peak's operator declares INT32 words: float32 bits here)
        self.out = dev.empty(kdml.TensorDesc(kdml.DataType.INT32, (cfg.out_words(),)))
        self._ops: dict[int, Any] = {}

    def check(self, trips: int) -> tuple[bool, str]:
        cfg = self.cfg
        n = cfg.groups * cfg.subgroups
        got = np.empty(n * cfg.acc * 256, np.float32)
        self.out.buffer.read_into(got, self.out.offset)
        exp = (2 * trips) * self.expected[np.arange(n) % self.sets]
        return bool(np.array_equal(got.reshape(exp.shape).astype(np.float64), exp)), "all"


def configs(dev: kdml.Device, emulated: bool, quick: bool, sms: int) -> list[tuple[PeakConfigF16, int]]:
    """(config, work groups per SM) of the sweep: at most MAX_SUBGROUPS_PER_SM subgroups per SM."""
    if emulated:
        return [(PeakConfigF16(acc, 2, 3, True), 1) for acc in (1, 4)]
    accs, sgs, ks = ((8,), (4,), (2,)) if quick else ((4, 8, 16), (4, 8), (1, 2, 4))
    return [(PeakConfigF16(acc, n, sms * k), k) for acc in accs for n in sgs for k in ks if n * k <= MAX_SUBGROUPS_PER_SM]


def measure(dev: kdml.Device, *, emulated: bool = False, quick: bool = False, sms: int = SMS, target_ms: float = 5.0,
            repeats: int = 3, seed: int = 0, log: Any = print) -> dict[str, Any] | None:
    """The sweep's rows and the best (the ceiling), or None where the device cannot run it (said in `log`)."""
    why = unavailable(dev, emulated, F16_SHAPE)
    if why:
        log(f"coop_peak_f16: skipped: {why}")
        return None
    rng = np.random.default_rng(seed)
    sg = subgroup_size(dev)
    rows = []
    for cfg, k in configs(dev, emulated, quick, sms):
        # lavapipe ends a shader's loops after 65535 iterations in all per invocation
        max_trips = max(1, 50000 // (ROUNDS_PER_TRIP * cfg.acc * (256 // sg + 1) + 8)) if emulated else MAX_TRIPS
        try:
            row = time_config(CaseF16(dev, cfg, 3, rng), target_ms * 1e-3, repeats, max_trips)
        except kdml.DMLError as e:  # this device cannot run it (work-group size, shared memory): skipped
            log(f"  acc {cfg.acc} x {cfg.subgroups} subgroups: cannot run: {e}")
            continue
        row["tflops"] = row.pop("tops")
        row["groups_per_sm"] = k
        rows.append(row)
        log(f"  acc {cfg.acc:2d} sg/wg {cfg.subgroups} wg/sm {k}: {row['seconds'] * 1e3:8.3f} ms "
            f"{row['tflops']:8.1f} TFLOPS" + ("" if row["check"] else "  CHECK FAILED"))
    ok = [r for r in rows if r["check"]]
    if not ok:
        log("coop_peak_f16: no configuration ran and checked")
        return {"rows": rows, "best": None}
    return {"rows": rows, "best": max(ok, key=lambda r: r["tflops"])}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="one configuration (acc 8, 4 subgroups, 2 per SM)")
    ap.add_argument("--emulated", action="store_true", help="the plain-code variants (any device; no measurement)")
    ap.add_argument("--sms", type=int, default=SMS)
    ap.add_argument("--target-ms", type=float, default=5.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", help="write the rows and the best there")
    args = ap.parse_args()
    dev = kdml.Device()
    print(f"device: {dev.name}")
    res = measure(dev, emulated=args.emulated, quick=args.quick, sms=args.sms, target_ms=args.target_ms,
                  repeats=args.repeats)
    if res is None:
        return 0
    best = res["best"]
    if best is not None:
        print(f"ceiling: {best['tflops']:.1f} TFLOPS (acc {best['acc']}, {best['subgroups']} subgroups per work group, "
              f"{best['groups_per_sm']} per SM{', emulated: not a measurement' if args.emulated else ''})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": dev.name, **res}, f, indent=1, default=float)
    return 0 if best is not None and all(r["check"] for r in res["rows"]) else 1


if __name__ == "__main__":
    sys.exit(main())
