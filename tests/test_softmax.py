"""ACTIVATION_SOFTMAX1 (ops/activation.py, shaders/softmax.comp) against the float64 reference of
tests/activation_reference.py within docs/softmax.md's bound: the fast path (one reduced dimension
of up to 1024 float32 / 2048 float16 elements, odd lengths, attention-shaped batch x heads x seq
rows, strided rows), every subset of axes over 1-8 dimensions with random strides and broadcast
inputs, placed at random offsets with guard bytes and poisoned outputs whose every other byte must
stay unchanged, long rows, folded grids, the rows of NaN and infinities, the helper and refused
descriptors."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from activation_reference import check_close, softmax_bound, softmax_ref
from helpers import assert_outside_unchanged, place, poison_against, random_strides, read_logical

import kompute_dml as kdml
from kompute_dml.ops.softmax_geometry import FAST_ELEMENTS

DT = kdml.DataType
FL = kdml.FeatureLevel
TD = kdml.TensorDesc
FLOATS = (DT.FLOAT32, DT.FLOAT16)
IDS = ("f32", "f16")


def scores(rng, shape, dt: DT, scale: float = 4.0) -> np.ndarray:
    """Attention-score-like values: normal, scaled, with a padding mask on some rows' tails."""
    x = rng.standard_normal(shape) * scale
    if len(shape) >= 1 and shape[-1] > 2 and rng.random() < 0.5:
        keep = rng.integers(1, shape[-1] + 1, size=shape[:-1])
        mask = np.arange(shape[-1]) >= keep[..., None]
        x = np.where(mask, float(np.finfo(dt.numpy_dtype).min), x)  # additive mask, as BERT exports write it
    return x.astype(dt.numpy_dtype)


def run(dev, rng, x_desc: TD, y_desc: TD, axes, values: np.ndarray) -> tuple[np.ndarray, np.ndarray, object]:
    """Place, poison, run; check every byte outside the output and the input buffer; return the
    result, the reference and the compiled operator."""
    x, xraw = place(dev, rng, x_desc, values)
    y, _ = place(dev, rng, y_desc)
    xv = read_logical(xraw, x.offset, x_desc)
    ref = softmax_ref(xv, tuple(axes))
    before = poison_against(y, np.nan_to_num(ref).astype(y_desc.data_type.numpy_dtype), rng)
    op = dev.compile(kdml.ActivationSoftmax1Desc(x_desc, y_desc, tuple(axes)))
    op.execute([x], [y])
    got = read_logical(assert_outside_unchanged(y, before), y.offset, y_desc)
    assert x.buffer.read() == xraw
    n = math.prod(x_desc.sizes[a] for a in set(axes))
    check_close(got, ref, softmax_bound(ref, n), f"softmax {x_desc.sizes} axes {tuple(axes)}")
    return got, ref, op


# ---- the fast path: the last dimension ------------------------------------------------------------
LENGTHS = (1, 2, 3, 7, 16, 17, 31, 32, 33, 63, 64, 65, 100, 127, 128, 255, 256, 257, 384, 511, 512, 513, 1000, 1023,
           1024, 1025, 1500, 2047, 2048, 2049, 4097, 8192, 8193, 16384, 16385)


@pytest.mark.parametrize("dt", FLOATS, ids=IDS)
@pytest.mark.parametrize("length", LENGTHS)
def test_last_axis(dev, rng, dt, length):
    """batch x heads x seq rows of `length` scores: the fast path up to FAST_ELEMENTS (float16:
    twice as many) elements, the general one beyond."""
    shape = (2, 3, 5, length) if length <= 128 else (2, 3, length)
    d = TD(dt, shape)
    _, _, op = run(dev, rng, d, d, (len(shape) - 1,), scores(rng, shape, dt))
    fast = length <= FAST_ELEMENTS * (4 // dt.size)
    assert op.variants[0].startswith("smx_" + ("f32" if dt == DT.FLOAT32 else "f16") + ("_l" if fast else "_g"))


@pytest.mark.parametrize("dt, length, variant", [
    (DT.FLOAT32, 32, "l8_k4"), (DT.FLOAT32, 33, "l32_k2"), (DT.FLOAT32, 255, "l32_k8"), (DT.FLOAT32, 256, "l16_k4v"),
    (DT.FLOAT32, 1024, "l64_k4v"), (DT.FLOAT32, 1025, "l128_k3v"), (DT.FLOAT32, 1500, "l128_k3v"),
    (DT.FLOAT32, 2049, "l256_k3v"), (DT.FLOAT32, 4096, "l256_k4v"), (DT.FLOAT32, 4097, "l256_k32"),
    (DT.FLOAT32, 8192, "l256_k32"), (DT.FLOAT32, 8193, "g256"), (DT.FLOAT16, 64, "l8_k4"), (DT.FLOAT16, 65, "l32_k2"),
    (DT.FLOAT16, 511, "l32_k8"), (DT.FLOAT16, 512, "l16_k4v"), (DT.FLOAT16, 1500, "l64_k3v"),
    (DT.FLOAT16, 2049, "l128_k3v"), (DT.FLOAT16, 8192, "l256_k4v"), (DT.FLOAT16, 8193, "l256_k32"),
    (DT.FLOAT16, 16384, "l256_k32"), (DT.FLOAT16, 16385, "g256")])
def test_fast_geometry(dev, dt, length, variant):
    """Rows of at least 1 KiB take the fewest lanes that hold them in at most four 16-byte words
    each; shorter ones the fewest lanes whose 32 elements per lane hold them, then the fewest
    elements per lane; rows past 4,096 words the element geometries up to 8,192 elements (float16:
    twice as many), longer rows the general variant (docs/softmax.md)."""
    d = TD(dt, (3, length))
    t = "f32" if dt == DT.FLOAT32 else "f16"
    assert dev.compile(kdml.ActivationSoftmax1Desc(d, d, (1,))).variants == [f"smx_{t}_{variant}"]


@pytest.mark.parametrize("dt", FLOATS, ids=IDS)
@pytest.mark.parametrize("length", [513, 1500, 1503])
def test_word_geometry_layouts(dev, rng, dt, length):
    """The word geometries read and write a lane's words whole only where the row is contiguous and
    its word aligned: rows at strides that misalign every other row, an input or output whose row
    is not contiguous, a length that leaves the last word partial; each against the reference."""
    rows = 6
    layouts = [((length, 1), (length, 1)),  # packed rows
               ((length + 1, 1), (length, 1)),  # input rows misaligned in turn
               ((length, 1), (length + 3, 1)),  # output rows misaligned in turn
               ((1, rows), (length, 1)),  # input transposed (its row strided)
               ((length, 1), (1, rows))]  # output transposed
    for xs, ys in layouts:
        x_desc, y_desc = TD(dt, (rows, length), xs), TD(dt, (rows, length), ys)
        _, _, op = run(dev, rng, x_desc, y_desc, (1,), scores(rng, (rows, length), dt))
        assert op.variants[0].endswith("v")


@pytest.mark.parametrize("dt", FLOATS, ids=IDS)
def test_rows_sum_to_one(dev, rng, dt):
    x = scores(rng, (64, 129), dt, scale=8.0)
    y = kdml.softmax(x, device=dev).numpy().astype(np.float64)
    tol = 129 * (2.0**-11 if dt == DT.FLOAT16 else 2.0**-22)
    assert np.all(np.abs(y.sum(-1) - 1) <= tol)


@pytest.mark.parametrize("dt", FLOATS, ids=IDS)
def test_strided_rows(dev, rng, dt):
    """The reduced dimension with strides other than 1 (a transposed score tensor), output with gaps."""
    sizes = (3, 40, 24)
    for axis in (2, 1, 0):
        x_desc = TD(dt, sizes, (1, 3, 120))  # column-major
        y_desc = TD(dt, sizes, (40 * 26, 26, 1) if axis else (1, 3 * 25, 3))
        run(dev, rng, x_desc, y_desc, (axis,), scores(rng, sizes, dt))


# ---- every subset of axes, any layout ----------------------------------------------------------------
def random_sizes(rng, rank: int, max_elems: int = 600) -> tuple[int, ...]:
    sizes = [int(rng.integers(1, 7)) for _ in range(rank)]
    while np.prod(sizes) > max_elems:
        sizes[int(np.argmax(sizes))] //= 2
    return tuple(max(1, s) for s in sizes)


@pytest.mark.parametrize("dt", FLOATS, ids=IDS)
@pytest.mark.parametrize("rank", range(1, 9))
def test_axes_subsets(dev, rng, dt, rank):
    """Random sizes, every non-empty subset of axes (a sample of them from rank 5), random strides
    (inputs may broadcast), random offsets."""
    subsets = [s for k in range(1, rank + 1) for s in itertools.combinations(range(rank), k)]
    if len(subsets) > 12:
        subsets = [subsets[i] for i in rng.choice(len(subsets), 12, replace=False)] + [tuple(range(rank))]
    for axes in subsets:
        sizes = random_sizes(rng, rank)
        xs = random_strides(rng, sizes, allow_broadcast=True) if rng.random() < 0.7 else None
        ys = random_strides(rng, sizes, allow_broadcast=False) if rng.random() < 0.7 else None
        order = rng.permutation(len(axes))
        run(dev, rng, TD(dt, sizes, xs), TD(dt, sizes, ys), [axes[i] for i in order], scores(rng, sizes, dt))


@pytest.mark.parametrize("dt", FLOATS, ids=IDS)
def test_long_rows(dev, rng, dt):
    """Rows beyond the fast path: one long dimension (256 invocations a row), several reduced
    dimensions that do not merge."""
    run(dev, rng, TD(dt, (3, 5000)), TD(dt, (3, 5000)), (1,), scores(rng, (3, 5000), dt))
    sizes = (6, 5, 7, 30)
    xs = (1, 6 * 7 * 30, 6, 42)  # no two reduced dimensions contiguous
    run(dev, rng, TD(dt, sizes, xs), TD(dt, sizes), (0, 1, 3), scores(rng, sizes, dt))
    run(dev, rng, TD(dt, (2, 70, 80)), TD(dt, (2, 70, 80)), (1, 2), scores(rng, (2, 70, 80), dt))


def test_folded_grid(dev, rng, monkeypatch):
    """More work groups than a grid row holds: the plan folds them into y (grid_for), the shader
    unfolds them (linear_group_id)."""
    limits = dict(dev.limits)
    limits["max_compute_work_group_count"] = (7, 65535, 65535)
    monkeypatch.setattr(dev, "limits", limits)
    for shape, axes in (((300, 20), (1,)), ((80, 700), (1,)), ((9, 80, 30), (0, 2))):
        d = TD(DT.FLOAT32, shape)
        _, _, op = run(dev, rng, d, d, axes, scores(rng, shape, DT.FLOAT32))
        assert op.plans[0].groups[1] > 1


# ---- special rows -------------------------------------------------------------------------------------
NINF, INF, NAN = -np.inf, np.inf, np.nan
F32MAX = float(np.finfo(np.float32).max)
SPECIAL_ROWS = {
    "all -inf": [NINF] * 5,                      # (-inf) - (-inf) = NaN: NaN, as DirectML / ONNX (0 / 0)
    "one NaN": [1.0, NAN, 2.0, 3.0, 0.5],        # NaN propagates to the whole row
    "+inf": [1.0, INF, 2.0, NINF, 0.5],          # inf - inf = NaN
    "some -inf": [NINF, 1.0, NINF, 2.0, -3.0],   # exp(-inf) = 0
    "one element": [7.0, NINF, NINF, NINF, NINF],
    "equal": [3.25] * 5,                         # 1/5 each
    "extremes": [F32MAX, -F32MAX, 0.0, F32MAX, -1.0],  # -max - max overflows to -inf: 0
    "underflow": [0.0, -87.0, -88.0, -100.0, -1e30],
    "signed zeros": [-0.0, 0.0, -0.0, 0.0, -0.0],
}


@pytest.mark.parametrize("dt", FLOATS, ids=IDS)
@pytest.mark.parametrize("name", SPECIAL_ROWS)
@pytest.mark.parametrize("reps", [1, 103])  # 5 elements (element geometry), 515 (word geometry)
def test_special_rows(dev, rng, dt, name, reps):
    row = np.tile(np.array(SPECIAL_ROWS[name], np.float64), reps)
    if dt == DT.FLOAT16:
        row = np.where(np.abs(row) == F32MAX, np.sign(row) * 65504.0, row)
        row = np.where(row == -1e30, NINF, row)
    x = np.stack([row, row[::-1], np.roll(row, 2)]).astype(dt.numpy_dtype)
    d = TD(dt, x.shape)
    got, _, op = run(dev, rng, d, d, (1,), x)
    assert op.variants[0].endswith("v") == (reps > 1)
    if name in ("all -inf", "one NaN", "+inf"):
        assert np.isnan(got).all()
    if name == "equal":
        assert np.allclose(got.astype(np.float64), 0.2 / reps, rtol=2**-10 if dt == DT.FLOAT16 else 2**-20)
    if name == "one element" and reps == 1:
        assert (got.astype(np.float64)[[0, 1, 2], [0, 4, 2]] == 1.0).all()


def test_single_element_rows_are_one(dev, rng):
    x = np.array([[-5.0], [0.0], [3e38], [NAN], [INF]], np.float32)
    y = kdml.softmax(x, device=dev).numpy()
    assert y[:3, 0].tolist() == [1.0, 1.0, 1.0] and np.isnan(y[3:, 0]).all()


# ---- the helper ---------------------------------------------------------------------------------------
def test_helper(dev, rng):
    x = scores(rng, (2, 3, 4, 9), DT.FLOAT32)
    ref = softmax_ref(x, (3,))
    y = kdml.softmax(x, device=dev)
    assert y.desc.sizes == x.shape and y.desc.data_type == DT.FLOAT32
    check_close(y.numpy(), ref, softmax_bound(ref, 9), "helper")
    for axes, norm in (((-1, 1), (3, 1)), (-2, (2,)), ([0, -4], None), ((0, 1, 2, 3), (0, 1, 2, 3))):
        if norm is None:
            with pytest.raises(kdml.InvalidArgumentError, match="^axes: names an axis twice"):
                kdml.softmax(x, axes=axes, device=dev)
            continue
        ref = softmax_ref(x, norm)
        check_close(kdml.softmax(x, axes=axes, device=dev).numpy(), ref, softmax_bound(ref, 216), f"axes {axes}")
    out_desc = TD(DT.FLOAT32, x.shape, random_strides(rng, x.shape, allow_broadcast=False))
    out, _ = place(dev, rng, out_desc)
    t = kdml.softmax(x, device=dev)
    assert kdml.softmax(t, axes=(0,), out=out) is out
    ref = softmax_ref(t.numpy(), (0,))
    check_close(out.numpy(), ref, softmax_bound(ref, 2), "out=")
    with pytest.raises(kdml.InvalidArgumentError, match=r"^axes: each axis must be in \[-4, 4\)"):
        kdml.softmax(x, axes=(4,), device=dev)
    with pytest.raises(kdml.InvalidArgumentError, match="^axes"):
        kdml.softmax(x, axes=("a",), device=dev)
    with pytest.raises(kdml.InvalidArgumentError, match="^out"):
        kdml.softmax(x, out=kdml.softmax(scores(rng, x.shape, DT.FLOAT16), device=dev))
    with pytest.raises(kdml.UnsupportedError, match="^input_tensor: ACTIVATION_SOFTMAX1 does not support FLOAT64"):
        kdml.softmax(x.astype(np.float64), device=dev)
    x16 = scores(rng, x.shape, DT.FLOAT16)
    ref = softmax_ref(x16, (1, 3))
    h = kdml.softmax(x16, axes=(1, 3), device=dev)
    assert h.desc.data_type == DT.FLOAT16
    check_close(h.numpy(), ref, softmax_bound(ref, 27), "float16 helper")


# ---- refusals -------------------------------------------------------------------------------------
F = TD(DT.FLOAT32, (2, 3, 4))
BAD = [
    (kdml.ActivationSoftmax1Desc(F, F, ()), kdml.InvalidArgumentError, r"^axes: must name at least one axis"),
    (kdml.ActivationSoftmax1Desc(F, F, (3,)), kdml.InvalidArgumentError, r"^axes\[0\]: must be in \[0, 2\]"),
    (kdml.ActivationSoftmax1Desc(F, F, (0, -1)), kdml.InvalidArgumentError, r"^axes\[1\]: must be in \[0, 2\]"),
    (kdml.ActivationSoftmax1Desc(F, F, (1, 1)), kdml.InvalidArgumentError, r"^axes: must not repeat"),
    (kdml.ActivationSoftmax1Desc(F, F, (True,)), kdml.InvalidArgumentError, r"^axes\[0\]: must be an integer"),
    (kdml.ActivationSoftmax1Desc(F, F, 2), kdml.InvalidArgumentError, r"^axes: must be a sequence"),
    (kdml.ActivationSoftmax1Desc(F, TD(DT.FLOAT16, (2, 3, 4)), (2,)), kdml.InvalidArgumentError,
     r"^output_tensor\.data_type: must equal input_tensor's \(FLOAT32\)"),
    (kdml.ActivationSoftmax1Desc(F, TD(DT.FLOAT32, (2, 4, 3)), (2,)), kdml.InvalidArgumentError,
     r"^output_tensor\.sizes: must equal"),
    (kdml.ActivationSoftmax1Desc(F, TD(DT.FLOAT32, (1, 2, 3, 4)), (2,)), kdml.InvalidArgumentError,
     r"^output_tensor\.sizes: dimension count"),
    (kdml.ActivationSoftmax1Desc(F, TD(DT.FLOAT32, (2, 3, 4), (0, 4, 1)), (2,)), kdml.InvalidArgumentError,
     r"^output_tensor\.strides"),
    (kdml.ActivationSoftmax1Desc(TD(DT.INT32, (2, 3)), TD(DT.INT32, (2, 3)), (1,)), kdml.UnsupportedError,
     r"^input_tensor: ACTIVATION_SOFTMAX1 does not support INT32"),
    (kdml.ActivationSoftmax1Desc(TD(DT.FLOAT64, (2, 3)), TD(DT.FLOAT64, (2, 3)), (1,)), kdml.UnsupportedError,
     r"^input_tensor: ACTIVATION_SOFTMAX1 does not support FLOAT64"),
]


@pytest.mark.parametrize(("desc", "error", "match"), BAD, ids=[m[1:40] for _, _, m in BAD])
def test_refused(dev, desc, error, match):
    with pytest.raises(error, match=match):
        dev.compile(desc)


def test_descriptor_takes_a_list_of_axes(dev):
    d = kdml.ActivationSoftmax1Desc(F, F, [0, 2])
    assert d.axes == (0, 2) and hash(d) == hash(kdml.ActivationSoftmax1Desc(F, F, (0, 2)))
    dev.compile(d)


def test_output_may_not_alias_the_input(dev, rng):
    d = TD(DT.FLOAT32, (4, 8))
    x, _ = place(dev, rng, d, scores(rng, (4, 8), DT.FLOAT32))
    op = dev.compile(kdml.ActivationSoftmax1Desc(d, d, (1,)))
    with pytest.raises(kdml.InvalidArgumentError, match="^output_tensor: overlaps input_tensor"):
        op.execute([x], [x])


@pytest.mark.parametrize("level", [FL.FL_5_0, FL.FL_5_1], ids=str)
def test_feature_levels(level):
    d = kdml.Device(feature_level=level)
    try:
        desc = kdml.ActivationSoftmax1Desc(F, F, (2,))
        if level >= FL.FL_5_1:
            d.compile(desc)
        else:
            with pytest.raises(kdml.UnsupportedError, match="^ACTIVATION_SOFTMAX1: introduced at DML_FEATURE_LEVEL_5_1"):
                d.compile(desc)
    finally:
        d.close()


# ---- kompute_dml's extension: an additive mask, NaN -> 0 --------------------------------------------
def _masked_ref(x: np.ndarray, mask: np.ndarray | None, axes, nan_to_zero: bool) -> tuple[np.ndarray, np.ndarray]:
    """(the rounded sums x + mask in numpy, the float64 softmax of them with NaN -> 0 where asked)."""
    with np.errstate(over="ignore", invalid="ignore"):
        s = x if mask is None else np.add(x, mask, dtype=x.dtype)
    ref = softmax_ref(s, tuple(axes))
    return s, np.where(np.isnan(ref), 0.0, ref) if nan_to_zero else ref


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(f"u{a.dtype.itemsize}")


def run_masked(dev, rng, x_desc: TD, y_desc: TD, axes, values: np.ndarray, mask_desc: TD | None,
               mask_values: np.ndarray | None, nan_to_zero: bool = True):
    """The extension on placed tensors (guard bytes, poisoned output): within the bound of the
    float64 softmax of the rounded sums (NaN -> +0 exactly), and for one axis (ONNX Softmax's
    case) bit for bit the unfused device sequence ELEMENT_WISE_ADD1 -> ACTIVATION_SOFTMAX1 (->
    IS_NAN -> IF with a 0 constant). (Over several axes the order in which a row is summed follows
    how its dimensions merge, which the packed sum of the unfused sequence may merge otherwise.)"""
    x, xraw = place(dev, rng, x_desc, values)
    m, mraw = place(dev, rng, mask_desc, mask_values) if mask_desc is not None else (None, None)
    y, _ = place(dev, rng, y_desc)
    xl = read_logical(xraw, x.offset, x_desc)
    ml = read_logical(mraw, m.offset, mask_desc) if m is not None else None
    sums, ref = _masked_ref(xl, ml, axes, nan_to_zero)
    before = poison_against(y, np.nan_to_num(ref).astype(y_desc.data_type.numpy_dtype), rng)
    op = dev.compile(kdml.ActivationSoftmax1Desc(x_desc, y_desc, tuple(axes), mask_tensor=mask_desc,
                                                 nan_to_zero=nan_to_zero))
    op.execute([x] if m is None else [x, m], [y])
    got = read_logical(assert_outside_unchanged(y, before), y.offset, y_desc)
    assert x.buffer.read() == xraw and (m is None or m.buffer.read() == mraw)
    n = math.prod(x_desc.sizes[a] for a in set(axes))
    check_close(got, ref, softmax_bound(ref, n), f"masked softmax {x_desc.sizes} axes {tuple(axes)}")
    if nan_to_zero:
        assert (_bits(got)[np.isnan(softmax_ref(sums, tuple(axes)))] == 0).all()  # +0, not -0
    # the unfused sequence
    s = x if m is None else kdml.add(x, m, device=dev)
    if m is not None:
        assert np.array_equal(_bits(s.numpy()), _bits(sums)) or np.isnan(sums).any()
    u = kdml.softmax(s, axes=tuple(axes), device=dev)
    if nan_to_zero:
        u = kdml.where(kdml.isnan(u, device=dev), np.zeros(1, x_desc.data_type.numpy_dtype), u, device=dev)
    if len(set(axes)) == 1:
        assert np.array_equal(_bits(got), _bits(u.numpy())), "not the unfused sequence's bits"
    return got, op


def attention_mask(rng, shape, dt: DT, fill: float) -> np.ndarray:
    """An additive mask of `shape`: 0 where attended, `fill` elsewhere (some rows fully masked)."""
    keep = rng.random(shape) < 0.7
    keep.reshape(-1, shape[-1])[::5] = False  # every fifth row masked entirely
    return np.where(keep, 0.0, fill).astype(dt.numpy_dtype)


@pytest.mark.parametrize("dt", FLOATS, ids=IDS)
@pytest.mark.parametrize("length", [1, 7, 33, 128, 1000, 2049, 5000])
def test_masked_attention_rows(dev, rng, dt, length):
    """batch x heads x rows x length scores, masks broadcast over heads (B, 1, S, L) and over heads
    and rows (B, 1, 1, L) as BERT exports build them, filled with -inf (fully masked rows: NaN,
    written as 0), the type's lowest value or -1e4: the fast and the general variants."""
    shape = (2, 3, 4, length) if length <= 1000 else (2, 1, 2, length)
    d = TD(dt, shape)
    code = "f32" if dt == DT.FLOAT32 else "f16"
    for fill in (-np.inf, float(np.finfo(dt.numpy_dtype).min), -1e4):
        for msizes in ((shape[0], 1, shape[2], length), (shape[0], 1, 1, length)):
            mask = attention_mask(rng, msizes, dt, fill)
            got, op = run_masked(dev, rng, d, d, (3,), scores(rng, shape, dt), TD(dt, msizes), mask)
            fast = length <= FAST_ELEMENTS * (4 // dt.size)
            assert op.variants[0].startswith(f"smx_ext_{code}_" + ("l" if fast else "g"))
            if fill == -np.inf:  # fully masked rows: NaN, written as 0
                full = np.broadcast_to(np.isneginf(mask).all(axis=-1, keepdims=True), shape)
                assert full.any() and (got[full] == 0).all()


@pytest.mark.parametrize("dt", FLOATS, ids=IDS)
@pytest.mark.parametrize("rank", range(1, 7))
def test_masked_layouts(dev, rng, dt, rank):
    """Random sizes and axes, random strides (the input may broadcast), masks of random broadcast
    sizes and strides, random offsets; with and without NaN -> 0."""
    subsets = [s for k in range(1, rank + 1) for s in itertools.combinations(range(rank), k)]
    for axes in [subsets[i] for i in rng.choice(len(subsets), min(6, len(subsets)), replace=False)]:
        sizes = random_sizes(rng, rank, 400)
        msizes = tuple(s if rng.random() < 0.6 else 1 for s in sizes)
        xs = random_strides(rng, sizes, allow_broadcast=True) if rng.random() < 0.6 else None
        ys = random_strides(rng, sizes, allow_broadcast=False) if rng.random() < 0.6 else None
        ms = random_strides(rng, msizes, allow_broadcast=True) if rng.random() < 0.6 else None
        mask = attention_mask(rng, msizes, dt, float(rng.choice([-np.inf, -1e4])))
        try:
            run_masked(dev, rng, TD(dt, sizes, xs), TD(dt, sizes, ys), axes, scores(rng, sizes, dt), TD(dt, msizes, ms),
                       mask, nan_to_zero=bool(rng.random() < 0.7))
        except kdml.UnsupportedError as e:  # only where more than 6 dimensions remain after merging
            assert str(e).startswith("mask_tensor: ACTIVATION_SOFTMAX1 with kompute_dml's mask") and rank == 6, e


@pytest.mark.parametrize("dt", FLOATS, ids=IDS)
def test_masked_special_values(dev, rng, dt):
    """Inputs and masks holding NaN, +-inf, -0 and the extremes: sums that overflow (x + mask =
    -inf), inf - inf, NaN rows written as +0, rows without NaN untouched; NaN -> 0 alone (no mask)
    too."""
    top = float(np.finfo(dt.numpy_dtype).max)
    x = np.array([[1.0, np.nan, 2.0, 3.0, 0.5, -1.0], [np.inf, 1.0, 0.0, -0.0, 2.0, 1.0],
                  [-top, -top, 1.0, 2.0, -0.0, 3.0], [1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
                  [-np.inf] * 6, [0.25, -0.0, -np.inf, 7.0, 1.0, 2.0]], np.float64).astype(dt.numpy_dtype)
    m = np.array([[0.0, 0.0, -np.inf, -top, 0.0, -0.0], [0.0, -np.inf, 0.0, 0.0, -top, np.nan],
                  [-top, -top, 0.0, 0.0, 0.0, 0.0], [-np.inf] * 6, [0.0] * 6, [top, 0.0, np.inf, -np.inf, 0.0, 0.0]],
                 np.float64).astype(dt.numpy_dtype)
    d = TD(dt, x.shape)
    got, _ = run_masked(dev, rng, d, d, (1,), x, d, m)
    assert (got[3] == 0).all() and (got[4] == 0).all()  # fully masked / all -inf: NaN -> 0
    run_masked(dev, rng, d, d, (1,), x, None, None)  # NaN -> 0 alone
    run_masked(dev, rng, d, d, (0, 1), x, TD(dt, (1, 6)), m[:1], nan_to_zero=False)


def test_masked_helper(dev, rng):
    """kdml.softmax(mask=, nan_to_zero=): the mask broadcast with numpy's rules (Python numbers
    take x's type), one dispatch, the same bits as add -> softmax -> where(isnan)."""
    x = scores(rng, (2, 3, 5, 9), DT.FLOAT32)
    mask = attention_mask(rng, (2, 1, 1, 9), DT.FLOAT32, -np.inf)
    y = kdml.softmax(x, mask=mask, nan_to_zero=True, device=dev)
    s = kdml.softmax(kdml.add(x, mask, device=dev), device=dev)
    want = kdml.where(kdml.isnan(s, device=dev), np.zeros(1, np.float32), s, device=dev)
    assert np.array_equal(_bits(y.numpy()), _bits(want.numpy()))
    y2 = kdml.softmax(x, mask=-1.5, device=dev)  # a scalar mask: the softmax of x - 1.5
    assert np.array_equal(_bits(y2.numpy()), _bits(kdml.softmax(kdml.add(x, np.float32(-1.5), device=dev),
                                                                device=dev).numpy()))
    with pytest.raises(kdml.InvalidArgumentError, match=r"^mask: sizes \(3, 9\) do not broadcast"):
        kdml.softmax(x, mask=np.zeros((3, 9), np.float32), device=dev)
    with pytest.raises(kdml.InvalidArgumentError, match=r"^mask_tensor\.data_type: must equal input_tensor's"):
        kdml.softmax(x, mask=np.zeros(9, np.float16), device=dev)


@pytest.mark.parametrize("dt", FLOATS, ids=IDS)
@pytest.mark.parametrize(("shape", "strides"), [((2, 3, 5, 9), None), ((2, 2, 3, 3000), None),
                                                ((2, 3, 4, 33), (450, 140, 34, 1))], ids=["fast", "general", "strided"])
def test_masked_runs_exactly_in_place(dev, rng, dt, shape, strides):
    """The extension's output may be its input (same offset and layout; the ONNX backend writes
    attention probabilities over their scores): the same bits as into a second buffer, and every
    byte outside the tensor unchanged. DirectML's plain operator still refuses it (test above)."""
    d = TD(dt, shape, strides)
    x, xraw = place(dev, rng, d, scores(rng, shape, dt))
    mask = dev.tensor(attention_mask(rng, (shape[0], 1, 1, shape[-1]), dt, -np.inf))
    op = dev.compile(kdml.ActivationSoftmax1Desc(d, d, (3,), mask_tensor=mask.desc, nan_to_zero=True))
    want = dev.empty(TD(dt, shape))
    kdml.softmax(kdml.Tensor(x.buffer, d, x.offset), mask=mask, nan_to_zero=True, out=want, device=dev)
    op.execute([x, mask], [x])
    got = read_logical(assert_outside_unchanged(x, xraw), x.offset, d)
    assert np.array_equal(_bits(got), _bits(want.numpy()))


M = TD(DT.FLOAT32, (2, 1, 4))
BAD_EXT = [
    (kdml.ActivationSoftmax1Desc(F, F, (2,), mask_tensor=TD(DT.FLOAT16, (2, 1, 4))), kdml.InvalidArgumentError,
     r"^mask_tensor\.data_type: must equal input_tensor's \(FLOAT32\)"),
    (kdml.ActivationSoftmax1Desc(F, F, (2,), mask_tensor=TD(DT.FLOAT32, (2, 2, 4))), kdml.InvalidArgumentError,
     r"^mask_tensor\.sizes: each size must be 1 or input_tensor's"),
    (kdml.ActivationSoftmax1Desc(F, F, (2,), mask_tensor=TD(DT.FLOAT32, (1, 2, 1, 4))), kdml.InvalidArgumentError,
     r"^mask_tensor\.sizes: dimension count must equal input_tensor's \(3\)"),
    (kdml.ActivationSoftmax1Desc(F, F, (2,), mask_tensor=TD(DT.INT32, (2, 1, 4))), kdml.UnsupportedError,
     r"^mask_tensor: ACTIVATION_SOFTMAX1 does not support INT32"),
    (kdml.ActivationSoftmax1Desc(F, F, (2,), mask_tensor=TD(DT.FLOAT32, (2, 1, 4), (1, 1))), kdml.InvalidArgumentError,
     r"^mask_tensor"),
    (kdml.ActivationSoftmax1Desc(F, F, (2,), mask_tensor=M, nan_to_zero=2), kdml.InvalidArgumentError,
     r"^nan_to_zero: must be a bool"),
    (kdml.ActivationSoftmax1Desc(F, F, (2,), nan_to_zero="yes"), kdml.InvalidArgumentError,
     r"^nan_to_zero: must be a bool"),
    (kdml.ActivationSoftmax1Desc(TD(DT.FLOAT32, (2,) * 8, tuple(3 ** i for i in range(8))), TD(DT.FLOAT32, (2,) * 8),
                                 (7,), nan_to_zero=True), kdml.UnsupportedError,
     r"^nan_to_zero: ACTIVATION_SOFTMAX1 with kompute_dml's mask / nan_to_zero extension takes at most 6"),
]


@pytest.mark.parametrize(("desc", "error", "match"), BAD_EXT, ids=[m[1:40] for _, _, m in BAD_EXT])
def test_masked_refused(dev, desc, error, match):
    with pytest.raises(error, match=match):
        dev.compile(desc)


def test_masked_bindings_and_families(dev, rng):
    """The mask binds after the input; without it (NaN -> 0 alone, or DirectML's descriptor) the
    binding lists are DirectML's; the extension's variants are their own families with the same
    shape siblings as DirectML's (another row length picks them)."""
    from kompute_dml.ops.contract import SMX_EXT_FAST, SMX_EXT_GEN

    op = dev.compile(kdml.ActivationSoftmax1Desc(F, F, (2,), mask_tensor=M))
    assert op.input_fields == ("input_tensor", "mask_tensor") and op.output_fields == ("output_tensor",)
    x = dev.tensor(scores(rng, (2, 3, 4), DT.FLOAT32))
    with pytest.raises(kdml.InvalidArgumentError, match="^inputs: ACTIVATION_SOFTMAX1 takes 2"):
        op.execute([x], [dev.empty(F)])
    buf = dev.buffer(np.zeros(24, np.float32))
    with pytest.raises(kdml.InvalidArgumentError, match="^output_tensor: overlaps mask_tensor"):
        op.execute([x, kdml.Tensor(buf, M)], [kdml.Tensor(buf, F)])
    assert dev.compile(kdml.ActivationSoftmax1Desc(F, F, (2,), nan_to_zero=True)).input_fields == ("input_tensor",)
    assert dev.compile(kdml.ActivationSoftmax1Desc(F, F, (2,))).variants == ["smx_f32_l8_k1"]
    assert set(SMX_EXT_FAST.siblings("smx_ext_f32_l8_k4")) >= {"smx_ext_f32_l8_k1", "smx_ext_f32_l32_k8"}
    assert not any(v.startswith(("smx_f32", "smx_ext_f16")) for v in SMX_EXT_FAST.siblings("smx_ext_f32_l8_k4"))
    assert SMX_EXT_GEN.siblings("smx_ext_f16_g32") == ("smx_ext_f16_g256",)
