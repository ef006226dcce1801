"""Asynchronous submission (execute(wait=False), Recording.submit(wait=False),
Device.synchronize) and per-dispatch device time (Device.profile): issue 25, item 3."""

from __future__ import annotations

import gc
import time

import numpy as np
import pytest

import kompute_dml as kdml

DT = kdml.DataType


def _mm(dev: kdml.Device, rng: np.random.Generator, m: int = 16, k: int = 32, n: int = 8):
    f32 = kdml.TensorDesc(DT.FLOAT32, (1, 1, 1, 1))
    desc = kdml.MatrixMultiplyIntegerToFloatDesc(
        kdml.TensorDesc(DT.INT8, (1, 1, m, k)), f32, None, kdml.TensorDesc(DT.INT8, (1, 1, k, n)), f32, None, None,
        kdml.TensorDesc(DT.FLOAT32, (1, 1, m, n)),
    )
    a = rng.integers(-128, 128, (1, 1, m, k), dtype=np.int8)
    b = rng.integers(-128, 128, (1, 1, k, n), dtype=np.int8)
    s = dev.tensor(np.array([[[[0.5]]]], np.float32))
    ins = [dev.tensor(a), s, None, dev.tensor(b), s, None, None]
    out = dev.empty(kdml.TensorDesc(DT.FLOAT32, (1, 1, m, n)))
    expected = ((a.astype(np.int64) @ b.astype(np.int64)) * 0.25).astype(np.float32)
    return dev.compile(desc), ins, out, expected


def test_execute_without_waiting(dev, rng):
    op, ins, out, expected = _mm(dev, rng)
    sub = op.execute(ins, [out], wait=False)
    assert sub is not None
    sub.wait()
    assert sub.done()
    np.testing.assert_array_equal(out.numpy(), expected)
    assert op.execute(ins, [out]) is None  # waiting is the default, and returns nothing


def test_reading_waits_for_the_work_that_writes(dev, rng):
    op, ins, out, expected = _mm(dev, rng, 64, 256, 64)
    out.buffer.write(np.full(out.desc.byte_size, 0xFF, np.uint8))
    sub = op.execute(ins, [out], wait=False)
    np.testing.assert_array_equal(out.numpy(), expected)  # no wait() first
    assert sub.done()


def test_the_same_submission_twice_and_a_dependent_chain(dev, rng):
    op, ins, out, expected = _mm(dev, rng)
    first = op.execute(ins, [out], wait=False)
    second = op.execute(ins, [out], wait=False)  # the same cached kp sequence: the first is waited for
    assert first.done()
    second.wait()
    # out -> y -> z through identity operators, each submitted without waiting
    desc = out.desc
    ident = dev.compile(kdml.ActivationIdentityDesc(desc, desc))
    y, z = dev.empty(desc), dev.empty(desc)
    subs = [ident.execute([out], [y], wait=False), ident.execute([y], [z], wait=False)]
    dev.synchronize()
    assert all(s.done() for s in subs)
    np.testing.assert_array_equal(z.numpy(), expected)


def test_recording_without_waiting(dev, rng):
    op, ins, out, expected = _mm(dev, rng)
    y = dev.empty(out.desc)
    ident = dev.compile(kdml.ActivationIdentityDesc(out.desc, out.desc))
    with dev.record() as rec:
        rec.execute(op, ins, [out])
        rec.execute(ident, [out], [y])
        sub = rec.submit(wait=False)
    deadline = time.monotonic() + 30
    while not sub.done() and time.monotonic() < deadline:
        time.sleep(0.001)
    assert sub.done()
    sub.wait()
    np.testing.assert_array_equal(y.numpy(), expected)


def test_buffers_dropped_while_in_flight(dev, rng):
    op, ins, out, _ = _mm(dev, rng, 32, 512, 32)
    op.execute(ins, [out], wait=False)
    del ins, out
    gc.collect()  # their memory is released only once the submission finished
    assert len(dev.engine.inflight) == 0  # the release waited for it
    op2, ins2, out2, expected2 = _mm(dev, rng)
    op2.execute(ins2, [out2])
    np.testing.assert_array_equal(out2.numpy(), expected2)


def test_profile_rows(dev, rng):
    op, ins, out, expected = _mm(dev, rng)
    with dev.profile() as p:
        with p.scope("first"):
            op.execute(ins, [out])
        op.execute(ins, [out], wait=False)  # profiled work runs at once
        with pytest.raises(kdml.DMLError, match="already open"), dev.profile():
            pass
    np.testing.assert_array_equal(out.numpy(), expected)
    assert [r.scope for r in p.rows] == ["first", ""]
    for r in p.rows:
        assert r.operator == "MATRIX_MULTIPLY_INTEGER_TO_FLOAT"
        assert r.variant and r.grid is not None and all(g >= 1 for g in r.grid)
        assert r.microseconds >= 0
    assert "MATRIX_MULTIPLY_INTEGER_TO_FLOAT" in str(p)
    assert p.table(by="scope")[0]["dispatches"] == 1
    op.execute(ins, [out])  # after the profile: the cached submission again
    np.testing.assert_array_equal(out.numpy(), expected)
