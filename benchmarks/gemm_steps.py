"""GEMM's tiled float32 kernel at K steps of 16, 32 and 64 terms, its loads in their bounds branches
or at clamped addresses (benchmarks/overlay_gemm.py), beside the policy's variant, on the encoders' products
(bench_gemm.block_cases: Whisper's at 8 x 1,500 frames, the small families' at 8 x 128, squares):
where few work groups run, each walks K in serial steps (about 0.8 us each on the H100), so fewer,
longer steps may pay. Every variant must give the policy's bits (checked: FAIL voids the row).

    python -m benchmarks.gemm_steps [--rounds 3] [--only 1024x]
"""

from __future__ import annotations

import argparse
import copy
import dataclasses

import numpy as np

import kompute_dml as kdml
from benchmarks.bench_coop import time_interleaved
from benchmarks.bench_gemm import Ours, block_cases
from kompute_dml.ops.gemm import compile_gemm

from . import overlay_gemm as ov

FORMS = [(kt, c) for kt in ov.STEPS for c in ("", "c")]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", nargs="*", default=[], help="cases whose name contains one of these")
    args = ap.parse_args()
    dev = kdml.Device()
    ov.load()
    rng = np.random.default_rng(0)
    ok = True
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
        split, blk = "s" if first.startswith("gemms") else "", int(first.rsplit("_b", 1)[1])
        makes = {"policy": ours.make}
        for kt, c in FORMS:
            if not ov.runs(blk, kt):
                continue
            op = compile_gemm(dev, ours.op.desc, kernel="tiled")
            assert op is not ours.op
            op.plans[0] = dataclasses.replace(op.plans[0], variant=ov.GEMM_STEPS.name(split=split, blk=blk, kt=kt, c=c))
            ours.out.write_numpy(poison)
            op.execute(ours.ins, [ours.out])
            same = np.array_equal(ours.out.numpy().view(np.uint32), want)
            good &= same
            alt = copy.copy(ours)  # the same tensors, the overlay's operator
            alt.op = op
            makes[f"k{kt}{c}"] = alt.make
        ok &= good
        secs = time_interleaved(makes, args.rounds)
        best = min(secs, key=secs.__getitem__)
        print(f"{case['name']:<28} {first:<14} {secs['policy'] * 1e6:9.1f} "
              + " ".join(f"{secs[f'k{kt}{c}'] * 1e6:9.1f}" if f"k{kt}{c}" in secs else f"{'-':>9}" for kt, c in FORMS)
              + f" {best:>6} {secs['policy'] / secs[best]:8.2f}" + ("" if good else "  FAIL"), flush=True)
    print("correctness:", "all OK" if ok else "FAIL")
    dev.close()
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
