"""REDUCE (ops/reduce.py, shaders/reduce.comp) against the independent numpy float64 / int64
reference of tests/reduce_reference.py: every function on every data type kompute_dml takes, ranks
1-8 with random axes subsets, strided and broadcast (zero-stride) inputs, random offsets with guard
bytes and poisoned outputs whose every other byte must stay unchanged; special values; the
helpers; refused descriptors with their messages; the feature levels' tables."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_outside_unchanged, place, poison_against, random_strides, read_logical
from reduce_reference import bound, reference

import kompute_dml as kdml

DT = kdml.DataType
FL = kdml.FeatureLevel
TD = kdml.TensorDesc
RF = kdml.ReduceFunction
FLOATS = (DT.FLOAT32, DT.FLOAT16)
FLOAT_FNS = ("SUM", "AVERAGE", "MAX", "MIN", "SUM_SQUARE", "L1", "L2", "MULTIPLY", "LOG_SUM", "LOG_SUM_EXP",
             "ARGMAX", "ARGMIN")
INT_FNS = {  # the page's 3_0 tables: integers for SUM, MULTIPLY (32-bit), MIN, MAX, ARGMAX, ARGMIN
    DT.INT32: ("SUM", "MULTIPLY", "MAX", "MIN", "ARGMAX", "ARGMIN"),
    DT.UINT32: ("SUM", "MULTIPLY", "MAX", "MIN", "ARGMAX", "ARGMIN"),
    **{t: ("MAX", "MIN", "ARGMAX", "ARGMIN") for t in (DT.INT16, DT.UINT16, DT.INT8, DT.UINT8)},
}


def values(rng, dt: DT, fn: str, sizes) -> np.ndarray:
    """Inputs where the function is defined and its float32 result neither overflows nor loses
    everything: products near 1 in magnitude, LOG_SUM of positive values."""
    if not dt.is_float:
        info = np.iinfo(dt.numpy_dtype)
        return rng.integers(info.min, info.max, size=sizes, dtype=dt.numpy_dtype, endpoint=True)
    if fn == "MULTIPLY":
        x = rng.uniform(0.9, 1.1, sizes) * rng.choice([-1.0, 1.0], sizes)
    elif fn == "LOG_SUM":
        x = rng.uniform(0.01, 4.0, sizes)
    else:
        x = rng.standard_normal(sizes) * 3
    if fn in ("MAX", "MIN", "ARGMAX", "ARGMIN"):
        x = np.round(x, 1)  # ties: the first index must win
    return x.astype(dt.numpy_dtype)


def random_sizes(rng, rank: int, max_elems: int = 600) -> tuple[int, ...]:
    sizes = [int(rng.integers(1, 6)) for _ in range(rank)]
    while np.prod(sizes) > max_elems:
        sizes[int(np.argmax(sizes))] //= 2
    return tuple(max(1, s) for s in sizes)


def out_type(fn: str, dt: DT, rng) -> DT:
    return DT(rng.choice([DT.UINT32, DT.INT32, DT.UINT64, DT.INT64])) if fn.startswith("ARG") else dt


def check(got: np.ndarray, want: np.ndarray, x: np.ndarray, fn: str, axes, dt: DT) -> None:
    if fn.startswith("ARG") or not dt.is_float or fn in ("MAX", "MIN"):
        # exact: indices, integers (modulo 2^bits), and MAX / MIN (an input's value)
        np.testing.assert_array_equal(got.astype(np.float64 if dt.is_float and not fn.startswith("ARG") else np.int64),
                                      want)
        return
    g = got.astype(np.float64)
    e = bound(x, fn, axes, want, dt == DT.FLOAT16)
    err = np.abs(g - want)
    assert np.all((err <= e) | (np.isnan(g) & np.isnan(want)) | (g == want)), (
        f"{fn}: error {np.max(err - e)} above the bound, worst ratio {np.nanmax(err / np.maximum(e, 1e-300))}")


def run(dev, rng, fn: str, x_desc: TD, y_desc: TD, v: np.ndarray, axes) -> None:
    x, xraw = place(dev, rng, x_desc, v)
    y, _ = place(dev, rng, y_desc)
    xv = read_logical(xraw, x.offset, x_desc)
    want = reference(xv, fn, tuple(axes))
    before = poison_against(y, want, rng)
    dev.compile(kdml.ReduceDesc(x_desc, y_desc, RF[fn], tuple(axes))).execute([x], [y])
    got = read_logical(assert_outside_unchanged(y, before), y.offset, y_desc)
    assert x.buffer.read() == xraw
    check(got, want, xv, fn, axes, x_desc.data_type)


def random_case(dev, rng, fn: str, dt: DT, rank: int) -> None:
    sizes = random_sizes(rng, rank)
    k = int(rng.integers(1, rank + 1))
    axes = tuple(int(a) for a in rng.permutation(rank)[:k])
    keep = tuple(1 if d in axes else s for d, s in enumerate(sizes))
    xs = random_strides(rng, sizes, allow_broadcast=True) if rng.random() < 0.7 else None
    ys = random_strides(rng, keep, allow_broadcast=False) if rng.random() < 0.7 else None
    run(dev, rng, fn, TD(dt, sizes, xs), TD(out_type(fn, dt, rng), keep, ys), values(rng, dt, fn, sizes), axes)


@pytest.mark.parametrize("fn", FLOAT_FNS)
@pytest.mark.parametrize("dt", FLOATS, ids=("f32", "f16"))
def test_float_layouts(dev, rng, fn, dt):
    for rank in range(1, 9):
        random_case(dev, rng, fn, dt, rank)


@pytest.mark.parametrize(("dt", "fn"), [(t, f) for t, fns in INT_FNS.items() for f in fns],
                         ids=lambda p: p.name if isinstance(p, DT) else p)
def test_integer_layouts(dev, rng, dt, fn):
    for rank in (1, 2, 3, 5, 8):
        random_case(dev, rng, fn, dt, rank)


@pytest.mark.parametrize("fn", ("SUM", "AVERAGE", "L2", "LOG_SUM_EXP", "MAX", "ARGMIN"))
def test_long_rows(dev, rng, fn):
    """Rows of 40000 elements: the sequential-sum bound grows with n and still holds."""
    for dt in FLOATS:
        sizes = (3, 40000)
        run(dev, rng, fn, TD(dt, sizes), TD(out_type(fn, dt, rng), (3, 1)), values(rng, dt, fn, sizes), (1,))


SPECIAL = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -2.0], np.float64)


@pytest.mark.parametrize("dt", FLOATS, ids=("f32", "f16"))
def test_special_values(dev, dt):
    """Rows of special values: NaN propagates (MAX / MIN too; ARG* return the first NaN), inf
    sums, -0 sums to -0, LOG_SUM_EXP of +inf is +inf and of only -inf is -inf."""
    rows = np.array([[-0.0, -0.0, -0.0], [1.0, np.nan, 2.0], [np.inf, 1.0, 2.0], [-np.inf, -np.inf, -np.inf],
                     [np.inf, -np.inf, 0.0], [3.0, 3.0, -1.0], [-0.0, 0.0, 5.0]], np.float64).astype(dt.numpy_dtype)
    for fn in FLOAT_FNS:
        if fn in ("LOG_SUM", "MULTIPLY"):
            continue
        y = np.zeros((rows.shape[0], 1)).astype(np.int64 if fn.startswith("ARG") else dt.numpy_dtype)
        with kdml.Device() as d:
            out = d.buffer(y.tobytes() + bytes(16))
            yd = TD(DT.INT64 if fn.startswith("ARG") else dt, (rows.shape[0], 1))
            x = d.buffer(rows.tobytes() + bytes(16))  # whole words past FLOAT16's 42 bytes
            d.compile(kdml.ReduceDesc(TD(dt, rows.shape), yd, RF[fn], (1,))).execute(
                [kdml.Tensor(x, TD(dt, rows.shape), 0)], [kdml.Tensor(out, yd, 0)])
            got = np.frombuffer(out.read(), y.dtype)[:rows.shape[0]]
        want = reference(rows, fn, (1,)).reshape(-1)
        if fn.startswith("ARG") or fn in ("MAX", "MIN"):
            np.testing.assert_array_equal(got, want.astype(got.dtype))
        else:
            np.testing.assert_allclose(got.astype(np.float64), want, rtol=2e-3, atol=0)
    del dev


def test_negative_zero_sum_is_negative_zero(dev):
    got = kdml.reduce_sum(np.array([[-0.0, -0.0]], np.float32), axes=1, device=dev).numpy()
    assert np.signbit(got[0, 0])  # the sum starts from x_0 (-0), so -0 + -0 stays -0


def test_helpers(dev, rng):
    x = rng.standard_normal((3, 4, 5)).astype(np.float32)
    # (the float32 bound of 60 terms, against the magnitudes summed: a sum near 0 has no relative bound)
    np.testing.assert_allclose(kdml.reduce_sum(x, device=dev).numpy(), x.astype(np.float64).sum(keepdims=True),
                               rtol=1e-5, atol=x.size * 2.0 ** -24 * float(np.abs(x).sum()))
    y = kdml.reduce_mean(x, axes=(-1, 0), keepdims=False, device=dev)
    assert y.desc.sizes == (4,)
    np.testing.assert_allclose(y.numpy(), x.astype(np.float64).mean((0, 2)), rtol=1e-5, atol=1e-6)
    assert kdml.reduce_max(x, 1, keepdims=False, device=dev).desc.sizes == (3, 5)
    np.testing.assert_array_equal(kdml.argmax(x, 1, keepdims=False, device=dev).numpy(), x.argmax(1))
    i = kdml.argmin(x, 2, index_type=DT.UINT32, device=dev)
    assert i.desc.data_type == DT.UINT32
    np.testing.assert_array_equal(i.numpy()[..., 0], x.argmin(2))
    assert kdml.reduce_l2(x, keepdims=False, device=dev).desc.sizes == (1,)
    with pytest.raises(kdml.InvalidArgumentError, match="^axes: names an axis twice"):
        kdml.reduce_sum(x, axes=(0, -3), device=dev)
    with pytest.raises(kdml.InvalidArgumentError, match=r"^axes: each axis must be in \[-3, 3\)"):
        kdml.reduce_sum(x, axes=3, device=dev)


F = TD(DT.FLOAT32, (2, 3, 4))
F_1 = TD(DT.FLOAT32, (2, 1, 4))
BAD = [
    (kdml.ReduceDesc(F, F_1, 12, (1,)), kdml.InvalidArgumentError, r"^function: 12 is not a DML_REDUCE_FUNCTION"),
    (kdml.ReduceDesc(F, F_1, "SUM", (1,)), kdml.InvalidArgumentError, r"^function: must be a ReduceFunction"),
    (kdml.ReduceDesc(F, TD(DT.FLOAT16, (2, 1, 4)), RF.SUM, (1,)), kdml.InvalidArgumentError,
     r"^output_tensor\.data_type: must equal input_tensor's \(FLOAT32\)"),
    (kdml.ReduceDesc(F, TD(DT.FLOAT32, (2, 1, 4)), RF.ARGMAX, (1,)), kdml.UnsupportedError,
     r"^output_tensor: REDUCE ARGMAX outputs indices"),
    (kdml.ReduceDesc(F, TD(DT.FLOAT32, (2, 4)), RF.SUM, (1,)), kdml.InvalidArgumentError,
     r"^output_tensor\.sizes: dimension count must equal input_tensor's \(3\)"),
    (kdml.ReduceDesc(F, TD(DT.FLOAT32, (2, 3, 4)), RF.SUM, (1,)), kdml.InvalidArgumentError,
     r"^output_tensor\.sizes: must be input_tensor's sizes with 1 on the reduced axes \(2, 1, 4\)"),
    (kdml.ReduceDesc(F, F_1, RF.SUM, ()), kdml.InvalidArgumentError, r"^axes: AxisCount must be at least 1"),
    (kdml.ReduceDesc(F, F_1, RF.SUM, (3,)), kdml.InvalidArgumentError, r"^axes\[0\]: must be in \[0, 2\]"),
    (kdml.ReduceDesc(F, F_1, RF.SUM, (1, 1)), kdml.InvalidArgumentError, r"^axes: must be distinct"),
    (kdml.ReduceDesc(F, TD(DT.FLOAT32, (2, 1, 4), (0, 1, 1)), RF.SUM, (1,)), kdml.InvalidArgumentError,
     r"^output_tensor\.strides"),
    (kdml.ReduceDesc(TD(DT.INT8, (2, 3)), TD(DT.INT8, (2, 1)), RF.SUM, (1,)), kdml.UnsupportedError,
     r"^input_tensor: REDUCE SUM does not support INT8 at feature level"),
    (kdml.ReduceDesc(TD(DT.INT32, (2, 3)), TD(DT.INT32, (2, 1)), RF.AVERAGE, (1,)), kdml.UnsupportedError,
     r"^input_tensor: REDUCE AVERAGE does not support INT32"),
    (kdml.ReduceDesc(TD(DT.INT64, (2, 3)), TD(DT.INT64, (2, 1)), RF.MAX, (1,)), kdml.UnsupportedError,
     r"^input_tensor: REDUCE does not support INT64"),
]


@pytest.mark.parametrize(("desc", "error", "match"), BAD, ids=[m[1:45] for _, _, m in BAD])
def test_refused(dev, desc, error, match):
    with pytest.raises(error, match=match):
        dev.compile(desc)


@pytest.mark.parametrize(("level", "dims", "in_t", "out_t", "fn", "ok"), [
    (FL.FL_1_0, 4, DT.FLOAT16, DT.FLOAT16, RF.SUM, True), (FL.FL_1_0, 3, DT.FLOAT32, DT.FLOAT32, RF.SUM, False),
    (FL.FL_1_0, 4, DT.FLOAT32, DT.UINT32, RF.ARGMAX, True), (FL.FL_1_0, 4, DT.FLOAT32, DT.INT64, RF.ARGMAX, False),
    (FL.FL_3_0, 1, DT.FLOAT32, DT.INT64, RF.ARGMIN, True), (FL.FL_3_0, 8, DT.FLOAT16, DT.FLOAT16, RF.L2, True),
    (FL.FL_1_0, 4, DT.INT32, DT.INT32, RF.SUM, False), (FL.FL_2_1, 4, DT.INT32, DT.INT32, RF.SUM, True),
    (FL.FL_2_1, 4, DT.UINT8, DT.UINT8, RF.MIN, False), (FL.FL_2_1, 4, DT.INT8, DT.UINT32, RF.ARGMAX, True),
    (FL.FL_3_0, 2, DT.UINT8, DT.UINT8, RF.MIN, True), (FL.FL_3_0, 2, DT.UINT8, DT.UINT8, RF.SUM, False),
    (FL.FL_3_0, 2, DT.INT32, DT.INT32, RF.L1, False), (FL.FL_3_0, 2, DT.INT32, DT.INT32, RF.SUM_SQUARE, False),
], ids=str)
def test_feature_levels(level, dims, in_t, out_t, fn, ok):
    with kdml.Device(feature_level=level) as d:
        sizes = (2,) * dims
        desc = kdml.ReduceDesc(TD(in_t, sizes), TD(out_t, (1, *sizes[1:])), fn, (0,))
        if ok:
            d.compile(desc)
        else:
            with pytest.raises(kdml.UnsupportedError, match="^(input|output)_tensor: REDUCE"):
                d.compile(desc)
