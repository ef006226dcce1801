"""What a decoding step at a new past length costs in planning (issue 52): greedy steps of a
decoder (kompute_dml/bench/decoders.py, the cache on the device), every step a new input
signature and so a new whole-graph plan, made three ways: repeating the previous plan's steps
that read the same values (onnx_backend/step_reuse.py, "reuse": the default), with the node traces
only (onnx_backend/node_traces.py, `RunState.step_reuse = False`: "traces") and with neither
(`RunState.trace_capacity = 0`: every handler runs at every plan), the three models (a Device each)
stepped in turn in one process so that all see the same machine; per step the plan's wall
seconds (`last_run.plan_seconds`), the planning thread's CPU seconds, the step's wall time (a
first generation's time per token: plan, first run, argmax), the device nodes it repeated
(`last_run.reused_nodes`), and the plan buffers the steps allocated in all (`GraphPlan.device_bytes`).
The tokens of all are compared.

    python -m benchmarks.decode_plans [--decoders gpt2,llama] [--size small] [--prompt 16] [--new 24]
        [--order policy|levels|program]
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

from kompute_dml.bench import decoders
from kompute_dml.bench.timing import median


class _Steps:
    """One model's greedy loop, a step at a time."""

    def __init__(self, rep: Any, dec: decoders.Decoder, prompt: np.ndarray) -> None:
        self.rep, self.past, self.ids, self.length = rep, dec.empty_past(prompt.shape[0]), prompt, 0
        self.tokens: list[int] = []
        # plan wall s, plan thread CPU s, step wall s, device nodes repeated (step_reuse.py), plan bytes allocated
        self.rows: list[tuple[float, float, float, int, int]] = []

    def step(self) -> None:
        from kompute_dml.onnx_backend import device_graph

        self.length += self.ids.shape[1]
        feeds = decoders.Decoder.feeds(self.ids, self.length, self.past)
        cpu = [0.0]
        make = device_graph.GraphPlan.__init__

        def timed(plan: Any, *args: Any) -> None:
            c0 = time.thread_time()
            make(plan, *args)
            cpu[0] = time.thread_time() - c0

        device_graph.GraphPlan.__init__ = timed  # type: ignore[method-assign]
        try:
            t0 = time.perf_counter()
            out = self.rep.run(feeds, device_outputs=True)
            nxt = out[0].numpy()[:, -1].argmax(-1)
            wall = time.perf_counter() - t0
        finally:
            device_graph.GraphPlan.__init__ = make  # type: ignore[method-assign]
        run, plan = self.rep.last_run, next(reversed(self.rep.state.plans.values()))
        self.rows.append((run.plan_seconds, cpu[0], wall, run.reused_nodes, plan.device_bytes))
        self.tokens.append(int(nxt[0]))
        self.past, self.ids = list(out[1:]), nxt.reshape(-1, 1).astype(np.int64)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--decoders", default="gpt2,llama")
    ap.add_argument("--size", default="small")
    ap.add_argument("--prompt", type=int, default=16)
    ap.add_argument("--new", type=int, default=24)
    ap.add_argument("--skip", type=int, default=3, help="steps left out of the medians (the prompt, the first plans)")
    ap.add_argument("--order", choices=("policy", "levels", "program"), default="policy",
                    help="how submissions are recorded (runtime/encode.py; the device's policy by default)")
    args = ap.parse_args(argv)
    import kompute_dml as kdml
    from kompute_dml.onnx_backend import Backend
    from kompute_dml.runtime import encode

    for name in args.decoders.split(","):
        dec = decoders.build(name, args.size)
        prompt = np.random.default_rng(0).integers(1, decoders.VOCAB, (1, args.prompt))
        loops = {}
        for label, capacity, reuse in (("reuse", None, True), ("traces", None, False), ("no traces", 0, False)):
            # a Device each: neither finds the operators the other compiled for a new length
            device = kdml.Device()
            if args.order != "policy":
                device.engine.set_order(encode.levels if args.order == "levels" else encode.program_order)
            rep = Backend.prepare(str(dec.path), kdml_device=device)
            rep.state.step_reuse = reuse
            rep.state.cache_padding.enabled = False  # a plan per length (cache_padding.py pads them)
            if capacity is not None:
                rep.state.trace_capacity = capacity
            loops[label] = _Steps(rep, dec, prompt)
        for k in range(args.new + 1):  # the order alternates: the second finds what the first put in caches
            for loop in list(loops.values())[::1 if k % 2 else -1]:
                loop.step()
        same = len({tuple(loop.tokens) for loop in loops.values()}) == 1
        print(f"{name} ({args.size}), prompt {args.prompt}, {args.new} new tokens, medians of steps {args.skip}..{args.new}"
              f" (a new past length each); tokens equal: {same}")
        for label, loop in loops.items():
            rows = loop.rows[args.skip:]
            plan, cpu, wall = (median([r[k] for r in rows]) * 1e3 for k in range(3))
            reused, allocated = median([r[3] for r in rows]), sum(r[4] for r in loop.rows)
            print(f"  {label:10} plan {plan:7.2f} ms (planning thread CPU {cpu:7.2f} ms)   step {wall:7.2f} ms   "
                  f"nodes repeated {reused:5.0f}   plan buffers allocated {allocated:,} bytes (every step)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
