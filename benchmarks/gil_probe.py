"""How much of a steady `rep.run` holds the GIL: the per-run host time (the run's wall time less
the time spent in the kp call that submits the program and waits for it) and the share of a run
during which another Python thread gets the GIL (a probe thread counting loop turns, against its
rate while nothing runs). Two threads on two devices scale only as far as the GIL lets them.

    python -m benchmarks.gil_probe --model bert256 --shape 1x16 --runs 20
"""

from __future__ import annotations

import argparse
import threading
import time
from typing import Any

import numpy as np

from kompute_dml.bench import encoder_speed
from kompute_dml.bench.timing import median
from kompute_dml.onnx_backend import Backend
from kompute_dml.runtime import replay as replay_module


class _Probe:
    """A thread turning a Python loop: its turns and its longest pause between two turns (a
    pause as long as a device wait: the waiting thread held the GIL)."""

    def __init__(self) -> None:
        self.turns = 0
        self.longest = 0.0
        self.stop = False
        self.thread = threading.Thread(target=self._spin, daemon=True)
        self.thread.start()

    def _spin(self) -> None:
        clock = time.perf_counter
        last = clock()
        while not self.stop:
            now = clock()
            if now - last > self.longest:
                self.longest = now - last
            last = now
            self.turns += 1

    def window(self, during: Any) -> tuple[float, float]:
        """(turns per second, longest pause in seconds) while `during()` runs."""
        self.longest = 0.0
        t0, n0 = time.perf_counter(), self.turns
        during()
        return (self.turns - n0) / (time.perf_counter() - t0), self.longest


# How the program's submission is completed: the old path (one kp call, GIL held while it
# waits) against the current one (runtime/replay.complete)
# (the old path leaves the outputs' copies to after the wait: GraphPlan.run copies them there)
MODES = {"kdml_run (GIL held)": lambda seq, copies=None: seq.kdml_run(),
         "kdml_submit + kdml_wait": replay_module.complete}


def _measure(rep: Any, feeds: dict[str, Any], runs: int, complete: Any) -> dict[str, float]:
    walls: list[float] = []
    waits: list[float] = []

    def timed(seq: Any, copies: Any = None) -> None:
        t0 = time.perf_counter()
        complete(seq, copies)
        waits[-1] += time.perf_counter() - t0

    replay_module.complete = timed
    try:
        for _ in range(runs):
            waits.append(0.0)
            t0 = time.perf_counter()
            rep.run(feeds)
            walls.append(time.perf_counter() - t0)
        replay_module.complete = complete
        probe = _Probe()
        idle_rate, idle_pause = probe.window(lambda: time.sleep(0.3))
        rate, pause = probe.window(lambda: [rep.run(feeds) for _ in range(runs)])
        probe.stop = True
        probe.thread.join()
    finally:
        replay_module.complete = MODES["kdml_submit + kdml_wait"]
    return {"run": median(walls), "wait": median(waits), "host": median([w - c for w, c in zip(walls, waits)]),
            "rate": rate / idle_rate, "pause": pause, "idle_pause": idle_pause}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="bert256", choices=("bert256", "minilm"))
    ap.add_argument("--shape", type=encoder_speed.parse_shapes, action="append")
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=2, help="rounds of both modes, interleaved")
    args = ap.parse_args()
    import onnx

    model = encoder_speed.load_model(args.model)
    rep = Backend.prepare(onnx.load(str(model.path)), "CPU")
    rng = np.random.default_rng(0)
    print(f"{args.model} on {rep.device.name}: medians of {args.runs} runs per round, {args.rounds} rounds; "
          "host = run - the completing kp call; probe: another thread's Python turns (% of its rate while "
          "the main thread sleeps) and its longest pause")
    for shapes in args.shape or [[(1, 16)]]:
        for batch, seq in shapes:
            feeds = encoder_speed.bert_models.random_feeds(batch, seq, model.vocab, rng)
            for _ in range(3):
                rep.run(feeds)
            rows: dict[str, list[dict[str, float]]] = {m: [] for m in MODES}
            for _ in range(args.rounds):
                for name, complete in MODES.items():
                    rows[name].append(_measure(rep, feeds, args.runs, complete))
            for name, rs in rows.items():
                def m(k: str, rs: list[dict[str, float]] = rs) -> float:
                    return median([r[k] for r in rs])
                print(f"  {batch}x{seq} {name:<24} run {1e6 * m('run'):10.1f} us  completing call "
                      f"{1e6 * m('wait'):10.1f} us  host {1e6 * m('host'):7.1f} us  probe {100 * m('rate'):5.1f}%, "
                      f"longest pause {1e3 * m('pause'):7.1f} ms (idle {1e3 * m('idle_pause'):5.1f} ms)")


if __name__ == "__main__":
    main()
