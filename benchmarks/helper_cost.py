"""What a functional helper call costs on top of its operator: `kdml.matmul_integer_to_float`
at 64^3 (int8, device scales and Python-float scales) against `op.execute` of the same
compiled operator on the same tensors, repeated (steady), interleaved in rounds.

    PYTHONPATH=. python3 benchmarks/helper_cost.py [--rounds 30] [--calls 100]

Prints the median us per call of each, with the device's work (kp's submission and wait),
and then with every cached kp submission replaced by a no-op: the host's Python alone
(this reaches into the engine's replay cache on purpose: it is a measurement of it).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np

import kompute_dml as kdml


def _rounds(fns: dict[str, Callable[[], object]], rounds: int, calls: int) -> dict[str, float]:
    samples: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            samples[name].append((time.perf_counter() - t0) / calls * 1e6)
    return {k: statistics.median(v) for k, v in samples.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--calls", type=int, default=100, help="calls per round and function")
    args = ap.parse_args()
    dev = kdml.Device()
    rng = np.random.default_rng(0)
    dt = kdml.DataType
    a = dev.tensor(rng.integers(-128, 128, (64, 64), dtype=np.int8))
    b = dev.tensor(rng.integers(-128, 128, (64, 64), dtype=np.int8))
    s1, s2 = dev.tensor(np.array([0.5], np.float32)), dev.tensor(np.array([0.25], np.float32))
    i8, one = kdml.TensorDesc(dt.INT8, (64, 64)), kdml.TensorDesc(dt.FLOAT32, (1, 1), (0, 0))
    op = dev.compile(kdml.MatrixMultiplyIntegerToFloatDesc(i8, one, None, i8, one, None, None,
                                                           kdml.TensorDesc(dt.FLOAT32, (64, 64))))
    ins = [a, kdml.Tensor(s1.buffer, one), None, b, kdml.Tensor(s2.buffer, one), None, None]
    outs = [dev.empty(kdml.TensorDesc(dt.FLOAT32, (64, 64)))]
    fns: dict[str, Callable[[], object]] = {
        "op.execute": lambda: op.execute(ins, outs),
        "helper, device scales": lambda: kdml.matmul_integer_to_float(a, b, s1, s2),
        "helper, Python-float scales": lambda: kdml.matmul_integer_to_float(a, b, 0.5, 0.25),
    }
    want = (a.numpy().astype(np.int64) @ b.numpy().astype(np.int64) * 0.125).astype(np.float32)
    for fn in fns.values():
        for _ in range(3):  # first run, the submission's own sequence, a replay
            fn()
    for name in ("helper, device scales", "helper, Python-float scales"):
        np.testing.assert_array_equal(fns[name]().numpy(), want)  # type: ignore[attr-defined]
    with_device = _rounds(fns, args.rounds, args.calls)
    replays = dev.engine._replays  # type: ignore[attr-defined]
    kept = {key: r.run for key, r in replays.items() if r.run is not None}
    for key in kept:
        replays[key].run = lambda: None
    try:
        host = _rounds(fns, args.rounds, args.calls)
    finally:
        for key, run in kept.items():
            replays[key].run = run
    print(f"device {dev.name}; median us per call over {args.rounds} rounds of {args.calls}")
    for name in fns:
        extra = "" if name == "op.execute" else (f"  (host {host[name] - host['op.execute']:+.2f} "
                                                 f"over op.execute)")
        print(f"{name:28s} {with_device[name]:9.2f}   host only {host[name]:7.2f}{extra}")
    dev.close()


if __name__ == "__main__":
    main()
