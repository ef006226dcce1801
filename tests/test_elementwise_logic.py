"""ELEMENT_WISE_LOGICAL_GREATER_THAN / LESS_THAN / LESS_THAN_OR_EQUAL / NOT / OR / XOR
(ops/elementwise_logic.py) against numpy's own comparisons and logic: every supported type, 1-8
dimensions, strided and broadcast layouts, random offsets with guard bytes, poisoned outputs whose
every other byte must stay unchanged, every pair of edge values (NaN false, -0 == +0, integer
extremes), in-place logic, the helpers and refused descriptors."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_outside_unchanged, compile_at_level, place, random_values, read_logical
from test_elementwise import edge_grid, random_sizes, run, types_of

import kompute_dml as kdml
from kompute_dml.core.dtypes import HIGHEST_FEATURE_LEVEL
from kompute_dml.ops import elementwise_logic

DT = kdml.DataType
FL = kdml.FeatureLevel
TD = kdml.TensorDesc
COMPARE = {"gt": (kdml.ElementWiseLogicalGreaterThanDesc, np.greater),
           "lt": (kdml.ElementWiseLogicalLessThanDesc, np.less),
           "le": (kdml.ElementWiseLogicalLessThanOrEqualDesc, np.less_equal)}
LOGIC = {"or": (kdml.ElementWiseLogicalOrDesc, np.logical_or), "xor": (kdml.ElementWiseLogicalXorDesc, np.logical_xor)}
CASES = [(op, dt) for op, (cls, _) in COMPARE.items() for dt in types_of(cls)]


def _cmp_ref(fn, out: DT):
    return lambda a, b: fn(a, b).astype(out.numpy_dtype)  # numpy's IEEE comparisons: NaN false, -0 == +0


@pytest.mark.parametrize(("op", "dt"), CASES, ids=[f"{o}-{d.name}" for o, d in CASES])
def test_comparison(dev, rng, op, dt):
    cls, fn = COMPARE[op]
    for rank in (1, 2, 3, 5, 8):
        out = DT.UINT8 if rank % 2 else DT.UINT32
        sizes = random_sizes(rng, rank)
        a = random_values(rng, dt, sizes)
        b = np.where(rng.random(sizes) < 0.4, a, random_values(rng, dt, sizes)).astype(a.dtype)  # many ties
        run(dev, rng, cls, (dt, dt), out, sizes, _cmp_ref(fn, out), values=(a, b))


@pytest.mark.parametrize(("op", "dt"), [(o, d) for o in COMPARE for d in (DT.FLOAT32, DT.FLOAT16, DT.INT8, DT.UINT16,
                                                                         DT.INT32, DT.UINT32, DT.INT64, DT.UINT64)],
                         ids=str)
def test_comparison_edge_values(dev, rng, op, dt):
    cls, fn = COMPARE[op]
    e, strides = edge_grid(dt)
    got, _, _ = run(dev, rng, cls, (dt, dt), DT.UINT8, (len(e), len(e)), _cmp_ref(fn, DT.UINT8),
                    values=[e[:, None], e[None, :]], strides=strides)
    if dt.is_float:
        nan = np.isnan(e)
        assert not got[nan, :].any() and not got[:, nan].any()
        z, nz = int(np.nonzero((e == 0) & ~np.signbit(e))[0][0]), int(np.nonzero((e == 0) & np.signbit(e))[0][0])
        assert got[z, nz] == (op == "le") and got[nz, z] == (op == "le")  # -0 == +0


@pytest.mark.parametrize("op", ["or", "xor", "not"])
@pytest.mark.parametrize("dt", [DT.UINT8, DT.UINT32], ids=lambda d: d.name)
def test_logic(dev, rng, op, dt):
    for rank in (1, 2, 4, 6, 8):
        sizes = random_sizes(rng, rank)
        vals = [np.where(rng.random(sizes) < 0.5, 0, random_values(rng, dt, sizes)).astype(dt.numpy_dtype) for _ in "ab"]
        if op == "not":
            run(dev, rng, kdml.ElementWiseLogicalNotDesc, (dt,), dt, sizes, lambda x: (x == 0).astype(dt.numpy_dtype),
                values=vals[:1])
        else:
            cls, fn = LOGIC[op]
            run(dev, rng, cls, (dt, dt), dt, sizes, lambda a, b, fn=fn: fn(a != 0, b != 0).astype(dt.numpy_dtype),
                values=vals)


@pytest.mark.parametrize(("op", "strides"), [("not", None), ("or", (13, 2)), ("xor", None)], ids=str)
def test_logic_in_place(dev, rng, op, strides):
    dt = DT.UINT8
    desc = TD(dt, (5, 6), strides)
    v = np.where(rng.random((5, 6)) < 0.5, 0, rng.integers(1, 256, (5, 6))).astype(np.uint8)
    x, raw = place(dev, rng, desc, v)
    xa = read_logical(raw, x.offset, desc)
    if op == "not":
        dev.compile(kdml.ElementWiseLogicalNotDesc(desc, desc)).execute([x], [x])
        want = xa == 0
    else:
        b = dev.tensor(np.array([0, 1, 0, 7, 0, 255], np.uint8))
        bd = TD(dt, (5, 6), (0, 1))
        cls, fn = LOGIC[op]
        dev.compile(cls(desc, bd, desc)).execute([x, kdml.Tensor(b.buffer, bd, b.offset)], [x])
        want = fn(xa != 0, np.array([0, 1, 0, 7, 0, 255])[None, :] != 0)
    got = read_logical(assert_outside_unchanged(x, raw), x.offset, desc)
    assert np.array_equal(got, want.astype(np.uint8))


def test_helpers(dev, rng):
    a = rng.standard_normal((4, 5)).astype(np.float32)
    b = np.array([0.0, np.nan, -0.0, 1.0, -1.0], np.float32)
    for helper, fn in ((kdml.greater, np.greater), (kdml.less, np.less), (kdml.less_equal, np.less_equal)):
        got = helper(a, b, device=dev)
        assert got.desc.data_type == DT.UINT8 and np.array_equal(got.numpy(), fn(a, b))
        assert np.array_equal(helper(a, b, data_type=DT.UINT32, device=dev).numpy(), fn(a, b))
    m, n = a > 0, b > 0
    assert np.array_equal(kdml.logical_not(m, device=dev).numpy(), ~m)
    assert np.array_equal(kdml.logical_or(m, n, device=dev).numpy(), m | n)
    assert np.array_equal(kdml.logical_xor(m, n, device=dev).numpy(), m ^ n)
    ints = np.array([3, -7, 0], np.int64)
    assert np.array_equal(kdml.less(ints, np.int64(0), device=dev).numpy(), ints < 0)


F4 = TD(DT.FLOAT32, (2, 3, 4, 5))
U8 = TD(DT.UINT8, F4.sizes)
BAD = [
    (kdml.ElementWiseLogicalGreaterThanDesc(F4, TD(DT.FLOAT16, F4.sizes), U8), kdml.InvalidArgumentError,
     r"^b_tensor\.data_type: must equal a_tensor's \(FLOAT32\)"),
    (kdml.ElementWiseLogicalLessThanDesc(F4, F4, F4), kdml.UnsupportedError,
     r"^output_tensor: ELEMENT_WISE_LOGICAL_LESS_THAN does not support FLOAT32"),
    (kdml.ElementWiseLogicalLessThanOrEqualDesc(F4, F4, TD(DT.UINT8, (2, 3, 4, 6))), kdml.InvalidArgumentError,
     r"^output_tensor\.sizes: must equal a_tensor's"),
    (kdml.ElementWiseLogicalOrDesc(U8, U8, TD(DT.UINT32, F4.sizes)), kdml.InvalidArgumentError,
     r"^output_tensor\.data_type: must equal a_tensor's \(UINT8\)"),
    (kdml.ElementWiseLogicalXorDesc(TD(DT.INT8, F4.sizes), TD(DT.INT8, F4.sizes), TD(DT.INT8, F4.sizes)),
     kdml.UnsupportedError, r"^a_tensor: ELEMENT_WISE_LOGICAL_XOR does not support INT8"),
    (kdml.ElementWiseLogicalNotDesc(U8, TD(DT.UINT32, F4.sizes)), kdml.InvalidArgumentError,
     r"^output_tensor\.data_type: must equal input_tensor's \(UINT8\)"),
    (kdml.ElementWiseLogicalNotDesc(U8, TD(DT.UINT8, F4.sizes, (0, 20, 5, 1))), kdml.InvalidArgumentError,
     r"^output_tensor\.strides: an output may not broadcast"),
    (kdml.ElementWiseLogicalGreaterThanDesc(*[TD(DT.FLOAT64, F4.sizes)] * 2, U8), kdml.UnsupportedError,
     r"^a_tensor: ELEMENT_WISE_LOGICAL_GREATER_THAN does not support FLOAT64"),
]


@pytest.mark.parametrize(("desc", "error", "match"), BAD, ids=[m[1:40] for _, _, m in BAD])
def test_refused(dev, desc, error, match):
    with pytest.raises(error, match=match):
        dev.compile(desc)


def test_feature_levels():
    i64 = TD(DT.INT64, (2, 3))
    with pytest.raises(kdml.UnsupportedError, match="^a_tensor: ELEMENT_WISE_LOGICAL_GREATER_THAN does not support INT64"):
        compile_at_level(FL.FL_3_0, kdml.ElementWiseLogicalGreaterThanDesc(i64, i64, TD(DT.UINT8, (2, 3))))
    compile_at_level(FL.FL_4_1, kdml.ElementWiseLogicalGreaterThanDesc(i64, i64, TD(DT.UINT8, (2, 3))))
    with pytest.raises(kdml.UnsupportedError):  # introduced at 3_0
        compile_at_level(FL.FL_2_1, kdml.ElementWiseLogicalLessThanOrEqualDesc(F4, F4, U8))
    with pytest.raises(kdml.UnsupportedError, match="^output_tensor: ELEMENT_WISE_LOGICAL_LESS_THAN does not support UINT8"):
        compile_at_level(FL.FL_1_0, kdml.ElementWiseLogicalLessThanDesc(F4, F4, U8))  # 1_0: UINT32 only
    with pytest.raises(kdml.UnsupportedError, match="^input_tensor: ELEMENT_WISE_LOGICAL_NOT does not support UINT8"):
        compile_at_level(FL.FL_1_0, kdml.ElementWiseLogicalNotDesc(U8, U8))


def test_every_variant_compiles_a_plan(dev):
    for spec in elementwise_logic.SPECS:
        row = spec.support.require(HIGHEST_FEATURE_LEVEL)
        logic = len(spec.inputs) == 1 or spec.name.endswith(("_OR", "_XOR"))
        for dt in row.tensor(spec.inputs[0]).types:
            for out in ((dt,) if logic else row.tensor("output_tensor").types):
                assert dev.compile(spec.desc_type(*[TD(dt, (3,))] * len(spec.inputs), TD(out, (3,)))).plans


# ---- BIT_AND / OR / XOR / NOT (ops/elementwise_bit.py): bit patterns of every type --------------
BIT = {"and": (kdml.ElementWiseBitAndDesc, np.bitwise_and), "or": (kdml.ElementWiseBitOrDesc, np.bitwise_or),
       "xor": (kdml.ElementWiseBitXorDesc, np.bitwise_xor), "not": (kdml.ElementWiseBitNotDesc, np.invert)}


def _bits(rng, dt: DT, sizes) -> np.ndarray:
    return rng.integers(0, 256, (*sizes, dt.size), dtype=np.uint8).view(dt.numpy_dtype).reshape(sizes)


def _on_bits(fn, dt: DT):
    u = np.dtype(f"u{dt.size}")
    return lambda *xs: fn(*(x.view(u) for x in xs)).view(dt.numpy_dtype)


@pytest.mark.parametrize("op", list(BIT))
@pytest.mark.parametrize("dt", list(DT), ids=lambda d: d.name)
def test_bitwise(dev, rng, op, dt):
    cls, fn = BIT[op]
    n = 1 if op == "not" else 2
    for rank in (1, 3, 8):
        sizes = random_sizes(rng, rank)
        run(dev, rng, cls, (dt,) * n, dt, sizes, _on_bits(fn, dt), values=[_bits(rng, dt, sizes) for _ in range(n)])


def test_bitwise_in_place_and_helpers(dev, rng):
    desc = TD(DT.UINT16, (4, 6), (1, 5))
    x, raw = place(dev, rng, desc, _bits(rng, DT.UINT16, (4, 6)))
    xa = read_logical(raw, x.offset, desc)
    dev.compile(kdml.ElementWiseBitNotDesc(desc, desc)).execute([x], [x])
    assert np.array_equal(read_logical(assert_outside_unchanged(x, raw), x.offset, desc), ~xa)
    a = rng.integers(-100, 100, (3, 4)).astype(np.int32)
    b = np.array([1, -2, 7, 0], np.int32)
    assert np.array_equal(kdml.bitwise_and(a, b, device=dev).numpy(), a & b)
    assert np.array_equal(kdml.bitwise_or(a, b, device=dev).numpy(), a | b)
    assert np.array_equal(kdml.bitwise_xor(a, b, device=dev).numpy(), a ^ b)
    assert np.array_equal(kdml.bitwise_not(a, device=dev).numpy(), ~a)


def test_bitwise_refused_and_levels(dev):
    u8, u16 = TD(DT.UINT8, (2, 3)), TD(DT.UINT16, (2, 3))
    with pytest.raises(kdml.InvalidArgumentError, match=r"^b_tensor\.data_type: must equal a_tensor's \(UINT8\)"):
        dev.compile(kdml.ElementWiseBitAndDesc(u8, u16, u8))
    with pytest.raises(kdml.InvalidArgumentError, match=r"^output_tensor\.data_type: must equal input_tensor's"):
        dev.compile(kdml.ElementWiseBitNotDesc(u8, u16))
    i8 = TD(DT.INT8, (2, 3))
    with pytest.raises(kdml.UnsupportedError, match="^a_tensor: ELEMENT_WISE_BIT_XOR does not support INT8"):
        compile_at_level(FL.FL_3_0, kdml.ElementWiseBitXorDesc(i8, i8, i8))
    compile_at_level(FL.FL_3_0, kdml.ElementWiseBitOrDesc(u16, u16, u16))
    compile_at_level(FL.FL_4_1, kdml.ElementWiseBitXorDesc(i8, i8, i8))
    with pytest.raises(kdml.UnsupportedError):  # introduced at 3_0
        compile_at_level(FL.FL_2_1, kdml.ElementWiseBitOrDesc(u16, u16, u16))
