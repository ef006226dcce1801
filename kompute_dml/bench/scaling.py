"""Throughput over every GPU of a host (issue 55): one prepared model per Vulkan device, run back
to back from one thread per device, then from one process per device, against one device alone.

    python -m kompute_dml.bench.scaling [--model bert256] [--shapes 8x128,64x256] [--seconds 5] [--devices all] [--pin]

Per shape: sequences per second for 1 GPU (one thread), N GPUs from N threads, N GPUs from N
processes, and each as a multiple of one GPU (efficiency = that / N); then every GPU alone, and
the N-GPU figures as a fraction of those added up (GPUs of one host differ: the first GPU's figure
times N is not what N GPUs can do without contention). `--pin`: every worker (thread or process)
runs on the CPUs local to its GPU (its NUMA node: nvidia-smi's PCI address, then sysfs), set
before its device is made, so the device's own threads inherit it. Every worker first runs
back to back for kompute_dml.bench.gpu_clock.WARM_SECONDS plus 1 s (the GPU clock governor
raises the clock only under sustained work), then all start together (a barrier; processes wait
for a shared start time) and count runs for --seconds, and the CPU time of the calling thread per
run (host work that contends between threads: the GIL, the host copies; the wait spins, so it
is about the run's wall time while the spin lasts). The SM clock of every NVIDIA GPU is read
mid-way through each counted window (nvidia-smi) where the tool exists.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

MODELS = {"bert256": (256, 3, 4), "minilm-shape": (384, 6, 12)}


def local_cpus(index: int) -> set[int] | None:
    """The CPUs local to Vulkan device `index` (its PCI device's NUMA node), found through
    nvidia-smi (the Vulkan UUID is CUDA's) and sysfs; None where either is missing."""
    import kompute_dml as kdml

    uuid = next((d["uuid"] for d in kdml.list_devices() if d["index"] == index), None)
    tool = shutil.which("nvidia-smi")
    if uuid is None or tool is None:
        return None
    out = subprocess.run([tool, "--query-gpu=uuid,pci.bus_id", "--format=csv,noheader"], capture_output=True,
                         text=True).stdout
    for line in out.splitlines():
        gpu_uuid, bus = (x.strip() for x in line.split(","))
        if gpu_uuid.replace("GPU-", "").replace("-", "").lower() == uuid:
            domain, rest = bus.lower().split(":", 1)
            path = f"/sys/bus/pci/devices/{domain[-4:]}:{rest}/local_cpulist"
            if not os.path.exists(path):
                return None
            cpus: set[int] = set()
            for part in Path(path).read_text().strip().split(","):
                a, _, b = part.partition("-")
                cpus.update(range(int(a), int(b or a) + 1))
            return cpus
    return None


def _worker(model: str, index: int, batch: int, seq: int, pin: bool = False) -> tuple:
    """The prepared model on Vulkan device `index` and its feeds (`pin`: the calling thread
    first moved to the device's local CPUs, local_cpus)."""
    from kompute_dml.onnx_backend import Backend

    cpus = local_cpus(index) if pin else None
    if cpus:
        os.sched_setaffinity(0, cpus)  # the calling thread (Linux), and the threads it starts

    from .bert_models import build_random_bert, random_feeds

    rep = Backend.prepare(str(build_random_bert(*MODELS[model])), f"VULKAN:{index}")
    feeds = random_feeds(batch, seq, 1000, np.random.default_rng(index))
    return rep, feeds


def _count(rep, feeds, start: float, seconds: float) -> tuple[int, float]:
    """Runs in `seconds` after the common start, and the calling thread's CPU seconds per run
    (its host work: a run's Python, copies and submission, and any spinning in the wait)."""
    from .gpu_clock import WARM_SECONDS, hold

    hold(lambda: rep.run(feeds), WARM_SECONDS + 1.0)
    while time.time() < start:
        hold(lambda: rep.run(feeds), 0.05)  # stay warm until the common start
    c0 = time.thread_time()
    runs = hold(lambda: rep.run(feeds), seconds)
    return runs, (time.thread_time() - c0) / runs


class _ClockAt(threading.Thread):
    """The SM clocks (sm_clocks) read at one moment: mid-way through a counted window, while
    every GPU works (read after it, they show the idle clock)."""

    def __init__(self, when: float) -> None:
        super().__init__(daemon=True)
        self.when, self.clocks = when, "n/a"
        self.start()

    def run(self) -> None:
        time.sleep(max(0.0, self.when - time.time()))
        self.clocks = sm_clocks()

    def read(self) -> str:
        self.join()
        return self.clocks


def threads(model: str, devices: list[int], batch: int, seq: int, seconds: float,
            pin: bool = False) -> tuple[float, float, str]:
    """Sequences per second from one thread per device (each preparing its own model), the
    threads' mean CPU us per run, and the SM clocks mid-way."""
    from .bert_models import build_random_bert

    build_random_bert(*MODELS[model])  # written once, before the threads read it
    counts: list[tuple[int, float]] = [(0, 0.0)] * len(devices)
    start = time.time() + 10.0 + 2 * len(devices)
    clock = _ClockAt(start + seconds / 2)

    def go(k: int) -> None:
        counts[k] = _count(*_worker(model, devices[k], batch, seq, pin), start, seconds)

    ts = [threading.Thread(target=go, args=(k,)) for k in range(len(devices))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return sum(c for c, _ in counts) * batch / seconds, sum(u for _, u in counts) / len(counts) * 1e6, clock.read()


def processes(model: str, devices: list[int], batch: int, seq: int, seconds: float,
              pin: bool = False) -> tuple[float, float, str]:
    """Sequences per second from one process per device, the processes' mean CPU us per run,
    and the SM clocks mid-way."""
    start = time.time() + 30.0  # every child has prepared and warmed by then
    clock = _ClockAt(start + seconds / 2)
    procs = [subprocess.Popen([sys.executable, "-m", "kompute_dml.bench.scaling", "--child", str(i), "--model", model,
                               "--shapes", f"{batch}x{seq}", "--seconds", str(seconds), "--start", str(start)] + (["--pin"] if pin else []),
                              stdout=subprocess.PIPE, text=True) for i in devices]
    counts = [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in procs]
    return (sum(c["runs"] for c in counts) * batch / seconds, sum(c["cpu"] for c in counts) / len(counts) * 1e6,
            clock.read())


def sm_clocks() -> str:
    tool = shutil.which("nvidia-smi")
    if tool is None:
        return "n/a"
    out = subprocess.run([tool, "--query-gpu=clocks.sm", "--format=csv,noheader,nounits"], capture_output=True,
                         text=True).stdout
    return "/".join(x.strip() for x in out.splitlines()) + " MHz"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="bert256", choices=sorted(MODELS))
    ap.add_argument("--shapes", default="8x128,64x256")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--devices", default="all", help="comma-separated Vulkan indices, or all")
    ap.add_argument("--pin", action="store_true", help="run each worker on its GPU's local CPUs (NUMA node)")
    ap.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--start", type=float, default=0.0, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child is not None:
        b, s = map(int, args.shapes.split("x"))
        rep, feeds = _worker(args.model, args.child, b, s, args.pin)
        runs, cpu = _count(rep, feeds, args.start, args.seconds)
        print(json.dumps({"runs": runs, "cpu": cpu}), flush=True)
        return 0
    import kompute_dml as kdml

    found = [d["index"] for d in kdml.list_devices()]
    devices = found if args.devices == "all" else [int(i) for i in args.devices.split(",")]
    names = {d["index"]: d["name"] for d in kdml.list_devices()}
    print(f"devices: {', '.join(f'{i} {names[i]}' for i in devices)}; model {args.model}; {args.seconds} s per figure")
    print("| batch x seq | 1 GPU seq/s | N threads seq/s | x 1 GPU | N processes seq/s | x 1 GPU | N | each GPU alone "
          "seq/s | threads / sum alone | processes / sum alone | host CPU us per run: 1 GPU / threads / processes "
          "| SM clocks mid-way: 1 GPU; threads; processes |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for shape in args.shapes.split(","):
        b, s = map(int, shape.split("x"))
        one, cpu1, clk1 = threads(args.model, devices[:1], b, s, args.seconds, args.pin)
        many, cpu_t, clk_t = threads(args.model, devices, b, s, args.seconds, args.pin)
        procs, cpu_p, clk_p = processes(args.model, devices, b, s, args.seconds, args.pin)
        alone = [one] + [threads(args.model, [i], b, s, args.seconds, args.pin)[0] for i in devices[1:]]
        total = sum(alone)
        print(f"| {shape} | {one:.0f} | {many:.0f} | {many / one:.2f} | {procs:.0f} | {procs / one:.2f} | "
              f"{len(devices)} | {' / '.join(f'{a:.0f}' for a in alone)} | {many / total:.3f} | {procs / total:.3f} | "
              f"{cpu1:.0f} / {cpu_t:.0f} / {cpu_p:.0f} | {clk1}; {clk_t}; {clk_p} |", flush=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    raise SystemExit(main())
