"""ACTIVATION_LOG_SOFTMAX1 and ACTIVATION_LOG_SOFTMAX (ops/activation_log_softmax.py,
shaders/softmax.comp MODE 1) against the float64 reference of tests/activation_reference.py
within docs/log_softmax.md's bound: the fast and the general rows, every subset of axes over 1-8
dimensions with random strides and broadcast inputs, placed at random offsets with guard bytes and
poisoned outputs whose every other byte must stay unchanged, the rows of NaN, infinities and huge
magnitudes, the first version's effective rank, the helper and refused descriptors."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from activation_reference import check_close, log_softmax_bound, log_softmax_ref
from helpers import assert_outside_unchanged, place, poison_against, random_strides, read_logical
from test_softmax import random_sizes, scores

import kompute_dml as kdml
from kompute_dml.ops.softmax_geometry import FAST_ELEMENTS

DT = kdml.DataType
FL = kdml.FeatureLevel
TD = kdml.TensorDesc
FLOATS = (DT.FLOAT32, DT.FLOAT16)
IDS = ("f32", "f16")


def check(got: np.ndarray, ref: np.ndarray, n: int, what: str) -> None:
    """Within the bound; where the reference is beyond the type's range (|x - max| overflowing),
    the type's rounding of it (-inf), as float32 arithmetic (and the one rounding to float16) gives."""
    with np.errstate(over="ignore"):
        rounded = ref.astype(got.dtype)
    want = np.where(np.isinf(rounded), rounded.astype(np.float64), ref)
    check_close(got, want, log_softmax_bound(want, n), what)


def run(dev, rng, x_desc: TD, y_desc: TD, axes, values: np.ndarray, first: bool = False):
    """Place, poison, run ACTIVATION_LOG_SOFTMAX1 (`first`: ACTIVATION_LOG_SOFTMAX, the last axis);
    check every byte outside the output and the input buffer; return the result and the operator."""
    x, xraw = place(dev, rng, x_desc, values)
    y, _ = place(dev, rng, y_desc)
    xv = read_logical(xraw, x.offset, x_desc)
    ref = log_softmax_ref(xv, tuple(axes))
    with np.errstate(over="ignore"):
        before = poison_against(y, np.nan_to_num(ref).astype(y_desc.data_type.numpy_dtype), rng)
    desc = kdml.ActivationLogSoftmaxDesc(x_desc, y_desc) if first else kdml.ActivationLogSoftmax1Desc(x_desc, y_desc,
                                                                                                    tuple(axes))
    op = dev.compile(desc)
    op.execute([x], [y])
    got = read_logical(assert_outside_unchanged(y, before), y.offset, y_desc)
    assert x.buffer.read() == xraw
    check(got, ref, math.prod(x_desc.sizes[a] for a in set(axes)), f"log-softmax {x_desc.sizes} axes {tuple(axes)}")
    return got, op


LENGTHS = (1, 2, 3, 7, 16, 33, 64, 65, 127, 256, 257, 511, 1000, 1024, 1025, 2047, 2048, 2049, 5000)


@pytest.mark.parametrize("dt", FLOATS, ids=IDS)
@pytest.mark.parametrize("length", LENGTHS)
def test_last_axis(dev, rng, dt, length):
    """Rows of `length` (classifier logits, a CTC decoder's vocabulary): the fast variants up to
    FAST_ELEMENTS (float16: twice as many), the general ones beyond."""
    shape = (2, 3, 5, length) if length <= 128 else (3, length)
    d = TD(dt, shape)
    _, op = run(dev, rng, d, d, (len(shape) - 1,), scores(rng, shape, dt))
    fast = length <= FAST_ELEMENTS * (4 // dt.size)
    assert op.variants[0].startswith("lsm_" + ("f32" if dt == DT.FLOAT32 else "f16") + ("_l" if fast else "_g"))


@pytest.mark.parametrize("dt", FLOATS, ids=IDS)
def test_strided_rows(dev, rng, dt):
    sizes = (3, 40, 24)
    for axis in (2, 1, 0):
        x_desc = TD(dt, sizes, (1, 3, 120))  # column-major
        y_desc = TD(dt, sizes, (40 * 26, 26, 1) if axis else (1, 3 * 25, 3))
        run(dev, rng, x_desc, y_desc, (axis,), scores(rng, sizes, dt))


@pytest.mark.parametrize("dt", FLOATS, ids=IDS)
@pytest.mark.parametrize("rank", range(1, 9))
def test_axes_subsets(dev, rng, dt, rank):
    """Random sizes, every non-empty subset of axes (a sample from rank 5), random strides (inputs
    may broadcast: stride 0), random offsets, values at several scales."""
    subsets = [s for k in range(1, rank + 1) for s in itertools.combinations(range(rank), k)]
    if len(subsets) > 12:
        subsets = [subsets[i] for i in rng.choice(len(subsets), 12, replace=False)] + [tuple(range(rank))]
    for axes in subsets:
        sizes = random_sizes(rng, rank)
        xs = random_strides(rng, sizes, allow_broadcast=True) if rng.random() < 0.7 else None
        ys = random_strides(rng, sizes, allow_broadcast=False) if rng.random() < 0.7 else None
        order = rng.permutation(len(axes))
        values = scores(rng, sizes, dt, scale=float(rng.choice([0.1, 4.0, 100.0])))
        run(dev, rng, TD(dt, sizes, xs), TD(dt, sizes, ys), [axes[i] for i in order], values)


@pytest.mark.parametrize("dt", FLOATS, ids=IDS)
def test_long_rows(dev, rng, dt):
    run(dev, rng, TD(dt, (2, 9000)), TD(dt, (2, 9000)), (1,), scores(rng, (2, 9000), dt))
    sizes = (6, 5, 7, 30)
    xs = (1, 6 * 7 * 30, 6, 42)  # no two reduced dimensions contiguous
    run(dev, rng, TD(dt, sizes, xs), TD(dt, sizes), (0, 1, 3), scores(rng, sizes, dt))


def test_folded_grid(dev, rng, monkeypatch):
    limits = dict(dev.limits)
    limits["max_compute_work_group_count"] = (7, 65535, 65535)
    monkeypatch.setattr(dev, "limits", limits)
    for shape, axes in (((300, 20), (1,)), ((9, 80, 30), (0, 2))):
        d = TD(DT.FLOAT32, shape)
        _, op = run(dev, rng, d, d, axes, scores(rng, shape, DT.FLOAT32))
        assert op.plans[0].groups[1] > 1


# ---- special rows: what (x - max) - log(sum(exp(x - max))) gives in float64 (onnxruntime's too) ----
NINF, INF, NAN = -np.inf, np.inf, np.nan
F32MAX = float(np.finfo(np.float32).max)
SPECIAL_ROWS = {
    "all -inf": [NINF] * 5,                      # (-inf) - (-inf) = NaN: NaN everywhere
    "one NaN": [1.0, NAN, 2.0, 3.0, 0.5],        # NaN everywhere
    "+inf": [1.0, INF, 2.0, NINF, 0.5],          # inf - inf = NaN: NaN everywhere
    "some -inf": [NINF, 1.0, NINF, 2.0, -3.0],   # -inf there, finite elsewhere
    "one element": [7.0, NINF, NINF, NINF, NINF],  # 0 at the 7, -inf elsewhere
    "equal": [3.25] * 5,                         # -ln 5 each
    "extremes": [F32MAX, -F32MAX, 0.0, F32MAX, -1.0],  # -max - max overflows: -inf there
    "huge": [1e30, -1e30, 3e29, 1e30, 0.0],
    "underflow": [0.0, -87.0, -88.0, -100.0, -1e30],
    "signed zeros": [-0.0, 0.0, -0.0, 0.0, -0.0],
    "tiny": [1e-40, -1e-45, 0.0, 1e-38, -1e-38],
}


@pytest.mark.parametrize("dt", FLOATS, ids=IDS)
@pytest.mark.parametrize("name", SPECIAL_ROWS)
@pytest.mark.parametrize("reps", [1, 103])  # 5 elements (element geometry), 515 (word geometry)
def test_special_rows(dev, rng, dt, name, reps):
    row = np.tile(np.array(SPECIAL_ROWS[name], np.float64), reps)
    if dt == DT.FLOAT16:
        row = np.where(np.isfinite(row) & (np.abs(row) >= 1e29), np.sign(row) * 65504.0, row)
    x = np.stack([row, row[::-1], np.roll(row, 2)]).astype(dt.numpy_dtype)
    d = TD(dt, x.shape)
    for first in (False, True):
        got, _ = run(dev, rng, d, d, (1,), x, first)
        if name in ("all -inf", "one NaN", "+inf"):
            assert np.isnan(got).all()
        if name == "one element" and reps == 1:
            assert (got[[0, 1, 2], [0, 4, 2]] == 0).all() and np.isneginf(got).sum() == 12
        if name == "some -inf":
            assert (np.isneginf(got) == np.isneginf(x)).all()
        if name == "extremes":
            assert np.isneginf(got[0, 1]) and got[0, 0] == got[0, 3]


def test_single_element_rows_are_zero(dev):
    x = np.array([[-5.0], [0.0], [3e38], [-3e38], [NAN], [INF], [NINF]], np.float32)
    y = kdml.log_softmax(x, device=dev).numpy()
    assert y[:4, 0].tolist() == [0.0, 0.0, 0.0, 0.0] and np.isnan(y[4:, 0]).all()
    assert not np.signbit(y[:4, 0]).any()  # +0: (x - x) - log(1)


def test_matches_log_of_softmax(dev, rng):
    """Where softmax is well within float32's range, log-softmax equals the log of the softmax
    (to the bound of both): the two operators' rows agree."""
    x = scores(rng, (16, 300), DT.FLOAT32, scale=2.0)
    ls = kdml.log_softmax(x, device=dev).numpy().astype(np.float64)
    sm = kdml.softmax(x, device=dev).numpy().astype(np.float64)
    assert np.allclose(np.exp(ls), sm, rtol=2e-6, atol=1e-30)


# ---- the first version: ACTIVATION_LOG_SOFTMAX ---------------------------------------------------
@pytest.mark.parametrize("dt", FLOATS, ids=IDS)
@pytest.mark.parametrize("sizes", [(1, 1, 5, 9), (1, 1, 1, 300), (7, 33), (1, 4096), (6,), (1, 1, 1, 1, 1, 2, 3000),
                                   (3, 1)])
def test_first_version(dev, rng, dt, sizes):
    """Effective rank at most 2, the last dimension: the same bits as LOG_SOFTMAX1 over it."""
    xs = random_strides(rng, sizes, allow_broadcast=True)
    d = TD(dt, sizes, xs)
    x, _ = place(dev, rng, d, scores(rng, sizes, dt))
    _, op = run(dev, rng, d, TD(dt, sizes), (len(sizes) - 1,), scores(rng, sizes, dt), first=True)
    y1 = dev.empty(TD(dt, sizes))
    dev.compile(kdml.ActivationLogSoftmax1Desc(d, TD(dt, sizes), (len(sizes) - 1,))).execute([x], [y1])
    y0 = dev.empty(TD(dt, sizes))
    op.execute([x], [y0])
    assert y0.buffer.read() == y1.buffer.read()


@pytest.mark.parametrize(("level", "sizes", "ok"), [
    (FL.FL_1_0, (1, 1, 3, 4), True), (FL.FL_1_0, (3, 4), False), (FL.FL_2_0, (1, 1, 1, 3, 4), True),
    (FL.FL_2_0, (3, 4), False), (FL.FL_3_0, (3, 4), True), (FL.FL_3_0, (1,) * 7 + (5,), True)], ids=str)
def test_first_version_levels(level, sizes, ok):
    d = kdml.Device(feature_level=level)
    try:
        desc = kdml.ActivationLogSoftmaxDesc(TD(DT.FLOAT32, sizes), TD(DT.FLOAT32, sizes))
        if ok:
            d.compile(desc)
        else:
            with pytest.raises(kdml.UnsupportedError, match="^input_tensor"):
                d.compile(desc)
        with pytest.raises(kdml.UnsupportedError, match="^ACTIVATION_LOG_SOFTMAX1: introduced at DML_FEATURE_LEVEL_5_1"):
            d.compile(kdml.ActivationLogSoftmax1Desc(TD(DT.FLOAT32, sizes), TD(DT.FLOAT32, sizes), (0,)))
    finally:
        d.close()


# ---- the helper -------------------------------------------------------------------------------------
def test_helper(dev, rng):
    x = scores(rng, (2, 3, 4, 9), DT.FLOAT32)
    y = kdml.log_softmax(x, device=dev)
    assert y.desc.sizes == x.shape and y.desc.data_type == DT.FLOAT32
    check(y.numpy(), log_softmax_ref(x, (3,)), 9, "helper")
    for axes, norm in (((-1, 1), (3, 1)), (-2, (2,)), ((0, 1, 2, 3), (0, 1, 2, 3))):
        n = math.prod(x.shape[a] for a in norm)
        check(kdml.log_softmax(x, axes=axes, device=dev).numpy(), log_softmax_ref(x, norm), n, f"axes {axes}")
    with pytest.raises(kdml.InvalidArgumentError, match="^axes: names an axis twice"):
        kdml.log_softmax(x, axes=[0, -4], device=dev)
    out_desc = TD(DT.FLOAT32, x.shape, random_strides(rng, x.shape, allow_broadcast=False))
    out, _ = place(dev, rng, out_desc)
    t = dev.tensor(x)
    assert kdml.log_softmax(t, axes=(0,), out=out) is out
    check(out.numpy(), log_softmax_ref(x, (0,)), 2, "out=")
    with pytest.raises(kdml.InvalidArgumentError, match=r"^axes: each axis must be in \[-4, 4\)"):
        kdml.log_softmax(x, axes=(4,), device=dev)
    with pytest.raises(kdml.InvalidArgumentError, match="^out"):
        kdml.log_softmax(x, out=dev.tensor(scores(rng, x.shape, DT.FLOAT16)))
    with pytest.raises(kdml.UnsupportedError, match="^input_tensor: ACTIVATION_LOG_SOFTMAX1 does not support FLOAT64"):
        kdml.log_softmax(x.astype(np.float64), device=dev)
    x16 = scores(rng, x.shape, DT.FLOAT16)
    h = kdml.log_softmax(x16, axes=(1, 3), device=dev)
    assert h.desc.data_type == DT.FLOAT16
    check(h.numpy(), log_softmax_ref(x16, (1, 3)), 27, "float16 helper")


# ---- refusals -----------------------------------------------------------------------------------------
F = TD(DT.FLOAT32, (2, 3, 4))
L1 = kdml.ActivationLogSoftmax1Desc
BAD = [
    (L1(F, F, ()), kdml.InvalidArgumentError, r"^axes: must name at least one axis"),
    (L1(F, F, (3,)), kdml.InvalidArgumentError, r"^axes\[0\]: must be in \[0, 2\]"),
    (L1(F, F, (0, -1)), kdml.InvalidArgumentError, r"^axes\[1\]: must be in \[0, 2\]"),
    (L1(F, F, (1, 1)), kdml.InvalidArgumentError, r"^axes: must not repeat"),
    (L1(F, F, 2), kdml.InvalidArgumentError, r"^axes: must be a sequence"),
    (L1(F, TD(DT.FLOAT16, (2, 3, 4)), (2,)), kdml.InvalidArgumentError, r"^output_tensor\.data_type: must equal"),
    (L1(F, TD(DT.FLOAT32, (2, 4, 3)), (2,)), kdml.InvalidArgumentError, r"^output_tensor\.sizes: must equal"),
    (L1(F, TD(DT.FLOAT32, (2, 3, 4), (0, 4, 1)), (2,)), kdml.InvalidArgumentError, r"^output_tensor\.strides"),
    (L1(TD(DT.INT32, (2, 3)), TD(DT.INT32, (2, 3)), (1,)), kdml.UnsupportedError,
     r"^input_tensor: ACTIVATION_LOG_SOFTMAX1 does not support INT32"),
    (kdml.ActivationLogSoftmaxDesc(F, F), kdml.InvalidArgumentError, r"^input_tensor\.sizes: must have an effective rank"),
    (kdml.ActivationLogSoftmaxDesc(TD(DT.FLOAT32, (1, 2, 1, 3)), TD(DT.FLOAT32, (1, 2, 1, 3))), kdml.InvalidArgumentError,
     r"^input_tensor\.sizes: must have an effective rank of at most 2"),
    (kdml.ActivationLogSoftmaxDesc(TD(DT.FLOAT32, (3, 4)), TD(DT.FLOAT32, (4, 3))), kdml.InvalidArgumentError,
     r"^output_tensor\.sizes: must equal"),
    (kdml.ActivationLogSoftmaxDesc(TD(DT.FLOAT64, (3, 4)), TD(DT.FLOAT64, (3, 4))), kdml.UnsupportedError,
     r"^input_tensor: ACTIVATION_LOG_SOFTMAX does not support FLOAT64"),
]


@pytest.mark.parametrize(("desc", "error", "match"), BAD, ids=[m[1:40] for _, _, m in BAD])
def test_refused(dev, desc, error, match):
    with pytest.raises(error, match=match):
        dev.compile(desc)


def test_descriptor_takes_a_list_of_axes(dev):
    d = L1(F, F, [0, 2])
    assert d.axes == (0, 2) and hash(d) == hash(L1(F, F, (0, 2)))
    dev.compile(d)


def test_output_may_not_alias_the_input(dev, rng):
    d = TD(DT.FLOAT32, (4, 8))
    x, _ = place(dev, rng, d, scores(rng, (4, 8), DT.FLOAT32))
    op = dev.compile(L1(d, d, (1,)))
    with pytest.raises(kdml.InvalidArgumentError, match="^output_tensor: overlaps input_tensor"):
        op.execute([x], [x])


def test_values_beyond_one_binding(rng):
    """A value beyond the device's storage-buffer range (narrowed to 64 KiB as tests/test_split_range.py
    narrows it): the rows in parts along the outer dimensions, each binding windows of the buffers,
    placed at random offsets with every other byte unchanged."""
    import types

    d = kdml.Device()
    try:
        d.limits = types.MappingProxyType(dict(d.limits, max_storage_buffer_range=1 << 16))
        d.engine.programs.window_range = 1 << 16
        sizes = (6, 5, 900)  # 108 KB of float32
        y = TD(DT.FLOAT32, sizes, (5 * 920, 920, 1))  # rows with gaps between them
        _, op = run(d, rng, TD(DT.FLOAT32, sizes), y, (2,), scores(rng, sizes, DT.FLOAT32))
        assert sum(1 for p in op.plans if p.windows) >= 2
    finally:
        d.close()
