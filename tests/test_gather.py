"""GATHER and GATHER_ELEMENTS (ops/gather.py, shaders/gather.comp) against numpy references
(np.take / np.take_along_axis on normalized indices): every element width (every data type)
with every index type, 1-8 dimensions, every axis, every IndexDimensions, negative indices
(64-bit ones with high words set), strided layouts, random offsets with guard bytes, poisoned
outputs whose every other byte must stay unchanged, the page's examples, host-enumerated
dimensions, the helpers and refusals. Out-of-range indices raise InvalidArgumentError naming
the first one's position and value, checked on the device, and write nothing."""

from __future__ import annotations

import re

import numpy as np
import pytest
from helpers import assert_output, place, poison_against, random_strides, random_values, read_logical

import kompute_dml as kdml
from kompute_dml.core.dtypes import HIGHEST_FEATURE_LEVEL
from kompute_dml.ops.gather import GATHER, GATHER_ELEMENTS, gather_output_sizes

DT = kdml.DataType
FL = kdml.FeatureLevel
TD = kdml.TensorDesc
_top = GATHER.require(HIGHEST_FEATURE_LEVEL)
TYPES = sorted(_top.tensor("input_tensor").types, key=lambda d: d.value)
ITYPES = sorted(_top.tensor("indices_tensor").types, key=lambda d: d.value)
ET_TYPES = sorted(GATHER_ELEMENTS.require(HIGHEST_FEATURE_LEVEL).tensor("input_tensor").types, key=lambda d: d.value)


def normalize(idx: np.ndarray, n: int) -> np.ndarray:
    """Positions along an axis of n: negative indices count from the end (all in range)."""
    v = idx.astype(object) if idx.dtype == np.uint64 else idx.astype(np.int64)
    v = np.where(v < 0, v + n, v)
    assert ((v >= 0) & (v < n)).all()
    return v.astype(np.int64)


def gather_ref(x: np.ndarray, idx: np.ndarray, axis: int, k: int, out_sizes) -> np.ndarray:
    n = x.ndim
    core = idx.reshape(idx.shape[n - k:])
    return np.take(x, normalize(core, x.shape[axis]), axis=axis).reshape(out_sizes)


def elements_ref(x: np.ndarray, idx: np.ndarray, axis: int) -> np.ndarray:
    return np.take_along_axis(x, normalize(idx, x.shape[axis]), axis=axis)


def random_indices(rng, dt: DT, shape, n: int) -> np.ndarray:
    """In-range indices, negative ones for signed types, with the ends of the range (-n: 64-bit
    high word all ones) placed at random."""
    npd = dt.numpy_dtype
    signed = dt in (DT.INT32, DT.INT64)
    v = rng.integers(-n if signed else 0, n, size=shape).astype(npd)
    if v.size >= 2:
        flat = v.reshape(-1)
        for e in ([-n, -1, n - 1] if signed else [0, n - 1]):
            flat[int(rng.integers(0, flat.size))] = np.int64(e).astype(npd)
    return v


def layout(rng, sizes, *, is_input: bool):
    return None if rng.random() < 0.3 else random_strides(rng, sizes, allow_broadcast=is_input)


def run_gather(dev, rng, dt, it, in_sizes, axis, k, idx_core, *, strided=True, idx_values=None, x_values=None):
    n = len(in_sizes)
    isz = (1,) * (n - k) + tuple(idx_core)
    out_sizes, _ = gather_output_sizes(tuple(in_sizes), isz, axis, k)
    xd = TD(dt, in_sizes, layout(rng, in_sizes, is_input=True) if strided else None)
    idd = TD(it, isz, layout(rng, isz, is_input=True) if strided else None)
    yd = TD(dt, out_sizes, layout(rng, out_sizes, is_input=False) if strided else None)
    xv = random_values(rng, dt, in_sizes) if x_values is None else x_values
    iv = random_indices(rng, it, isz, in_sizes[axis]) if idx_values is None else idx_values
    x, xraw = place(dev, rng, xd, xv)
    ind, iraw = place(dev, rng, idd, iv)
    y, _ = place(dev, rng, yd)
    expected = gather_ref(read_logical(xraw, x.offset, xd), read_logical(iraw, ind.offset, idd), axis, k, out_sizes)
    before = poison_against(y, expected, rng)
    dev.compile(kdml.GatherDesc(xd, idd, yd, axis=axis, index_dimensions=k)).execute([x, ind], [y])
    assert_output(y, before, expected)
    assert x.buffer.read() == xraw and ind.buffer.read() == iraw


def small_sizes(rng, rank: int, max_elems: int = 300) -> list[int]:
    s = [int(rng.integers(1, 5)) for _ in range(rank)]
    while np.prod(s) > max_elems:
        s[int(np.argmax(s))] //= 2
    return [max(1, v) for v in s]


CASES = [(t, i) for t in TYPES for i in ITYPES]


@pytest.mark.parametrize(("dt", "it"), CASES, ids=[f"{t.name}-{i.name}" for t, i in CASES])
def test_gather_every_type(dev, rng, dt, it):
    for rank in range(1, 9):
        in_sizes = small_sizes(rng, rank)
        axis = int(rng.integers(0, rank))
        # IndexDimensions from 0 to rank; the output must fit rank dimensions after cropping
        # leading 1s: the input sizes before the axis are 1 where needed
        k = int(rng.integers(0, rank + 1))
        crop = max(0, rank + k - 1 - rank)
        if crop > axis:
            k = axis + 1
            crop = k - 1
        for d in range(crop):
            in_sizes[d] = 1
        core = small_sizes(rng, k, 24) if k else []
        run_gather(dev, rng, dt, it, in_sizes, axis, k, core)


def test_page_examples(dev):
    def go(x, xs, idx, isz, axis, k, want, ws):
        xd, idd, yd = TD(DT.FLOAT32, xs), TD(DT.UINT32, isz), TD(DT.FLOAT32, ws)
        xt = dev.buffer(np.array(x, np.float32).tobytes())
        it = dev.buffer(np.array(idx, np.uint32).tobytes())
        yt = dev.buffer(np.zeros(int(np.prod(ws)), np.float32).tobytes())
        dev.compile(kdml.GatherDesc(xd, idd, yd, axis, k)).execute(
            [kdml.Tensor(xt, xd), kdml.Tensor(it, idd)], [kdml.Tensor(yt, yd)])
        assert np.frombuffer(yt.read(), np.float32).tolist() == want

    go([11, 12, 13, 14], (4,), [3, 1, 3, 0, 2], (5,), 0, 1, [14, 12, 14, 11, 13], (5,))
    go([1, 2, 3, 4, 5, 6], (3, 2), [0, 1, 1, 2], (1, 4), 0, 1, [1, 2, 3, 4, 3, 4, 5, 6], (4, 2))
    # Example 3 states IndexDimensions 2, which by the page's own size rule gives {3, 1, 2} (3
    # dimensions, not croppable to 2); its comment (output[y, x] = input[y, indices[x]]) and its
    # output are those of IndexDimensions 1
    go([1, 2, 3, 4, 5, 6], (3, 2), [1, 0], (1, 2), 1, 1, [2, 1, 4, 3, 6, 5], (3, 2))
    with pytest.raises(kdml.InvalidArgumentError, match="^output_tensor.sizes: \\(3, 1, 2\\)"):
        go([1, 2, 3, 4, 5, 6], (3, 2), [1, 0], (1, 2), 1, 2, [2, 1, 4, 3, 6, 5], (3, 2))
    go(list(range(1, 10)), (1, 3, 3), [0, 2], (1, 1, 2), 2, 2, [1, 3, 4, 6, 7, 9], (3, 1, 2))
    go([1, 2, 3, 4, 5, 6], (1, 3, 2), [0, 1, 1, 2], (1, 2, 2), 1, 2, [1, 2, 3, 4, 3, 4, 5, 6], (2, 2, 2))


@pytest.mark.parametrize("dt", [DT.UINT8, DT.FLOAT16, DT.INT32, DT.UINT64], ids=str)
def test_gather_host_enumerated_and_odd_offsets(dev, rng, dt):
    """8 dimensions of size >= 2 that do not merge (the host enumerates the smallest); sub-word
    outputs at odd element offsets (STORE_FIELD) next to whole words."""
    in_sizes = [2, 3, 2, 2, 3, 2, 2, 3]
    for axis in (0, 4, 7):
        run_gather(dev, rng, dt, DT.INT32, list(in_sizes), axis, 1, [3])


# ---- out-of-range indices: InvalidArgumentError, nothing written --------------------------------
# per index type, values outside a 5-long axis: past the end, below -5, and 64-bit ones whose low
# word alone would be in range (2^32 + 1: low word 1; -(2^32) + 1: low word 1, high word not all ones)
BAD = {DT.INT32: [5, -6, 2 ** 31 - 1, -(2 ** 31)], DT.UINT32: [5, 2 ** 32 - 1, 2 ** 31],
       DT.INT64: [5, -6, 2 ** 32, 2 ** 32 + 1, -(2 ** 32) + 1, -(2 ** 63), 2 ** 63 - 1],
       DT.UINT64: [5, 2 ** 32, 2 ** 32 + 1, 2 ** 64 - 1]}


def _typed(values, it: DT) -> np.ndarray:
    return np.array([np.int64(v).astype(it.numpy_dtype) if v < 0 else v for v in values], dtype=object).astype(
        it.numpy_dtype)


def _bad_message(value: int, position: tuple[int, ...], n: int, signed: bool) -> str:
    return (re.escape(f"indices_tensor: index {value} at position {position} ") + ".*"
            + re.escape(f"outside [{-n if signed else 0}, {n - 1}]"))


@pytest.mark.parametrize("it", ITYPES, ids=str)
def test_out_of_range_raises(dev, rng, it):
    """Each bad value at a random place among in-range ones, strided indices: the error names the
    first bad index's value and row-major position, the poisoned output is unchanged, and the
    same operator then gathers right."""
    signed = it in (DT.INT32, DT.INT64)
    xd, idd, yd = TD(DT.FLOAT32, (5, 3)), TD(it, (1, 6), (0, 2)), TD(DT.FLOAT32, (6, 3))
    op = dev.compile(kdml.GatherDesc(xd, idd, yd, axis=0, index_dimensions=1))
    xv = rng.standard_normal((5, 3)).astype(np.float32)
    x, _ = place(dev, rng, xd, xv)
    good = random_indices(rng, it, (1, 6), 5)
    for value in BAD[it]:
        at = int(rng.integers(0, 6))
        iv = good.copy()
        iv[0, at] = _typed([value], it)[0]
        ind, _ = place(dev, rng, idd, iv)
        y, _ = place(dev, rng, yd)
        before = poison_against(y, np.zeros((6, 3), np.float32), rng)
        with pytest.raises(kdml.InvalidArgumentError, match=_bad_message(value, (0, at), 5, signed)):
            op.execute([x, ind], [y])
        assert y.buffer.read() == before
        ind_good, _ = place(dev, rng, idd, good)
        before = poison_against(y, np.zeros((6, 3), np.float32), rng)
        op.execute([x, ind_good], [y])
        assert_output(y, before, xv[normalize(good[0], 5)])


def test_out_of_range_first_position_and_helpers(dev, rng):
    """Several bad indices: the first in row-major order of the indices' logical positions (a
    strided, transposed layout), in the helpers too; the user's case (5000 in a vocabulary of 5000)."""
    idx = np.array([[0, 1, 2], [3, 9, 7]], np.int64)  # 9 at (1, 1), 7 at (1, 2)
    x = dev.tensor(rng.standard_normal((8, 2)).astype(np.float32))
    # the helper's descriptor has 3 dimensions (docs/gather.md): the indices are (1, 2, 3) there
    transposed = kdml.Tensor(dev.buffer(np.ascontiguousarray(idx.T)), TD(DT.INT64, (2, 3), (1, 2)))
    with pytest.raises(kdml.InvalidArgumentError, match="^indices_tensor: index 9 at position \\(0, 1, 1\\) "
                                                        "\\(element 4 in row-major order\\)"):
        kdml.gather(x, transposed)
    with pytest.raises(kdml.InvalidArgumentError, match="^indices_tensor: index 5 at position \\(0, 1\\)"):
        kdml.gather(np.arange(10, dtype=np.float32).reshape(5, 2), np.array([0, 5]), device=dev)
    emb = dev.tensor(np.ones((5000, 4), np.float32))
    with pytest.raises(kdml.InvalidArgumentError, match="^indices_tensor: index 5000 at .*\\[-5000, 4999\\]"):
        kdml.gather(emb, np.array([[1, 5000, 2]]))
    with pytest.raises(kdml.InvalidArgumentError, match="^indices_tensor: index -4 at position \\(0, 1\\)"):
        kdml.gather_elements(np.arange(6, dtype=np.int32).reshape(2, 3), np.array([[0, -4, 5], [3, 0, 0]]), 1,
                             device=dev)
    got = kdml.gather_elements(np.arange(6, dtype=np.int32).reshape(2, 3), np.array([[2, -3, 1], [0, -1, 0]]), 1,
                               device=dev)
    assert got.numpy().tolist() == [[2, 0, 1], [3, 5, 3]]


@pytest.mark.parametrize("it", ITYPES, ids=str)
def test_gather_elements_out_of_range(dev, rng, it):
    xd, idd = TD(DT.INT16, (3, 4)), TD(it, (3, 2))
    op = dev.compile(kdml.GatherElementsDesc(xd, idd, TD(DT.INT16, (3, 2)), axis=1))
    x, _ = place(dev, rng, xd, rng.integers(-100, 100, (3, 4)).astype(np.int16))
    for value in BAD[it][:3]:
        iv = np.zeros((3, 2), it.numpy_dtype)
        iv[2, 1] = _typed([value], it)[0]
        ind, _ = place(dev, rng, idd, iv)
        y, _ = place(dev, rng, TD(DT.INT16, (3, 2)))
        before = y.buffer.read()
        with pytest.raises(kdml.InvalidArgumentError, match=_bad_message(value, (2, 1), 4, it.is_signed)):
            op.execute([x, ind], [y])
        assert y.buffer.read() == before


def test_out_of_range_in_a_recording(dev, rng):
    """Inside dev.record(): raised when the submission completes (leaving the block), naming the
    operator; the bad execution writes nothing, the good ones recorded with it run, and the
    operator, recorded twice (each execution its own check), is right afterwards."""
    xd, idd, yd = TD(DT.FLOAT32, (4, 2)), TD(DT.INT32, (1, 3)), TD(DT.FLOAT32, (3, 2))
    op = dev.compile(kdml.GatherDesc(xd, idd, yd, axis=0, index_dimensions=1))
    xv = rng.standard_normal((4, 2)).astype(np.float32)
    x = dev.tensor(xv)
    good, bad = dev.tensor(np.array([[3, -4, 1]], np.int32)), dev.tensor(np.array([[0, 1, -5]], np.int32))
    y1, _ = place(dev, rng, yd)
    y2, _ = place(dev, rng, yd)
    b1 = poison_against(y1, xv[[3, 0, 1]], rng)
    b2 = y2.buffer.read()
    with (pytest.raises(kdml.InvalidArgumentError, match="^indices_tensor: index -5 at position \\(0, 2\\)") as info,
          dev.record() as rec):
        rec.execute(op, [x, good], [y1])
        rec.execute(op, [x, bad], [y2])
    assert "GATHER" in "".join(getattr(info.value, "__notes__", []))
    assert_output(y1, b1, xv[[3, 0, 1]])
    assert y2.buffer.read() == b2
    b1 = poison_against(y1, xv[[3, 0, 1]], rng)
    b2 = poison_against(y2, xv[[0, 1, 3]], rng)
    with dev.record() as rec:  # the same recording, in range: the same cached submission
        rec.execute(op, [x, good], [y1])
        rec.execute(op, [x, dev.tensor(np.array([[0, 1, -1]], np.int32))], [y2])
    assert_output(y1, b1, xv[[3, 0, 1]])
    assert_output(y2, b2, xv[[0, 1, 3]])


EL_CASES = [(t, i) for t in ET_TYPES for i in ITYPES]


@pytest.mark.parametrize(("dt", "it"), EL_CASES, ids=[f"{t.name}-{i.name}" for t, i in EL_CASES])
def test_gather_elements_every_type(dev, rng, dt, it):
    for rank in range(1, 9):
        in_sizes = small_sizes(rng, rank)
        axis = int(rng.integers(0, rank))
        isz = list(in_sizes)
        isz[axis] = int(rng.integers(1, 5))
        xd = TD(dt, in_sizes, layout(rng, in_sizes, is_input=True))
        idd = TD(it, isz, layout(rng, isz, is_input=True))
        yd = TD(dt, isz, layout(rng, isz, is_input=False))
        x, xraw = place(dev, rng, xd, random_values(rng, dt, in_sizes))
        ind, iraw = place(dev, rng, idd, random_indices(rng, it, isz, in_sizes[axis]))
        y, _ = place(dev, rng, yd)
        expected = elements_ref(read_logical(xraw, x.offset, xd), read_logical(iraw, ind.offset, idd), axis)
        before = poison_against(y, expected, rng)
        dev.compile(kdml.GatherElementsDesc(xd, idd, yd, axis)).execute([x, ind], [y])
        assert_output(y, before, expected)
        assert x.buffer.read() == xraw


# ---- helpers -----------------------------------------------------------------------------------
def test_gather_helper(dev, rng):
    for r in range(1, 5):
        x = rng.standard_normal(small_sizes(rng, r, 100)).astype(np.float32)
        for q in range(0, 4):
            for axis in range(-r, r):
                n = x.shape[axis]
                idx = rng.integers(-n, n, size=small_sizes(rng, q, 12)) if q else np.int64(rng.integers(-n, n))
                got = kdml.gather(x, idx, axis).numpy()
                want = np.take(x, np.where(np.asarray(idx) < 0, idx + n, idx), axis=axis)
                assert np.array_equal(got, want.reshape(want.shape or (1,)))
    # out= with strides
    x = rng.integers(0, 255, (4, 5), dtype=np.uint8)
    idx = np.array([[3, -1], [0, 2], [1, 1]], np.int32)
    od = TD(DT.UINT8, (4, 3, 2), random_strides(rng, (4, 3, 2), allow_broadcast=False))
    out, _ = place(dev, rng, od)
    before = poison_against(out, np.take(x, idx % 5, axis=1), rng)
    assert kdml.gather(x, idx, 1, out=out, device=dev) is out
    assert_output(out, before, np.take(x, idx % 5, axis=1))


def test_gather_elements_helper(rng):
    x = rng.integers(-100, 100, (3, 4, 2), dtype=np.int16)
    for axis in (-3, 0, 1, 2):
        idx = rng.integers(-x.shape[axis], x.shape[axis], (3, 4, 2))
        got = kdml.gather_elements(x, idx, axis).numpy()
        assert np.array_equal(got, np.take_along_axis(x, idx % x.shape[axis], axis=axis))


# ---- refusals ------------------------------------------------------------------------------------
def _g(xs=(2, 3), isz=(1, 4), ys=(4, 3), axis=0, k=1, dt=DT.FLOAT32, it=DT.UINT32, odt=None):
    return kdml.GatherDesc(TD(dt, xs), TD(it, isz), TD(odt or dt, ys), axis, k)


@pytest.mark.parametrize(("desc", "msg"), [
    (_g(axis=2), "^axis: must be in \\[0, 2\\)"),
    (_g(axis=-1), "^axis: must be in"),
    (_g(k=3), "^index_dimensions: must be in \\[0, 2\\]"),
    (_g(isz=(2, 4), ys=(2, 4, 3)), "^output_tensor.sizes: dimension count"),
    (_g(isz=(2, 4), k=1), "^indices_tensor.sizes: the 1 leading sizes"),
    (_g(ys=(4, 2)), "^output_tensor.sizes: must be \\(4, 3\\)"),
    (_g(isz=(1, 2, 4), ys=(1, 2, 4)), "^indices_tensor.sizes: dimension count"),
    (_g(odt=DT.FLOAT16), "^output_tensor.data_type: must equal input_tensor's"),
    (_g(xs=(2, 3), isz=(2, 4), ys=(2, 4), axis=0, k=2), "^output_tensor.sizes: \\(2, 4, 3\\)"),
    (_g(axis=True), "^axis:"),
    (kdml.GatherElementsDesc(TD(DT.INT8, (2, 3)), TD(DT.INT32, (3, 3)), TD(DT.INT8, (3, 3)), 1),
     "^indices_tensor.sizes: must equal input_tensor's"),
    (kdml.GatherElementsDesc(TD(DT.INT8, (2, 3)), TD(DT.INT32, (5, 3)), TD(DT.INT8, (5, 2)), 0),
     "^output_tensor.sizes: must equal indices_tensor's"),
], ids=range(12))
def test_refusals(dev, desc, msg):
    with pytest.raises(kdml.InvalidArgumentError, match=msg):
        dev.compile(desc)


@pytest.mark.parametrize("level", [FL.FL_1_0, FL.FL_2_1, FL.FL_3_0, FL.FL_4_1], ids=str)
def test_feature_levels(level):
    d = kdml.Device(feature_level=level)
    four = dict(xs=(1, 1, 2, 3), isz=(1, 1, 1, 4), ys=(1, 1, 4, 3), axis=2)
    try:
        d.compile(_g(**four))
        checks = [(_g(dt=DT.INT8, **four), FL.FL_2_1, "^input_tensor: GATHER does not support INT8"),
                  (_g(it=DT.INT64, **four), FL.FL_3_0, "^indices_tensor: GATHER does not support INT64"),
                  (_g(), FL.FL_3_0, "^input_tensor: GATHER supports 4 dimensions"),
                  (_g(dt=DT.FLOAT64, **four), FL.FL_4_1, "^input_tensor: GATHER does not support FLOAT64"),
                  (kdml.GatherElementsDesc(TD(DT.INT8, (1, 1, 2, 3)), TD(DT.UINT32, (1, 1, 2, 3)),
                                           TD(DT.INT8, (1, 1, 2, 3)), 3), FL.FL_2_1, "^GATHER_ELEMENTS: introduced"),
                  (kdml.GatherElementsDesc(TD(DT.INT64, (1, 1, 2, 3)), TD(DT.UINT32, (1, 1, 2, 3)),
                                           TD(DT.INT64, (1, 1, 2, 3)), 3), FL.FL_4_1,
                   "^(input_tensor: GATHER_ELEMENTS does not support INT64|GATHER_ELEMENTS: introduced)")]
        for desc, first, msg in checks:
            if level >= first:
                d.compile(desc)
            else:
                with pytest.raises(kdml.UnsupportedError, match=msg):
                    d.compile(desc)
    finally:
        d.close()


def test_output_must_not_overlap(dev):
    with pytest.raises(kdml.InvalidArgumentError, match="^output_tensor"):
        dev.compile(kdml.GatherDesc(TD(DT.FLOAT32, (3,)), TD(DT.UINT32, (4,)), TD(DT.FLOAT32, (4,), (0,)), 0, 1))
