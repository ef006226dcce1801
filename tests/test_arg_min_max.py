"""ARGMIN and ARGMAX (ops/arg_min_max.py: REDUCE's plans, DECREASING as reduce.comp's fn bit 8) against
a numpy reference written from the pages: the index row-major over the reduced axes of the first
(INCREASING) or last (DECREASING) extreme, a NaN the extreme; every input type and index type of the
table, subsets of axes over 1 to 8 dimensions, strided and broadcast inputs at random offsets, poisoned
outputs with every other byte unchanged, ties, the pages' examples, refusals, the helpers."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from helpers import assert_output, place, poison_against, random_strides, random_values, read_logical

import kompute_dml as kdml

DT = kdml.DataType
FL = kdml.FeatureLevel
TD = kdml.TensorDesc
INC, DEC = kdml.AxisDirection.INCREASING, kdml.AxisDirection.DECREASING
IN_TYPES = [DT.FLOAT32, DT.FLOAT16, DT.INT32, DT.INT16, DT.INT8, DT.UINT32, DT.UINT16, DT.UINT8]
OUT_TYPES = [DT.UINT32, DT.INT32, DT.UINT64, DT.INT64]


def reference(x: np.ndarray, axes: tuple[int, ...], is_max: bool, last: bool) -> np.ndarray:
    red = sorted(axes)
    rest = [d for d in range(x.ndim) if d not in red]
    t = np.transpose(x, rest + red)
    rows = t.reshape(*t.shape[:len(rest)], -1).astype(np.float64)
    rows = -rows if not is_max else rows
    rows = np.where(np.isnan(rows), np.inf, rows)  # a NaN counts as the extreme
    nan = np.isnan(t.reshape(rows.shape).astype(np.float64))
    best = np.where(nan.any(-1, keepdims=True), nan, rows == rows.max(-1, keepdims=True))
    n = rows.shape[-1]
    idx = (n - 1 - np.argmax(best[..., ::-1], -1)) if last else np.argmax(best, -1)
    keep = tuple(1 if d in axes else s for d, s in enumerate(x.shape))
    return idx.reshape(keep)


@pytest.mark.parametrize("dt", IN_TYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("rank", [1, 2, 4, 8])
def test_against_reference(dev, rng, dt, rank):
    sizes = (*(int(rng.integers(1, 5)) for _ in range(rank - 1)), int(rng.integers(2, 7)))
    subsets = [s for k in range(1, rank + 1) for s in itertools.combinations(range(rank), k)]
    for axes in [subsets[i] for i in rng.choice(len(subsets), min(6, len(subsets)), replace=False)]:
        for cls, is_max in ((kdml.ArgminDesc, False), (kdml.ArgmaxDesc, True)):
            direction = INC if rng.random() < 0.5 else DEC
            out_t = OUT_TYPES[int(rng.integers(len(OUT_TYPES)))]
            x = random_values(rng, dt, sizes)
            if rng.random() < 0.5:  # ties
                with np.errstate(invalid="ignore"):
                    x = (x % 3).astype(x.dtype) if not dt.is_float else np.round(x % 3).astype(x.dtype)
            xd = TD(dt, sizes, random_strides(rng, sizes, allow_broadcast=True))
            keep = tuple(1 if d in axes else s for d, s in enumerate(sizes))
            yd = TD(out_t, keep, random_strides(rng, keep, allow_broadcast=False))
            tx, xraw = place(dev, rng, xd, x)
            want = reference(read_logical(xraw, tx.offset, xd), axes, is_max, direction == DEC).astype(out_t.numpy_dtype)
            ty, _ = place(dev, rng, yd)
            before = poison_against(ty, want, rng)
            dev.compile(cls(xd, yd, axes, direction)).execute([tx], [ty])
            assert_output(ty, before, want)


def test_the_pages_examples(dev):
    x = np.array([[1, 2, 3], [3, 0, 4], [2, 5, 2]], np.float32)
    u = DT.UINT32
    np.testing.assert_array_equal(kdml.arg_min(x, 0, index_type=u, device=dev).numpy(), [[0, 1, 2]])
    np.testing.assert_array_equal(kdml.arg_min(x, 1, index_type=u, device=dev).numpy(), [[0], [1], [0]])
    np.testing.assert_array_equal(kdml.arg_min(x, (0, 1), index_type=u, device=dev).numpy(), [[4]])
    np.testing.assert_array_equal(kdml.arg_max(x, 0, index_type=u, device=dev).numpy(), [[1, 2, 1]])
    np.testing.assert_array_equal(kdml.arg_max(x, 1, index_type=u, device=dev).numpy(), [[2], [2], [1]])
    np.testing.assert_array_equal(kdml.arg_max(x, None, index_type=u, device=dev).numpy(), [[7]])
    v = np.array([1, 2, 3, 2, 1], np.float32)
    assert kdml.arg_min(v, device=dev).numpy()[0] == 0 and kdml.arg_min(v, axis_direction=DEC, device=dev).numpy()[0] == 4
    w = np.array([3, 2, 1, 2, 3], np.int8)
    assert kdml.arg_max(w, device=dev).numpy()[0] == 0 and kdml.arg_max(w, axis_direction=DEC, device=dev).numpy()[0] == 4


def test_nan_and_zeros(dev):
    x = np.array([[1, np.nan, 5, np.nan, 0], [-0.0, 0.0, -1, 0.0, -0.0]], np.float32)
    for f, is_max in ((kdml.arg_min, False), (kdml.arg_max, True)):
        for direction in (INC, DEC):
            got = f(x, 1, axis_direction=direction, device=dev).numpy()
            np.testing.assert_array_equal(got, reference(x, (1,), is_max, direction == DEC))
    assert kdml.arg_max(x[1:], 1, axis_direction=DEC, device=dev).numpy()[0, 0] == 4  # -0 == +0


@pytest.mark.parametrize("level", [FL.FL_2_1, FL.FL_3_0])
def test_levels(level):
    with kdml.Device(feature_level=level) as d:
        desc = kdml.ArgmaxDesc(TD(DT.FLOAT32, (2, 3)), TD(DT.INT64, (2, 1)), (1,))
        if level >= FL.FL_3_0:
            d.compile(desc)
        else:
            with pytest.raises(kdml.UnsupportedError, match="^ARGMAX: introduced at DML_FEATURE_LEVEL_3_0"):
                d.compile(desc)


X = TD(DT.FLOAT32, (2, 3, 4))
Y = TD(DT.UINT32, (2, 1, 4))
AM = kdml.ArgminDesc
BAD = [
    (AM(X, Y, (1,), 2), kdml.InvalidArgumentError, r"^axis_direction: 2 is not a DML_AXIS_DIRECTION"),
    (AM(X, Y, ()), kdml.InvalidArgumentError, r"^axes"),
    (AM(X, Y, (3,)), kdml.InvalidArgumentError, r"^axes\[0\]: must be in \[0, 2\]"),
    (AM(X, Y, (1, 1)), kdml.InvalidArgumentError, r"^axes: must be distinct"),
    (AM(X, Y, (2,)), kdml.InvalidArgumentError, r"^output_tensor\.sizes"),
    (AM(X, TD(DT.UINT32, (2, 4)), (1,)), kdml.InvalidArgumentError, r"^output_tensor\.sizes: dimension count"),
    (AM(X, TD(DT.FLOAT32, (2, 1, 4)), (1,)), kdml.UnsupportedError, r"^output_tensor: ARGMIN does not support FLOAT32"),
    (AM(TD(DT.INT64, (2, 3, 4)), Y, (1,)), kdml.UnsupportedError, r"^input_tensor: ARGMIN does not support INT64"),
    (AM(X, TD(DT.UINT32, (2, 1, 4), (0, 1, 1)), (1,)), kdml.InvalidArgumentError, r"^output_tensor\.strides"),
]


@pytest.mark.parametrize(("desc", "error", "match"), BAD, ids=[f"{i}-{m[1:30]}" for i, (_, _, m) in enumerate(BAD)])
def test_refused(dev, desc, error, match):
    with pytest.raises(error, match=match):
        dev.compile(desc)


def test_helper_out(dev, rng):
    x = rng.standard_normal((3, 4, 5)).astype(np.float16)
    out = dev.empty(TD(DT.INT32, (3, 1, 1)))
    assert kdml.arg_max(x, (1, -1), index_type=DT.INT32, out=out) is out
    np.testing.assert_array_equal(out.numpy(), reference(x, (1, 2), True, False))
