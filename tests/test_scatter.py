"""SCATTER (= SCATTER_ELEMENTS) and SCATTER_ND (ops/scatter.py, shaders/indexing.comp) against
numpy references written here (loops writing the updates in the indices' row-major order, so
duplicates: the last wins, or folded in that order by kompute_dml's `reduction` extension):
every data type (8 to 64 bits) with every index type, 1-8 dimensions, every axis, duplicates,
negative indices, strided and broadcast inputs, random offsets with guard bytes, poisoned outputs
whose every other byte must stay unchanged, the pages' examples, the helpers, refusals naming the
field, out-of-range indices raising with nothing written."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest
from helpers import assert_output, place, poison_against, random_strides, random_values, read_logical

import kompute_dml as kdml
from kompute_dml.core.dtypes import HIGHEST_FEATURE_LEVEL
from kompute_dml.ops.scatter import SCATTER, SCATTER_ND

DT = kdml.DataType
TD = kdml.TensorDesc
R = kdml.ScatterReduction
TYPES = sorted(SCATTER.require(HIGHEST_FEATURE_LEVEL).tensor("input_tensor").types, key=lambda d: d.value)
ND_TYPES = sorted(SCATTER_ND.require(HIGHEST_FEATURE_LEVEL).tensor("input_tensor").types, key=lambda d: d.value)
ITYPES = sorted(SCATTER.require(HIGHEST_FEATURE_LEVEL).tensor("indices_tensor").types, key=lambda d: d.value)


def fold(red: R, acc: np.ndarray, u: np.ndarray) -> np.ndarray:
    """One update into the output: onnxruntime's functors (max / min as std::max / std::min)."""
    with np.errstate(over="ignore", invalid="ignore"):
        if red == R.NONE:
            return u
        if red == R.ADD:
            return acc + u
        if red == R.MULTIPLY:
            return acc * u
        if red == R.MAX:
            return np.where(acc < u, u, acc)
        return np.where(u < acc, u, acc)


def norm(v, n: int) -> int:
    v = int(v)
    return v + n if v < 0 else v


def scatter_elements_ref(x, idx, upd, axis, red=R.NONE):
    out = x.copy()
    for pos in np.ndindex(*idx.shape):
        t = list(pos)
        t[axis] = norm(idx[pos], x.shape[axis])
        out[tuple(t)] = fold(red, out[tuple(t)], upd[pos])
    return out


def scatter_nd_ref(x, idx, upd, red=R.NONE):
    out = x.copy()
    for pos in np.ndindex(*idx.shape[:-1]):
        t = tuple(norm(v, x.shape[j]) for j, v in enumerate(idx[pos].astype(object)))
        out[t] = fold(red, out[t], upd[pos])
    return out


def indices(rng, dt: DT, shape, n: int) -> np.ndarray:
    signed = dt.is_signed
    v = rng.integers(-n if signed else 0, n, size=shape)
    if v.size > 1:
        v.reshape(-1)[int(rng.integers(0, v.size))] = -n if signed else n - 1
    return v.astype(np.int64).astype(dt.numpy_dtype)


def layout(rng, sizes, is_input):
    return None if rng.random() < 0.3 else random_strides(rng, sizes, allow_broadcast=is_input)


def sizes_for(rng, rank: int, most: int = 200) -> list[int]:
    s = [int(rng.integers(1, 5)) for _ in range(rank)]
    while np.prod(s) > most:
        s[int(np.argmax(s))] //= 2
    return [max(1, v) for v in s]


def values(rng, dt: DT, shape, red: R):
    if red in (R.ADD, R.MULTIPLY) and dt == DT.FLOAT32:  # finite sums: no inf - inf in the order's doubt
        return rng.standard_normal(shape).astype(np.float32)
    return random_values(rng, dt, shape)


def run_elements(dev, rng, dt, it, xs, axis, red=R.NONE):
    js = list(xs)
    js[axis] = int(rng.integers(1, 5))
    js = tuple(js)
    xd, idd, ud, yd = (TD(dt, tuple(xs), layout(rng, xs, True)), TD(it, js, layout(rng, js, True)),
                       TD(dt, js, layout(rng, js, True)), TD(dt, tuple(xs), layout(rng, xs, False)))
    x, xraw = place(dev, rng, xd, values(rng, dt, xs, red))
    ind, iraw = place(dev, rng, idd, indices(rng, it, js, xs[axis]))
    u, uraw = place(dev, rng, ud, values(rng, dt, js, red))
    y, _ = place(dev, rng, yd)
    expected = scatter_elements_ref(read_logical(xraw, x.offset, xd), read_logical(iraw, ind.offset, idd),
                                    read_logical(uraw, u.offset, ud), axis, red)
    before = poison_against(y, expected, rng)
    dev.compile(kdml.ScatterDesc(xd, idd, ud, yd, axis, red)).execute([x, ind, u], [y])
    assert_output(y, before, expected)
    assert (x.buffer.read(), ind.buffer.read(), u.buffer.read()) == (xraw, iraw, uraw)


def run_nd(dev, rng, dt, it, n, red=R.NONE):
    ic, jc = int(rng.integers(1, n + 1)), int(rng.integers(1, n + 1))
    q = int(rng.integers(1, ic + 1))
    while (jc - 1) + (ic - q) > n:
        jc -= 1
    xin = sizes_for(rng, ic, 100)
    tdims = sizes_for(rng, jc - 1, 12)
    xs, js = (1,) * (n - ic) + tuple(xin), (1,) * (n - jc) + (*tdims, q)
    core = (*tdims, *xin[q:])
    us = (1,) * (n - len(core)) + core
    xd, idd, ud, yd = (TD(dt, xs, layout(rng, xs, True)), TD(it, js, layout(rng, js, False)),
                       TD(dt, us, layout(rng, us, True)), TD(dt, xs, layout(rng, xs, False)))
    tup = np.concatenate([indices(rng, it, (*tdims, 1), xin[j]) for j in range(q)], axis=-1)
    x, xraw = place(dev, rng, xd, values(rng, dt, xs, red))
    ind, iraw = place(dev, rng, idd, tup.reshape(js))
    u, uraw = place(dev, rng, ud, values(rng, dt, us, red))
    y, _ = place(dev, rng, yd)
    expected = scatter_nd_ref(read_logical(xraw, x.offset, xd).reshape(xin), tup,
                              read_logical(uraw, u.offset, ud).reshape(core), red).reshape(xs)
    before = poison_against(y, expected, rng)
    dev.compile(kdml.ScatterNdDesc(xd, idd, ud, yd, ic, jc, red)).execute([x, ind, u], [y])
    assert_output(y, before, expected)
    assert (x.buffer.read(), ind.buffer.read(), u.buffer.read()) == (xraw, iraw, uraw)


CASES = [(t, i) for t in TYPES for i in ITYPES]


@pytest.mark.parametrize(("dt", "it"), CASES, ids=[f"{t.name}-{i.name}" for t, i in CASES])
def test_scatter_every_type(dev, rng, dt, it):
    for rank in range(1, 9):
        run_elements(dev, rng, dt, it, sizes_for(rng, rank), int(rng.integers(0, rank)))


ND_CASES = [(t, i) for t in ND_TYPES for i in ITYPES]


@pytest.mark.parametrize(("dt", "it"), ND_CASES, ids=[f"{t.name}-{i.name}" for t, i in ND_CASES])
def test_scatter_nd_every_type(dev, rng, dt, it):
    for n in range(1, 9):
        run_nd(dev, rng, dt, it, n)


RED_CASES = [(r, t) for r in (R.ADD, R.MULTIPLY, R.MAX, R.MIN) for t in (DT.FLOAT32, DT.INT32, DT.UINT32)]


@pytest.mark.parametrize(("red", "dt"), RED_CASES, ids=[f"{r.name}-{t.name}" for r, t in RED_CASES])
def test_reductions(dev, rng, red, dt):
    """kompute_dml's extension: duplicates folded in row-major order (many of them: few positions)."""
    for rank in (1, 2, 3, 5):
        xs = sizes_for(rng, rank)
        run_elements(dev, rng, dt, DT.INT64, xs, int(rng.integers(0, rank)), red)
        run_nd(dev, rng, dt, DT.INT32, rank, red)


def test_duplicates_last_wins_many(dev, rng):
    """A thousand updates onto 3 positions: the last of each in row-major order, every run."""
    x = np.zeros(3, np.float32)
    idx = rng.integers(0, 3, 1000)
    upd = np.arange(1000, dtype=np.float32)
    want = scatter_elements_ref(x, idx, upd, 0)
    for _ in range(3):
        assert kdml.scatter_elements(x, idx, upd, device=dev).numpy().tolist() == want.tolist()
    got = kdml.scatter_nd(np.zeros((3, 2), np.int16), idx[:, None], np.repeat(upd[:, None], 2, 1).astype(np.int16),
                          device=dev)
    assert got.numpy().tolist() == scatter_nd_ref(np.zeros((3, 2), np.int16), idx[:, None],
                                                  np.repeat(upd[:, None], 2, 1).astype(np.int16)).tolist()


def test_pages_examples(dev):
    y = kdml.scatter_elements(np.arange(5, dtype=np.float32), np.array([3, 1, 3, 0], np.uint32),
                              np.array([5, 6, 7, 8], np.float32), device=dev)
    assert y.numpy().tolist() == [8, 6, 2, 7, 4]
    y = kdml.scatter_elements(np.zeros((3, 3), np.float32), np.array([[1, 0, 2], [0, 2, 1]], np.uint32),
                              np.array([[10, 11, 12], [20, 21, 22]], np.float32), device=dev)
    assert y.numpy().tolist() == [[20, 11, 0], [10, 0, 22], [0, 21, 12]]
    y = kdml.scatter_nd(np.arange(1, 9, dtype=np.float32), np.array([[4], [3], [1], [7]], np.uint32),
                        np.array([9, 10, 11, 12], np.float32), device=dev)
    assert y.numpy().tolist() == [1, 11, 3, 10, 9, 6, 7, 12]


def test_refusals(dev):
    f, u = DT.FLOAT32, DT.UINT32
    x = TD(f, (1, 2, 3, 4))
    el = kdml.ScatterDesc(x, TD(u, (1, 2, 2, 4)), TD(f, (1, 2, 2, 4)), x, 2)
    nd = kdml.ScatterNdDesc(x, TD(u, (1, 1, 2, 2)), TD(f, (1, 1, 2, 4)), x, 3, 2)
    dev.compile(el)
    dev.compile(nd)
    for desc, change, field in (
            (el, {"axis": 4}, "axis"), (el, {"indices_tensor": TD(u, (1, 2, 2, 3))}, "indices_tensor.sizes"),
            (el, {"updates_tensor": TD(f, (1, 2, 1, 4))}, "updates_tensor.sizes"),
            (el, {"output_tensor": TD(f, (1, 2, 3, 5))}, "output_tensor.sizes"),
            (el, {"updates_tensor": TD(DT.INT32, (1, 2, 2, 4))}, "updates_tensor.data_type"),
            (el, {"reduction": 7}, "reduction"),
            (nd, {"updates_tensor": TD(f, (1, 1, 2, 3))}, "updates_tensor.sizes"),
            (nd, {"input_dimension_count": 5}, "input_dimension_count"),
            (nd, {"indices_tensor": TD(u, (1, 1, 2, 4)), "updates_tensor": TD(f, (1, 1, 1, 2))}, "indices_tensor.sizes"),
            (nd, {"indices_tensor": TD(u, (1, 2, 2))}, "indices_tensor.sizes")):
        with pytest.raises(kdml.InvalidArgumentError, match=f"^{field}"):
            dev.compile(dataclasses.replace(desc, **change))
    with pytest.raises(kdml.UnsupportedError, match="^reduction"):
        h = TD(DT.FLOAT16, (1, 2, 3, 4))
        dev.compile(kdml.ScatterDesc(h, TD(u, (1, 2, 2, 4)), TD(DT.FLOAT16, (1, 2, 2, 4)), h, 2, R.ADD))
    with pytest.raises(kdml.InvalidArgumentError, match="^reduction"):
        kdml.scatter_nd(np.zeros(2, np.float32), np.array([[0]]), np.ones(1, np.float32), "sum", device=dev)


@pytest.mark.parametrize("it", ITYPES, ids=str)
def test_out_of_range_raises_nothing_written(dev, rng, it):
    xd, idd, ud = TD(DT.INT8, (3, 4)), TD(it, (2, 4)), TD(DT.INT8, (2, 4))
    op = dev.compile(kdml.ScatterDesc(xd, idd, ud, xd, 0))
    ndop = dev.compile(kdml.ScatterNdDesc(xd, TD(it, (2, 1)), TD(DT.INT8, (2, 4)), xd, 2, 2))
    x, _ = place(dev, rng, xd, np.arange(12, dtype=np.int8).reshape(3, 4))
    u, _ = place(dev, rng, ud, -np.ones((2, 4), np.int8))
    bad = 3 if not it.is_signed else -4
    iv = np.zeros((2, 4), np.int64)
    iv[1, 2] = bad
    for o, ind_v, pos in ((op, iv, "(1, 2)"), (ndop, iv[:, 2:3][::-1].copy(), "(0, 0)")):
        ind, _ = place(dev, rng, TD(it, ind_v.shape), ind_v.astype(it.numpy_dtype))
        y, _ = place(dev, rng, xd)
        before = y.buffer.read()
        pattern = rf"^indices_tensor: index {bad} at position {re.escape(pos)}"
        with pytest.raises(kdml.InvalidArgumentError, match=pattern):
            o.execute([x, ind, u], [y])
        assert y.buffer.read() == before


def test_lines_within_llvmpipes_loop_limit(dev):
    """A CPU device links duplicates by one invocation a tuple walking the tuple's line: within
    CPU_WALK_MAX tuples the sums are exact; past it (lavapipe's loop limit: 70,000 tuples added into
    10 positions gave 65,535 each: checked) the operator is refused, naming the indices."""
    from kompute_dml.runtime.llvmpipe import CPU_WALK_MAX

    if dev.device_type != "cpu":
        pytest.skip("llvmpipe's loop limit: CPU devices only")
    rng = np.random.default_rng(0)
    idx = rng.integers(0, 10, (1, CPU_WALK_MAX)).astype(np.int64)
    y = kdml.scatter_elements(np.zeros((1, 10), np.float32), idx, np.ones(idx.shape, np.float32), axis=1,
                              reduction="add", device=dev).numpy()
    np.testing.assert_array_equal(y, np.bincount(idx[0], minlength=10)[None].astype(np.float32))
    idx = rng.integers(0, 10, (1, CPU_WALK_MAX + 1)).astype(np.int64)
    with pytest.raises(kdml.UnsupportedError, match=f"^indices_tensor: {CPU_WALK_MAX + 1} index tuples along one line"):
        kdml.scatter_elements(np.zeros((1, 10), np.float32), idx, np.ones(idx.shape, np.float32), axis=1,
                              reduction="add", device=dev)
