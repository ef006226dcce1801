"""Threads sharing one Device: compile, execute, record, buffer read/write and buffer release
all at once, with correct results and no deadlock (every join has a timeout); closing the
Device under running threads gives them DeviceError, never a crash."""

from __future__ import annotations

import gc
import itertools
import threading
import time
import traceback

import numpy as np
import pytest

import kompute_dml as kdml

DT = kdml.DataType
TD = kdml.TensorDesc
JOIN_TIMEOUT = 120.0


def _run_threads(target, n: int, *args) -> list[str]:
    """Start n threads on target(tid, barrier, errors, *args); fail on a hang."""
    errors: list[str] = []
    barrier = threading.Barrier(n)
    threads = [threading.Thread(target=target, args=(tid, barrier, errors, *args), daemon=True) for tid in range(n)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + JOIN_TIMEOUT
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    hung = [t.name for t in threads if t.is_alive()]
    assert not hung, f"threads did not finish within {JOIN_TIMEOUT} s (deadlock?): {hung}"
    return errors


def _guarded(fn):
    def run(tid, barrier, errors, *args):
        try:
            barrier.wait(timeout=30)
            fn(tid, *args)
        except BaseException:
            errors.append(f"thread {tid}:\n{traceback.format_exc()}")

    return run


def _identity(dev: kdml.Device, rng: np.random.Generator) -> None:
    sizes = tuple(int(s) for s in rng.integers(1, 9, int(rng.integers(1, 5))))
    x = rng.standard_normal(sizes).astype(np.float32)
    din = TD(DT.FLOAT32, sizes)
    y = dev.empty(din)
    dev.compile(kdml.ActivationIdentityDesc(din, din)).execute([dev.tensor(x)], [y])
    assert np.array_equal(y.numpy(), x)


def _recorded_chain(dev: kdml.Device, rng: np.random.Generator) -> None:
    n = int(rng.integers(1, 3000))
    dt = [DT.UINT8, DT.INT16, DT.UINT32, DT.INT64][int(rng.integers(0, 4))]
    x = rng.integers(0, 100, n).astype(dt.numpy_dtype)
    desc = TD(dt, (n,))
    explicit = TD(dt, (n,), (1,))  # explicit unit strides: the strided (non-packed) variant
    op = dev.compile(kdml.CopyDesc(explicit, desc))
    ts = [dev.tensor(x)] + [dev.empty(desc) for _ in range(3)]
    with dev.record() as rec:
        for a, b in itertools.pairwise(ts):
            rec.execute(op, [a], [b])
    assert np.array_equal(ts[-1].numpy(), x)


def _diagonal(dev: kdml.Device, rng: np.random.Generator) -> None:
    rows, cols = (int(v) for v in rng.integers(1, 40, 2))
    k = int(rng.integers(-5, 6))
    out = kdml.eye_like((rows, cols), k, device=dev)
    desc = TD(DT.INT32, (rows, cols))
    y = dev.empty(desc)
    dev.compile(kdml.DiagonalMatrixDesc(desc, k, 3.0)).execute([], [y])
    assert np.array_equal(y.numpy(), 3 * np.eye(rows, cols, k, dtype=np.int32))
    assert np.array_equal(out.numpy(), np.eye(rows, cols, k))


def _buffer_io(dev: kdml.Device, rng: np.random.Generator) -> None:
    data = rng.integers(0, 256, int(rng.integers(1, 5000)), dtype=np.uint8)
    buf = dev.buffer(data)
    off = int(rng.integers(0, data.size))
    patch = rng.integers(0, 256, data.size - off, dtype=np.uint8)
    buf.write(patch, off)
    data[off:] = patch
    assert buf.read() == data.tobytes()


WORK = [_identity, _recorded_chain, _diagonal, _buffer_io]


def test_four_threads_one_device(dev):
    iterations = 60
    done = [0] * 4

    @_guarded
    def worker(tid: int) -> None:
        rng = np.random.default_rng(1000 + tid)
        for i in range(iterations):
            WORK[(tid + i) % len(WORK)](dev, rng)
            if i % 16 == 0:
                gc.collect()  # buffer finalizers (which take the device lock) from every thread
            done[tid] += 1

    errors = _run_threads(worker, 4)
    assert not errors, "\n".join(errors)
    assert done == [iterations] * 4


def test_threads_share_one_compiled_operator_and_buffers(dev):
    """One compiled op, one input buffer, each thread its own output (same replay cache)."""
    n = 4096
    x = np.arange(n, dtype=np.float32)
    desc = TD(DT.FLOAT32, (n,))
    op = dev.compile(kdml.ActivationIdentityDesc(TD(DT.FLOAT32, (n,), (1,)), desc))
    src = dev.tensor(x)
    outs = [dev.empty(desc) for _ in range(4)]

    @_guarded
    def worker(tid: int) -> None:
        for i in range(100):
            outs[tid].buffer.write(np.zeros(n, np.float32))
            if i % 2:
                op.execute([src], [outs[tid]])
            else:
                with dev.record() as rec:
                    rec.execute(op, [src], [outs[tid]])
            assert np.array_equal(outs[tid].numpy(), x)

    errors = _run_threads(worker, 4)
    assert not errors, "\n".join(errors)


def test_close_under_running_threads():
    """Closing a Device while threads use it: each thread ends with DeviceError (the device
    has been closed), none crashes, hangs, or sees another exception."""
    d = kdml.Device()
    started = threading.Event()
    outcome: dict[int, str] = {}

    @_guarded
    def worker(tid: int) -> None:
        rng = np.random.default_rng(tid)
        try:
            for _ in range(100000):
                WORK[tid % len(WORK)](d, rng)
                started.set()
        except kdml.DeviceError as e:
            assert "closed" in str(e)
            outcome[tid] = "DeviceError"
            return
        outcome[tid] = "finished"

    errors: list[str] = []
    barrier = threading.Barrier(4)
    threads = [threading.Thread(target=worker, args=(tid, barrier, errors), daemon=True) for tid in range(4)]
    for t in threads:
        t.start()
    assert started.wait(30)
    time.sleep(0.2)
    d.close()
    for t in threads:
        t.join(JOIN_TIMEOUT)
    assert not any(t.is_alive() for t in threads), "a thread hung after close()"
    assert not errors, "\n".join(errors)
    assert sorted(outcome.values()) == ["DeviceError"] * 4
    with pytest.raises(kdml.DeviceError, match="closed"):
        d.buffer(16)


def test_device_created_in_one_thread_used_in_another():
    box: dict[str, kdml.Device] = {}
    t = threading.Thread(target=lambda: box.setdefault("dev", kdml.Device()))
    t.start()
    t.join(JOIN_TIMEOUT)
    d = box["dev"]
    try:
        _identity(d, np.random.default_rng(0))
    finally:
        closer = threading.Thread(target=d.close)
        closer.start()
        closer.join(JOIN_TIMEOUT)
    with pytest.raises(kdml.DeviceError):
        _identity(d, np.random.default_rng(0))
