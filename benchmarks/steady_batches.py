#!/usr/bin/env python3
"""Steady runs of an encoder over time: batches of runs separated by pauses, each batch's median
beside the GPU's SM clock (nvidia-smi, sampled in the background where it exists).

    KDML_MINILM_DIR=... PYTHONPATH=. python3 benchmarks/steady_batches.py [--model minilm] [--shapes 1x16,8x128]

Shows whether slow steady runs come from the runtime or from the GPU's own clock governor: on
the H100 the SM clock fell to 345-780 MHz during 8x128 batches with 0.5 s pauses (RESULTS.md).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import encoder_speed

from kompute_dml.onnx_backend import Backend


def sample_clocks(stop: threading.Event, out: list[tuple[float, str]], t0: float) -> None:
    """(seconds since t0, 'pstate, SM clock, utilization') every 0.2 s until stop is set."""
    while not stop.is_set():
        r = subprocess.run(["nvidia-smi", "--query-gpu=pstate,clocks.sm,utilization.gpu", "--format=csv,noheader"],
                           capture_output=True, text=True, check=False)
        out.append((time.perf_counter() - t0, r.stdout.strip()))
        time.sleep(0.2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="minilm", choices=encoder_speed.MODELS)
    ap.add_argument("--shapes", type=encoder_speed.parse_shapes, default=encoder_speed.parse_shapes("1x16,8x128"))
    ap.add_argument("--batches", type=int, default=6)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--pause", type=float, default=0.5)
    args = ap.parse_args()
    t0 = time.perf_counter()
    clocks: list[tuple[float, str]] = []
    stop = threading.Event()
    if shutil.which("nvidia-smi"):
        threading.Thread(target=sample_clocks, args=(stop, clocks, t0), daemon=True).start()
    model = encoder_speed.load_model(args.model)
    rep = Backend.prepare(str(model.path), "CPU")
    rng = np.random.default_rng(0)
    for b, s in args.shapes:
        feeds = encoder_speed.bert_models.random_feeds(b, s, model.vocab, rng)
        t = time.perf_counter()
        rep.run(feeds)
        print(f"{b}x{s} first run {(time.perf_counter() - t) * 1e3:.1f} ms at {time.perf_counter() - t0:.2f} s")
        for batch in range(args.batches):
            start = time.perf_counter() - t0
            times = []
            for _ in range(args.runs):
                t = time.perf_counter()
                rep.run(feeds)
                times.append((time.perf_counter() - t) * 1e3)
            end = time.perf_counter() - t0
            seen = sorted({c for at, c in clocks if start <= at <= end})
            print(f"  batch {batch}: median {statistics.median(times):.2f} ms ({start:.2f}-{end:.2f} s)"
                  + (f"; GPU {' | '.join(seen)}" if seen else ""))
            time.sleep(args.pause)
    stop.set()


if __name__ == "__main__":
    main()
