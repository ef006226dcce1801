"""ACTIVATION_SOFTMAX, the first version (ops/activation_softmax0.py: ACTIVATION_SOFTMAX1's plans over
the last axis) against the float64 reference of tests/activation_reference.py within docs/softmax.md's
bound and bit for bit against ACTIVATION_SOFTMAX1 over the last axis: effective ranks 1 and 2 with
leading sizes of 1, strided and broadcast inputs at random offsets, poisoned outputs whose every other
byte must stay unchanged, rows of NaN and infinities, the page's table per feature level, refusals."""

from __future__ import annotations

import math

import numpy as np
import pytest
from activation_reference import check_close, softmax_bound, softmax_ref
from helpers import assert_outside_unchanged, place, poison_against, random_strides, read_logical
from test_softmax import scores

import kompute_dml as kdml

DT = kdml.DataType
FL = kdml.FeatureLevel
TD = kdml.TensorDesc
FLOATS = (DT.FLOAT32, DT.FLOAT16)
IDS = ("f32", "f16")


def run(dev, rng, x_desc: TD, y_desc: TD, values: np.ndarray) -> tuple[np.ndarray, kdml.Tensor]:
    x, xraw = place(dev, rng, x_desc, values)
    y, _ = place(dev, rng, y_desc)
    xv = read_logical(xraw, x.offset, x_desc)
    ref = softmax_ref(xv, (x_desc.dimension_count - 1,))
    before = poison_against(y, np.nan_to_num(ref).astype(y_desc.data_type.numpy_dtype), rng)
    dev.compile(kdml.ActivationSoftmaxDesc(x_desc, y_desc)).execute([x], [y])
    got = read_logical(assert_outside_unchanged(y, before), y.offset, y_desc)
    assert x.buffer.read() == xraw
    check_close(got, ref, softmax_bound(ref, x_desc.sizes[-1]), f"softmax {x_desc.sizes}")
    return got, x


@pytest.mark.parametrize("dt", FLOATS, ids=IDS)
@pytest.mark.parametrize("sizes", [(1, 1, 5, 9), (1, 1, 1, 300), (7, 33), (1, 4096), (6,), (1, 1, 1, 1, 1, 2, 3000),
                                   (3, 1), (1, 1, 1, 1)])
def test_against_reference_and_softmax1(dev, rng, dt, sizes):
    """Within the bound of the float64 reference; the same bits as ACTIVATION_SOFTMAX1 over the last axis."""
    d = TD(dt, sizes, random_strides(rng, sizes, allow_broadcast=True))
    yd = TD(dt, sizes, random_strides(rng, sizes, allow_broadcast=False))
    got, x = run(dev, rng, d, yd, scores(rng, sizes, dt))
    y1 = dev.empty(TD(dt, sizes))
    dev.compile(kdml.ActivationSoftmax1Desc(d, TD(dt, sizes), (len(sizes) - 1,))).execute([x], [y1])
    assert got.tobytes() == y1.numpy().tobytes()


@pytest.mark.parametrize("dt", FLOATS, ids=IDS)
def test_special_rows(dev, rng, dt):
    """A row holding NaN or +inf, or only -inf, gives NaN (docs/softmax.md); a row of one element 1;
    -inf elements of a finite row 0."""
    inf, nan = np.inf, np.nan
    x = np.array([[1, 2, nan, 3], [0, inf, 1, 2], [-inf, -inf, -inf, -inf], [-inf, 0, 0, -inf],
                  [1e30 if dt == DT.FLOAT32 else 6e4, 0, -1, 5]], dt.numpy_dtype)
    d = TD(dt, x.shape)
    got, _ = run(dev, rng, d, d, x)
    assert np.isnan(got[:3]).all()
    np.testing.assert_array_equal(got[3], [0, 0.5, 0.5, 0])
    np.testing.assert_array_equal(got[4], [1, 0, 0, 0])
    one = TD(dt, (4, 1))
    got, _ = run(dev, rng, one, one, np.array([[-3], [0], [7], [-inf]], dt.numpy_dtype))
    np.testing.assert_array_equal(got[:3], 1)


@pytest.mark.parametrize(("level", "sizes", "ok"), [
    (FL.FL_1_0, (1, 1, 3, 4), True), (FL.FL_1_0, (3, 4), False), (FL.FL_1_0, (1, 1, 1, 3, 4), False),
    (FL.FL_2_0, (1, 1, 1, 3, 4), True), (FL.FL_2_0, (3, 4), False), (FL.FL_3_0, (3, 4), True),
    (FL.FL_3_0, (1,) * 7 + (5,), True)], ids=str)
def test_levels(level, sizes, ok):
    with kdml.Device(feature_level=level) as d:
        desc = kdml.ActivationSoftmaxDesc(TD(DT.FLOAT16, sizes), TD(DT.FLOAT16, sizes))
        if ok:
            d.compile(desc)
        else:
            with pytest.raises(kdml.UnsupportedError, match="^input_tensor"):
                d.compile(desc)


F = TD(DT.FLOAT32, (2, 3, 4))
S = kdml.ActivationSoftmaxDesc
BAD = [
    (S(F, F), kdml.InvalidArgumentError, r"^input_tensor\.sizes: must have an effective rank of at most 2"),
    (S(TD(DT.FLOAT32, (1, 2, 1, 3)), TD(DT.FLOAT32, (1, 2, 1, 3))), kdml.InvalidArgumentError,
     r"^input_tensor\.sizes: must have an effective rank"),
    (S(TD(DT.FLOAT32, (3, 4)), TD(DT.FLOAT32, (4, 3))), kdml.InvalidArgumentError, r"^output_tensor\.sizes: must equal"),
    (S(TD(DT.FLOAT32, (3, 4)), TD(DT.FLOAT16, (3, 4))), kdml.InvalidArgumentError, r"^output_tensor\.data_type"),
    (S(TD(DT.FLOAT32, (3, 4)), TD(DT.FLOAT32, (3, 4), (0, 1))), kdml.InvalidArgumentError, r"^output_tensor\.strides"),
    (S(TD(DT.INT32, (3, 4)), TD(DT.INT32, (3, 4))), kdml.UnsupportedError,
     r"^input_tensor: ACTIVATION_SOFTMAX does not support INT32"),
]


@pytest.mark.parametrize(("desc", "error", "match"), BAD, ids=[m[1:40] for _, _, m in BAD])
def test_refused(dev, desc, error, match):
    with pytest.raises(error, match=match):
        dev.compile(desc)


def test_long_rows_sum_to_one(dev, rng):
    """Rows past the fast path's length (the general plan) sum to 1 within n u."""
    x = scores(rng, (3, 20000), DT.FLOAT32)
    d = TD(DT.FLOAT32, x.shape)
    got, _ = run(dev, rng, d, d, x)
    assert np.all(np.abs(got.astype(np.float64).sum(-1) - 1) < 20000 * 2.0**-24 * math.log(20000))
