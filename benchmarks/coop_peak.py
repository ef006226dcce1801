"""The device's cooperative-matrix ceiling for s8 x s8 -> s32 (16x16x32, VK_KHR_cooperative_matrix).

Run on a GPU whose kompute_dml Device has the `cooperative_matrix` capability (the H100):
    python -m benchmarks.coop_peak [--quick] [--json out.json]
    python -m benchmarks.coop_peak --check          # the arithmetic only, no timing
Elsewhere it prints why it skips (exit 0); `--emulated` runs the same harness on the plain-code
variants (any device, lavapipe included: a check of the script, not a measurement).

The kernel (benchmarks/shaders/coop_peak.comp, a benchmark-only overlay: benchmarks/overlay_peak.py)
is a register-resident multiply-add loop: each subgroup loads its A and B fragments once, keeps ACC
16 x 16 int32 accumulators (an NA x NB tile: 1, 2, 4, 8, 16), runs `trips` x 4 rounds of ACC
independent coopMatMulAdd with no memory access in the loop and stores the accumulators once.
Rounds alternate B and B' = D - B (A, B near full range, D in {-1, 0, 1}), so the sums stay exact
in int32 (each accumulator ends at 2 * trips * A D) and are compared with numpy int64.

1. Correctness first (`--check` stops there): every accumulator count and 1, 2, 4 subgroups per
   work group on a tiny grid (3 work groups, 3 fragment sets, 1 and 3 trips), every output word.
2. The sweep (--source: the loop's operands, comma-separated: registers (default); shared, each
   round loading its fragments from shared memory as a GEMM's inner loop does; shared+barrier, with
   a work-group barrier per trip; step, also storing to shared memory with a second barrier, as a
   one-stage GEMM step; workgroup, VK_NV_cooperative_matrix2's workgroup-scope matrices (below);
   all): ACC x
   subgroups per work group (`--subgroups`) x work groups per SM (`--groups-per-sm`,
   grid = --sms x that; at most 64 subgroups per SM). Each configuration: `trips` calibrated so
   that one dispatch takes about --target-ms, one warm-up, then --repeats dispatches timed by kp
   timestamps around the dispatch (Device.profile, device time only), the median; then its output
   checked (every word up to 64 MiB, else the first and last 16 MiB).
   TOPS = 2 * M * N * K * rounds * ACC * subgroups / s / 1e12 (M N K = 16 16 32).
3. The best configuration and its fraction of --peak-tops (default 1979: the H100 SXM5's dense INT8
   Tensor Core figure in NVIDIA's H100 datasheet, 3958 TOPS "with sparsity" halved; an H100 PCIe
   lists 1513 dense; 132 SMs is the SXM5's count, --sms). A fraction above 1 means the compiler
   removed work (the checks would then fail) or a wrong --peak-tops.
Output: a table (rich; the best row in bold), then the best configuration; --json FILE writes every
row, the checks and the device's cooperative-matrix shapes.

`--source workgroup` (the capability cooperative_matrix_workgroup: VK_NV_cooperative_matrix2's
workgroup scope with flexible dimensions, enabled by kp patch level 12 where the device offers it)
runs benchmarks/shaders/coop_peak_wg.comp: one TM x TN x 32 multiply-add of the whole work group
(`--wg-tiles`), NC = 1 or 2 independent accumulators, the same B / B' rounds and int64 check, at
every work-group size the device lists for s8 workgroup-scope shapes, with the same work groups per
SM; how the driver spreads such a product over its warps, and where it keeps A and B, is its own
choice, which this measures. Expected run time on an H100: about a minute, at most two (the default sweep:
about 150 configurations, 7-8 dispatches of ~10 ms each, the checks' read-backs); --quick ~10 s.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from typing import Any

import numpy as np

import kompute_dml as kdml
from benchmarks.overlay_peak import (
    ROUNDS_PER_TRIP,
    SOURCES,
    TILES,
    WG_TILES,
    K,
    M,
    N,
    PeakConfig,
    WgPeakConfig,
    compile_peak,
    load,
    unavailable,
    workgroup_shapes,
)
from kompute_dml.bench import gpu_clock
from kompute_dml.bench.timing import median

PEAK_TOPS = 1979.0  # H100 SXM5 dense INT8 tensor-core TOPS (NVIDIA H100 datasheet: 3958 with sparsity)
SMS = 132  # H100 SXM5 streaming multiprocessors
MAX_SUBGROUPS_PER_SM = 64  # the H100's resident warps per SM: more is a second wave
# |A D| <= K * 128 per pair of rounds, |A B| <= K * 128 * 127 within one: exact in int32 up to here
MAX_TRIPS = ((2**31 - 1) - K * 128 * 127) // (2 * K * 128)
CHECK_ALL_WORDS = 16 << 20  # outputs up to 64 MiB are checked whole, larger ones at both ends
CHECK_END_WORDS = 4 << 20
VK_SCOPES = {1: "device", 2: "workgroup", 3: "subgroup", 5: "queue family"}
VK_TYPES = {0: "f16", 1: "f32", 2: "f64", 3: "s8", 4: "s16", 5: "s32", 6: "s64", 7: "u8", 8: "u16", 9: "u32",
            10: "u64"}


def subgroup_size(dev: kdml.Device) -> int:
    size = dev.limits.get("subgroup_size")
    return int(size) if size else (8 if dev.device_type == "cpu" else 32)


def shape_text(s: tuple[int, ...]) -> str:
    """One listed shape: M x N x K (granularity, for flexible ones), A x B + C -> result, scope, and
    the work-group invocations of a flexible one."""
    m, n, k, a, b, c, r, sat, scope = s[:9]
    t = lambda v: VK_TYPES.get(v, str(v))  # noqa: E731
    inv = f" {s[9]} invocations" if len(s) > 9 else ""
    return f"{m}x{n}x{k} {t(a)}x{t(b)}+{t(c)}->{t(r)}{' sat' if sat else ''} {VK_SCOPES.get(scope, scope)}{inv}"


def shapes_text(dev: kdml.Device) -> list[str]:
    """The cooperative-matrix shapes the device lists (A x B -> result, scope)."""
    return [shape_text(s) for s in getattr(dev, "cooperative_matrix_shapes", ())]


def flexible_text(dev: kdml.Device) -> list[str]:
    """The workgroup-scope shapes the device lists (granularity, types, invocations)."""
    return [shape_text(s) for s in getattr(dev, "cooperative_matrix_flexible_shapes", ())]


# ---- the data ----------------------------------------------------------------------------------
def fragment_sets(rng: np.random.Generator, acc: int, sets: int) -> tuple[np.ndarray, np.ndarray]:
    """(input words, expected per set): A (16 x 32, row-major), B and B' = D - B (32 x 16,
    column-major) per set; expected[s, i * NB + j] = A[s, i] @ D[s, j] (int64), the sum of one
    pair of rounds."""
    na, nb = TILES[acc]
    a = rng.integers(-128, 128, (sets, na, M, K), dtype=np.int16)
    b = rng.integers(-126, 127, (sets, nb, K, N), dtype=np.int16)
    d = rng.integers(-1, 2, (sets, nb, K, N), dtype=np.int16)
    bn = d - b
    col = lambda x: np.ascontiguousarray(x.transpose(0, 1, 3, 2)).reshape(sets, -1)  # noqa: E731  k contiguous
    data = np.concatenate([a.reshape(sets, -1), col(b), col(bn)], axis=1).astype(np.int8)
    words = np.ascontiguousarray(data).view(np.uint32).reshape(-1)
    exp = np.einsum("simk,sjkn->sijmn", a.astype(np.int64), d.astype(np.int64)).reshape(sets, acc, M, N)
    return words, exp


def wg_sets(rng: np.random.Generator, tm: int, tn: int, sets: int) -> tuple[np.ndarray, np.ndarray]:
    """(input words, expected per set) of the workgroup-scope loop: A (tm x 32, row-major), B and
    B' = D - B (32 x tn, column-major) per set; expected[s] = A[s] @ D[s] (int64, tm x tn)."""
    a = rng.integers(-128, 128, (sets, tm, K), dtype=np.int16)
    b = rng.integers(-126, 127, (sets, K, tn), dtype=np.int16)
    d = rng.integers(-1, 2, (sets, K, tn), dtype=np.int16)
    col = lambda x: np.ascontiguousarray(x.transpose(0, 2, 1)).reshape(sets, -1)  # noqa: E731  k contiguous
    data = np.concatenate([a.reshape(sets, -1), col(b), col(d - b)], axis=1).astype(np.int8)
    return np.ascontiguousarray(data).view(np.uint32).reshape(-1), np.matmul(a.astype(np.int64), d.astype(np.int64))


class Case:
    """One configuration on the device: its fragment sets uploaded, its output allocated."""

    def __init__(self, dev: kdml.Device, cfg: PeakConfig | WgPeakConfig, sets: int, rng: np.random.Generator) -> None:
        self.dev, self.cfg, self.sets = dev, cfg, sets
        self.sg = subgroup_size(dev)
        if isinstance(cfg, WgPeakConfig):
            words, self.expected = wg_sets(rng, cfg.tile_m, cfg.tile_n, sets)
        else:
            words, self.expected = fragment_sets(rng, cfg.acc, sets)
        self.inp = dev.tensor(words)
        self.out = dev.empty(kdml.TensorDesc(kdml.DataType.INT32, (cfg.out_words(),)))
        self._ops: dict[int, Any] = {}

    def op(self, trips: int) -> Any:
        if trips not in self._ops:
            self._ops = {trips: compile_peak(self.dev, self.cfg, trips, self.sets, self.sg)}
        return self._ops[trips]

    def seconds(self, trips: int) -> float:
        """Device time of one dispatch (kp timestamps around it)."""
        op = self.op(trips)
        with self.dev.profile() as prof:
            op.execute([self.inp], [self.out])
        return prof.rows[-1].microseconds * 1e-6

    def run(self, trips: int) -> None:
        self.op(trips).execute([self.inp], [self.out])

    def check(self, trips: int) -> tuple[bool, str]:
        """The output of the last dispatch (of `trips`) against numpy int64: (ok, what was compared).
        Units: subgroups, or work groups for workgroup scope; outputs past CHECK_ALL_WORDS are
        checked at both ends."""
        cfg = self.cfg
        wgs = isinstance(cfg, WgPeakConfig)
        per = cfg.acc * (cfg.tile_m * cfg.tile_n if wgs else M * N)  # words per unit
        n = cfg.groups * (1 if wgs else cfg.subgroups)
        cut = max(1, CHECK_END_WORDS // per)
        ranges = [(0, n)] if n * per <= CHECK_ALL_WORDS else [(0, cut), (n - cut, n)]
        ok = True
        for lo, hi in ranges:
            got = np.empty((hi - lo) * per, np.int32)
            self.out.buffer.read_into(got, self.out.offset + lo * per * 4)
            units = np.arange(lo, hi)
            if wgs:  # NC accumulators each at (2 / NC) trips A D
                exp = np.repeat(((2 // cfg.acc) * trips * self.expected[units % self.sets])[:, None], cfg.acc, axis=1)
            else:
                exp = (2 * trips) * self.expected[cfg.set_of(units) % self.sets]
            ok &= bool(np.array_equal(got.reshape(exp.shape).astype(np.int64), exp))
        what = "all" if len(ranges) == 1 else f"{2 * cut} of {n} {'work groups' if wgs else 'subgroups'}"
        return ok, what


# ---- 1. correctness ------------------------------------------------------------------------------
def wg_invocations(dev: kdml.Device, emulated: bool) -> list[int]:
    """The work-group sizes of the device's s8 workgroup-scope shapes (emulated: 64 and 256)."""
    return [64, 256] if emulated else sorted({int(s[9]) for s in workgroup_shapes(dev)})


def check_all(dev: kdml.Device, accs: list[int], emulated: bool, rng: np.random.Generator,
              srcs: tuple[str, ...] = ("",), wg_tiles: list[tuple[int, int]] | None = None) -> list[dict[str, Any]]:
    rows = []
    todo: list[PeakConfig | WgPeakConfig] = [PeakConfig(a, n, 3, emulated, sh) for a in accs
                                             for sh in srcs if sh != "g" for n in (1, 2, 4)]
    if "g" in srcs:
        todo += [c for c in (WgPeakConfig(tm, tn, nc, inv, 3, emulated, subgroup_size=subgroup_size(dev))
                             for tm, tn in wg_tiles or [(64, 64), (128, 128)] for nc in (1, 2)
                             for inv in wg_invocations(dev, emulated)) if c.fits]
    for cfg in todo:
        try:
            case = Case(dev, cfg, 3, rng)
            case.op(1)
        except kdml.UnsupportedError as e:  # this device cannot run it (work-group size): not a failure
            rows.append({"config": asdict(cfg), "ok": None, "note": str(e)})
            continue
        for trips in (1, 3):
            try:
                case.run(trips)
                ok, note = case.check(trips)
            except Exception as e:  # the driver refused it: a failure, reported
                ok, note = False, f"{type(e).__name__}: {e}"
            rows.append({"config": asdict(cfg), "variant": cfg.variant, "trips": trips, "ok": ok, "note": note})
        if isinstance(cfg, WgPeakConfig) and not emulated:  # (their pipelines take seconds to create)
            print(f"  checked {cfg.variant} x {cfg.invocations} invocations: {'OK' if ok else 'FAIL'}", flush=True)
    return rows


# ---- 2. the sweep --------------------------------------------------------------------------------
def calibrate(case: Case, target_s: float, max_trips: int) -> tuple[int, float]:
    """Trips for a dispatch of about target_s (at most max_trips) and the last calibration time."""
    trips = min(64, max_trips)
    case.seconds(trips)  # the pipeline, the first submission
    for _ in range(3):
        t = case.seconds(trips)
        want = min(max_trips, max(1, int(trips * target_s / max(t, 1e-7))))
        if want <= trips * 2 and want >= trips // 2:
            return want, t
        trips = want
    return trips, t


def time_config(case: Case, target_s: float, repeats: int, max_trips: int) -> dict[str, Any]:
    trips, _ = calibrate(case, target_s, max_trips)
    case.seconds(trips)  # warm-up at this length
    samples = [case.seconds(trips) for _ in range(repeats)]
    sec = median(samples)
    ok, what = case.check(trips)
    cfg = case.cfg
    return {"src": cfg.src, "acc": cfg.acc, "tile": "x".join(map(str, cfg.tile)), "subgroups": cfg.subgroups, "groups": cfg.groups,
            "subgroups_per_sm": None, "variant": cfg.variant, "trips": trips, "iterations": ROUNDS_PER_TRIP * trips,
            "seconds": sec, "samples": samples, "tops": cfg.ops(trips) / sec / 1e12, "check": ok, "checked": what}


def configs(args: argparse.Namespace, dev: kdml.Device) -> list[tuple[PeakConfig | WgPeakConfig, int]]:
    """(config, work groups per SM) of the sweep, at most MAX_SUBGROUPS_PER_SM subgroups per SM."""
    out: list[tuple[PeakConfig | WgPeakConfig, int]] = []
    sg = subgroup_size(dev)
    for src in sources(args):
        if src == "g":
            for (tm, tn), nc, inv, k in ((t, nc, i, k) for t in args.wg_tiles for nc in args.wg_acc
                                         for i in wg_invocations(dev, args.emulated) for k in args.groups_per_sm):
                cfg = WgPeakConfig(tm, tn, nc, inv, args.sms * k, args.emulated, subgroup_size=sg)
                if cfg.fits and (k * inv // sg <= MAX_SUBGROUPS_PER_SM or len(args.groups_per_sm) == 1):
                    out.append((cfg, k))
            continue
        for acc in args.acc:
            for sgs in args.subgroups:
                for k in args.groups_per_sm:
                    if k * sgs <= MAX_SUBGROUPS_PER_SM or len(args.groups_per_sm) == 1:
                        out.append((PeakConfig(acc, sgs, args.sms * k, args.emulated, src), k))
    return out


SOURCE_NAMES = {"registers": "", "shared": "s", "barrier": "b", "step": "w", "workgroup": "g"}


def label(src: str) -> str:
    """A loop's name in the output (SOURCES of overlay_peak.py; "g": workgroup scope)."""
    return "workgroup scope" if src == "g" else SOURCES[src][1]


def order(src: str) -> int:
    return list(SOURCE_NAMES.values()).index(src)


def sources(args: argparse.Namespace) -> tuple[str, ...]:
    """The loops to run (SOURCES keys of benchmarks/overlay_peak.py, "g" workgroup scope) from --source."""
    names = list(SOURCE_NAMES) if args.source == "all" else args.source.split(",")
    bad = [n for n in names if n not in SOURCE_NAMES]
    if bad:
        raise SystemExit(f"--source: {bad} not in {list(SOURCE_NAMES)} or 'all'")
    return tuple(SOURCE_NAMES[n] for n in names)


def sweep(dev: kdml.Device, args: argparse.Namespace, rng: np.random.Generator, deadline: float) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    sg = subgroup_size(dev)
    todo = configs(args, dev)
    print(f"sweep: {len(todo)} configurations, ~{args.target_ms:g} ms a dispatch, median of {args.repeats}")
    if todo and not todo[0][0].emulated:  # the clock governor raised first (kompute_dml/bench/gpu_clock.py)
        warm = Case(dev, todo[0][0], args.sets, rng)
        trips, _ = calibrate(warm, args.target_ms * 1e-3, MAX_TRIPS)
        calls = gpu_clock.hold(lambda: warm.run(trips))
        del warm
        print(f"  warm-up: {calls} dispatches in {gpu_clock.WARM_SECONDS:g} s; SM clock {gpu_clock.sm_clock_mhz()} MHz")
    for i, (cfg, k) in enumerate(todo):
        if time.perf_counter() > deadline:
            print(f"  (sweep stopped after {i} configurations: --budget seconds spent)")
            break
        max_trips = MAX_TRIPS
        if cfg.emulated:  # lavapipe ends a shader's loops after 65535 iterations in all per invocation
            per = -(-cfg.tile_m * cfg.tile_n // cfg.invocations) if isinstance(cfg, WgPeakConfig) else cfg.acc * (256 // sg + 1)
            max_trips = max(1, 50000 // (ROUNDS_PER_TRIP * per + 8))
        try:
            case = Case(dev, cfg, args.sets, rng)
            row = time_config(case, args.target_ms * 1e-3, args.repeats, max_trips)
        except Exception as e:  # this device or its driver cannot run it: reported, skipped
            print(f"  acc {cfg.acc} x {cfg.subgroups} subgroups x {cfg.groups} groups: cannot run: "
                  f"{type(e).__name__}: {str(e)[:120]}")
            continue
        row["groups_per_sm"] = k
        row["subgroups_per_sm"] = k * cfg.subgroups
        row["fraction"] = row["tops"] / args.peak_tops
        rows.append(row)
        del case
        print(f"  [{i + 1}/{len(todo)}] {label(cfg.src):24s} {'x'.join(map(str, cfg.tile)):>7s} acc {cfg.acc:2d} "
              f"sg/wg {cfg.subgroups} wg/sm {k:2d}: "
              f"{row['seconds'] * 1e3:8.3f} ms {row['tops']:8.1f} TOPS {100 * row['fraction']:5.1f}%"
              + ("" if row["check"] else "  CHECK FAILED"), flush=True)
    return rows


def best_of(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    good = [r for r in rows if r["check"]]
    return max(good, key=lambda r: r["tops"]) if good else None


def table(rows: list[dict[str, Any]], best: dict[str, Any] | None, args: argparse.Namespace, title: str) -> None:
    from rich.table import Table

    from kompute_dml.cli.common import console

    t = Table(title=title)
    for name in ("operands", "acc (tile)", "sg/wg", "wg/SM", "sg/SM", "iterations", "device ms", "TOPS", "% of peak", "check"):
        t.add_column(name, justify="right")
    for r in sorted(rows, key=lambda r: (order(r["src"]), r["tile"], r["acc"], r["subgroups"], r["groups_per_sm"])):
        style = "bold green" if r is best else None
        t.add_row(label(r["src"]), f"{r['acc']} ({r['tile']})", str(r["subgroups"]), str(r["groups_per_sm"]),
                  str(r["subgroups_per_sm"]), str(r["iterations"]), f"{r['seconds'] * 1e3:.3f}", f"{r['tops']:.1f}",
                  f"{100 * r['fraction']:.1f}",
                  ("OK" if r["check"] else "FAIL") + ("" if r["checked"] == "all" else "*"), style=style)
    console().print(t)


def parse_ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v.strip()]


def parse_tiles(text: str) -> list[tuple[int, int]]:
    """TMxTN,... among overlay_peak.WG_TILES (the variants built)."""
    names = [v.strip() for v in text.split(",") if v.strip()]
    bad = [n for n in names if n not in WG_TILES]
    if bad:
        raise argparse.ArgumentTypeError(f"{bad} not among the built tiles {list(WG_TILES)}")
    return [(int(n.split("x")[0]), int(n.split("x")[1])) for n in names]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="check the kernel's arithmetic on a tiny grid, no timing")
    ap.add_argument("--emulated", action="store_true",
                    help="the plain-code variants (any device: a check of this script, not a measurement)")
    ap.add_argument("--acc", type=parse_ints, default=list(TILES), help="accumulators per subgroup (default 1,2,4,8,16)")
    ap.add_argument("--subgroups", type=parse_ints, default=[1, 2, 4, 8], help="subgroups per work group")
    ap.add_argument("--groups-per-sm", type=parse_ints, default=[1, 2, 3, 4, 6, 8, 12, 16],
                    help="work groups per SM (grid = --sms x this; above 64 subgroups per SM skipped)")
    ap.add_argument("--sms", type=int, default=SMS, help=f"streaming multiprocessors (default {SMS}: H100 SXM5)")
    ap.add_argument("--peak-tops", type=float, default=PEAK_TOPS,
                    help=f"the dense INT8 peak the best result is compared with (default {PEAK_TOPS:g}: H100 SXM5, "
                         "NVIDIA H100 datasheet, 3958 TOPS with sparsity halved)")
    ap.add_argument("--target-ms", type=float, default=10.0, help="device time of one timed dispatch (default 10)")
    ap.add_argument("--repeats", type=int, default=5, help="timed dispatches per configuration (median)")
    ap.add_argument("--sets", type=int, default=8, help="distinct fragment sets (subgroup g takes set g %% sets)")
    ap.add_argument("--source", default="registers",
                    help="the loops, comma-separated or 'all': registers (the instruction ceiling, default), shared "
                         "(fragments loaded from shared memory every round: what a GEMM's inner loop can reach), "
                         "barrier (the same with a barrier per trip), step (and a one-stage GEMM step's stores), "
                         "workgroup (VK_NV_cooperative_matrix2 workgroup-scope matrices: --wg-tiles, --wg-acc)")
    ap.add_argument("--wg-tiles", type=parse_tiles, default=parse_tiles(",".join(WG_TILES)),
                    help=f"workgroup-scope tiles TMxTN (default {','.join(WG_TILES)})")
    ap.add_argument("--wg-acc", type=parse_ints, default=[1, 2], help="workgroup-scope accumulators (1, 2)")
    ap.add_argument("--quick", action="store_true", help="a short sweep: acc 4,8,16, 4 subgroups, 1,2,4 groups per SM")
    ap.add_argument("--budget", type=float, default=600.0, help="seconds after which the sweep stops (default 600)")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args(argv)
    if args.quick:
        args.acc, args.subgroups, args.groups_per_sm = [4, 8, 16], [4], [1, 2, 4]
    bad = [a for a in args.acc if a not in TILES]
    if bad:
        ap.error(f"--acc: {bad} not in {list(TILES)}")

    t0 = time.perf_counter()
    dev = kdml.Device()
    print(f"device: {dev.name}; subgroup size {subgroup_size(dev)}; capabilities: "
          f"{', '.join(sorted(dev.capabilities)) or 'none'}")
    shapes = shapes_text(dev)
    print("cooperative-matrix shapes: " + ("; ".join(shapes) if shapes else "none"))
    flexible = flexible_text(dev)
    print("workgroup-scope shapes (VK_NV_cooperative_matrix2, M N K granularity): "
          + ("; ".join(flexible) + f"; limits (max work-group size, max dimension, reserved shared bytes) "
             f"{tuple(dev.cooperative_matrix2_limits)}" if flexible else "none (cooperative_matrix_workgroup not enabled)"))
    result: dict[str, Any] = {"device": dev.name, "capabilities": sorted(dev.capabilities), "shapes": shapes,
                              "workgroup_shapes": flexible, "cooperative_matrix2_limits": list(dev.cooperative_matrix2_limits),
                              "emulated": args.emulated, "peak_tops": args.peak_tops, "sms": args.sms}
    reason = unavailable(dev, args.emulated)
    if reason is None:
        try:
            load()
        except RuntimeError as e:
            reason = f"the overlay's SPIR-V did not build here ({e}; the tensor-core variants need the cmeel wheels)"
    if reason is not None:
        print(f"skipped: {reason}; --emulated runs the harness on plain-code variants")
        result["skipped"] = reason
        write_json(args.json, result)
        return 0

    rng = np.random.default_rng(2026)
    checks = check_all(dev, args.acc, args.emulated, rng, sources(args), args.wg_tiles)
    ok = all(r["ok"] is not False for r in checks)
    ran = [r for r in checks if r["ok"] is not None]
    print(f"check ({'emulated' if args.emulated else 'tensor cores'}; {len(ran)} dispatches, 3 work groups (of 1/2/4 "
          f"subgroups; workgroup scope: each tile and size), every word against numpy int64): {'all OK' if ok else 'FAILED'}")
    for r in checks:
        if r["ok"] is not True:
            print(f"  {r['config']} trips {r.get('trips', '-')}: {'FAIL ' if r['ok'] is False else ''}{r.get('note')}")
    result["check"] = {"ok": ok, "rows": checks}
    if args.check or not ok:
        write_json(args.json, result)
        return 0 if ok else 1

    rows = sweep(dev, args, rng, t0 + args.budget)
    bests = {src: best_of([r for r in rows if r["src"] == src]) for src in sources(args)}
    result["rows"], result["best"] = rows, bests.get("") or next(iter(bests.values()))
    result["best_by_source"] = {label(k): v for k, v in bests.items()}
    table(rows, result["best"], args, f"{dev.name}: s8 x s8 -> s32 16x16x32 coopMatMulAdd "
                                      f"({'EMULATED, not a measurement' if args.emulated else 'KHR, subgroup scope'})")
    failed = [r for r in rows if not r["check"]]
    for src, best in bests.items():
        if best is None:
            continue
        print(f"best ({label(src)}): {best['acc']} accumulators "
              f"({best['tile']}) x {best['subgroups']} subgroups per work group x {best['groups']} work groups "
              f"({best['groups_per_sm']} per SM): {best['tops']:.1f} TOPS = {100 * best['fraction']:.1f}% of "
              f"{args.peak_tops:g} (--peak-tops)")
        if best["fraction"] > 1:
            print("  ABOVE the peak: a wrong --peak-tops, or work the compiler removed")
        if src and bests.get(""):
            print(f"  = {best['tops'] / bests['']['tops']:.1%} of the register-resident best")
    print(f"SM clock after the sweep: {gpu_clock.sm_clock_mhz()} MHz")
    print(f"checks: {'all OK' if not failed else f'{len(failed)} FAILED (their timings are void)'}"
          f" (* = the first and last subgroups only); {time.perf_counter() - t0:.0f} s")
    write_json(args.json, result)
    return 0 if not failed else 1


def write_json(path: str | None, result: dict[str, Any]) -> None:
    if path:
        with open(path, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
