"""ONNX GatherND, ScatterND, ScatterElements / Scatter and OneHot through Backend.prepare(model,
"CPU").run against onnxruntime's CPU results, placed on Vulkan (rep.placement): GatherND with
batch_dims on float32 / int64 data, ScatterND as a decoder's static KV cache update (index_copy_
along the sequence), ScatterElements with every reduction and duplicates, OneHot with a depth
input, float indices and negative axes; the types that stay on the CPU with the reason; onnx's
own node cases for all of these wholly on the device where their types allow."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from kompute_dml.onnx_backend import Backend  # noqa: E402

F32, I64, I32, F16 = TensorProto.FLOAT, TensorProto.INT64, TensorProto.INT32, TensorProto.FLOAT16
ONNX_CASES = r"^test_(gathernd|scatternd|scatter_elements|scatter_with|scatter_without|onehot)\w*_cpu$"


def model_of(node, inputs, out_type, inits=(), opset=18):
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, t, list(s)) for n, t, s in inputs],
                              [helper.make_tensor_value_info("y", out_type, None)], initializer=list(inits))
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def run_both(model, feeds, on_device=True):
    rep = Backend.prepare(model, "CPU")
    got = rep.run(feeds)[0]
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    targets = {p.target for p in rep.placement}
    assert targets == ({"vulkan"} if on_device else {"cpu"}), rep.summary()
    return rep


@pytest.mark.parametrize(("dtype", "et"), [(np.float32, F32), (np.int64, I64), (np.float16, F16)], ids=str)
def test_gather_nd(dtype, et):
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((2, 3, 4, 5)) * 100).astype(dtype)
    for b, idx in ((0, rng.integers(-2, 2, (4, 3, 2))), (1, rng.integers(-3, 3, (2, 6, 2))),
                   (2, rng.integers(0, 4, (2, 3, 1)))):
        model = model_of(helper.make_node("GatherND", ["x", "i"], ["y"], batch_dims=b), [("x", et, x.shape),
                         ("i", I64, idx.shape)], et, opset=13)
        run_both(model, {"x": x, "i": idx.astype(np.int64)})


def test_scatter_nd_kv_cache():
    """A static cache (batch 2, heads 3, 16 positions, head size 4) updated at fed positions along
    the sequence, as transformers' StaticCache exports index_copy_: ScatterND with (seq, 1)
    indices over the transposed cache, then the cache of the next step."""
    rng = np.random.default_rng(2)
    cache = rng.standard_normal((16, 2, 3, 4)).astype(np.float32)  # sequence first (index_copy_ dim)
    model = model_of(helper.make_node("ScatterND", ["c", "p", "u"], ["y"]),
                     [("c", F32, cache.shape), ("p", I64, (5, 1)), ("u", F32, (5, 2, 3, 4))], F32)
    for start in (0, 7, 11):
        pos = np.arange(start, start + 5, dtype=np.int64)[:, None]
        run_both(model, {"c": cache, "p": pos, "u": rng.standard_normal((5, 2, 3, 4)).astype(np.float32)})


_RED_CASES = [(r, d, e) for r in ("none", "add", "mul", "max", "min")
              for d, e in ((np.float32, F32), (np.int32, I32), (np.int64, I64), (np.float16, F16))
              if r == "none" or d != np.float16]  # onnxruntime's CPU reductions take no float16


@pytest.mark.parametrize(("reduction", "dtype", "et"), _RED_CASES, ids=str)
def test_scatter_elements_and_nd(reduction, dtype, et):
    """Duplicates in every case (indices of 3 positions): `none` keeps the last, as onnxruntime;
    the reductions fold in row-major order on float32 / int32, the others stay on the CPU."""
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((3, 4, 5)) * 10).astype(dtype)
    on_device = reduction == "none" or dtype in (np.float32, np.int32)
    for axis in (0, -1):
        idx = rng.integers(-3, 3, (6, 4, 5)) if axis == 0 else rng.integers(0, 3, (3, 4, 7))
        upd = (rng.standard_normal(idx.shape) * 10).astype(dtype)
        model = model_of(helper.make_node("ScatterElements", ["x", "i", "u"], ["y"], axis=axis, reduction=reduction),
                         [("x", et, x.shape), ("i", I64, idx.shape), ("u", et, upd.shape)], et)
        run_both(model, {"x": x, "i": idx.astype(np.int64), "u": upd}, on_device)
    idx = rng.integers(-2, 3, (4, 2, 2))
    upd = (rng.standard_normal((4, 2, 5)) * 10).astype(dtype)
    model = model_of(helper.make_node("ScatterND", ["x", "i", "u"], ["y"], reduction=reduction),
                     [("x", et, x.shape), ("i", I64, idx.shape), ("u", et, upd.shape)], et)
    run_both(model, {"x": x, "i": idx.astype(np.int64), "u": upd}, on_device)


def test_scatter_deprecated():
    x = np.zeros((3, 3), np.float32)
    idx = np.array([[1, 0, 2], [0, 2, 1]], np.int64)
    upd = np.arange(6, dtype=np.float32).reshape(2, 3)
    model = model_of(helper.make_node("Scatter", ["x", "i", "u"], ["y"], axis=0),
                     [("x", F32, x.shape), ("i", I64, idx.shape), ("u", F32, upd.shape)], F32, opset=10)
    rep = Backend.prepare(model, "CPU")
    assert rep.run({"x": x, "i": idx, "u": upd})[0].tolist() == [[3, 1, 0], [0, 0, 5], [0, 4, 2]]
    assert {p.target for p in rep.placement} == {"vulkan"}


# (indices, depth, values) types onnxruntime's CPU OneHot registers
_ONE_HOT = [(np.int64, np.int64, np.int64), (np.int64, np.float32, np.float32), (np.float32, np.float32, np.float32),
            (np.int32, np.float32, np.float32), (np.int64, np.int32, np.float32)]
_ET = {np.dtype(np.int64): I64, np.dtype(np.int32): I32, np.dtype(np.float32): F32}


@pytest.mark.parametrize(("np_it", "np_dt", "np_vt"), _ONE_HOT, ids=str)
@pytest.mark.parametrize("axis", [-1, 0, 1, -3])
def test_one_hot(np_it, np_dt, np_vt, axis):
    rng = np.random.default_rng(4)
    idx = rng.integers(-6, 7, (3, 4)).astype(np_it)
    # float indices: integral values (a non-integral one is truncated here, as ONNX's OneHot says;
    # onnxruntime's CPU kernel compares the float itself and matches no position: docs/one_hot.md)
    depth = numpy_helper.from_array(np.array(5, np_dt), "d")
    vals = np.array([-1, 3], np_vt)
    model = model_of(helper.make_node("OneHot", ["i", "d", "v"], ["y"], axis=axis),
                     [("i", _ET[np.dtype(np_it)], idx.shape), ("v", _ET[np.dtype(np_vt)], (2,))],
                     _ET[np.dtype(np_vt)], [depth])
    run_both(model, {"i": idx, "v": vals})


def _graph(nodes, inits, x_type, dims, out_type, ms=False):
    """A model of `nodes` reading input x (`x_type`, `dims`) and writing y; `ms`: com.microsoft's opset too."""
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", x_type, dims)],
                              [helper.make_tensor_value_info("y", out_type, None)], initializer=inits)
    opsets = [helper.make_opsetid("", 17)] + ([helper.make_opsetid("com.microsoft", 1)] if ms else [])
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 8
    return model


def _runs(model, xs):
    """Each x run by the backend, equal to onnxruntime's; the backend's RunStats of each run."""
    rep = Backend.prepare(model, "CPU")
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for x in xs:
        np.testing.assert_array_equal(rep.run({"x": x})[0], sess.run(None, {"x": x})[0])
        yield rep, rep.last_run


def _length_one_hot(out, i, d):
    """OneHot(i, d, [1, len % 2 + 2]) of x's axis-1 length, as torch exports repeat counts; nodes and initializers."""
    n, c = helper.make_node, numpy_helper.from_array
    nodes = [n("Shape", ["x"], ["sh"]), n("Gather", ["sh", "one"], ["len"], axis=0), n("Mod", ["len", "two"], ["md"]),
             n("Add", ["md", "two"], ["ad"]), n("Reshape", ["ad", "shp1"], ["rs"]), n("Concat", ["c1", "rs"], ["v"], axis=0),
             n("OneHot", ["i", "d", "v"], [out])]
    inits = [c(np.array(1, np.int64), "one"), c(np.array(2, np.int64), "two"), c(np.array([1], np.int64), "shp1"),
             c(np.array([1], np.int64), "c1"), c(np.array(i, np.int64), "i"), c(np.array(d, np.int64), "d")]
    return nodes, inits


def test_one_hot_values_computed_on_the_host_beside_a_constant_depth():
    """OneHot's values from shape arithmetic (host values, CANINE's export) beside constant indices
    and depth: each uploaded under its own name (the values went up as the depth once: a 1-element
    values tensor, refused)."""
    nodes, inits = _length_one_hot("y", [2, 0], 4)
    for _rep, st in _runs(_graph(nodes, inits, I64, ["b", "s"], I64), [np.zeros((2, s), np.int64) for s in (9, 6, 9)]):
        assert st.runtime_fallbacks == 0


def test_one_hot_of_shape_arithmetic_is_resolved_on_the_host():
    """torch's repeat counts exported as a OneHot of shape arithmetic (YOSO): resolved on the host
    with the rest of the shape arithmetic, so the Tile they feed plans into the one program (the
    OneHot on the device made every run node by node, 8 uploads and 3 downloads)."""
    n = helper.make_node
    nodes, inits = _length_one_hot("oh", [1], 2)
    nodes += [n("Reshape", ["oh", "shp4"], ["reps"]), n("Mul", ["x", "x"], ["xx"]), n("Tile", ["xx", "reps"], ["y"])]
    inits.append(numpy_helper.from_array(np.array([2], np.int64), "shp4"))
    xs = [np.random.default_rng(s).standard_normal((2, s)).astype(np.float32) for s in (7, 4, 7)]
    for _rep, st in _runs(_graph(nodes, inits, F32, ["b", "s"], F32), xs):
        assert st.planned or st.submissions == 1, st
        assert (st.uploads, st.downloads, st.runtime_fallbacks) == (1, 1, 0) and not st.events, st


@pytest.mark.parametrize("rank", [1, 2])
def test_nonzero_of_a_mask_from_shapes_is_resolved_on_the_host(rank):
    """NonZero of a mask built from shapes (X-MOD's language routing) is shape arithmetic: resolved on
    the host, the Gather it indexes in the one program (it ran on the CPU: 2 sub-graphs, 14 uploads)."""
    n, c = helper.make_node, numpy_helper.from_array
    nodes = [n("Shape", ["x"], ["sh"]), n("Slice", ["sh", "z", "r"], ["lead"]), n("ConstantOfShape", ["lead"], ["m"],
             value=helper.make_tensor("v", I64, [1], [3])), n("Equal", ["m", "three"], ["eq"]), n("NonZero", ["eq"], ["nz"]),
             n("Transpose", ["nz"], ["nzt"], perm=[1, 0]), n("Mul", ["x", "x"], ["xx"]), n("GatherND", ["xx", "nzt"], ["y"])]
    inits = [c(np.array([0], np.int64), "z"), c(np.array([rank], np.int64), "r"), c(np.array(3, np.int64), "three")]
    xs = [np.random.default_rng(shape[1]).standard_normal(shape).astype(np.float32) for shape in ((2, 3, 4), (1, 5, 4))]
    for rep, st in _runs(_graph(nodes, inits, F32, ["b", "s", "h"], F32), xs):
        assert (st.uploads, st.downloads, st.cpu_segments, st.runtime_fallbacks) == (1, 1, 0, 0), st
        assert "NonZero" not in {p.op_type for p in rep.placement if p.target == "cpu"}


def test_qlinear_shape_arithmetic_is_resolved_on_the_host():
    """onnxruntime's QOperator quantization writes a mask's shape arithmetic as QLinearMul (X-MOD's
    language routing; here with com.microsoft's DequantizeLinear after it): resolved on the host (the
    CPU engine for the node) like the float Mul it replaces, the NonZero after it too (they ran on
    the CPU: 2 sub-graphs, 75 uploads a run)."""
    n, c = helper.make_node, numpy_helper.from_array
    nodes = [n("Shape", ["x"], ["sh"]), n("Slice", ["sh", "z", "one"], ["lead"]),
             n("ConstantOfShape", ["lead"], ["m"], value=helper.make_tensor("v", F32, [1], [1.0])),
             n("QuantizeLinear", ["m", "s", "zp"], ["mq"]),
             n("QLinearMul", ["mq", "s", "zp", "kq", "s", "zp", "s", "zp"], ["pq"], domain="com.microsoft"),
             n("DequantizeLinear", ["pq", "s", "zp"], ["p"], domain="com.microsoft"), n("Equal", ["p", "three"], ["eq"]),
             n("NonZero", ["eq"], ["nz"]), n("Transpose", ["nz"], ["nzt"], perm=[1, 0]),
             n("Mul", ["x", "x"], ["xx"]), n("GatherND", ["xx", "nzt"], ["y"])]
    inits = [c(np.array([0], np.int64), "z"), c(np.array([1], np.int64), "one"), c(np.array(0.5, np.float32), "s"),
             c(np.array(0, np.uint8), "zp"), c(np.array(6, np.uint8), "kq"), c(np.array(3.0, np.float32), "three")]
    xs = [np.random.default_rng(shape[0]).standard_normal(shape).astype(np.float32) for shape in ((3, 4), (2, 5), (3, 4))]
    for _rep, st in _runs(_graph(nodes, inits, F32, ["b", "h"], F32, ms=True), xs):
        assert (st.uploads, st.downloads, st.cpu_segments, st.runtime_fallbacks) == (1, 1, 0, 0), st


def test_node_cases_placement():
    """Every case passes; all wholly on Vulkan but OneHot's bfloat16 values (no DirectML type)."""
    from onnx_node_cases import node_cases, run_case

    case, names = node_cases(ONNX_CASES, __name__)
    assert len(names) == 25, names
    for name in names:
        targets = {p.target for rep in run_case(case, name) for p in rep.placement}
        assert targets == ({"cpu"} if "bfloat16" in name else {"vulkan"}), (name, targets)
