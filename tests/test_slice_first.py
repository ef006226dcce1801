"""SLICE, SLICE1's first version (ops/slice_first.py: a strided copy) against numpy's basic slicing
x[o0:o0 + s0 * t0:t0, ...]: every type of the page's table, ranks 1 to 8, strided inputs and outputs
at random offsets, outputs poisoned first and every other byte unchanged (bit copies), both the
transfer and the shader paths; the page's two examples; the tables' feature levels; refused
descriptors (error class and field)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from helpers import assert_output, compile_at_level, place, poison_against, random_strides, random_values

import kompute_dml as kdml

DT = kdml.DataType
TD = kdml.TensorDesc
FL = kdml.FeatureLevel
TYPES = [DT.FLOAT32, DT.FLOAT16, DT.INT32, DT.INT16, DT.INT8, DT.UINT32, DT.UINT16, DT.UINT8, DT.INT64, DT.UINT64,
         DT.FLOAT64]


def reference(x, offsets, sizes, strides):
    return x[tuple(slice(o, o + (s - 1) * t + 1, t) for o, s, t in zip(offsets, sizes, strides))]


def random_slice(rng, shape):
    offsets, sizes, strides = [], [], []
    for n in shape:
        t = int(rng.integers(1, 4))
        s = int(rng.integers(1, (n - 1) // t + 2))
        o = int(rng.integers(0, n - (s - 1) * t))
        offsets.append(o), sizes.append(s), strides.append(t)
    return tuple(offsets), tuple(sizes), tuple(strides)


@pytest.mark.parametrize("dt", TYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("shape", [(9,), (4, 7), (2, 3, 8), (3, 4, 5, 6), (2, 3, 4, 3, 5), (2, 1, 3, 2, 2, 3, 2, 4)],
                         ids=lambda s: f"{len(s)}d")
def test_against_numpy(xdev, rng, dt, shape):
    offsets, sizes, strides = random_slice(rng, shape)
    x = random_values(rng, dt, shape)
    want = reference(x, offsets, sizes, strides)
    assert want.shape == sizes
    xd = TD(dt, shape, random_strides(rng, shape, allow_broadcast=False))
    yd = TD(dt, sizes, random_strides(rng, sizes, allow_broadcast=False))
    tx, _ = place(xdev, rng, xd, x)
    ty, _ = place(xdev, rng, yd)
    before = poison_against(ty, want, rng)
    xdev.compile(kdml.SliceDesc(xd, yd, offsets, sizes, strides)).execute([tx], [ty])
    assert_output(ty, before, want)


def test_broadcast_input(dev, rng):
    """An input with a stride-0 dimension (a broadcast view) is read as its logical values."""
    x = random_values(rng, DT.FLOAT32, (1, 1, 5, 6))
    xd = TD(DT.FLOAT32, (1, 4, 5, 6), (0, 0, 6, 1))
    yd = TD(DT.FLOAT32, (1, 2, 2, 3))
    tx, _ = place(dev, rng, xd, np.broadcast_to(x, (1, 4, 5, 6)))
    ty, _ = place(dev, rng, yd)
    want = reference(np.broadcast_to(x, (1, 4, 5, 6)), (0, 1, 1, 0), (1, 2, 2, 3), (1, 2, 3, 2))
    before = poison_against(ty, want, rng)
    dev.compile(kdml.SliceDesc(xd, yd, (0, 1, 1, 0), (1, 2, 2, 3), (1, 2, 3, 2))).execute([tx], [ty])
    assert_output(ty, before, want)


X = np.arange(1, 17, dtype=np.float32).reshape(1, 1, 4, 4)  # the page's input


@pytest.mark.parametrize("offsets, sizes, strides, want", [
    ((0, 0, 1, 2), (1, 1, 3, 2), (1, 1, 1, 1), [[7, 8], [11, 12], [15, 16]]),  # Example 1. Contiguous slice
    ((0, 0, 1, 0), (1, 1, 2, 2), (1, 1, 2, 3), [[5, 8], [13, 16]]),  # Example 2. Strided slice
], ids=["contiguous", "strided"])
def test_the_pages_examples(dev, rng, offsets, sizes, strides, want):
    xd, yd = TD(DT.FLOAT32, X.shape), TD(DT.FLOAT32, sizes)
    tx, _ = place(dev, rng, xd, X)
    ty, _ = place(dev, rng, yd)
    dev.compile(kdml.SliceDesc(xd, yd, offsets, sizes, strides)).execute([tx], [ty])
    np.testing.assert_array_equal(ty.numpy()[0, 0], np.array(want, np.float32))


F = DT.FLOAT32
BASE = kdml.SliceDesc(TD(F, (1, 1, 4, 4)), TD(F, (1, 1, 2, 2)), (0, 0, 1, 0), (1, 1, 2, 2), (1, 1, 2, 3))


@pytest.mark.parametrize("change, field", [
    (dict(offsets=(0, 0, 1)), "offsets"),
    (dict(sizes=(1, 1, 2, 2, 1)), "sizes"),
    (dict(strides=(1, 1, 2)), "strides"),
    (dict(offsets=(0, 0, -1, 0)), "offsets\\[2\\]"),
    (dict(strides=(1, 1, 2, 1 << 32)), "strides\\[3\\]"),
    (dict(offsets=(0, 0, 1.0, 0)), "offsets\\[2\\]"),
    (dict(strides=(1, 1, 0, 3)), "strides\\[2\\]"),
    (dict(sizes=(1, 1, 2, 1)), "sizes"),
    (dict(offsets=(0, 0, 2, 0)), "offsets\\[2\\]"),  # 2 + 1 * 2 = 4: past the input's 4 rows
    (dict(strides=(1, 1, 2, 4)), "offsets\\[3\\]"),  # 0 + 1 * 4 = 4
    (dict(output_tensor=TD(DT.FLOAT16, (1, 1, 2, 2))), "output_tensor.data_type"),
    (dict(output_tensor=TD(F, (1, 2, 2)), sizes=(1, 2, 2)), "output_tensor.sizes"),
    (dict(output_tensor=TD(F, (1, 1, 2, 2), (0, 0, 0, 1))), "output_tensor"),  # overlapping output
])
def test_refused_descriptors_name_their_field(dev, change, field):
    with pytest.raises(kdml.InvalidArgumentError, match=f"^{field}"):
        dev.compile(dataclasses.replace(BASE, **change))


def test_the_tables_feature_levels():
    compile_at_level(FL.FL_1_0, BASE)
    x8, y8 = TD(DT.INT8, (1, 1, 4, 4)), TD(DT.INT8, (1, 1, 2, 2))
    with pytest.raises(kdml.UnsupportedError, match="^input_tensor"):
        compile_at_level(FL.FL_1_0, dataclasses.replace(BASE, input_tensor=x8, output_tensor=y8))
    compile_at_level(FL.FL_2_1, dataclasses.replace(BASE, input_tensor=x8, output_tensor=y8))
    three = kdml.SliceDesc(TD(F, (1, 4, 4)), TD(F, (1, 2, 2)), (0, 1, 0), (1, 2, 2), (1, 2, 3))
    with pytest.raises(kdml.UnsupportedError, match="^input_tensor"):
        compile_at_level(FL.FL_2_1, three)
    compile_at_level(FL.FL_3_0, three)
    x64, y64 = TD(DT.INT64, (4, 4)), TD(DT.INT64, (2, 2))
    wide = kdml.SliceDesc(x64, y64, (1, 0), (2, 2), (2, 3))
    with pytest.raises(kdml.UnsupportedError, match="^input_tensor"):
        compile_at_level(FL.FL_3_0, wide)
    compile_at_level(FL.FL_4_1, wide)
    with pytest.raises(kdml.UnsupportedError, match="SLICE"):  # the page's 5-dimension limit before 3_0
        compile_at_level(FL.FL_2_1, kdml.SliceDesc(TD(F, (1,) * 6), TD(F, (1,) * 6), (0,) * 6, (1,) * 6, (1,) * 6))
