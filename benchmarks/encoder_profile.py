"""Device time per node type of an encoder run through the ONNX backend (Device.profile: one
timestamp per dispatch of the run's one submission), beside the run's wall time.

    python -m benchmarks.encoder_profile [--model minilm|bert256] [--shape 8x128] [--top 20]
    python -m benchmarks.encoder_profile --family whisper-encoder [--size small] [--shape 8x128]

`minilm` is kompute_dml.bench.minilm's fused model (KDML_MINILM_DIR names a bundle); `bert256`
the random BERT of kompute_dml.bench.encoder_speed; `--family` one of kompute_dml.bench.families'
models (random weights, built and cached on first use; the shape's tokens are its sequence length
where the family has one).
"""

from __future__ import annotations

import argparse
import collections
from typing import Any

import numpy as np

from kompute_dml.bench import encoder_speed, gpu_clock
from kompute_dml.bench.timing import median, once, series
from kompute_dml.onnx_backend import Backend


def node_costs(rows: Any) -> dict[str, list[float]]:
    """A profile's rows (Device.profile) summed per "node type -> operator": [microseconds, dispatches]."""
    by_op: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0])
    for r in rows:
        node_type = r.scope.split(" ")[1] if " " in r.scope else r.scope
        by_op[f"{node_type} -> {r.operator}"][0] += r.microseconds
        by_op[f"{node_type} -> {r.operator}"][1] += 1
    return by_op


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="minilm", choices=encoder_speed.MODELS)
    ap.add_argument("--shape", type=encoder_speed.parse_shapes, default=encoder_speed.parse_shapes("8x128"))
    ap.add_argument("--top", type=int, default=20)
    ap.add_argument("--dispatches", type=int, default=0, metavar="N",
                    help="also print the N slowest dispatches (node, variant, grid, us)")
    ap.add_argument("--host", type=int, default=0, metavar="N",
                    help="also run N times under cProfile and print the host functions taking the most time")
    ap.add_argument("--plan-after", type=encoder_speed.parse_shapes, default=None, metavar="SHAPE",
                    help="run SHAPE first, then profile the host side of --shape's first run (its planning)")
    ap.add_argument("--family", default=None, help="a model of kompute_dml.bench.families instead of --model")
    ap.add_argument("--size", default="small", help="the family's size (with --family)")
    args = ap.parse_args()
    if args.family and args.plan_after:
        ap.error("--plan-after takes --model's random feeds, not --family's")
    (batch, seq), = args.shape
    rng = np.random.default_rng(0)
    if args.family:
        from kompute_dml.bench import families

        rep = Backend.prepare(str(families.build(args.family, args.size)), "CPU")
        feeds = families.feeds(args.family, batch, seq, rng, args.size)
        args.model = args.family
    else:
        model = encoder_speed.load_model(args.model)
        rep = Backend.prepare(str(model.path), "CPU")
        feeds = encoder_speed.bert_models.random_feeds(batch, seq, model.vocab, rng)
    if args.plan_after:
        import cProfile
        import pstats
        (b0, s0), = args.plan_after
        rep.run(encoder_speed.bert_models.random_feeds(b0, s0, model.vocab, rng))
        prof = cProfile.Profile()
        took = once(lambda: prof.runcall(rep.run, feeds))
        st = rep.last_run
        print(f"first run of {batch}x{seq} after {b0}x{s0}: {took * 1e3:.1f} ms under cProfile, "
              f"planning {st.plan_seconds * 1e3:.1f} ms; device {rep.device.stats()}")
        pstats.Stats(prof).sort_stats("tottime").print_stats(args.top)
    # the first run (its plan and, on a cold cache, its pipelines: 6 s for Whisper's float16 encoder
    # on the H100) apart, then the GPU's clock up for WARM_SECONDS of runs: on an idle H100 a profile
    # without the hold read that encoder at 21 ms a run, where benchmarks.model_families (which holds
    # it) reads 8.8
    first = once(lambda: rep.run(feeds))
    gpu_clock.hold(lambda: rep.run(feeds), gpu_clock.WARM_SECONDS)
    walls = series(lambda: rep.run(feeds), 10, warmup=3)
    with rep.device.profile() as p:
        rep.run(feeds)
    by_op = node_costs(p.rows)
    total = p.total_us()
    print(f"{args.model} {batch}x{seq}: wall median {median(walls) * 1e3:.2f} ms over 10 runs; "
          f"device time {total / 1e3:.2f} ms in {len(p.rows)} dispatches (profiled: one timestamp each); "
          f"first run {first * 1e3:.0f} ms")
    print(f"{'node -> operator':<58} {'us':>9} {'share':>6} {'dispatches':>10}")
    for name, (us, n) in sorted(by_op.items(), key=lambda kv: -kv[1][0])[:args.top]:
        print(f"{name[:58]:<58} {us:>9.1f} {us / total:>6.1%} {n:>10}")
    variants: dict[str, float] = collections.defaultdict(float)
    for r in p.rows:
        variants[r.variant] += r.microseconds
    print("slowest variants: " + ", ".join(f"{v} {us:.0f} us" for v, us in sorted(variants.items(),
                                                                                 key=lambda kv: -kv[1])[:8]))
    if args.dispatches:
        print(f"{'node':<40} {'variant':<28} {'grid':<16} {'us':>7}")
        for r in sorted(p.rows, key=lambda r: -r.microseconds)[:args.dispatches]:
            print(f"{r.scope[:40]:<40} {r.variant[:28]:<28} {r.grid!s:<16} {r.microseconds:>7.1f}")
    st = rep.last_run
    print(f"last run: vulkan {st.vulkan_seconds * 1e3:.3f} ms, host {st.host_seconds * 1e3:.3f} ms, "
          f"{st.submissions} submission(s), {st.uploads} upload(s), {st.downloads} download(s)")
    if args.host:
        import cProfile
        import pstats
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(args.host):
            rep.run(feeds)
        prof.disable()
        print(f"host profile of {args.host} runs (tottime, top {args.top}):")
        pstats.Stats(prof).sort_stats("tottime").print_stats(args.top)


if __name__ == "__main__":
    main()
