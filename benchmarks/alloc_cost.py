"""What memory costs to allocate on the device: Engine.allocate (device memory, unzeroed) of 1 to
192 MiB four times each, twelve 16 MiB buffers at once, and Device.host_array (pinned, host-visible
memory) of 1 and 8 MiB three times each; milliseconds per call, each freed before the next.

    PYTHONPATH=. python3 benchmarks/alloc_cost.py
"""

from __future__ import annotations

import gc
import time

import kompute_dml as kdml


def _ms(fn: object) -> float:
    t0 = time.perf_counter()
    kept = fn()  # type: ignore[operator]
    elapsed = (time.perf_counter() - t0) * 1e3
    del kept
    gc.collect()
    return elapsed


def main() -> None:
    dev = kdml.Device()
    engine = dev.engine
    for mib in (1, 4, 16, 64, 192):
        ts = [_ms(lambda n=mib: engine.allocate(n << 18, zeroed=False)) for _ in range(4)]
        print(f"allocate {mib:4d} MiB unzeroed: {' '.join(f'{x:.2f}' for x in ts)} ms")
    ts = [_ms(lambda: [engine.allocate(16 << 18, zeroed=False) for _ in range(12)]) for _ in range(4)]
    print("12 x 16 MiB:", " ".join(f"{x:.2f}" for x in ts))
    for mib in (1, 8):
        ts = [_ms(lambda n=mib: dev.host_array(n << 20)) for _ in range(3)]
        print(f"host_array {mib} MiB: {' '.join(f'{x:.2f}' for x in ts)} ms")
    dev.close()


if __name__ == "__main__":
    main()
