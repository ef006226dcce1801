"""ELEMENT_WISE_IDENTITY, ELEMENT_WISE_MEAN and ELEMENT_WISE_CLIP1 (ops/elementwise_extra.py) against numpy
references written from the pages: every type of each table, strided and broadcast inputs at random
offsets, outputs poisoned first and every other byte unchanged, in place, edge values (NaN, infinities,
the types' limits, sums that overflow), the tables per feature level, refused descriptors, the helpers."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import (
    assert_output,
    assert_outside_unchanged,
    place,
    poison_against,
    random_strides,
    random_values,
    read_logical,
)

import kompute_dml as kdml

DT = kdml.DataType
FL = kdml.FeatureLevel
TD = kdml.TensorDesc
SB = kdml.ScaleBias
INTS_8_32 = [DT.INT8, DT.UINT8, DT.INT16, DT.UINT16, DT.INT32, DT.UINT32]
NUMERIC = [DT.FLOAT32, DT.FLOAT16, *INTS_8_32, DT.INT64, DT.UINT64]


def check_values(got: np.ndarray, want: np.ndarray, what: str, signed_zeros: bool = True,
                 alt: np.ndarray | None = None) -> None:
    """Floats: NaN exactly where want is NaN, every other element equal bit for bit (`signed_zeros`
    False: -0 and +0 equal), or to `alt`'s bits where given (the computation with subnormals flushed,
    which Vulkan allows a device: elementwise_reference.py); integers equal."""
    if got.dtype.kind == "f":
        assert np.array_equal(np.isnan(got), np.isnan(want)), what
        keep = ~np.isnan(want)
        if not signed_zeros:
            keep &= want != 0
            assert np.all(got[want == 0] == 0), what
        bits = f"u{got.dtype.itemsize}"
        if alt is not None:
            keep &= got.view(bits) != alt.astype(got.dtype).view(bits)
        np.testing.assert_array_equal(got[keep].view(bits), want.astype(got.dtype)[keep].view(bits), err_msg=what)
    else:
        np.testing.assert_array_equal(got, want, err_msg=what)


def run(dev, rng, desc, inputs, want, in_place=False, signed_zeros=True, alt=None):
    """Place the inputs (the descriptor's input descs), a poisoned output (or the first input's
    tensor itself), run, check the values and every other byte."""
    fields = [f for f in ("input_tensor", "a_tensor", "b_tensor") if hasattr(desc, f)]
    tensors = [place(dev, rng, getattr(desc, f), v)[0] for f, v in zip(fields, inputs)]
    if in_place:
        y = tensors[0]
        before = y.buffer.read()
    else:
        y, _ = place(dev, rng, desc.output_tensor)
        before = poison_against(y, np.nan_to_num(want), rng)
    dev.compile(desc).execute(tensors, [y])
    raw = assert_outside_unchanged(y, before)
    got = read_logical(raw, y.offset, y.desc)
    check_values(got, want, str(desc.output_tensor), signed_zeros, alt)
    return got


# ---- ELEMENT_WISE_IDENTITY ---------------------------------------------------------------------------
@pytest.mark.parametrize("dt", list(DT), ids=lambda d: d.name)
def test_identity_copies_bits(dev, rng, dt):
    sizes = (2, 3, 4, 5)
    x = random_values(rng, dt, sizes) if dt != DT.FLOAT64 else rng.standard_normal(sizes)
    xd = TD(dt, sizes, random_strides(rng, sizes, allow_broadcast=True))
    yd = TD(dt, sizes, random_strides(rng, sizes, allow_broadcast=False))
    tx, xraw = place(dev, rng, xd, x)
    ty, _ = place(dev, rng, yd)
    want = read_logical(xraw, tx.offset, xd)
    before = poison_against(ty, want, rng)
    dev.compile(kdml.ElementWiseIdentityDesc(xd, yd)).execute([tx], [ty])
    assert_output(ty, before, want)  # bit patterns: NaN payloads kept


def scale_bias_ref(x: np.ndarray, scale: float, bias: float) -> np.ndarray:
    """numpy float32: x * scale, then + bias (two roundings); float16 widened, rounded once at the end."""
    with np.errstate(over="ignore", invalid="ignore"):
        y = x.astype(np.float32) * np.float32(scale) + np.float32(bias)
        return y.astype(x.dtype)


@pytest.mark.parametrize("dt", [DT.FLOAT32, DT.FLOAT16], ids=lambda d: d.name)
@pytest.mark.parametrize("sb", [(0.5, 0.25), (-3.0, 1e-3), (1.0, 0.0), (1e30, -1e30), (0.0, -2.5), (np.inf, 1.0)])
def test_identity_scale_bias(dev, rng, dt, sb):
    sizes = (3, 1, 5, 7)
    x = random_values(rng, dt, sizes)
    xd = TD(dt, sizes, random_strides(rng, sizes, allow_broadcast=True))
    yd = TD(dt, sizes, random_strides(rng, sizes, allow_broadcast=False))
    xv = np.broadcast_to(x, sizes)
    tx, xraw = place(dev, rng, xd, x)
    ref = scale_bias_ref(read_logical(xraw, tx.offset, xd), *sb)
    run(dev, rng, kdml.ElementWiseIdentityDesc(xd, yd, SB(*sb)), [xv], ref)


def test_identity_in_place_and_helper(dev, rng):
    x = rng.standard_normal((4, 6)).astype(np.float32)
    d = TD(DT.FLOAT32, (4, 6))
    run(dev, rng, kdml.ElementWiseIdentityDesc(d, d, SB(2.0, 1.0)), [x], scale_bias_ref(x, 2.0, 1.0), in_place=True)
    run(dev, rng, kdml.ElementWiseIdentityDesc(d, d), [x], x, in_place=True)
    check_values(kdml.elementwise_identity(x, scale_bias=(0.5, -1), device=dev).numpy(), scale_bias_ref(x, 0.5, -1), "helper")
    i = np.arange(12, dtype=np.int64).reshape(3, 4)
    np.testing.assert_array_equal(kdml.elementwise_identity(i, device=dev).numpy(), i)


@pytest.mark.parametrize(("level", "dt", "sizes", "ok"), [
    (FL.FL_1_0, DT.FLOAT16, (1, 2, 3, 4, 5), True), (FL.FL_1_0, DT.INT32, (1, 2, 3, 4), False),
    (FL.FL_1_0, DT.FLOAT32, (3, 4), False), (FL.FL_2_1, DT.UINT8, (1, 2, 3, 4), True), (FL.FL_3_0, DT.INT8, (5,), True),
    (FL.FL_3_0, DT.FLOAT64, (5,), False), (FL.FL_4_1, DT.FLOAT64, (5,), True), (FL.FL_4_1, DT.UINT64, (5,), True)], ids=str)
def test_identity_levels(level, dt, sizes, ok):
    with kdml.Device(feature_level=level) as d:
        desc = kdml.ElementWiseIdentityDesc(TD(dt, sizes), TD(dt, sizes))
        if ok:
            d.compile(desc)
        else:
            with pytest.raises(kdml.UnsupportedError, match="^input_tensor"):
                d.compile(desc)


# ---- ELEMENT_WISE_MEAN -------------------------------------------------------------------------------
def mean_flushed(a: np.ndarray, b: np.ndarray) -> np.ndarray | None:
    """FLOAT32: the shader's steps with every subnormal operand and result flushed to signed zero (a
    device's float controls may flush them); None for other types (float16 values are normal in float32)."""
    if a.dtype != np.float32:
        return None
    tiny = np.finfo(np.float32).tiny

    def f(v):
        v = np.asarray(v, np.float32)
        return np.where(np.abs(v) < tiny, np.copysign(np.float32(0), v), v).astype(np.float32)

    with np.errstate(invalid="ignore", over="ignore"):
        x, y = f(a), f(b)
        s = f(x + y)
        halves = f(f(x * np.float32(0.5)) + f(y * np.float32(0.5)))
        return np.where(np.isinf(s) & ~np.isinf(x) & ~np.isinf(y), halves, f(s * np.float32(0.5)))


def mean_ref(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind == "f":
        with np.errstate(invalid="ignore", over="ignore"):
            return ((a.astype(np.float64) + b.astype(np.float64)) / 2).astype(a.dtype)  # correctly rounded
    s = a.astype(np.int64) + b.astype(np.int64)
    return (np.sign(s) * (np.abs(s) // 2)).astype(a.dtype)  # exact, truncated toward zero


@pytest.mark.parametrize("dt", [DT.FLOAT32, DT.FLOAT16, DT.INT32, DT.UINT32], ids=lambda d: d.name)
@pytest.mark.parametrize("sizes", [(2, 3, 4, 5), (7,), (1, 2, 1, 3, 1, 2, 3, 2)], ids=str)
def test_mean(dev, rng, dt, sizes):
    a, b = random_values(rng, dt, sizes), random_values(rng, dt, sizes)
    ad = TD(dt, sizes, random_strides(rng, sizes, allow_broadcast=True))
    bd = TD(dt, sizes, random_strides(rng, sizes, allow_broadcast=True))
    yd = TD(dt, sizes, random_strides(rng, sizes, allow_broadcast=False))
    ta, araw = place(dev, rng, ad, a)
    tb, braw = place(dev, rng, bd, b)
    la, lb = read_logical(araw, ta.offset, ad), read_logical(braw, tb.offset, bd)
    run(dev, rng, kdml.ElementWiseMeanDesc(ad, bd, yd), [np.broadcast_to(a, sizes), np.broadcast_to(b, sizes)],
        mean_ref(la, lb), alt=mean_flushed(la, lb))


@pytest.mark.parametrize("dt", [DT.FLOAT32, DT.FLOAT16, DT.INT32, DT.UINT32], ids=lambda d: d.name)
def test_mean_edges(dev, rng, dt):
    npd = dt.numpy_dtype
    if dt.is_float:
        big, tiny = np.finfo(npd).max, np.finfo(npd).tiny
        pairs = [(big, big), (-big, -big), (big, -big), (np.inf, 1), (np.inf, -np.inf), (np.nan, 1), (tiny, 0),
                 (tiny, -tiny), (-0.0, -0.0), (-0.0, 0.0), (1, 2 ** -12), (3, 4)]
    else:
        info = np.iinfo(npd)
        pairs = [(info.max, info.max), (info.min, info.min), (info.max, info.min), (info.min, info.min + 1), (-3, 0),
                 (3, -4), (-1, -1), (5, 6), (0, 1)] if dt.is_signed else \
            [(info.max, info.max), (info.max, info.max - 1), (0, 1), (7, 8), (info.max, 0)]
    a = np.array([p[0] for p in pairs], npd)
    b = np.array([p[1] for p in pairs], npd)
    d = TD(dt, a.shape)
    got = run(dev, rng, kdml.ElementWiseMeanDesc(d, d, d), [a, b], mean_ref(a, b), alt=mean_flushed(a, b))
    run(dev, rng, kdml.ElementWiseMeanDesc(d, d, d), [a, b], got, in_place=True)  # the output over A
    got = kdml.elementwise_mean(a, b[:1], device=dev).numpy()
    b1 = np.broadcast_to(b[:1], a.shape)
    check_values(got, mean_ref(a, b1), "helper", alt=mean_flushed(a, b1))


# ---- ELEMENT_WISE_CLIP1 ------------------------------------------------------------------------------
def clip_ref(x: np.ndarray, lo, hi) -> np.ndarray:
    if x.dtype.kind == "f":
        return np.maximum(x.dtype.type(lo), np.minimum(x, x.dtype.type(hi)))  # NaN passes
    xs = x.astype(object)
    y = np.where(xs > hi, hi, xs)
    return np.where(y < lo, lo, y).astype(x.dtype)


def bounds(rng, dt: DT) -> list[tuple]:
    if dt.is_float:
        return [(-1.5, 2.25), (0.0, 0.0), (-np.inf, 1.0), (3.0, -3.0), (float(np.finfo(dt.numpy_dtype).min), 1e-3)]
    info = np.iinfo(dt.numpy_dtype)
    lo, hi = sorted(int(v) for v in rng.integers(info.min, info.max, size=2, dtype=dt.numpy_dtype, endpoint=True))
    return [(lo, hi), (int(info.min), int(info.max)), (int(info.max), int(info.min)), (hi, hi)]


@pytest.mark.parametrize("dt", NUMERIC, ids=lambda d: d.name)
def test_clip1(dev, rng, dt):
    sizes = (2, 3, 1, 5)
    for lo, hi in bounds(rng, dt):
        x = random_values(rng, dt, sizes)
        xd = TD(dt, sizes, random_strides(rng, sizes, allow_broadcast=True))
        yd = TD(dt, sizes, random_strides(rng, sizes, allow_broadcast=False))
        tx, xraw = place(dev, rng, xd, x)
        want = clip_ref(read_logical(xraw, tx.offset, xd), lo, hi)
        # (numpy's maximum / minimum pick between -0 and +0 by order; CLIP's FN_CLIP as its docs say)
        run(dev, rng, kdml.ElementWiseClip1Desc(xd, yd, None, dt, lo, hi), [np.broadcast_to(x, sizes)], want,
            signed_zeros=False)


def test_clip1_64_bit_bounds_exact_and_scale_bias(dev, rng):
    x = np.array([-2**62, 2**53, 2**53 + 1, 2**53 + 2, 2**63 - 1], np.int64)
    want = clip_ref(x, -2**53 - 1, 2**53 + 1)
    d = TD(DT.INT64, x.shape)
    run(dev, rng, kdml.ElementWiseClip1Desc(d, d, None, DT.INT64, -2**53 - 1, 2**53 + 1), [x], want)
    run(dev, rng, kdml.ElementWiseClip1Desc(d, d, None, DT.INT64, -2**53 - 1, 2**53 + 1), [x], want, in_place=True)
    u = np.array([0, 2**64 - 1, 2**63], np.uint64)
    np.testing.assert_array_equal(kdml.clip1(u, 1, 2**64 - 2, device=dev).numpy(), [1, 2**64 - 2, 2**63])
    f = rng.standard_normal((4, 8)).astype(np.float16)
    fd = TD(DT.FLOAT16, f.shape)
    want = np.maximum(np.float16(-0.5), np.minimum(scale_bias_ref(f, 2.0, 0.5), np.float16(1.0)))
    run(dev, rng, kdml.ElementWiseClip1Desc(fd, fd, SB(2.0, 0.5), DT.FLOAT16, -0.5, 1.0), [f], want)
    check_values(kdml.clip1(f, max=0.0, device=dev).numpy(), np.minimum(f, np.float16(0)), "helper, one bound")


# ---- refusals ------------------------------------------------------------------------------------------
F = TD(DT.FLOAT32, (2, 3))
I = TD(DT.INT32, (2, 3))
C1 = kdml.ElementWiseClip1Desc
BAD = [
    (kdml.ElementWiseIdentityDesc(F, TD(DT.FLOAT16, (2, 3))), kdml.InvalidArgumentError, r"^output_tensor\.data_type"),
    (kdml.ElementWiseIdentityDesc(F, TD(DT.FLOAT32, (3, 2))), kdml.InvalidArgumentError, r"^output_tensor\.sizes"),
    (kdml.ElementWiseIdentityDesc(F, TD(DT.FLOAT32, (2, 3), (0, 1))), kdml.InvalidArgumentError, r"^output_tensor\.strides"),
    (kdml.ElementWiseIdentityDesc(I, I, SB(2.0, 1.0)), kdml.UnsupportedError, r"^scale_bias"),
    (kdml.ElementWiseIdentityDesc(F, F, SB(np.nan, 1.0)), kdml.InvalidArgumentError, r"^scale_bias\.scale"),
    (kdml.ElementWiseIdentityDesc(F, F, SB(1.0, "x")), kdml.InvalidArgumentError, r"^scale_bias\.bias"),
    (kdml.ElementWiseIdentityDesc(F, F, 3.0), kdml.InvalidArgumentError, r"^scale_bias"),
    (kdml.ElementWiseMeanDesc(F, F, TD(DT.FLOAT16, (2, 3))), kdml.InvalidArgumentError, r"^output_tensor\.data_type"),
    (kdml.ElementWiseMeanDesc(F, TD(DT.FLOAT32, (3, 2)), F), kdml.InvalidArgumentError, r"^b_tensor\.sizes"),
    (kdml.ElementWiseMeanDesc(TD(DT.INT16, (2, 3)), TD(DT.INT16, (2, 3)), TD(DT.INT16, (2, 3))), kdml.UnsupportedError,
     r"^a_tensor: ELEMENT_WISE_MEAN does not support INT16"),
    (C1(F, F, None, DT.FLOAT16, 0.0, 1.0), kdml.InvalidArgumentError, r"^min_max_data_type: must equal"),
    (C1(I, I, None, DT.INT32, 2**31, 5), kdml.InvalidArgumentError, r"^min"),
    (C1(I, I, None, DT.INT32, 0, 1.5), kdml.InvalidArgumentError, r"^max"),
    (C1(F, F, None, DT.FLOAT32, np.nan, 1.0), kdml.InvalidArgumentError, r"^min"),
    (C1(F, F, None, DT.FLOAT32, 0.0, 1e39), kdml.InvalidArgumentError, r"^max"),
    (C1(I, I, SB(1.0, 0.0), DT.INT32, 0, 1), kdml.UnsupportedError, r"^scale_bias"),
    (C1(TD(DT.FLOAT64, (2,)), TD(DT.FLOAT64, (2,))), kdml.UnsupportedError, r"^input_tensor: ELEMENT_WISE_CLIP1"),
]


@pytest.mark.parametrize(("desc", "error", "match"), BAD, ids=[f"{i}-{m[1:30]}" for i, (_, _, m) in enumerate(BAD)])
def test_refused(dev, desc, error, match):
    with pytest.raises(error, match=match):
        dev.compile(desc)


def test_levels_mean_clip1():
    with kdml.Device(feature_level=FL.FL_4_1) as d, \
            pytest.raises(kdml.UnsupportedError, match="^ELEMENT_WISE_CLIP1: introduced at DML_FEATURE_LEVEL_5_0"):
        d.compile(C1(F, F))
    with kdml.Device(feature_level=FL.FL_1_0) as d:
        q = TD(DT.FLOAT16, (1, 2, 3, 4))
        d.compile(kdml.ElementWiseMeanDesc(q, q, q))
        with pytest.raises(kdml.UnsupportedError, match="^a_tensor"):
            d.compile(kdml.ElementWiseMeanDesc(F, F, F))
        qi = TD(DT.UINT32, (1, 2, 3, 4))
        with pytest.raises(kdml.UnsupportedError, match="^a_tensor"):
            d.compile(kdml.ElementWiseMeanDesc(qi, qi, qi))
