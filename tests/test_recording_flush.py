"""Recording.flush: a recording's first executions start on the device while the rest is
still recorded; the submission or program it becomes runs only the rest at its first run
and everything at every later run (the ONNX backend plans a new input signature's later
layers while its first ones run: onnx_backend/device_graph.py).

Each test counts with in-place additions of 1 (x <- x + 1, exact in float32 for small
integers): an execution run twice, or skipped, shows in the count."""

from __future__ import annotations

import numpy as np
import pytest

import kompute_dml as kdml

DT = kdml.DataType
F32 = kdml.TensorDesc(DT.FLOAT32, (3, 5))


def _counter(dev, start: float = 0.0):
    """A counter x (every element `start`) and `add(rec, x)`, which records x <- x + 1 in place
    (ELEMENT_WISE_ADD allows its output to alias an input)."""
    op = dev.compile(kdml.ElementWiseAddDesc(F32, F32, F32))
    one = dev.tensor(np.ones((3, 5), np.float32))
    return (lambda rec, x: rec.execute(op, [x, one], [x])), dev.tensor(np.full((3, 5), start, np.float32))


@pytest.mark.parametrize("heads", [1, 2, 5], ids=["one-head", "two-heads", "more-heads-than-sequences"])
def test_a_flushed_program_runs_its_head_once_then_everything(dev, heads):
    """`heads` flushes of one addition each (5 > runtime/replay.HEAD_SEQUENCES: the ring's
    sequences are taken back), then two more additions recorded after the last flush."""
    add, x = _counter(dev)
    with dev.capture() as rec:
        for k in range(heads):
            add(rec, x)
            rec.flush()
            np.testing.assert_array_equal(x.numpy(), k + 1)  # a head runs at once; reading waits for it
        add(rec, x)
        add(rec, x)
        prog = rec.compile()
    assert rec.flushed == heads
    np.testing.assert_array_equal(x.numpy(), heads)  # the rest waits for the program's first run
    prog.run()
    np.testing.assert_array_equal(x.numpy(), heads + 2)  # the rest only
    for k in range(1, 3):
        prog.run()
        np.testing.assert_array_equal(x.numpy(), heads + 2 + k * (heads + 2))  # everything


def test_a_flushed_recording_submits_the_rest(dev):
    add, x = _counter(dev, 10)
    guard = dev.tensor(np.full((3, 5), -3, np.float32))
    with dev.record() as rec:
        add(rec, x)
        rec.flush()
        rec.flush()  # nothing new: no-op
        add(rec, x)
        add(rec, x)
    np.testing.assert_array_equal(x.numpy(), 13)
    np.testing.assert_array_equal(guard.numpy(), -3)


def test_a_program_flushed_to_its_end_waits_for_its_heads(dev):
    """Everything flushed: the first run has nothing left to run; it still waits, and later
    runs run everything."""
    add, x = _counter(dev)
    with dev.capture() as rec:
        for _ in range(3):
            add(rec, x)
        rec.flush()
        prog = rec.compile()
    prog.run()
    np.testing.assert_array_equal(x.numpy(), 3)
    prog.run()
    np.testing.assert_array_equal(x.numpy(), 6)


def test_host_writes_wait_for_a_running_head(dev):
    """A host write into a buffer a head binds lands after the head: the head's addition is
    overwritten, not lost into a later read."""
    add, x = _counter(dev)
    with dev.capture() as rec:
        for _ in range(4):
            add(rec, x)
        rec.flush()
        x.buffer.write(np.full((3, 5), 100, np.float32))
        add(rec, x)
        prog = rec.compile()
    prog.run()
    np.testing.assert_array_equal(x.numpy(), 101)


def test_flush_after_the_end_is_refused(dev):
    add, x = _counter(dev)
    with dev.capture() as rec:
        add(rec, x)
        prog = rec.compile()
    with pytest.raises(kdml.DMLError, match="already submitted"):
        rec.flush()
    prog.run()
    np.testing.assert_array_equal(x.numpy(), 1)


def test_nothing_is_flushed_while_a_profile_is_open(dev):
    """A profile runs one submission at a time: flush leaves everything to the first run."""
    add, x = _counter(dev)
    with dev.profile() as p, dev.capture() as rec:
        add(rec, x)
        rec.flush()
        add(rec, x)
        prog = rec.compile()
        assert rec.flushed == 0
        np.testing.assert_array_equal(x.numpy(), 0)
        prog.run()
    np.testing.assert_array_equal(x.numpy(), 2)
    assert len(p.rows) == 2


def test_a_program_without_its_tail(dev):
    """RecordedProgram.without_tail(n): the same executions less the last n, on the same buffers; a
    flushed program's head is pending until its own first run (the shorter one runs everything)."""
    add, x = _counter(dev)
    _, y = _counter(dev, 10.0)
    with dev.capture() as rec:
        add(rec, x)
        rec.flush()
        add(rec, x)
        add(rec, y)
        prog = rec.compile()
    assert prog.head_pending
    short = prog.without_tail(1)
    assert short.dispatch_count == prog.dispatch_count - 1 and not short.head_pending
    prog.run()
    assert not prog.head_pending
    np.testing.assert_array_equal(x.numpy(), 2)
    np.testing.assert_array_equal(y.numpy(), 11)
    short.run()
    np.testing.assert_array_equal(x.numpy(), 4)  # both of x's additions, not y's
    np.testing.assert_array_equal(y.numpy(), 11)
    prog.run()
    np.testing.assert_array_equal(x.numpy(), 6)
    np.testing.assert_array_equal(y.numpy(), 12)
    for bad in (4, -1, 1.0, True):
        with pytest.raises(kdml.InvalidArgumentError, match=r"^n: an integer 0 \.\. 3"):
            prog.without_tail(bad)
    assert prog.without_tail(3).run() is None  # nothing to run
