"""ONE_HOT (ops/one_hot.py, shaders/indexing.comp) against a numpy reference written here: every
value type (8 to 64 bits) with every index type, 1-8 dimensions, every axis, negative and
out-of-range indices (the sequence stays OffValue, as the page says), values of any shape (OnValue:
element 1 along the fastest-changing dimension of size > 1), strided and broadcast inputs, random
offsets with guard bytes, poisoned outputs whose every other byte must stay unchanged, the page's
examples, the helper (ONNX OneHot) and refusals naming the field."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from helpers import assert_output, place, poison_against, random_strides, random_values, read_logical

import kompute_dml as kdml
from kompute_dml.core.dtypes import HIGHEST_FEATURE_LEVEL
from kompute_dml.ops.one_hot import ONE_HOT

DT = kdml.DataType
TD = kdml.TensorDesc
_top = ONE_HOT.require(HIGHEST_FEATURE_LEVEL)
TYPES = sorted(_top.tensor("values_tensor").types, key=lambda d: d.value)
ITYPES = sorted(_top.tensor("indices_tensor").types, key=lambda d: d.value)


def one_hot_ref(idx: np.ndarray, off, on, axis: int, depth: int) -> np.ndarray:
    """out[..., k at axis, ...] = on where idx[..., 0 at axis, ...] (negative: + depth) == k."""
    shape = list(idx.shape)
    shape[axis] = depth
    out = np.empty(shape, np.asarray(off).dtype)
    for pos in np.ndindex(*shape):
        src = list(pos)
        src[axis] = 0
        v = int(idx[tuple(src)])
        v = v + depth if v < 0 else v
        out[pos] = on if v == pos[axis] else off
    return out


def run(dev, rng, dt, it, ys, axis, vs):
    n = len(ys)
    js = tuple(1 if d == axis else s for d, s in enumerate(ys))
    depth = ys[axis]
    signed = it.is_signed
    iv = rng.integers(-depth - 2 if signed else 0, depth + 3, size=js).astype(np.int64).astype(it.numpy_dtype)

    def lay(s, b):
        return None if rng.random() < 0.3 else random_strides(rng, s, allow_broadcast=b)

    idd, vd, yd = TD(it, js, lay(js, True)), TD(dt, vs, lay(vs, False)), TD(dt, ys, lay(ys, False))
    ind, iraw = place(dev, rng, idd, iv)
    v, vraw = place(dev, rng, vd, random_values(rng, dt, vs))
    y, _ = place(dev, rng, yd)
    vals = read_logical(vraw, v.offset, vd)
    on_at = [0] * n
    on_at[max(d for d in range(n) if vs[d] > 1)] = 1
    expected = one_hot_ref(read_logical(iraw, ind.offset, idd), vals.reshape(-1)[0], vals[tuple(on_at)], axis, depth)
    before = poison_against(y, expected, rng)
    dev.compile(kdml.OneHotDesc(idd, vd, yd, axis)).execute([ind, v], [y])
    assert_output(y, before, expected)


CASES = [(t, i) for t in TYPES for i in ITYPES]


@pytest.mark.parametrize(("dt", "it"), CASES, ids=[f"{t.name}-{i.name}" for t, i in CASES])
def test_one_hot_every_type(dev, rng, dt, it):
    for n in range(1, 9):
        ys = [int(rng.integers(1, 4)) for _ in range(n)]
        axis = int(rng.integers(0, n))
        ys[axis] = int(rng.integers(1, 6))
        vs = [1] * n
        if n >= 2 and rng.random() < 0.5:  # OnValue along a dimension that is not the last
            d = int(rng.integers(0, n - 1))
            vs[d] = 3
        else:
            vs[-1] = 2
        run(dev, rng, dt, it, tuple(ys), axis, tuple(vs))


def test_page_examples(dev):
    def go(idx, js, it, vals, vs, axis, want, ys):
        y = dev.tensor(np.zeros(ys, np.float32))
        dev.compile(kdml.OneHotDesc(TD(it, js), TD(DT.FLOAT32, vs), TD(DT.FLOAT32, ys), axis)).execute(
            [dev.tensor(np.array(idx, it.numpy_dtype).reshape(js)), dev.tensor(np.array(vals, np.float32).reshape(vs))],
            [y])
        assert y.numpy().reshape(-1).tolist() == want

    go([0, 3, 2], (1, 1, 3, 1), DT.UINT32, [0, 1], (1, 1, 1, 2), 3, [1, 0, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0], (1, 1, 3, 4))
    go([0, 2, 1, 0], (1, 1, 1, 4), DT.UINT32, [0, 1], (1, 1, 1, 2), 2, [1, 0, 0, 1, 0, 0, 1, 0, 0, 1, 0, 0],
       (1, 1, 3, 4))
    go([0, 3, 2], (1, 1, 3, 1), DT.UINT32, [4, 2, 9], (1, 1, 3, 1), 3, [2, 4, 4, 4, 4, 4, 4, 2, 4, 4, 2, 4],
       (1, 1, 3, 4))
    go([-3, 100, 3], (1, 1, 3, 1), DT.INT32, [0, 1], (1, 1, 1, 2), 3, [0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
       (1, 1, 3, 4))


def test_helper_onnx(dev):
    idx = np.array([[0, 2], [1, -1]], np.int64)
    for axis in (-3, -2, -1, 0, 1, 2):
        got = kdml.one_hot(idx, 3, np.array([0, 5], np.float32), axis, device=dev).numpy()
        a = axis % 3
        want = one_hot_ref(np.expand_dims(idx, a), np.float32(0), np.float32(5), a, 3)
        assert got.tolist() == want.tolist()
    assert kdml.one_hot(np.int64(1), 3, np.array([2, 7], np.int8), device=dev).numpy().tolist() == [2, 7, 2]


def test_refusals(dev):
    ok = kdml.OneHotDesc(TD(DT.UINT32, (1, 1, 3, 1)), TD(DT.FLOAT32, (1, 1, 1, 2)), TD(DT.FLOAT32, (1, 1, 3, 4)), 3)
    dev.compile(ok)
    for change, field in (({"axis": 4}, "axis"), ({"axis": 2}, "indices_tensor.sizes"),
                          ({"values_tensor": TD(DT.FLOAT32, (1, 1, 1, 1))}, "values_tensor.sizes"),
                          ({"output_tensor": TD(DT.FLOAT16, (1, 1, 3, 4))}, "output_tensor.data_type"),
                          ({"values_tensor": TD(DT.FLOAT32, (1, 2))}, "values_tensor.sizes")):
        with pytest.raises(kdml.InvalidArgumentError, match=f"^{field}"):
            dev.compile(dataclasses.replace(ok, **change))
    with pytest.raises(kdml.InvalidArgumentError, match="^depth"):
        kdml.one_hot(np.array([0]), 0, np.array([0, 1], np.float32), device=dev)
