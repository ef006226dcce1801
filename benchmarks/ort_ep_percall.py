"""The plugin EP's per-call cost over the backend (issue 54: at most 20 us): a tiny 4-node model
(benchmarks/ort_ep.py's) through `Backend.run`, an unchanged InferenceSession with the EP and
onnxruntime's CPU provider, each timed in a tight loop of its own (ort_ep.py interleaves the three,
which keeps onnxruntime's spinning worker threads beside ours), twice; medians and 10th percentiles
of the wall time and of the calling thread's CPU time (time.thread_time: on a software Vulkan
device such as lavapipe, whose work runs on threads of its own, the wall time is mostly that
device's, the thread's CPU time the host work the EP adds). A wait polls before it blocks, and
the poll counts as the thread's CPU time: KDML_WAIT_SPIN_US=0 leaves only the host work.

    python -m benchmarks.ort_ep_percall [--calls 3000] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time

import numpy as np

from benchmarks.ort_ep import _tiny, contenders


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=3000)
    ap.add_argument("--profile", action="store_true", help="also the host time by function (cProfile) of each")
    args = ap.parse_args()
    runs = contenders(_tiny())
    x = {"x": np.ones((4, 8), np.float32)}
    for label in ("backend", "ep", "ort_cpu", "backend", "ep"):
        f = runs[label]
        for _ in range(300):  # warm
            f(x)
        ts, cs = [], []
        for _ in range(args.calls):
            c, t = time.thread_time(), time.perf_counter()
            f(x)
            ts.append(time.perf_counter() - t)
            cs.append(time.thread_time() - c)
        print(f"{label:8s} median {np.median(ts) * 1e6:7.1f} us  p10 {np.percentile(ts, 10) * 1e6:7.1f}"
              f"  | thread cpu median {np.median(cs) * 1e6:7.1f} us  p10 {np.percentile(cs, 10) * 1e6:7.1f}", flush=True)
    if args.profile:
        for label in ("backend", "ep"):
            pr = cProfile.Profile()
            pr.enable()
            for _ in range(2000):
                runs[label](x)
            pr.disable()
            print("==", label)
            pstats.Stats(pr).sort_stats("tottime").print_stats(12)


if __name__ == "__main__":
    main()
