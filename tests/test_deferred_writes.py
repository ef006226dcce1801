"""Writes into new buffers and a model's constants wait for the next submission and go up
together (runtime/deferred_writes.py): every byte arrives before anything reads it, in order with
the writes that follow, across the staging slots, and at synchronize / close."""

from __future__ import annotations

import numpy as np
import pytest

import kompute_dml as kdml
from kompute_dml.runtime import staging

DT = kdml.DataType


def _identity(dev: kdml.Device, src: kdml.Buffer, out: kdml.Buffer) -> bytes:
    """The bytes an operator reads from `src` (copied to `out`, made before `src`: a new buffer's
    fill is a submission, which would send the writes before it)."""
    desc = kdml.TensorDesc(DT.FLOAT32, (src.nbytes // 4,))
    dev.compile(kdml.ActivationIdentityDesc(desc, desc)).execute([kdml.Tensor(src, desc)], [kdml.Tensor(out, desc)])
    return out.read()


def test_new_buffers_go_up_in_one_submission(dev, rng, monkeypatch):
    """Twenty new tensors made from host data cost no transfer of their own: their bytes go up
    in one submission, made when the first read needs them, and every value arrives."""
    deferred = dev.engine.staging.deferred
    dev.synchronize()
    uploads = []
    real = staging.Staging.upload
    monkeypatch.setattr(staging.Staging, "upload", lambda self, *a: uploads.append(1) or real(self, *a))
    before = deferred.submissions
    arrays = [rng.standard_normal(int(rng.integers(1, 300))).astype(np.float32) for _ in range(20)]
    tensors = [dev.tensor(a) for a in arrays]
    assert uploads == [] and deferred.submissions == before
    for t, a in zip(tensors, arrays):
        np.testing.assert_array_equal(t.numpy(), a)
    assert deferred.submissions == before + 1 and uploads == []


def test_an_operator_reads_the_deferred_bytes(dev, rng):
    """An execution right after the writes (no read between) sees them: the copies go first."""
    data = [rng.standard_normal(int(rng.integers(1, 5000))).astype(np.float32).view(np.uint8) for _ in range(6)]
    outs = [dev.buffer(d.size) for d in data]
    pending = dev.engine.staging.deferred.regions
    bufs = [dev.buffer(d) for d in data]
    assert len(pending) == len(bufs)
    for b, d, out in zip(bufs, data, outs):
        assert _identity(dev, b, out) == d.tobytes()


@pytest.mark.parametrize("sizes", [(4096, 4096, 4096), (1, 4095, 2, 8191, 12289, 3, 4096 * 5 + 7)])
def test_deferred_writes_wrap_the_slots(rng, monkeypatch, sizes):
    """Slots of 4,096 bytes: writes larger than a slot and writes that fill slots exactly go in
    parts over both slots, each slot refilled only after its copies completed; every byte arrives."""
    monkeypatch.setattr(staging, "CHUNK_BYTES", 4096)
    dev = kdml.Device()  # (its slots made at that size)
    data = [rng.integers(0, 256, n, dtype=np.uint8) for n in sizes]
    bufs = [dev.buffer(d) for d in data]
    assert dev.engine.staging.deferred.submissions == -(-sum(sizes) // 4096) - 1  # (the last slot not sent yet)
    for b, d in zip(bufs, data):
        assert b.read() == d.tobytes() + bytes(b.nbytes - d.size)
    dev.close()


def test_a_slot_is_refilled_after_its_copies(rng, monkeypatch):
    """Many slot-sized writes in a row: each refill of a slot waits for the copies that read it
    (were it refilled earlier, a buffer would receive the next one's bytes)."""
    monkeypatch.setattr(staging, "CHUNK_BYTES", 4096)
    dev = kdml.Device()
    deferred = dev.engine.staging.deferred
    real, fills = deferred.staging.copies.copy, []

    def copy(dst, src):  # the slot being filled has no copy in flight (on lavapipe a race is rarely seen)
        fills.append(deferred.running[deferred.slot] == [])
        real(dst, src)

    monkeypatch.setattr(deferred.staging.copies, "copy", copy)
    data = [rng.integers(0, 256, 4096, dtype=np.uint8) for _ in range(200)]
    bufs = [dev.buffer(d) for d in data]
    assert len(fills) == 200 and all(fills)
    for b, d in zip(bufs, data):
        assert b.read() == d.tobytes()
    dev.close()


def test_a_later_write_lands_after_the_deferred_one(dev, rng):
    """A buffer's deferred contents, then a write of part of it: the part wins, the rest stays."""
    base = rng.integers(0, 256, 8192, dtype=np.uint8)
    patch = rng.integers(0, 256, 1000, dtype=np.uint8)
    buf = dev.buffer(base)
    buf.write(patch, offset=4001)
    expected = base.copy()
    expected[4001:5001] = patch
    assert buf.read() == expected.tobytes()


def test_synchronize_sends_and_waits_for_them(dev, rng):
    deferred = dev.engine.staging.deferred
    dev.tensor(rng.standard_normal(64).astype(np.float32))
    assert deferred.regions
    dev.synchronize()
    assert not deferred.regions and not any(deferred.running)


def test_close_with_deferred_writes_pending():
    """Closing a device whose writes were never needed sends and waits for them first: no
    validation message, no crash; the closed device refuses work."""
    dev = kdml.Device()
    t = dev.tensor(np.arange(1000, dtype=np.float32))
    deferred = dev.engine.staging.deferred
    assert deferred.regions and deferred.submissions == 0
    dev.close()
    assert deferred.submissions == 1 and not deferred.regions and not any(deferred.running)
    with pytest.raises(kdml.DeviceError):
        t.numpy()
