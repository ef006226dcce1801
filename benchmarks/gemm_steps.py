"""GEMM's tiled float32 kernel at K steps of 16, 32 and 64 terms, its loads in their bounds branches
or at clamped addresses (benchmarks/overlay_gemm.py), beside the policy's variant, on the encoders' products
(bench_gemm.block_cases: Whisper's at 8 x 1,500 frames, the small families' at 8 x 128, squares):
where few work groups run, each walks K in serial steps (about 0.8 us each on the H100), so fewer,
longer steps may pay. Every variant must give the policy's bits (checked: FAIL voids the row).

    python -m benchmarks.gemm_steps [--rounds 3] [--only 1024x]

--forms times the policy's variant beside other work-group forms instead (overlay_gemm.GEMM_FORMS:
rectangular blocks, 8 x 8 work groups of larger blocks, each on its own grid) and torch fp32 (TF32 off).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses

import numpy as np

import kompute_dml as kdml
from benchmarks.bench_coop import time_interleaved
from benchmarks.bench_gemm import Ours, block_cases, torch_peers
from kompute_dml.core.ints import cdiv
from kompute_dml.ops import contract
from kompute_dml.ops.gemm import compile_gemm, gemm_grid

from . import overlay_gemm as ov

FORMS = [(kt, c) for kt in ov.STEPS for c in ("", "c")]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", nargs="*", default=[], help="cases whose name contains one of these")
    ap.add_argument("--forms", action="store_true", help="the policy's tile by other work-group forms, and torch fp32")
    args = ap.parse_args()
    dev = kdml.Device()
    ov.load()
    rng = np.random.default_rng(0)
    ok = True
    if not args.forms:
        print(f"{'case':<28} {'policy':<14} {'policy us':>9} " + " ".join(f"{f'k{kt}{c} us':>9}" for kt, c in FORMS)
              + f" {'best':>6} {'x policy':>8}")
    for case in block_cases(False):
        if args.only and not any(w in case["name"] for w in args.only):
            continue
        ours = Ours(dev, case, kdml.DataType.FLOAT32, rng, kernel="tiled")
        first = ours.op.plans[0].variant
        if not first.startswith(("gemm_f32_b", "gemms_f32_b")):
            print(f"{case['name']:<28} {first}: not the tiled kernel, skipped")
            continue
        good = ours.check()
        want = ours.out.numpy().view(np.uint32).copy()
        poison = np.full(ours.out.shape, np.nan, np.float32)
        split = "s" if first.startswith("gemms") else ""
        bm, bn = contract.block_sides(first.rsplit("_b", 1)[1])
        blk = bm  # (the K steps: square blocks only)
        makes = {"policy": ours.make}
        alts = ({f"{bm}x{bn}w{wd}": (ov.form_name(split, bm, bn, wd), wd * bm, wd * bn) for bm, bn, wd in ov.FORMS}
                if args.forms else
                {f"k{kt}{c}": (ov.GEMM_STEPS.name(split=split, blk=blk, kt=kt, c=c), 16 * blk, 16 * blk)
                 for kt, c in FORMS if ov.runs(blk, kt) and bm == bn})
        for key, (variant, tm, tn) in alts.items():
            op = compile_gemm(dev, ours.op.desc, kernel="tiled")
            assert op is not ours.op
            chunk = op.plans[0].push[contract.GEMM.offset("kchunk")]  # split-K's terms per part (0: none)
            total = cdiv(ours.m, tm) * cdiv(ours.n, tn) * ours.batch * (cdiv(ours.k, chunk) if chunk else 1)
            op.plans[0] = dataclasses.replace(op.plans[0], variant=variant,
                                              groups=gemm_grid(total, dev.limits["max_compute_work_group_count"]))
            ours.out.write_numpy(poison)
            op.execute(ours.ins, [ours.out])
            same = np.array_equal(ours.out.numpy().view(np.uint32), want)
            good &= same
            alt = copy.copy(ours)  # the same tensors, the overlay's operator
            alt.op = op
            makes[key] = alt.make
        ok &= good
        if args.forms:
            makes.update(torch_peers(ours, ("torch_f32",)))
        secs = time_interleaved(makes, args.rounds)
        best = min((k for k in secs if not k.startswith("torch")), key=secs.__getitem__)
        if args.forms:
            torch_s = secs.get("torch_f32")
            print(f"{case['name']:<28} {first:<14} " + "  ".join(f"{k} {v * 1e6:.1f}" for k, v in secs.items())
                  + f"  best {best} x policy {secs['policy'] / secs[best]:.2f}"
                  + (f" torch/best {torch_s / secs[best]:.2f}" if torch_s else "") + ("" if good else "  FAIL"), flush=True)
            continue
        print(f"{case['name']:<28} {first:<14} {secs['policy'] * 1e6:9.1f} "
              + " ".join(f"{secs[f'k{kt}{c}'] * 1e6:9.1f}" if f"k{kt}{c}" in secs else f"{'-':>9}" for kt, c in FORMS)
              + f" {best:>6} {secs['policy'] / secs[best]:8.2f}" + ("" if good else "  FAIL"), flush=True)
    print("correctness:", "all OK" if ok else "FAIL")
    dev.close()
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
