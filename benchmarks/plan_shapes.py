"""Planning of new input shapes in one process, host side: after one run at --after, each shape of
--shapes runs once (a new input signature: planned, then run) and the summary gives the median
and minimum planning time (RunStats.plan_seconds), with per shape the first run, the bytes of
device memory the plan added to the model's shared buffers, and how many host nodes the plan
found in the host-node memo (onnx_impl/host_eval.HostMemo; "-" for a tree without it). The
process's garbage collections (gc.callbacks) are summed up by generation at the end.

    PYTHONPATH=. python3 benchmarks/plan_shapes.py --model minilm --after 1x16 --shapes 1x20:100:4
    PYTHONPATH=<other tree> python3 benchmarks/plan_shapes.py ...   # the same for another tree

--shapes takes BATCHxSEQUENCE entries, or BATCHxFIRST:STOP:STEP for a range of sequence lengths.
"""

from __future__ import annotations

import argparse
import collections
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import encoder_speed


def parse(text: str) -> list[tuple[int, int]]:
    out = []
    for part in text.split(","):
        b, s = part.lower().split("x")
        if ":" in s:
            first, stop, step = (int(v) for v in s.split(":"))
            out += [(int(b), n) for n in range(first, stop, step)]
        else:
            out.append((int(b), int(s)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="minilm", choices=("bert256", "minilm"))
    ap.add_argument("--after", type=encoder_speed.parse_shapes, default=[(1, 16)])
    ap.add_argument("--shapes", type=parse, default=parse("1x20:100:4"))
    ap.add_argument("--verbose", action="store_true", help="a line per shape")
    args = ap.parse_args()
    import gc

    import kompute_dml
    from kompute_dml.onnx_backend import Backend
    from kompute_dml.onnx_impl import host_eval

    collections_ms: dict[int, list[float]] = collections.defaultdict(list)
    started: list[float] = []

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started.append(time.perf_counter())
        elif started:
            collections_ms[info["generation"]].append((time.perf_counter() - started.pop()) * 1e3)
    gc.callbacks.append(on_gc)

    hits = [0]
    memo = getattr(host_eval, "HostMemo", None)
    if memo is not None:
        real_get = memo.get

        def get(self: object, key: object) -> object:
            hit = real_get(self, key)
            hits[0] += hit is not None
            return hit
        memo.get = get

    model = encoder_speed.load_model(args.model)
    rep = Backend.prepare(str(model.path), "CPU")
    rng = np.random.default_rng(0)
    for b, s in args.after:
        rep.run(encoder_speed.bert_models.random_feeds(b, s, model.vocab, rng))
    plans = []
    for b, s in args.shapes:
        feeds = encoder_speed.bert_models.random_feeds(b, s, model.vocab, rng)
        hits[0] = 0
        t0 = time.perf_counter()
        rep.run(feeds)
        first = (time.perf_counter() - t0) * 1e3
        st = rep.last_run
        plan = rep.state.plans.get(next(reversed(rep.state.plans))) if st.planned else None
        added = plan.device_bytes if plan is not None else 0
        plans.append(st.plan_seconds * 1e3)
        if args.verbose:
            print(f"{b}x{s}: first run {first:.1f} ms, planned {st.planned}, planning {st.plan_seconds * 1e3:.2f} ms, "
                  f"added {added / 2**20:.1f} MiB, memo hits {hits[0] if memo else '-'}, "
                  f"CPU fallbacks {st.runtime_fallbacks}")
    tree = Path(kompute_dml.__file__).resolve().parent.parent
    print(f"{args.model} ({tree}): planning of {len(plans)} new shapes after {args.after}: median "
          f"{statistics.median(plans):.2f} ms, min {min(plans):.2f} ms")
    for gen in sorted(collections_ms):
        ms = collections_ms[gen]
        print(f"  garbage collections of generation {gen}: {len(ms)}, longest {max(ms):.2f} ms")
    rep.release()


if __name__ == "__main__":
    main()
