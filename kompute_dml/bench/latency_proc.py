"""The bench's latency section, each side in a Python process of its own.

    python -m kompute_dml.bench.latency_proc ours [--device N] [--reps R]
    python -m kompute_dml.bench.latency_proc torch|cupy [--torch-device cuda] [--reps R]

prints one JSON object: harness.latency's figures for `ours`, the peer's GpuPeer.latency for a
peer. `kompute-dml bench` runs one process per side (`measure`) because two APIs' contexts on one
GPU slow each other's submissions, and so does what the bench's own process holds. On the H100,
2026-11-22 (benchmarks/history/README.md): the eager identity 15.9 / 16.3 us in `python -m benchmarks.latency`,
18.1 / 18.3 us with `--cuda-context`; inside `kompute-dml bench --gpu on --only zz-no-row` (no
rows; torch and CuPy loaded) 25.7 us, and torch's copy_ + synchronize 24.2 us there, against
16.6-18.9 us (`latency_proc ours`, four processes) and 14.8-15.2 us (`latency_proc torch`, two
runs) each in a process of its own. A program that runs small operators is such a process.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from typing import Any

TIMEOUT_S = 600


def measure(side: str, reps: int, device: int = 0, torch_device: str = "cuda") -> dict[str, Any]:
    """The figures of `side` ('ours' or a peer's name) from a fresh process; RuntimeError with
    the process's last output where it failed."""
    cmd = [sys.executable, "-m", __name__, side, "--reps", str(reps), "--device", str(device),
           "--torch-device", torch_device]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise RuntimeError(f"latency of {side} (exit {proc.returncode}): {' | '.join(tail)}")
    return dict(json.loads(lines[-1]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kompute_dml.bench.latency_proc", description=__doc__.splitlines()[0])
    ap.add_argument("side", help="'ours', or a GPU peer: torch, cupy")
    ap.add_argument("--reps", type=int, default=25)
    ap.add_argument("--device", type=int, default=0, help="our Vulkan device")
    ap.add_argument("--torch-device", default="cuda")
    args = ap.parse_args(argv)
    if args.side == "ours":
        import kompute_dml as kdml

        from .harness import latency

        dev = kdml.Device(args.device)
        try:
            figures = latency(kdml, dev, args.reps)
        finally:
            dev.close()
    else:
        from .gpu_peers import load_peers

        peers, skipped = load_peers([args.side], args.torch_device)
        if not peers:
            raise SystemExit(f"{args.side}: {skipped.get(args.side, 'not a GPU peer')}")
        figures = peers[0].latency(args.reps)  # type: ignore[attr-defined]
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
