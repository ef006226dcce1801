"""ELEMENT_WISE_QUANTIZED_LINEAR_ADD (ops/quantized_linear_add.py): against an independent numpy
reference of the page's arithmetic in float32 (dequantize each input, add, divide by the output scale,
round half to even, add the zero point, saturate), bit for bit, and the exact rational value within
one step; every INT8 / UINT8 combination of A, B and Output, zero points present or absent and at
their type's ends, saturation, exact half-way ties, subnormal and zero scales, strided and broadcast
inputs at offsets, strided outputs poisoned first (every byte outside them unchanged); refused
descriptors with the field they name; the feature level; the helper."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from helpers import assert_output, assert_outside_unchanged, compile_at_level, place, poison_against, random_strides, read_logical

import kompute_dml as kdml
from kompute_dml.ops import quantized_linear_add as qla

DT = kdml.DataType
TD = kdml.TensorDesc
F = np.float32
LIMITS = {DT.INT8: (-128, 127), DT.UINT8: (0, 255)}


def reference(a, a_s, a_z, b, b_s, b_z, y_s, y_z, lo, hi):
    """The page's steps in float32 (numpy: each operation correctly rounded, subnormals kept)."""
    with np.errstate(all="ignore"):
        va = (a.astype(F) - F(a_z)) * F(a_s)
        vb = (b.astype(F) - F(b_z)) * F(b_s)
        q = (va + vb) / F(y_s)
        r = np.rint(q) + F(y_z)  # np.rint: half to even
        out = np.where(np.isnan(q), F(lo), np.clip(r, lo, hi))
    return out


def exact(a, a_s, a_z, b, b_s, b_z, y_s):
    """The real-valued quotient (float64: the products exact, the sum and quotient within 2^-50)."""
    with np.errstate(all="ignore"):
        return ((a.astype(np.float64) - a_z) * np.float64(a_s) + (b.astype(np.float64) - b_z) * np.float64(b_s)) / np.float64(y_s)


def _run(dev, rng, a, b, params, types, shape, zps=(True, True, True), strided=True, flushed=False):
    """Place every tensor (random strides, offsets), run, check against the reference (`flushed`: or,
    element by element, against the reference with A's and B's subnormal scales flushed to zero, as a
    device's float controls may do: Vulkan allows it)."""
    at, bt, yt = types
    (a_s, a_z), (b_s, b_z), (y_s, y_z) = params
    rank = len(shape)

    def desc(dt, sizes, bcast):
        return TD(dt, sizes, random_strides(rng, sizes, allow_broadcast=bcast) if strided else None)

    ad, bd = desc(at, shape, True), desc(bt, shape, True)
    ta, raw_a = place(dev, rng, ad, a)
    tb, raw_b = place(dev, rng, bd, b)
    a, b = read_logical(raw_a, ta.offset, ad), read_logical(raw_b, tb.offset, bd)  # (broadcast: the values read)
    one = (1,) * rank

    def q(v, dt):
        return place(dev, rng, TD(dt, one, (int(rng.integers(0, 3)),) * rank), np.array(v, dt.numpy_dtype).reshape(one))[0]

    tensors = [ta, q(a_s, DT.FLOAT32), q(a_z, at) if zps[0] else None, tb, q(b_s, DT.FLOAT32), q(b_z, bt) if zps[1] else None,
               q(y_s, DT.FLOAT32), q(y_z, yt) if zps[2] else None]
    a_z, b_z, y_z = (z if on else 0 for z, on in zip((a_z, b_z, y_z), zps))
    want = reference(a, a_s, a_z, b, b_s, b_z, y_s, y_z, *LIMITS[yt]).astype(yt.numpy_dtype)
    yd = TD(yt, shape, random_strides(rng, shape, allow_broadcast=False) if strided else None)
    ty, _ = place(dev, rng, yd)
    before = poison_against(ty, want, rng)
    desc_ = qla.ElementWiseQuantizedLinearAddDesc(*(t.desc if t is not None else None for t in tensors), yd)
    dev.compile(desc_).execute(tensors, [ty])
    if not flushed:
        assert_output(ty, before, want)
    else:
        got = read_logical(assert_outside_unchanged(ty, before), ty.offset, yd)
        tiny = np.finfo(np.float32).tiny
        a_f, b_f = (F(0) if abs(v) < tiny else v for v in (a_s, b_s))
        alt = reference(a, a_f, a_z, b, b_f, b_z, y_s, y_z, *LIMITS[yt]).astype(yt.numpy_dtype)
        assert np.all((got == want) | (got == alt)), (got, want, alt)
    e = exact(a, a_s, a_z, b, b_s, b_z, y_s)
    with np.errstate(all="ignore"):  # (where float32's products or sum overflow, the float32 steps are the rule)
        finite = np.isfinite(e) & np.isfinite((a.astype(F) - F(a_z)) * F(a_s) + (b.astype(F) - F(b_z)) * F(b_s))
    lo, hi = LIMITS[yt]
    assert np.all(np.abs(want[finite].astype(np.float64) - np.clip(np.rint(e[finite]) + y_z, lo, hi)) <= 1)
    return want, e


Q8 = [DT.INT8, DT.UINT8]


@pytest.mark.parametrize("types", list(itertools.product(Q8, Q8, Q8)), ids=lambda t: "_".join(d.name for d in t))
def test_against_numpy(dev, rng, types):
    shape = tuple(int(s) for s in rng.integers(1, 6, int(rng.integers(1, 6))))
    a = rng.integers(*LIMITS[types[0]], shape, endpoint=True).astype(types[0].numpy_dtype)
    b = rng.integers(*LIMITS[types[1]], shape, endpoint=True).astype(types[1].numpy_dtype)
    params = [(F(rng.uniform(0.001, 0.1)), int(rng.integers(*LIMITS[t], endpoint=True))) for t in types]
    zps = tuple(bool(v) for v in rng.integers(0, 2, 3))
    _run(dev, rng, a, b, params, types, shape, zps)


@pytest.mark.parametrize("types", [(DT.UINT8, DT.UINT8, DT.UINT8), (DT.INT8, DT.INT8, DT.INT8), (DT.UINT8, DT.INT8, DT.INT8)])
def test_zero_points_at_the_ends_and_saturation(dev, rng, types):
    """Every pair of values of A and B (8-D views of 256 x 256), zero points at the types' ends."""
    at, bt, yt = types
    va = np.arange(*(v + i for v, i in zip(LIMITS[at], (0, 1))), dtype=np.int64).astype(at.numpy_dtype)
    vb = np.arange(*(v + i for v, i in zip(LIMITS[bt], (0, 1))), dtype=np.int64).astype(bt.numpy_dtype)
    shape = (2, 2, 2, 2, 2, 2, 2, 2)  # a's and b's 256 values over every 8-D position, b's reversed
    a, b = va.reshape(shape), vb[::-1].reshape(shape)
    for (za, zb, zy), sy in [((LIMITS[at][0], LIMITS[bt][1], LIMITS[yt][0]), F(0.75)),
                             ((LIMITS[at][1], LIMITS[bt][0], LIMITS[yt][1]), F(3.0)),
                             ((0, 0, 0), F(1.0))]:
        want, _ = _run(dev, rng, a, b, [(F(1.5), za), (F(0.5), zb), (sy, zy)], types, shape, strided=False)
        lo, hi = LIMITS[yt]
        if sy == F(0.75):
            assert (want == lo).any() or (want == hi).any()  # saturated somewhere


def test_half_way_ties_round_to_even(dev, rng):
    """Scales of 0.5 and an output scale of 1: every sum k / 2 exact, the odd ones exact ties."""
    a = np.arange(-128, 128, dtype=np.int8).reshape(16, 16)
    b = np.zeros((16, 16), np.int8)
    b[:, ::2] = 1
    want, e = _run(dev, rng, a, b, [(F(0.5), 0), (F(0.5), 0), (F(1.0), 0)], (DT.INT8, DT.INT8, DT.INT8), (16, 16), strided=False)
    ties = np.abs(e - np.floor(e) - 0.5) < 1e-12
    assert ties.sum() > 100
    assert np.all(want[ties] % 2 == 0)
    assert np.array_equal(want.astype(np.float64), np.clip(np.rint(e), -128, 127))


@pytest.mark.parametrize("scales", [
    (F(1e-40), F(3e-41), F(1e-41)),  # subnormal scales and values
    (F(1e-3), F(1e-3), F(0.0)),  # a zero output scale: +-inf (saturated) and 0 / 0 (NaN: Min)
    (F(3e38), F(3e38), F(1e38)),  # a float32 sum overflowing to inf
])
def test_edge_scales(dev, rng, scales):
    a = np.array([[0, 1, 255, 128], [127, 129, 3, 200]], np.uint8)
    b = np.array([[0, 255, 0, 128], [129, 127, 250, 7]], np.uint8)
    _run(dev, rng, a, b, [(scales[0], 128), (scales[1], 128), (scales[2], 5)], (DT.UINT8,) * 3, (2, 4),
         flushed=bool(scales[0] < np.finfo(np.float32).tiny))


def _desc(**over):
    u, i, f = (TD(dt, (1, 1)) for dt in (DT.UINT8, DT.INT8, DT.FLOAT32))
    d = {"a_tensor": TD(DT.UINT8, (2, 3)), "a_scale_tensor": f, "a_zero_point_tensor": u, "b_tensor": TD(DT.INT8, (2, 3)),
         "b_scale_tensor": f, "b_zero_point_tensor": i, "output_scale_tensor": f, "output_zero_point_tensor": u,
         "output_tensor": TD(DT.UINT8, (2, 3))}
    d.update(over)
    return qla.ElementWiseQuantizedLinearAddDesc(**d)


@pytest.mark.parametrize("over, error, field", [
    ({"a_zero_point_tensor": TD(DT.INT8, (1, 1))}, kdml.InvalidArgumentError, "a_zero_point_tensor.data_type"),
    ({"b_zero_point_tensor": TD(DT.UINT8, (1, 1))}, kdml.InvalidArgumentError, "b_zero_point_tensor.data_type"),
    ({"output_zero_point_tensor": TD(DT.INT8, (1, 1))}, kdml.InvalidArgumentError, "output_zero_point_tensor.data_type"),
    ({"b_tensor": TD(DT.INT8, (1, 2, 3))}, kdml.InvalidArgumentError, "b_tensor.sizes"),
    ({"a_scale_tensor": TD(DT.FLOAT32, (1,))}, kdml.InvalidArgumentError, "a_scale_tensor.sizes"),
    ({"output_tensor": TD(DT.UINT8, (3, 2))}, kdml.InvalidArgumentError, "output_tensor.sizes"),
    ({"b_tensor": TD(DT.INT8, (2, 1))}, kdml.InvalidArgumentError, "b_tensor.sizes"),
    ({"b_scale_tensor": TD(DT.FLOAT32, (1, 2))}, kdml.InvalidArgumentError, "b_scale_tensor.sizes"),
    ({"output_zero_point_tensor": TD(DT.UINT8, (2, 1))}, kdml.InvalidArgumentError, "output_zero_point_tensor.sizes"),
    ({"a_tensor": TD(DT.FLOAT32, (2, 3)), "a_zero_point_tensor": None}, kdml.UnsupportedError, "a_tensor"),
    ({"output_scale_tensor": TD(DT.FLOAT16, (1, 1))}, kdml.UnsupportedError, "output_scale_tensor"),
    ({"output_tensor": TD(DT.UINT8, (2, 3), (1, 0))}, kdml.InvalidArgumentError, "output_tensor"),
])
def test_refused(dev, over, error, field):
    with pytest.raises(error, match=field.replace(".", r"\.")):
        dev.compile(_desc(**over))
    assert dev.compile(_desc()) is not None


def test_feature_level():
    with pytest.raises(kdml.UnsupportedError, match="4_0"):
        compile_at_level(kdml.FeatureLevel.FL_3_1, _desc())


def test_helper(dev, rng):
    a = rng.integers(0, 256, (4, 7), dtype=np.uint8)
    b = rng.integers(-128, 128, (4, 7), dtype=np.int8)
    y = kdml.quantized_linear_add(a, 0.02, b, 0.03, 0.05, np.uint8(120), np.int8(-7), np.uint8(131), device=dev)
    np.testing.assert_array_equal(y.numpy(), reference(a, F(0.02), 120, b, F(0.03), -7, F(0.05), 131, 0, 255).astype(np.uint8))
    out = dev.empty((4, 7), np.int8)
    z = dev.tensor(np.array([3], np.int8))
    assert kdml.quantized_linear_add(a, 0.02, b, 0.03, 0.05, y_zero_point=z, out=out, device=dev) is out
    np.testing.assert_array_equal(out.numpy(), reference(a, F(0.02), 0, b, F(0.03), 0, F(0.05), 3, -128, 127).astype(np.int8))
    with pytest.raises(kdml.InvalidArgumentError, match="a_scale"):
        kdml.quantized_linear_add(a, [0.1, 0.2], b, 0.03, 0.05, device=dev)
