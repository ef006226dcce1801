"""Property-based differential tests (hypothesis) against independent numpy references.

Random data types, ranks, sizes, strides (broadcast on inputs, gaps, any dimension order),
TotalTensorSizeInBytes slack, base-offset alignments, binding offsets and operator
parameters; outputs are poisoned (every element starts different from what is expected)
and surrounded by guard bytes, and every byte outside the output must be unchanged.

Example counts come from the hypothesis profile (tests/conftest.py: "ci" = 40 per test;
`make fuzz` runs the "fuzz" profile). One session Device serves every example.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
from helpers import assert_output, element_byte_positions, place, poison_against, read_logical
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kompute_dml as kdml

DT = kdml.DataType
TD = kdml.TensorDesc
ALL_TYPES = list(DT)
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1

SETTINGS = settings(
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
    deadline=None,
)


# ---- strategies -------------------------------------------------------------------------------
def _shrink(sizes: list[int], max_elems: int) -> tuple[int, ...]:
    sizes = list(sizes)
    while math.prod(sizes) > max_elems:
        i = max(range(len(sizes)), key=lambda k: sizes[k])
        sizes[i] = max(1, sizes[i] // 2)
    return tuple(sizes)


@st.composite
def sizes_st(draw, min_rank: int, max_rank: int, max_elems: int = 1500) -> tuple[int, ...]:
    rank = draw(st.integers(min_rank, max_rank))
    if rank == 1 and draw(st.booleans()):
        return (draw(st.integers(1, 5000)),)  # long 1-D: the packed 16-byte path and its tails
    return _shrink(draw(st.lists(st.integers(1, 9), min_size=rank, max_size=rank)), max_elems)


@st.composite
def strides_st(draw, sizes: tuple[int, ...], *, broadcast: bool) -> tuple[int, ...] | None:
    """None (packed) or non-overlapping strides in a random dimension order with random gaps;
    on inputs, some dimensions broadcast (stride 0)."""
    kind = draw(st.sampled_from(["packed", "explicit-packed", "strided"]))
    if kind == "packed":
        return None
    rank = len(sizes)
    if kind == "explicit-packed":
        order = list(range(rank))
        gaps = [1] * rank
        zeros = [False] * rank
    else:
        order = draw(st.permutations(range(rank)))
        gaps = draw(st.lists(st.integers(1, 3), min_size=rank, max_size=rank))
        zeros = draw(st.lists(st.booleans(), min_size=rank, max_size=rank)) if broadcast else [False] * rank
    strides = [0] * rank
    acc = 1
    for d in reversed(order):  # innermost first
        if zeros[d]:
            continue
        strides[d] = acc * gaps[d]
        acc = strides[d] * sizes[d]
    return tuple(strides)


@st.composite
def desc_st(draw, dt: DT, sizes: tuple[int, ...], *, broadcast: bool) -> TD:
    strides = draw(strides_st(sizes, broadcast=broadcast))
    minimum = kdml.calc_buffer_tensor_size(dt, sizes, strides)
    total = minimum + 4 * draw(st.integers(0, 8)) if draw(st.booleans()) else None
    align = draw(st.sampled_from([0, 0, 16, 32, 64, 256]))
    if align and align < dt.size:
        align = 0
    return TD(dt, sizes, strides, total, align)


def _run(dev: kdml.Device, op, inputs, outputs, recorded: bool) -> None:
    if recorded:
        with dev.record() as rec:
            rec.execute(op, inputs, outputs)
    else:
        op.execute(inputs, outputs)


# ---- ACTIVATION_IDENTITY and COPY ----------------------------------------------------------------
@st.composite
def copy_case(draw, types: list[DT], min_rank: int = 1, max_rank: int = 8):
    dt = draw(st.sampled_from(types))
    sizes = draw(sizes_st(min_rank, max_rank))
    din = draw(desc_st(dt, sizes, broadcast=True))
    dout = draw(desc_st(dt, sizes, broadcast=False))
    return din, dout, draw(st.integers(0, 2**32 - 1)), draw(st.booleans())


def _check_copy(dev: kdml.Device, desc_cls, din: TD, dout: TD, seed: int, recorded: bool) -> None:
    rng = np.random.default_rng(seed)
    x, x_raw = place(dev, rng, din)  # random bytes: every bit pattern, NaN payloads included
    expected = read_logical(x_raw, x.offset, din)
    y, _ = place(dev, rng, dout)
    before = poison_against(y, expected, rng)
    _run(dev, dev.compile(desc_cls(din, dout)), [x], [y], recorded)
    assert_output(y, before, expected)
    assert x.buffer.read() == x_raw


@SETTINGS
@given(case=copy_case([DT.FLOAT32, DT.FLOAT16]))
def test_property_identity(dev, case):
    _check_copy(dev, kdml.ActivationIdentityDesc, *case)


@SETTINGS
@given(case=copy_case(ALL_TYPES))
def test_property_copy(dev, case):
    _check_copy(dev, kdml.CopyDesc, *case)


@SETTINGS
@given(
    dt=st.sampled_from(ALL_TYPES),
    sizes=sizes_st(1, 8),
    data=st.data(),
    seed=st.integers(0, 2**32 - 1),
)
def test_property_copy_in_place(dev, dt, sizes, data, seed):
    """Output == input binding (same buffer, offset, layout): DirectML allows it for identity."""
    desc = data.draw(desc_st(dt, sizes, broadcast=False))
    rng = np.random.default_rng(seed)
    x, raw = place(dev, rng, desc)
    expected = read_logical(raw, x.offset, desc)
    dev.compile(kdml.CopyDesc(desc, desc)).execute([x], [x])
    assert_output(x, raw, expected)


@SETTINGS
@given(case=copy_case(ALL_TYPES, max_rank=4), chain=st.integers(2, 5), seed=st.integers(0, 2**32 - 1))
def test_property_copy_chain_in_one_recording(dev, case, chain, seed):
    """x -> t1 -> t2 -> ... in one submission: each dispatch reads what the previous one wrote."""
    din, dout, _, _ = case
    rng = np.random.default_rng(seed)
    x, x_raw = place(dev, rng, din)
    expected = read_logical(x_raw, x.offset, din)
    outs = [place(dev, rng, dout)[0] for _ in range(chain)]
    befores = [poison_against(t, expected, rng) for t in outs]
    first = dev.compile(kdml.CopyDesc(din, dout))
    rest = dev.compile(kdml.CopyDesc(dout, dout))
    with dev.record() as rec:
        rec.execute(first, [x], [outs[0]])
        for a, b in itertools.pairwise(outs):
            rec.execute(rest, [a], [b])
    for t, before in zip(outs, befores):
        assert_output(t, before, expected)


# ---- DIAGONAL_MATRIX and DIAGONAL_MATRIX1 -----------------------------------------------------
def _diag_mask(sizes: tuple[int, ...], begin: int, end: int) -> np.ndarray:
    """DIAGONAL_MATRIX1's useValue (seed 002's pseudocode), broadcast over the batch."""
    rows, cols = sizes[-2], sizes[-1]
    top_x = np.arange(cols)[None, :] - np.arange(rows)[:, None]
    use = (end >= begin) ^ (top_x >= begin) ^ (top_x < end)
    return np.broadcast_to(use, sizes)


def _float_value_as(value: float, dt: DT) -> np.generic:
    """DIAGONAL_MATRIX's FLOAT Value converted to the output type (notes/directml.md: floats
    rounded, integers truncated; NaN -> 0, +-inf -> the type's limits, saturated)."""
    v32 = np.float32(value)
    if dt.is_float:
        with np.errstate(over="ignore"):
            return dt.numpy_dtype.type(v32)
    # Integers, computed another way than the library does: with numpy on float64
    # (exact for every float32), NaN first to 0, then clip (saturates +-inf too), then
    # truncate toward zero.
    info = np.iinfo(dt.numpy_dtype)
    f = np.nan_to_num(np.float64(v32), nan=0.0, posinf=np.inf, neginf=-np.inf)
    if f >= float(info.max):  # float(max) of a 64-bit type rounds up past max
        return dt.numpy_dtype.type(info.max)
    if f <= float(info.min):
        return dt.numpy_dtype.type(info.min)
    return dt.numpy_dtype.type(int(np.trunc(f)))


@st.composite
def diag_out_desc(draw) -> TD:
    dt = draw(st.sampled_from(ALL_TYPES))
    sizes = draw(sizes_st(2, 4, max_elems=2500))
    return draw(desc_st(dt, sizes, broadcast=False))


def _diag_offset(sizes: tuple[int, ...]):
    rows, cols = sizes[-2], sizes[-1]
    return st.one_of(st.integers(-rows - 2, cols + 2), st.sampled_from([INT32_MIN, INT32_MAX, INT32_MAX - 1, 0]))


@SETTINGS
@given(dout=diag_out_desc(), data=st.data(), seed=st.integers(0, 2**32 - 1), recorded=st.booleans())
def test_property_diagonal_matrix(dev, dout, data, seed, recorded):
    offset = data.draw(_diag_offset(dout.sizes), label="offset")
    value = data.draw(st.one_of(st.floats(width=32), st.integers(-(2**40), 2**40)), label="value")
    dt = dout.data_type
    v = _float_value_as(value, dt)
    mask = _diag_mask(dout.sizes, offset, offset + 1)
    expected = np.where(mask, v, dt.numpy_dtype.type(0)).astype(dt.numpy_dtype)
    rng = np.random.default_rng(seed)
    y, _ = place(dev, rng, dout)
    before = poison_against(y, expected, rng)
    _run(dev, dev.compile(kdml.DiagonalMatrixDesc(dout, offset, value)), [], [y], recorded)
    assert_output(y, before, expected)


def _value_st(dt: DT):
    if dt.is_float:
        return st.floats(width={DT.FLOAT16: 16, DT.FLOAT32: 32, DT.FLOAT64: 64}[dt])
    info = np.iinfo(dt.numpy_dtype)
    lo, hi = int(info.min), int(info.max)
    return st.one_of(st.integers(lo, hi), st.sampled_from([lo, hi, 0, 1]))


@SETTINGS
@given(dout=diag_out_desc(), data=st.data(), seed=st.integers(0, 2**32 - 1), recorded=st.booleans())
def test_property_diagonal_matrix1(dev, dout, data, seed, recorded):
    dt = dout.data_type
    sizes = dout.sizes
    has_input = data.draw(st.booleans(), label="has_input")
    din = data.draw(desc_st(dt, sizes, broadcast=True), label="input") if has_input else None
    value = data.draw(_value_st(dt), label="value")
    begin = data.draw(_diag_offset(sizes), label="begin")
    end = data.draw(_diag_offset(sizes), label="end")
    rng = np.random.default_rng(seed)
    if din is not None:
        x, x_raw = place(dev, rng, din)
        base = read_logical(x_raw, x.offset, din)
    else:
        x, x_raw, base = None, None, np.zeros(sizes, dt.numpy_dtype)
    mask = _diag_mask(sizes, begin, end)
    expected = np.where(mask, dt.numpy_dtype.type(value), base).astype(dt.numpy_dtype)
    y, _ = place(dev, rng, dout)
    before = poison_against(y, expected, rng)
    op = dev.compile(kdml.DiagonalMatrix1Desc(din, dout, dt, value, begin, end))
    _run(dev, op, [x], [y], recorded)
    assert_output(y, before, expected)
    if x is not None:
        assert x.buffer.read() == x_raw


# ---- MATRIX_MULTIPLY_INTEGER_TO_FLOAT ----------------------------------------------------------
INT_TYPES = {1: (DT.INT8, DT.UINT8), 2: (DT.INT16, DT.UINT16), 4: (DT.INT32, DT.UINT32)}


@st.composite
def mmi_case(draw):
    out_dt = draw(st.sampled_from([DT.FLOAT32, DT.FLOAT16]))
    width = draw(st.sampled_from([1, 2] if out_dt == DT.FLOAT16 else [1, 2, 4]))
    a_dt = draw(st.sampled_from(INT_TYPES[width]))
    b_dt = draw(st.sampled_from(INT_TYPES[width]))  # signedness may differ (API.md)
    rank = draw(st.integers(2, 4))
    batch = tuple(draw(st.lists(st.integers(1, 3), min_size=rank - 2, max_size=rank - 2)))
    m, k, n = draw(st.integers(1, 13)), draw(st.integers(1, 40)), draw(st.integers(1, 13))
    a = draw(desc_st(a_dt, (*batch, m, k), broadcast=True), label="a")
    b = draw(desc_st(b_dt, (*batch, k, n), broadcast=True), label="b")
    out = draw(desc_st(out_dt, (*batch, m, n), broadcast=False), label="out")
    qrank = draw(st.sampled_from([1, rank]))

    def quant(dt: DT, per: str, count: int, optional: bool):
        if optional and not draw(st.booleans()):
            return None, None
        mode = draw(st.sampled_from(["tensor", per]))
        if mode == "tensor":
            sizes = (1,) * qrank
        elif qrank == 1:
            sizes = (count,)
        else:
            sizes = (1,) * (qrank - 2) + ((count, 1) if per == "row" else (1, count))
        return draw(desc_st(dt, sizes, broadcast=False)), mode

    a_scale = quant(out_dt, "row", m, False)
    a_zp = quant(a_dt, "row", m, True)
    b_scale = quant(out_dt, "col", n, False)
    b_zp = quant(b_dt, "col", n, True)
    bias = draw(desc_st(out_dt, out.sizes, broadcast=True), label="bias") if draw(st.booleans()) else None
    return a, a_scale, a_zp, b, b_scale, b_zp, bias, out


def _q2d(values: np.ndarray, mode: str | None, count: int) -> np.ndarray:
    """A scale / zero point as a (count, 1) column (per row), (1, count) row (per column), (1, 1)."""
    if mode is None:
        return np.zeros((1, 1))
    flat = values.reshape(-1).astype(np.float64)
    if mode == "tensor":
        return flat.reshape(1, 1)
    return flat.reshape(count, 1) if mode == "row" else flat.reshape(1, count)


@SETTINGS
@given(case=mmi_case(), seed=st.integers(0, 2**32 - 1), recorded=st.booleans())
def test_property_matmul_integer_to_float(dev, case, seed, recorded):
    a_d, (as_d, as_mode), (az_d, az_mode), b_d, (bs_d, bs_mode), (bz_d, bz_mode), bias_d, out_d = case
    rng = np.random.default_rng(seed)
    m = a_d.sizes[-2]
    n = b_d.sizes[-1]
    out_dt = out_d.data_type
    x_a, raw_a = place(dev, rng, a_d)  # integers: random bytes cover the whole range
    x_b, raw_b = place(dev, rng, b_d)
    a = read_logical(raw_a, x_a.offset, a_d).astype(np.float64)
    b = read_logical(raw_b, x_b.offset, b_d).astype(np.float64)
    zps = []
    for d in (az_d, bz_d):
        if d is None:
            zps.append((None, None))
        else:
            t, raw = place(dev, rng, d)
            zps.append((t, read_logical(raw, t.offset, d)))
    azp = _q2d(zps[0][1], az_mode, m) if az_d is not None else np.zeros((1, 1))
    bzp = _q2d(zps[1][1], bz_mode, n) if bz_d is not None else np.zeros((1, 1))
    a1 = a - azp
    b1 = b - bzp
    # scales chosen so the result stays well inside the output type's range
    unit_mag = np.abs(a1) @ np.abs(b1)
    limit = 1e3 if out_dt == DT.FLOAT16 else 1e30
    s = math.sqrt(limit / max(1.0, float(unit_mag.max())))
    scale_vals = []
    for d in (as_d, bs_d):
        v = (rng.uniform(0.5, 1.0, d.sizes) * rng.choice([-1, 1], d.sizes) * s).astype(out_dt.numpy_dtype)
        t, raw = place(dev, rng, d, v)
        scale_vals.append((t, read_logical(raw, t.offset, d)))
    asc = _q2d(scale_vals[0][1], as_mode, m)
    bsc = _q2d(scale_vals[1][1], bs_mode, n)
    if bias_d is not None:
        bias_v = (rng.standard_normal(bias_d.sizes) * 4).astype(out_dt.numpy_dtype)
        x_bias, raw_bias = place(dev, rng, bias_d, bias_v)
        bias = read_logical(raw_bias, x_bias.offset, bias_d).astype(np.float64)
    else:
        x_bias, bias = None, np.zeros((1, 1))
    ref = (a1 * asc) @ (b1 * bsc) + bias
    mag = np.abs(a1 * asc) @ np.abs(b1 * bsc) + np.abs(bias)
    y, _ = place(dev, rng, out_d)
    expected = np.broadcast_to(ref, out_d.sizes).astype(out_dt.numpy_dtype)
    before = poison_against(y, expected, rng)
    inputs_before = [t.buffer.read() for t in (x_a, x_b, scale_vals[0][0], scale_vals[1][0]) if t is not None]
    op = dev.compile(kdml.MatrixMultiplyIntegerToFloatDesc(a_d, as_d, az_d, b_d, bs_d, bz_d, bias_d, out_d))
    _run(dev, op, [x_a, scale_vals[0][0], zps[0][0], x_b, scale_vals[1][0], zps[1][0], x_bias], [y], recorded)
    # every byte outside the output unchanged
    after = np.frombuffer(y.buffer.read(), np.uint8)
    mask = np.ones(after.size, bool)
    mask[element_byte_positions(y.offset, out_d)] = False
    assert (after[mask] == np.frombuffer(before, np.uint8)[mask]).all(), "bytes outside the output changed"
    got = read_logical(after, y.offset, out_d).astype(np.float64)
    ref = np.broadcast_to(ref, out_d.sizes)
    mag = np.broadcast_to(mag, out_d.sizes)
    if out_dt == DT.FLOAT16:
        tol = 1e-3 * mag + np.abs(ref) * 2.0**-11 + 2.0**-24
    else:
        tol = 1e-4 * mag + 1e-37
    bad = np.argwhere(~(np.abs(got - ref) <= tol))
    assert bad.size == 0, (
        f"{len(bad)} of {got.size} out of tolerance, first at {bad[:3].tolist()}: got {got[tuple(bad[0])]!r}, "
        f"want {ref[tuple(bad[0])]!r}"
    )
    assert inputs_before == [t.buffer.read() for t in (x_a, x_b, scale_vals[0][0], scale_vals[1][0]) if t is not None]
