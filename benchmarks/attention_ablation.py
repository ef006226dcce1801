"""The tensor-core attention kernel's ablations (benchmarks/overlay_attention.py) timed beside it:
what each part of `mhac16_d64k32` costs at a few FLOAT16 shapes (their results are wrong by design).

    python -m benchmarks.attention_ablation [--rounds 3] [--n 10] [--also DIR=VARIANT ...]

`--also` times another build of the kernel beside them (an earlier commit's, built with
tools/build_spirv.py --overlay into DIR), as the row "also <VARIANT>".
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import numpy as np

import kompute_dml as kdml
from kompute_dml.bench.timing import slopes

from . import overlay_attention as ov

SHAPES = {"Whisper 8x1500 h4": (8, 4, 1500), "BERT-base 8x128 h12": (8, 12, 128), "long 1x4096 h16": (1, 16, 4096)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--n", type=int, default=10)
    ap.add_argument("--also", action="append", default=[], help="DIR=VARIANT: a prebuilt kernel to time beside")
    args = ap.parse_args()
    dev = kdml.Device()
    dev.policy = dataclasses.replace(dev.policy, attention_kernel="coopmat")
    ov.load()
    also = dict(a.split("=", 1)[::-1] for a in args.also)  # variant -> folder
    from kompute_dml.runtime import shaders

    for folder in set(also.values()):
        shaders.add_overlay(Path(folder))
    rng = np.random.default_rng(0)
    for label, (b, h, s) in SHAPES.items():
        x = [dev.tensor(rng.standard_normal((b, s, h * 64)).astype(np.float16)) for _ in range(3)]
        out = dev.empty(kdml.TensorDesc(kdml.DataType.FLOAT16, (b, s, h * 64)))
        desc = kdml.MultiheadAttentionDesc(x[0].desc, x[1].desc, x[2].desc, None, None, None, None, None, None, None,
                                           None, out.desc, None, None, 0.125, -1e4, h)
        base = dev.compile(desc)
        ops = {"kernel": base}
        for n in ov.ABLATIONS:
            op = dev.compile(desc)
            op.plans[0] = dataclasses.replace(op.plans[0], variant=ov.MHA_ABLATION.name(part=n))
            ops[f"a{n}"] = op
        for variant in also:
            op = dev.compile(desc)
            op.plans[0] = dataclasses.replace(op.plans[0], variant=variant)
            ops[f"also {variant}"] = op
        runs = {}
        for name, op in ops.items():
            def run(k: int, op=op, ins=(*x, *[None] * 8), outs=(out, None, None)) -> None:
                with dev.record() as rec:
                    for _ in range(k):
                        rec.execute(op, list(ins), list(outs))
            runs[name] = run
        med = slopes(runs, args.rounds, args.n)
        outputs = {}
        for name, run in runs.items():  # each one's result, to say which ablations keep the kernel's bits
            run(1)
            outputs[name] = out.numpy().view(np.uint16).copy()
        same = {name: bool((o == outputs["kernel"]).all()) for name, o in outputs.items()}
        flops = 2 * b * h * s * s * 2 * 64
        print(f"{label} ({base.plans[0].variant}): kernel {med['kernel'] * 1e6:.1f} us ({flops / med['kernel'] / 1e12:.1f} TFLOP/s)")
        for n, bits in ov.ABLATIONS.items():
            what = "; ".join(w for bit, w in ov.BITS.items() if bits & bit)
            print(f"  a{n}: {med[f'a{n}'] * 1e6:9.1f} us  x{med['kernel'] / med[f'a{n}']:.2f}  ({what})"
                  + ("  [the kernel's bits]" if same[f"a{n}"] else ""))
        for variant in also:
            t = med[f"also {variant}"]
            print(f"  also {variant}: {t * 1e6:9.1f} us  x{med['kernel'] / t:.2f}")
    dev.close()


if __name__ == "__main__":
    main()
