"""ELEMENT_WISE_MIN / ELEMENT_WISE_MAX (ops/elementwise_minmax.py) against a numpy reference
written from the stated semantics (B < A ? B : A, A < B ? B : A; a NaN operand gives that NaN
quieted, A's first): every type, bit for bit (signed zeros and NaN payloads included); strided,
broadcast and offset operands with poisoned outputs; in place; refused types, levels and
shapes; ONNX Min / Max (2, 3 and 1 inputs, broadcasting) against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_output, place, poison_against, random_strides, random_values, read_logical

import kompute_dml as kdml

DT = kdml.DataType
FL = kdml.FeatureLevel
TD = kdml.TensorDesc
TYPES = [DT.FLOAT32, DT.FLOAT16, DT.INT8, DT.UINT8, DT.INT16, DT.UINT16, DT.INT32, DT.UINT32, DT.INT64, DT.UINT64]
QUIET = {4: 0x00400000, 2: 0x0200}


def reference(op: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = np.broadcast_arrays(a, b)
    pick_b = (b < a) if op == "min" else (a < b)  # NaN compares false
    y = np.where(pick_b, b, a)
    if a.dtype.kind == "f":
        u = f"u{a.dtype.itemsize}"
        q = a.dtype.type(0).view(u).dtype.type(QUIET[a.dtype.itemsize])
        y = np.where(np.isnan(b) & ~np.isnan(a), b, y)
        y = np.where(np.isnan(a), a, y)
        bits = y.view(u).copy()
        bits[np.isnan(y)] |= q
        y = bits.view(a.dtype)
    return y


def desc_of(op):
    return kdml.ElementWiseMinDesc if op == "min" else kdml.ElementWiseMaxDesc


@pytest.mark.parametrize("op", ["min", "max"])
@pytest.mark.parametrize("dt", TYPES, ids=lambda d: d.name)
def test_layouts(dev, rng, op, dt):
    for sizes in ((9,), (3, 5), (2, 3, 4), (1, 4, 1, 3, 2), (2, 1, 3, 2, 2, 1, 3, 2)):
        ad = TD(dt, sizes, random_strides(rng, sizes, allow_broadcast=True))
        bd = TD(dt, sizes, random_strides(rng, sizes, allow_broadcast=True))
        od = TD(dt, sizes, random_strides(rng, sizes, allow_broadcast=False))
        a, araw = place(dev, rng, ad, random_values(rng, dt, sizes))
        b, braw = place(dev, rng, bd, random_values(rng, dt, sizes))
        o, _ = place(dev, rng, od)
        want = reference(op, read_logical(araw, a.offset, ad), read_logical(braw, b.offset, bd))
        before = poison_against(o, want, rng)
        dev.compile(desc_of(op)(ad, bd, od)).execute([a, b], [o])
        assert_output(o, before, want)


@pytest.mark.parametrize("dt", [DT.FLOAT32, DT.FLOAT16], ids=("f32", "f16"))
def test_float_specials(dev, dt):
    """Every pair of special values, both orders: NaN wins (A's first), -0 / +0 give A."""
    v = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, np.finfo(dt.numpy_dtype).tiny / 2,
                  np.finfo(dt.numpy_dtype).max], dt.numpy_dtype)
    a, b = (x.reshape(-1) for x in np.meshgrid(v, v, indexing="ij"))
    for op, fn in (("min", kdml.minimum), ("max", kdml.maximum)):
        got = fn(a, b, device=dev).numpy()
        want = reference(op, a, b)
        u = f"u{a.dtype.itemsize}"
        assert np.array_equal(got.view(u), want.view(u)), op


def test_in_place_and_broadcast_helper(dev, rng):
    x = random_values(rng, DT.INT32, (4, 5))
    t, _ = place(dev, rng, TD(DT.INT32, (4, 5)), x)
    col = np.arange(4, dtype=np.int32).reshape(4, 1) * 1000
    c, _ = place(dev, rng, TD(DT.INT32, (4, 5), (1, 0)), np.broadcast_to(col, (4, 5)).copy())
    dev.compile(kdml.ElementWiseMaxDesc(t.desc, c.desc, t.desc)).execute([t, c], [t])
    assert np.array_equal(t.numpy(), np.maximum(x, col))
    y = kdml.minimum(np.float16([[1, 2, 3]]), np.float16([[2], [0]]), device=dev)
    assert y.desc.sizes == (2, 3) and np.array_equal(y.numpy(), np.minimum([[1, 2, 3]], [[2], [0]]))


F = TD(DT.FLOAT32, (2, 3))
BAD = [
    (kdml.ElementWiseMinDesc(F, TD(DT.FLOAT16, (2, 3)), F), kdml.InvalidArgumentError, r"^b_tensor\.data_type"),
    (kdml.ElementWiseMaxDesc(F, F, TD(DT.FLOAT32, (3, 2))), kdml.InvalidArgumentError, r"^output_tensor\.sizes"),
    (kdml.ElementWiseMaxDesc(F, F, TD(DT.FLOAT32, (2, 3), (0, 1))), kdml.InvalidArgumentError,
     r"^output_tensor\.strides"),
    (kdml.ElementWiseMinDesc(*(TD(DT.FLOAT64, (2, 3)),) * 3), kdml.UnsupportedError,
     r"^a_tensor: ELEMENT_WISE_MIN does not support FLOAT64"),
]


@pytest.mark.parametrize(("desc", "error", "match"), BAD, ids=[m[1:30] for _, _, m in BAD])
def test_refused(dev, desc, error, match):
    with pytest.raises(error, match=match):
        dev.compile(desc)
    assert kdml.maximum(np.float32([1]), np.float32([2]), device=dev).numpy()[0] == 2  # still usable


def test_feature_levels():
    f4, i4, l4 = (TD(t, (2,) * 4) for t in (DT.FLOAT16, DT.INT8, DT.INT64))
    with kdml.Device(feature_level=FL.FL_1_0) as d:
        d.compile(kdml.ElementWiseMinDesc(f4, f4, f4))
        with pytest.raises(kdml.UnsupportedError, match="^a_tensor: ELEMENT_WISE_MIN does not support INT8"):
            d.compile(kdml.ElementWiseMinDesc(i4, i4, i4))
    with kdml.Device(feature_level=FL.FL_3_0) as d:
        d.compile(kdml.ElementWiseMaxDesc(i4, i4, i4))
        d.compile(kdml.ElementWiseMaxDesc(*(TD(DT.INT8, (3,)),) * 3))
        with pytest.raises(kdml.UnsupportedError, match="^a_tensor: ELEMENT_WISE_MAX does not support INT64"):
            d.compile(kdml.ElementWiseMaxDesc(l4, l4, l4))
    with kdml.Device(feature_level=FL.FL_5_0) as d:
        d.compile(kdml.ElementWiseMaxDesc(l4, l4, l4))


@pytest.mark.parametrize("np_dt", [np.float32, np.float16, np.int32, np.int64, np.uint8], ids=str)
def test_onnx_against_onnxruntime(np_dt):
    pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from onnx import helper

    from kompute_dml.onnx_backend import Backend
    et = helper.np_dtype_to_tensor_dtype(np.dtype(np_dt))
    shapes = {"a": [3, 4], "b": [1, 4], "c": [3, 1]}
    nodes = [helper.make_node("Min", ["a", "b"], ["y0"]), helper.make_node("Max", ["a", "b", "c"], ["y1"]),
             helper.make_node("Max", ["a"], ["y2"]), helper.make_node("Min", ["c", "b", "a"], ["y3"])]
    graph = helper.make_graph(nodes, "mm", [helper.make_tensor_value_info(n, et, s) for n, s in shapes.items()],
                              [helper.make_tensor_value_info(f"y{i}", et, [3, 4]) for i in range(4)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    rng = np.random.default_rng(3)
    feeds = {n: random_values(rng, DT.from_numpy(np.dtype(np_dt)), s) for n, s in shapes.items()}
    if np.dtype(np_dt).kind == "f":
        feeds["a"][0, :4] = [np.nan, -0.0, 0.0, 1.0]
        feeds["b"][0, :4] = [1.0, 0.0, -0.0, np.nan]
    rep = Backend.prepare(model)
    got = rep.run(feeds)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, w, err_msg=f"y{i}")  # NaN positions and values
    assert {p.target for p in rep.placement} == {"vulkan"}
