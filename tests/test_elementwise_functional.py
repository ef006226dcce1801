"""kdml.add / sub / mul / div / equal / greater_equal / logical_and / isnan / where
(kompute_dml/functional/elementwise.py): numpy broadcasting, Tensors and host data, `out=`,
Python numbers taking the other operand's type; a hypothesis property test over random
broadcastable shapes, types and operand kinds against the independent references."""

from __future__ import annotations

import math

import numpy as np
import pytest
from elementwise_reference import arith_ref, check_float, compare_ref
from helpers import random_values
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kompute_dml as kdml

DT = kdml.DataType
NUMERIC = [d for d in DT if d != DT.FLOAT64]
SETTINGS = settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow], deadline=None)
HELPERS = {"add": kdml.add, "sub": kdml.sub, "mul": kdml.mul, "div": kdml.div}


@st.composite
def broadcast_shapes(draw, n: int = 2) -> list[tuple[int, ...]]:
    """`n` shapes that broadcast together (numpy's rules), 0-8 dimensions, at most 4096 elements."""
    rank = draw(st.integers(0, 8))
    full = [draw(st.integers(1, 6)) for _ in range(rank)]
    while math.prod(full) > 4096:
        full[full.index(max(full))] //= 2
    shapes = []
    for _ in range(n):
        r = draw(st.integers(0, rank))
        dims = full[rank - r:]
        shapes.append(tuple(1 if draw(st.booleans()) and draw(st.booleans()) else s for s in dims))
    return shapes


@SETTINGS
@given(shapes=broadcast_shapes(), op=st.sampled_from(sorted(HELPERS)), dt=st.sampled_from(NUMERIC),
       as_tensor=st.tuples(st.booleans(), st.booleans()), seed=st.integers(0, 2**32 - 1))
def test_arithmetic_helpers_property(dev, shapes, op, dt, as_tensor, seed):
    rng = np.random.default_rng(seed)
    a, b = (random_values(rng, dt, s) for s in shapes)
    args = [dev.tensor(x) if t else x for x, t in zip((a, b), as_tensor)]
    got = HELPERS[op](*args, device=dev).numpy()
    shape = np.broadcast_shapes(a.shape, b.shape) or (1,)
    assert got.shape == shape and got.dtype == dt.numpy_dtype
    ab, bb = (np.broadcast_to(x, shape) for x in (a, b))
    if dt.is_float:
        check_float(op, got, ab, bb, dt)
    else:
        assert np.array_equal(got, arith_ref(op, np.ascontiguousarray(ab), np.ascontiguousarray(bb), dt))


@SETTINGS
@given(shapes=broadcast_shapes(3), dt=st.sampled_from(list(DT)), seed=st.integers(0, 2**32 - 1))
def test_where_and_comparisons_property(dev, shapes, dt, seed):
    rng = np.random.default_rng(seed)
    cond = rng.random(shapes[0]) < 0.5
    a, b = (random_values(rng, dt, s) for s in shapes[1:])
    shape = np.broadcast_shapes(*shapes) or (1,)
    got = kdml.where(cond, a, dev.tensor(b), device=dev).numpy()
    want = np.broadcast_to(np.where(cond, a, b), shape)
    assert np.array_equal(got.view(f"u{dt.size}"), np.ascontiguousarray(want).view(f"u{dt.size}"))
    if dt == DT.FLOAT64:
        return
    ab = np.broadcast_to(a, np.broadcast_shapes(a.shape, b.shape) or (1,))
    bb = np.broadcast_to(b, ab.shape)
    assert np.array_equal(kdml.equal(a, b, device=dev).numpy(), compare_ref("eq", ab, bb, DT.UINT8))
    assert np.array_equal(kdml.greater_equal(a, b, data_type=DT.UINT32, device=dev).numpy(),
                          compare_ref("ge", ab, bb, DT.UINT32))


def test_helpers_basics(dev):
    x = dev.tensor(np.array([[1.0, np.nan, -2.0]], np.float32))
    assert np.array_equal(kdml.isnan(x).numpy(), np.array([[0, 1, 0]], np.uint8))
    assert kdml.isnan(x, data_type=DT.UINT32).numpy().dtype == np.uint32
    assert np.array_equal(kdml.logical_and(np.array([True, True, False]), np.array([True, False, False]),
                                           device=dev).numpy(), np.array([1, 0, 0], np.uint8))
    # Python numbers take the other operand's type
    got = kdml.mul(np.array([1, 2, 3], np.int16), 3, device=dev).numpy()
    assert got.dtype == np.int16 and got.tolist() == [3, 6, 9]
    assert kdml.add(np.float16(1.5), 2, device=dev).numpy().tolist() == [3.5]  # 0-d: shape (1,)
    with pytest.raises(kdml.InvalidArgumentError, match="^b: the values would change"):
        kdml.add(np.array([1], np.uint8), 300, device=dev)
    with pytest.raises(kdml.InvalidArgumentError, match="^b: data type INT16 differs from a's INT32: .*do not promote"):
        kdml.sub(np.array([1], np.int32), np.array([1], np.int16), device=dev)
    with pytest.raises(kdml.InvalidArgumentError, match="do not broadcast"):
        kdml.add(np.zeros((2, 3), np.float32), np.zeros((4,), np.float32), device=dev)
    with pytest.raises(kdml.InvalidArgumentError, match="^condition: must be UINT8"):
        kdml.where(np.array([1], np.int32), np.float32([1]), np.float32([2]), device=dev)


def test_out_argument(dev):
    out = dev.empty(kdml.TensorDesc(DT.INT32, (2, 3), (1, 2)))
    a = np.arange(6, dtype=np.int32).reshape(2, 3)
    assert kdml.div(a, np.int32(2), out=out, device=dev) is out
    assert np.array_equal(out.numpy(), a // 2)
    with pytest.raises(kdml.InvalidArgumentError, match="^out: data type must be INT32"):
        kdml.add(a, a, out=dev.empty(kdml.TensorDesc(DT.INT16, (2, 3))), device=dev)


def test_add_uses_add1_for_floats(dev, monkeypatch):
    import kompute_dml.functional.elementwise as fe

    seen = []
    real = fe.compile_cached
    monkeypatch.setattr(fe, "compile_cached", lambda d, desc: seen.append(type(desc).__name__) or real(d, desc))
    kdml.add(np.float32([1]), np.float32([2]), device=dev)
    kdml.add(np.int8([1]), np.int8([2]), device=dev)
    assert seen == ["ElementWiseAdd1Desc", "ElementWiseAddDesc"]
