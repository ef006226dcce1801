"""UPSAMPLE_2D (ops/upsample_2d.py on RESAMPLE's plans, shaders/resample.comp) against an
independent numpy reference: NEAREST_NEIGHBOR repeats each element Height x Width times (np.repeat;
bits copied: NaN payloads, -0); LINEAR is the bilinear average at pixel centres, c = (o + 1/2) /
Scale - 1/2 clamped, computed in float64 by numpy per axis and checked within the error bound. 4-D
and 5-D (depth never averaged), FLOAT32 and FLOAT16, strided views at random offsets (5-D layouts
whose leading axes merge and ones that take a dispatch per N index), outputs poisoned first and
every other byte unchanged; refused descriptors naming their field."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from helpers import assert_output, assert_outside_unchanged, place, poison_against, random_strides, read_logical

import kompute_dml as kdml

DT = kdml.DataType
TD = kdml.TensorDesc
IM = kdml.InterpolationMode
U = 2.0 ** -24


def linear_matrix(n, s):
    """(n * s, n): row o holds the weights of the input indices for output o (pixel centres)."""
    m = np.zeros((n * s, n))
    c = np.clip((np.arange(n * s) + 0.5) / s - 0.5, 0, n - 1)
    lo = np.floor(c).astype(int)
    hi = np.minimum(lo + 1, n - 1)
    f = c - lo
    np.add.at(m, (np.arange(n * s), lo), 1 - f)
    np.add.at(m, (np.arange(n * s), hi), f)
    return m


def reference(x, hs, ws, mode):
    """The output in x's type (nearest) or float64 with sum |w x| (linear)."""
    if mode == IM.NEAREST_NEIGHBOR:
        return np.repeat(np.repeat(x, hs, axis=-2), ws, axis=-1), None
    mh, mw = linear_matrix(x.shape[-2], hs), linear_matrix(x.shape[-1], ws)
    x64 = x.astype(np.float64)
    y = np.einsum("ah,...hw,bw->...ab", mh, x64, mw)
    return y, np.einsum("ah,...hw,bw->...ab", mh, np.abs(x64), mw)


def _strides(rng, shape, kind):
    if kind == "random":
        return random_strides(rng, shape, allow_broadcast=False)
    if kind == "packed":
        return None
    # "split": C's and N's strides padded, so no two leading axes merge (a dispatch per N index), N's
    # odd, so FLOAT16 outputs starting inside a word take element stores
    strides = [1] * len(shape)
    for i in range(len(shape) - 2, -1, -1):
        strides[i] = strides[i + 1] * shape[i + 1] + (2 if i == 1 else 3 if i == 0 else 0)
    return tuple(strides)


@pytest.mark.parametrize("dt", [DT.FLOAT32, DT.FLOAT16], ids=lambda d: d.name)
@pytest.mark.parametrize("mode", [IM.NEAREST_NEIGHBOR, IM.LINEAR], ids=lambda m: m.name)
@pytest.mark.parametrize("shape, hs, ws, layout", [
    ((2, 3, 4, 5), 2, 3, "random"),
    ((1, 2, 3, 1), 1, 4, "packed"),
    ((2, 1, 5, 6), 3, 1, "random"),
    ((2, 3, 2, 3, 4), 2, 2, "packed"),
    ((2, 2, 3, 2, 3), 3, 2, "random"),
    ((3, 2, 2, 3, 2), 2, 3, "split"),
], ids=str)
def test_upsample_2d_against_numpy(dev, rng, dt, mode, shape, hs, ws, layout):
    npd = dt.numpy_dtype
    x = (rng.standard_normal(shape) * 4).astype(npd)
    want, scale = reference(x, hs, ws, mode)
    xd = TD(dt, shape, _strides(rng, shape, layout))
    yd = TD(dt, want.shape, _strides(rng, want.shape, layout))
    tx, _ = place(dev, rng, xd, x)
    ty, _ = place(dev, rng, yd)
    before = poison_against(ty, want.astype(npd), rng)
    dev.compile(kdml.Upsample2DDesc(xd, yd, kdml.Size2D(ws, hs), mode)).execute([tx], [ty])
    if mode == IM.NEAREST_NEIGHBOR:
        assert_output(ty, before, want)
        return
    got = read_logical(assert_outside_unchanged(ty, before), ty.offset, ty.desc).astype(np.float64)
    bound = (2 * 4 + 4 + 1) * U * scale
    if dt == DT.FLOAT16:
        bound = bound + np.abs(want) * 2.0 ** -11 + 2.0 ** -25
    assert np.all(np.abs(got - want) <= bound), float(np.max(np.abs(got - want) - bound))


def test_nearest_copies_bits_and_linear_values(dev):
    """A 2 x 2 image at scale 2: nearest repeats each element (a NaN payload, -0 kept); linear at pixel
    centres gives 0.75 / 0.25 weights inside and the edge values clamped."""
    x = np.array([[[[1.0, -0.0], [np.nan, 4.0]]]], np.float32)
    x.view(np.uint32)[0, 0, 1, 0] = 0x7FC0_0123
    xd, yd = TD(DT.FLOAT32, (1, 1, 2, 2)), TD(DT.FLOAT32, (1, 1, 4, 4))
    tx, ty = dev.tensor(x), dev.empty(yd)
    dev.compile(kdml.Upsample2DDesc(xd, yd, kdml.Size2D(2, 2), IM.NEAREST_NEIGHBOR)).execute([tx], [ty])
    np.testing.assert_array_equal(ty.numpy().view(np.uint32), np.repeat(np.repeat(x, 2, 2), 2, 3).view(np.uint32))
    x = np.array([[[[0.0, 4.0], [8.0, 16.0]]]], np.float32)
    tx = dev.tensor(x)
    dev.compile(kdml.Upsample2DDesc(xd, yd, (2, 2), IM.LINEAR)).execute([tx], [ty])
    np.testing.assert_array_equal(ty.numpy()[0, 0, 0], [0, 1, 3, 4])
    np.testing.assert_array_equal(ty.numpy()[0, 0, :, 0], [0, 2, 6, 8])


F = DT.FLOAT32
BASE = kdml.Upsample2DDesc(TD(F, (1, 2, 3, 4)), TD(F, (1, 2, 6, 12)), kdml.Size2D(3, 2), IM.LINEAR)


@pytest.mark.parametrize("change, field", [
    (dict(output_tensor=TD(F, (1, 2, 6, 8))), r"output_tensor\.sizes"),
    (dict(output_tensor=TD(F, (1, 3, 6, 12))), r"output_tensor\.sizes"),
    (dict(output_tensor=TD(DT.FLOAT16, (1, 2, 6, 12))), r"output_tensor\.data_type"),
    (dict(output_tensor=TD(F, (1, 1, 2, 6, 12))), r"output_tensor\.sizes"),
    (dict(scale_size=kdml.Size2D(0, 2)), r"scale_size\.width"),
    (dict(scale_size=kdml.Size2D(3, -1)), r"scale_size\.height"),
    (dict(scale_size=kdml.Size2D(3, 2 ** 31)), r"scale_size\.height"),
    (dict(scale_size=3), "scale_size"),
    (dict(interpolation_mode=IM.CUBIC), "interpolation_mode"),
    (dict(interpolation_mode=9), "interpolation_mode"),
    (dict(output_tensor=TD(F, (1, 2, 6, 12), (0, 0, 12, 1))), "output_tensor"),
])
def test_refused_descriptors_name_their_field(dev, change, field):
    with pytest.raises(kdml.InvalidArgumentError, match=f"^{field}"):
        dev.compile(dataclasses.replace(BASE, **change))


def test_unsupported_types_and_ranks(dev):
    with pytest.raises(kdml.UnsupportedError, match="input_tensor"):
        dev.compile(dataclasses.replace(BASE, input_tensor=TD(DT.INT32, (1, 2, 3, 4)),
                                        output_tensor=TD(DT.INT32, (1, 2, 6, 12))))
    with pytest.raises(kdml.UnsupportedError, match="input_tensor"):
        dev.compile(kdml.Upsample2DDesc(TD(F, (2, 3, 4)), TD(F, (2, 6, 12)), kdml.Size2D(3, 2)))
