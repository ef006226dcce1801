"""GEMM's fused GELU (ops/gemm.py FusedActivation, shaders/gemm_act.glsl) against the two dispatches it
replaces, GEMM with its bias then ACTIVATION_GELU, on the transformers' first feed-forward products
(x W1 + b1 at 8 x 128 tokens for the small families, Whisper's 8 x 1,500 frames) and a square, in
FLOAT32 and FLOAT16 on the policy's kernels, one recorded submission per timed batch. Every fused
output must be the two dispatches' bits (FAIL voids the row).

    python -m benchmarks.gemm_act [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import Any

import numpy as np

import kompute_dml as kdml
from benchmarks.bench_coop import time_interleaved

CASES = [("BERT/ViT FC1 1024x256x1024", 1024, 256, 1024), ("Whisper FC1 12000x256x1024", 12000, 256, 1024),
         ("Whisper FC1 12000x384x1536", 12000, 384, 1536), ("square 4096^3", 4096, 4096, 4096)]
if os.environ.get("KDML_GEMM_ACT_SMALL"):  # a quick look on CPU devices
    CASES = [("small 256x64x128", 256, 64, 128)]
GELU = kdml.ActivationGeluDesc(None, None)


def _recorded(dev: kdml.Device, steps: list[tuple[Any, list[Any], list[Any]]]) -> Callable[[int], Callable[[], None]]:
    """make(count): one submission of `count` repetitions of the steps (operator, inputs, outputs)."""
    def make(count: int) -> Callable[[], None]:
        def call() -> None:
            with dev.record() as rec:
                for _ in range(count):
                    for op, ins, outs in steps:
                        rec.execute(op, ins, outs)
        return call
    return make


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    dev = kdml.Device()
    rng = np.random.default_rng(0)
    ok = True
    print(f"{'case':<30} {'type':<8} {'variant':<16} {'two us':>9} {'fused us':>9} {'x two':>6}")
    for name, m, k, n in CASES:
        for dt in (kdml.DataType.FLOAT32, kdml.DataType.FLOAT16):
            npd = dt.numpy_dtype
            a = dev.tensor(rng.standard_normal((m, k)).astype(npd))
            w = dev.tensor((rng.standard_normal((k, n)) / np.sqrt(k)).astype(npd))
            bias = dev.tensor(rng.standard_normal((1, n)).astype(npd))
            bias_b = kdml.Tensor(bias.buffer, kdml.TensorDesc(dt, (m, n), (0, 1)), bias.offset)
            y, g, z = (dev.tensor(np.zeros((m, n), npd)) for _ in range(3))
            plain = dev.compile(kdml.GemmDesc(a.desc, w.desc, bias_b.desc, y.desc))
            fused = dev.compile(kdml.GemmDesc(a.desc, w.desc, bias_b.desc, z.desc, fused_activation=GELU))
            gelu = dev.compile(kdml.ActivationGeluDesc(y.desc, g.desc))
            ins = [a, w, bias_b]

            two = _recorded(dev, [(plain, ins, [y]), (gelu, [y], [g])])
            one = _recorded(dev, [(fused, ins, [z])])
            two(1)()
            one(1)()
            same = np.array_equal(g.numpy().view(f"u{dt.size}"), z.numpy().view(f"u{dt.size}"))
            ok &= same
            secs = time_interleaved({"two": two, "fused": one}, args.rounds)
            print(f"{name:<30} {dt.name:<8} {fused.plans[-1].variant:<16} {secs['two'] * 1e6:9.1f} "
                  f"{secs['fused'] * 1e6:9.1f} {secs['two'] / secs['fused']:6.2f}" + ("" if same else "  FAIL"), flush=True)
    print("correctness:", "all OK" if ok else "FAIL")
    dev.close()
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
