"""ELEMENT_WISE_POW and ELEMENT_WISE_CONSTANT_POW (ops/elementwise_pow.py, shaders/pow_math.glsl)
against references written from the stated semantics: floats against float64 numpy.power (C99's
special values, bit for bit with their signs; the measured bound of docs/elementwise_pow.md
elsewhere; every result a float32 holds exact; integral exponents up to 64 correctly rounded);
integers against Python's exact integers with the documented out-of-range rule; exponents of
another type than the input; ScaleBias; strided, broadcast and offset operands with poisoned
outputs; in place; refused descriptors and feature levels. ONNX Pow: tests/test_onnx_pow.py."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_outside_unchanged, place, poison_against, random_strides, read_logical
from unary_reference import check_close, every_float16, float32_inputs

import kompute_dml as kdml

DT = kdml.DataType
FL = kdml.FeatureLevel
TD = kdml.TensorDesc
BOUND = (0.8, 0.501)  # float32: 0.758 measured (docs/elementwise_pow.md); float16: its rounding of the float32 result
INTS = [DT.INT8, DT.UINT8, DT.INT16, DT.UINT16, DT.INT32, DT.UINT32]


def ref64(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """C99's pow in float64 (a scalar exponent made an array: numpy takes sqrt for a scalar 0.5,
    which gives NaN at -inf where pow gives +inf), every NaN operand quiet: pow(NaN, 0) is 1 (a
    signaling NaN widened to float64 stays signaling on some processors, F16C's conversion, and
    the C library's pow then gives NaN)."""
    with np.errstate(all="ignore"):
        x64, y64 = (np.array(a, np.float64) for a in np.broadcast_arrays(np.asarray(x), np.asarray(y)))
        x64, y64 = (np.where(np.isnan(a), np.float64(np.nan), a) for a in (x64, y64))
        return np.power(x64, y64)


def special_grid() -> tuple[np.ndarray, np.ndarray]:
    v = np.array([0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5, 3.0, -3.0, 2.5, -2.5, np.inf, -np.inf, np.nan, 1e-45,
                  3e38, -7.0, 64.0, 65.0], np.float32)
    x, y = (a.reshape(-1) for a in np.meshgrid(v, v, indexing="ij"))
    return x, y


@pytest.mark.parametrize("dt", [np.float32, np.float16], ids=("f32", "f16"))
def test_special_values(dev, dt):
    """Every pair of C99's special operands (zeros of both signs, +-1, +-inf, NaN, integral and
    non-integral, odd and even exponents), bit for bit against numpy's float64 pow rounded (the
    sign of zero and infinity results included; any NaN for NaN)."""
    x, y = special_grid()
    with np.errstate(all="ignore"):
        x, y = x.astype(dt), y.astype(dt)
    got = kdml.pow(x, y, device=dev).numpy()
    with np.errstate(all="ignore"):
        want = ref64(x, y).astype(dt)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)
    assert np.array_equal(got[~nan].view(f"u{got.itemsize}"), want[~nan].view(f"u{got.itemsize}"))


def test_float32_bound(dev, rng):
    """Random bit patterns, bases near 1 with exponents to 1e5, results near overflow and
    underflow (subnormal results), the whole exponent range: within the bound of float64."""
    n = 1 << 17
    cases = [(float32_inputs(rng, n), rng.permutation(float32_inputs(rng, n))),
             ((1 + rng.uniform(-1e-3, 1e-3, n)).astype(np.float32), rng.uniform(-1e5, 1e5, n).astype(np.float32)),
             (rng.uniform(1.5, 2.5, n).astype(np.float32), rng.uniform(-155, 130, n).astype(np.float32)),
             (np.exp2(rng.uniform(-149, 128, n)).astype(np.float32), rng.uniform(-2, 2, n).astype(np.float32))]
    for x, y in cases:
        x = x[: min(x.size, y.size)]
        y = y[: x.size]
        check_close(kdml.pow(x, y, device=dev).numpy(), ref64(x, y), BOUND[0])


def test_integral_exponents(dev, rng):
    """Integral exponents |y| <= 64 are correctly rounded (powers by squaring on float32 pairs:
    within 2^-40 of the exact value before the one rounding), so every result a float32 holds
    comes out exact: all of b^e for b in [-20, 20], e in [-12, 12], and 2^k, 10^k."""
    b = np.arange(-20, 21, dtype=np.float32)
    e = np.arange(-12, 13, dtype=np.float32)
    x, y = (a.reshape(-1) for a in np.meshgrid(b, e, indexing="ij"))
    x = np.concatenate([x, np.full(40, 2, np.float32), np.full(20, 10, np.float32)])
    y = np.concatenate([y, np.arange(-149, 128, 7, dtype=np.float32)[:40], np.arange(-10, 10, dtype=np.float32)])
    got = kdml.pow(x, y, device=dev).numpy()
    exact = ref64(x, y)
    held = (exact.astype(np.float32).astype(np.float64) == exact) | ~np.isfinite(exact)
    assert held.sum() > 600
    np.testing.assert_array_equal(got[held], exact[held].astype(np.float32))
    xs = (rng.standard_normal(1 << 16) * 4).astype(np.float32)
    ys = rng.integers(-64, 65, 1 << 16).astype(np.float32)
    check_close(kdml.pow(xs, ys, device=dev).numpy(), ref64(xs, ys), 0.5 + 2.0**-12)


def test_float16_every_base(dev):
    h = every_float16()
    for y in (np.float16(2.0), np.float16(-0.5), np.float16(3.0), np.float16(0.3333)):
        check_close(kdml.pow(h, np.full(h.shape, y), device=dev).numpy(), ref64(h, np.full(h.shape, y)), BOUND[1])


@pytest.mark.parametrize("edt", [DT.FLOAT16, DT.INT8, DT.UINT8, DT.INT16, DT.UINT16, DT.INT32, DT.UINT32],
                         ids=lambda d: d.name)
def test_float_base_exponent_of_another_type(dev, rng, edt):
    """From 3_0 the exponent may have its own type: integers are taken exactly (with their parity:
    (-1)^(2^24 + 1) = -1, which a float32 exponent could not say), float16 widened."""
    n = 4096
    x = np.concatenate([(rng.standard_normal(n) * 3).astype(np.float32), np.float32([-1, -1, 1.0000001, -2])])
    if edt == DT.FLOAT16:
        e = (rng.standard_normal(x.size) * 4).astype(np.float16)
    else:
        info = np.iinfo(edt.numpy_dtype)
        e = rng.integers(max(info.min, -70), min(info.max, 70), x.size, endpoint=True).astype(edt.numpy_dtype)
        if edt.size == 4:
            e[-4:] = np.array([2**24 + 1, 2**24, 2**24 + 1, 3], np.int64).astype(edt.numpy_dtype)
    got = kdml.pow(x, e, device=dev).numpy()
    assert got.dtype == np.float32
    check_close(got, ref64(x, e), BOUND[0])
    if edt.size == 4:
        assert got[-4] == -1.0 and got[-3] == 1.0 and got[-1] == -8.0


def int_pow_ref(a: np.ndarray, b: np.ndarray, dt: DT) -> np.ndarray:
    """The documented integer rule: the exact power where it fits, else (and 0 to a negative
    power) the top-bit pattern; trunc(a^b) for b < 0."""
    info = np.iinfo(dt.numpy_dtype)
    top = int(info.min) if dt.is_signed else 1 << (8 * dt.size - 1)
    out = []
    for x, e in zip(a.tolist(), b.tolist()):
        if e < 0:
            r = None if x == 0 else (1 if x == 1 else ((-1 if e % 2 else 1) if x == -1 else 0))
        elif abs(x) >= 2 and e > 70:
            r = None
        else:
            r = x**e
        out.append(top if r is None or not info.min <= r <= info.max else r)
    return np.array(out, np.int64).astype(dt.numpy_dtype)


@pytest.mark.parametrize("dt", INTS, ids=lambda d: d.name)
def test_integers(dev, rng, dt):
    """Small bases over exponents 0..40 and negative ones (the type's own exponent type), powers at
    the edge of the range ((-2)^7 fits INT8, 2^7 does not), 0^0 = 1, 0^-1 -> the top bit."""
    info = np.iinfo(dt.numpy_dtype)
    a = rng.integers(max(info.min, -12), min(info.max, 12), 3000, endpoint=True)
    b = rng.integers(-3 if dt.is_signed else 0, 41, 3000)
    edge = np.array([[-2, 8 * dt.size - 1], [2, 8 * dt.size - 1], [0, 0], [1, 0], [-1, 5], [3, 0], [0, 3], [2, 8 * dt.size]])
    if dt.is_signed:
        edge = np.concatenate([edge, [[0, -1], [-1, -3], [1, -7], [5, -2], [-2, 8 * dt.size - 2]]])
    a = np.concatenate([a, edge[:, 0]]).astype(dt.numpy_dtype)
    b = np.concatenate([b, edge[:, 1]]).astype(dt.numpy_dtype)
    got = kdml.pow(a, b, device=dev).numpy()
    np.testing.assert_array_equal(got, int_pow_ref(a, b, dt))


def test_integer_exponent_of_another_type(dev, rng):
    a = rng.integers(-9, 10, 500).astype(np.int32)
    for edt in (np.uint8, np.int16, np.int8):
        e = rng.integers(-3 if np.dtype(edt).kind == "i" else 0, 12, 500).astype(edt)
        np.testing.assert_array_equal(kdml.pow(a, e, device=dev).numpy(), int_pow_ref(a, e, DT.INT32))


def test_scale_bias(dev, rng):
    """pow(x * scale + bias, y): the product and the sum each rounded to float32 first."""
    x = (rng.standard_normal(5000) * 3).astype(np.float32)
    y = rng.uniform(-4, 4, 5000).astype(np.float32)
    got = kdml.pow(x, y, scale_bias=kdml.ScaleBias(-0.5, 3.0), device=dev).numpy()
    g = np.float32(x * np.float32(-0.5)) + np.float32(3.0)
    check_close(got, ref64(g, y), BOUND[0])
    c = kdml.constant_pow(x, exponent=2.5, scale_bias=kdml.ScaleBias(-0.5, 3.0), device=dev).numpy()
    check_close(c, ref64(g, np.float32(2.5)), BOUND[0])


@pytest.mark.parametrize("exponent", [2.0, 0.5, -1.5, 3.0, 0.0, -0.0, 1.0, 1e30, -np.inf, 7.25])
def test_constant_pow(dev, rng, exponent):
    """CONSTANT_POW: the same function with the FLOAT Exponent (rounded to float32), float32 over
    bit patterns and float16 over every value."""
    x = float32_inputs(rng, 1 << 14)
    check_close(kdml.constant_pow(x, exponent=exponent, device=dev).numpy(), ref64(x, np.float32(exponent)), BOUND[0])
    h = every_float16()
    check_close(kdml.constant_pow(h, exponent=exponent, device=dev).numpy(), ref64(h, np.float32(exponent)), BOUND[1])


@pytest.mark.parametrize("dt,edt", [(DT.FLOAT32, DT.FLOAT32), (DT.FLOAT16, DT.INT8), (DT.INT32, DT.INT32),
                                    (DT.UINT8, DT.UINT16)], ids=lambda d: d.name)
def test_layouts(dev, rng, dt, edt):
    """Strided, broadcast and offset operands (up to 8 dimensions: the host enumerates those the
    shader's 5 do not cover), poisoned outputs, every other byte unchanged."""
    for sizes in ((7,), (3, 5), (2, 3, 1, 4), (2, 1, 3, 2, 2, 3), (2, 2, 2, 3, 2, 2, 3, 2)):
        xd = TD(dt, sizes, random_strides(rng, sizes, allow_broadcast=True))
        ed = TD(edt, sizes, random_strides(rng, sizes, allow_broadcast=True))
        od = TD(dt, sizes, random_strides(rng, sizes, allow_broadcast=False))
        if dt.is_float:
            xv = (rng.standard_normal(sizes) * 2).astype(dt.numpy_dtype)
        else:
            xv = rng.integers(0 if not dt.is_signed else -5, 6, sizes).astype(dt.numpy_dtype)
        ev = rng.integers(-4 if edt.is_signed else 0, 5, sizes).astype(edt.numpy_dtype)
        (x, xraw), (e, eraw) = place(dev, rng, xd, xv), place(dev, rng, ed, ev)
        o, _ = place(dev, rng, od)
        lx, le = read_logical(xraw, x.offset, xd), read_logical(eraw, e.offset, ed)
        with np.errstate(over="ignore"):
            want = ref64(lx, le).astype(dt.numpy_dtype) if dt.is_float else int_pow_ref(lx.reshape(-1), le.reshape(-1), dt)
        before = poison_against(o, np.asarray(want).reshape(sizes), rng)
        dev.compile(kdml.ElementWisePowDesc(xd, ed, od)).execute([x, e], [o])
        got = read_logical(assert_outside_unchanged(o, before), o.offset, od)
        if dt.is_float:
            check_close(got, ref64(lx, le), BOUND[dt == DT.FLOAT16])
        else:
            np.testing.assert_array_equal(got.reshape(-1), want)


def test_in_place(dev, rng):
    x = rng.uniform(0.1, 4, (6, 7)).astype(np.float32)
    t, _ = place(dev, rng, TD(DT.FLOAT32, (6, 7)), x)
    dev.compile(kdml.ElementWisePowDesc(t.desc, t.desc, t.desc)).execute([t, t], [t])
    check_close(t.numpy(), ref64(x, x), BOUND[0])


F, I = TD(DT.FLOAT32, (2, 3)), TD(DT.INT32, (2, 3))
BAD = [
    (kdml.ElementWisePowDesc(I, F, I), kdml.UnsupportedError, r"^exponent_tensor: kompute_dml's ELEMENT_WISE_POW takes"),
    (kdml.ElementWisePowDesc(I, I, I, kdml.ScaleBias(1.0, 0.0)), kdml.UnsupportedError, r"^scale_bias: kompute_dml"),
    (kdml.ElementWisePowDesc(F, F, TD(DT.FLOAT16, (2, 3))), kdml.InvalidArgumentError, r"^output_tensor\.data_type"),
    (kdml.ElementWisePowDesc(F, TD(DT.FLOAT32, (3, 2)), F), kdml.InvalidArgumentError, r"^exponent_tensor\.sizes"),
    (kdml.ElementWisePowDesc(F, F, F, kdml.ScaleBias("1", 0.0)), kdml.InvalidArgumentError, r"^scale_bias\.scale"),
    (kdml.ElementWisePowDesc(*(TD(DT.INT64, (2, 3)),) * 3), kdml.UnsupportedError, "does not support INT64"),
    (kdml.ElementWiseConstantPowDesc(F, F, exponent=float("nan")), kdml.InvalidArgumentError, r"^exponent: must be"),
]


@pytest.mark.parametrize(("desc", "error", "match"), BAD, ids=[m[1:30] for _, _, m in BAD])
def test_refused(dev, desc, error, match):
    with pytest.raises(error, match=match):
        dev.compile(desc)


def test_feature_levels():
    """1_0: FLOAT32 / FLOAT16, 4 dimensions, the exponent of the input's type; 3_0: integers,
    1 to 8 dimensions, an exponent of another type."""
    f4, h4, i4 = (TD(t, (2,) * 4) for t in (DT.FLOAT32, DT.FLOAT16, DT.INT32))
    with kdml.Device(feature_level=FL.FL_1_0) as d:
        d.compile(kdml.ElementWisePowDesc(f4, f4, f4))
        d.compile(kdml.ElementWiseConstantPowDesc(h4, h4, exponent=2.0))
        with pytest.raises(kdml.InvalidArgumentError, match=r"^exponent_tensor\.data_type: must equal"):
            d.compile(kdml.ElementWisePowDesc(f4, h4, f4))
        with pytest.raises(kdml.UnsupportedError, match="^input_tensor: ELEMENT_WISE_POW does not support INT32"):
            d.compile(kdml.ElementWisePowDesc(i4, i4, i4))
        with pytest.raises(kdml.UnsupportedError, match="^input_tensor: ELEMENT_WISE_POW supports"):
            d.compile(kdml.ElementWisePowDesc(*(TD(DT.FLOAT32, (4,)),) * 3))
    with kdml.Device(feature_level=FL.FL_3_0) as d:
        d.compile(kdml.ElementWisePowDesc(f4, h4, f4))
        d.compile(kdml.ElementWisePowDesc(i4, TD(DT.UINT8, (2,) * 4), i4))
        d.compile(kdml.ElementWisePowDesc(*(TD(DT.FLOAT32, (2,) * 8),) * 3))
