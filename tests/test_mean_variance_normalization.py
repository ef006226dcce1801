"""MEAN_VARIANCE_NORMALIZATION1 (ops/mean_variance_normalization.py, shaders/mvn.comp) against the
float64 reference and error bound of tests/mvn_reference.py: FLOAT32 and FLOAT16, 1-8 dimensions,
every kind of axes set, strided and broadcast (stride 0) inputs, scales and biases of every
broadcast shape (present, absent, one of them), random offsets with guard bytes, poisoned outputs
whose every other byte must stay unchanged, both shader layouts ("row" and "gen"), row lengths
from 1 to past the register cache, edge values (NaN, infinities, all-equal rows, -0, large and
small magnitudes, large offsets), the feature levels' rules, refusals, and the helpers
(mean_variance_normalization, layer_norm against onnx's reference LayerNormalization,
skip_layer_norm)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_outside_unchanged, place, poison_against, random_strides, read_logical
from mvn_reference import U, assert_within, gamma, mvn_bound, mvn_ref

import kompute_dml as kdml
from kompute_dml.ops.mean_variance_normalization import row_layout, summation_depth

DT = kdml.DataType
FL = kdml.FeatureLevel
TD = kdml.TensorDesc
FLOATS = (DT.FLOAT32, DT.FLOAT16)
IDS = ("f32", "f16")


def sizes_for(rng, rank: int, max_elems: int = 600) -> list[int]:
    s = [int(rng.integers(1, 7)) for _ in range(rank)]
    while np.prod(s) > max_elems:
        s[int(np.argmax(s))] //= 2
    return [max(1, v) for v in s]


def layout(rng, sizes, *, is_input: bool):
    kind = rng.integers(0, 3)
    return None if kind == 0 else random_strides(rng, sizes, allow_broadcast=is_input and kind == 2)


def values(rng, dt: DT, shape, spread: float = 1.0, offset: float = 0.0) -> np.ndarray:
    v = rng.standard_normal(shape) * spread + offset
    return v.astype(dt.numpy_dtype)


def run(dev, rng, dt, sizes, axes, *, scale="random", bias="random", nv=True, eps=1e-5, strided=True,
        x_values=None, s_values=None, b_values=None):
    """Place the tensors, poison the output, run, check the output against the bound and every
    other byte of the output's buffer and the inputs' buffers; returns the compiled operator."""
    sizes = tuple(sizes)
    n = len(sizes)

    def side(kind, vals):
        if kind is None:
            return None, None
        ss = tuple(sizes[d] if kind == "full" or (kind == "random" and rng.random() < 0.6) or
                   (kind == "rows" and d in axes) else 1 for d in range(n))
        d = TD(dt, ss, layout(rng, ss, is_input=True) if strided else None)
        v = values(rng, dt, ss, 1.0, 0.5) if vals is None else vals
        return d, v

    sd, sv = side(scale, s_values)
    bd, bv = side(bias, b_values)
    xd = TD(dt, sizes, layout(rng, sizes, is_input=True) if strided else None)
    yd = TD(dt, sizes, layout(rng, sizes, is_input=False) if strided else None)
    xv = values(rng, dt, sizes, float(10.0 ** rng.integers(-2, 3)), float(rng.standard_normal())) \
        if x_values is None else x_values
    x, xraw = place(dev, rng, xd, xv)
    s, sraw = place(dev, rng, sd, sv) if sd is not None else (None, None)
    b, braw = place(dev, rng, bd, bv) if bd is not None else (None, None)
    y, _ = place(dev, rng, yd)
    xl = read_logical(xraw, x.offset, xd)
    sl = read_logical(sraw, s.offset, sd) if s is not None else None
    bl = read_logical(braw, b.offset, bd) if b is not None else None
    red = tuple(sorted(axes))
    want = mvn_ref(xl, sl, bl, red, nv, float(np.float32(eps)))
    with np.errstate(invalid="ignore", over="ignore"):
        before = poison_against(y, want.astype(dt.numpy_dtype), rng)
    op = dev.compile(kdml.MeanVarianceNormalization1Desc(xd, sd, bd, yd, tuple(axes), nv, eps))
    op.execute([x, s, b], [y])
    got = read_logical(assert_outside_unchanged(y, before), y.offset, yd)
    rlen = int(np.prod([sizes[d] for d in red]))
    depth = summation_depth(rlen, dt)
    assert_within(got, xl, sl, bl, red, nv, float(np.float32(eps)), depth)
    assert x.buffer.read() == xraw
    assert s is None or s.buffer.read() == sraw
    assert b is None or b.buffer.read() == braw
    return op


def random_axes(rng, n: int) -> tuple[int, ...]:
    k = int(rng.integers(1, n + 1))
    return tuple(int(a) for a in rng.permutation(n)[:k])


@pytest.mark.parametrize("dt", FLOATS, ids=IDS)
def test_every_rank_random_axes_and_layouts(dev, rng, dt):
    for rank in range(1, 9):
        for _ in range(3):
            sizes = sizes_for(rng, rank)
            choice = rng.integers(0, 4)
            scale, bias = [("random", "random"), (None, None), ("random", None), (None, "random")][choice]
            run(dev, rng, dt, sizes, random_axes(rng, rank), scale=scale, bias=bias, nv=bool(rng.random() < 0.8),
                eps=float(rng.choice([1e-5, 1e-3, 0.25])))


@pytest.mark.parametrize("dt", FLOATS, ids=IDS)
@pytest.mark.parametrize("rlen", [1, 2, 7, 33, 256, 384, 768, 1024, 1025, 3001, 5000])
def test_layer_norm_rows(dev, rng, dt, rlen):
    """The LayerNorm case: packed rows over the last dimension, per-row scale and bias broadcast
    over the rows (stride 0), row lengths from 1 past the register cache (FLOAT32 2048, FLOAT16
    4096 elements per row); odd FLOAT16 rows share words with their neighbours."""
    rows = max(1, min(40, 6000 // rlen))
    op = run(dev, rng, dt, (rows, rlen), (1,), scale="rows", bias="rows", strided=False)
    assert op.variants == [f"mvn_{'f32' if dt == DT.FLOAT32 else 'f16'}_row"]


def test_summation_depth():
    """The row layout the bound's N comes from (docs/mean_variance_normalization.md): the fewest
    invocations per row that leave each at most 8 elements (FLOAT16: 4 pairs), at most 256."""
    assert row_layout(384, DT.FLOAT32) == (6, 1) and summation_depth(384, DT.FLOAT32) == 6 + 6
    assert row_layout(1024, DT.FLOAT32) == (7, 1) and summation_depth(1024, DT.FLOAT32) == 8 + 7
    assert row_layout(1024, DT.FLOAT16) == (7, 2) and summation_depth(1024, DT.FLOAT16) == 4 * 2 + 7
    assert row_layout(1, DT.FLOAT32) == (0, 1) and summation_depth(1, DT.FLOAT32) == 1
    assert row_layout(7, DT.FLOAT16) == (0, 2) and summation_depth(7, DT.FLOAT16) == 4 * 2
    assert row_layout(9, DT.FLOAT16) == (1, 2) and summation_depth(9, DT.FLOAT16) == 3 * 2 + 1
    assert row_layout(9, DT.FLOAT32) == (1, 1) and summation_depth(9, DT.FLOAT32) == 5 + 1
    assert row_layout(5000, DT.FLOAT32) == (8, 1) and summation_depth(5000, DT.FLOAT32) == 20 + 8


def test_bound_is_tight(rng):
    """The stated bound is not vacuous: for standard normal rows of 384 FLOAT32 elements it is
    a few float32 ulps of the outputs."""
    x = rng.standard_normal((16, 384))
    s, b = rng.standard_normal(384), rng.standard_normal(384)
    y = np.abs(mvn_ref(x, s, b, (1,), True, 1e-5))
    bound = mvn_bound(x, s, b, (1,), True, 1e-5, summation_depth(384, DT.FLOAT32), False)
    assert bound.max() < 64 * U * max(1.0, y.max())
    assert gamma(16) < 1e-6


@pytest.mark.parametrize("dt", FLOATS, ids=IDS)
def test_gen_layouts(dev, rng, dt):
    """Layouts the "row" variants do not take (reduced elements of several strided dimensions,
    more than three outer dimensions) run on the "gen" variants; three outer dimensions and one
    strided row stay on "row"."""
    code = "f32" if dt == DT.FLOAT32 else "f16"
    cases = [((3, 4, 5, 6), (0, 2), None), ((2, 3, 4, 5), (1, 3), None),
             ((2, 3, 2, 3, 5), (4,), (200, 60, 28, 9, 1)), ((2, 3, 2, 3, 5), (0, 1, 2, 3, 4), (300, 90, 40, 12, 2))]
    for sizes, axes, xs in cases:
        xd_strides = xs
        xv = values(rng, dt, sizes, 2.0, 1.0)
        op = run(dev, rng, dt, sizes, axes, scale="rows", bias="random", strided=True, x_values=xv)
        assert op.variants[0].startswith(f"mvn_{code}_")
        if xd_strides is not None:  # also a fixed, non-mergeable input layout
            sd = TD(dt, sizes, xd_strides)
            x, xraw = place(dev, rng, sd, xv)
            yd = TD(dt, sizes)
            y, _ = place(dev, rng, yd)
            want = mvn_ref(read_logical(xraw, x.offset, sd), None, None, axes, True, float(np.float32(1e-5)))
            before = poison_against(y, want.astype(dt.numpy_dtype), rng)
            op = dev.compile(kdml.MeanVarianceNormalization1Desc(sd, None, None, yd, axes, True, 1e-5))
            assert op.variants == [f"mvn_{code}_gen"]
            op.execute([x, None, None], [y])
            got = read_logical(assert_outside_unchanged(y, before), y.offset, yd)
            rlen = int(np.prod([sizes[d] for d in axes]))
            assert_within(got, read_logical(xraw, x.offset, sd), None, None, axes, True, float(np.float32(1e-5)),
                          summation_depth(rlen, dt))
    op = dev.compile(kdml.MeanVarianceNormalization1Desc(TD(dt, (2, 3, 4, 5)), None, None, TD(dt, (2, 3, 4, 5)),
                                                         (1, 3), True, 1e-5))
    assert op.variants == [f"mvn_{code}_gen"]
    op = dev.compile(kdml.MeanVarianceNormalization1Desc(TD(dt, (2, 3, 4, 5), (200, 60, 12, 2)), None, None,
                                                         TD(dt, (2, 3, 4, 5)), (3,), True, 1e-5))
    assert op.variants == [f"mvn_{code}_row"]


@pytest.mark.parametrize("dt", FLOATS, ids=IDS)
def test_edge_values(dev, rng, dt):
    big, small = (1e15, 1e-15) if dt == DT.FLOAT32 else (3e3, 1e-3)
    rows = [
        np.full(64, 3.0),  # all equal (eps > 0)
        np.where(rng.random(64) < 0.5, 0.0, -0.0),  # signed zeros
        rng.standard_normal(64) * big,
        rng.standard_normal(64) * small,
        1000.0 + rng.standard_normal(64) * 0.01 if dt == DT.FLOAT32 else 100.0 + rng.standard_normal(64) * 0.5,
        np.r_[np.nan, rng.standard_normal(63)],
        np.r_[np.inf, rng.standard_normal(63)],
        np.r_[np.inf, -np.inf, rng.standard_normal(62)],
        np.r_[-np.inf, rng.standard_normal(63)],
    ]
    x = np.stack(rows).astype(dt.numpy_dtype)
    for nv in (True, False):
        for scale, bias in (("rows", "rows"), (None, None)):
            run(dev, rng, dt, x.shape, (1,), scale=scale, bias=bias, nv=nv, eps=1e-5, strided=False, x_values=x)
        run(dev, rng, dt, x.shape, (1,), nv=nv, eps=0.5, x_values=x)


def test_float16_subnormals(dev, rng):
    """FLOAT16 inputs, scales and biases with subnormal halves are read exactly (the integer
    decoding, whatever the device's float controls), results at every row length parity."""
    for rlen in (64, 33):
        x = (rng.standard_normal((6, rlen)) * 2e-6).astype(np.float16)  # mostly subnormal (< 6.1e-5)
        x[0, :4] = [np.float16(2 ** -24), -np.float16(2 ** -24), np.float16(0.0), np.float16(3e-5)]
        s = (rng.standard_normal(rlen) * 3e-6).astype(np.float16)
        b = (rng.standard_normal(rlen) * 1e-6).astype(np.float16)
        assert (np.abs(x) < 6.1e-5).mean() > 0.9 and (np.abs(s) < 6.1e-5).all()
        for eps in (1e-12, 1e-5):
            run(dev, rng, DT.FLOAT16, x.shape, (1,), scale="rows", bias="rows", eps=eps, strided=False, x_values=x,
                s_values=s.reshape(1, rlen), b_values=b.reshape(1, rlen))


def test_float16_rounding_is_nearest_even(dev):
    """FLOAT16 results are the float32 result rounded to nearest, ties to even, overflow to
    infinity: rows of +-v (mean exactly 0) without variance normalization give x + bias exactly in
    float32, chosen at float16 ties and beside the largest finite value."""
    v = np.array([1.0, 1.0, 1.0, 2.0, 65504.0, 65504.0, 0.5, 1024.0], np.float16)
    b = np.array([2 ** -11, 3 * 2 ** -11, -(2 ** -11), 2 ** -10, 16.0, 8.0, 3 * 2 ** -13, 0.5], np.float16)
    x = np.stack([v, -v], axis=1).reshape(1, -1)  # +v, -v, ...: the float32 sum is exact, the mean 0
    bias = np.repeat(b, 2).reshape(1, -1)
    with np.errstate(over="ignore"):
        want = (x.astype(np.float32) + bias.astype(np.float32)).astype(np.float16)  # numpy: nearest even
    assert np.isinf(want).sum() == 1 and want[0, 0] == 1.0 and want[0, 2] == 1 + 2 ** -9
    got = kdml.mean_variance_normalization(x, None, bias, normalize_variance=False, device=dev).numpy()
    assert np.array_equal(got.view(np.uint16), want.view(np.uint16)), (got, want)


def test_nan_and_infinity_rows_are_row_wide(dev):
    """A NaN, or infinities of both signs, make their whole row NaN; rows without stay finite."""
    x = np.array([[1.0, np.nan, 2.0, 3.0], [1.0, 2.0, 3.0, 5.0], [np.inf, -np.inf, 1.0, 2.0]], np.float32)
    y = kdml.mean_variance_normalization(x, device=dev).numpy()
    assert np.isnan(y[0]).all() and np.isnan(y[2]).all() and np.isfinite(y[1]).all()


def test_constant_rows_give_bias(dev):
    """All-equal rows: the deviations are 0 (in general the sum of equal float32 values may round,
    which the bound allows; here it is exact and the division by a power of two too), so the
    output is the bias."""
    x = np.full((5, 128), 0.5, np.float32)
    b = np.linspace(-1, 1, 128).astype(np.float32)
    y = kdml.layer_norm(x, np.full(128, 3.0, np.float32), b, device=dev).numpy()
    assert np.array_equal(y, np.broadcast_to(b, x.shape))


# ---- feature levels -------------------------------------------------------------------------------
def _desc(xs=(1, 2, 3, 4), ss=(1, 2, 1, 1), bs=(1, 2, 1, 1), axes=(2, 3), dt=DT.FLOAT32, nv=True, eps=1e-5, **kw):
    return kdml.MeanVarianceNormalization1Desc(TD(dt, xs), TD(dt, ss) if ss else None, TD(dt, bs) if bs else None,
                                               TD(kw.get("ydt", dt), kw.get("ys", xs), kw.get("ystr")), axes, nv, eps,
                                               kw.get("act"))


@pytest.fixture(scope="module")
def level_dev():
    made = {}

    def get(level):
        if level not in made:
            made[level] = kdml.Device(feature_level=level)
        return made[level]

    yield get
    for d in made.values():
        d.close()


def test_feature_levels(level_dev):
    with pytest.raises(kdml.UnsupportedError, match="^MEAN_VARIANCE_NORMALIZATION1: introduced at DML_FEATURE_LEVEL_2_1"):
        level_dev(FL.FL_2_0).compile(_desc())
    d21 = level_dev(FL.FL_2_1)
    d21.compile(_desc())
    d21.compile(_desc(ss=None, bs=None))
    with pytest.raises(kdml.UnsupportedError, match="^input_tensor: MEAN_VARIANCE_NORMALIZATION1 supports 4 dimensions"):
        d21.compile(_desc(xs=(2, 3, 4), ss=(1, 3, 4), bs=(1, 3, 4), axes=(2,)))
    for level in (FL.FL_2_1, FL.FL_3_1, FL.FL_5_1):
        with pytest.raises(kdml.InvalidArgumentError, match="^bias_tensor: is required when scale_tensor is present"):
            level_dev(level).compile(_desc(bs=None))
        with pytest.raises(kdml.InvalidArgumentError, match="^scale_tensor: is required when bias_tensor is present"):
            level_dev(level).compile(_desc(ss=None))
    for level in (FL.FL_5_2, FL.FL_6_2):
        level_dev(level).compile(_desc(bs=None))
        level_dev(level).compile(_desc(ss=None))
    d31 = level_dev(FL.FL_3_1)
    d31.compile(_desc(xs=(2, 3, 4), ss=(1, 3, 4), bs=(1, 3, 4), axes=(2,)))
    d31.compile(_desc(xs=(7,), ss=(1,), bs=(7,), axes=(0,)))
    for bad in ((1, 1, 3, 4), (1, 1, 1, 1)):  # the ChannelCount rule below 4_0
        with pytest.raises(kdml.InvalidArgumentError, match="^scale_tensor.sizes: below feature level 4_0 dimension 1"):
            d31.compile(_desc(ss=bad))
        with pytest.raises(kdml.InvalidArgumentError, match="^bias_tensor.sizes: below feature level 4_0 dimension 1"):
            d21.compile(_desc(bs=bad))
        level_dev(FL.FL_4_0).compile(_desc(ss=bad, bs=bad))


def test_levels_run(level_dev, rng):
    """Results at 2_1 (4-D; through the helper for other ranks), 3_1, 4_0 and 5_2."""
    for level in (FL.FL_2_1, FL.FL_3_1, FL.FL_4_0, FL.FL_5_2):
        d = level_dev(level)
        run(d, rng, DT.FLOAT32, (2, 3, 4, 5), (1, 2, 3), scale="full", bias="full")
        run(d, rng, DT.FLOAT16, (2, 3, 4, 5), (3,), scale=None, bias=None)


# ---- refusals --------------------------------------------------------------------------------------
class _Act:
    pass


@pytest.mark.parametrize(("desc", "err", "msg"), [
    (_desc(ss=(1, 2, 1, 1), dt=DT.FLOAT32, ydt=DT.FLOAT16), kdml.InvalidArgumentError,
     "^output_tensor.data_type: must equal input_tensor's"),
    (kdml.MeanVarianceNormalization1Desc(TD(DT.FLOAT32, (2, 3)), TD(DT.FLOAT16, (1, 3)), None, TD(DT.FLOAT32, (2, 3)),
                                         (1,), True, 1e-5), kdml.InvalidArgumentError,
     "^scale_tensor.data_type: must equal input_tensor's"),
    (_desc(ss=(2, 1, 1), bs=None), kdml.InvalidArgumentError, "^scale_tensor.sizes: dimension count must equal"),
    (_desc(ys=(1, 2, 3, 5)), kdml.InvalidArgumentError, "^output_tensor.sizes: must equal input_tensor's"),
    (_desc(ss=(1, 2, 2, 1)), kdml.InvalidArgumentError, "^scale_tensor.sizes: each size must be 1 or input_tensor's"),
    (_desc(bs=(2, 2, 1, 1)), kdml.InvalidArgumentError, "^bias_tensor.sizes: each size must be 1 or"),
    (_desc(axes=()), kdml.InvalidArgumentError, "^axes: AxisCount must be at least 1"),
    (_desc(axes=(4,)), kdml.InvalidArgumentError, "^axes\\[0\\]: must be in \\[0, 4\\)"),
    (_desc(axes=(1, -1)), kdml.InvalidArgumentError, "^axes\\[1\\]: must be in \\[0, 4\\)"),
    (_desc(axes=(2, 3, 2)), kdml.InvalidArgumentError, "^axes: must be distinct"),
    (_desc(axes=(True,)), kdml.InvalidArgumentError, "^axes\\[0\\]: must be an integer"),
    (_desc(axes=3), kdml.InvalidArgumentError, "^axes: must be a sequence of integers"),
    (_desc(nv=2), kdml.InvalidArgumentError, "^normalize_variance: must be a BOOL"),
    (_desc(nv="yes"), kdml.InvalidArgumentError, "^normalize_variance: must be a BOOL"),
    (_desc(eps="0.1"), kdml.InvalidArgumentError, "^epsilon: must be a FLOAT"),
    (_desc(eps=1e39), kdml.InvalidArgumentError, "^epsilon: .* outside the float32 range"),
    (_desc(eps=True), kdml.InvalidArgumentError, "^epsilon: must be a FLOAT"),
    (_desc(ystr=(24, 0, 4, 1)), kdml.InvalidArgumentError, "^output_tensor.strides: an output may not broadcast"),
    (_desc(act=_Act()), kdml.UnsupportedError, "^fused_activation: MEAN_VARIANCE_NORMALIZATION1 with a fused "
                                               "activation is not supported"),
    (_desc(dt=DT.INT32), kdml.UnsupportedError, "^input_tensor: MEAN_VARIANCE_NORMALIZATION1 does not support INT32"),
    (_desc(xs=(1,) * 9, ss=None, bs=None, axes=(0,)), kdml.InvalidArgumentError, "^input_tensor"),
], ids=range(21))
def test_refusals(dev, desc, err, msg):
    with pytest.raises(err, match=msg):
        dev.compile(desc)


def test_output_may_not_alias_input(dev):
    d = TD(DT.FLOAT32, (4, 8))
    buf = dev.buffer(np.zeros(32, np.float32))
    op = dev.compile(kdml.MeanVarianceNormalization1Desc(d, None, None, d, (1,), True, 1e-5))
    with pytest.raises(kdml.InvalidArgumentError, match="^output_tensor: overlaps input_tensor"):
        op.execute([kdml.Tensor(buf, d), None, None], [kdml.Tensor(buf, d)])
    with pytest.raises(kdml.InvalidArgumentError, match="^scale_tensor: was absent"):
        op.execute([kdml.Tensor(buf, d), kdml.Tensor(buf, d), None], [kdml.Tensor(dev.buffer(128), d)])


def test_descriptor_fields():
    d = _desc(axes=[3, 1])
    assert d.axes == (3, 1) and d.axis_count == 2 and hash(d) == hash(_desc(axes=(3, 1)))


# ---- helpers -------------------------------------------------------------------------------------
def _check(got: kdml.Tensor, x, s, b, axes, nv=True, eps=1e-5):
    x = np.asarray(x)
    red = tuple(sorted(a % x.ndim for a in axes))
    rlen = int(np.prod([x.shape[d] for d in red]))
    assert got.shape == x.shape and got.dtype == x.dtype
    with np.errstate(over="ignore"):
        sb = [None if v is None else np.broadcast_to(np.asarray(v, np.float64), x.shape) for v in (s, b)]
    assert_within(got.numpy(), x, sb[0], sb[1], red, nv, float(np.float32(eps)),
                  summation_depth(rlen, DT.from_numpy(x.dtype)))


@pytest.mark.parametrize("dt", FLOATS, ids=IDS)
def test_mvn_helper(dev, rng, dt):
    npd = dt.numpy_dtype
    for shape, axes, sshape in [((2, 3, 4, 5), (0, 2, 3), (3, 1, 1)), ((2, 3, 4, 5), (-1, -2), (5,)),
                                ((6,), (0,), (1,)), ((4, 7), (-1,), None), ((2, 2, 2, 2, 2, 2, 2, 3), (1, 3, 7), (3,))]:
        x = rng.standard_normal(shape).astype(npd)
        s = None if sshape is None else rng.standard_normal(sshape).astype(npd)
        b = None if sshape is None else rng.standard_normal(sshape).astype(npd)
        for nv in (True, False):
            _check(kdml.mean_variance_normalization(x, s, b, axes=axes, normalize_variance=nv, epsilon=1e-3,
                                                    device=dev), x, s, b, axes, nv, 1e-3)
    x = rng.standard_normal((3, 8)).astype(npd)
    _check(kdml.mean_variance_normalization(x, 2, 0.5, device=dev), x, 2, 0.5, (-1,))  # Python numbers: x's type
    with pytest.raises(kdml.UnsupportedError, match="^input_tensor: MEAN_VARIANCE_NORMALIZATION1 does not support "
                                                    "FLOAT64"):
        kdml.mean_variance_normalization(x.astype(np.float64), device=dev)  # (Python floats are float32)


def test_mvn_helper_strided_tensors_and_out(dev, rng):
    """Tensors with strides and offsets (views), broadcast scale, a strided out= whose other
    bytes stay as they were."""
    base = rng.standard_normal((6, 10, 12)).astype(np.float32)
    t = dev.tensor(base)[1:5, ::3, 2:11]
    x = base[1:5, ::3, 2:11]
    s = dev.tensor(rng.standard_normal((1, 9)).astype(np.float32))
    od = TD(DT.FLOAT32, x.shape, random_strides(rng, x.shape, allow_broadcast=False))
    out, _ = place(dev, rng, od)
    want = mvn_ref(x, s.numpy(), None, (1, 2), True, float(np.float32(1e-5)))
    before = poison_against(out, want.astype(np.float32), rng)
    assert kdml.mean_variance_normalization(t, s, None, axes=(1, 2), out=out) is out
    assert_outside_unchanged(out, before)
    _check(out, x, s.numpy(), None, (1, 2))
    with pytest.raises(kdml.InvalidArgumentError, match="^out: sizes must be"):
        kdml.mean_variance_normalization(t, out=dev.empty(TD(DT.FLOAT32, (4, 4, 8))))
    with pytest.raises(kdml.InvalidArgumentError, match="^scale: sizes \\(2,\\) do not broadcast"):
        kdml.mean_variance_normalization(x, np.ones(2, np.float32), device=dev)
    with pytest.raises(kdml.InvalidArgumentError, match="^axes\\[1\\]: must be in \\[-3, 3\\)"):
        kdml.mean_variance_normalization(x, axes=(0, 3), device=dev)
    with pytest.raises(kdml.InvalidArgumentError, match="^axes: must be distinct"):
        kdml.mean_variance_normalization(x, axes=(0, -3), device=dev)
    with pytest.raises(kdml.InvalidArgumentError, match="^scale_tensor.data_type: must equal input_tensor's"):
        kdml.mean_variance_normalization(x, np.ones(9, np.float16), device=dev)


def _onnx_layer_norm(x, s, b, axis, eps):
    import onnx
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator

    elem = TensorProto.FLOAT if x.dtype == np.float32 else TensorProto.FLOAT16
    vals = (x, s, b)[:2 + (b is not None)]
    ins = [helper.make_tensor_value_info(n, elem, v.shape) for n, v in zip(("x", "s", "b"), vals)]
    node = helper.make_node("LayerNormalization", [i.name for i in ins], ["y"], axis=axis, epsilon=eps)
    graph = helper.make_graph([node], "ln", ins, [helper.make_tensor_value_info("y", elem, x.shape)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    onnx.checker.check_model(model)
    feeds = {"x": x, "s": s, **({"b": b} if b is not None else {})}
    return ReferenceEvaluator(model).run(None, feeds)[0]


@pytest.mark.parametrize("dt", FLOATS, ids=IDS)
def test_layer_norm_against_onnx(dev, rng, dt):
    """ONNX LayerNormalization's meaning (onnx's reference implementation, float32): normalized
    over axis..rank-1, scale and bias broadcast to those trailing dimensions."""
    npd = dt.numpy_dtype
    for shape, axis, sshape, with_bias in [((2, 5, 384), -1, (384,), True), ((3, 4, 6), -2, (4, 6), True),
                                           ((3, 4, 6), 1, (1, 6), False), ((7,), 0, (7,), True),
                                           ((2, 3, 4, 5), 0, (3, 1, 5), True), ((4, 33), -1, (33,), True)]:
        x = (rng.standard_normal(shape) * 3 + 1).astype(npd)
        s = rng.standard_normal(sshape).astype(npd)
        b = rng.standard_normal(sshape).astype(npd) if with_bias else None
        got = kdml.layer_norm(x, s, b, axis=axis, epsilon=1e-5, device=dev)
        axes = tuple(range(axis % len(shape), len(shape)))
        _check(got, x, s, b, axes)
        ref = _onnx_layer_norm(x, s, b, axis, 1e-5)
        tol = 2e-5 if dt == DT.FLOAT32 else 4e-3
        np.testing.assert_allclose(got.numpy().astype(np.float64), ref.astype(np.float64), rtol=tol, atol=tol)


@pytest.mark.parametrize("dt", FLOATS, ids=IDS)
@pytest.mark.parametrize("shape, axis, outputs", [((2, 5, 384), -1, ("y", "mean", "inv")), ((3, 4, 6), 1, ("y", "", "inv")),
                                                  ((2, 3, 4, 5), 0, ("y", "mean"))])
def test_onnx_layer_norm_mean_and_inv_std_dev_on_the_device(rng, dt, shape, axis, outputs):
    """LayerNormalization's optional Mean and InvStdDev (float32 for float16 inputs too, as the
    spec's stash_type and onnxruntime have them; shape X's with the normalized dimensions 1) on
    the device beside Y, against onnxruntime; Y the bits of the same node without them."""
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from onnx import helper

    from kompute_dml.onnx_backend import Backend

    npd = dt.numpy_dtype
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(npd))
    sshape = shape[axis % len(shape):]
    x = (rng.standard_normal(shape) * 3 + 1).astype(npd)
    s, b = rng.standard_normal(sshape).astype(npd), rng.standard_normal(sshape).astype(npd)

    def model(outs):
        node = helper.make_node("LayerNormalization", ["x", "s", "b"], list(outs), axis=axis, epsilon=1e-5)
        ins = [helper.make_tensor_value_info(n, elem, v.shape) for n, v in (("x", x), ("s", s), ("b", b))]
        vis = [helper.make_tensor_value_info(o, elem if o == "y" else onnx.TensorProto.FLOAT, None) for o in outs if o]
        return helper.make_model(helper.make_graph([node], "ln", ins, vis), opset_imports=[helper.make_opsetid("", 17)],
                                 ir_version=10)

    feeds = {"x": x, "s": s, "b": b}
    rep = Backend.prepare(model(outputs), "CPU")
    got = rep.run(feeds)
    assert {p.target for p in rep.placement} == {"vulkan"} and rep.last_run.runtime_fallbacks == 0, rep.last_run.events
    sess = ort.InferenceSession(model(outputs).SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, feeds)
    named = [o for o in outputs if o]
    for name, g, w in zip(named, got, want):
        assert g.dtype == w.dtype and g.shape == w.shape, (name, g.dtype, g.shape, w.dtype, w.shape)
        tol = 1e-5 if name != "y" or dt == DT.FLOAT32 else 4e-3
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=tol, atol=tol * 4, err_msg=name)
    alone = Backend.prepare(model(("y",)), "CPU").run(feeds)[0]
    assert alone.tobytes() == got[0].tobytes()


def test_layer_norm_refusals(dev):
    x = np.ones((2, 3, 4), np.float32)
    with pytest.raises(kdml.InvalidArgumentError, match="^axis: must be in \\[-3, 3\\)"):
        kdml.layer_norm(x, np.ones(4, np.float32), axis=3, device=dev)
    with pytest.raises(kdml.InvalidArgumentError, match="^scale: sizes \\(3,\\) do not broadcast to x's normalized"):
        kdml.layer_norm(x, np.ones(3, np.float32), device=dev)
    with pytest.raises(kdml.InvalidArgumentError, match="^bias: sizes \\(2, 1, 4\\) do not broadcast"):
        kdml.layer_norm(x, np.ones(4, np.float32), np.ones((2, 1, 4), np.float32), axis=1, device=dev)
    with pytest.raises(kdml.InvalidArgumentError, match="^axis: must be an integer"):
        kdml.layer_norm(x, np.ones(4, np.float32), axis=1.0, device=dev)


def test_helper_folds_and_pads_for_the_level(level_dev, rng):
    """At 2_1 / 3_0 the descriptor is 4-D: fewer dimensions get leading 1s, more are folded
    where the layouts allow; a scale alone gets a bias of 0 below 5_2 (and the reverse)."""
    d21 = level_dev(FL.FL_2_1)
    x3 = rng.standard_normal((3, 5, 16)).astype(np.float32)
    g = rng.standard_normal(16).astype(np.float32)
    _check(kdml.layer_norm(x3, g, device=d21), x3, g, None, (2,))
    x6 = rng.standard_normal((2, 3, 2, 4, 5, 3)).astype(np.float16)
    _check(kdml.mean_variance_normalization(x6, None, np.float16(0.25), axes=(3, 4, 5), device=d21), x6, None,
           np.float16(0.25), (3, 4, 5))
    _check(kdml.mean_variance_normalization(x6, axes=(0, 1, 4), device=d21), x6, None, None, (0, 1, 4))
    t = d21.tensor(rng.standard_normal((2, 3, 4, 5, 6)).astype(np.float32))[:, ::2, :, ::2, ::3]
    with pytest.raises(kdml.UnsupportedError, match="^x: MEAN_VARIANCE_NORMALIZATION1 takes 4 to 4 dimensions at "
                                                    "this feature level and x's 5 do not fold to 4: x's strides"):
        kdml.mean_variance_normalization(t, axes=(3, 4))
    tp = d21.tensor(rng.standard_normal((2, 2, 4, 3, 2)).astype(np.float32))  # the same, packed: folds
    _check(kdml.mean_variance_normalization(tp, axes=(3, 4)), tp.numpy(), None, None, (3, 4))
    with pytest.raises(kdml.UnsupportedError, match="^axes: MEAN_VARIANCE_NORMALIZATION1 takes 4 to 4"):
        kdml.mean_variance_normalization(x6, axes=(0, 2, 4), device=d21)
    d41 = level_dev(FL.FL_4_1)
    x = rng.standard_normal((4, 24)).astype(np.float32)
    _check(kdml.layer_norm(x, np.full(24, 1.5, np.float32), device=d41), x, np.float32(1.5), None, (1,))
    _check(kdml.mean_variance_normalization(x, None, -2.0, device=d41), x, None, -2.0, (1,))


@pytest.mark.parametrize("dt", FLOATS, ids=IDS)
def test_skip_layer_norm(dev, rng, dt):
    """com.microsoft SkipLayerNormalization: s = x + skip (+ bias), each addition rounded to the
    data type (ELEMENT_WISE_ADD1), then LayerNormalization of s over the last dimension with
    gamma and beta; `sum_out` also returns s."""
    npd = dt.numpy_dtype
    x, skip = (rng.standard_normal((2, 7, 64)).astype(npd) for _ in range(2))
    gamma_, beta, bias = (rng.standard_normal(64).astype(npd) for _ in range(3))
    y, s = kdml.skip_layer_norm(x, skip, gamma_, bias, beta, epsilon=1e-12, sum_out=True, device=dev)
    want_s = (x + skip) + bias  # numpy rounds each addition to the type, as ADD1 does
    assert np.array_equal(s.numpy(), want_s)
    _check(y, want_s, gamma_, beta, (2,), eps=1e-12)
    y2 = kdml.skip_layer_norm(x, skip[0], gamma_, device=dev)  # skip broadcast, no bias or beta
    _check(y2, x + skip[0], gamma_, None, (2,), eps=1e-12)


def test_helpers_only_execute(dev, rng, monkeypatch):
    """The helpers read nothing back and leave every result to their op.execute calls: captured
    instead of run, then replayed in one recording, they give the results."""
    from kompute_dml.device.memory import Buffer
    from kompute_dml.ops.base import CompiledOperator

    captured = []

    def forbidden(*a, **k):
        raise AssertionError("a helper read the device")

    x = rng.standard_normal((3, 5, 48)).astype(np.float32)
    skip = rng.standard_normal((3, 5, 48)).astype(np.float32)
    g, b = rng.standard_normal(48).astype(np.float32), rng.standard_normal(48).astype(np.float32)
    xt, skt = dev.tensor(x), dev.tensor(skip)
    with monkeypatch.context() as m:
        m.setattr(CompiledOperator, "execute", lambda self, i, o, wait=True: captured.append((self, i, o)))
        m.setattr(Buffer, "read", forbidden)
        m.setattr(Buffer, "read_into", forbidden)
        y1 = kdml.layer_norm(xt, g, b, device=dev)
        y2, s2 = kdml.skip_layer_norm(xt, skt, g, b, None, sum_out=True, device=dev)
        y3 = kdml.mean_variance_normalization(xt, axes=(0, 2), normalize_variance=False, device=dev)
    assert len(captured) == 3  # skip_layer_norm is one execution (the skip extension)
    with dev.record() as rec:
        for op, i, o in captured:
            rec.execute(op, i, o)
    _check(y1, x, g, b, (2,))
    assert np.array_equal(s2.numpy(), (x + skip) + b)
    _check(y2, (x + skip) + b, g, None, (2,), eps=1e-12)
    _check(y3, x, None, None, (0, 2), nv=False)


# ---- kompute_dml's skip extension ---------------------------------------------------------------
def _sum_ref(x: np.ndarray, skip: np.ndarray, sbias: np.ndarray | None) -> np.ndarray:
    """(x + skip) + skip bias in numpy, each addition rounded to the type (FLOAT16: numpy's half
    addition, float32 then one rounding, as ELEMENT_WISE_ADD1's); x's shape."""
    with np.errstate(over="ignore", invalid="ignore"):
        s = np.add(x, skip, dtype=x.dtype)
        return np.add(s, sbias, dtype=x.dtype) if sbias is not None else s


def _same_bits(got: np.ndarray, want: np.ndarray, what: str, nan_payload: bool = True) -> None:
    """Bitwise equal (NaN payloads too unless `nan_payload` is False: then NaN exactly where
    `want` is NaN)."""
    g, w = (np.ascontiguousarray(a).view(f"u{a.dtype.itemsize}") for a in (got, want))
    same = g == w
    if not nan_payload:
        same |= np.isnan(got) & np.isnan(want)
    bad = np.argwhere(~same)
    assert bad.size == 0, f"{what}: {bad.shape[0]} elements differ, first at {bad[0].tolist()}: " \
                          f"got {got[tuple(bad[0])]!r} want {want[tuple(bad[0])]!r}"


def run_skip(dev, rng, dt, sizes, axes, *, skip_sizes=None, skip_bias=True, sum_out=True, strided=True,
             scale="random", bias="random", x_values=None, k_values=None, r_values=None, eps=1e-5):
    """The skip extension on placed tensors (random strides, broadcast skip / skip bias, guard
    bytes, poisoned outputs): the sum bit for bit numpy's rounded additions and the unfused
    device sequence (two ELEMENT_WISE_ADD1, then MEAN_VARIANCE_NORMALIZATION1 on the packed sum),
    the output bit for bit that sequence's and within the bound of the float64 reference of the
    rounded sum. Returns the compiled operator."""
    sizes = tuple(sizes)
    n = len(sizes)

    def desc(ss, is_input=True):
        return TD(dt, ss, layout(rng, ss, is_input=is_input) if strided else None)

    def side(kind, vals, lo=0.5):
        if kind is None:
            return None, None
        ss = tuple(sizes[d] if kind == "full" or (kind == "random" and rng.random() < 0.6) or
                   (kind == "rows" and d in axes) else 1 for d in range(n))
        return desc(ss), values(rng, dt, ss, 1.0, lo) if vals is None else vals

    xd, kd = desc(sizes), desc(skip_sizes or sizes)
    rd, rv = side("rows" if skip_bias else None, r_values, 0.0)
    sd, sv = side(scale, None)
    bd, bv = side(bias, None)
    xv = values(rng, dt, sizes, 2.0, 0.5) if x_values is None else x_values
    kv = values(rng, dt, kd.sizes, 2.0, -0.5) if k_values is None else k_values
    x, xraw = place(dev, rng, xd, xv)
    k, kraw = place(dev, rng, kd, kv)
    r, rraw = place(dev, rng, rd, rv) if rd is not None else (None, None)
    s, sraw = place(dev, rng, sd, sv) if sd is not None else (None, None)
    b, braw = place(dev, rng, bd, bv) if bd is not None else (None, None)
    yd, zd = desc(sizes, False), desc(sizes, False) if sum_out else None
    y, _ = place(dev, rng, yd)
    z, _ = place(dev, rng, zd) if zd is not None else (None, None)
    logical = [None if t is None else read_logical(raw, t.offset, t.desc)
               for t, raw in ((x, xraw), (k, kraw), (r, rraw), (s, sraw), (b, braw))]
    xl, kl, rl, sl, bl = logical
    want_sum = _sum_ref(xl, kl, rl)
    red = tuple(sorted(axes))
    want = mvn_ref(want_sum, sl, bl, red, True, float(np.float32(eps)))
    with np.errstate(invalid="ignore", over="ignore"):
        before_y = poison_against(y, want.astype(dt.numpy_dtype), rng)
        before_z = poison_against(z, want_sum, rng) if z is not None else None
    op = dev.compile(kdml.MeanVarianceNormalization1Desc(xd, sd, bd, yd, axes, True, eps, skip_tensor=kd,
                                                         skip_bias_tensor=rd, sum_output_tensor=zd))
    op.execute([x, s, b, k, r], [y, z])
    got = read_logical(assert_outside_unchanged(y, before_y), y.offset, yd)
    for t, raw in ((x, xraw), (k, kraw), (r, rraw), (s, sraw), (b, braw)):
        assert t is None or t.buffer.read() == raw
    # the unfused sequence on the device
    total = kdml.add(x, k, device=dev)
    if r is not None:
        total = kdml.add(total, r, out=total)
    y2, _ = place(dev, rng, TD(dt, sizes))
    dev.compile(kdml.MeanVarianceNormalization1Desc(total.desc, sd, bd, y2.desc, axes, True, eps)).execute(
        [total, s, b], [y2])
    unfused = total.numpy()
    _same_bits(unfused, want_sum, "unfused sum vs numpy", nan_payload=False)
    if z is not None:
        zl = read_logical(assert_outside_unchanged(z, before_z), z.offset, zd)
        _same_bits(zl, unfused, "sum output vs ELEMENT_WISE_ADD1")
    # (a NaN row's payload after the normalization's arithmetic is the compiler's choice: llvmpipe's
    # differs between the two shaders on AVX2-only processors)
    _same_bits(got, y2.numpy(), "output vs the unfused sequence", nan_payload=False)
    rlen = int(np.prod([sizes[d] for d in red]))
    # the float64 bound holds where the rows' sums of squared deviations are finite in float32,
    # the kernels' accumulator: a finite row holding both +-FLT_MAX (a broadcast layout can make
    # one) has an infinite variance there, as on any float32 device, and normalizes to 0
    with np.errstate(over="ignore", invalid="ignore"):
        dev64 = want_sum.astype(np.float64) - want_sum.astype(np.float64).mean(axis=red, keepdims=True)
        squares = (dev64 * dev64).sum(axis=red)
    if np.isfinite(want_sum).all() and (squares < np.finfo(np.float32).max).all():
        assert_within(got, want_sum, sl, bl, red, True, float(np.float32(eps)), summation_depth(rlen, dt))
    return op


@pytest.mark.parametrize("dt", FLOATS, ids=IDS)
@pytest.mark.parametrize("rlen", [1, 7, 64, 256, 384, 1025, 3001])
def test_skip_layer_norm_rows(dev, rng, dt, rlen):
    """The SkipLayerNormalization case: packed rows over the last dimension (the "row" variant with
    its one outer dimension), skip of the input's shape, skip bias and scale / bias per row; rows
    past the register cache re-read and re-add the skip; odd FLOAT16 rows share words."""
    rows = max(1, min(24, 5000 // rlen))
    for skip_bias, sum_out in ((True, True), (False, True), (True, False)):
        op = run_skip(dev, rng, dt, (rows, rlen), (1,), skip_bias=skip_bias, sum_out=sum_out, strided=False,
                      scale="rows", bias="rows")
        assert op.variants == [f"mvn_skip_{'f32' if dt == DT.FLOAT32 else 'f16'}_row"]


@pytest.mark.parametrize("dt", FLOATS, ids=IDS)
def test_skip_extension_layouts(dev, rng, dt):
    """Random ranks, axes, strides, offsets, skips broadcast over some dimensions, scale and bias
    present or not: the "gen" variant where more than one outer dimension or a multi-dimensional
    row remains."""
    code = "f32" if dt == DT.FLOAT32 else "f16"
    seen = set()
    for rank in range(1, 7):
        for _ in range(3):
            sizes = sizes_for(rng, rank, 400)
            axes = random_axes(rng, rank)
            skip_sizes = tuple(s if rng.random() < 0.7 else 1 for s in sizes)
            scale, bias = [("random", "random"), (None, None), ("random", None)][int(rng.integers(0, 3))]
            op = run_skip(dev, rng, dt, sizes, axes, skip_sizes=skip_sizes, skip_bias=bool(rng.random() < 0.7),
                          sum_out=bool(rng.random() < 0.7), scale=scale, bias=bias)
            seen.add(op.variants[0])
    # packed, scale and bias per row: the outer dimensions merge into one
    op = run_skip(dev, rng, dt, (3, 4, 5), (2,), strided=False, scale="rows", bias="rows")
    assert op.variants == [f"mvn_skip_{code}_row"]
    op = run_skip(dev, rng, dt, (3, 4, 5), (0, 2), strided=False)  # axes {0, 2}: a 2-D row
    assert op.variants == [f"mvn_skip_{code}_gen"]
    assert {f"mvn_skip_{code}_row", f"mvn_skip_{code}_gen"} <= seen | {op.variants[0]}


@pytest.mark.parametrize("dt", FLOATS, ids=IDS)
def test_skip_broadcast_over_the_batch_takes_the_row_variant(dev, rng, dt):
    """A skip of position embeddings ([1, S, H] added to [B, S, H], an encoder's first LayerNorm):
    its rows repeat every S rows, which the "row" variant takes (flag 64 << t, kper: the same bits
    as the unfused sequence, within the reference's bound); repeated over the other outer dimension
    ([B, 1, H]) or with more outer dimensions it stays on "gen"."""
    code = "f32" if dt == DT.FLOAT32 else "f16"
    for sizes, skip_sizes, want in (((3, 5, 40), (1, 5, 40), "row"), ((2, 7, 257), (1, 7, 257), "row"),
                                    ((4, 3, 8), (1, 3, 8), "row"), ((3, 5, 40), (3, 1, 40), "gen"),
                                    ((2, 3, 4, 16), (1, 3, 4, 16), "row"), ((2, 3, 4, 16), (2, 1, 4, 16), "gen")):
        for skip_bias, sum_out, scale in ((True, True, "rows"), (False, False, None)):
            op = run_skip(dev, rng, dt, sizes, (len(sizes) - 1,), skip_sizes=skip_sizes, skip_bias=skip_bias,
                          sum_out=sum_out, strided=False, scale=scale, bias=scale)
            assert op.variants == [f"mvn_skip_{code}_{want}"], (sizes, skip_sizes)


@pytest.mark.parametrize("dt", FLOATS, ids=IDS)
def test_skip_extension_edge_values(dev, rng, dt):
    """NaN, infinities, -0, sums that overflow, cancel to +0 or round (FLOAT16: subnormal sums):
    the sum and the output equal the unfused sequence's bits (the sum's NaN payloads included)."""
    big = float(np.finfo(dt.numpy_dtype).max)
    row_x = np.array([np.nan, 1.0, np.inf, -np.inf, -0.0, 0.0, big, -big, 3.0, 1e-3, 2.0 ** -20, -5.0, 7.0, 0.5,
                      np.inf, 1.0], np.float64)
    row_k = np.array([1.0, np.nan, -np.inf, -np.inf, -0.0, -0.0, big, -big, -3.0, 1e-8, 2.0 ** -20, 5.0, -7.0,
                      np.nan, -np.inf, 2.0 ** -11], np.float64)
    x = np.stack([row_x, np.roll(row_x, 5), np.where(np.isfinite(row_x), row_x, 2.0),
                  np.where(np.isfinite(row_x), -row_x, 1.5)]).astype(dt.numpy_dtype)
    k = np.stack([row_k, np.roll(row_k, 3), np.where(np.isfinite(row_k), row_k, -2.0),
                  np.where(np.isfinite(row_k), row_k, 0.25)]).astype(dt.numpy_dtype)
    r = np.where(rng.random(16) < 0.5, -0.0, 2.0 ** -24).astype(dt.numpy_dtype).reshape(1, 16)
    for nan_payload_rows in (x, k):
        assert np.isnan(nan_payload_rows).any()
    run_skip(dev, rng, dt, x.shape, (1,), strided=False, x_values=x, k_values=k, r_values=r)
    run_skip(dev, rng, dt, x.shape, (1,), strided=True, x_values=x, k_values=k, r_values=r)


def test_skip_extension_float16_rounding(dev):
    """FLOAT16 sums are each rounded to float16 (x + skip first, then + skip bias): 1 + 2^-11 is
    a tie (to even: 1), then + 2^-11 again rounds to 1 again; in float32 once it would be
    1 + 2^-10."""
    x = np.full((1, 4), 1.0, np.float16)
    k = np.full((1, 4), 2.0 ** -11, np.float16)
    r = np.full(4, 2.0 ** -11, np.float16)
    _, s = kdml.skip_layer_norm(x, k, np.ones(4, np.float16), r, sum_out=True, device=dev)
    assert (s.numpy() == 1.0).all()


def _skip_desc(dt=DT.FLOAT32, xs=(2, 3, 8), ks=(2, 3, 8), rs=(1, 1, 8), zs=(2, 3, 8), kdt=None, rdt=None, zdt=None,
               zstr=None, k=True):
    td = TD(dt, xs)
    return kdml.MeanVarianceNormalization1Desc(
        td, None, None, TD(dt, xs), (2,), True, 1e-5, skip_tensor=TD(kdt or dt, ks) if k else None,
        skip_bias_tensor=TD(rdt or dt, rs) if rs else None, sum_output_tensor=TD(zdt or dt, zs, zstr) if zs else None)


@pytest.mark.parametrize(("desc", "err", "msg"), [
    (_skip_desc(kdt=DT.FLOAT16), kdml.InvalidArgumentError, "^skip_tensor.data_type: must equal input_tensor's"),
    (_skip_desc(rdt=DT.FLOAT16), kdml.InvalidArgumentError, "^skip_bias_tensor.data_type: must equal"),
    (_skip_desc(zdt=DT.FLOAT16), kdml.InvalidArgumentError, "^sum_output_tensor.data_type: must equal"),
    (_skip_desc(kdt=DT.INT32), kdml.UnsupportedError, "^skip_tensor: MEAN_VARIANCE_NORMALIZATION1 does not support "
                                                      "INT32"),
    (_skip_desc(ks=(2, 2, 8)), kdml.InvalidArgumentError, "^skip_tensor.sizes: each size must be 1 or input_tensor's"),
    (_skip_desc(ks=(3, 8)), kdml.InvalidArgumentError, "^skip_tensor.sizes: dimension count must equal"),
    (_skip_desc(rs=(1, 1, 4)), kdml.InvalidArgumentError, "^skip_bias_tensor.sizes: each size must be 1"),
    (_skip_desc(zs=(2, 3, 1)), kdml.InvalidArgumentError, "^sum_output_tensor.sizes: must equal input_tensor's"),
    (_skip_desc(zstr=(0, 8, 1)), kdml.InvalidArgumentError, "^sum_output_tensor.strides: an output may not broadcast"),
    (_skip_desc(k=False), kdml.InvalidArgumentError, "^skip_tensor: is required when skip_bias_tensor is present"),
    (_skip_desc(k=False, rs=None), kdml.InvalidArgumentError, "^skip_tensor: is required when sum_output_tensor"),
    (_skip_desc(ks=(2, 3, 8, 1, 1, 1, 1, 1, 1)), kdml.InvalidArgumentError, "^skip_tensor"),
], ids=range(12))
def test_skip_refusals(dev, desc, err, msg):
    with pytest.raises(err, match=msg):
        dev.compile(desc)


def test_skip_bindings(dev, rng):
    """The extension's tensors bind after DirectML's (inputs x, scale, bias, skip, skip bias;
    outputs y, sum); a descriptor without them keeps DirectML's binding lists; the sum output
    may overlap no input or the output."""
    d = TD(DT.FLOAT32, (4, 8))
    x, k = dev.tensor(rng.standard_normal((4, 8)).astype(np.float32)), dev.tensor(np.ones((4, 8), np.float32))
    op = dev.compile(kdml.MeanVarianceNormalization1Desc(d, None, None, d, (1,), True, 1e-5, skip_tensor=d,
                                                         sum_output_tensor=d))
    assert (op.input_fields, op.output_fields) == (("input_tensor", "scale_tensor", "bias_tensor", "skip_tensor",
                                                    "skip_bias_tensor"), ("output_tensor", "sum_output_tensor"))
    with pytest.raises(kdml.InvalidArgumentError, match="^inputs: MEAN_VARIANCE_NORMALIZATION1 takes 5"):
        op.execute([x, None, None], [dev.empty(d), dev.empty(d)])
    buf = dev.buffer(256)
    with pytest.raises(kdml.InvalidArgumentError, match="^sum_output_tensor: overlaps output_tensor"):
        op.execute([x, None, None, k, None], [kdml.Tensor(buf, d), kdml.Tensor(buf, d)])
    with pytest.raises(kdml.InvalidArgumentError, match="^sum_output_tensor: overlaps skip_tensor"):
        op.execute([x, None, None, k, None], [dev.empty(d), k])
    plain = dev.compile(kdml.MeanVarianceNormalization1Desc(d, None, None, d, (1,), True, 1e-5))
    assert (plain.input_fields, plain.output_fields) == (("input_tensor", "scale_tensor", "bias_tensor"),
                                                          ("output_tensor",))
    assert plain.variants == ["mvn_f32_row"]


@pytest.mark.parametrize("dt", FLOATS, ids=IDS)
def test_skip_layer_norm_helper_is_one_dispatch(dev, rng, dt, monkeypatch):
    """kdml.skip_layer_norm runs one operator (the skip extension), skip broadcast over leading
    dimensions, `sum_out` True or an out tensor; its errors name the helper's arguments."""
    from kompute_dml.ops.base import CompiledOperator

    npd = dt.numpy_dtype
    x = rng.standard_normal((2, 5, 48)).astype(npd)
    skip, g, be, b = (rng.standard_normal(s).astype(npd) for s in ((5, 48), 48, 48, 48))
    calls = []
    real = CompiledOperator.execute
    monkeypatch.setattr(CompiledOperator, "execute", lambda self, i, o, wait=True: (calls.append(self.support.name),
                                                                                   real(self, i, o, wait))[1])
    sum_t = dev.empty(TD(dt, x.shape, (480, 1, 10)))  # a strided sum output
    y, s = kdml.skip_layer_norm(x, skip, g, b, be, epsilon=1e-6, sum_out=sum_t, device=dev)
    assert s is sum_t and calls == ["MEAN_VARIANCE_NORMALIZATION1"]
    want_sum = _sum_ref(x, np.broadcast_to(skip, x.shape), b)
    _same_bits(s.numpy(), want_sum, "sum")
    _check(y, want_sum, g, be, (2,), eps=1e-6)
    with pytest.raises(kdml.InvalidArgumentError, match="^skip: sizes \\(4, 48\\) do not broadcast"):
        kdml.skip_layer_norm(x, np.ones((4, 48), npd), g, device=dev)
    with pytest.raises(kdml.InvalidArgumentError, match="^beta: sizes \\(47,\\) do not broadcast"):
        kdml.skip_layer_norm(x, skip, g, None, np.ones(47, npd), device=dev)
    with pytest.raises(kdml.InvalidArgumentError, match="^sum_out: sizes must be"):
        kdml.skip_layer_norm(x, skip, g, sum_out=dev.empty(TD(dt, (2, 5, 47))), device=dev)
