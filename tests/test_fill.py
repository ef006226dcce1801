"""FILL_VALUE_CONSTANT and FILL_VALUE_SEQUENCE (ops/fill.py, shaders/fill.comp) against an
independent numpy reference: every type of the tables, 1-8 dimensions, strided outputs at random
offsets whose every other byte must stay unchanged (poisoned first), 64-bit values beyond 2^32
and sequences that wrap, the pages' examples, refusals."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_output, place, poison_against, random_strides

import kompute_dml as kdml
from kompute_dml.core.dtypes import HIGHEST_FEATURE_LEVEL
from kompute_dml.ops.fill import FILL_VALUE_CONSTANT, FILL_VALUE_SEQUENCE

DT = kdml.DataType
TD = kdml.TensorDesc
CONST_TYPES = sorted(FILL_VALUE_CONSTANT.require(HIGHEST_FEATURE_LEVEL).tensor("output_tensor").types, key=lambda d: d.value)
SEQ_TYPES = sorted(FILL_VALUE_SEQUENCE.require(HIGHEST_FEATURE_LEVEL).tensor("output_tensor").types, key=lambda d: d.value)


def values_for(dt: DT):
    if dt.is_float:
        return [1.5, -0.0, float("inf"), -2.75e3 if dt != DT.FLOAT16 else -2.75]
    info = np.iinfo(dt.numpy_dtype)
    return [int(info.min), int(info.max), 0, 2 ** 40 + 5 if dt.size == 8 else 7]


def seq_ref(n: int, start, delta, dt: DT) -> np.ndarray:
    """start + i * delta: integers exactly modulo 2^bits (Python integers); FLOAT32 as float32(i)
    * delta then + start, each rounded in float32; FLOAT16 the same in float32, then one rounding
    to FLOAT16."""
    if not dt.is_float:
        bits = 8 * dt.size
        vals = [(start + i * delta) % (1 << bits) for i in range(n)]
        return np.array(vals, np.uint64).astype(f"u{dt.size}").view(dt.numpy_dtype)
    i = np.arange(n).astype(np.float32)
    s, d = np.float32(np.asarray(start, dt.numpy_dtype)), np.float32(np.asarray(delta, dt.numpy_dtype))
    return (s + i * d).astype(dt.numpy_dtype)


def layout(rng, sizes):
    return None if rng.random() < 0.3 else random_strides(rng, sizes, allow_broadcast=False)


def sizes_of(rng, rank):
    s = [int(rng.integers(1, 6)) for _ in range(rank)]
    while np.prod(s) > 300:
        s[int(np.argmax(s))] //= 2
    return tuple(max(1, v) for v in s)


@pytest.mark.parametrize("dt", CONST_TYPES, ids=str)
def test_constant_every_type(dev, rng, dt):
    for rank in range(1, 9):
        sizes = sizes_of(rng, rank)
        for value in values_for(dt):
            yd = TD(dt, sizes, layout(rng, sizes))
            y, _ = place(dev, rng, yd)
            expected = np.full(sizes, value, dt.numpy_dtype)
            before = poison_against(y, expected, rng)
            dev.compile(kdml.FillValueConstantDesc(yd, dt, value)).execute([], [y])
            assert_output(y, before, expected)


@pytest.mark.parametrize("dt", SEQ_TYPES, ids=str)
def test_sequence_every_type(dev, rng, dt):
    for rank in range(1, 9):
        sizes = sizes_of(rng, rank)
        n = int(np.prod(sizes))
        if dt.is_float:
            start, delta = (-3.5, 0.25) if dt == DT.FLOAT16 else (float(rng.standard_normal()), float(rng.standard_normal()))
        else:
            info = np.iinfo(dt.numpy_dtype)
            start = int(rng.integers(int(info.min), int(info.max), endpoint=True, dtype=dt.numpy_dtype))
            delta = int(rng.integers(-(2 ** (8 * dt.size - 1)), 2 ** (8 * dt.size - 1), dtype=np.int64))
            if not dt.is_signed and delta < 0:
                delta += 1 << (8 * dt.size)
        yd = TD(dt, sizes, layout(rng, sizes))
        y, _ = place(dev, rng, yd)
        expected = seq_ref(n, start, delta, dt).reshape(sizes)
        before = poison_against(y, expected, rng)
        dev.compile(kdml.FillValueSequenceDesc(yd, dt, start, delta)).execute([], [y])
        assert_output(y, before, expected)


def test_page_examples(dev):
    assert kdml.fill((1, 1, 2, 4), 13.0, device=dev).numpy().tolist() == [[[[13.0] * 4] * 2]]
    assert kdml.fill_sequence((1, 1, 1, 3), 3, 2, device=dev).numpy().tolist() == [[[[3.0, 5.0, 7.0]]]]
    assert kdml.fill_sequence((1, 1, 2, 2), 10, -2, "UINT8", device=dev).numpy().tolist() == [[[[10, 8], [6, 4]]]]


def test_int64_sequence_beyond_32_bits(dev):
    got = kdml.fill_sequence((6,), 2 ** 62, -(2 ** 61) - 3, "INT64", device=dev).numpy()
    assert got.tolist() == [int(np.int64((2 ** 62 + i * (-(2 ** 61) - 3) + 2 ** 63) % 2 ** 64 - 2 ** 63)) for i in range(6)]


Y = TD(DT.FLOAT32, (1, 1, 2, 3))


@pytest.mark.parametrize(("desc", "match"), [
    (kdml.FillValueConstantDesc(Y, DT.FLOAT16, 1.0), "^value_data_type"),
    (kdml.FillValueConstantDesc(TD(DT.INT8, (2, 3)), DT.INT8, 200), "^value: 200 is out of INT8's range"),
    (kdml.FillValueConstantDesc(TD(DT.INT32, (2, 3)), DT.INT32, 1.5), "^value"),
    (kdml.FillValueSequenceDesc(Y, DT.FLOAT32, 1e39, 1.0), "^value_start"),
    (kdml.FillValueSequenceDesc(TD(DT.UINT8, (2, 3)), DT.UINT8, 0, 300), "^value_delta"),
    (kdml.FillValueSequenceDesc(TD(DT.FLOAT32, (2, 3), (0, 1)), DT.FLOAT32, 0, 1), "^output_tensor"),
], ids=range(6))
def test_refused(dev, desc, match):
    with pytest.raises(kdml.InvalidArgumentError, match=match):
        dev.compile(desc)


def test_feature_levels():
    d = kdml.Device(feature_level=kdml.FeatureLevel.FL_4_0)
    try:
        d.compile(kdml.FillValueSequenceDesc(TD(DT.INT32, (2, 3)), DT.INT32, 0, 1))
        with pytest.raises(kdml.UnsupportedError, match="^output_tensor: FILL_VALUE_SEQUENCE does not support INT64"):
            d.compile(kdml.FillValueSequenceDesc(TD(DT.INT64, (2, 3)), DT.INT64, 0, 1))
        with pytest.raises(kdml.UnsupportedError, match="^output_tensor: FILL_VALUE_CONSTANT does not support INT64"):
            d.compile(kdml.FillValueConstantDesc(TD(DT.INT64, (2, 3)), DT.INT64, 0))
    finally:
        d.close()
