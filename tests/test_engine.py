"""The runtime engine's one replay path, the exact in-place no-op, buffer release, and the
integer helpers every argument goes through (kompute_dml/runtime/engine.py, kompute_dml/core/ints.py)."""

from __future__ import annotations

import gc

import numpy as np
import pytest
from helpers import identity_op

import kompute_dml as kdml
from kompute_dml.core.ints import as_int, as_int_tuple, cdiv

DT = kdml.DataType
TD = kdml.TensorDesc



def test_eager_and_one_execution_recording_share_a_sequence(rng):
    with kdml.Device() as dev:
        op, desc = identity_op(dev)
        x = dev.tensor(rng.standard_normal(desc.sizes).astype(np.float32))
        y = dev.empty(desc)
        base = dev.stats()["recorded_sequences"]
        op.execute([x], [y])
        assert dev.stats()["recorded_sequences"] == base + 1
        y.buffer.write(np.zeros(64, np.float32))
        with dev.record() as rec:
            rec.execute(op, [x], [y])
        assert dev.stats()["recorded_sequences"] == base + 1  # replayed, not recorded again
        assert np.array_equal(y.numpy(), x.numpy())
        with dev.record() as rec:  # two executions: a sequence of their own
            rec.execute(op, [x], [y])
            rec.execute(op, [y], [x])
        assert dev.stats()["recorded_sequences"] == base + 2


def test_replays_see_new_data_and_mark_outputs(rng):
    """A replayed submission runs on the buffers' current contents, and the host reads what
    it wrote (the host copy is refreshed after every submission that writes the buffer)."""
    with kdml.Device() as dev:
        op, desc = identity_op(dev)
        x, y = dev.empty(desc), dev.empty(desc)
        for _ in range(3):
            data = rng.standard_normal(desc.sizes).astype(np.float32)
            x.write_numpy(data)
            op.execute([x], [y])
            assert np.array_equal(y.numpy(), data)
        assert dev.stats()["recorded_sequences"] == 1


@pytest.mark.parametrize("recorded", [False, True])
def test_exact_in_place_identity_runs_nothing(rng, recorded):
    with kdml.Device() as dev:
        op, desc = identity_op(dev)
        data = rng.standard_normal(desc.sizes).astype(np.float32)
        x = dev.tensor(data)
        before = dev.stats()
        if recorded:
            with dev.record() as rec:
                rec.execute(op, [x], [x])
            assert len(rec) == 0
        else:
            op.execute([x], [x])
        after = dev.stats()
        assert after["recorded_sequences"] == before["recorded_sequences"]
        assert after["descriptor_sets"] == before["descriptor_sets"]
        assert np.array_equal(x.numpy(), data)
        # not a no-op: the same buffer at another offset is refused, a different layout too
        y = kdml.Tensor(x.buffer, TD(DT.FLOAT32, (8, 8), (1, 8)), 0)
        with pytest.raises(kdml.InvalidArgumentError, match="overlaps"):
            dev.compile(kdml.ActivationIdentityDesc(desc, y.desc)).execute([x], [y])


def test_released_buffers_leave_the_caches(rng):
    with kdml.Device(transfer_commands=False) as dev:
        op, desc = identity_op(dev)
        x = dev.tensor(rng.standard_normal(desc.sizes).astype(np.float32))
        base = dev.stats()
        for _ in range(3):
            y = dev.empty(desc)
            op.execute([x], [y])
            del y
            gc.collect()
        after = dev.stats()
        assert after["recorded_sequences"] == base["recorded_sequences"]
        assert after["live_buffers"] == base["live_buffers"]
        assert after["allocated_bytes"] == base["allocated_bytes"]


def test_closed_device_refuses_every_path(rng):
    dev = kdml.Device()
    op, desc = identity_op(dev)
    x, y = dev.tensor(np.ones(desc.sizes, np.float32)), dev.empty(desc)
    dev.close()
    assert dev.closed
    for action in (lambda: op.execute([x], [y]), lambda: x.numpy(), lambda: dev.buffer(16),
                   lambda: dev.compile(kdml.ActivationIdentityDesc(desc, desc))):
        with pytest.raises(kdml.DeviceError, match="closed"):
            action()
    with pytest.raises(kdml.DeviceError, match="closed"), dev.record() as rec:
        rec.execute(op, [x], [y])


def test_buffer_offsets_take_numpy_integers_and_refuse_bools(dev):
    buf = dev.buffer(64)
    buf.write(b"abcd", np.int64(16))
    assert buf.read(np.uint8(16), np.int32(4)) == b"abcd"
    assert len(buf.read(np.int64(48))) == 16
    with pytest.raises(kdml.InvalidArgumentError, match="^data: must be an integer"):
        buf.write(b"x", True)
    with pytest.raises(kdml.InvalidArgumentError, match="^nbytes: must be an integer, got bool"):
        dev.buffer(True)
    with pytest.raises(kdml.InvalidArgumentError, match="^offset: must be an integer, got float"):
        kdml.Tensor(buf, TD(DT.FLOAT32, (4,)), 16.0)


def test_as_int():
    assert as_int(np.int16(-3), "f") == -3 and type(as_int(np.uint64(2**63), "f")) is int
    for bad in (True, np.bool_(False), 1.0, "1", None, np.array([1, 2])):
        with pytest.raises(kdml.InvalidArgumentError, match=r"^f\.g: must be an integer, got "):
            as_int(bad, "f.g")
    with pytest.raises(kdml.InvalidArgumentError, match="^memory_budget: must be a number of bytes"):
        kdml.Device(memory_budget=2.0**20)


def test_as_int_tuple():
    assert as_int_tuple(np.array([3, 4]), "sizes") == (3, 4)
    assert as_int_tuple(range(3), "sizes") == (0, 1, 2)
    with pytest.raises(kdml.InvalidArgumentError, match=r"^sizes\[1\]: must be an integer"):
        as_int_tuple((1, 2.5), "sizes")
    for bad in ("12", b"12", 5, np.array(7)):
        with pytest.raises(kdml.InvalidArgumentError, match="^sizes: must be a sequence of integers"):
            as_int_tuple(bad, "sizes")


@pytest.mark.parametrize("a", [0, 1, 15, 16, 17, 2**40 + 1])
@pytest.mark.parametrize("b", [1, 4, 16, 65535])
def test_cdiv(a, b):
    q = cdiv(a, b)
    assert q * b >= a and (q - 1) * b < a


def test_eager_rerun_only_while_its_submission_is_cached(rng):
    """execute keeps the engine's cached submission of its last key and reruns it directly;
    once that submission leaves the cache (evicted, or a buffer it binds released) the
    rerun is refused and the call goes through submit again."""
    from kompute_dml.core.errors import DeviceError
    from kompute_dml.runtime.engine import REPLAY_CAPACITY

    with kdml.Device() as dev:
        op, desc = identity_op(dev, (4, 4))
        x = dev.tensor(rng.standard_normal(desc.sizes).astype(np.float32))
        y = dev.empty(desc)
        op.execute([x], [y])
        replay = op._last[1]
        assert replay.live
        op.execute([x], [y])
        assert op._last[1] is replay  # the same cached submission, rerun
        others = [dev.empty(desc) for _ in range(REPLAY_CAPACITY)]
        for o in others:
            op.execute([x], [o])
        assert not replay.live
        op.bind([x], [y])
        assert dev.engine.rerun(replay) is False
        y.write_numpy(np.zeros(desc.sizes, np.float32))
        op.execute([x], [y])
        assert np.array_equal(y.numpy(), x.numpy())
        fresh = op._last[1]
        assert fresh is not replay and fresh.live
        del others, o
        z = dev.empty(desc)
        op.execute([x], [z])
        zr = op._last[1]
        del z
        gc.collect()
        assert not zr.live  # its output's memory went, and the submission with it
    with pytest.raises(DeviceError, match="closed"):
        op.execute([x], [y])


@pytest.mark.parametrize("n", [1, 5, 16, 100, 4096 + 3])
def test_uploaded_tensor_takes_no_fill_and_its_tail_is_zero(dev, monkeypatch, rng, n):
    """dev.tensor / dev.buffer(data): one transfer, no fill submission first (a fill is a
    submission and a wait); the allocation's bytes past the data (to its 16-byte unit) are zero,
    as in a zeroed buffer."""
    fills = []
    orig = dev.engine._transfer_ops
    monkeypatch.setattr(dev.engine, "_transfer_ops", lambda ops: (fills.append(ops), orig(ops)))
    data = rng.integers(1, 256, n).astype(np.uint8)
    for buf in (dev.tensor(data).buffer, dev.buffer(data)):
        words = buf.memory.words
        raw = np.frombuffer(buf.memory.read(0, words * 4), np.uint8)
        assert np.array_equal(raw[:n], data)
        assert not raw[n:].any(), raw[n:]
    assert fills == []


@pytest.mark.parametrize("threads", ["1", "4"])
def test_new_pipelines_of_one_submission_compile_together(rng, monkeypatch, threads):
    """A recording's new pipelines are made together before it is encoded (kp patch 13:
    several at once on threads of their own); each exactly once, and every result right."""
    monkeypatch.setenv("KDML_PIPELINE_THREADS", threads)
    a = rng.standard_normal((7, 33)).astype(np.float32)
    b = rng.standard_normal((7, 33)).astype(np.float32)
    with kdml.Device() as dev:
        assert dev.policy.pipeline_threads == int(threads)
        before = dev.engine.stats()["pipelines_created"]
        ta, tb = dev.tensor(a), dev.tensor(b)
        with dev.record():
            outs = [kdml.exp(ta), kdml.sqrt(kdml.abs(ta)), kdml.sub(ta, tb), kdml.floor(tb)]
        made = dev.engine.stats()["pipelines_created"] - before
        assert made >= 4
        np.testing.assert_allclose(outs[0].numpy(), np.exp(a), rtol=3e-7)  # EXP: within 1.3 ulp
        np.testing.assert_array_equal(outs[1].numpy(), np.sqrt(np.abs(a)))
        np.testing.assert_array_equal(outs[2].numpy(), a - b)
        np.testing.assert_array_equal(outs[3].numpy(), np.floor(b))
        with dev.record():  # the same variants again: no pipeline made
            kdml.exp(tb), kdml.floor(ta)
        assert dev.engine.stats()["pipelines_created"] - before == made


def test_pipeline_threads_env_is_checked(monkeypatch):
    monkeypatch.setenv("KDML_PIPELINE_THREADS", "many")
    with pytest.raises(ValueError, match="KDML_PIPELINE_THREADS"):
        kdml.Device()


def test_memory_held_only_by_a_reference_cycle_is_freed_before_refusing():
    """A model dropped while in a reference cycle (a BackendRep is one) keeps its buffers until CPython's
    cyclic collector runs, which device memory never triggers: an allocation that does not fit collects
    first, so the budget counts live buffers only. The automatic collector is off here, so only the
    allocator's collection can free the cycle."""
    import gc

    small = kdml.Device(memory_budget=3 << 20)
    enabled = gc.isenabled()
    gc.disable()
    try:
        class Holder:
            pass

        h = Holder()
        h.me, h.buffer = h, small.buffer(2 << 20)
        del h
        assert small.stats()["allocated_bytes"] >= 2 << 20  # the cycle still holds it
        kept = small.buffer(2 << 20)  # fits once the cycle is collected
        assert small.stats()["allocated_bytes"] < 3 << 20
        with pytest.raises(kdml.OutOfMemoryError, match="memory budget"):
            small.buffer(2 << 20)  # live buffers are never collected
        del kept
    finally:
        if enabled:
            gc.enable()
        small.close()
