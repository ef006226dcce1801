"""TOP_K, TOP_K1's first version (ops/top_k_first.py, on TOP_K1's plans) against a numpy reference
written from the page: per sequence the K largest values, largest first, ties by ascending index
(a stable argsort on the values' descending ranks: -0 equal to +0, every NaN above +inf), values bit
for bit the input's; every type of the page's table, every axis, one tile and several, strided
outputs poisoned first with every other byte unchanged, strided and offset inputs; the page's three
examples exactly; the tables' feature levels and refused descriptors."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from helpers import assert_output, compile_at_level, place, poison_against, random_strides, random_values

import kompute_dml as kdml

DT = kdml.DataType
FL = kdml.FeatureLevel
TD = kdml.TensorDesc
TYPES = [DT.FLOAT32, DT.FLOAT16, DT.INT8, DT.UINT8, DT.INT16, DT.UINT16, DT.INT32, DT.UINT32, DT.INT64, DT.UINT64]


def reference(x, k, axis):
    xm = np.moveaxis(x, axis, -1)
    flat = xm.reshape(-1, xm.shape[-1])
    idx = np.empty((flat.shape[0], k), np.int64)
    for r, seq in enumerate(flat):
        _, rank = np.unique(seq, return_inverse=True)  # -0 == +0; every NaN one value, the largest
        idx[r] = np.argsort(-rank.reshape(-1), kind="stable")[:k]
    vals = np.take_along_axis(flat, idx, 1)
    shape = (*xm.shape[:-1], k)
    return np.moveaxis(vals.reshape(shape), -1, axis), np.moveaxis(idx.reshape(shape), -1, axis)


def values_of(rng, dt, shape):
    v = random_values(rng, dt, shape).reshape(-1)
    n = v.size // 2
    v[rng.choice(v.size, n // 2, replace=False)] = v[rng.choice(v.size, n // 2)]  # repeated values: ties
    return v.reshape(shape)


@pytest.mark.parametrize("dt", TYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("shape, axis, k", [((2, 3, 4, 9), 3, 4), ((2, 5, 3, 4), 1, 5), ((3, 7, 2), 0, 1),
                                            ((1, 1, 2, 1500), 3, 3)], ids=["last", "inner", "3d", "tiles"])
def test_against_numpy(dev, rng, dt, shape, axis, k):
    x = values_of(rng, dt, shape)
    want_v, want_i = reference(x, k, axis)
    idt = DT.UINT64 if dt in (DT.INT64, DT.UINT64) else DT.UINT32
    xd = TD(dt, shape, random_strides(rng, shape, allow_broadcast=False))
    vd = TD(dt, want_v.shape, random_strides(rng, want_v.shape, allow_broadcast=False))
    idd = TD(idt, want_i.shape, random_strides(rng, want_i.shape, allow_broadcast=False))
    tx, _ = place(dev, rng, xd, x)
    tv, _ = place(dev, rng, vd)
    ti, _ = place(dev, rng, idd)
    before_v, before_i = poison_against(tv, want_v, rng), poison_against(ti, want_i, rng)
    dev.compile(kdml.TopKDesc(xd, vd, idd, axis, k)).execute([tx], [tv, ti])
    assert_output(tv, before_v, want_v)
    assert_output(ti, before_i, want_i)


@pytest.mark.parametrize("x, axis, k, want_v, want_i", [
    ([[0, 1, 10, 11], [3, 2, 9, 8], [4, 5, 6, 7]], 3, 2, [[11, 10], [9, 8], [7, 6]], [[3, 2], [2, 3], [3, 2]]),
    ([[0, 1, 10, 11], [3, 2, 9, 8], [4, 5, 6, 7]], 2, 2, [[4, 5, 10, 11], [3, 2, 9, 8]], [[2, 2, 0, 0], [1, 1, 1, 1]]),
    ([[1, 2, 2, 3], [3, 4, 5, 5], [6, 6, 6, 6]], 3, 3, [[3, 2, 2], [5, 5, 4], [6, 6, 6]], [[3, 1, 2], [2, 3, 1], [0, 1, 2]]),
], ids=["example1", "example2-axis", "example3-ties"])
def test_the_pages_examples(dev, rng, x, axis, k, want_v, want_i):
    x = np.array(x, np.float32).reshape(1, 1, 3, 4)
    want_v = np.array(want_v, np.float32).reshape(1, 1, *np.shape(want_v))
    want_i = np.array(want_i, np.uint32).reshape(want_v.shape)
    xd = TD(DT.FLOAT32, x.shape)
    vd, idd = TD(DT.FLOAT32, want_v.shape), TD(DT.UINT32, want_v.shape)
    tx, _ = place(dev, rng, xd, x)
    tv, _ = place(dev, rng, vd)
    ti, _ = place(dev, rng, idd)
    dev.compile(kdml.TopKDesc(xd, vd, idd, axis, k)).execute([tx], [tv, ti])
    np.testing.assert_array_equal(tv.numpy(), want_v)
    np.testing.assert_array_equal(ti.numpy(), want_i)


F = DT.FLOAT32
BASE = kdml.TopKDesc(TD(F, (1, 1, 3, 4)), TD(F, (1, 1, 3, 2)), TD(DT.UINT32, (1, 1, 3, 2)), 3, 2)


@pytest.mark.parametrize("change, field", [
    (dict(axis=4), "axis"),
    (dict(axis=-1), "axis"),
    (dict(k=0), "k"),
    (dict(k=5), "k"),
    (dict(k=2.0), "k"),
    (dict(output_value_tensor=TD(F, (1, 1, 3, 3))), "output_value_tensor.sizes"),
    (dict(output_index_tensor=TD(DT.UINT32, (1, 3, 2))), "output_index_tensor.sizes"),
    (dict(output_value_tensor=TD(DT.FLOAT16, (1, 1, 3, 2))), "output_value_tensor.data_type"),
    (dict(output_index_tensor=TD(DT.UINT32, (1, 1, 3, 2), (0, 0, 1, 0))), "output_index_tensor"),
])
def test_refused_descriptors_name_their_field(dev, change, field):
    with pytest.raises(kdml.InvalidArgumentError, match=f"^{field}"):
        dev.compile(dataclasses.replace(BASE, **change))
    with pytest.raises(kdml.UnsupportedError, match="^output_index_tensor"):
        dev.compile(dataclasses.replace(BASE, output_index_tensor=TD(DT.INT32, (1, 1, 3, 2))))


def test_k_equal_to_the_axis_sorts_the_whole_sequence(dev):
    x = kdml.TensorDesc(F, (1, 1, 1, 4))
    op = dev.compile(kdml.TopKDesc(x, x, TD(DT.UINT32, (1, 1, 1, 4)), 3, 4))
    tx = dev.tensor(np.array([2, 5, 1, 5], np.float32).reshape(x.sizes))
    tv, ti = dev.tensor(np.zeros(x.sizes, np.float32)), dev.tensor(np.zeros(x.sizes, np.uint32))
    op.execute([tx], [tv, ti])
    np.testing.assert_array_equal(tv.numpy().ravel(), [5, 5, 2, 1])
    np.testing.assert_array_equal(ti.numpy().ravel(), [1, 3, 0, 2])


def test_the_tables_feature_levels():
    with pytest.raises(kdml.UnsupportedError, match="TOP_K"):
        compile_at_level(FL.FL_1_0, BASE)
    compile_at_level(FL.FL_2_0, BASE)
    i32 = dataclasses.replace(BASE, input_tensor=TD(DT.INT32, (1, 1, 3, 4)), output_value_tensor=TD(DT.INT32, (1, 1, 3, 2)))
    with pytest.raises(kdml.UnsupportedError, match="^input_tensor"):
        compile_at_level(FL.FL_2_0, i32)
    compile_at_level(FL.FL_2_1, i32)
    two = kdml.TopKDesc(TD(F, (3, 4)), TD(F, (3, 2)), TD(DT.UINT32, (3, 2)), 1, 2)
    with pytest.raises(kdml.UnsupportedError, match="^input_tensor"):
        compile_at_level(FL.FL_2_1, two)
    compile_at_level(FL.FL_3_1, two)
    wide = kdml.TopKDesc(TD(DT.INT64, (3, 4)), TD(DT.INT64, (3, 2)), TD(DT.UINT64, (3, 2)), 1, 2)
    with pytest.raises(kdml.UnsupportedError, match="^input_tensor"):
        compile_at_level(FL.FL_3_1, wide)
    compile_at_level(FL.FL_5_0, wide)
