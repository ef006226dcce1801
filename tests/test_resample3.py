"""RESAMPLE3 (ops/resample.py: RESAMPLE2's fields plus Antialiased, feature level 6_4) against
tests/test_resample.py's independent float64 loop reference of the relation: NEAREST_NEIGHBOR in both
rounding directions (bits copied; Antialiased ignored, as ONNX Resize-18's antialias), LINEAR with
and without Antialiased (the triangle widened by 1 / Scale where Scale < 1, weights normalized),
1- to 4-D, FLOAT32 / FLOAT16, strided views at random offsets, outputs poisoned first and every other
byte unchanged; the same outputs as RESAMPLE2 and its `antialias` extension; refused descriptors."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from helpers import assert_output, compile_at_level
from test_resample import _place, check_close, reference, taps_1d

import kompute_dml as kdml

DT = kdml.DataType
TD = kdml.TensorDesc
IM = kdml.InterpolationMode
AD = kdml.AxisDirection

CASES = [  # x shape, output shape, scales, input offsets, output offsets (dyadic: the reference exact)
    ((2, 3, 9, 7), (2, 3, 4, 3), (1, 1, 0.5, 0.375), (0.5,) * 4, (-0.5,) * 4),
    ((1, 2, 6, 6), (1, 2, 9, 2), (1, 1, 1.5, 0.34375), (0.5, 0.5, 0, 0.25), (-0.5, -0.5, 0, -0.75)),
    ((3, 16, 5), (3, 5, 8), (1, 0.3125, 1.75), (0.5, 0.5, 0.5), (-0.5, -0.5, -0.5)),
    ((12,), (5,), (0.40625,), (0.5,), (-0.5,)),
]


@pytest.mark.parametrize("dt", [DT.FLOAT32, DT.FLOAT16], ids=lambda d: d.name)
@pytest.mark.parametrize("mode", ["nearest-floor", "nearest-ceil", "linear", "linear-antialiased"])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_resample3_against_numpy(dev, rng, case, mode, dt):
    xs, ys, sc, ip, op = CASES[case]
    npd = dt.numpy_dtype
    x = (rng.standard_normal(xs) * 4).astype(npd)
    im = IM.LINEAR if mode.startswith("linear") else IM.NEAREST_NEIGHBOR
    up = mode == "nearest-ceil"
    aa = mode == "linear-antialiased"
    want, scale = reference(x, ys, im, up, sc, ip, op, antialias=aa)
    xd, yd, tx, ty, before = _place(dev, rng, dt, x, want)
    rd = AD.INCREASING if up else AD.DECREASING
    # Antialiased on nearest too: ignored there
    dev.compile(kdml.Resample3Desc(xd, yd, im, rd, sc, ip, op, antialiased=aa or im == IM.NEAREST_NEIGHBOR)).execute([tx], [ty])
    if im == IM.NEAREST_NEIGHBOR:
        assert_output(ty, before, want.astype(npd))
    else:
        check_close(ty, before, want, scale, dt, max_taps(xs, ys, sc, ip, op, aa), len(xs))


def max_taps(xs, ys, sc, ip, op, aa):
    """The error bound's K: the product over axes of the most taps an output of that axis takes."""
    k = 1
    for n, m, s, i, o in zip(xs, ys, sc, ip, op):
        k *= max(len(taps_1d(n, j, IM.LINEAR, False, s, i, o, antialias=aa)[1]) for j in range(m))
    return k


def test_same_as_resample2_and_its_extension(dev, rng):
    """RESAMPLE3 with Antialiased is RESAMPLE2 with kompute_dml's `antialias`, bit for bit."""
    x = (rng.standard_normal((2, 3, 10, 9)) * 4).astype(np.float32)
    xd, yd = TD(DT.FLOAT32, x.shape), TD(DT.FLOAT32, (2, 3, 4, 5))
    args = (xd, yd, IM.LINEAR, AD.DECREASING, (1, 1, 0.4, 0.5), (0.5,) * 4, (-0.5,) * 4)
    tx, y3, y2 = dev.tensor(x), dev.empty(yd), dev.empty(yd)
    dev.compile(kdml.Resample3Desc(*args, antialiased=True)).execute([tx], [y3])
    dev.compile(kdml.Resample2Desc(*args, antialias=True)).execute([tx], [y2])
    np.testing.assert_array_equal(y3.numpy().view(np.uint32), y2.numpy().view(np.uint32))
    y1 = dev.empty(yd)
    dev.compile(kdml.Resample3Desc(*args)).execute([tx], [y1])
    assert not np.array_equal(y1.numpy(), y3.numpy())  # downsampling: the widened kernel differs


F = DT.FLOAT32
BASE = kdml.Resample3Desc(TD(F, (1, 2, 3, 4)), TD(F, (1, 2, 6, 8)), IM.LINEAR, AD.DECREASING, (1, 1, 2, 2),
                          (0.5,) * 4, (-0.5,) * 4, True)


@pytest.mark.parametrize("change, field", [
    (dict(scales=(1, 2, 2)), "scales"),
    (dict(scales=(1, 1, -1, 2)), r"scales\[2\]"),
    (dict(input_pixel_offsets=(0.5, 0.5, float("inf"), 0.5)), r"input_pixel_offsets\[2\]"),
    (dict(output_pixel_offsets=(0.5,)), "output_pixel_offsets"),
    (dict(output_tensor=TD(DT.FLOAT16, (1, 2, 6, 8))), r"output_tensor\.data_type"),
    (dict(output_tensor=TD(F, (2, 6, 8))), r"output_tensor\.sizes"),
    (dict(interpolation_mode=IM.CUBIC), "interpolation_mode"),
    (dict(rounding_direction=3), "rounding_direction"),
    (dict(antialiased=1), "antialiased"),
])
def test_refused_descriptors_name_their_field(dev, change, field):
    with pytest.raises(kdml.InvalidArgumentError, match=f"^{field}"):
        dev.compile(dataclasses.replace(BASE, **change))


def test_feature_level_and_types(dev):
    with pytest.raises(kdml.UnsupportedError):
        compile_at_level(kdml.FeatureLevel.FL_6_3, BASE)
    with pytest.raises(kdml.UnsupportedError, match="input_tensor"):
        dev.compile(dataclasses.replace(BASE, input_tensor=TD(DT.INT32, (1, 2, 3, 4)),
                                        output_tensor=TD(DT.INT32, (1, 2, 6, 8))))
    with pytest.raises(kdml.UnsupportedError, match="input_tensor"):
        dev.compile(dataclasses.replace(BASE, input_tensor=TD(F, (1, 1, 2, 3, 4)), output_tensor=TD(F, (1, 1, 2, 6, 8)),
                                        scales=(1,) * 5, input_pixel_offsets=(0,) * 5, output_pixel_offsets=(0,) * 5))
