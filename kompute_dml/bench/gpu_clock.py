"""The GPU's clock around a timing: keep a GPU busy until its clock governor has raised the
clock, and read the clock where the driver's tool can.

Why: the H100 lowers its SM clock (to 345 MHz from 1980) while a Vulkan process keeps it idle
for seconds of host work, and short runs with host gaps between them do not raise it again
(benchmarks/clock_ramp.py at 16a7ab2; benchmarks/history/README.md, "the GPU's clock after a host pause"): right
after compiling its pipelines, MiniLM 8x128 ran 30 runs at 5.36 ms each (345 MHz), every shader
about 3.7x slower, against 1.44 ms in a process that read them from disk; after two seconds of
runs back to back, 1.46 ms. A count of warm-up runs does not fix that; a warm-up of a fixed time
does, for every engine timed on the GPU alike.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable

WARM_SECONDS = 2.0  # enough in every clock_ramp.py run (benchmarks/history/README.md)


def hold(fn: Callable[[], object], seconds: float = WARM_SECONDS) -> int:
    """Call `fn` back to back for `seconds` (at least once); returns how many calls ran."""
    calls, end = 0, time.perf_counter() + seconds
    while calls == 0 or time.perf_counter() < end:
        fn()
        calls += 1
    return calls


def sm_clock_mhz() -> int | None:
    """The first NVIDIA GPU's current SM clock in MHz (nvidia-smi), or None where there is no
    nvidia-smi or it fails. About 50 ms of host time: call it outside timed regions."""
    tool = shutil.which("nvidia-smi")
    if tool is None:
        return None
    try:
        out = subprocess.run([tool, "--query-gpu=clocks.sm", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10, check=True).stdout
        return int(out.split()[0])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None
