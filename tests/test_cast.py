"""CAST (ops/cast.py, shaders/cast.comp) against an independent numpy reference
(tests/cast_reference.py): every supported type pair, 1-8 dimensions, strided and broadcast
(stride 0) inputs, random offsets with guard bytes, poisoned outputs whose every other byte must
stay unchanged, edge values (NaN, infinities, -0, values just out of integer range, float16
halfway cases; INT64 / UINT64 minimum and maximum, values beyond 2^32, float rounding ties and
carries of 64-bit magnitudes), dimensions enumerated by the host, the helper and refused
descriptors."""

from __future__ import annotations

import numpy as np
import pytest
from cast_reference import cast_ref
from helpers import assert_output, assert_outside_unchanged, place, poison_against, random_strides, random_values, read_logical

import kompute_dml as kdml
from kompute_dml.core.dtypes import HIGHEST_FEATURE_LEVEL
from kompute_dml.ops.cast import CAST

DT = kdml.DataType
FL = kdml.FeatureLevel
TD = kdml.TensorDesc
TYPES = sorted(CAST.require(HIGHEST_FEATURE_LEVEL).tensor("input_tensor").types, key=lambda d: d.value)
PAIRS = [(a, b) for a in TYPES for b in TYPES]


def random_sizes(rng, rank: int, max_elems: int = 400) -> tuple[int, ...]:
    sizes = [int(rng.integers(1, 7)) for _ in range(rank)]
    while np.prod(sizes) > max_elems:
        sizes[int(np.argmax(sizes))] //= 2
    return tuple(max(1, s) for s in sizes)


def layout(rng, sizes, *, is_input: bool):
    kind = rng.integers(0, 3)
    return None if kind == 0 else random_strides(rng, sizes, allow_broadcast=is_input and kind == 2)


def run(dev, rng, src: DT, dst: DT, sizes, values=None, in_strides="random", out_strides="random"):
    """Place the input, poison the output against the reference, cast, check the output bits,
    every other byte of its buffer and the input buffer; returns the output read back."""
    xd = TD(src, sizes, layout(rng, sizes, is_input=True) if in_strides == "random" else in_strides)
    yd = TD(dst, sizes, layout(rng, sizes, is_input=False) if out_strides == "random" else out_strides)
    v = random_values(rng, src, sizes) if values is None else values
    x, xraw = place(dev, rng, xd, v)
    y, _ = place(dev, rng, yd)
    expected = cast_ref(read_logical(xraw, x.offset, xd), dst)
    before = poison_against(y, expected, rng)
    dev.compile(kdml.CastDesc(xd, yd)).execute([x], [y])
    assert_output(y, before, expected)
    assert x.buffer.read() == xraw
    return read_logical(assert_outside_unchanged(y, before), y.offset, yd)


@pytest.mark.parametrize(("src", "dst"), PAIRS, ids=[f"{a.name}-{b.name}" for a, b in PAIRS])
def test_every_pair(dev, rng, src, dst):
    for rank in range(1, 9):
        sizes = random_sizes(rng, rank)
        values = None
        if src.is_float and not dst.is_float and rng.random() < 0.5:  # values around the output's range
            info = np.iinfo(dst.numpy_dtype)
            lo, hi = max(float(info.min) * 1.5, -6e4), min(float(info.max) * 1.5, 6e4)
            if src == DT.FLOAT32:
                lo, hi = float(info.min) * 1.5 - 2, float(info.max) * 1.5 + 2
            values = rng.uniform(lo, hi, sizes).astype(src.numpy_dtype)
        run(dev, rng, src, dst, sizes, values)


@pytest.mark.parametrize(("src", "dst"), [(DT.FLOAT32, DT.UINT8), (DT.INT16, DT.FLOAT16), (DT.UINT32, DT.INT8),
                                          (DT.FLOAT16, DT.FLOAT32), (DT.INT64, DT.FLOAT16), (DT.FLOAT32, DT.UINT64),
                                          (DT.UINT64, DT.INT64), (DT.INT8, DT.INT64)], ids=str)
def test_host_enumerated_dimensions(dev, rng, src, dst):
    """8 dimensions of size >= 2 that do not merge: the host enumerates the smallest ones."""
    sizes = (2, 3, 2, 2, 3, 2, 2, 3)
    for _ in range(2):
        run(dev, rng, src, dst, sizes, in_strides=random_strides(rng, sizes, allow_broadcast=True, max_gap=2),
            out_strides=random_strides(rng, sizes, allow_broadcast=False, max_gap=2))


# ---- edge values ---------------------------------------------------------------------------------
F32_EDGES = np.array([
    np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 0.5, -0.5, 0.999999, -0.999999, 1.5, -1.5, 2.5, -2.5,
    127.0, 127.9, 128.0, -128.0, -128.9, -129.0, 255.0, 255.9, 256.0, -1.0,
    32767.0, 32767.5, 32768.0, -32768.0, -32768.5, -32769.0, 65535.0, 65535.5, 65536.0,
    2147483520.0, 2147483648.0, -2147483648.0, -2147483904.0, 4294967040.0, 4294967296.0, 1e30, -1e30,
    2049.0, 2051.0, 4097.0, 65504.0, 65519.99, 65520.0, -65520.0, 1.0009765625 + 2 ** -11, 1.0 + 2 ** -11,
    2.0 ** -24, 2.0 ** -25, 3 * 2.0 ** -25, 2.0 ** -25 + 2.0 ** -40, 2.0 ** -14 - 2.0 ** -25, 1e-45, -1e-45,
    np.finfo(np.float32).max, np.finfo(np.float32).tiny,
], np.float32)
F16_EDGES = np.array([
    np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 0.5, -0.5, 0.9995, 1.5, -2.5, 127.9, 128.0, -128.0, -129.0,
    255.9, 256.0, -1.0, 32752.0, 32768.0, -32768.0, -32800.0, 65504.0, -65504.0, 6e-8, 6.1e-5,
], np.float16)
NAN32 = np.array([0x7F800001, 0xFF800001, 0x7FC00000, 0x7FBFFFFF, 0xFFFFFFFF], np.uint32).view(np.float32)
NAN16 = np.array([0x7C01, 0xFC01, 0x7E00, 0x7DFF, 0xFFFF], np.uint16).view(np.float16)


def int_edges(dt: DT) -> np.ndarray:
    info = np.iinfo(dt.numpy_dtype)
    vals = [info.min, info.min + 1, -1, 0, 1, info.max - 1, info.max, 2049, 2051, 4097, 65519, 65520, 65535,
            -65519, -65520, 2 ** 24 + 1, 2 ** 24 + 3, -(2 ** 24) - 1, 2 ** 31 - 1, 2 ** 31 - 65, 2 ** 32 - 1, 127, 128,
            # 64-bit: beyond 2^32, negative, ties and carries of the float roundings, the word boundary
            2 ** 32, 2 ** 32 + 1, -(2 ** 32), -(2 ** 32) - 1, 2 ** 40 + 2 ** 16, 2 ** 40 + 3 * 2 ** 16, 2 ** 40 + 2 ** 16 + 1,
            -(2 ** 40) - 2 ** 16, 2 ** 53 + 1, 2 ** 63 - 2 ** 39, 2 ** 63 - 2 ** 39 - 1, 2 ** 63, 2 ** 64 - 2 ** 39,
            2 ** 64 - 2 ** 40, 2 ** 64 - 1, -(2 ** 63) + 1, 0x1_FFFF_FFFF, 0xFFFF_FFFF_0000_0000, 0x8000_0000_FFFF_FFFF]
    return np.array([v for v in vals if info.min <= v <= info.max], dt.numpy_dtype)


def edges(dt: DT) -> np.ndarray:
    if dt == DT.FLOAT32:
        return np.concatenate([F32_EDGES, NAN32])
    if dt == DT.FLOAT16:
        return np.concatenate([F16_EDGES, NAN16])
    return int_edges(dt)


@pytest.mark.parametrize(("src", "dst"), PAIRS, ids=[f"{a.name}-{b.name}" for a, b in PAIRS])
def test_edge_values(dev, rng, src, dst):
    v = edges(src)
    run(dev, rng, src, dst, (v.size,), v, in_strides=None, out_strides=None)


# hand-computed expectations, independent of numpy's conversions
HAND = [
    (DT.FLOAT32, DT.INT8, [np.nan, 127.9, 128.0, -128.9, -129.0, -0.5, np.inf, -np.inf, 3.99], [0, 127, 127, -128, -128, 0, 127, -128, 3]),
    (DT.FLOAT32, DT.UINT8, [-0.9, -1.0, 255.9, 256.0, np.nan, -np.inf], [0, 0, 255, 255, 0, 0]),
    (DT.FLOAT32, DT.INT32, [2147483648.0, -2147483904.0, 2147483520.0, np.nan], [2 ** 31 - 1, -(2 ** 31), 2147483520, 0]),
    (DT.FLOAT32, DT.UINT32, [4294967296.0, 4294967040.0, -5.0], [2 ** 32 - 1, 4294967040, 0]),
    (DT.INT32, DT.FLOAT32, [16777217, 16777219, -16777217, 2 ** 31 - 1], [16777216.0, 16777220.0, -16777216.0, 2.0 ** 31]),
    (DT.UINT32, DT.FLOAT32, [2 ** 32 - 1, 2 ** 32 - 129, 2 ** 32 - 385], [2.0 ** 32, 2.0 ** 32 - 256, 2.0 ** 32 - 512]),
    (DT.INT32, DT.FLOAT16, [2049, 2051, 65519, 65520, -65520, 4097], [2048.0, 2052.0, 65504.0, np.inf, -np.inf, 4096.0]),
    (DT.FLOAT32, DT.FLOAT16, [2049.0, 2051.0, 65519.99, 65520.0, 2.0 ** -25, 3 * 2.0 ** -25],
     [2048.0, 2052.0, 65504.0, np.inf, 0.0, 2.0 ** -23]),
    (DT.INT32, DT.INT8, [128, 255, 256, -129, -(2 ** 31)], [-128, -1, 0, 127, 0]),
    (DT.INT8, DT.UINT16, [-1, -128, 127], [65535, 65408, 127]),
    (DT.UINT16, DT.INT8, [65535, 384, 127], [-1, -128, 127]),
    # 64-bit integers (word pairs in the shader)
    (DT.INT64, DT.FLOAT32,
     [2 ** 63 - 1, -(2 ** 63), 2 ** 40 + 2 ** 16, 2 ** 40 + 2 ** 16 + 1, 2 ** 40 + 3 * 2 ** 16, -(2 ** 33) - 1],
     [2.0 ** 63, -(2.0 ** 63), 2.0 ** 40, 2.0 ** 40 + 2 ** 17, 2.0 ** 40 + 2 ** 18, -(2.0 ** 33)]),
    (DT.UINT64, DT.FLOAT32, [2 ** 64 - 1, 2 ** 64 - 2 ** 40, 2 ** 64 - 2 ** 40 - 2 ** 39],
     [2.0 ** 64, 2.0 ** 64 - 2 ** 40, 2.0 ** 64 - 2 ** 41]),
    (DT.UINT64, DT.FLOAT16, [65519, 65520, 2 ** 64 - 1, 2049], [65504.0, np.inf, np.inf, 2048.0]),
    (DT.INT64, DT.FLOAT16, [-65520, -65519, 2 ** 40], [-np.inf, -65504.0, np.inf]),
    (DT.FLOAT32, DT.INT64, [2.0 ** 63, -(2.0 ** 63), 2.0 ** 64, -(2.0 ** 70), 1.5 * 2.0 ** 33, -2.5, np.nan, np.inf, -np.inf],
     [2 ** 63 - 1, -(2 ** 63), 2 ** 63 - 1, -(2 ** 63), 3 * 2 ** 32, -2, 0, 2 ** 63 - 1, -(2 ** 63)]),
    (DT.FLOAT32, DT.UINT64, [2.0 ** 64, 2.0 ** 63 + 2.0 ** 40, -1.0, 4294967296.0, np.inf, np.nan],
     [2 ** 64 - 1, 2 ** 63 + 2 ** 40, 0, 2 ** 32, 2 ** 64 - 1, 0]),
    (DT.FLOAT16, DT.INT64, [-65504.0, np.inf, -np.inf, -0.5], [-65504, 2 ** 63 - 1, -(2 ** 63), 0]),
    (DT.INT64, DT.INT32, [2 ** 32 + 5, -(2 ** 32) - 1, 2 ** 63 - 1, -(2 ** 63)], [5, -1, -1, 0]),
    (DT.INT64, DT.UINT8, [2 ** 40 + 300, -1], [44, 255]),
    (DT.INT32, DT.INT64, [-1, -(2 ** 31), 2 ** 31 - 1], [-1, -(2 ** 31), 2 ** 31 - 1]),
    (DT.INT8, DT.UINT64, [-1, -128], [2 ** 64 - 1, 2 ** 64 - 128]),
    (DT.UINT32, DT.INT64, [2 ** 32 - 1], [2 ** 32 - 1]),
    (DT.UINT64, DT.INT64, [2 ** 64 - 1, 2 ** 63], [-1, -(2 ** 63)]),
    (DT.INT64, DT.UINT64, [-1, -(2 ** 63)], [2 ** 64 - 1, 2 ** 63]),
]


@pytest.mark.parametrize(("src", "dst", "x", "want"), HAND, ids=[f"{a.name}-{b.name}" for a, b, _, _ in HAND])
def test_hand_computed(dev, rng, src, dst, x, want):
    got = run(dev, rng, src, dst, (len(x),), np.array(x, src.numpy_dtype), in_strides=None, out_strides=None)
    assert got.tolist() == np.array(want, dst.numpy_dtype).tolist()


def test_float16_negative_zero_and_nan_bits(dev, rng):
    got = run(dev, rng, DT.FLOAT32, DT.FLOAT16, (3,), np.array([-0.0, np.nan, -np.nan], np.float32),
              in_strides=None, out_strides=None)
    assert got.view(np.uint16).tolist() == [0x8000, 0x7E00, 0xFE00]


# ---- the helper ----------------------------------------------------------------------------------
def test_helper(dev, rng):
    x = random_values(rng, DT.FLOAT32, (3, 4, 5))
    y = kdml.cast(x, DT.INT16, device=dev)
    assert y.desc.data_type == DT.INT16 and y.desc.sizes == (3, 4, 5)
    assert np.array_equal(y.numpy(), cast_ref(x, DT.INT16))
    out_desc = TD(DT.UINT8, (3, 4, 5), random_strides(rng, (3, 4, 5), allow_broadcast=False))
    out, _ = place(dev, rng, out_desc)
    before = poison_against(out, cast_ref(x, DT.UINT8), rng)
    assert kdml.cast(kdml.cast(x, "FLOAT32", device=dev), "UINT8", out=out) is out
    assert_output(out, before, cast_ref(x, DT.UINT8))
    with pytest.raises(kdml.InvalidArgumentError, match="^out"):
        kdml.cast(x, DT.INT8, out=out)


# ---- refusals ------------------------------------------------------------------------------------
BAD = [
    (kdml.CastDesc(TD(DT.FLOAT32, (2, 3)), TD(DT.INT8, (3, 2))), kdml.InvalidArgumentError, r"^output_tensor\.sizes: must equal"),
    (kdml.CastDesc(TD(DT.FLOAT32, (2, 3)), TD(DT.INT8, (1, 2, 3))), kdml.InvalidArgumentError,
     r"^output_tensor\.sizes: dimension count"),
    (kdml.CastDesc(TD(DT.FLOAT32, (2, 3)), TD(DT.INT8, (2, 3), (0, 1))), kdml.InvalidArgumentError, r"^output_tensor"),
    (kdml.CastDesc(TD(DT.FLOAT32, (2, 3)), TD(DT.FLOAT64, (2, 3))), kdml.UnsupportedError,
     r"^output_tensor: CAST does not support FLOAT64"),
    (kdml.CastDesc(TD(DT.FLOAT64, (2, 3)), TD(DT.FLOAT32, (2, 3))), kdml.UnsupportedError,
     r"^input_tensor: CAST does not support FLOAT64"),
]


@pytest.mark.parametrize(("desc", "error", "match"), BAD, ids=[m[1:40] for _, _, m in BAD])
def test_refused(dev, desc, error, match):
    with pytest.raises(error, match=match):
        dev.compile(desc)


@pytest.mark.parametrize("level", [FL.FL_1_0, FL.FL_2_1, FL.FL_3_0, FL.FL_3_1], ids=str)
def test_feature_levels(level):
    d = kdml.Device(feature_level=level)
    try:
        d.compile(kdml.CastDesc(TD(DT.FLOAT32, (1, 2, 3, 4)), TD(DT.FLOAT16, (1, 2, 3, 4))))
        ints = kdml.CastDesc(TD(DT.INT32, (1, 2, 3, 4)), TD(DT.FLOAT32, (1, 2, 3, 4)))
        wide = kdml.CastDesc(TD(DT.FLOAT32, (1, 2, 3, 4)), TD(DT.INT64, (1, 2, 3, 4)))
        five = kdml.CastDesc(TD(DT.FLOAT32, (1, 1, 2, 3, 4)), TD(DT.FLOAT16, (1, 1, 2, 3, 4)))
        if level >= FL.FL_3_0:
            d.compile(ints)
            d.compile(wide)
        else:
            with pytest.raises(kdml.UnsupportedError, match=f"^output_tensor: CAST does not support INT64 at feature level {level.label}"):
                d.compile(wide)
            with pytest.raises(kdml.UnsupportedError, match=f"^input_tensor: CAST does not support INT32 at feature level {level.label}"):
                d.compile(ints)
        if level >= FL.FL_3_1:
            d.compile(five)
        else:
            with pytest.raises(kdml.UnsupportedError, match="^input_tensor: CAST supports 4 dimensions"):
                d.compile(five)
    finally:
        d.close()
