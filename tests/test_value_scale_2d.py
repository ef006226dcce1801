"""VALUE_SCALE_2D (ops/value_scale_2d.py: ACTIVATION_LINEAR's function per channel on the element-wise
plans) against numpy's float32 scale * x + bias[c] (two roundings; float16 widened and rounded once):
both types, 1 and 3 channels, strided and broadcast inputs at random offsets, poisoned outputs with every
other byte unchanged, edge values, the table per feature level, refusals, the helper."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_outside_unchanged, place, poison_against, random_strides, random_values, read_logical

import kompute_dml as kdml

DT = kdml.DataType
FL = kdml.FeatureLevel
TD = kdml.TensorDesc
V = kdml.ValueScale2DDesc


def reference(x: np.ndarray, scale: float, bias) -> np.ndarray:
    b = np.asarray(bias, np.float32).reshape(1, -1, 1, 1)
    with np.errstate(over="ignore", invalid="ignore"):
        return (x.astype(np.float32) * np.float32(scale) + b).astype(x.dtype)


def check(got: np.ndarray, want: np.ndarray) -> None:
    assert np.array_equal(np.isnan(got), np.isnan(want))
    keep = ~np.isnan(want)
    bits = f"u{got.dtype.itemsize}"
    np.testing.assert_array_equal(got[keep].view(bits), want[keep].view(bits))


@pytest.mark.parametrize("dt", [DT.FLOAT32, DT.FLOAT16], ids=lambda d: d.name)
@pytest.mark.parametrize(("sizes", "scale", "bias"), [
    ((2, 3, 4, 5), 0.5, (1.0, -2.0, 0.25)), ((1, 3, 7, 9), -3.0, (1e-3, 0.0, -1e-3)), ((3, 1, 5, 4), 2.0, (0.5,)),
    ((1, 3, 1, 1), 1e30, (-1e30, np.inf, 0.0)), ((2, 1, 3, 3), 0.0, (-7.0,))], ids=str)
def test_against_numpy(dev, rng, dt, sizes, scale, bias):
    x = random_values(rng, dt, sizes)
    xd = TD(dt, sizes, random_strides(rng, sizes, allow_broadcast=True))
    yd = TD(dt, sizes, random_strides(rng, sizes, allow_broadcast=False))
    tx, xraw = place(dev, rng, xd, x)
    ty, _ = place(dev, rng, yd)
    want = reference(read_logical(xraw, tx.offset, xd), scale, bias)
    before = poison_against(ty, np.nan_to_num(want), rng)
    dev.compile(V(xd, yd, scale, len(bias), bias)).execute([tx], [ty])
    check(read_logical(assert_outside_unchanged(ty, before), ty.offset, yd), want)
    assert tx.buffer.read() == xraw


def test_helper(dev, rng):
    x = rng.standard_normal((2, 3, 4, 4)).astype(np.float32)
    check(kdml.value_scale_2d(x, 1 / 255, [-0.485, -0.456, -0.406], device=dev).numpy(),
          reference(x, 1 / 255, (-0.485, -0.456, -0.406)))
    g = rng.standard_normal((1, 1, 3, 3)).astype(np.float16)
    check(kdml.value_scale_2d(g, 2.0, 1.0, device=dev).numpy(), reference(g, 2.0, (1.0,)))


@pytest.mark.parametrize(("level", "sizes", "dt", "ok"), [
    (FL.FL_1_0, (1, 3, 2, 2), DT.FLOAT16, True), (FL.FL_3_0, (3, 2, 2), DT.FLOAT32, False),
    (FL.FL_3_0, (1, 1, 1, 3, 2), DT.FLOAT32, False), (FL.FL_3_0, (1, 3, 2, 2), DT.INT32, False)], ids=str)
def test_levels(level, sizes, dt, ok):
    with kdml.Device(feature_level=level) as d:
        c = sizes[1]
        desc = V(TD(dt, sizes), TD(dt, sizes), 1.0, c, (0.0,) * c)
        if ok:
            d.compile(desc)
        else:
            with pytest.raises(kdml.UnsupportedError, match="^input_tensor"):
                d.compile(desc)


X3 = TD(DT.FLOAT32, (1, 3, 2, 2))
X2 = TD(DT.FLOAT32, (1, 2, 2, 2))
BAD = [
    (V(X2, X2, 1.0, 2, (0.0, 0.0)), r"^channel_count: must be 1 or 3"),
    (V(X3, X3, 1.0, 1, (0.0,)), r"^channel_count: must equal input_tensor's channels"),
    (V(X3, X3, 1.0, 3, (0.0, 0.0)), r"^bias: must be a sequence of channel_count \(3\)"),
    (V(X3, X3, np.nan, 3, (0.0, 0.0, 0.0)), r"^scale: must be a number, not NaN"),
    (V(X3, X3, 1.0, 3, (0.0, np.nan, 0.0)), r"^bias\[1\]: must be a number"),
    (V(X3, X3, 1.0, 3, (0.0, "a", 0.0)), r"^bias\[1\]: must be a real number"),
    (V(X3, TD(DT.FLOAT16, (1, 3, 2, 2)), 1.0, 3, (0.0,) * 3), r"^output_tensor\.data_type"),
    (V(X3, TD(DT.FLOAT32, (1, 3, 2, 1)), 1.0, 3, (0.0,) * 3), r"^output_tensor\.sizes"),
    (V(X3, TD(DT.FLOAT32, (1, 3, 2, 2), (12, 4, 0, 1)), 1.0, 3, (0.0,) * 3), r"^output_tensor\.strides"),
]


@pytest.mark.parametrize(("desc", "match"), BAD, ids=[f"{i}" for i in range(len(BAD))])
def test_refused(dev, desc, match):
    with pytest.raises(kdml.InvalidArgumentError, match=match):
        dev.compile(desc)
