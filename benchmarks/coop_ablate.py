"""`bench_coop.py --ablate`: which part of the cooperative-matrix kernel costs the time.

The `mmc8a<n>_rc` variants of shaders/matmul_coop.comp each leave one part of the `_rc` kernel
(A row-major, B column-major) out; ABLATIONS in benchmarks/overlay_ablation.py (a benchmark-only
shader overlay, built on first use) names them. Their
results are WRONG BY DESIGN (except a5-a11, exact kernels timed for comparison) and the
dispatcher never picks them. If leaving a part out brings the time close to the MMA-bound figure,
that part was the bottleneck:
  a1 no global loads      -> the global -> shared pipeline (coalescing, latency, barriers)
  a2 no fragment loads    -> coopMatLoad from shared memory (bank conflicts, byte-wise lowering)
  a3 no loads nor MMAs    -> what is left: global pipeline plus epilogue
  a4 no epilogue          -> the epilogue, or accumulators demoted to local memory by it
  a5 the old epilogue     -> the fix's effect (the fixed kernel against the kernel before it)
  a6 the old pipeline     -> PIPE=1: each load's bytes sign-flipped and masked as loaded, so every
                             invocation waited for its loads before its MMAs (the default, PIPE=2,
                             does that at the shared store, after the MMAs)
  a7 two steps ahead      -> PIPE=3: loads of step s + 2 issued at step s, two register sets
  a8 no store fast path   -> FAST=0: every chunk's shared offset by div/mod and bounds-checked
                             (the default, FAST=1, adds constants to an offset computed once)
  a9 no bounds work       -> LDV=1: every tile taken as interior (exact only on whole tiles)
  a10 addresses in a branch -> LDV=2: interior tiles' load addresses from constants, edge tiles'
                             bounds-checked, chosen in a branch (the default before LDV=0: every
                             address clamped into the matrix, no branch before the loads)
  a11 sums from shared    -> RSUM=0: a k-contiguous operand's row sums (zero points) re-read from
                             the shared tile every step (the default before RSUM=1: from its
                             staging registers as they are stored; timed on the quantized case,
                             B column-major)
Also the fixed kernel at other tile configurations, row-major B transposed (`_rr`) or kept (`_rn`),
gemm and quantized (the `ours_quant_Brow` case), and torch._int_mm (B column-major) as peer.

`bench_coop.py --staging` (`staging` below): the staging options of TileConfig (kompute_dml/ops/
matmul_coop.py) against the dispatcher's default in the same interleaved rounds, each checked on
sampled rows first: `lean` (signedness and sums fixed in the pipeline: no XOR for signed operands,
no sum code without zero points), one shared stage with BK 128 (`stages=1`: two barriers per 128
k), larger subgroup blocks and work-group tiles; on s8 gemm with B column-major (8192^3, 4096^3)
against torch._int_mm, and on the quantized case (u8 A with a zero point, B row-major transposed
`Br` or kept `Bn`, column scales, bias) against torch._int_mm + dequantization. SUMMARY staging is
printed last.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from benchmarks.overlay_ablation import ABLATIONS, EXACT_ABLATIONS
from kompute_dml.ops.matmul_coop import LARGE, TENSOR_CORE_OPTIONS, TileConfig

SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192)]
CONFIGS = [TileConfig(128, 256, 32, 64, 64), TileConfig(64, 64, 64, 32, 32), TileConfig(16, 64, 128, 16, 16)]
TUNED = replace(LARGE, **TENSOR_CORE_OPTIONS)  # what the dispatcher picks for SHAPES on tensor cores
TUNED_ABLATIONS = (1, 8, 9, 10)


def ablate(dev: Any, rounds: int, rng: np.random.Generator, ours: Any, time_interleaved: Any,
           torch_peers: Any, random_inputs: Any, cfg_name: Any) -> list[dict[str, Any]]:
    """Times the fixed kernel, each ablation and the peer on SHAPES; prints per shape and returns
    rows {name, shape, seconds, tops, check} (check None: an ablation, wrong by design)."""
    rows: list[dict[str, Any]] = []
    print(f"\nablation (s8 gemm, B column-major, tiles {cfg_name(LARGE)} unless noted; median of {rounds} rounds):")
    for m, k, n in SHAPES:
        ops = 2.0 * m * n * k
        a, b = random_inputs(rng, m, k, n, np.int8)
        au = a.view(np.uint8)  # the quantized rows' A: the same bytes, unsigned (one object: uploads)
        sample = np.unique(np.linspace(0, m - 1, 4).astype(int))
        uploads: dict[Any, Any] = {}
        cases: dict[str, Any] = {}
        checks: dict[str, bool | None] = {}
        # (name, tiles, ablation, B column-major, quantized: u8 A with a zero point, bias, B scales)
        entries = [("fixed mmc8_rc", LARGE, 0, True, False)]
        entries += [(f"a{i} {what}", LARGE, i, True, False) for i, what in ABLATIONS.items()]
        entries += [(f"fixed {cfg_name(c)}", c, 0, True, False) for c in CONFIGS]
        # the staging experiments again at the dispatcher's tiles for this shape (BK 128, one stage, lean)
        entries += [(f"fixed {cfg_name(TUNED)}", TUNED, 0, True, False)]
        entries += [(f"a{i} at {cfg_name(TUNED)}", TUNED, i, True, False) for i in TUNED_ABLATIONS]
        # the zero points' sums (u8 A with a zero point: B's column sums), B column-major
        entries += [(f"quant u8 A+zp B col-major{f' a{i}' if i else ''}", TUNED, i, True, True) for i in (0, 11)]
        # row-major B (ONNX weights): transposed into k-contiguous tiles (`_rr`, the default) or
        # kept row-major for coopMatLoad RowMajor (`_rn`); gemm and the quantized case
        for quant in (False, True):
            for b_rows in ("r", "n"):
                what = "quant u8 A+zp" if quant else "gemm"
                entries.append((f"{what} B row-major mmc8_r{b_rows}", replace(LARGE, b_rows=b_rows), 0, False, quant))
        for name, cfg, abl, b_col, quant in entries:
            try:
                case = ours(dev, au if quant else a, b, b_colmajor=b_col, quant=quant, config=cfg,
                            ablation=abl, rng=rng, uploads=uploads)
            except Exception as e:  # a configuration this device cannot run: reported, skipped
                print(f"    {name:44s} cannot run: {str(e)[:100]}")
                continue
            cases[name] = case
            checks[name] = case.check(sample) if abl == 0 or abl in EXACT_ABLATIONS else None
        makes = {name: c.run for name, c in cases.items()}
        peers = torch_peers(a, b, None) or {}
        if "torch_int_mm_Bcol" in peers:
            makes["torch _int_mm B col-major"] = peers["torch_int_mm_Bcol"]
        t = time_interleaved(makes, rounds)
        print(f"  {m}x{k}x{n}:")
        for name, sec in t.items():
            chk = checks.get(name)
            note = "" if name not in checks else ("(wrong by design)" if chk is None else ("OK" if chk else "FAIL"))
            print(f"    {name:44s} {sec * 1e3:9.4f} ms {ops / sec / 1e12:8.2f} TOPS  {note}")
            rows.append({"name": name, "shape": [m, k, n], "seconds": sec, "tops": ops / sec / 1e12, "check": chk})
        del cases
    return rows


def summary(ablation_rows: list[dict[str, Any]], timing_rows: list[dict[str, Any]]) -> None:
    """The compact table printed last: TOPS per ablation and shape, then ours vs torch per shape."""
    shapes = [tuple(s) for s in SHAPES]
    names = list(dict.fromkeys(r["name"] for r in ablation_rows))
    by = {(r["name"], tuple(r["shape"])): r for r in ablation_rows}
    print("\nSUMMARY ablation, TOPS (2MNK/s); check OK/FAIL on exact kernels, '-' on ablations (wrong by design)")
    print(f"  {'kernel / part left out':44s}" + "".join(f"{'x'.join(map(str, s)):>16s}" for s in shapes) + "  check")
    for name in names:
        cells = [by.get((name, s)) for s in shapes]
        vals = "".join(f"{c['tops']:16.1f}" if c else f"{'-':>16s}" for c in cells)
        chks = {c["check"] for c in cells if c}
        chk = "-" if chks == {None} else ("OK" if chks <= {True, None} else "FAIL")
        print(f"  {name:44s}{vals}  {chk}")
    if timing_rows:
        print("SUMMARY timing, TOPS: ours gemm B row / B col, quant B row / B col; torch _int_mm B col, _int_mm+dequant")
        for row in timing_rows:
            t, (m, k, n) = row["seconds"], row["shape"]
            ops = 2.0 * m * n * k
            keys = ("ours_gemm_Brow", "ours_gemm_Bcol", "ours_quant_Brow", "ours_quant_Bcol", "torch_int_mm_Bcol",
                    "torch_int_mm+dequant")
            tops = [f"{ops / t[key] / 1e12:9.2f}" if key in t else f"{'-':>9s}" for key in keys]
            bad = [name for name, ok in row["checks"].items() if not ok]
            print(f"  {m}x{k}x{n:<6d} " + " ".join(tops) + (f"  FAIL {bad}" if bad else "  OK"))


# ---- --staging: the staging options of TileConfig against the default, one interleaved run ------
GEMM_SHAPES = [(8192, 8192, 8192), (4096, 4096, 4096)]
QUANT_SHAPES = [(512, 384, 1536), (128, 384, 1536), (4096, 4096, 4096)]


def staging_entries(m: int, k: int, n: int, quant: bool) -> list[tuple[str, TileConfig | None]]:
    """(name, config) pairs timed for one shape; config None: the dispatcher's default."""
    from kompute_dml.ops.matmul_coop import candidate_configs
    base = candidate_configs(m, n, 1)[0]
    out: list[tuple[str, TileConfig | None]] = [("default", None)]
    if quant:  # B row-major: transposed (`_rr`, the default) or kept (`_rn`), each with the options
        out.insert(1, ("Bn", replace(base, b_rows="n")))
        out += [(f"B{b_rows} lean", replace(base, b_rows=b_rows, lean=True)) for b_rows in ("r", "n")]
        if base.bk == 64:
            out.append(("Bn BK128 1 stage lean", replace(base, b_rows="n", bk=128, stages=1, lean=True)))
        out += [(f"Bn BK128 1 stage lean w{wm}x{wn}", replace(base, b_rows="n", bk=128, stages=1, lean=True, wm=wm, wn=wn))
                for wm, wn in ((32, 32), (32, 64))]
        return out
    c = base
    out += [("lean", replace(c, lean=True)),
            ("BK128 1 stage", replace(c, bk=128, stages=1)), ("BK128 1 stage lean", replace(c, bk=128, stages=1, lean=True)),
            ("128x128x64 w64x64 (4 subgroups) lean", TileConfig(128, 128, 64, 64, 64, lean=True)),
            ("128x256x32 w64x64 lean", TileConfig(128, 256, 32, 64, 64, lean=True)),
            ("128x256x64 w64x64 1 stage lean", TileConfig(128, 256, 64, 64, 64, stages=1, lean=True)),
            ("256x128x64 w64x64 1 stage lean", TileConfig(256, 128, 64, 64, 64, stages=1, lean=True)),
            ("128x128x64 w32x32 (16 subgroups) lean", TileConfig(128, 128, 64, 32, 32, lean=True))]
    # other subgroup tiles with the default's staging (BK 128, one stage, lean)
    one = replace(c, bk=128, stages=1, lean=True)
    out += [(f"BK128 1 stage lean w{wm}x{wn}", replace(one, wm=wm, wn=wn)) for wm, wn in ((32, 32), (32, 64), (64, 64))]
    out += [(f"BK128 1 stage lean g{g}", replace(one, group_m=g)) for g in (4, 16)]
    return out


def staging(dev: Any, rounds: int, rng: np.random.Generator, ours: Any, time_interleaved: Any,
            torch_peers: Any, random_inputs: Any, cfg_name: Any, family: str = "coopmat",
            quick: bool = False, shapes: list[tuple[tuple[int, int, int], bool]] | None = None) -> list[dict[str, Any]]:
    """Times, per shape, the default kernel and each staging option (interleaved rounds, sampled
    rows checked bitwise first) beside torch; prints per shape, returns rows for staging_summary.
    quick: two small shapes (a dry run, e.g. with family coopmat-emulated on lavapipe); shapes:
    ((M, K, N), quantized) pairs in place of the default ones."""
    rows: list[dict[str, Any]] = []
    print(f"\nstaging options (median of {rounds} rounds; x default = default s / this s, > 1 faster):")
    if shapes is None:
        shapes = ([((256, 256, 192), False), ((96, 384, 160), True)] if quick else
                  [(s, False) for s in GEMM_SHAPES] + [(s, True) for s in QUANT_SHAPES])
    for (m, k, n), quant in shapes:
        ops = 2.0 * m * n * k
        a, b = random_inputs(rng, m, k, n, np.uint8 if quant else np.int8)
        sample = np.unique(np.linspace(0, m - 1, 4).astype(int))
        what = "quant u8 A+zp, B row-major, col scales, bias" if quant else "gemm s8, B column-major"
        print(f"  {m}x{k}x{n} {what}:")
        uploads: dict[Any, Any] = {}
        cases: dict[str, Any] = {}
        checks: dict[str, bool] = {}
        configs = dict(staging_entries(m, k, n, quant))
        for name, cfg in configs.items():
            try:  # gemm: s8 x s8, B column-major (mmc8_rc); quant: u8 A + zero point, B row-major
                case = ours(dev, a, b, b_colmajor=not quant, quant=quant, config=cfg, rng=rng, uploads=uploads,
                            family=family)
            except Exception as e:  # a configuration this device cannot run: reported, skipped
                print(f"    {name:44s} cannot run: {str(e)[:100]}")
                continue
            cases[name] = case
            checks[name] = case.check(sample)
        makes = {name: c.run for name, c in cases.items()}
        peers = (torch_peers(a, b, cases.get("default")) or {}) if quant else (torch_peers(a, b, None) or {})
        peer = "torch_int_mm+dequant" if quant else "torch_int_mm_Bcol"
        if peer in peers:
            makes[peer] = peers[peer]
        t = time_interleaved(makes, rounds)
        for name, sec in t.items():
            c = cases.get(name)
            note = "" if c is None else (f"{c.op.variants[0]} {cfg_name(configs[name]) if configs[name] else 'dispatcher'} "
                                         f"{'OK' if checks[name] else 'FAIL'}")
            rel = t["default"] / sec if "default" in t else float("nan")
            vs = t[peer] / sec if peer in t else float("nan")
            print(f"    {name:44s} {sec * 1e3:9.4f} ms {ops / sec / 1e12:8.2f} TOPS  x default {rel:5.3f}  "
                  f"x {peer} {vs:5.3f}  {note}")
            rows.append({"name": name, "shape": [m, k, n], "quant": quant, "seconds": sec, "tops": ops / sec / 1e12,
                         "x_default": rel, "x_peer": vs, "check": checks.get(name)})
        del cases
    return rows


def staging_summary(rows: list[dict[str, Any]]) -> None:
    """The compact table printed last: per shape, each entry's TOPS and its ratio to the default."""
    print("\nSUMMARY staging: TOPS (x default: > 1 faster than the current default; x peer: > 1 faster than torch)")
    shape = None
    for r in rows:
        key = (tuple(r["shape"]), r["quant"])
        if key != shape:
            shape = key
            print(f"  {'x'.join(map(str, r['shape']))} {'quant' if r['quant'] else 'gemm'}:")
        chk = "" if r["check"] is None else ("OK" if r["check"] else "FAIL")
        print(f"    {r['name']:44s} {r['tops']:8.2f}  x default {r['x_default']:5.3f}  x peer {r['x_peer']:5.3f}  {chk}")
