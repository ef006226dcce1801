"""Soak: 10,000 executions, each on freshly allocated tensors, then 10,000 replays on the
same tensors. Process RSS and the Device's bookkeeping (Device.stats(): live buffers,
allocated bytes, recorded sequences and the descriptor sets they hold) must stay bounded.

The soak runs in a child process of its own, without the Vulkan validation layer: its
synchronization validation keeps a history that grows by about 15 KB per submission
(measured with layer 1.3.239, no message logged), which would drown what this test
measures. Every code path the soak takes is run under validation by the other suites.
The figures are printed (docs/reliability.md quotes them):

    .venv/bin/python -m pytest -q -s tests/test_soak.py
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

import kompute_dml as kdml

DT = kdml.DataType
TD = kdml.TensorDesc
EXECUTIONS = 10_000
WARMUP = 1_000
MB = 1_000_000


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


@pytest.mark.slow
def test_soak_fresh_tensors_stay_flat():
    env = {k: v for k, v in os.environ.items() if k not in ("VK_INSTANCE_LAYERS", "VK_LAYER_SETTINGS_PATH")}
    proc = subprocess.run([sys.executable, __file__], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"soak process failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr[-4000:]}"
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    fresh, replay = r["fresh"], r["replay"]
    print(
        f"\nsoak: {fresh['n']} executions on fresh tensors in {fresh['seconds']:.1f} s "
        f"({1000 * fresh['seconds'] / fresh['n']:.2f} ms each); RSS {fresh['rss_warm'] / MB:.1f} MB after "
        f"{WARMUP} -> {fresh['rss_end'] / MB:.1f} MB (+{fresh['growth'] / MB:.2f} MB, "
        f"{fresh['growth'] / (fresh['n'] - WARMUP):.0f} bytes per execution); peak stats {fresh['peak']}; "
        f"end stats {fresh['end']}"
        f"\nsoak: {replay['n']} replays on the same tensors in {replay['seconds']:.1f} s "
        f"({1000 * replay['seconds'] / replay['n']:.3f} ms each); RSS +{replay['growth'] / MB:.2f} MB; "
        f"stats {replay['end']}"
    )
    assert fresh["peak"]["live_buffers"] <= 16
    assert fresh["peak"]["recorded_sequences"] <= 256
    # only what the compiled operators hold is left: the device's own 16-byte dummy buffer, and
    # the constants of operators whose outputs depend on their descriptor alone, where the policy
    # keeps one (the GPU's: eye's)
    base = fresh["compiled"]
    assert base["live_buffers"] in (1, 2) and base["allocated_bytes"] >= 32
    assert fresh["end"]["live_buffers"] == base["live_buffers"]
    assert fresh["end"]["allocated_bytes"] == base["allocated_bytes"]
    assert fresh["growth"] < 50 * MB
    assert replay["end"]["live_buffers"] == base["live_buffers"] + 2 and replay["growth"] < 10 * MB


def _soak(dev: kdml.Device) -> dict:
    rng = np.random.default_rng(7)
    f32 = TD(DT.FLOAT32, (16, 33))
    i8_in = TD(DT.INT8, (40, 30), (1, 40))  # a transpose: the strided sub-word path
    i8_out = TD(DT.INT8, (40, 30))
    d16 = TD(DT.FLOAT16, (2, 24, 24))
    x32 = rng.standard_normal((16, 33)).astype(np.float32)
    x8 = rng.integers(-128, 128, (30, 40), dtype=np.int8)
    x16 = rng.standard_normal((2, 24, 24)).astype(np.float16)
    identity = dev.compile(kdml.ActivationIdentityDesc(f32, f32))
    copy8 = dev.compile(kdml.CopyDesc(i8_in, i8_out))
    tril = dev.compile(kdml.DiagonalMatrix1Desc(d16, d16, DT.FLOAT16, 0.0, 1, 2**31 - 1))
    eye = dev.compile(kdml.DiagonalMatrixDesc(TD(DT.INT32, (24, 24)), -2, 5.0))
    compiled = dev.stats()  # the dummy buffer and the operators' constants (ops/diagonal_constant.py)
    want_tril = np.tril(x16)
    want_eye = 5 * np.eye(24, 24, -2, dtype=np.int32)

    peak = {"live_buffers": 0, "recorded_sequences": 0, "allocated_bytes": 0}

    def observe(i: int) -> None:  # while the step's tensors are alive
        if i % 100 < 10:
            s = dev.stats()
            for k in peak:
                peak[k] = max(peak[k], s[k])

    def step(i: int, check: bool) -> None:
        # 70 % packed identity, 10 % each: strided sub-word copy, DIAGONAL_MATRIX1 with an
        # input, a recording of three dependent dispatches (new pipelines for new buffers
        # cost lavapipe an LLVM compile each, ~10 ms for the bigger shaders)
        kind = max(0, i % 10 - 6)
        if kind == 0:
            a, b = dev.tensor(x32), dev.empty(f32)
            identity.execute([a], [b])
            observe(i)
            assert not check or np.array_equal(b.numpy(), x32)
        elif kind == 1:
            a = kdml.Tensor(dev.tensor(x8).buffer, i8_in)
            b = dev.empty(i8_out)
            copy8.execute([a], [b])
            observe(i)
            assert not check or np.array_equal(b.numpy(), x8.T)
        elif kind == 2:
            a, b = dev.tensor(x16), dev.empty(d16)
            tril.execute([a], [b])
            observe(i)
            assert not check or np.array_equal(b.numpy(), want_tril)
        else:  # two dependent dispatches in one submission
            a, b, c = dev.empty(TD(DT.INT32, (24, 24))), dev.empty(f32), dev.empty(f32)
            t = dev.tensor(x32)
            with dev.record() as rec:
                rec.execute(eye, [], [a])
                rec.execute(identity, [t], [b])
                rec.execute(identity, [b], [c])
            observe(i)
            assert not check or (np.array_equal(a.numpy(), want_eye) and np.array_equal(c.numpy(), x32))

    t0 = time.perf_counter()
    rss_warm = 0
    for i in range(EXECUTIONS):
        step(i, check=i % 20 < 10)
        if i == WARMUP:
            gc.collect()
            rss_warm = _rss()
    gc.collect()
    elapsed = time.perf_counter() - t0
    rss_end = _rss()
    fresh = {"n": EXECUTIONS, "seconds": elapsed, "rss_warm": rss_warm, "rss_end": rss_end,
             "growth": rss_end - rss_warm, "peak": peak, "end": dev.stats(), "compiled": compiled}

    # Phase 2: the same tensors again and again (the replay path).
    a, b = dev.tensor(x32), dev.empty(f32)
    identity.execute([a], [b])
    gc.collect()
    rss0 = _rss()
    t0 = time.perf_counter()
    for _ in range(EXECUTIONS):
        identity.execute([a], [b])
    elapsed = time.perf_counter() - t0
    assert np.array_equal(b.numpy(), x32)
    replay = {"n": EXECUTIONS, "seconds": elapsed, "growth": _rss() - rss0, "end": dev.stats()}
    return {"fresh": fresh, "replay": replay}


if __name__ == "__main__":
    device = kdml.Device()
    try:
        print(json.dumps(_soak(device)))
    finally:
        device.close()
