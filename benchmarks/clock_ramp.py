"""Steady runs right after a long host pause, against the GPU's clock: why a process that has
just compiled its pipelines ran MiniLM 3x slower (benchmarks/RESULTS.md, "the H100's clock").

    PYTHONPATH=. python3 benchmarks/clock_ramp.py [--model minilm] [--shape 8x128] [--runs 30]

In this one process: Backend.prepare and one run at 1 x 5, then the shape's first run (where
the pipeline cache is cold, seconds of compiling with the GPU idle), then `--runs` runs back
to back (median, and the SM clock after them), the same runs under Device.profile (device time
per shader variant), then runs back to back for kompute_dml.bench.gpu_clock.WARM_SECONDS and
`--runs` more. The SM clock (nvidia-smi, where found) is sampled every 100 ms throughout, and
its samples in each phase are summed up. Run it with `KDML_CACHE_DIR` an empty directory and
`__GL_SHADER_DISK_CACHE=0` for a cold process, and again with the cache filled for a warm one.
`--torch` (bert256, where torch has CUDA): then the same for torch float16 eager, after
`--idle` seconds with the GPU idle: runs right after the pause, and after the warm-up.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import encoder_speed

from kompute_dml.bench import gpu_clock


class ClockLog:
    """nvidia-smi sampling the SM clock every 100 ms in the background (nothing without it)."""

    def __init__(self) -> None:
        tool = shutil.which("nvidia-smi")
        self.proc = None if tool is None else subprocess.Popen(
            [tool, "--query-gpu=clocks.sm", "--format=csv,noheader,nounits", "-lms", "100"],
            stdout=subprocess.PIPE, text=True)
        self.marks: list[tuple[str, float]] = []

    def mark(self, phase: str) -> None:
        self.marks.append((phase, time.perf_counter()))

    def phases(self) -> dict[str, list[int]]:
        """MHz samples per phase, samples placed in time by their count (100 ms apart)."""
        if self.proc is None:
            return {}
        self.proc.terminate()
        out = self.proc.communicate()[0]
        samples = [int(v) for v in out.split() if v.isdigit()]
        t0, per = self.marks[0][1], defaultdict(list)
        for i, mhz in enumerate(samples):
            t = t0 + 0.1 * i
            phase = [p for p, at in self.marks if at <= t]
            per[phase[-1] if phase else self.marks[0][0]].append(mhz)
        return per


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="minilm", choices=encoder_speed.MODELS)
    ap.add_argument("--shape", type=encoder_speed.parse_shapes, default=encoder_speed.parse_shapes("8x128"))
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--torch", action="store_true", help="also torch float16 eager (bert256 only)")
    ap.add_argument("--idle", type=float, default=3.0, help="seconds idle before torch's runs")
    args = ap.parse_args()
    (b, s), = args.shape
    from kompute_dml.onnx_backend import Backend

    model = encoder_speed.load_model(args.model)
    log = ClockLog()
    log.mark("prepare")
    rep = Backend.prepare(str(model.path), "CPU")
    rep.run(encoder_speed.bert_models.random_feeds(1, 5, model.vocab, np.random.default_rng(0)))
    feeds = encoder_speed.bert_models.random_feeds(b, s, model.vocab, np.random.default_rng([0, b, s]))

    def timed(n: int) -> float:
        ts = []
        for _ in range(n):
            t0 = time.perf_counter()
            rep.run(feeds)
            ts.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(ts)

    log.mark("first run")
    created = rep.device.stats()["pipelines_created"]
    t0 = time.perf_counter()
    rep.run(feeds)
    first = (time.perf_counter() - t0) * 1e3
    print(f"{args.model} {b}x{s}: first run {first:.0f} ms ({rep.device.stats()['pipelines_created'] - created} "
          "pipelines created)", flush=True)
    log.mark("runs after it")
    print(f"  {args.runs} runs right after it: median {timed(args.runs):.2f} ms", flush=True)
    log.mark("profiled run")
    with rep.device.profile() as p:
        rep.run(feeds)
    by_variant: dict[str, float] = defaultdict(float)
    for r in p.rows:
        by_variant[r.variant] += r.microseconds
    top = sorted(by_variant.items(), key=lambda kv: -kv[1])[:6]
    print(f"  device time {p.total_us() / 1e3:.2f} ms in {len(p.rows)} dispatches; slowest variants: "
          + ", ".join(f"{v} {us:.0f} us" for v, us in top), flush=True)
    log.mark(f"{gpu_clock.WARM_SECONDS:g} s back to back")
    calls = gpu_clock.hold(lambda: rep.run(feeds))
    log.mark("runs after the warm-up")
    print(f"  {calls} runs in {gpu_clock.WARM_SECONDS:g} s, then {args.runs} runs: median {timed(args.runs):.2f} ms",
          flush=True)
    if args.torch:
        runner = encoder_speed.TorchRunner(model)
        if runner.module is None:
            print(f"  torch: {runner.note}")
        else:
            torch, dev = runner.torch, {k: runner.torch.from_numpy(v).cuda() for k, v in feeds.items()}

            def torch_run() -> None:
                with torch.inference_mode():
                    runner.module(input_ids=dev["input_ids"], attention_mask=dev["attention_mask"])
                torch.cuda.synchronize()

            def torch_timed(n: int) -> float:
                ts = []
                for _ in range(n):
                    t0 = time.perf_counter()
                    torch_run()
                    ts.append((time.perf_counter() - t0) * 1e3)
                return statistics.median(ts)

            torch_run()
            log.mark(f"{args.idle:g} s idle")
            time.sleep(args.idle)
            log.mark("torch runs after the pause")
            right_after = torch_timed(args.runs)
            log.mark("torch warm-up")
            gpu_clock.hold(torch_run)
            log.mark("torch runs after the warm-up")
            print(f"  torch float16: {args.runs} runs after {args.idle:g} s idle: median {right_after:.2f} ms; "
                  f"after {gpu_clock.WARM_SECONDS:g} s back to back: {torch_timed(args.runs):.2f} ms", flush=True)
    log.mark("end")
    for phase, mhz in log.phases().items():
        print(f"  SM clock during {phase}: {min(mhz)}-{max(mhz)} MHz, median {statistics.median(mhz):.0f} "
              f"({len(mhz)} samples)")
    rep.release()


if __name__ == "__main__":
    main()
