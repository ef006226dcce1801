"""The compiled operator's binding cache (ops/base.py CompiledOperator.bind) and the
immutable Tensor it relies on: a repeated execution on the same bindings (buffer, offset,
descriptor object; through new Tensor objects too) skips the binding checks, anything else is
checked in full, and the cache keeps no buffer alive."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest
from helpers import identity_op

import kompute_dml as kdml
from kompute_dml.runtime.policy import CONSTANT_BELOW, DevicePolicy, policy_for

DT = kdml.DataType
TD = kdml.TensorDesc



def test_tensor_is_immutable(dev):
    t = dev.empty(TD(DT.FLOAT32, (4,)))
    for name, value in (("offset", 16), ("desc", TD(DT.INT32, (4,))), ("buffer", t.buffer), ("other", 1)):
        with pytest.raises(AttributeError, match="immutable"):
            setattr(t, name, value)
    with pytest.raises(AttributeError, match="immutable"):
        del t.offset
    assert t.offset == 0 and t.desc.data_type == DT.FLOAT32


def test_repeated_binding_runs_and_new_objects_are_checked(dev, rng):
    op, desc = identity_op(dev)
    x = dev.tensor(rng.standard_normal(desc.sizes).astype(np.float32))
    y = dev.empty(desc)
    for _ in range(3):  # the second and third calls take the cached binding
        y.buffer.write(np.full(64, np.nan, np.float32))
        op.execute([x], [y])
        assert np.array_equal(y.numpy(), x.numpy())
    # same objects, wrong arity or container: still refused
    with pytest.raises(kdml.InvalidArgumentError, match="inputs"):
        op.execute([x, x], [])
    with pytest.raises(kdml.InvalidArgumentError, match="outputs"):
        op.execute([x], [y, y])
    with pytest.raises(kdml.InvalidArgumentError, match="inputs"):
        op.execute(x, [y])
    # another tensor of another layout, after the cached one: checked in full
    wrong = dev.empty(TD(DT.INT32, desc.sizes))
    with pytest.raises(kdml.InvalidArgumentError, match="output_tensor"):
        op.execute([x], [wrong])
    with pytest.raises(kdml.InvalidArgumentError, match="output_tensor"):
        op.execute([x], [None])
    # an alias the cache never saw: the overlap rule still holds
    big = dev.empty(TD(DT.FLOAT32, (256,)))
    a, b = kdml.Tensor(big.buffer, desc, 0), kdml.Tensor(big.buffer, desc, 16)
    with pytest.raises(kdml.InvalidArgumentError, match="overlaps"):
        op.execute([a], [b])
    op.execute([x], [y])  # back to the first binding
    assert np.array_equal(y.numpy(), x.numpy())


def test_recent_bindings_survive_other_bindings(dev, rng):
    """Up to BIND_CACHE bindings are remembered (a recording's binding does not evict the eager
    one); each still runs on its own tensors, and one more evicts the oldest."""
    from kompute_dml.ops.base import BIND_CACHE

    op, desc = identity_op(dev)
    x = dev.tensor(rng.standard_normal(desc.sizes).astype(np.float32))
    ys = [dev.empty(desc) for _ in range(BIND_CACHE + 1)]
    for y in ys:
        op.execute([x], [y])
    assert list(op._recent) == [(x.binding_key, y.binding_key) for y in ys[1:]]  # oldest first; ys[0] evicted
    for y in ys:  # every one, cached or not, gets its own output
        y.buffer.write(np.full(64, np.nan, np.float32))
        op.execute([x], [y])
        assert np.array_equal(y.numpy(), x.numpy())


def test_cache_keeps_no_tensor_alive(rng):
    with kdml.Device() as dev:
        op, desc = identity_op(dev)
        x = dev.tensor(rng.standard_normal(desc.sizes).astype(np.float32))
        y = dev.empty(desc)
        op.execute([x], [y])
        op.execute([x], [y])
        live = dev.stats()["live_buffers"]
        ref = weakref.ref(y)
        del y
        gc.collect()
        assert ref() is None
        assert dev.stats()["live_buffers"] == live - 1
        # a dead cached tensor's slot given None: refused, not taken from the cache
        with pytest.raises(kdml.InvalidArgumentError, match="output_tensor"):
            op.execute([x], [None])
        z = dev.empty(desc)
        op.execute([x], [z])
        assert np.array_equal(z.numpy(), x.numpy())


def _count_full_checks(op, monkeypatch) -> list[int]:
    calls = [0]
    full = op._bind

    def counting(inputs, outputs):
        calls[0] += 1
        return full(inputs, outputs)

    monkeypatch.setattr(op, "_bind", counting)
    return calls


def test_new_tensor_objects_of_a_checked_binding_take_the_cache(dev, rng, monkeypatch):
    """New Tensor objects over a binding already checked (same buffer, offset and descriptor
    object) skip the checks; another offset is checked in full and writes its own place."""
    op, desc = identity_op(dev, (2, 2))
    x = dev.tensor(rng.standard_normal(desc.sizes).astype(np.float32))
    buf = dev.buffer(64)
    checks = _count_full_checks(op, monkeypatch)
    for n, offset in enumerate((0, 16, 32, 48, 0, 16, 32, 48)):
        out = kdml.Tensor(buf, desc, offset)
        buf.write(np.full(16, np.nan, np.float32))
        op.execute([x], [out])
        got = np.frombuffer(buf.read(0, 64), np.float32)
        assert np.array_equal(got[offset // 4: offset // 4 + 4], x.numpy().ravel())
        assert np.isnan(np.delete(got, range(offset // 4, offset // 4 + 4))).all()
        assert checks[0] == min(n + 1, 4)  # the second round's objects are new, their bindings not
        del out
    assert len(op._recent) == 4


def test_a_descriptor_id_is_not_reused_while_its_entry_lives(dev, rng):
    """The cache names a descriptor by its id and holds it: a descriptor of another layout
    made after an equal-addressed one died (CPython reuses freed blocks) is still checked."""
    op, desc = identity_op(dev, (2, 2))
    x = dev.tensor(rng.standard_normal(desc.sizes).astype(np.float32))
    buf = dev.buffer(16)
    for _ in range(20):
        good = TD(DT.FLOAT32, (2, 2))  # equal to the compiled desc, a new object each time
        op.execute([x], [kdml.Tensor(buf, good, 0)])
        assert np.array_equal(np.frombuffer(buf.read(0, 16), np.float32), x.numpy().ravel())
        del good
        bad = TD(DT.INT32, (2, 2))
        with pytest.raises(kdml.InvalidArgumentError, match="output_tensor"):
            op.execute([x], [kdml.Tensor(buf, bad, 0)])
        del bad


def test_functional_calls_take_the_cache(dev, rng, monkeypatch):
    """kdml.identity's pooled output is a new Tensor on every call over the same buffer and
    descriptor: after the first call its binding comes from the cache."""
    x = dev.tensor(rng.standard_normal((8, 8)).astype(np.float32))
    kdml.identity(x)
    from kompute_dml.functional import _packed_like, compile_cached

    op = compile_cached(dev, kdml.ActivationIdentityDesc(x.desc, _packed_like(x.desc)))
    op._recent.clear()  # the first call below checks in full: proof that it runs on this op
    checks = _count_full_checks(op, monkeypatch)
    for n in range(3):
        y = kdml.identity(x)
        assert np.array_equal(y.numpy(), x.numpy())
        assert checks[0] == 1, n  # the second and third calls' new Tensors bind from the cache
        del y


def test_non_tensors_get_the_documented_error(dev, rng):
    op, desc = identity_op(dev, (2, 2))
    x = dev.tensor(rng.standard_normal(desc.sizes).astype(np.float32))

    class Impostor:  # an unhashable binding_key must not escape as a TypeError
        binding_key = [1, 2]

    for bad in (np.zeros((2, 2), np.float32), Impostor(), "y"):
        with pytest.raises(kdml.InvalidArgumentError, match="output_tensor"):
            op.execute([x], [bad])


def test_small_copies_by_transfer_rule():
    limits = {"max_compute_work_group_count": (65535, 65535, 65535)}
    gpu = policy_for("discrete-gpu", frozenset(), limits, transfer_commands=None)
    assert gpu.copies_by_transfer(gpu.transfer_below) is True
    assert gpu.copies_by_transfer(gpu.transfer_below + 1) is False
    forced = policy_for("discrete-gpu", frozenset(), limits, transfer_commands=False)
    assert forced.transfer_below == 0 and forced.copies_by_transfer(1) is False
    assert gpu.constant_below == CONSTANT_BELOW and forced.constant_below == 0  # an explicit path is kept
    cpu = DevicePolicy("cpu", transfer_commands=True, matmul_family="cpu", capabilities=frozenset())
    assert cpu.copies_by_transfer(1 << 40) is True


def test_tags_name_objects_once_and_do_not_travel():
    """core/tags.py: a tag is given once and never to another object; a pickled (or copied)
    TensorDesc leaves its tag behind, so the binding key of a tensor over the copy names a desc of
    this process only."""
    import copy
    import pickle

    from kompute_dml.core.tags import tag

    a = kdml.TensorDesc(kdml.DataType.FLOAT32, (3, 5), (10, 1))
    b = kdml.TensorDesc(kdml.DataType.FLOAT32, (3, 5), (10, 2))
    assert tag(a) == tag(a) != tag(b)
    for other in (pickle.loads(pickle.dumps(a)), copy.copy(a)):
        assert other == a and "_tag" not in other.__dict__
        assert tag(other) not in (tag(a), tag(b))
