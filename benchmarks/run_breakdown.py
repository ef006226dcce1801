"""Where a steady run of an encoder's whole-graph plan spends its wall time: filling the
input host memory, the program (one submission and its wait), and copying the outputs into
the caller's arrays, and the rest (the run's Python, with the GIL held); against onnxruntime's
run of the same feeds in the same process. Since kp patch level 15 a replayed run copies outputs
below staging.PARALLEL_BYTES inside the program's wait (transfers.early_copies): they count in
program.run then, and "output copies" holds the larger ones only.

    python -m benchmarks.run_breakdown --model bert256 --shape 8x128 --repeat 200
"""

from __future__ import annotations

import argparse

import numpy as np

from kompute_dml.bench import encoder_speed
from kompute_dml.bench.timing import clocked, median, percentile, series
from kompute_dml.onnx_backend import Backend, device_graph
from kompute_dml.runtime import staging


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="bert256", choices=("bert256", "minilm"))
    ap.add_argument("--shape", type=encoder_speed.parse_shapes, default=[(8, 128)])
    ap.add_argument("--repeat", type=int, default=200)
    args = ap.parse_args()
    import onnx
    import onnxruntime as ort

    model = encoder_speed.load_model(args.model)
    rep = Backend.prepare(onnx.load(str(model.path)), "CPU")
    sess = ort.InferenceSession(str(model.path), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    for batch, seq in args.shape:
        feeds = encoder_speed.bert_models.random_feeds(batch, seq, model.vocab, rng)
        rep.run(feeds)
        plan = next(reversed(rep.state.plans.values()))  # the plan of this signature: the most recent
        assert plan is not None, rep.state.plan_refusal
        parts: dict[str, list[float]] = {}
        run_program, copy_now = plan.program.run, device_graph.host_copy
        default_parallel = staging.PARALLEL_BYTES
        for mode, parallel in (("", default_parallel), (" (copies on 4 threads)", 0)):
            staging.PARALLEL_BYTES = parallel
            total, whole, prog, copies = (parts.setdefault(k + mode, []) for k in
                                          ("rep.run", "GraphPlan.run", "program.run", "output copies"))
            plan_run = type(plan).run
            plan.program.run = clocked(run_program, prog.append)
            device_graph.host_copy = clocked(copy_now, lambda s, c=copies: c.__setitem__(-1, c[-1] + s))
            plan.run = clocked(lambda f, st, *more, p=plan, run=plan_run: run(p, f, st, *more), whole.append)

            def run(copies: list[float] = copies, feeds: dict = feeds) -> None:
                copies.append(0.0)
                rep.run(feeds)

            total += series(run, args.repeat)  # ours, then onnxruntime: its threads spin after each run
        plan.program.run, device_graph.host_copy, staging.PARALLEL_BYTES = run_program, copy_now, default_parallel
        del plan.run
        parts["onnxruntime"] = series(lambda f=feeds: sess.run(None, f), args.repeat)
        print(f"{args.model} {batch}x{seq}: medians of {args.repeat} (us); {plan.dispatches} dispatches")
        for name, xs in parts.items():
            print(f"  {name:<40} {1e6 * median(xs):9.1f}   p10 {1e6 * percentile(xs, 10):9.1f}")
        host = [t - p - c for t, p, c in zip(parts["rep.run"], parts["program.run"], parts["output copies"])]
        print(f"  {'host Python (rep.run less the program and the copies)':<40} {1e6 * median(host):9.1f}")
        ratio = median(parts["onnxruntime"]) / median(parts["rep.run"])
        print(f"  onnxruntime / ours: {ratio:.2f}x")


if __name__ == "__main__":
    main()
