"""How an execution learns that the device is done (kp patch level 7, kdml_completion.hpp):
by a completion word its command buffer writes last, polled before a blocking wait, or by
its fence (DevicePolicy.completion, KDML_COMPLETION). Both stay tested on every device, the
validation layer watching (conftest): a word-completed sequence may be submitted again
before Vulkan has seen its last submission retired, so these tests resubmit, evict, free
buffers and close devices with such submissions outstanding."""

from __future__ import annotations

import gc

import kp
import numpy as np
import pytest
from helpers import identity_op

import kompute_dml as kdml
from kompute_dml.core.errors import InvalidArgumentError
from kompute_dml.runtime.engine import REPLAY_CAPACITY
from kompute_dml.runtime.policy import COMPLETION_ENV, policy_for

DT = kdml.DataType
TD = kdml.TensorDesc
DEFAULT_SPIN_NS = 250_000  # kp patch: Sequence.cpp kdml_wait::spinNsRef



@pytest.fixture(params=["word", "fence"])
def completion_dev(request, monkeypatch):
    monkeypatch.setenv(COMPLETION_ENV, request.param)
    with kdml.Device() as dev:
        assert dev.policy.completion == request.param
        yield dev



def test_policy_completion_default_and_override(monkeypatch):
    monkeypatch.delenv(COMPLETION_ENV, raising=False)
    for device_type in ("cpu", "discrete-gpu"):
        assert policy_for(device_type, frozenset(), {}).completion == "word"
    monkeypatch.setenv(COMPLETION_ENV, "Fence")
    assert policy_for("discrete-gpu", frozenset(), {}).completion == "fence"
    assert policy_for("cpu", frozenset(), {}).describe()["completion"] == "fence"
    monkeypatch.setenv(COMPLETION_ENV, "semaphore")
    with pytest.raises(InvalidArgumentError, match=COMPLETION_ENV):
        policy_for("cpu", frozenset(), {})


def test_replays_complete_the_way_the_policy_says(completion_dev, rng):
    """A first run goes through the shared (fence-completed) sequence; the second run
    records the submission's own sequence, completed the policy's way."""
    op, desc = identity_op(completion_dev, (16, 16))
    x = completion_dev.tensor(rng.standard_normal(desc.sizes).astype(np.float32))
    y = completion_dev.empty(desc)
    op.execute([x], [y])
    stats = completion_dev.stats()
    assert stats["recorded_sequences"] == 1
    assert (stats["first_runs"], stats["sequences_created"], stats["word_sequences"]) == (1, 0, 0)
    assert np.array_equal(y.numpy(), x.numpy())
    y.write_numpy(np.zeros(desc.sizes, np.float32))
    op.execute([x], [y])
    stats = completion_dev.stats()
    assert (stats["first_runs"], stats["sequences_created"]) == (1, 1)
    assert stats["word_sequences"] == (1 if completion_dev.policy.completion == "word" else 0)
    assert np.array_equal(y.numpy(), x.numpy())


def test_back_to_back_and_interleaved_executions(completion_dev, rng):
    """The same sequence resubmitted at once (on lavapipe and the H100 its fence reports
    after the word: the next submission goes without one), interleaved with other
    sequences, host writes and reads; outputs poisoned before every check."""
    dev = completion_dev
    op, desc = identity_op(dev, (8, 32))
    diag_desc = TD(DT.INT32, (8, 32))
    diag = dev.compile(kdml.DiagonalMatrixDesc(diag_desc, offset=1, value=7.0))
    xs = [dev.tensor(rng.standard_normal(desc.sizes).astype(np.float32)) for _ in range(3)]
    ys = [dev.empty(desc) for _ in range(3)]
    d = dev.empty(diag_desc)
    expected_diag = np.eye(8, 32, k=1, dtype=np.int32) * 7
    for step in range(40):
        i = step % 3
        for _ in range(5):  # back to back: no host access in between
            op.execute([xs[i]], [ys[i]])
        if step % 4 == 0:
            d.write_numpy(np.full(diag_desc.sizes, -1, np.int32))
            diag.execute([], [d])
            assert np.array_equal(d.numpy(), expected_diag)
        if step % 5 == 0:
            ys[i].write_numpy(np.full(desc.sizes, np.nan, np.float32))
            new = rng.standard_normal(desc.sizes).astype(np.float32)
            xs[i].write_numpy(new)
            op.execute([xs[i]], [ys[i]])
            assert np.array_equal(ys[i].numpy(), new)
    with dev.record() as rec:  # a recording of all of them, twice
        for _ in range(2):
            for x, y in zip(xs, ys):
                rec.execute(op, [x], [y])
    for x, y in zip(xs, ys):
        assert np.array_equal(y.numpy(), x.numpy())


def test_blocking_wait_when_the_spin_is_zero(completion_dev, rng):
    """No polling at all: every eval blocks at once, on its fence or (a word-completed
    submission made without one) on the queue."""
    dev = completion_dev
    op, desc = identity_op(dev, (64, 64))
    x = dev.tensor(rng.standard_normal(desc.sizes).astype(np.float32))
    y = dev.empty(desc)
    kp.kdml_set_wait_spin_ns(0)
    try:
        for _ in range(20):
            op.execute([x], [y])
        y.write_numpy(np.zeros(desc.sizes, np.float32))
        op.execute([x], [y])
        assert np.array_equal(y.numpy(), x.numpy())
    finally:
        kp.kdml_set_wait_spin_ns(DEFAULT_SPIN_NS)


def test_eviction_release_and_close_with_submissions_outstanding(completion_dev, rng):
    """More distinct executions than the replay cache holds (evicted sequences are destroyed
    right after their last submission), buffers released while sequences that bound them
    were just submitted, and a close straight after an execution."""
    dev = completion_dev
    op, desc = identity_op(dev, (4, 4))
    x = dev.tensor(rng.standard_normal(desc.sizes).astype(np.float32))
    outs = [dev.empty(desc) for _ in range(REPLAY_CAPACITY + 40)]
    for y in outs:
        op.execute([x], [y])
        op.execute([x], [y])
    assert dev.stats()["recorded_sequences"] == REPLAY_CAPACITY
    for y in outs[::37]:
        assert np.array_equal(y.numpy(), x.numpy())
    last = outs[-1]
    del outs, y
    gc.collect()  # the outputs' memory and every sequence binding it go now
    assert np.array_equal(last.numpy(), x.numpy())
    op.execute([x], [last])
    op.execute([x], [last])
    dev.close()


def test_kp_word_slots_run_out_into_fence_sequences():
    """kdml_word_sequence hands out one of 4096 words per live sequence; past that a
    sequence completes by its fence, and a destroyed sequence's word is handed out again."""
    mgr = kp.Manager(0)
    try:
        t = mgr.tensor_t(np.zeros(4, dtype=np.uint32), kp.TensorTypes.device)
        seqs = [mgr.kdml_word_sequence() for _ in range(4096)]
        assert all(s.kdml_completes_by_word() for s in seqs)
        extra = mgr.kdml_word_sequence()
        assert not extra.kdml_completes_by_word()
        for s in (seqs[0], extra):
            s.record(kp.OpFillRegions(t, [0, 16], 0x01020304))
            s.kdml_run()
            s.kdml_run()
        everything = 0x20 | 0x40 | 0x800 | 0x1000, 0x800 | 0x1000  # accesses, stages
        read = mgr.sequence()
        read.record(kp.OpGlobalBarrier(everything[0], everything[0], everything[1], everything[1]))
        read.record(kp.OpTensorSyncLocal([t]))
        read.eval()
        assert (t.data() == 0x01020304).all()
        seqs[1].destroy()
        again = mgr.kdml_word_sequence()
        assert again.kdml_completes_by_word()
        del seqs, extra, again
    finally:
        mgr.destroy()


def test_adaptive_wait_spin_follows_each_submission_within_its_bounds(monkeypatch, rng):
    """GPU policies let a wait poll up to twice the submission's previous duration, capped
    (policy.WAIT_SPIN_CAP_US), at least the default; the next wait of that submission polls
    that long; CPU devices keep the fixed default; KDML_WAIT_SPIN_US fixes it. The durations
    come from a fake clock (the rule is checked, never a timing); results stay exact."""
    import types

    from kompute_dml.runtime import inflight as inflight_mod
    from kompute_dml.runtime.policy import WAIT_SPIN_CAP_US

    monkeypatch.delenv("KDML_WAIT_SPIN_US", raising=False)
    assert policy_for("discrete-gpu", frozenset(), {}).wait_spin_cap_us == WAIT_SPIN_CAP_US
    assert policy_for("cpu", frozenset(), {}).wait_spin_cap_us == 0
    with kdml.Device() as dev:
        engine = dev.engine
        assert engine._spin_cap_ns == 1000 * dev.policy.wait_spin_cap_us
        engine.set_adaptive_spin(700)  # as a GPU policy would, with a small cap
        try:
            op, desc = identity_op(dev, (64, 64))
            x = dev.tensor(rng.standard_normal(desc.sizes).astype(np.float32))
            y = dev.empty(desc)
            for _ in range(2):  # the first run (shared sequence), then the replay's own
                op.execute([x], [y])
            (replay,) = [r for r in engine._replays.values() if r.seq is not None]
            polls: list[int] = []
            monkeypatch.setattr(kp, "kdml_set_wait_spin_ns", polls.append)
            for seconds, spin_after in ((0.001, 700_000), (0.0002, 400_000), (0.00001, DEFAULT_SPIN_NS)):
                ticks = iter((0.0, seconds))
                clock = types.SimpleNamespace(perf_counter=ticks.__next__)
                monkeypatch.setattr(inflight_mod, "time", clock)  # (the submission's start and its wait's end)
                spin_before = replay.spin_ns
                y.write_numpy(np.zeros(desc.sizes, np.float32))
                op.execute([x], [y])
                assert np.array_equal(y.numpy(), x.numpy())
                assert polls[-1] == spin_before  # this wait polled what the previous run set
                assert replay.spin_ns == spin_after
            monkeypatch.undo()
            monkeypatch.setenv("KDML_WAIT_SPIN_US", "100")
            engine.set_adaptive_spin(700)
            assert engine._spin_cap_ns == 0
        finally:
            kp.kdml_set_wait_spin_ns(DEFAULT_SPIN_NS)
