"""What memory costs to allocate on the device: Engine.allocate (device memory, unzeroed) of 1 to
192 MiB four times each, twelve 16 MiB buffers at once, and Device.host_array (pinned, host-visible
memory) of 1 and 8 MiB three times each; milliseconds per call, each freed before the next. Then
what an allocation made later (on kp's thread) holds up while it is made: a small operator call
(a submission and its wait) and a small synchronous allocation, beside the same when idle.
Last, what each request of a burst costs the caller: the 13 sizes of a MiniLM 64 x 256 plan's new
buffers requested back to back (Engine.allocate, later), then the same through kp's
kdml_storage_later alone, three rounds, each freed before the next.

    PYTHONPATH=. python3 benchmarks/alloc_cost.py
"""

from __future__ import annotations

import gc
import time

import numpy as np

import kompute_dml as kdml


def _ms(fn: object) -> float:
    t0 = time.perf_counter()
    kept = fn()  # type: ignore[operator]
    elapsed = (time.perf_counter() - t0) * 1e3
    del kept
    gc.collect()
    return elapsed


def _plain_ms(fn: object) -> float:
    t0 = time.perf_counter()
    fn()  # type: ignore[operator]
    return (time.perf_counter() - t0) * 1e3


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
    small = dev.tensor(np.zeros(4, np.float32))
    call = [_ms(lambda: kdml.add(small, small)) for _ in range(6)]
    alloc = [_ms(lambda: engine.allocate(64, zeroed=False)) for _ in range(3)]
    print(f"idle: small call {' '.join(f'{x:.2f}' for x in call)} ms, small allocation "
          f"{' '.join(f'{x:.2f}' for x in alloc)} ms")
    for mib in (24, 96, 192):
        for _ in range(2):
            t0 = time.perf_counter()
            making = engine.allocate(mib << 18, zeroed=False, later=True)
            call = [_plain_ms(lambda: kdml.add(small, small)) for _ in range(4)]
            other = _plain_ms(lambda: engine.allocate(64, zeroed=False))
            making.tensor  # noqa: B018  (waits for it)
            made = (time.perf_counter() - t0) * 1e3
            del making
            gc.collect()
            print(f"{mib} MiB made later ({made:.2f} ms until made); meanwhile small calls "
                  f"{' '.join(f'{x:.2f}' for x in call)} ms, then a small allocation {other:.2f} ms")
    burst(engine)
    dev.close()


# MiB of the buffers a MiniLM 64 x 256 plan adds after a 1 x 16 one (first_run_trace.py: 13 requests)
BURST_MIB = (24, 96, 192, 24, 24, 6, 6, 1, 1, 4, 4, 12, 48)


def burst(engine: object) -> None:
    mgr = engine.manager  # type: ignore[attr-defined]
    kept: list[object] = []
    for rnd in range(3):
        outer = [_plain_ms(lambda n=mib: kept.append(engine.allocate(n << 18, zeroed=False, later=True)))  # type: ignore[attr-defined]
                 for mib in BURST_MIB]
        t0 = time.perf_counter()
        while engine.allocating():  # type: ignore[attr-defined]
            time.sleep(0.0002)
        made = (time.perf_counter() - t0) * 1e3
        kept.clear()
        gc.collect()
        raw = [_plain_ms(lambda n=mib: kept.append(mgr.kdml_storage_later(n << 18))) for mib in BURST_MIB]
        for pending in kept:
            pending.get()  # type: ignore[attr-defined]
        kept.clear()
        gc.collect()
        print(f"burst {rnd}: allocate(later) {sum(outer):.2f} ms [{' '.join(f'{x:.2f}' for x in outer)}], all made "
              f"{made:.1f} ms after the last request; kdml_storage_later alone {sum(raw):.2f} ms "
              f"[{' '.join(f'{x:.2f}' for x in raw)}]")


if __name__ == "__main__":
    main()
