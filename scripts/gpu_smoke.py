"""Quick facts of the default device: capabilities, policy, cooperative-matrix shapes and the
eager / recorded latency of a small identity (median of many). Run on any device:
    python3 scripts/gpu_smoke.py"""

from __future__ import annotations

import statistics
import time

import numpy as np

import kompute_dml as kdml


def main() -> None:
    d = kdml.Device()
    print("device:", d.name, d.device_type)
    print("capabilities:", ", ".join(sorted(d.capabilities)) or "none")
    print("policy:", d.policy.describe())
    print("cooperative matrix shapes (M,N,K,A,B,C,R,sat,scope):", d.cooperative_matrix_shapes)
    x = d.tensor(np.arange(64 * 64, dtype=np.float32).reshape(64, 64))
    y = d.empty(x.desc)
    op = d.compile(kdml.ActivationIdentityDesc(x.desc, x.desc))
    for _ in range(50):
        op.execute([x], [y])
    eager = []
    for _ in range(2000):
        t = time.perf_counter()
        op.execute([x], [y])
        eager.append(time.perf_counter() - t)
    assert np.array_equal(y.numpy(), x.numpy())
    per_op = []
    n = 100
    for _ in range(30):
        t = time.perf_counter()
        with d.record() as rec:
            for _ in range(n):
                rec.execute(op, [x], [y])
        per_op.append((time.perf_counter() - t) / n)
    print(f"eager 64x64 identity: median {statistics.median(eager) * 1e6:.1f} us, "
          f"p10 {np.percentile(eager, 10) * 1e6:.1f} us")
    print(f"recorded, {n} per submission: median {statistics.median(per_op) * 1e6:.2f} us per op")
    d.close()


if __name__ == "__main__":
    main()
