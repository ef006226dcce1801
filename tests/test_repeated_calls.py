"""What a repeated call and a first execution build (never how long they take):

- kdml.matmul_integer_to_float called again with the same argument objects goes straight to
  its bound operator (kompute_dml/functional/recent_calls.py): no descriptor set, kp sequence, pipeline
  or buffer is made, and every result is still exact; arguments that differ from a cached
  call (new scales, another shape, a bad `out`, a changed numpy array) take the full path
  and its checks; an entry leaves with the tensors it watched.
- a first execution runs in the engine's shared sequence and a submission records its own
  kp sequence at its second run (kompute_dml/runtime/replay.py); KDML_FIRST_RUN=own records
  it at once.
"""

from __future__ import annotations

import gc
import math

import numpy as np
import pytest
from helpers import identity_op

import kompute_dml as kdml
from kompute_dml.core.dtypes import DataType as DT
from kompute_dml.core.tensor_desc import TensorDesc as TD
from kompute_dml.functional import matmul_integer as functional_matmul

BUILT = ("programs", "pipelines_created", "descriptor_sets", "recorded_sequences", "sequences_created",
         "first_runs", "live_buffers", "pooled_buffers", "allocated_bytes")


def _built(dev: kdml.Device) -> dict[str, int]:
    stats = dev.stats()
    return {k: stats[k] for k in BUILT}


def _reference(a8: np.ndarray, b8: np.ndarray, s1: float, s2: float) -> np.ndarray:
    """MatMulIntegerToFloat's result: the exact int64 product times the two float32 scales,
    rounded once per product to float32 like the operator (product * (s1 * s2) in float32)."""
    prod = a8.astype(np.int64) @ b8.astype(np.int64)
    scale = np.float32(s1) * np.float32(s2)
    return (prod.astype(np.float64) * np.float64(scale)).astype(np.float32)


@pytest.fixture
def operands(dev, rng):
    a8 = rng.integers(-128, 128, (16, 32), dtype=np.int8)
    b8 = rng.integers(-128, 128, (32, 8), dtype=np.int8)
    return a8, b8, dev.tensor(a8), dev.tensor(b8)


def test_repeated_call_builds_nothing_and_skips_the_argument_handling(dev, operands, monkeypatch):
    a8, b8, a, b = operands
    s1, s2 = dev.tensor(np.array([0.5], np.float32)), dev.tensor(np.array([0.25], np.float32))
    want = _reference(a8, b8, 0.5, 0.25)
    for _ in range(2):  # the first run (shared sequence), the second (its own sequence)
        np.testing.assert_array_equal(kdml.matmul_integer_to_float(a, b, s1, s2).numpy(), want)
    gc.collect()
    before = _built(dev)
    prepared = []
    monkeypatch.setattr(functional_matmul, "_prepare", lambda *a, **k: prepared.append(1))
    monkeypatch.setattr(functional_matmul, "device_of", lambda *a, **k: prepared.append(1))
    out = kdml.matmul_integer_to_float(a, b, s1, s2)
    for _ in range(5):
        out.buffer.write(np.full(out.nbytes, 0xFF, np.uint8))  # NaNs: the next call's output buffer
        del out
        out = kdml.matmul_integer_to_float(a, b, s1, s2)
        np.testing.assert_array_equal(out.numpy(), want)
    del out
    assert prepared == []
    assert _built(dev) == before


def test_python_float_scales_give_their_own_results(dev, operands):
    """The same float object again, a new one of the same value, other values (ints, NaN)
    and back: each call's result is that call's scales' (the operator writes +0 for a zero
    product, so -0.0 and 0.0 give the same result)."""
    a8, b8, a, b = operands
    half = 0.5
    for s1 in (half, half, float("0.5"), 0.75, math.ldexp(3, -3), 2, 0.0, -0.0, float("nan"), half):
        for _ in range(2):
            got = kdml.matmul_integer_to_float(a, b, s1, 0.25).numpy()
            np.testing.assert_array_equal(got, _reference(a8, b8, s1, 0.25))


def test_numpy_scales_are_read_at_every_call(dev, operands):
    a8, b8, a, b = operands
    s = np.array([0.5], np.float32)
    np.testing.assert_array_equal(kdml.matmul_integer_to_float(a, b, s, 0.25).numpy(), _reference(a8, b8, 0.5, 0.25))
    s[0] = 2.0  # the same array object, a new value
    np.testing.assert_array_equal(kdml.matmul_integer_to_float(a, b, s, 0.25).numpy(), _reference(a8, b8, 2.0, 0.25))


def test_arguments_that_differ_from_a_cached_call_are_checked(dev, operands, rng):
    a8, b8, a, b = operands
    for _ in range(2):
        kdml.matmul_integer_to_float(a, b, 0.5, 0.25)
    bad_b = dev.tensor(rng.integers(-128, 128, (31, 8), dtype=np.int8))
    with pytest.raises(kdml.InvalidArgumentError, match="^b"):
        kdml.matmul_integer_to_float(a, bad_b, 0.5, 0.25)
    with pytest.raises(kdml.InvalidArgumentError, match="^out"):
        kdml.matmul_integer_to_float(a, b, 0.5, 0.25, out=dev.empty(TD(DT.FLOAT32, (16, 9))))
    with pytest.raises(kdml.InvalidArgumentError, match="a_scale"):
        kdml.matmul_integer_to_float(a, b, np.ones(3, np.float32), 0.25)
    other = kdml.Device()
    try:
        with pytest.raises(kdml.InvalidArgumentError, match="another Device"):
            kdml.matmul_integer_to_float(a, b, 0.5, 0.25, out=other.empty(TD(DT.FLOAT32, (16, 8))))
    finally:
        other.close()
    # the cached call itself, with `out` given twice (its bound output is cached too)
    out = dev.empty(TD(DT.FLOAT32, (16, 8)))
    for _ in range(2):
        out.write_numpy(np.full((16, 8), np.nan, np.float32))
        assert kdml.matmul_integer_to_float(a, b, 0.5, 0.25, out=out) is out
        np.testing.assert_array_equal(out.numpy(), _reference(a8, b8, 0.5, 0.25))


def test_a_cached_call_on_a_closed_device_raises(rng):
    d = kdml.Device()
    a8 = rng.integers(-128, 128, (8, 8), dtype=np.int8)
    a = d.tensor(a8)
    for _ in range(2):
        kdml.matmul_integer_to_float(a, a, 0.5, 0.5)
    d.close()
    with pytest.raises(kdml.DeviceError):
        kdml.matmul_integer_to_float(a, a, 0.5, 0.5)


def test_entries_leave_with_their_tensors(dev, operands):
    """A cached call keeps none of its tensors (nor their buffers) alive."""
    _a8, _b8, a, b = operands
    s = dev.tensor(np.array([0.5], np.float32))
    kdml.matmul_integer_to_float(a, b, s, 0.25)
    gc.collect()
    n = len(functional_matmul._ready)
    live = dev.stats()["live_buffers"]
    del s
    assert len(functional_matmul._ready) == n - 1
    assert dev.stats()["live_buffers"] == live - 1


def test_first_run_is_shared_and_the_second_records_its_own(dev, rng):
    op, desc = identity_op(dev, (16, 16))
    x = dev.tensor(rng.standard_normal(desc.sizes).astype(np.float32))
    ys = [dev.empty(desc) for _ in range(3)]
    for y in ys:  # new buffers every time: no kp sequence made
        before = _built(dev)
        op.execute([x], [y])
        after = _built(dev)
        assert (after["first_runs"], after["sequences_created"]) == (before["first_runs"] + 1, before["sequences_created"])
        np.testing.assert_array_equal(y.numpy(), x.numpy())
    y = ys[0]
    for k in range(3):  # the second run records the submission's own sequence, the third replays it
        y.write_numpy(np.full(desc.sizes, np.nan, np.float32))
        before = _built(dev)
        op.execute([x], [y])
        after = _built(dev)
        assert after["sequences_created"] == before["sequences_created"] + (k == 0)
        assert after["first_runs"] == before["first_runs"]
        np.testing.assert_array_equal(y.numpy(), x.numpy())


def test_first_run_without_waiting_takes_its_own_sequence(dev, rng):
    op, desc = identity_op(dev, (16, 16))
    x = dev.tensor(rng.standard_normal(desc.sizes).astype(np.float32))
    y = dev.empty(desc)
    before = _built(dev)
    op.execute([x], [y], wait=False).wait()
    after = _built(dev)
    assert (after["first_runs"], after["sequences_created"]) == (before["first_runs"], before["sequences_created"] + 1)
    np.testing.assert_array_equal(y.numpy(), x.numpy())


def test_first_run_own_by_policy(monkeypatch, rng):
    monkeypatch.setenv("KDML_FIRST_RUN", "own")
    d = kdml.Device()
    try:
        assert d.policy.describe()["first_run"] == "own"
        op, desc = identity_op(d, (8, 8))
        x = d.tensor(rng.standard_normal(desc.sizes).astype(np.float32))
        y = d.empty(desc)
        op.execute([x], [y])
        assert (d.stats()["first_runs"], d.stats()["sequences_created"]) == (0, 1)
        np.testing.assert_array_equal(y.numpy(), x.numpy())
    finally:
        d.close()
    monkeypatch.setenv("KDML_FIRST_RUN", "sometimes")
    with pytest.raises(kdml.InvalidArgumentError, match="KDML_FIRST_RUN"):
        kdml.Device()


def test_binding_descs_compare_by_layout(dev, rng):
    """A bound desc with the compiled layout written another way (explicit packed strides)
    binds; one with the same sizes and type but other strides is refused."""
    op, desc = identity_op(dev, (4, 6))
    x = dev.tensor(rng.standard_normal(desc.sizes).astype(np.float32))
    buf = dev.buffer(4 * 4 * 12)
    op.execute([kdml.Tensor(x.buffer, TD(DT.FLOAT32, (4, 6), (6, 1)))], [kdml.Tensor(buf, desc)])
    np.testing.assert_array_equal(np.frombuffer(buf.read(0, 96), np.float32).reshape(4, 6), x.numpy())
    with pytest.raises(kdml.InvalidArgumentError, match="input_tensor"):
        op.execute([kdml.Tensor(buf, TD(DT.FLOAT32, (4, 6), (12, 2)))], [kdml.Tensor(dev.buffer(96), desc)])


def test_repeated_identity_builds_nothing_and_reads_its_input_every_time(dev, rng, monkeypatch):
    """kdml.identity on the same Tensor again (recent_calls.py) copies what the tensor holds
    now; a numpy input is uploaded at every call, so a changed array gives its new values."""
    from kompute_dml.ops import identity as functional  # the identity helper and its recent calls

    x = dev.tensor(rng.standard_normal((8, 8)).astype(np.float32))
    for _ in range(2):
        kdml.identity(x)
    gc.collect()
    before = _built(dev)
    calls = []
    monkeypatch.setattr(functional, "device_of", lambda *a, **k: calls.append(1))
    for _ in range(3):
        new = rng.standard_normal((8, 8)).astype(np.float32)
        x.write_numpy(new)
        np.testing.assert_array_equal(kdml.identity(x).numpy(), new)
    assert calls == [] and _built(dev) == before
    monkeypatch.undo()
    arr = rng.standard_normal((8, 8)).astype(np.float32)
    for _ in range(2):
        np.testing.assert_array_equal(kdml.identity(arr, device=dev).numpy(), arr)
        arr += 1


def test_a_capture_keeps_no_identity_entry(rng):
    """Calls captured into a recording (an ONNX plan: new tensors on every call) add no entry to the
    helpers' identity caches (an entry cost ~10 us and could never be hit again), and the captured
    calls still compute the exact result once the recording is submitted."""
    from kompute_dml.ops import identity as functional  # the identity helper and its recent calls

    with kdml.Device() as dev:
        a8 = rng.integers(0, 256, (4, 8), dtype=np.uint8)
        b8 = rng.integers(-128, 128, (8, 3), dtype=np.int8)
        a, b = dev.tensor(a8), dev.tensor(b8)
        s1, s2 = dev.tensor(np.array([0.5], np.float32)), dev.tensor(np.array([0.25], np.float32))
        before = len(functional_matmul._ready), len(functional._unary_calls)
        with dev.capture() as rec:
            y = kdml.matmul_integer_to_float(a, b, s1, s2, device=dev)
            z = kdml.identity(y, device=dev)
        assert (len(functional_matmul._ready), len(functional._unary_calls)) == before
        rec.submit()
        assert np.array_equal(z.numpy(), _reference(a8, b8, 0.5, 0.25))
        kdml.matmul_integer_to_float(a, b, s1, s2, device=dev)  # eager: remembered as before
        assert len(functional_matmul._ready) == before[0] + 1
