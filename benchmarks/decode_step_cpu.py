"""The main thread's CPU time of a decoder's greedy steps at new past lengths (each a new
whole-graph plan, device_graph.GraphPlan) and of the same steps again (the plans kept), and the
part spent in GraphPlan.__init__: `time.thread_time`, so the device's own threads (lavapipe's
rasterizer threads on a CPU device) and the waits are not counted. Each round generates from a
shorter prompt than the last, so every step of it is a length no earlier step had; the first two
steps of a round (the prompt's plan, the first past) are left out. Medians and lower quartiles
(a shared machine's noise only adds).

    python -m benchmarks.decode_step_cpu [--decoders gpt2,llama] [--size small] [--rounds 4] [--steps 12]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import numpy as np

from kompute_dml.bench import decoders


def _steps(rep: Any, dec: decoders.Decoder, prompt: np.ndarray, steps: int) -> tuple[list[int], list[float]]:
    past, ids, length = dec.empty_past(1), prompt, 0
    tokens, cpu = [], []
    for _ in range(steps):
        length += ids.shape[1]
        c0 = time.thread_time()
        out = rep.run(dec.feeds(ids, length, past), device_outputs=True)
        nxt = out[0].numpy()[:, -1].argmax(-1)
        cpu.append(time.thread_time() - c0)
        tokens.append(int(nxt[0]))
        past, ids = list(out[1:]), nxt.reshape(1, 1).astype(np.int64)
    return tokens, cpu


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--decoders", default="gpt2,llama")
    ap.add_argument("--size", default="small")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--steps", type=int, default=12)
    args = ap.parse_args(argv)
    from kompute_dml.onnx_backend import Backend, device_graph

    plan_cpu: list[float] = []
    make = device_graph.GraphPlan.__init__

    def timed(plan: Any, *a: Any) -> None:
        c0 = time.thread_time()
        make(plan, *a)
        plan_cpu.append(time.thread_time() - c0)

    device_graph.GraphPlan.__init__ = timed  # type: ignore[method-assign]
    try:
        for name in args.decoders.split(","):
            dec = decoders.build(name, args.size)
            rep = Backend.prepare(str(dec.path))
            rep.state.cache_padding.enabled = False  # a plan per length (cache_padding.py pads them)
            prompt = np.random.default_rng(0).integers(1, decoders.VOCAB, (1, 24 + 12 * args.rounds))
            _steps(rep, dec, prompt, 4)  # the operators of the step shapes compiled, first traces made
            new, plans, kept, same = [], [], [], True
            for r in range(args.rounds):
                p = prompt[:, :prompt.shape[1] - 12 * (r + 1)]
                plan_cpu.clear()
                tokens, cpu = _steps(rep, dec, p, args.steps)
                new += cpu[2:]
                plans += plan_cpu[2:]
                again, cpu = _steps(rep, dec, p, args.steps)
                kept += cpu[2:]
                same = same and again == tokens

            def q(xs: list[float]) -> str:
                return f"median {statistics.median(xs) * 1e3:6.2f} q25 {sorted(xs)[len(xs) // 4] * 1e3:6.2f} ms"

            print(f"{name} ({args.size}), {len(new)} new-length steps; tokens equal when the plans are kept: {same}")
            print(f"  new-length step         {q(new)}")
            print(f"  in GraphPlan.__init__   {q(plans)}")
            print(f"  kept-plan step          {q(kept)}")
    finally:
        device_graph.GraphPlan.__init__ = make  # type: ignore[method-assign]
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
