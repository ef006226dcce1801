"""MATRIX_MULTIPLY_INTEGER (ops/matrix_multiply_integer.py, on CONVOLUTION_INTEGER's 1 x 1 plans): exact
INT32 against a numpy int64 oracle (sums modulo 2^32) for every INT8 / UINT8 combination, zero points
absent, per tensor, per row (A), per column (B) and both (the subtraction path), zero points and values
at the types' ends, strided and broadcast (stride-0) operands, batches along which either operand varies
(a dispatch each) or not; outputs poisoned first and every byte outside them unchanged; the refused
descriptors (error class and field); the helper."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_output, place, poison_against, random_strides

import kompute_dml as kdml
from kompute_dml.ops.matrix_multiply_integer import MatrixMultiplyIntegerDesc as Desc

DT = kdml.DataType
TD = kdml.TensorDesc
Q8 = (DT.UINT8, DT.INT8)


def oracle(a, b, za, zb):
    """int64 products and sums, wrapped to int32. a (B, C, M, K), b (B, C, K, N); za (M, 1) / scalar, zb (N,) / scalar."""
    acc = np.matmul(a.astype(np.int64) - za, b.astype(np.int64) - zb)
    return ((acc + 2**31) % 2**32 - 2**31).astype(np.int32)


def values(rng, dt, shape):
    info = np.iinfo(dt.numpy_dtype)
    v = rng.integers(info.min, info.max + 1, shape).astype(dt.numpy_dtype)
    if v.size > 2:
        v.reshape(-1)[:2] = (info.min, info.max)
    return v


def run(dev, rng, a, b, za, zb, *, a_strides=None, b_strides=None, y_strides=None, b_broadcast=False):
    nb, nc, m, k = a.shape
    n = b.shape[-1]
    ad = TD(DT.from_numpy(a.dtype), a.shape, a_strides)
    if b_broadcast:  # one B matrix for every batch: stride 0
        bd = TD(DT.from_numpy(b.dtype), (nb, nc, k, n), (0, 0, n, 1))
        tb, _ = place(dev, rng, TD(bd.data_type, (k, n)), b[0, 0])
        tb = kdml.Tensor(tb.buffer, bd, tb.offset)
    else:
        bd = TD(DT.from_numpy(b.dtype), b.shape, b_strides)
        tb, _ = place(dev, rng, bd, b)
    ta, _ = place(dev, rng, ad, a)
    tza = tzb = None
    if za is not None:
        tza, _ = place(dev, rng, TD(ad.data_type, (1, 1, za.size, 1)), za.reshape(-1, 1))
    if zb is not None:
        tzb, _ = place(dev, rng, TD(bd.data_type, (1, 1, 1, zb.size)), zb.reshape(-1))
    yd = TD(DT.INT32, (nb, nc, m, n), y_strides)
    ty, _ = place(dev, rng, yd)
    want = oracle(a, np.broadcast_to(b, (nb, nc, k, n)), 0 if za is None else za.astype(np.int64).reshape(-1, 1) if za.size > 1
                  else np.int64(za.reshape(())), 0 if zb is None else zb.astype(np.int64).reshape(-1))
    before = poison_against(ty, want, rng)
    desc = Desc(ad, None if tza is None else tza.desc, bd, None if tzb is None else tzb.desc, yd)
    op = dev.compile(desc)
    op.execute([ta, tza, tb, tzb], [ty])
    assert_output(ty, before, want)
    return op


ZPS = ["none", "tensor", "row", "column", "both"]


@pytest.mark.parametrize("zps", ZPS)
@pytest.mark.parametrize("types", [(a, b) for a in Q8 for b in Q8], ids=lambda t: f"{t[0].name}x{t[1].name}")
def test_against_int64_oracle(dev, rng, types, zps):
    (ta, tb), (nb, nc, m, k, n) = types, (2, 3, 5, 9, 4)
    a, b = values(rng, ta, (nb, nc, m, k)), values(rng, tb, (nb, nc, k, n))
    za = values(rng, ta, (m, 1) if zps in ("row", "both") else (1,)) if zps != "none" and zps != "column" else None
    zb = values(rng, tb, (n,) if zps in ("column", "both") else (1,)) if zps not in ("none", "row") else None
    run(dev, rng, a, b, za, zb)


@pytest.mark.parametrize("zps", ZPS)
@pytest.mark.parametrize("layout", ["strided", "b-broadcast", "a-batched-only"])
def test_strided_and_batched(dev, rng, zps, layout):
    nb, nc, m, k, n = 2, 2, 6, 37, 7
    a, b = values(rng, DT.UINT8, (nb, nc, m, k)), values(rng, DT.INT8, (nb, nc, k, n))
    za = values(rng, DT.UINT8, (m, 1) if zps in ("row", "both") else (1,)) if zps in ("tensor", "row", "both") else None
    zb = values(rng, DT.INT8, (n,) if zps in ("column", "both") else (1,)) if zps in ("tensor", "column", "both") else None
    if layout == "strided":
        run(dev, rng, a, b, za, zb, a_strides=random_strides(rng, a.shape, allow_broadcast=False),
            b_strides=random_strides(rng, b.shape, allow_broadcast=False),
            y_strides=random_strides(rng, (nb, nc, m, n), allow_broadcast=False))
    else:
        run(dev, rng, a, b[:1, :1], za, zb, b_broadcast=True,
            y_strides=random_strides(rng, (nb, nc, m, n), allow_broadcast=False) if layout == "a-batched-only" else None)


def test_zero_points_at_the_ends_and_long_sums(dev, rng):
    """Values and zero points at the types' ends: |products| up to 255 * 255, K = 2000 (sums beyond 2^24)."""
    a = np.full((1, 1, 3, 2000), 255, np.uint8)
    b = np.full((1, 1, 2000, 2), -128, np.int8)
    for za, zb in ((np.array([0], np.uint8), np.array([127], np.int8)), (np.array([0, 255, 0], np.uint8), np.array([127, -128], np.int8))):
        run(dev, rng, a, b, za, zb)


def test_dispatches_follow_the_filter_operand(dev, rng):
    """A per-row A zero point makes A the filter: a batched A takes a dispatch per batch; a shared B one dispatch."""
    a, b = values(rng, DT.UINT8, (3, 1, 4, 5)), values(rng, DT.UINT8, (3, 1, 5, 6))
    op = run(dev, rng, a, b, values(rng, DT.UINT8, (4, 1)), None)
    assert len(op.plans) == 3
    op = run(dev, rng, a, b[:1], None, values(rng, DT.UINT8, (6,)), b_broadcast=True)
    assert len(op.plans) == 1


def _desc(**kw):
    d = dict(a=TD(DT.UINT8, (1, 2, 3, 4)), az=TD(DT.UINT8, (1, 1, 1, 1)), b=TD(DT.INT8, (1, 2, 4, 5)), bz=TD(DT.INT8, (1, 1, 1, 5)),
             y=TD(DT.INT32, (1, 2, 3, 5)))
    d.update(kw)
    return Desc(d["a"], d["az"], d["b"], d["bz"], d["y"])


@pytest.mark.parametrize("kw, error, field", [
    ({"az": TD(DT.INT8, (1, 1, 1, 1))}, kdml.InvalidArgumentError, "a_zero_point_tensor.data_type"),
    ({"bz": TD(DT.UINT8, (1, 1, 1, 5))}, kdml.InvalidArgumentError, "b_zero_point_tensor.data_type"),
    ({"az": TD(DT.UINT8, (1, 1, 1, 3))}, kdml.InvalidArgumentError, "a_zero_point_tensor.sizes"),
    ({"bz": TD(DT.INT8, (1, 1, 5, 1))}, kdml.InvalidArgumentError, "b_zero_point_tensor.sizes"),
    ({"b": TD(DT.INT8, (1, 2, 3, 5))}, kdml.InvalidArgumentError, "b_tensor.sizes"),
    ({"b": TD(DT.INT8, (2, 2, 4, 5))}, kdml.InvalidArgumentError, "b_tensor.sizes"),
    ({"y": TD(DT.INT32, (1, 2, 3, 4))}, kdml.InvalidArgumentError, "output_tensor.sizes"),
    ({"y": TD(DT.INT32, (1, 2, 3, 5), (30, 0, 5, 1))}, kdml.InvalidArgumentError, "output_tensor"),
    ({"y": TD(DT.FLOAT32, (1, 2, 3, 5))}, kdml.UnsupportedError, "output_tensor"),
    ({"a": TD(DT.INT16, (1, 2, 3, 4))}, kdml.UnsupportedError, "a_tensor"),
    ({"a": TD(DT.UINT8, (2, 3, 4)), "b": TD(DT.INT8, (2, 4, 5)), "y": TD(DT.INT32, (2, 3, 5))}, kdml.UnsupportedError, "a_tensor"),
])
def test_refused(dev, kw, error, field):
    with pytest.raises(error, match="^" + field.replace(".", r"\.")):
        dev.compile(_desc(**kw))


def test_helper(dev, rng):
    a, b = values(rng, DT.INT8, (3, 5)), values(rng, DT.UINT8, (5, 4))
    za, zb = np.int8(-3), values(rng, DT.UINT8, (4,))
    got = kdml.matrix_multiply_integer(a, b, za, zb, device=dev).numpy()
    np.testing.assert_array_equal(got, oracle(a, b, np.int64(za), zb.astype(np.int64)))
    got = kdml.matrix_multiply_integer(a[None], b[None], values(rng, DT.INT8, (3,)), None, device=dev)
    assert got.shape == (1, 3, 4)
