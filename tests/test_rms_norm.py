"""MEAN_VARIANCE_NORMALIZATION1 with kompute_dml's use_mean = False (RMS normalization: Mean = 0;
ops/mean_variance_normalization.py, docs/mean_variance_normalization.md) against a float64 numpy
reference written from the formula, x / sqrt(mean(x^2) + eps) * scale + bias, within the bound
below: FLOAT32 and FLOAT16, both shader layouts, strided and broadcast operands at random offsets
with poisoned outputs, the skip extension with it (kdml.skip_layer_norm(use_mean=False): its sum
output bit exact), kdml.rms_norm, refusals."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_outside_unchanged, place, poison_against, random_strides, read_logical
from mvn_reference import U, gamma

import kompute_dml as kdml
from kompute_dml.ops.mean_variance_normalization import summation_depth

DT = kdml.DataType
TD = kdml.TensorDesc
FLOATS = {"f32": DT.FLOAT32, "f16": DT.FLOAT16}


def rms_ref(x, scale, bias, axes, eps):
    x = np.asarray(x, np.float64)
    r = 1.0 / np.sqrt((x * x).mean(axis=axes, keepdims=True) + eps)
    z = x * r
    y = z * (1.0 if scale is None else np.asarray(scale, np.float64)) + (0.0 if bias is None else np.asarray(bias, np.float64))
    return y, z


def rms_bound(y, z, scale, bias, depth, f16):
    """|z| ((1 + e) (1 + gamma_2) - 1), e = gamma_{N+10} + 4u the sum of squares' and 1/sqrt's
    relative error, then the scale's product and the bias' sum; FLOAT16 adds its rounding. x2 slack."""
    e = gamma(depth + 10) + 4 * U
    bz = np.abs(z) * ((1 + e) * (1 + gamma(2)) - 1)
    s = 1.0 if scale is None else np.abs(np.asarray(scale, np.float64))
    b = 0.0 if bias is None else np.abs(np.asarray(bias, np.float64))
    by = s * bz * (1 + U) ** 2 + gamma(2) * np.abs(z) * s + U * b
    if f16:
        by = by + 2.0 ** -11 * (np.abs(y) + by) + 2.0 ** -25
    return 2 * by


@pytest.mark.parametrize("t", FLOATS)
@pytest.mark.parametrize("sizes, axes", [((4, 7), (1,)), ((2, 3, 40), (2,)), ((3, 5, 6), (1, 2)), ((6, 300), (1,))])
def test_rms_descriptor(dev, rng, t, sizes, axes):
    dt = FLOATS[t]
    npd = dt.numpy_dtype
    ssz = tuple(s if d in axes else 1 for d, s in enumerate(sizes))
    xd = TD(dt, sizes, random_strides(rng, sizes, allow_broadcast=False))
    sd, bd = TD(dt, ssz, random_strides(rng, ssz, allow_broadcast=True)), TD(dt, ssz)
    yd = TD(dt, sizes, random_strides(rng, sizes, allow_broadcast=False))
    xv = (rng.standard_normal(sizes) * 3 + 0.5).astype(npd)
    sv, bv = rng.standard_normal(ssz).astype(npd), rng.standard_normal(ssz).astype(npd)
    x, _ = place(dev, rng, xd, xv)
    s, sraw = place(dev, rng, sd, sv)
    b, _ = place(dev, rng, bd, bv)
    y, _ = place(dev, rng, yd)
    sl = read_logical(sraw, s.offset, sd)
    want, z = rms_ref(xv, sl, bv, axes, float(np.float32(1e-5)))
    before = poison_against(y, want.astype(npd), rng)
    op = dev.compile(kdml.MeanVarianceNormalization1Desc(xd, sd, bd, yd, axes, True, 1e-5, use_mean=False))
    op.execute([x, s, b], [y])
    got = read_logical(assert_outside_unchanged(y, before), y.offset, yd).astype(np.float64)
    rlen = int(np.prod([sizes[a] for a in axes]))
    err = rms_bound(want, z, sl, bv, summation_depth(rlen, dt), dt == DT.FLOAT16)
    assert (np.abs(got - want) <= err).all(), np.max(np.abs(got - want) / err)


@pytest.mark.parametrize("t", FLOATS)
def test_skip_rms_norm(dev, rng, t):
    """input + skip + skip bias, RMS-normalized; the sum output is the sum the rows used."""
    npd = FLOATS[t].numpy_dtype
    x, skip, g, bias = (rng.standard_normal(s).astype(npd) for s in ((3, 5, 24), (3, 5, 24), (24,), (24,)))
    y, total = kdml.skip_layer_norm(x, skip, g, bias, None, epsilon=1e-6, use_mean=False, sum_out=True, device=dev)
    sums = ((x + skip) + bias).astype(npd)  # each addition rounded to the type
    assert np.array_equal(total.numpy(), sums)
    want, z = rms_ref(sums, g, None, (2,), float(np.float32(1e-6)))
    err = rms_bound(want, z, g, None, summation_depth(24, FLOATS[t]), npd == np.float16)
    assert (np.abs(y.numpy().astype(np.float64) - want) <= err).all()


def test_rms_norm_helper_and_refusals(dev, rng):
    x = rng.standard_normal((2, 4, 8)).astype(np.float32)
    g = rng.standard_normal(8).astype(np.float32)
    want, _ = rms_ref(x, g, None, (2,), float(np.float32(1e-5)))
    np.testing.assert_allclose(kdml.rms_norm(x, g, device=dev).numpy(), want, rtol=1e-5, atol=1e-6)
    want2, _ = rms_ref(x, None, None, (1, 2), float(np.float32(1e-3)))
    np.testing.assert_allclose(kdml.rms_norm(x, axis=1, epsilon=1e-3, device=dev).numpy(), want2, rtol=1e-5, atol=1e-6)
    d = TD(DT.FLOAT32, (2, 8))
    with pytest.raises(kdml.InvalidArgumentError, match="^use_mean: must be a BOOL"):
        dev.compile(kdml.MeanVarianceNormalization1Desc(d, None, None, d, (1,), True, 1e-5, use_mean=2))
    with pytest.raises(kdml.InvalidArgumentError, match="^axis: must be in"):
        kdml.rms_norm(x, g, axis=3, device=dev)
