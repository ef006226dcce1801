"""The tensor-core attention kernel's ablations (benchmarks/overlay_attention.py) timed beside it:
what each part of the kernel at key tiles of 32 (the overlay's `mhac16a0_d64k32`) costs at a few FLOAT16
shapes (their results are wrong by design),
the default choice beside it (key tiles of 16), allow_half_precision's variant and the overlay's tile experiments;
with --kernel blocked, the blocked kernel `mha_f32_blocked64`'s at FLOAT32.

    python -m benchmarks.attention_ablation [--kernel coopmat|blocked] [--rounds 3] [--n 10] [--also DIR=VARIANT ...]

`--also` times another build of the kernel beside them (an earlier commit's, built with
tools/build_spirv.py --overlay into DIR), as the row "also <VARIANT>".
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import kompute_dml as kdml
from kompute_dml.bench.timing import slopes
from kompute_dml.ops.contract.attention import mha_coop_smem

from . import overlay_attention as ov

SHAPES = {"Whisper 8x1500 h4": (8, 4, 1500), "BERT-base 8x128 h12": (8, 12, 128), "long 1x4096 h16": (1, 16, 4096),
          "ViT-B 32x197 h12": (32, 12, 197)}


def problem(dev: kdml.Device, rng: np.random.Generator, b: int, h: int, s: int, npd: Any,
            d: int = 64) -> tuple[list[Any], Any, Any]:
    """Self-attention over random [b, s, h x d] query, key and value tensors, scale 1 / sqrt(d):
    (inputs, output, descriptor)."""
    x = [dev.tensor(rng.standard_normal((b, s, h * d)).astype(npd)) for _ in range(3)]
    out = dev.empty(kdml.TensorDesc(kdml.DataType.from_numpy(npd), (b, s, h * d)))
    desc = kdml.MultiheadAttentionDesc(x[0].desc, x[1].desc, x[2].desc, None, None, None, None, None, None, None,
                                       None, out.desc, None, None, d ** -0.5, -1e4, h)
    return x, out, desc


def recorded(dev: kdml.Device, ops: dict[str, Any], x: list[Any], out: Any) -> dict[str, Callable[[int], None]]:
    """Per operator, a run of k executions recorded into one submission (timing.slopes' contenders)."""
    def runner(op: Any) -> Callable[[int], None]:
        def run(k: int) -> None:
            with dev.record() as rec:
                for _ in range(k):
                    rec.execute(op, [*x, *[None] * 8], [out, None, None])
        return run
    return {name: runner(op) for name, op in ops.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--n", type=int, default=10)
    ap.add_argument("--also", action="append", default=[], help="DIR=VARIANT: a prebuilt kernel to time beside")
    ap.add_argument("--kernel", choices=("coopmat", "blocked"), default="coopmat")
    args = ap.parse_args()
    dev = kdml.Device()
    dev.policy = dataclasses.replace(dev.policy, attention_kernel=args.kernel)
    blocked = args.kernel == "blocked"
    npd, bits, ablations = (np.float32, ov.BLOCKED_BITS, ov.BLOCKED_ABLATIONS) if blocked else \
        (np.float16, ov.BITS, {n: parts for n, parts in ov.ABLATIONS.items() if n})  # (a0: the ablated kernel)
    family = ov.MHA_BLOCKED_ABLATION if blocked else ov.MHA_ABLATION
    ov.load()
    also = dict(a.split("=", 1)[::-1] for a in args.also)  # variant -> folder
    from kompute_dml.runtime import shaders

    for folder in set(also.values()):
        shaders.add_overlay(Path(folder))
    rng = np.random.default_rng(0)
    for label, (b, h, s) in SHAPES.items():
        x, out, desc = problem(dev, rng, b, h, s, npd)
        base = dev.compile(desc)
        if blocked and base.plans[0].variant != "mha_f32_blocked64":  # the overlay's variants have 64-row blocks
            raise SystemExit(f"--kernel blocked: this device takes {base.plans[0].variant}, the ablations are of "
                             "mha_f32_blocked64 (48 KiB of shared memory, 256 invocations per work group)")
        ops = {"kernel": base}
        if not blocked and base.plans[0].variant != ov.ABLATED:  # the ablations' kernel, and the default beside it
            ops["default"] = base
            base = dev.compile(desc)
            base.plans[0] = dataclasses.replace(base.plans[0], variant=ov.ABLATED)
            ops["kernel"] = base
        for n in ablations:
            op = dev.compile(desc)
            op.plans[0] = dataclasses.replace(op.plans[0], variant=family.name(part=n))
            ops[f"a{n}"] = op
        for variant in also:
            op = dev.compile(desc)
            op.plans[0] = dataclasses.replace(op.plans[0], variant=variant)
            ops[f"also {variant}"] = op
        if not blocked:  # allow_half_precision's float16-weight variant, and its experiments (overlay)
            ops["half"] = dev.compile(desc, allow_half_precision=True)
            for n, (_bk, _os, halfp) in ov.HALF_EXPERIMENTS.items():
                op = dev.compile(desc, allow_half_precision=bool(halfp))
                op.plans[0] = dataclasses.replace(op.plans[0], variant=ov.MHA_HALF_EXPERIMENT.name(part=n))
                ops[f"h{n}"] = op
        runs = recorded(dev, ops, x, out)
        med = slopes(runs, args.rounds, args.n)
        outputs = {}
        for name, run in runs.items():  # each one's result, to say which ablations keep the kernel's bits
            run(1)
            outputs[name] = out.numpy().view(np.uint32 if blocked else np.uint16).copy()
        same = {name: bool((o == outputs["kernel"]).all()) for name, o in outputs.items()}
        flops = 2 * b * h * s * s * 2 * 64
        print(f"{label} ({base.plans[0].variant}): kernel {med['kernel'] * 1e6:.1f} us ({flops / med['kernel'] / 1e12:.1f} TFLOP/s)")
        for n, parts in ablations.items():
            what = "; ".join(w for bit, w in bits.items() if parts & bit)
            print(f"  a{n}: {med[f'a{n}'] * 1e6:9.1f} us  x{med['kernel'] / med[f'a{n}']:.2f}  ({what})"
                  + ("  [the kernel's bits]" if same[f"a{n}"] else ""))
        for variant in also:
            t = med[f"also {variant}"]
            print(f"  also {variant}: {t * 1e6:9.1f} us  x{med['kernel'] / t:.2f}"
                  + ("  [the kernel's bits]" if same[f"also {variant}"] else ""))
        if "default" in ops:
            t = med["default"]
            print(f"  default ({ops['default'].plans[0].variant}): {t * 1e6:9.1f} us  x{med['kernel'] / t:.2f}"
                  + ("  [the kernel's bits]" if same["default"] else ""))
        if not blocked:
            half = med["half"]
            err = np.abs(outputs["half"].view(np.float16).astype(np.float64)
                         - outputs["kernel"].view(np.float16).astype(np.float64)).max()
            print(f"  half ({ops['half'].plans[0].variant}): {half * 1e6:9.1f} us  x{med['kernel'] / half:.2f}"
                  f"  (allow_half_precision; largest |difference| from the kernel {err:.2e})")
            for n, (bk, ostage, halfp) in ov.HALF_EXPERIMENTS.items():
                t, ref = med[f"h{n}"], "half" if halfp else "kernel"
                smem = mha_coop_smem((bk, 64, ostage), bool(halfp))
                print(f"    h{n}: {t * 1e6:9.1f} us  x{med[ref] / t:.2f} over {ref}  (key tiles of {bk}, {ostage} output "
                      f"fragments staged, {'float16' if halfp else 'float32'} weights: {smem} bytes of shared memory)"
                      + (f"  [{ref}'s bits]" if (outputs[f"h{n}"] == outputs[ref]).all() else ""))
    dev.close()


if __name__ == "__main__":
    main()
