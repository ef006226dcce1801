"""TOP_K1 (ops/top_k.py, shaders/topk.comp) against a numpy reference written from the page: per
sequence the K largest or smallest values, sorted, ties by ascending index (a stable lexsort on
the values' ranks: -0 equal to +0, every NaN above +inf), values bit for bit the input's; every
type, both directions, sequences of one tile (<= 1024) and of many (the candidates and their
ranks), K from 1 to the axis length, every axis; strided, broadcast and offset inputs, strided
outputs with poisoned bytes left unchanged, more outer dimensions than the shader walks; refused
descriptors and feature levels; ONNX TopK against onnxruntime and onnx's node cases."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_outside_unchanged, place, poison_against, random_strides, random_values, read_logical

import kompute_dml as kdml

DT = kdml.DataType
FL = kdml.FeatureLevel
TD = kdml.TensorDesc
TYPES = [DT.FLOAT32, DT.FLOAT16, DT.INT8, DT.UINT8, DT.INT16, DT.UINT16, DT.INT32, DT.UINT32, DT.INT64, DT.UINT64]


def reference(x: np.ndarray, k: int, axis: int, largest: bool) -> tuple[np.ndarray, np.ndarray]:
    """(values, indices) by a stable sort of each sequence on (value rank, index)."""
    xm = np.moveaxis(x, axis, -1)
    flat = xm.reshape(-1, xm.shape[-1])
    idx = np.empty((flat.shape[0], k), np.int64)
    for r, seq in enumerate(flat):
        _, rank = np.unique(seq, return_inverse=True)  # -0 == +0; NaNs last (one value, the largest)
        rank = rank.reshape(-1)
        idx[r] = np.lexsort((np.arange(seq.size), -rank if largest else rank))[:k]
    vals = np.take_along_axis(flat, idx, 1)
    shape = (*xm.shape[:-1], k)
    return np.moveaxis(vals.reshape(shape), -1, axis), np.moveaxis(idx.reshape(shape), -1, axis)


def values_of(rng, dt: DT, shape, ties: bool) -> np.ndarray:
    if ties:  # few distinct values: long runs of ties
        v = rng.integers(0, 5, shape).astype(dt.numpy_dtype)
        if dt.is_float:
            v.reshape(-1)[::7] = -0.0
        return v
    v = random_values(rng, dt, shape)
    if dt.is_float:
        flat = v.reshape(-1)
        flat[rng.choice(flat.size, min(flat.size, 6), replace=False)] = [np.nan, -0.0, 0.0, np.inf, -np.inf, np.nan][
            :min(flat.size, 6)]
    return v


def same(got: np.ndarray, want: np.ndarray) -> None:
    assert got.shape == want.shape
    np.testing.assert_array_equal(got.view(f"u{got.itemsize}"), want.view(f"u{want.itemsize}"))


@pytest.mark.parametrize("dt", TYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("largest", [True, False], ids=("largest", "smallest"))
def test_values(dev, rng, dt, largest):
    """One tile (7, 1024 elements) and several (1025, 2500); K = 1, a middle one, the axis length
    (beyond one tile: K past 1024 too); runs of ties and the special values."""
    it = DT.UINT64 if dt.size == 8 else DT.UINT32
    for length, ks in ((7, (1, 3, 7)), (1024, (1, 100, 1024)), (1025, (1, 5, 1025)), (2500, (37, 1500))):
        for ties in (False, True):
            x = values_of(rng, dt, (3, length), ties)
            for k in ks:
                v, i = kdml.top_k(x, k, axis=1, largest=largest, index_type=it, device=dev)
                wv, wi = reference(x, k, 1, largest)
                np.testing.assert_array_equal(i.numpy(), wi, err_msg=f"{length} {k} {ties}")
                same(v.numpy(), wv)


def test_page_examples(dev):
    """The four examples of DML_TOP_K1_OPERATOR_DESC's page."""
    x = np.array([[[[0, 1, 10, 11], [3, 2, 9, 8], [4, 5, 6, 7]]]], np.float32)
    v, i = kdml.top_k(x, 2, axis=3, device=dev)
    assert v.numpy().tolist() == [[[[11, 10], [9, 8], [7, 6]]]] and i.numpy().tolist() == [[[[3, 2], [2, 3], [3, 2]]]]
    v, i = kdml.top_k(x, 2, axis=2, device=dev)
    assert v.numpy().tolist() == [[[[4, 5, 10, 11], [3, 2, 9, 8]]]] and i.numpy().tolist() == [[[[2, 2, 0, 0], [1, 1, 1, 1]]]]
    t = np.array([[[[1, 2, 2, 3], [3, 4, 5, 5], [6, 6, 6, 6]]]], np.float32)
    v, i = kdml.top_k(t, 3, axis=3, device=dev)
    assert v.numpy().tolist() == [[[[3, 2, 2], [5, 5, 4], [6, 6, 6]]]] and i.numpy().tolist() == [[[[3, 1, 2], [2, 3, 1], [0, 1, 2]]]]
    v, i = kdml.top_k(t, 3, axis=3, largest=False, device=dev)
    assert v.numpy().tolist() == [[[[1, 2, 2], [3, 4, 5], [6, 6, 6]]]] and i.numpy().tolist() == [[[[0, 1, 2]] * 3]]


@pytest.mark.parametrize("length,k", [(6, 4), (1500, 9)], ids=("one-tile", "tiles"))
def test_layouts(dev, rng, length, k):
    """Every axis of 4-D inputs with random strides (broadcast dimensions included) at offsets,
    strided outputs poisoned first; 6 outer dimensions (the host enumerates those beyond 3, each
    with its own rows of the scratch)."""
    for shape, axis in (((2, 3, length, 2), 2), ((length, 2, 3, 1), 0), ((3, 2, 2, length), 3),
                        ((2, 2, 2, 2, 2, 3, length), 6)):
        out_shape = (*shape[:axis], k, *shape[axis + 1:])
        xd = TD(DT.FLOAT32, shape, random_strides(rng, shape, allow_broadcast=True))
        vd = TD(DT.FLOAT32, out_shape, random_strides(rng, out_shape, allow_broadcast=False))
        idd = TD(DT.UINT32, out_shape, random_strides(rng, out_shape, allow_broadcast=False))
        x, xraw = place(dev, rng, xd, values_of(rng, DT.FLOAT32, shape, ties=True))
        (vt, _), (it, _) = place(dev, rng, vd), place(dev, rng, idd)
        wv, wi = reference(read_logical(xraw, x.offset, xd), k, axis, True)
        before_v, before_i = poison_against(vt, wv, rng), poison_against(it, wi.astype(np.uint32), rng)
        dev.compile(kdml.TopK1Desc(xd, vd, idd, axis, k)).execute([x], [vt, it])
        same(read_logical(assert_outside_unchanged(vt, before_v), vt.offset, vd), wv)
        np.testing.assert_array_equal(read_logical(assert_outside_unchanged(it, before_i), it.offset, idd), wi)


F = TD(DT.FLOAT32, (2, 5))
V2, I2 = TD(DT.FLOAT32, (2, 2)), TD(DT.UINT32, (2, 2))
BAD = [
    (kdml.TopK1Desc(F, V2, I2, 1, 3), kdml.InvalidArgumentError, r"^output_value_tensor\.sizes: must be input_tensor's"),
    (kdml.TopK1Desc(F, TD(DT.FLOAT32, (2, 0 + 1)), TD(DT.UINT32, (2, 1)), 1, 0), kdml.InvalidArgumentError, r"^k: must be in \[1, 5\]"),
    (kdml.TopK1Desc(F, TD(DT.FLOAT32, (2, 6)), TD(DT.UINT32, (2, 6)), 1, 6), kdml.InvalidArgumentError, r"^k: must be in"),
    (kdml.TopK1Desc(F, V2, I2, 2, 2), kdml.InvalidArgumentError, r"^axis: must be in \[0, 2\)"),
    (kdml.TopK1Desc(F, TD(DT.FLOAT16, (2, 2)), I2, 1, 2), kdml.InvalidArgumentError, r"^output_value_tensor\.data_type"),
    (kdml.TopK1Desc(F, V2, TD(DT.INT32, (2, 2)), 1, 2), kdml.UnsupportedError, r"^output_index_tensor: TOP_K1 does not"),
    (kdml.TopK1Desc(F, V2, I2, 1, 2, 2), kdml.InvalidArgumentError, r"^axis_direction: must be"),
    (kdml.TopK1Desc(F, V2, I2, 1, True), kdml.InvalidArgumentError, r"^k"),
    (kdml.TopK1Desc(F, V2, TD(DT.UINT32, (2, 2), (0, 1)), 1, 2), kdml.InvalidArgumentError, r"^output_index_tensor\.strides"),
    (kdml.TopK1Desc(TD(DT.FLOAT64, (2, 5)), TD(DT.FLOAT64, (2, 2)), I2, 1, 2), kdml.UnsupportedError, "FLOAT64"),
]


@pytest.mark.parametrize(("desc", "error", "match"), BAD, ids=[m[1:30] for _, _, m in BAD])
def test_refused(dev, desc, error, match):
    with pytest.raises(error, match=match):
        dev.compile(desc)


def test_feature_levels():
    x4, v4, i4 = TD(DT.FLOAT16, (1, 1, 2, 8)), TD(DT.FLOAT16, (1, 1, 2, 3)), TD(DT.UINT32, (1, 1, 2, 3))
    with kdml.Device(feature_level=FL.FL_2_1) as d:
        d.compile(kdml.TopK1Desc(x4, v4, i4, 3, 3, kdml.AxisDirection.INCREASING))
        with pytest.raises(kdml.UnsupportedError, match="^input_tensor: TOP_K1 supports"):
            d.compile(kdml.TopK1Desc(TD(DT.FLOAT16, (2, 8)), TD(DT.FLOAT16, (2, 3)), TD(DT.UINT32, (2, 3)), 1, 3))
    with kdml.Device(feature_level=FL.FL_2_0) as d, pytest.raises(kdml.UnsupportedError):
        d.compile(kdml.TopK1Desc(x4, v4, i4, 3, 3))
    l2, l1 = TD(DT.INT64, (2, 8)), TD(DT.INT64, (2, 3))
    with kdml.Device(feature_level=FL.FL_3_1) as d:
        d.compile(kdml.TopK1Desc(TD(DT.INT8, (8,)), TD(DT.INT8, (3,)), TD(DT.UINT32, (3,)), 0, 3))
        with pytest.raises(kdml.UnsupportedError, match="INT64"):
            d.compile(kdml.TopK1Desc(l2, l1, TD(DT.UINT64, (2, 3)), 1, 3))
    with kdml.Device(feature_level=FL.FL_5_0) as d:
        d.compile(kdml.TopK1Desc(l2, l1, TD(DT.UINT64, (2, 3)), 1, 3))


# ---- ONNX TopK ---------------------------------------------------------------------------------
@pytest.mark.parametrize("np_dt", [np.float32, np.float16, np.int32, np.int64, np.uint8], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("largest,axis", [(1, -1), (0, 0), (1, 1)])
def test_onnx_against_onnxruntime(np_dt, largest, axis):
    """Values and int64 indices bit for bit onnxruntime's (data with ties and no NaN: where its
    comparator leaves NaNs' places free, ours sorts them above +inf), rows of 1 and 3 tiles."""
    pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from onnx import helper, numpy_helper

    from kompute_dml.onnx_backend import Backend

    et = helper.np_dtype_to_tensor_dtype(np.dtype(np_dt))
    for length, k in ((40, 7), (2500, 2)):
        shape = [4, 3]
        shape.insert(axis % 3, length)
        node = helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=axis, largest=largest)
        g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", et, list(shape))],
                              [helper.make_tensor_value_info("v", et, None),
                               helper.make_tensor_value_info("i", onnx_int64(), None)],
                              [numpy_helper.from_array(np.array([k], np.int64), "k")])
        model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
        x = np.random.default_rng(4).integers(0, 30, shape).astype(np_dt)  # (runs of ties)
        rep = Backend.prepare(model, "CPU")
        got = rep.run({"x": x})
        want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
        assert [(p.target, p.operator) for p in rep.placement] == [("vulkan", "TOP_K1")]
        for g_, w_ in zip(got, want):
            assert g_.dtype == w_.dtype
            np.testing.assert_array_equal(g_, w_)


def onnx_int64() -> int:
    from onnx import TensorProto
    return TensorProto.INT64


def test_onnx_node_cases():
    """onnx's TopK cases (int64 and uint64 values among them) pass on Vulkan."""
    pytest.importorskip("onnx")
    from onnx_node_cases import node_cases, run_case

    case, names = node_cases(r"^test_top_k\w*_cpu$", __name__)
    assert len(names) == 7, names
    for name in names:
        assert {p.target for rep in run_case(case, name) for p in rep.placement} == {"vulkan"}, name


def test_onnx_fed_k_read_at_each_run():
    """A fed k: the model runs node by node (a plan cannot read it on the host), each run with its k."""
    pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper

    from kompute_dml.onnx_backend import Backend

    node = helper.make_node("TopK", ["x", "k"], ["v", "i"], largest=0)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 50]),
                                        helper.make_tensor_value_info("k", TensorProto.INT64, [1])],
                          [helper.make_tensor_value_info("v", TensorProto.FLOAT, None),
                           helper.make_tensor_value_info("i", TensorProto.INT64, None)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    rep = Backend.prepare(model, "CPU")
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(6).standard_normal((5, 50)).astype(np.float32)
    for k in (3, 11, 3):
        feeds = {"x": x, "k": np.array([k], np.int64)}
        for g_, w_ in zip(rep.run(feeds), sess.run(None, feeds)):
            np.testing.assert_array_equal(g_, w_)
    assert [p.target for p in rep.placement] == ["vulkan"]


def test_candidates_within_llvmpipes_loop_limit(dev):
    """A long sequence's candidates (tiles x min(K, 1024)) are each ranked against all by one invocation:
    on a CPU device more than CPU_WALK_MAX of them are refused, naming k (lavapipe's loop limit: 100,000
    elements at K = 1,000 gave wrong values: checked); fewer are exact."""
    from kompute_dml.runtime.llvmpipe import CPU_WALK_MAX

    if dev.device_type != "cpu":
        pytest.skip("llvmpipe's loop limit: CPU devices only")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 20_000)).astype(np.float32)
    values, _ = kdml.top_k(x, 1000, axis=1, device=dev)
    np.testing.assert_array_equal(values.numpy(), -np.sort(-x, 1)[:, :1000])
    n = 1024 * (CPU_WALK_MAX // 1000 + 1)  # tiles x 1,000 candidates, past the limit
    with pytest.raises(kdml.UnsupportedError, match=f"^k: 1000 of {n} elements make"):
        kdml.top_k(np.zeros((1, n), np.float32), 1000, axis=1, device=dev)
