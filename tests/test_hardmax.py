"""ACTIVATION_HARDMAX1 and ACTIVATION_HARDMAX (ops/activation_log_softmax.py, shaders/softmax.comp
MODE 2) against tests/activation_reference.py's hardmax_ref (numpy's argmax of each row, in the
row's row-major order), exactly: values drawn from few levels so that ties are common, every
subset of axes over 1-8 dimensions with random strides (outputs whose stride order is not the
logical one included) and broadcast inputs, placed at random offsets with guard bytes and
poisoned outputs whose every other byte must stay unchanged, NaN / infinities / signed zeros, the
first version, the helper and refused descriptors."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from activation_reference import hardmax_ref
from helpers import assert_outside_unchanged, place, poison_against, random_strides, read_logical
from test_softmax import random_sizes

import kompute_dml as kdml
from kompute_dml.ops.softmax_geometry import FAST_ELEMENTS

DT = kdml.DataType
FL = kdml.FeatureLevel
TD = kdml.TensorDesc
FLOATS = (DT.FLOAT32, DT.FLOAT16)
IDS = ("f32", "f16")


def tied(rng, shape, dt: DT, levels: int = 4) -> np.ndarray:
    """Values of few distinct levels (many ties per row), signed zeros among them."""
    v = rng.integers(-levels, levels, size=shape).astype(np.float64) * 0.5
    v = np.where(v == 0, np.where(rng.random(shape) < 0.5, -0.0, 0.0), v)
    return v.astype(dt.numpy_dtype)


def run(dev, rng, x_desc: TD, y_desc: TD, axes, values: np.ndarray, first: bool = False):
    """Place, poison, run (`first`: ACTIVATION_HARDMAX over the last axis); the exact one-hot of
    the first maximum; every byte outside the output and the input buffer unchanged."""
    x, xraw = place(dev, rng, x_desc, values)
    y, _ = place(dev, rng, y_desc)
    ref = hardmax_ref(read_logical(xraw, x.offset, x_desc), tuple(axes))
    before = poison_against(y, ref.astype(y_desc.data_type.numpy_dtype), rng)
    desc = kdml.ActivationHardmaxDesc(x_desc, y_desc) if first else kdml.ActivationHardmax1Desc(x_desc, y_desc,
                                                                                              tuple(axes))
    op = dev.compile(desc)
    op.execute([x], [y])
    got = read_logical(assert_outside_unchanged(y, before), y.offset, y_desc)
    assert x.buffer.read() == xraw
    assert np.array_equal(got.astype(np.float64), ref), f"hardmax {x_desc.sizes} axes {tuple(axes)}"
    assert not np.signbit(got).any()  # +0 and 1
    return got, op


LENGTHS = (1, 2, 3, 7, 31, 33, 64, 100, 256, 1000, 1024, 1025, 2048, 2049, 5000)


@pytest.mark.parametrize("dt", FLOATS, ids=IDS)
@pytest.mark.parametrize("length", LENGTHS)
def test_last_axis(dev, rng, dt, length):
    shape = (2, 3, 5, length) if length <= 128 else (3, length)
    d = TD(dt, shape)
    for levels in (2, 50):
        _, op = run(dev, rng, d, d, (len(shape) - 1,), tied(rng, shape, dt, levels))
    fast = length <= FAST_ELEMENTS * (4 // dt.size)
    assert op.variants[0].startswith("hmx_" + ("f32" if dt == DT.FLOAT32 else "f16") + ("_l" if fast else "_g"))


@pytest.mark.parametrize("dt", FLOATS, ids=IDS)
def test_first_in_logical_order(dev, rng, dt):
    """Reduced dimensions laid out in another order than their logical one (a transposed input
    and output): the first maximum is still the first in row-major order of the axes, where a
    stride-ordered enumeration would find another one."""
    sizes = (4, 6, 5)
    for xs, ys in (((1, 4, 24), (1, 4, 24)), ((1, 20, 4), (30, 5, 1)), (None, (1, 4, 24))):
        x = np.zeros(sizes, dt.numpy_dtype)
        x[:, 0, 3] = 1.0
        x[:, 2, 0] = 1.0  # logical order (axes 1, 2): (0, 3) comes first; column-major: (2, 0)
        run(dev, rng, TD(dt, sizes, xs), TD(dt, sizes, ys), (1, 2), x)
        run(dev, rng, TD(dt, sizes, xs), TD(dt, sizes, ys), (2, 1), x)
        run(dev, rng, TD(dt, sizes, xs), TD(dt, sizes, ys), (0, 1, 2), tied(rng, sizes, dt, 2))


@pytest.mark.parametrize("dt", FLOATS, ids=IDS)
@pytest.mark.parametrize("rank", range(1, 9))
def test_axes_subsets(dev, rng, dt, rank):
    subsets = [s for k in range(1, rank + 1) for s in itertools.combinations(range(rank), k)]
    if len(subsets) > 12:
        subsets = [subsets[i] for i in rng.choice(len(subsets), 12, replace=False)] + [tuple(range(rank))]
    for axes in subsets:
        sizes = random_sizes(rng, rank)
        xs = random_strides(rng, sizes, allow_broadcast=True) if rng.random() < 0.7 else None
        ys = random_strides(rng, sizes, allow_broadcast=False) if rng.random() < 0.7 else None
        order = rng.permutation(len(axes))
        run(dev, rng, TD(dt, sizes, xs), TD(dt, sizes, ys), [axes[i] for i in order],
            tied(rng, sizes, dt, int(rng.choice([1, 3, 100]))))


@pytest.mark.parametrize("dt", FLOATS, ids=IDS)
def test_long_rows(dev, rng, dt):
    run(dev, rng, TD(dt, (2, 9000)), TD(dt, (2, 9000)), (1,), tied(rng, (2, 9000), dt, 1000))
    sizes = (6, 5, 7, 30)
    run(dev, rng, TD(dt, sizes, (1, 6 * 7 * 30, 6, 42)), TD(dt, sizes), (0, 1, 3), tied(rng, sizes, dt, 30))


NINF, INF, NAN = -np.inf, np.inf, np.nan
SPECIAL_ROWS = {
    "all -inf": [NINF] * 6,                       # the first element
    "+inf twice": [1.0, INF, 2.0, INF, NINF, 0.5],
    "NaN late": [1.0, 3.0, 2.0, NAN, 9.0, NAN],   # a NaN counts as the maximum (ReduceArgMax, numpy): index 3
    "NaN first": [NAN, 1.0, 2.0, 3.0, 4.0, 5.0],
    "signed zeros": [-0.0, 0.0, -1.0, 0.0, -0.0, -2.0],
    "zeros then -0": [-1.0, -0.0, 0.0, -0.0, -3.0, -1.0],
    "max last": [-5.0, -4.0, -3.0, -2.0, -1.0, 65504.0],
}


@pytest.mark.parametrize("dt", FLOATS, ids=IDS)
@pytest.mark.parametrize("name", SPECIAL_ROWS)
def test_special_rows(dev, rng, dt, name):
    row = np.array(SPECIAL_ROWS[name], np.float64)
    x = np.stack([row, row[::-1], np.roll(row, 2)]).astype(dt.numpy_dtype)
    d = TD(dt, x.shape)
    for first in (False, True):
        got, _ = run(dev, rng, d, d, (1,), x, first)
        assert (got.sum(axis=1) == 1).all()


def test_single_element_rows_are_one(dev):
    x = np.array([[-5.0], [NAN], [INF], [NINF]], np.float32)
    assert kdml.hardmax(x, device=dev).numpy()[:, 0].tolist() == [1.0] * 4


@pytest.mark.parametrize("dt", FLOATS, ids=IDS)
@pytest.mark.parametrize("sizes", [(1, 1, 5, 9), (7, 33), (1, 4096), (6,), (1, 1, 1, 1, 1, 2, 3000), (3, 1)])
def test_first_version(dev, rng, dt, sizes):
    run(dev, rng, TD(dt, sizes, random_strides(rng, sizes, allow_broadcast=True)), TD(dt, sizes),
        (len(sizes) - 1,), tied(rng, sizes, dt), first=True)


@pytest.mark.parametrize(("level", "sizes", "ok"), [
    (FL.FL_1_0, (1, 1, 3, 4), True), (FL.FL_1_0, (3, 4), False), (FL.FL_2_0, (1, 1, 1, 3, 4), True),
    (FL.FL_3_0, (3, 4), True)], ids=str)
def test_first_version_levels(level, sizes, ok):
    d = kdml.Device(feature_level=level)
    try:
        desc = kdml.ActivationHardmaxDesc(TD(DT.FLOAT16, sizes), TD(DT.FLOAT16, sizes))
        if ok:
            d.compile(desc)
        else:
            with pytest.raises(kdml.UnsupportedError, match="^input_tensor"):
                d.compile(desc)
        with pytest.raises(kdml.UnsupportedError, match="^ACTIVATION_HARDMAX1: introduced at DML_FEATURE_LEVEL_5_1"):
            d.compile(kdml.ActivationHardmax1Desc(TD(DT.FLOAT16, sizes), TD(DT.FLOAT16, sizes), (0,)))
    finally:
        d.close()


def test_helper(dev, rng):
    x = tied(rng, (2, 3, 4, 9), DT.FLOAT32)
    y = kdml.hardmax(x, device=dev)
    assert y.desc.sizes == x.shape and y.desc.data_type == DT.FLOAT32
    assert np.array_equal(y.numpy(), hardmax_ref(x, (3,)))
    for axes, norm in (((-1, 1), (1, 3)), (-2, (2,)), ((0, 1, 2, 3), (0, 1, 2, 3))):
        assert np.array_equal(kdml.hardmax(x, axes=axes, device=dev).numpy(), hardmax_ref(x, norm)), axes
    out, _ = place(dev, rng, TD(DT.FLOAT32, x.shape, random_strides(rng, x.shape, allow_broadcast=False)))
    assert kdml.hardmax(dev.tensor(x), axes=(0,), out=out) is out
    assert np.array_equal(out.numpy(), hardmax_ref(x, (0,)))
    with pytest.raises(kdml.InvalidArgumentError, match="^axes: names an axis twice"):
        kdml.hardmax(x, axes=[1, -3], device=dev)
    with pytest.raises(kdml.UnsupportedError, match="^input_tensor: ACTIVATION_HARDMAX1 does not support INT32"):
        kdml.hardmax(x.astype(np.int32), device=dev)


F = TD(DT.FLOAT32, (2, 3, 4))
H1 = kdml.ActivationHardmax1Desc
BAD = [
    (H1(F, F, ()), kdml.InvalidArgumentError, r"^axes: must name at least one axis"),
    (H1(F, F, (0, 3)), kdml.InvalidArgumentError, r"^axes\[1\]: must be in \[0, 2\]"),
    (H1(F, F, (2, 2)), kdml.InvalidArgumentError, r"^axes: must not repeat"),
    (H1(F, F, ("a",)), kdml.InvalidArgumentError, r"^axes\[0\]: must be an integer"),
    (H1(F, TD(DT.FLOAT16, (2, 3, 4)), (2,)), kdml.InvalidArgumentError, r"^output_tensor\.data_type: must equal"),
    (H1(F, TD(DT.FLOAT32, (1, 2, 3, 4)), (2,)), kdml.InvalidArgumentError, r"^output_tensor\.sizes: dimension count"),
    (H1(F, TD(DT.FLOAT32, (2, 3, 4), (1, 1, 1)), (2,)), kdml.InvalidArgumentError, r"^output_tensor\.strides"),
    (H1(TD(DT.UINT8, (2, 3)), TD(DT.UINT8, (2, 3)), (1,)), kdml.UnsupportedError,
     r"^input_tensor: ACTIVATION_HARDMAX1 does not support UINT8"),
    (kdml.ActivationHardmaxDesc(F, F), kdml.InvalidArgumentError, r"^input_tensor\.sizes: must have an effective rank"),
    (kdml.ActivationHardmaxDesc(TD(DT.FLOAT32, (3, 4)), TD(DT.FLOAT16, (3, 4))), kdml.InvalidArgumentError,
     r"^output_tensor\.data_type: must equal"),
]


@pytest.mark.parametrize(("desc", "error", "match"), BAD, ids=[m[1:40] for _, _, m in BAD])
def test_refused(dev, desc, error, match):
    with pytest.raises(error, match=match):
        dev.compile(desc)


def test_output_may_not_alias_the_input(dev, rng):
    d = TD(DT.FLOAT32, (4, 8))
    x, _ = place(dev, rng, d, tied(rng, (4, 8), DT.FLOAT32))
    op = dev.compile(H1(d, d, (1,)))
    with pytest.raises(kdml.InvalidArgumentError, match="^output_tensor: overlaps input_tensor"):
        op.execute([x], [x])


def test_values_beyond_one_binding(rng):
    """As tests/test_log_softmax.py's: a value beyond a 64 KiB binding range, in parts."""
    import types

    d = kdml.Device()
    try:
        d.limits = types.MappingProxyType(dict(d.limits, max_storage_buffer_range=1 << 16))
        d.engine.programs.window_range = 1 << 16
        sizes = (8, 5, 1000)  # 80 KB of float16
        _, op = run(d, rng, TD(DT.FLOAT16, sizes), TD(DT.FLOAT16, sizes), (1, 2), tied(rng, sizes, DT.FLOAT16, 200))
        assert sum(1 for p in op.plans if p.windows) >= 2
    finally:
        d.close()
