"""runtime/encode.levels and encode.program_order: the orders record_dispatches records a
submission in (GPUs' and CPU devices': DevicePolicy.barrier_levels), a global barrier between
levels. Checked against the hazard rules written out pair by pair (an independent oracle: every
ordered pair that conflicts lies in increasing levels; in `levels` every dispatch sits one level
after some conflicting earlier one, or in level 0), on random access sets, and on a device in
both orders: a recording whose independent chains interleave gives numpy's results, and model
families the same bits, under the validation layer's synchronization checks (conftest.py)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kompute_dml as kdml
from kompute_dml.runtime.encode import EncodedDispatch, levels, program_order
from kompute_dml.runtime.policy import policy_for


def _conflict(a: EncodedDispatch, b: EncodedDispatch) -> bool:
    """b after a must wait for a: b reads what a writes, or writes what a reads or writes."""
    return bool(b.reads & a.writes) or bool(b.writes & (a.reads | a.writes))


def _dispatch(reads: set[int], writes: set[int], skip: bool = False) -> EncodedDispatch:
    return EncodedDispatch(None, frozenset(reads - writes), frozenset(writes), skip=skip)


def _check(ds: list[EncodedDispatch], order=levels) -> list[list[int]]:
    lv = order(ds)
    where = {i: n for n, level in enumerate(lv) for i in level}
    assert sorted(where) == [i for i, d in enumerate(ds) if not d.skip]  # each recorded once, skipped ones left out
    for level in lv:
        assert level == sorted(level) and level  # program order within a level, none empty
    for j in where:
        earlier = [i for i in where if i < j and _conflict(ds[i], ds[j])]
        for i in earlier:
            assert where[i] < where[j], (i, j)
        if order is levels:  # as early as the hazards allow
            assert where[j] == (max(where[i] for i in earlier) + 1 if earlier else 0), j
        else:  # program order: the levels are runs of consecutive dispatches
            assert [i for level in lv for i in level] == sorted(where)
    return lv


_SETS = st.sets(st.integers(0, 5), max_size=3)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(_SETS, _SETS, st.booleans()), max_size=24))
def test_levels_keep_every_hazard_and_hoist_the_rest(spec: list[tuple[set[int], set[int], bool]]) -> None:
    ds = [_dispatch(r, w, skip=s and not w) for r, w, s in spec]
    assert len(_check(ds)) <= len(_check(ds, program_order))


def test_levels_of_named_cases() -> None:
    chain = [_dispatch({0}, {1}), _dispatch({1}, {2}), _dispatch({2}, {3})]
    assert _check(chain) == [[0], [1], [2]]
    # a second chain beside the first shares its levels
    both = [*chain, _dispatch({10}, {11}), _dispatch({11}, {12})]
    assert _check(both) == [[0, 3], [1, 4], [2]]
    # write after read: the writer waits for the reader, though it reads nothing written
    war = [_dispatch({0}, {1}), _dispatch({1}, {5}), _dispatch(set(), {1})]
    assert _check(war) == [[0], [1], [2]]
    # two writers of one buffer stay in order; readers of one value share a level
    assert _check([_dispatch(set(), {1}), _dispatch(set(), {1}), _dispatch({1}, {2}), _dispatch({1}, {3})]) == [
        [0], [1], [2, 3]]


@pytest.fixture(params=["levels", "program order"])
def ordered(request, dev):
    """The device with its submissions recorded in each order, its own restored after."""
    real = dev.engine.first_runs.order
    dev.engine.set_order(levels if request.param == "levels" else program_order)
    yield dev
    dev.engine.set_order(real)


def test_the_policy_orders(dev) -> None:
    assert dev.engine.first_runs.order is (levels if dev.policy.barrier_levels else program_order)
    gpu = policy_for("discrete-gpu", frozenset(), dev.limits, transfer_commands=None)
    cpu = policy_for("cpu", frozenset(), dev.limits, transfer_commands=None)
    assert (gpu.barrier_levels, cpu.barrier_levels) == (True, False)


def test_interleaved_chains_on_the_device(ordered) -> None:
    """Two independent chains of adds recorded interleaved, then an add that reads both and one
    that overwrites a buffer read before it (write after read): numpy's results."""
    dev = ordered
    d = kdml.TensorDesc(kdml.DataType.FLOAT32, (4096,))
    add = dev.compile(kdml.ElementWiseAddDesc(d, d, d))
    rng = np.random.default_rng(3)
    xs = [rng.standard_normal(4096).astype(np.float32) for _ in range(2)]
    ta = [dev.tensor(x) for x in xs]
    outs = [[dev.empty(d) for _ in range(3)] for _ in range(2)]
    both = dev.empty(d)
    with dev.record() as rec:
        for step in range(3):
            for c in range(2):
                rec.execute(add, [ta[c] if step == 0 else outs[c][step - 1], ta[c]], [outs[c][step]])
        rec.execute(add, [outs[0][2], outs[1][2]], [both])
        rec.execute(add, [ta[0], ta[1]], [outs[0][1]])  # outs[0][1] was read by the chain's third add
    want = [[x + x, x + x + x, x + x + x + x] for x in xs]  # numpy's float32 adds, in the chains' order
    for c in range(2):
        for step in range(3):
            if (c, step) != (0, 1):
                np.testing.assert_array_equal(outs[c][step].numpy(), want[c][step])
    np.testing.assert_array_equal(outs[0][1].numpy(), xs[0] + xs[1])
    np.testing.assert_array_equal(both.numpy(), want[0][2] + want[1][2])


@pytest.mark.parametrize("n", [0, 1])
def test_levels_of_nothing(n: int) -> None:
    assert levels([_dispatch(set(), set(), skip=True)] * n) == []


@pytest.mark.parametrize("name", ["distilbert-int8", "gpt2", "llama"])
def test_families_in_both_orders(dev, name) -> None:
    """A family's outputs, its plan recorded in levels and in program order: the same bits."""
    pytest.importorskip("torch", reason="torch (requirements-model.txt) exports the models")
    pytest.importorskip("transformers", reason="transformers (requirements-model.txt) defines the models")
    from kompute_dml.bench import families
    from kompute_dml.onnx_backend import Backend

    path = str(families.build(name, "tiny"))
    feeds = families.feeds(name, 3, 17, np.random.default_rng(2))
    real, outs = dev.engine.first_runs.order, []
    try:
        for order in (levels, program_order):
            dev.engine.set_order(order)
            rep = Backend.prepare(path, "CPU", kdml_device=dev)
            outs.append([rep.run(feeds) for _ in range(3)])  # the plan, its own sequence, a replay
            rep.release()
    finally:
        dev.engine.set_order(real)
    for a, b in zip(*outs):
        for x, y in zip(a, b):
            np.testing.assert_array_equal(np.asarray(x).view(np.uint8), np.asarray(y).view(np.uint8))

