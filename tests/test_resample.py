"""RESAMPLE / RESAMPLE1 / RESAMPLE2 (ops/resample.py, shaders/resample.comp) against an independent
float64 loop reference of the pages' relation (InputX = (OutputX - OutputPixelOffset) / Scale -
InputPixelOffset, rounded or interpolated per axis, clamped): nearest in both rounding directions
(bits copied), linear, and kompute_dml's cubic / exclude_outside / extrapolation / antialias
extensions; 1- to 4-D, FLOAT32 and FLOAT16, strided inputs and outputs at random offsets, outputs
poisoned first and every other byte unchanged; NaN and infinities; refused descriptors. Scales and
offsets are dyadic, so the reference's float64 coordinates are exact. kdml.resize against onnx's
reference implementation of Resize."""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
import pytest
from helpers import assert_output, assert_outside_unchanged, place, poison_against, random_strides, read_logical

import kompute_dml as kdml

DT = kdml.DataType
TD = kdml.TensorDesc
IM = kdml.InterpolationMode
U = 2.0 ** -24


def keys(d, a):
    d = abs(d)
    if d <= 1:
        return (a + 2) * d ** 3 - (a + 3) * d ** 2 + 1
    return a * d ** 3 - 5 * a * d ** 2 + 8 * a * d - 4 * a if d < 2 else 0.0


def taps_1d(n, o, mode, up, s, ip, op, a=-0.75, exclude=False, antialias=False):
    """(outside, [(index, weight)]) for output index o of one axis, float64."""
    c = (o - op) / s - ip
    if mode == IM.NEAREST_NEIGHBOR:
        k = math.ceil(c) if up else math.floor(c)
        return not 0 <= k < n, [(min(max(k, 0), n - 1), 1.0)]
    r = 1 if mode == IM.LINEAR else 2
    f = min(s, 1.0) if antialias else 1.0
    idx = [i for i in range(math.floor(c) - 8 * r * int(1 / f + 1), math.ceil(c) + 8 * r * int(1 / f + 1))
           if abs(i - c) * f < r]
    w = [max(0.0, 1 - abs(i - c) * f) if r == 1 else keys((i - c) * f, a) for i in idx]
    w = [v / sum(w) for v in w]
    if exclude:
        w = [v if 0 <= i < n else 0.0 for i, v in zip(idx, w)]
        w = [v / sum(w) for v in w] if sum(w) else w
    return not 0 <= c <= n - 1, [(min(max(i, 0), n - 1), v) for i, v in zip(idx, w)]


def reference(x, shape, mode, up, scales, ips, ops, **kw):
    """float64 outputs and sum |w x| per output (the error bound's scale); NaN where extrapolated
    unless `extra` is given."""
    extra = kw.pop("extra", None)
    x64 = x.astype(np.float64)
    y, scale = np.zeros(shape), np.zeros(shape)
    per = [[taps_1d(n, o, mode, up, s, ip, op, **kw) for o in range(m)]
           for n, m, s, ip, op in zip(x.shape, shape, scales, ips, ops)]
    for o in itertools.product(*(range(m) for m in shape)):
        rows = [per[a][o[a]] for a in range(len(shape))]
        if extra is not None and any(r[0] for r in rows):
            y[o] = extra
            continue
        acc = s = 0.0
        for combo in itertools.product(*(r[1] for r in rows)):
            w = math.prod(t[1] for t in combo)
            if w == 0:
                continue
            v = x64[tuple(t[0] for t in combo)]
            acc += w * v
            s += abs(w * v)
        y[o], scale[o] = acc, s
    return y, scale


def _place(dev, rng, dt, x, want):
    xd = TD(dt, x.shape, random_strides(rng, x.shape, allow_broadcast=False))
    yd = TD(dt, want.shape, random_strides(rng, want.shape, allow_broadcast=False))
    tx, _ = place(dev, rng, xd, x)
    ty, _ = place(dev, rng, yd)
    return xd, yd, tx, ty, poison_against(ty, want.astype(dt.numpy_dtype), rng)


def check_close(ty, before, want, scale, dt, taps, n):
    got = read_logical(assert_outside_unchanged(ty, before), ty.offset, ty.desc).astype(np.float64)
    bound = (2 * n + taps + 1) * U * scale
    if dt == DT.FLOAT16:
        bound = bound + np.abs(want) * 2.0 ** -11 + 2.0 ** -25
    assert np.all(np.abs(got - want) <= bound), float(np.max(np.abs(got - want) - bound))


CASES = [  # x shape, output shape, scales, input offsets, output offsets
    ((2, 3, 5, 7), (2, 3, 10, 4), (1, 1, 2, 0.5), (0.5,) * 4, (-0.5,) * 4),
    ((1, 2, 6, 6), (1, 2, 9, 4), (1, 1, 1.5, 0.75), (0.5, 0.5, 0, 0.25), (-0.5, -0.5, 0, -0.75)),
    ((3, 4, 5), (3, 8, 3), (1, 2, 0.5), (0.5, 0, 0.5), (-0.5, 0.5, -0.5)),
    ((7,), (12,), (1.75,), (0.5,), (-0.5,)),
    ((2, 6), (5, 3), (2.5, 0.5), (0.25, 0.5), (0.5, -0.5)),
]


@pytest.mark.parametrize("dt", [DT.FLOAT32, DT.FLOAT16], ids=lambda d: d.name)
@pytest.mark.parametrize("mode", ["nearest-floor", "nearest-ceil", "linear", "cubic"])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_resample2_against_numpy(dev, rng, case, mode, dt):
    xs, ys, sc, ip, op = CASES[case]
    npd = dt.numpy_dtype
    x = (rng.standard_normal(xs) * 4).astype(npd)
    im = {"linear": IM.LINEAR, "cubic": IM.CUBIC}.get(mode, IM.NEAREST_NEIGHBOR)
    up = mode == "nearest-ceil"
    want, scale = reference(x, ys, im, up, sc, ip, op)
    xd, yd, tx, ty, before = _place(dev, rng, dt, x, want)
    rd = kdml.AxisDirection.INCREASING if up else kdml.AxisDirection.DECREASING
    dev.compile(kdml.Resample2Desc(xd, yd, im, rd, sc, ip, op)).execute([tx], [ty])
    if im == IM.NEAREST_NEIGHBOR:
        assert_output(ty, before, want.astype(npd))
    else:
        check_close(ty, before, want, scale, dt, (2 if im == IM.LINEAR else 4) ** len(xs), len(xs))


@pytest.mark.parametrize("dt", [DT.FLOAT32, DT.FLOAT16], ids=lambda d: d.name)
@pytest.mark.parametrize("im", [IM.NEAREST_NEIGHBOR, IM.LINEAR], ids=lambda m: m.name)
def test_resample1_and_resample(dev, rng, dt, im):
    """RESAMPLE1's nearest is floor(c + 1/2): RESAMPLE2's DECREASING one with InputPixelOffsets 0.5
    less (tests/test_resample_rounding.py); RESAMPLE is RESAMPLE1 with offsets 0.5 and -0.5."""
    xs, ys, sc = (1, 2, 5, 6), (1, 2, 8, 3), (1, 1, 1.5, 0.5)
    ip, op = (0.5, 0.5, 0.25, 0.5), (-0.5, -0.5, 0.5, -0.5)
    x = (rng.standard_normal(xs) * 4).astype(dt.numpy_dtype)
    shift = 0.5 if im == IM.NEAREST_NEIGHBOR else 0.0
    for desc, (i_off, o_off) in ((kdml.Resample1Desc, (ip, op)), (kdml.ResampleDesc, ((0.5,) * 4, (-0.5,) * 4))):
        want, scale = reference(x, ys, im, False, sc, tuple(i - shift for i in i_off), o_off)
        xd, yd, tx, ty, before = _place(dev, rng, dt, x, want)
        args = (xd, yd, im, sc, ip, op) if desc is kdml.Resample1Desc else (xd, yd, im, sc)
        dev.compile(desc(*args)).execute([tx], [ty])
        if im == IM.NEAREST_NEIGHBOR:
            assert_output(ty, before, want.astype(dt.numpy_dtype))
        else:
            check_close(ty, before, want, scale, dt, 16, 4)


@pytest.mark.parametrize("ext", ["exclude", "extrapolate", "antialias-linear", "antialias-cubic"])
def test_extensions(dev, rng, ext):
    xs, ys, sc = (2, 9, 8), (2, 4, 3), (1, 0.5, 0.375)
    ip, op = (0.5, 1.5, 0.5), (-0.5, -0.5, -0.25)
    x = (rng.standard_normal(xs) * 4).astype(np.float32)
    im = IM.LINEAR if ext in ("extrapolate", "antialias-linear") else IM.CUBIC
    kw = dict(exclude=ext == "exclude", antialias=ext.startswith("antialias"), a=-0.5)
    extra = 7.25 if ext == "extrapolate" else None
    want, scale = reference(x, ys, im, False, sc, ip, op, extra=extra, **kw)
    xd, yd, tx, ty, before = _place(dev, rng, DT.FLOAT32, x, want)
    desc = kdml.Resample2Desc(xd, yd, im, kdml.AxisDirection.DECREASING, sc, ip, op, cubic_coeff_a=-0.5,
                              exclude_outside=kw["exclude"], extrapolation_value=extra, antialias=kw["antialias"])
    dev.compile(desc).execute([tx], [ty])
    if extra is not None:
        assert (want == extra).any() and (want != extra).any()
    check_close(ty, before, want, scale, DT.FLOAT32, 64 ** 3, 3)


def test_special_values(dev):
    """Nearest copies bits (NaN payloads, -0); interpolation at an exact sample ignores an infinite
    or NaN neighbour of weight 0 and keeps -0; a NaN inside the kernel gives NaN."""
    x = np.array([[1.0, -0.0, np.inf, 4.0, np.nan, 6.0]], np.float32)
    x.view(np.uint32)[0, 4] = 0x7FC00123
    y = kdml.resample(x, (1, 2), mode="nearest", output_pixel_offsets=(-1, -1), device=dev).numpy()  # floor(o / 2)
    np.testing.assert_array_equal(y.view(np.uint32), np.repeat(x, 2, axis=1).view(np.uint32))
    # asymmetric offsets, scale 1: every output sits on a sample
    y = kdml.resample(x, (1, 1), mode="linear", input_pixel_offsets=(0, 0), output_pixel_offsets=(0, 0),
                      device=dev).numpy()
    assert y[0, 0] == 1 and y[0, 1] == 0 and np.signbit(y[0, 1]) and y[0, 2] == np.inf and np.isnan(y[0, 4])
    y = kdml.resample(x, (1, 2), mode="linear", input_pixel_offsets=(0, 0), output_pixel_offsets=(0, 0),
                      device=dev).numpy()
    assert y[0, 0] == 1 and y[0, 1] == 0.5 and y[0, 2] == 0 and np.isinf(y[0, 5]) and np.isnan(y[0, 8])


F = DT.FLOAT32
BASE = kdml.Resample2Desc(TD(F, (1, 2, 3, 4)), TD(F, (1, 2, 6, 8)), IM.LINEAR, kdml.AxisDirection.DECREASING,
                          (1, 1, 2, 2), (0.5,) * 4, (-0.5,) * 4)


@pytest.mark.parametrize("change, field", [
    (dict(scales=(1, 2, 2)), "scales"),
    (dict(scales=(1, 1, 0, 2)), r"scales\[2\]"),
    (dict(scales=(1, 1, float("inf"), 2)), r"scales\[2\]"),
    (dict(input_pixel_offsets=(0.5, 0.5, float("nan"), 0.5)), r"input_pixel_offsets\[2\]"),
    (dict(output_pixel_offsets=(0.5,)), "output_pixel_offsets"),
    (dict(output_tensor=TD(DT.FLOAT16, (1, 2, 6, 8))), "output_tensor.data_type"),
    (dict(output_tensor=TD(F, (2, 6, 8))), "output_tensor.sizes"),
    (dict(interpolation_mode=7), "interpolation_mode"),
    (dict(rounding_direction=5), "rounding_direction"),
    (dict(interpolation_mode=IM.NEAREST_NEIGHBOR, antialias=True), "antialias"),
    (dict(exclude_outside=1), "exclude_outside"),
    (dict(extrapolation_value="0"), "extrapolation_value"),
    (dict(cubic_coeff_a=True), "cubic_coeff_a"),
])
def test_refused_descriptors_name_their_field(dev, change, field):
    with pytest.raises(kdml.InvalidArgumentError, match=f"^{field}"):
        dev.compile(dataclasses.replace(BASE, **change))


def test_refusals_of_other_versions(dev):
    x, y = TD(F, (1, 2, 3, 4)), TD(F, (1, 2, 6, 8))
    with pytest.raises(kdml.InvalidArgumentError, match="^interpolation_mode"):
        dev.compile(kdml.Resample1Desc(x, y, IM.CUBIC, (1, 1, 2, 2), (0.5,) * 4, (-0.5,) * 4))
    with pytest.raises(kdml.UnsupportedError, match="input_tensor"):
        dev.compile(kdml.ResampleDesc(TD(F, (2, 3, 4)), TD(F, (2, 6, 8)), IM.LINEAR, (1, 2, 2)))
    with pytest.raises(kdml.UnsupportedError, match="input_tensor"):
        dev.compile(dataclasses.replace(BASE, input_tensor=TD(DT.INT32, (1, 2, 3, 4)),
                                        output_tensor=TD(DT.INT32, (1, 2, 6, 8))))


onnx_ref = pytest.importorskip("onnx.reference.ops.op_resize")


@pytest.mark.parametrize("dt", [np.float32, np.float16], ids=lambda d: d.__name__)
@pytest.mark.parametrize("kw", [
    dict(mode="nearest", scales=[1, 1, 1.7, 0.6], nearest_mode="round_prefer_ceil"),
    dict(mode="nearest", sizes=[2, 3, 5, 9], coordinate_transformation_mode="asymmetric", nearest_mode="ceil"),
    dict(mode="linear", sizes=[4, 11], axes=[2, 3], coordinate_transformation_mode="align_corners"),
    dict(mode="linear", scales=[1, 1, 0.5, 0.75], coordinate_transformation_mode="pytorch_half_pixel"),
    dict(mode="cubic", sizes=[9, 4], axes=[3, 2], cubic_coeff_a=-0.5, exclude_outside=1),
    dict(mode="linear", sizes=[3, 4], axes=[2, 3], antialias=1),
    dict(mode="linear", scales=[1, 1, 1.5, 2], coordinate_transformation_mode="half_pixel_symmetric"),
], ids=str)
def test_resize_against_onnx_reference(dev, rng, dt, kw):
    x = (rng.standard_normal((2, 3, 6, 7)) * 4).astype(dt)
    kw = dict(kw)
    ref_kw = dict(coordinate_transformation_mode="half_pixel", nearest_mode="round_prefer_floor", cubic_coeff_a=-0.75,
                  exclude_outside=0, extrapolation_value=0.0, keep_aspect_ratio_policy="stretch", antialias=0)
    ref_kw.update(kw)
    scales = np.array(ref_kw.pop("scales"), np.float32) if "scales" in ref_kw else None
    sizes = np.array(ref_kw.pop("sizes"), np.int64) if "sizes" in ref_kw else None
    want = onnx_ref.Resize.eval(x.astype(np.float64), None, scales, sizes, **ref_kw)
    got = kdml.resize(x, sizes=sizes, scales=scales, device=dev, **{k: v for k, v in kw.items()
                                                                    if k not in ("scales", "sizes")}).numpy()
    assert got.shape == want.shape and got.dtype == dt
    tol = 1e-5 if dt == np.float32 else 2e-3
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.abs(x).max())


def test_resize_five_dimensions_and_helper_errors(dev, rng):
    """A volume (N, C, D, H, W) resizes with N and C merged into one axis; more than 4 resampled axes
    are refused naming x."""
    x = rng.standard_normal((2, 3, 4, 5, 6)).astype(np.float32)
    got = kdml.resize(x, scales=[1, 1, 2, 0.5, 1.5], mode="nearest", device=dev).numpy()
    want = onnx_ref.Resize.eval(x, None, np.array([1, 1, 2, 0.5, 1.5], np.float32), mode="nearest")
    np.testing.assert_array_equal(got, want)
    with pytest.raises(kdml.UnsupportedError, match="^x"):
        kdml.resize(x, scales=[2, 2, 2, 2, 2], device=dev)
    with pytest.raises(kdml.InvalidArgumentError, match="^sizes"):
        kdml.resize(x, sizes=[2, 3, 4, 5, 6], scales=[1] * 5, device=dev)
    with pytest.raises(kdml.InvalidArgumentError, match="^nearest_mode"):
        kdml.resize(x, scales=[1, 1, 2, 1, 1], nearest_mode="up", device=dev)
    with pytest.raises(kdml.InvalidArgumentError, match="^coordinate_transformation_mode"):
        kdml.resize(x, scales=[1, 1, 2, 1, 1], coordinate_transformation_mode="corner", device=dev)
