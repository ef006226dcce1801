"""MEAN_VARIANCE_NORMALIZATION (the first version: CrossChannel) and MEAN_VARIANCE_NORMALIZATION2
(UseMean / UseVariance) on the 1 version's plan (ops/mean_variance_normalization_versions.py) against
float64 numpy references written from the pages' formula, within docs/mean_variance_normalization.md's
bound (tests/mvn_reference.py; with Mean 0 the bound below): FLOAT32 and FLOAT16, both CrossChannel
values and all four UseMean / UseVariance combinations, strided inputs and outputs, broadcast scales
and biases at random offsets, outputs poisoned first and every other byte unchanged; the first
version's broadcast channel below 4_0; feature levels; refused descriptors."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from helpers import assert_outside_unchanged, compile_at_level, place, poison_against, random_strides, read_logical
from mvn_reference import U, assert_within, gamma

import kompute_dml as kdml
from kompute_dml.ops.mean_variance_normalization import summation_depth

DT = kdml.DataType
TD = kdml.TensorDesc
FL = kdml.FeatureLevel
FLOATS = {"f32": DT.FLOAT32, "f16": DT.FLOAT16}
EPS = 1e-5


def operands(dev, rng, dt, sizes, ssz, scale=True, bias=True):
    npd = dt.numpy_dtype
    xd = TD(dt, sizes, random_strides(rng, sizes, allow_broadcast=False))
    yd = TD(dt, sizes, random_strides(rng, sizes, allow_broadcast=False))
    xv = (rng.standard_normal(sizes) * 3 + 0.5).astype(npd)
    x, _ = place(dev, rng, xd, xv)
    y, _ = place(dev, rng, yd)
    parts = []
    for present in (scale, bias):
        if not present:
            parts.append((None, None, None))
            continue
        d = TD(dt, ssz, random_strides(rng, ssz, allow_broadcast=True))
        t, raw = place(dev, rng, d, rng.standard_normal(ssz).astype(npd))
        parts.append((d, t, read_logical(raw, t.offset, d)))
    return xd, yd, xv, x, y, parts


def run(dev, desc, x, y, parts, want, rng):
    before = poison_against(y, want.astype(y.desc.data_type.numpy_dtype), rng)
    dev.compile(desc).execute([x, parts[0][1], parts[1][1]], [y])
    return read_logical(assert_outside_unchanged(y, before), y.offset, y.desc)


@pytest.mark.parametrize("t", FLOATS)
@pytest.mark.parametrize("cross", [False, True], ids=["per_channel", "cross_channel"])
@pytest.mark.parametrize("nv", [True, False], ids=["variance", "mean_only"])
def test_first_version(dev, rng, t, cross, nv):
    dt = FLOATS[t]
    sizes = (2, 3, 5, 7)
    xd, yd, xv, x, y, parts = operands(dev, rng, dt, sizes, (1, 3, 5, 1))
    axes = (1, 2, 3) if cross else (2, 3)
    (sd, _, sv), (bd, _, bv) = parts
    want_shape = np.zeros(sizes)
    desc = kdml.MeanVarianceNormalizationDesc(xd, sd, bd, yd, cross, nv, EPS)
    got = run(dev, desc, x, y, parts, want_shape, rng)
    rlen = int(np.prod([sizes[a] for a in axes]))
    assert_within(got, xv, sv, bv, axes, nv, float(np.float32(EPS)), summation_depth(rlen, dt))


def plain_ref(x, scale, bias, axes, use_mean, use_variance, eps):
    """Float64 y and the normalized z of MEAN_VARIANCE_NORMALIZATION2 with Mean 0 (use_mean False)."""
    x = np.asarray(x, np.float64)
    m = x.mean(axis=axes, keepdims=True) if use_mean else 0.0
    z = x - m
    if use_variance:
        z = z / np.sqrt((z * z).mean(axis=axes, keepdims=True) + eps)
    s = 1.0 if scale is None else np.asarray(scale, np.float64)
    b = 0.0 if bias is None else np.asarray(bias, np.float64)
    return z * s + b, z


def mean0_bound(y, z, scale, bias, depth, use_variance, f16):
    """With Mean 0 the mean's error E is 0: z = x exactly (no division) or x / sqrt(mean(x^2) + eps)
    with relative error gamma_{N+10} + 4u (docs/mean_variance_normalization.md's e_r at E = 0); then
    the scale's product and the bias' sum; FLOAT16 its rounding. x2 slack."""
    e = gamma(depth + 10) + 4 * U if use_variance else 0.0
    s = 1.0 if scale is None else np.abs(np.asarray(scale, np.float64))
    b = 0.0 if bias is None else np.abs(np.asarray(bias, np.float64))
    bz = np.abs(z) * ((1 + e) * (1 + gamma(2)) - 1)
    by = s * bz * (1 + U) ** 2 + gamma(2) * np.abs(z) * s + U * b
    if f16:
        by = by + 2.0 ** -11 * (np.abs(y) + by) + 2.0 ** -25
    return 2 * by


@pytest.mark.parametrize("t", FLOATS)
@pytest.mark.parametrize("use_mean, use_variance", [(True, True), (True, False), (False, True), (False, False)],
                         ids=["mvn", "mean_only", "rms", "affine"])
@pytest.mark.parametrize("sizes, axes, ssz", [((4, 9), (1,), (1, 9)), ((2, 3, 40), (2,), (1, 1, 40)),
                                              ((2, 3, 4, 5), (1, 3), (2, 1, 4, 1)), ((3, 300), (1,), (1, 1))],
                         ids=["2d", "3d", "4d-two-axes", "long-row"])
def test_second_version(dev, rng, t, use_mean, use_variance, sizes, axes, ssz):
    dt = FLOATS[t]
    xd, yd, xv, x, y, parts = operands(dev, rng, dt, sizes, ssz, scale=True, bias=rng.random() < 0.7)
    (sd, _, sv), (bd, _, bv) = parts
    desc = kdml.MeanVarianceNormalization2Desc(xd, sd, bd, yd, axes, use_mean, use_variance, EPS)
    want, z = plain_ref(xv, sv, bv, axes, use_mean, use_variance, float(np.float32(EPS)))
    got = run(dev, desc, x, y, parts, want, rng)
    rlen = int(np.prod([sizes[a] for a in axes]))
    if use_mean:
        assert_within(got, xv, sv, bv, axes, use_variance, float(np.float32(EPS)), summation_depth(rlen, dt))
    else:
        err = mean0_bound(want, z, sv, bv, summation_depth(rlen, dt), use_variance, dt == DT.FLOAT16)
        assert (np.abs(got.astype(np.float64) - want) <= err).all(), np.max(np.abs(got - want) / err)


F = DT.FLOAT32
X4 = TD(F, (2, 3, 4, 5))
FIRST = kdml.MeanVarianceNormalizationDesc(X4, TD(F, (1, 3, 1, 1)), TD(F, (1, 3, 1, 1)), X4, False, True, EPS)
SECOND = kdml.MeanVarianceNormalization2Desc(X4, TD(F, (1, 3, 1, 1)), TD(F, (1, 3, 1, 1)), X4, (2, 3), True, True, EPS)


@pytest.mark.parametrize("base, change, field", [
    (FIRST, dict(cross_channel=2), "cross_channel"),
    (FIRST, dict(normalize_variance="yes"), "normalize_variance"),
    (FIRST, dict(epsilon="1e-5"), "epsilon"),
    (FIRST, dict(output_tensor=TD(F, (2, 3, 4, 6))), "output_tensor.sizes"),
    (FIRST, dict(scale_tensor=TD(F, (1, 2, 1, 1))), "scale_tensor.sizes"),
    (FIRST, dict(bias_tensor=TD(DT.FLOAT16, (1, 3, 1, 1))), "bias_tensor.data_type"),
    (SECOND, dict(use_mean=None), "use_mean"),
    (SECOND, dict(use_variance=3), "use_variance"),
    (SECOND, dict(axes=()), "axes"),
    (SECOND, dict(axes=(2, 2)), "axes"),
    (SECOND, dict(axes=(4,)), "axes\\[0\\]"),
    (SECOND, dict(output_tensor=TD(F, (2, 3, 4, 5), (0, 0, 5, 1))), "output_tensor"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_refused_descriptors_name_their_field(dev, base, change, field):
    with pytest.raises(kdml.InvalidArgumentError, match=f"^{field}"):
        dev.compile(dataclasses.replace(base, **change))


def test_fused_activation_refused(dev):
    for base in (FIRST, SECOND):
        with pytest.raises(kdml.UnsupportedError, match="^fused_activation"):
            dev.compile(dataclasses.replace(base, fused_activation=object()))


def test_feature_levels_and_the_first_versions_broadcast_channel():
    # the first version at 1_0: a scale broadcast over the channels too (its page allows any 1;
    # MEAN_VARIANCE_NORMALIZATION1 below 4_0 would refuse it); scale and bias together below 5_2
    compile_at_level(FL.FL_1_0, dataclasses.replace(FIRST, scale_tensor=TD(F, (1, 1, 1, 1))))
    with pytest.raises(kdml.InvalidArgumentError, match="^bias_tensor"):
        compile_at_level(FL.FL_1_0, dataclasses.replace(FIRST, bias_tensor=None))
    compile_at_level(FL.FL_5_2, dataclasses.replace(FIRST, bias_tensor=None))
    with pytest.raises(kdml.UnsupportedError, match="^input_tensor"):
        compile_at_level(FL.FL_6_4, kdml.MeanVarianceNormalizationDesc(TD(F, (3, 4, 5)), None, None, TD(F, (3, 4, 5)),
                                                                       True, True, EPS))
    with pytest.raises(kdml.UnsupportedError, match="MEAN_VARIANCE_NORMALIZATION2"):
        compile_at_level(FL.FL_6_2, SECOND)
    compile_at_level(FL.FL_6_3, dataclasses.replace(SECOND, scale_tensor=None))
