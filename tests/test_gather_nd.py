"""GATHER_ND / GATHER_ND1 (ops/gather_nd.py, shaders/indexing.comp) against a numpy reference
written here (a loop over the index tuples, ONNX GatherND's definition): every data type (8 to
64 bits) with every index type, 1-8 dimensions, batch dimensions, leading 1s outside the
dimension counts, negative indices (64-bit ones with the high word set), strided and broadcast
inputs, random offsets with guard bytes, poisoned outputs whose every other byte must stay
unchanged, the pages' examples, the helper, refusals naming the field, out-of-range indices
raising with nothing written."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_output, place, poison_against, random_strides, random_values, read_logical

import kompute_dml as kdml
from kompute_dml.core.dtypes import HIGHEST_FEATURE_LEVEL
from kompute_dml.ops.gather_nd import GATHER_ND1

DT = kdml.DataType
TD = kdml.TensorDesc
_top = GATHER_ND1.require(HIGHEST_FEATURE_LEVEL)
TYPES = sorted(_top.tensor("input_tensor").types, key=lambda d: d.value)
ITYPES = sorted(_top.tensor("indices_tensor").types, key=lambda d: d.value)


def gather_nd_ref(x: np.ndarray, idx: np.ndarray, b: int) -> np.ndarray:
    """ONNX GatherND: out[i..] = x[batch i.., idx[i..] (negative from the end), ...]."""
    q = idx.shape[-1]
    out = np.empty(idx.shape[:-1] + x.shape[b + q:], x.dtype)
    for pos in np.ndindex(*idx.shape[:-1]):
        tup = tuple(int(v) + (x.shape[b + j] if int(v) < 0 else 0) for j, v in enumerate(idx[pos].astype(object)))
        out[pos] = x[pos[:b] + tup]
    return out


def tuple_indices(rng, dt: DT, lead: tuple[int, ...], dims: list[int]) -> np.ndarray:
    """Index tuples over `dims` (negative ones for signed types, the range's ends mixed in), each
    value valid in every coordinate (a broadcast layout of the indices repeats values across them)."""
    signed = dt.is_signed
    cols = []
    m = min(dims, default=1)
    for n in [m] * len(dims):
        v = rng.integers(-n if signed else 0, n, size=(*lead, 1))
        if v.size > 1:
            v.reshape(-1)[int(rng.integers(0, v.size))] = -n if signed else n - 1
        cols.append(v)
    out = np.concatenate(cols, axis=-1) if cols else np.zeros((*lead, 0), np.int64)
    return np.array(out.astype(object), dtype=object).astype(np.int64).astype(dt.numpy_dtype)


def layout(rng, sizes, is_input):
    return None if rng.random() < 0.3 else random_strides(rng, sizes, allow_broadcast=is_input)


def plan_case(rng, n: int):
    """(input sizes, indices sizes, ic, jc, b, output sizes) for n dimensions, the output fitting n."""
    while True:
        ic, jc = int(rng.integers(1, n + 1)), int(rng.integers(1, n + 1))
        b = int(rng.integers(0, min(ic, jc)))
        if ic - b < 1:
            continue
        q = int(rng.integers(1, ic - b + 1))
        if (jc - 1) + (ic - b - q) > n:
            continue
        xin = [int(rng.integers(1, 4)) for _ in range(ic)]
        inner = [int(rng.integers(1, 4)) for _ in range(jc - 1 - b)]
        xs = (1,) * (n - ic) + tuple(xin)
        js = (1,) * (n - jc) + tuple(xin[:b] + inner + [q])
        core = tuple(xin[:b] + inner + xin[b + q:])
        return xs, js, ic, jc, b, (1,) * (n - len(core)) + core


def run_case(dev, rng, dt, it, xs, js, ic, jc, b, ys, strided=True):
    n = len(xs)
    xd, idd, yd = (TD(dt, xs, layout(rng, xs, True) if strided else None),
                   TD(it, js, layout(rng, js, True) if strided else None),
                   TD(dt, ys, layout(rng, ys, False) if strided else None))
    x, xraw = place(dev, rng, xd, random_values(rng, dt, xs))
    tup = tuple_indices(rng, it, js[n - jc:-1], [xs[n - ic + b + j] for j in range(js[-1])])
    ind, iraw = place(dev, rng, idd, tup.reshape(js))
    y, _ = place(dev, rng, yd)
    xl, il = read_logical(xraw, x.offset, xd), read_logical(iraw, ind.offset, idd)
    expected = gather_nd_ref(xl.reshape(xs[n - ic:]), il.reshape(js[n - jc:]), b).reshape(ys)
    before = poison_against(y, expected, rng)
    dev.compile(kdml.GatherNd1Desc(xd, idd, yd, ic, jc, b)).execute([x, ind], [y])
    assert_output(y, before, expected)
    assert x.buffer.read() == xraw and ind.buffer.read() == iraw


CASES = [(t, i) for t in TYPES for i in ITYPES]


@pytest.mark.parametrize(("dt", "it"), CASES, ids=[f"{t.name}-{i.name}" for t, i in CASES])
def test_gather_nd_every_type(dev, rng, dt, it):
    for n in range(1, 9):
        run_case(dev, rng, dt, it, *plan_case(rng, n))


def test_pages_examples(dev):
    def go(x, xs, idx, js, ic, jc, b, want, ys, cls=kdml.GatherNd1Desc):
        args = (ic, jc, b) if cls is kdml.GatherNd1Desc else (ic, jc)
        y = dev.tensor(np.zeros(ys, np.float32))
        dev.compile(cls(TD(DT.FLOAT32, xs), TD(DT.UINT32, js), TD(DT.FLOAT32, ys), *args)).execute(
            [dev.tensor(np.array(x, np.float32).reshape(xs)), dev.tensor(np.array(idx, np.uint32).reshape(js))], [y])
        assert y.numpy().reshape(-1).tolist() == want

    go([0, 1, 2, 3], (2, 2), [1, 0], (2, 1), 2, 2, 0, [2, 3, 0, 1], (2, 2))
    go([0, 1, 2, 3], (2, 2), [1, 0], (2, 1), 2, 2, 0, [2, 3, 0, 1], (2, 2), kdml.GatherNdDesc)
    go(list(range(8)), (1, 2, 2, 2), [0, 1, 1, 0], (1, 1, 2, 2), 3, 2, 0, [2, 3, 4, 5], (1, 1, 2, 2), kdml.GatherNdDesc)
    go(list(range(12)), (1, 3, 2, 2), [0, 0, 1, 1, 1, 1, 0, 0, 0, 1, 1, 0], (1, 3, 2, 2), 3, 3, 1,
       [0, 3, 7, 4, 9, 10], (1, 1, 3, 2))


def test_gather_nd_helper_onnx_examples(dev):
    d = np.array([[0, 1], [2, 3]], np.int32)
    assert kdml.gather_nd(d, np.array([[0, 0], [1, 1]]), device=dev).numpy().tolist() == [0, 3]
    assert kdml.gather_nd(d, np.array([[1], [0]]), device=dev).numpy().tolist() == [[2, 3], [0, 1]]
    f = np.arange(8, dtype=np.float32).reshape(2, 2, 2)
    assert kdml.gather_nd(f, np.array([[[0, 1]], [[1, 0]]]), device=dev).numpy().tolist() == [[[2, 3]], [[4, 5]]]
    assert kdml.gather_nd(f, np.array([[1], [0]]), 1, device=dev).numpy().tolist() == [[2, 3], [4, 5]]
    assert kdml.gather_nd(f, np.array([1, -1, 0]), device=dev).numpy().tolist() == [6]  # a rank-0 result as (1,)


def test_refusals(dev):
    f, u = DT.FLOAT32, DT.UINT32
    x, i, y = TD(f, (1, 3, 4, 5)), TD(u, (1, 1, 2, 2)), TD(f, (1, 1, 2, 5))
    ok = kdml.GatherNd1Desc(x, i, y, 3, 2)
    dev.compile(ok)
    for change, field in (({"input_dimension_count": 0}, "input_dimension_count"),
                          ({"indices_dimension_count": 5}, "indices_dimension_count"),
                          ({"input_dimension_count": 2}, "input_tensor.sizes"),
                          ({"batch_dimension_count": 2}, "batch_dimension_count"),
                          ({"output_tensor": TD(f, (1, 1, 2, 4))}, "output_tensor.sizes"),
                          ({"output_tensor": TD(DT.INT32, (1, 1, 2, 5))}, "output_tensor.data_type"),
                          ({"indices_tensor": TD(u, (1, 2, 4))}, "indices_tensor.sizes"),
                          ({"indices_tensor": TD(u, (1, 1, 2, 4)), "output_tensor": TD(f, (1, 1, 1, 2))},
                           "indices_tensor.sizes"),
                          ({"batch_dimension_count": 1, "indices_tensor": TD(u, (1, 2, 2, 1)),
                            "output_tensor": TD(f, (1, 2, 2, 5))}, "indices_tensor.sizes")):
        import dataclasses
        with pytest.raises(kdml.InvalidArgumentError, match=f"^{field}"):
            dev.compile(dataclasses.replace(ok, **change))
    with pytest.raises(kdml.UnsupportedError):
        dev.compile(kdml.GatherNd1Desc(x, TD(DT.INT16, (1, 1, 2, 2)), y, 3, 2))


BAD = {DT.INT32: [3, -4], DT.UINT32: [3, 2 ** 32 - 1], DT.INT64: [3, -4, 2 ** 32 + 1, -(2 ** 32) + 1],
       DT.UINT64: [3, 2 ** 32 + 1]}


@pytest.mark.parametrize("it", ITYPES, ids=str)
def test_out_of_range_raises_nothing_written(dev, rng, it):
    xd, idd, yd = TD(DT.FLOAT32, (3, 3, 2)), TD(it, (1, 4, 2), (0, 1, 4)), TD(DT.FLOAT32, (1, 4, 2))
    op = dev.compile(kdml.GatherNd1Desc(xd, idd, yd, 3, 3))
    xv = rng.standard_normal((3, 3, 2)).astype(np.float32)
    x, _ = place(dev, rng, xd, xv)
    good = np.array([[[0, 1], [2, 2], [1, 0], [2, 1]]], it.numpy_dtype)
    for value in BAD[it]:
        iv = good.copy()
        iv[0, 2, 1] = np.array([value], dtype=object).astype(np.int64 if value < 0 else np.uint64).astype(
            it.numpy_dtype)[0]
        ind, _ = place(dev, rng, idd, iv)
        y, _ = place(dev, rng, yd)
        before = y.buffer.read()
        lo = -3 if it.is_signed else 0
        with pytest.raises(kdml.InvalidArgumentError, match=rf"^indices_tensor: index {value} at position \(0, 2, 1\) "
                                                            rf"\(element 5 in row-major order\) is outside \[{lo}, 2\]"):
            op.execute([x, ind], [y])
        assert y.buffer.read() == before
    ind, _ = place(dev, rng, idd, good)
    y, _ = place(dev, rng, yd)
    before = poison_against(y, gather_nd_ref(xv, good[0], 0)[None], rng)
    op.execute([x, ind], [y])
    assert_output(y, before, gather_nd_ref(xv, good[0], 0)[None])
