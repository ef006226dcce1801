"""ELEMENT_WISE_MODULUS_TRUNCATE / _FLOOR, BIT_SHIFT_LEFT / _RIGHT, BIT_COUNT and DIFFERENCE_SQUARE
(ops/elementwise_integer.py) against references written from the stated semantics, bit for bit:
numpy's np.fmod / np.mod for floats (float32 and float16 arithmetic, every pair of special values,
subnormals), Python integers for the integer types (x mod 0 = x, the floor form's sign rule,
shifts of the width or more giving 0), np.bitwise_count; every type of the tables; strided,
broadcast and offset operands with poisoned outputs; in place; refused descriptors and feature
levels; ONNX Mod and BitShift against onnxruntime and onnx's node cases."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_output, assert_outside_unchanged, place, poison_against, random_strides, random_values, read_logical

import kompute_dml as kdml

DT = kdml.DataType
FL = kdml.FeatureLevel
TD = kdml.TensorDesc
INTS = [DT.INT8, DT.UINT8, DT.INT16, DT.UINT16, DT.INT32, DT.UINT32, DT.INT64, DT.UINT64]
MOD_TYPES = [DT.FLOAT32, DT.FLOAT16, *INTS]
UINTS = [DT.UINT8, DT.UINT16, DT.UINT32, DT.UINT64]


def mod_ref(op: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """floats: numpy's own (its float32 / float16 arithmetic); integers: Python's, x mod 0 = x,
    the floor form taking the divisor's sign."""
    a, b = np.broadcast_arrays(a, b)
    if a.dtype.kind == "f":
        with np.errstate(all="ignore"):
            return (np.fmod if op == "fmod" else np.mod)(a, b)
    out = []
    for x, y in zip(a.reshape(-1).tolist(), b.reshape(-1).tolist()):
        if y == 0:
            out.append(x)
            continue
        r = abs(x) % abs(y) * (-1 if x < 0 else 1)  # C's: the dividend's sign
        if op == "mod" and r != 0 and (r < 0) != (y < 0):
            r += y
        out.append(r)
    return np.array(out, dtype=object).astype(np.int64 if a.dtype.kind == "i" else np.uint64).astype(a.dtype).reshape(a.shape)


def shift_ref(op: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = np.broadcast_arrays(a, b)
    bits = 8 * a.dtype.itemsize
    out = [0 if s >= bits else ((x << s) if op == "left" else (x >> s)) & ((1 << bits) - 1)
           for x, s in zip(a.reshape(-1).tolist(), b.reshape(-1).tolist())]
    return np.array(out, dtype=object).astype(np.uint64).astype(a.dtype).reshape(a.shape)


def dsq_ref(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        d = a - b  # numpy: floats rounded to the type, unsigned / signed 32-bit integers wrap
        return d * d


DESC = {"fmod": kdml.ElementWiseModulusTruncateDesc, "mod": kdml.ElementWiseModulusFloorDesc,
        "left": kdml.ElementWiseBitShiftLeftDesc, "right": kdml.ElementWiseBitShiftRightDesc,
        "dsq": kdml.ElementWiseDifferenceSquareDesc}
HELPER = {"fmod": kdml.fmod, "mod": kdml.mod, "left": kdml.left_shift, "right": kdml.right_shift,
          "dsq": kdml.difference_square}


def reference(op: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return mod_ref(op, a, b) if op in ("fmod", "mod") else shift_ref(op, a, b) if op in ("left", "right") else dsq_ref(a, b)


def same_bits(got: np.ndarray, want: np.ndarray) -> None:
    if got.dtype.kind == "f":
        nan = np.isnan(want)
        assert np.array_equal(np.isnan(got), nan)
        got, want = got[~nan], want[~nan]
    u = f"u{got.dtype.itemsize}"
    bad = np.flatnonzero(got.view(u) != want.view(u))
    assert bad.size == 0, f"{bad.size} differ, first: got {got.reshape(-1)[bad[0]]!r}, want {want.reshape(-1)[bad[0]]!r}"


@pytest.mark.parametrize("op", ["fmod", "mod"])
@pytest.mark.parametrize("dt", [np.float32, np.float16], ids=("f32", "f16"))
def test_float_modulus(dev, rng, op, dt):
    """Every pair of special values (signed zeros, infinities, NaN, the extremes, subnormals), then
    random bit patterns and operands of far-apart magnitudes: bit for bit numpy's."""
    fi = np.finfo(dt)
    v = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 2.0, -3.0, 0.1, fi.max, -fi.max, fi.tiny,
                  fi.smallest_subnormal, -fi.smallest_subnormal * 3, 7.5], dt)
    a, b = (x.reshape(-1) for x in np.meshgrid(v, v, indexing="ij"))
    same_bits(HELPER[op](a, b, device=dev).numpy(), mod_ref(op, a, b))
    u = f"u{np.dtype(dt).itemsize}"
    n = 1 << 15
    a = rng.integers(0, 1 << (8 * np.dtype(dt).itemsize), n, dtype=np.uint64).astype(u).view(dt)
    b = rng.integers(0, 1 << (8 * np.dtype(dt).itemsize), n, dtype=np.uint64).astype(u).view(dt)
    same_bits(HELPER[op](a, b, device=dev).numpy(), mod_ref(op, a, b))
    if dt == np.float32:  # small divisors near 2^-126 (the floor form's sum below 2^-60 on the scaled path)
        a = (rng.standard_normal(n) * np.exp2(rng.integers(-149, 0, n))).astype(np.float32)
        b = (rng.standard_normal(n) * np.exp2(rng.integers(-149, -110, n))).astype(np.float32)
        same_bits(HELPER[op](a, b, device=dev).numpy(), mod_ref(op, a, b))


@pytest.mark.parametrize("op", ["fmod", "mod"])
@pytest.mark.parametrize("dt", INTS, ids=lambda d: d.name)
def test_integer_modulus(dev, rng, op, dt):
    info = np.iinfo(dt.numpy_dtype)
    a = random_values(rng, dt, (3000,))
    b = np.concatenate([rng.integers(max(info.min, -9), min(info.max, 9), 1500, endpoint=True).astype(dt.numpy_dtype),
                        random_values(rng, dt, (1500,))])
    edge = [info.min, info.max, 0, 1] + ([-1] if dt.is_signed else [])
    ea, eb = (x.reshape(-1) for x in np.meshgrid(np.array(edge, dt.numpy_dtype), np.array(edge, dt.numpy_dtype)))
    a, b = np.concatenate([a, ea]), np.concatenate([b, eb])
    same_bits(HELPER[op](a, b, device=dev).numpy(), mod_ref(op, a, b))


@pytest.mark.parametrize("op", ["left", "right"])
@pytest.mark.parametrize("dt", UINTS, ids=lambda d: d.name)
def test_shifts(dev, rng, op, dt):
    """Every shift from 0 to twice the width, and shift amounts of every size (0 from the width on)."""
    bits = 8 * dt.size
    a = random_values(rng, dt, (4 * bits,))
    b = np.concatenate([np.arange(2 * bits).astype(dt.numpy_dtype), random_values(rng, dt, (2 * bits,))])
    same_bits(HELPER[op](a, b, device=dev).numpy(), shift_ref(op, a, b))


@pytest.mark.parametrize("dt", list(DT), ids=lambda d: d.name)
@pytest.mark.parametrize("out", [DT.UINT8, DT.UINT32], ids=("u8", "u32"))
def test_bit_count(dev, rng, dt, out):
    x = random_values(rng, dt, (777,)) if dt != DT.FLOAT64 else rng.standard_normal(777)
    got = kdml.bit_count(x, out_type=out, device=dev).numpy()
    assert got.dtype == out.numpy_dtype
    np.testing.assert_array_equal(got, np.bitwise_count(x.view(f"u{x.itemsize}")).astype(out.numpy_dtype))


@pytest.mark.parametrize("dt", [DT.FLOAT32, DT.FLOAT16, DT.INT32, DT.UINT32], ids=lambda d: d.name)
def test_difference_square(dev, rng, dt):
    a, b = random_values(rng, dt, (2000,)), random_values(rng, dt, (2000,))
    same_bits(kdml.difference_square(a, b, device=dev).numpy(), dsq_ref(a, b))


LAYOUT_CASES = [("fmod", DT.FLOAT32), ("mod", DT.FLOAT16), ("mod", DT.INT8), ("fmod", DT.INT64), ("mod", DT.UINT64),
                ("left", DT.UINT16), ("right", DT.UINT64), ("dsq", DT.INT32)]


@pytest.mark.parametrize(("op", "dt"), LAYOUT_CASES, ids=[f"{o}-{d.name}" for o, d in LAYOUT_CASES])
def test_layouts(dev, rng, op, dt):
    for sizes in ((11,), (3, 5), (2, 1, 3, 4), (2, 3, 1, 2, 2, 3, 2, 2)):
        ds = [TD(dt, sizes, random_strides(rng, sizes, allow_broadcast=i < 2)) for i in range(3)]
        av = random_values(rng, dt, sizes)
        bv = random_values(rng, dt, sizes) if op in ("fmod", "mod", "dsq") else \
            rng.integers(0, 10 * dt.size, sizes).astype(dt.numpy_dtype)
        (a, araw), (b, braw) = place(dev, rng, ds[0], av), place(dev, rng, ds[1], bv)
        o, _ = place(dev, rng, ds[2])
        want = reference(op, read_logical(araw, a.offset, ds[0]), read_logical(braw, b.offset, ds[1]))
        before = poison_against(o, want, rng)
        dev.compile(DESC[op](*ds)).execute([a, b], [o])
        same_bits(read_logical(assert_outside_unchanged(o, before), o.offset, ds[2]), want)


def test_bit_count_layouts_and_in_place(dev, rng):
    sizes = (3, 4, 5)
    xd = TD(DT.UINT16, sizes, random_strides(rng, sizes, allow_broadcast=True))
    od = TD(DT.UINT8, sizes, random_strides(rng, sizes, allow_broadcast=False))
    x, xraw = place(dev, rng, xd, random_values(rng, DT.UINT16, sizes))
    o, _ = place(dev, rng, od)
    want = np.bitwise_count(read_logical(xraw, x.offset, xd)).astype(np.uint8)
    before = poison_against(o, want, rng)
    dev.compile(kdml.ElementWiseBitCountDesc(xd, od)).execute([x], [o])
    assert_output(o, before, want)
    v = random_values(rng, DT.INT32, (6, 7))
    t, _ = place(dev, rng, TD(DT.INT32, (6, 7)), v)
    d = TD(DT.INT32, (6, 7), (0, 1))  # a row broadcast over the rows
    s, _ = place(dev, rng, d, np.broadcast_to(np.arange(1, 8, dtype=np.int32), (6, 7)).copy())
    dev.compile(kdml.ElementWiseModulusFloorDesc(t.desc, d, t.desc)).execute([t, s], [t])
    np.testing.assert_array_equal(t.numpy(), mod_ref("mod", v, np.arange(1, 8, dtype=np.int32).reshape(1, 7)))


F, U = TD(DT.FLOAT32, (2, 3)), TD(DT.UINT32, (2, 3))
BAD = [
    (kdml.ElementWiseModulusFloorDesc(F, TD(DT.FLOAT16, (2, 3)), F), kdml.InvalidArgumentError, r"^b_tensor\.data_type"),
    (kdml.ElementWiseModulusTruncateDesc(*(TD(DT.FLOAT64, (2, 3)),) * 3), kdml.UnsupportedError, "does not support FLOAT64"),
    (kdml.ElementWiseBitShiftLeftDesc(F, F, F), kdml.UnsupportedError, "^a_tensor: ELEMENT_WISE_BIT_SHIFT_LEFT does not"),
    (kdml.ElementWiseBitShiftRightDesc(*(TD(DT.INT32, (2, 3)),) * 3), kdml.UnsupportedError, "does not support INT32"),
    (kdml.ElementWiseBitCountDesc(U, TD(DT.UINT16, (2, 3))), kdml.UnsupportedError, "^output_tensor: .* UINT16"),
    (kdml.ElementWiseBitCountDesc(U, TD(DT.UINT8, (3, 2))), kdml.InvalidArgumentError, r"^output_tensor\.sizes"),
    (kdml.ElementWiseDifferenceSquareDesc(*(TD(DT.INT8, (2, 3)),) * 3), kdml.UnsupportedError, "does not support INT8"),
    (kdml.ElementWiseDifferenceSquareDesc(F, F, TD(DT.FLOAT32, (2, 3), (0, 1))), kdml.InvalidArgumentError,
     r"^output_tensor\.strides"),
]


@pytest.mark.parametrize(("desc", "error", "match"), BAD, ids=[m[1:30] for _, _, m in BAD])
def test_refused(dev, desc, error, match):
    with pytest.raises(error, match=match):
        dev.compile(desc)


def test_feature_levels():
    def at(level, desc):
        with kdml.Device(feature_level=level) as d:
            d.compile(desc)

    f4, u4, l4, q4 = (TD(t, (2,) * 4) for t in (DT.FLOAT16, DT.UINT8, DT.INT64, DT.UINT64))
    at(FL.FL_2_1, kdml.ElementWiseModulusFloorDesc(f4, f4, f4))
    at(FL.FL_2_1, kdml.ElementWiseBitShiftLeftDesc(u4, u4, u4))
    at(FL.FL_6_0, kdml.ElementWiseModulusTruncateDesc(l4, l4, l4))
    at(FL.FL_4_1, kdml.ElementWiseBitShiftRightDesc(q4, q4, q4))
    at(FL.FL_4_1, kdml.ElementWiseBitCountDesc(TD(DT.FLOAT64, (2,) * 4), u4))
    at(FL.FL_3_1, kdml.ElementWiseDifferenceSquareDesc(f4, f4, f4))
    for level, desc in ((FL.FL_2_0, kdml.ElementWiseModulusFloorDesc(f4, f4, f4)),
                        (FL.FL_5_1, kdml.ElementWiseModulusTruncateDesc(l4, l4, l4)),
                        (FL.FL_3_0, kdml.ElementWiseBitShiftRightDesc(q4, q4, q4)),
                        (FL.FL_2_1, kdml.ElementWiseModulusFloorDesc(*(TD(DT.FLOAT32, (3,)),) * 3)),
                        (FL.FL_3_0, kdml.ElementWiseBitCountDesc(TD(DT.INT32, (2,) * 4), u4)),
                        (FL.FL_3_0, kdml.ElementWiseDifferenceSquareDesc(f4, f4, f4))):
        with pytest.raises(kdml.UnsupportedError):
            at(level, desc)
