"""The element-wise operators (ops/elementwise.py) against independent references
(tests/elementwise_reference.py): every supported data type, 1-8 dimensions, strided and
broadcast (stride 0) layouts, random offsets with guard bytes, poisoned outputs whose every
other byte must stay unchanged, edge values, the host-enumerated dimensions beyond the
shader's rank, in-place execution, recordings and refused descriptors."""

from __future__ import annotations

import numpy as np
import pytest
from elementwise_reference import arith_ref, check_float, compare_ref
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
from kompute_dml.core.dtypes import HIGHEST_FEATURE_LEVEL
from kompute_dml.ops import BY_NAME
from kompute_dml.ops import elementwise as elementwise_ops

DT = kdml.DataType
FL = kdml.FeatureLevel
TD = kdml.TensorDesc
ARITH = {"add": kdml.ElementWiseAddDesc, "add1": kdml.ElementWiseAdd1Desc, "sub": kdml.ElementWiseSubtractDesc,
         "mul": kdml.ElementWiseMultiplyDesc, "div": kdml.ElementWiseDivideDesc}
COMPARE = {"eq": kdml.ElementWiseLogicalEqualsDesc, "ge": kdml.ElementWiseLogicalGreaterThanOrEqualDesc}


def types_of(desc_cls, field: str = "a_tensor") -> list[DT]:
    spec = next(s for s in BY_NAME.values() if s.desc_type is desc_cls)
    return sorted(spec.support.require(HIGHEST_FEATURE_LEVEL).tensor(field).types, key=lambda d: d.value)


ARITH_CASES = [(op, dt) for op, cls in ARITH.items() for dt in types_of(cls)]
COMPARE_CASES = [(op, dt, o) for op, cls in COMPARE.items() for dt in types_of(cls) for o in (DT.UINT8, DT.UINT32)]


def random_sizes(rng, rank: int, max_elems: int = 600) -> tuple[int, ...]:
    sizes = [int(rng.integers(1, 7)) for _ in range(rank)]
    while np.prod(sizes) > max_elems:
        sizes[int(np.argmax(sizes))] //= 2
    return tuple(max(1, s) for s in sizes)


def layout(rng, sizes, *, is_input: bool):
    kind = rng.integers(0, 3)
    if kind == 0:
        return None
    return random_strides(rng, sizes, allow_broadcast=is_input and kind == 2)


def run(dev, rng, make, in_dts, out_dt, sizes, ref, *, values=None, strides=None, check=None):
    """Place inputs (random layouts, or `strides`), poison the output against `ref(*inputs)`,
    execute, check every byte outside the output and the inputs; returns (got, inputs, op)."""
    in_descs = [TD(dt, sizes, strides[i] if strides else layout(rng, sizes, is_input=True)) for i, dt in enumerate(in_dts)]
    out_desc = TD(out_dt, sizes, strides[-1] if strides else layout(rng, sizes, is_input=False))
    tensors, inputs, raws = [], [], []
    for i, d in enumerate(in_descs):
        v = values[i] if values is not None else random_values(rng, d.data_type, sizes)
        t, raw = place(dev, rng, d, v)
        tensors.append(t)
        raws.append(raw)
        inputs.append(read_logical(raw, t.offset, d))
    y, _ = place(dev, rng, out_desc)
    expected = ref(*inputs)
    before = poison_against(y, expected, rng)
    op = dev.compile(make(*in_descs, out_desc))
    op.execute(tensors, [y])
    if check is None:
        assert_output(y, before, expected)
    got = read_logical(assert_outside_unchanged(y, before), y.offset, out_desc)
    if check is not None:
        check(got, *inputs)
    for t, raw in zip(tensors, raws):
        assert t.buffer.read() == raw
    return got, inputs, op


def _arith_check(op: str, dt: DT):
    """The float comparison (documented allowances), or None: bitwise equality."""
    name = "add" if op == "add1" else op
    return (lambda got, a, b: check_float(name, got, a, b, dt)) if dt.is_float else None


@pytest.mark.parametrize(("op", "dt"), ARITH_CASES, ids=[f"{o}-{d.name}" for o, d in ARITH_CASES])
def test_arithmetic(dev, rng, op, dt):
    name = "add" if op == "add1" else op
    check = _arith_check(op, dt)
    for rank in range(1, 9):
        sizes = random_sizes(rng, rank)
        run(dev, rng, ARITH[op], (dt, dt), dt, sizes, lambda a, b: arith_ref(name, a, b, dt), check=check)


@pytest.mark.parametrize(("op", "dt", "out"), COMPARE_CASES, ids=[f"{o}-{d.name}-{x.name}" for o, d, x in COMPARE_CASES])
def test_comparison(dev, rng, op, dt, out):
    for rank in range(1, 9):
        sizes = random_sizes(rng, rank)
        values = None
        if rng.random() < 0.5:  # many equal pairs
            a = random_values(rng, dt, sizes)
            values = (a, np.where(rng.random(sizes) < 0.5, a, random_values(rng, dt, sizes)).astype(a.dtype))
        run(dev, rng, COMPARE[op], (dt, dt), out, sizes, lambda a, b: compare_ref(op, a, b, out), values=values)


@pytest.mark.parametrize("dt", [DT.UINT8, DT.UINT32], ids=lambda d: d.name)
def test_logical_and(dev, rng, dt):
    for rank in range(1, 9):
        sizes = random_sizes(rng, rank)
        vals = [np.where(rng.random(sizes) < 0.5, 0, random_values(rng, dt, sizes)).astype(dt.numpy_dtype) for _ in "ab"]
        run(dev, rng, kdml.ElementWiseLogicalAndDesc, (dt, dt), dt, sizes, lambda a, b: compare_ref("and", a, b, dt),
            values=vals)


@pytest.mark.parametrize("out", [DT.UINT8, DT.UINT32], ids=lambda d: d.name)
@pytest.mark.parametrize("dt", [DT.FLOAT32, DT.FLOAT16], ids=lambda d: d.name)
def test_is_nan(dev, rng, dt, out):
    for rank in range(1, 9):
        sizes = random_sizes(rng, rank)
        # random bit patterns: every NaN payload, both signs, signalling and quiet
        bits = rng.integers(0, 1 << (8 * dt.size), size=sizes, dtype=np.uint64).astype(f"u{dt.size}")
        run(dev, rng, kdml.ElementWiseIsNanDesc, (dt,), out, sizes, lambda x: np.isnan(x).astype(out.numpy_dtype),
            values=[bits.view(dt.numpy_dtype)])


@pytest.mark.parametrize("dt", list(DT), ids=lambda d: d.name)
def test_if(dev, rng, dt):
    for rank in range(1, 9):
        sizes = random_sizes(rng, rank)
        cond = np.where(rng.random(sizes) < 0.5, 0, rng.integers(1, 256, sizes)).astype(np.uint8)
        raw = [rng.integers(0, 256, (*sizes, dt.size), dtype=np.uint8).view(dt.numpy_dtype).reshape(sizes) for _ in "ab"]
        run(dev, rng, kdml.ElementWiseIfDesc, (DT.UINT8, dt, dt), dt, sizes, lambda c, a, b: np.where(c != 0, a, b),
            values=[cond, *raw])


# ---- edge values, every pair: A broadcast along columns, B along rows ------------------------
F_EDGES = [0.0, -0.0, 1.0, -1.0, 0.5, 3.0, np.inf, -np.inf, np.nan, -np.nan]


def _float_edges(dt: DT) -> np.ndarray:
    info = np.finfo(dt.numpy_dtype)
    extra = [info.max, -info.max, info.tiny, -info.tiny, info.smallest_subnormal, -info.smallest_subnormal,
             info.eps, 1 + info.eps, float(info.max) / 2]
    return np.array(F_EDGES + extra, dtype=np.float64).astype(dt.numpy_dtype)


def _int_edges(dt: DT) -> np.ndarray:
    info = np.iinfo(dt.numpy_dtype)
    vals = {info.min, info.min + 1, info.max, info.max - 1, 0, 1, 2, 3, 7}
    if dt.is_signed:
        vals |= {-1, -2, -3, -7}
    return np.array(sorted(vals), dtype=dt.numpy_dtype)


def edge_grid(dt: DT) -> tuple[np.ndarray, tuple[tuple[int, int], ...]]:
    e = _float_edges(dt) if dt.is_float else _int_edges(dt)
    return e, ((1, 0), (0, 1), None)  # A[i, j] = e[i], B[i, j] = e[j]


@pytest.mark.parametrize(("op", "dt"), ARITH_CASES, ids=[f"{o}-{d.name}" for o, d in ARITH_CASES])
def test_arithmetic_edge_values(dev, rng, op, dt):
    e, strides = edge_grid(dt)
    n = len(e)
    name = "add" if op == "add1" else op
    check = _arith_check(op, dt)
    got, _, _ = run(dev, rng, ARITH[op], (dt, dt), dt, (n, n), lambda a, b: arith_ref(name, a, b, dt),
                    values=[e[:, None], e[None, :]], strides=strides, check=check)
    if op == "div" and not dt.is_float:  # the stated choices, spelled out
        info = np.iinfo(dt.numpy_dtype)
        zero = int(np.nonzero(e == 0)[0][0])
        assert (got[:, zero] == (-1 if dt.is_signed else info.max)).all()  # x / 0: every bit set
        if dt.is_signed:
            i_min, i_m1 = int(np.nonzero(e == info.min)[0][0]), int(np.nonzero(e == -1)[0][0])
            assert got[i_min, i_m1] == info.min  # INT_MIN / -1 wraps
            i7, i2 = int(np.nonzero(e == -7)[0][0]), int(np.nonzero(e == 2)[0][0])
            assert got[i7, i2] == -3  # truncation toward zero


@pytest.mark.parametrize(("op", "dt", "out"), [c for c in COMPARE_CASES if c[2] == DT.UINT8],
                         ids=[f"{o}-{d.name}" for o, d, x in COMPARE_CASES if x == DT.UINT8])
def test_comparison_edge_values(dev, rng, op, dt, out):
    e, strides = edge_grid(dt)
    got, _, _ = run(dev, rng, COMPARE[op], (dt, dt), out, (len(e), len(e)), lambda a, b: compare_ref(op, a, b, out),
                    values=[e[:, None], e[None, :]], strides=strides)
    if dt.is_float:
        nan = np.isnan(e)
        assert not got[nan, :].any() and not got[:, nan].any()
        z, nz = int(np.nonzero((e == 0) & ~np.signbit(e))[0][0]), int(np.nonzero((e == 0) & np.signbit(e))[0][0])
        assert got[z, nz] == 1 and got[nz, z] == 1  # -0 == +0, and -0 >= +0


# ---- more dimensions than the shader walks: the host enumerates the smallest ----------------
@pytest.mark.parametrize("dt", [DT.FLOAT32, DT.UINT8, DT.INT64], ids=lambda d: d.name)
def test_unmergeable_rank_8(dev, rng, dt):
    sizes = (2, 3, 2, 3, 2, 3, 2, 2)
    gap: list[int] = []
    acc = 1
    for s in sizes[::-1]:  # packed with a gap after every dimension: nothing merges
        gap.insert(0, acc)
        acc *= 2 * s
    strides = (tuple(gap), tuple(g * 3 for g in gap), tuple(gap))
    _, _, op = run(dev, rng, kdml.ElementWiseMultiplyDesc, (dt, dt), dt, sizes,
                   lambda a, b: arith_ref("mul", a, b, dt), strides=strides,
                   check=(lambda got, a, b: check_float("mul", got, a, b, dt)) if dt.is_float else None)
    assert len(op.plans) == 4  # the two smallest dimensions (2 x 2) are the host's
    cond_strides = (tuple(gap), tuple(gap), (0,) * 8, tuple(gap))
    _, _, op = run(dev, rng, kdml.ElementWiseIfDesc, (DT.UINT8, dt, dt), dt, sizes,
                   lambda c, a, b: np.where(c != 0, a, b), strides=cond_strides)
    assert len(op.plans) == 16  # IF walks 4: the host takes four dimensions of 2


def test_large_2d_grid(dev, rng):
    """More work groups than one grid dimension holds on lavapipe (65535): folded into y."""
    n = 65535 * 256 + 300
    a = rng.integers(-(2**31), 2**31, n, dtype=np.int32)
    b = rng.integers(-(2**31), 2**31, n, dtype=np.int32)
    got = kdml.add(a, b, device=dev).numpy()
    assert np.array_equal(got, (a.astype(np.int64) + b).astype(np.int32))


# ---- in place, recordings ------------------------------------------------------------------
@pytest.mark.parametrize(("dt", "strides"), [(DT.FLOAT32, None), (DT.UINT8, None), (DT.UINT8, (21, 2)),
                                             (DT.INT16, (1, 9)), (DT.UINT64, None)], ids=str)
def test_in_place(dev, rng, dt, strides):
    desc = TD(dt, (5, 7), strides)
    x, raw = place(dev, rng, desc, random_values(rng, dt, (5, 7)))
    b, braw = place(dev, rng, TD(dt, (5, 7), (0, 1)), random_values(rng, dt, (1, 7)))
    xa, ba = read_logical(raw, x.offset, desc), read_logical(braw, b.offset, b.desc)
    op = dev.compile(kdml.ElementWiseSubtractDesc(desc, b.desc, desc))
    op.execute([x, b], [x])  # OutputTensor aliases ATensor
    got = read_logical(assert_outside_unchanged(x, raw), x.offset, desc)
    if dt.is_float:
        check_float("sub", got, xa, ba, dt)
    else:
        assert np.array_equal(got, arith_ref("sub", xa, ba, dt))


def test_comparison_may_not_alias(dev, rng):
    desc = TD(DT.UINT32, (4, 4))
    x, _ = place(dev, rng, desc)
    op = dev.compile(kdml.ElementWiseLogicalEqualsDesc(desc, desc, desc))
    with pytest.raises(kdml.InvalidArgumentError, match="^output_tensor: overlaps a_tensor"):
        op.execute([x, x], [x])


def test_recording_sees_earlier_writes(dev, rng):
    d = TD(DT.INT32, (64,))
    a = dev.tensor(rng.integers(-1000, 1000, 64, dtype=np.int32))
    b = dev.tensor(rng.integers(-1000, 1000, 64, dtype=np.int32))
    c, e = dev.empty(d), dev.empty(d)
    add = dev.compile(kdml.ElementWiseAddDesc(d, d, d))
    mul = dev.compile(kdml.ElementWiseMultiplyDesc(d, d, d))
    with dev.record() as rec:
        rec.execute(add, [a, b], [c])
        rec.execute(mul, [c, b], [e])
    an, bn = a.numpy().astype(np.int64), b.numpy().astype(np.int64)
    assert np.array_equal(e.numpy(), ((an + bn) * bn).astype(np.int32))


# ---- refused descriptors --------------------------------------------------------------------
F4 = TD(DT.FLOAT32, (2, 3, 4, 5))
BAD = [
    (kdml.ElementWiseAddDesc(F4, TD(DT.FLOAT16, F4.sizes), F4), kdml.InvalidArgumentError,
     r"^b_tensor\.data_type: must equal a_tensor's \(FLOAT32\)"),
    (kdml.ElementWiseSubtractDesc(F4, F4, TD(DT.FLOAT32, (2, 3, 4, 6))), kdml.InvalidArgumentError,
     r"^output_tensor\.sizes: must equal a_tensor's"),
    (kdml.ElementWiseMultiplyDesc(F4, TD(DT.FLOAT32, (6, 4, 5)), F4), kdml.InvalidArgumentError,
     r"^b_tensor\.sizes: dimension count must equal a_tensor's \(4\)"),
    (kdml.ElementWiseDivideDesc(F4, F4, TD(DT.FLOAT32, F4.sizes, (0, 20, 5, 1))), kdml.InvalidArgumentError,
     r"^output_tensor\.strides: an output may not broadcast"),
    (kdml.ElementWiseAdd1Desc(F4, F4, F4, fused_activation=kdml.ActivationIdentityDesc(F4, F4)), kdml.InvalidArgumentError,
     r"^fused_activation: a fused activation's tensors must be None"),
    (kdml.ElementWiseAdd1Desc(F4, F4, F4, fused_activation=kdml.ActivationLogSoftmaxDesc(None, None)), kdml.UnsupportedError,
     r"^fused_activation: ELEMENT_WISE_ADD1 fuses ACTIVATION_RELU, ACTIVATION_IDENTITY"),
    (kdml.ElementWiseAdd1Desc(*[TD(DT.INT32, F4.sizes)] * 3), kdml.UnsupportedError,
     r"^a_tensor: ELEMENT_WISE_ADD1 does not support INT32"),
    (kdml.ElementWiseLogicalEqualsDesc(F4, TD(DT.FLOAT16, F4.sizes), TD(DT.UINT8, F4.sizes)), kdml.InvalidArgumentError,
     r"^b_tensor\.data_type: must equal a_tensor's"),
    (kdml.ElementWiseLogicalEqualsDesc(F4, F4, F4), kdml.UnsupportedError,
     r"^output_tensor: ELEMENT_WISE_LOGICAL_EQUALS does not support FLOAT32"),
    (kdml.ElementWiseIfDesc(TD(DT.INT8, F4.sizes), F4, F4, F4), kdml.UnsupportedError,
     r"^condition_tensor: ELEMENT_WISE_IF does not support INT8"),
    (kdml.ElementWiseIfDesc(TD(DT.UINT8, (2, 3, 4, 1)), F4, F4, F4), kdml.InvalidArgumentError,
     r"^condition_tensor\.sizes: must equal a_tensor's"),
    (kdml.ElementWiseIsNanDesc(TD(DT.INT32, F4.sizes), TD(DT.UINT8, F4.sizes)), kdml.UnsupportedError,
     r"^input_tensor: ELEMENT_WISE_IS_NAN does not support INT32"),
    (kdml.ElementWiseAddDesc(*[TD(DT.FLOAT64, F4.sizes)] * 3), kdml.UnsupportedError,
     r"^a_tensor: ELEMENT_WISE_ADD does not support FLOAT64"),
]


@pytest.mark.parametrize(("desc", "error", "match"), BAD, ids=[m[1:40] for _, _, m in BAD])
def test_refused(dev, desc, error, match):
    with pytest.raises(error, match=match):
        dev.compile(desc)


@pytest.mark.parametrize(("level", "dt", "ok"), [(FL.FL_4_1, DT.INT8, False), (FL.FL_5_1, DT.INT8, True),
                                                 (FL.FL_3_0, DT.INT64, False), (FL.FL_4_1, DT.INT64, True)], ids=str)
def test_types_by_feature_level(level, dt, ok):
    d = kdml.Device(feature_level=level)
    try:
        desc = kdml.ElementWiseAddDesc(*[TD(dt, (2, 3))] * 3)
        if ok:
            d.compile(desc)
        else:
            with pytest.raises(kdml.UnsupportedError, match=f"^a_tensor: ELEMENT_WISE_ADD does not support {dt.name} "
                                                            f"at feature level {level.label}"):
                d.compile(desc)
        # DIVIDE: 8-bit integers from 5_1, 64-bit from 6_0
        div_ok = level >= FL.FL_6_0 or (dt.size < 8 and level >= FL.FL_5_1)
        if not div_ok:
            with pytest.raises(kdml.UnsupportedError):
                d.compile(kdml.ElementWiseDivideDesc(*[TD(dt, (2, 3))] * 3))
    finally:
        d.close()


def test_four_dimensions_only_at_level_1(rng):
    d = kdml.Device(feature_level=FL.FL_2_1)
    try:
        with pytest.raises(kdml.UnsupportedError, match="^a_tensor: ELEMENT_WISE_SUBTRACT supports 4 dimensions"):
            d.compile(kdml.ElementWiseSubtractDesc(*[TD(DT.FLOAT32, (2, 3, 4, 5, 6))] * 3))
        op = d.compile(kdml.ElementWiseMultiplyDesc(*[TD(DT.INT32, (1, 2, 3, 4, 5))] * 3))
        assert op.plans
    finally:
        d.close()


def test_bad_binding_writes_nothing(dev, rng):
    d = TD(DT.UINT16, (3, 5))
    op = dev.compile(kdml.ElementWiseAddDesc(d, d, d))
    a, _ = place(dev, rng, d)
    other, _ = place(dev, rng, TD(DT.UINT16, (5, 3)))
    y, before = place(dev, rng, d)
    with pytest.raises(kdml.InvalidArgumentError, match="^b_tensor: bound tensor"):
        op.execute([a, other], [y])
    assert y.buffer.read() == before


def test_every_variant_compiles_a_plan(dev):
    """Every supported (operator, input type, output type) compiles to a variant of its families."""
    for spec in elementwise_ops.SPECS:  # ops/elementwise.py's own (DEQUANTIZE_LINEAR has its tests)
        row = spec.support.require(HIGHEST_FEATURE_LEVEL)
        in_types = row.tensor(spec.inputs[-1]).types
        own_out = spec.name in ("ELEMENT_WISE_LOGICAL_EQUALS", "ELEMENT_WISE_LOGICAL_GREATER_THAN_OR_EQUAL",
                                "ELEMENT_WISE_IS_NAN")
        for dt in in_types:
            for out in (row.tensor("output_tensor").types if own_out else (dt,)):
                fields = [TD(DT.UINT8, (3,)) if f == "condition_tensor" else TD(dt, (3,)) for f in spec.inputs]
                assert dev.compile(spec.desc_type(*fields, TD(out, (3,)))).plans
