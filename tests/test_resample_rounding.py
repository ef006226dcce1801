"""RESAMPLE and RESAMPLE1's NEAREST_NEIGHBOR rounding (ops/resample.py's docstring weighs the
evidence): the input element nearest to the pixel centre, floor(c + 1/2) with halves rounded up,
c = (OutputX - OutputPixelOffset) / Scale - InputPixelOffset, the index clamped. Checked against an
independent reference in exact rational arithmetic (Python's fractions, an index per axis, numpy
gathers): odd scales (3, 1.5, 0.5 and their mixes), the RESAMPLE_GRAD page's example run as
RESAMPLE1, RESAMPLE at its pixel centres, FLOAT32 / FLOAT16 bits (NaN payloads, -0), strided
views at random offsets, outputs poisoned first and every other byte unchanged."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from helpers import assert_output, place, poison_against, random_strides

import kompute_dml as kdml

DT = kdml.DataType
TD = kdml.TensorDesc
IM = kdml.InterpolationMode


def nearest_indices(n_in, n_out, scale, ip, op):
    """Per output index: min(max(floor(c + 1/2), 0), n_in - 1), exactly."""
    s, i0, o0 = Fraction(scale), Fraction(ip), Fraction(op)
    return [min(max(math.floor((o - o0) / s - i0 + Fraction(1, 2)), 0), n_in - 1) for o in range(n_out)]


def reference(x, out_shape, scales, ips, ops):
    idx = [nearest_indices(n, m, s, i, o) for n, m, s, i, o in zip(x.shape, out_shape, scales, ips, ops)]
    return x[np.ix_(*idx)]


def run(dev, rng, desc_cls, x, out_shape, dt, *args):
    want = reference(x, out_shape, *args) if desc_cls is kdml.Resample1Desc else reference(
        x, out_shape, args[0], (0.5,) * x.ndim, (-0.5,) * x.ndim)
    xd = TD(dt, x.shape, random_strides(rng, x.shape, allow_broadcast=False))
    yd = TD(dt, out_shape, random_strides(rng, out_shape, allow_broadcast=False))
    tx, _ = place(dev, rng, xd, x)
    ty, _ = place(dev, rng, yd)
    before = poison_against(ty, want, rng)
    dev.compile(desc_cls(xd, yd, IM.NEAREST_NEIGHBOR, *args)).execute([tx], [ty])
    assert_output(ty, before, want)
    return want


def test_resample_scale_three_takes_the_nearest_centre(dev, rng):
    """The brief's case: [0, 1, 2] at scale 3 is 0 0 0 1 1 1 2 2 2 (floor(c) would give 0 0 0 0 1 1 1 2 2)."""
    x = np.arange(3, dtype=np.float32).reshape(1, 1, 1, 3)
    got = run(dev, rng, kdml.ResampleDesc, x, (1, 1, 1, 9), DT.FLOAT32, (1, 1, 1, 3))
    np.testing.assert_array_equal(got.reshape(-1), [0, 0, 0, 1, 1, 1, 2, 2, 2])


def test_resample_grad_page_example_as_resample1(dev, rng):
    """DML_RESAMPLE_GRAD_OPERATOR_DESC's example: a RESAMPLE1 nearest with scales 0.5 (height) and
    1.5 (width) maps [[1, 2], [3, 4]] to [[1, 1, 2]]. The page names no offsets; the example holds
    with InputPixelOffsets 0.5 and OutputPixelOffsets 0 (index floor(OutputX / Scale)). At RESAMPLE's
    pixel centres (0.5, -0.5) both axes sample exactly half way (c = 0.5) and halves round up:
    [[3, 4, 4]] (the divergence ops/resample.py's docstring records)."""
    x = np.array([[[[1, 2], [3, 4]]]], np.float32)
    sc = (1, 1, 0.5, 1.5)
    got = run(dev, rng, kdml.Resample1Desc, x, (1, 1, 1, 3), DT.FLOAT32, sc, (0.5,) * 4, (0, 0, 0, 0))
    np.testing.assert_array_equal(got, [[[[1, 1, 2]]]])
    got = run(dev, rng, kdml.Resample1Desc, x, (1, 1, 1, 3), DT.FLOAT32, sc, (0.5,) * 4, (-0.5,) * 4)
    np.testing.assert_array_equal(got, [[[[3, 4, 4]]]])


@pytest.mark.parametrize("dt", [DT.FLOAT32, DT.FLOAT16], ids=lambda d: d.name)
@pytest.mark.parametrize("scales, out_hw", [
    ((3, 3), (6, 9)),
    ((1.5, 1.5), (4, 7)),
    ((0.5, 0.5), (2, 2)),
    ((3, 0.5), (5, 3)),
    ((1.5, 0.5), (3, 2)),
    ((0.5, 3), (1, 12)),
], ids=str)
def test_resample_odd_scales(dev, rng, dt, scales, out_hw):
    """RESAMPLE (pixel centres) at odd scales, outputs larger or smaller than the scaled input
    (clamped edges); the values' bits are copied."""
    x = (rng.standard_normal((2, 3, 3, 5)) * 4).astype(dt.numpy_dtype)
    x.reshape(-1).view(f"u{x.itemsize}")[0] ^= 1 << (8 * x.itemsize - 1)  # a sign flip, exactly kept
    run(dev, rng, kdml.ResampleDesc, x, (2, 3, *out_hw), dt, (1, 1, *scales))


@pytest.mark.parametrize("dt", [DT.FLOAT32, DT.FLOAT16], ids=lambda d: d.name)
@pytest.mark.parametrize("case", [
    ((1, 2, 3, 4), (1, 2, 9, 6), (1, 1, 3, 1.5), (0.5, 0.5, 0.5, 0.5), (-0.5, -0.5, -0.5, -0.5)),
    ((2, 1, 6, 5), (3, 1, 3, 8), (1.5, 1, 0.5, 1.5), (0, 0.25, 0, 0.5), (0, 0, 0, 0)),
    ((1, 1, 5, 6), (1, 1, 15, 3), (1, 1, 3, 0.5), (0.5, 0.5, 0, 0.5), (-0.5, -0.5, 0.5, 0)),
    ((3, 2, 4, 3), (2, 2, 6, 9), (0.5, 1, 1.5, 3), (0.5, 0.5, 0.5, 0.5), (0.25, -0.5, 0, -0.5)),
], ids=str)
def test_resample1_odd_scales_and_offsets(dev, rng, dt, case):
    xs, ys, sc, ip, op = case
    x = (rng.standard_normal(xs) * 4).astype(dt.numpy_dtype)
    run(dev, rng, kdml.Resample1Desc, x, ys, dt, sc, ip, op)


def test_ties_round_up_and_nan_payload_kept(dev, rng):
    """Exact halves (scale 2, offsets 0: c = o / 2, a half at every odd o) go to the higher index; a
    NaN's payload is copied."""
    x = np.array([[[[1.0, np.nan, -0.0, 4.0]]]], np.float32)
    x.view(np.uint32)[0, 0, 0, 1] = 0x7FC0_0ABC
    want = run(dev, rng, kdml.Resample1Desc, x, (1, 1, 1, 8), DT.FLOAT32, (1, 1, 1, 2), (0,) * 4, (0,) * 4)
    assert want.view(np.uint32)[0, 0, 0, 1] == 0x7FC0_0ABC  # o = 1: c = 0.5, up to index 1
    np.testing.assert_array_equal(nearest_indices(4, 8, 2, 0, 0), [0, 1, 1, 2, 2, 3, 3, 3])
