"""Constant folding at prepare (kompute_dml/onnx_backend/fold.py): Constant nodes and what reads
only constants become constants once, checked against onnxruntime running the unchanged model."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto as T  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

from kompute_dml.onnx_backend import CPU, Backend  # noqa: E402

OPSETS = [helper.make_opsetid("", 17)]
n = helper.make_node


def _model(nodes, inputs, outputs, initializers=()):
    g = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    return helper.make_model(g, opset_imports=OPSETS, ir_version=8)


def _ort(model, feeds):
    """onnxruntime on the model as written: its own optimizer would turn DequantizeLinear -> MatMul
    into a product on dynamically quantized activations, off by 1% here."""
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def test_constant_nodes_of_every_attribute_kind_fold(rng):
    sparse = helper.make_sparse_tensor(numpy_helper.from_array(np.array([5.0, -1.0], np.float32), "v"),
                                       numpy_helper.from_array(np.array([1, 4], np.int64), "i"), [2, 3])
    nodes = [n("Constant", [], ["c_t"], value=numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3))),
             n("Constant", [], ["c_f"], value_float=0.5),
             n("Constant", [], ["c_fs"], value_floats=[1.0, 2.0, 3.0]),
             n("Constant", [], ["c_i"], value_int=2),
             n("Constant", [], ["c_is"], value_ints=[2, 3]),
             n("Constant", [], ["c_sp"], sparse_value=sparse),
             n("Mul", ["x", "c_t"], ["a"]), n("Add", ["a", "c_f"], ["b"]), n("Sub", ["b", "c_fs"], ["c"]),
             n("Add", ["c", "c_sp"], ["d"]), n("Reshape", ["d", "c_is"], ["e"]), n("Cast", ["c_i"], ["i32"], to=T.INT32)]
    model = _model(nodes, [helper.make_tensor_value_info("x", T.FLOAT, [2, 3])],
                   [helper.make_tensor_value_info("e", T.FLOAT, None), helper.make_tensor_value_info("i32", T.INT32, None),
                    helper.make_tensor_value_info("c_fs", T.FLOAT, None)])
    before = model.SerializeToString()
    rep = Backend.prepare(model, "CPU")
    assert model.SerializeToString() == before  # the user's model is not changed
    assert sorted(rep.folded) == ["Cast"] + ["Constant"] * 6
    assert [node.op_type for node in rep.graph.node] == ["Mul", "Add", "Sub", "Add", "Reshape"]
    assert "7 nodes read only constants and were folded at prepare: Cast x1, Constant x6" in rep.summary()
    assert not [p for p in rep.placement if p.target == CPU] and not rep.segments
    x = rng.standard_normal((2, 3)).astype(np.float32)
    got = rep.run({"x": x})
    for g, w in zip(got, _ort(model, {"x": x})):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, w)


def test_constant_chains_fold_and_quantized_weights_stay_quantized(rng):
    w8 = numpy_helper.from_array(rng.integers(-128, 128, (4, 3), dtype=np.int8), "w8")
    scale = numpy_helper.from_array(np.array(0.05, np.float32), "ws")
    nodes = [n("Constant", [], ["two"], value_float=2.0),
             n("Constant", [], ["base"], value=numpy_helper.from_array(np.linspace(0.1, 2.0, 3, dtype=np.float32))),
             n("Pow", ["base", "two"], ["sq"]), n("Sqrt", ["sq"], ["root"]), n("Neg", ["root"], ["neg"]),
             n("DequantizeLinear", ["w8", "ws"], ["w"]),
             n("MatMul", ["x", "w"], ["y0"]), n("Add", ["y0", "neg"], ["y"])]
    model = _model(nodes, [helper.make_tensor_value_info("x", T.FLOAT, [5, 4])],
                   [helper.make_tensor_value_info("y", T.FLOAT, None)], [w8, scale])
    rep = Backend.prepare(model, "CPU")
    assert sorted(rep.folded) == ["Constant", "Constant", "Neg", "Pow", "Sqrt"]
    assert [node.op_type for node in rep.graph.node] == ["DequantizeLinear", "MatMul", "Add"]
    assert "sq" not in rep.constants and "root" not in rep.constants and "neg" in rep.constants  # only what is read
    x = rng.standard_normal((5, 4)).astype(np.float32)
    (got,), (want,) = rep.run({"x": x}), _ort(model, {"x": x})
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_overridable_initializers_and_random_draws_are_not_folded(rng):
    default = numpy_helper.from_array(np.array([1.0, 2.0], np.float32), "bias")
    nodes = [n("Neg", ["bias"], ["nb"]), n("Add", ["x", "nb"], ["y"]),
             n("RandomUniformLike", ["x"], ["r"], seed=1.0), n("Constant", [], ["k"], value_float=3.0),
             n("RandomNormalLike", ["k"], ["rk"]), n("Mul", ["rk", "k"], ["z"])]
    model = _model(nodes, [helper.make_tensor_value_info("x", T.FLOAT, [2]),
                           helper.make_tensor_value_info("bias", T.FLOAT, [2])],
                   [helper.make_tensor_value_info("y", T.FLOAT, None), helper.make_tensor_value_info("z", T.FLOAT, None)],
                   [default])
    rep = Backend.prepare(model, "CPU")
    assert list(rep.folded) == ["Constant"]  # Neg reads a graph input; the random draws stay draws
    x = np.array([0.5, 0.25], np.float32)
    y, _ = rep.run({"x": x})
    np.testing.assert_array_equal(y, x - numpy_helper.to_array(default))
    y, _ = rep.run({"x": x, "bias": np.array([10.0, 20.0], np.float32)})
    np.testing.assert_array_equal(y, x - np.array([10.0, 20.0], np.float32))


def test_a_constant_graph_output_and_an_empty_graph():
    nodes = [n("Constant", [], ["c"], value_ints=[4, 5, 6])]
    model = _model(nodes, [], [helper.make_tensor_value_info("c", T.INT64, None)])
    rep = Backend.prepare(model, "CPU")
    assert len(rep.graph.node) == 0 and list(rep.folded) == ["Constant"]
    (c,) = rep.run({})
    assert c.dtype == np.int64
    np.testing.assert_array_equal(c, [4, 5, 6])


def test_a_fold_neither_engine_can_run_leaves_the_nodes(rng):
    """A Reshape of constants to an impossible shape cannot be evaluated: the nodes stay, the
    summary says why, and the run fails the way it did before folding existed."""
    nodes = [n("Constant", [], ["c"], value=numpy_helper.from_array(np.ones(6, np.float32))),
             n("Constant", [], ["s"], value_ints=[4, 4]), n("Reshape", ["c", "s"], ["r"]), n("Add", ["x", "r"], ["y"])]
    model = _model(nodes, [helper.make_tensor_value_info("x", T.FLOAT, [4, 4])],
                   [helper.make_tensor_value_info("y", T.FLOAT, None)])
    rep = Backend.prepare(model, "CPU")
    assert sorted(rep.folded) == ["Constant", "Constant"]
    assert [node.op_type for node in rep.graph.node] == ["Reshape", "Add"]
    assert "constant nodes not folded (" in rep.summary()
    with pytest.raises(Exception, match="(?i)reshape"):
        rep.run({"x": np.ones((4, 4), np.float32)})


def test_an_identity_of_a_constant_is_read_through(rng):
    """The readers of an Identity of a weight (torch's export of tied weights) read the weight
    itself: no second copy; an Identity that is a graph output is the one copy."""
    w = numpy_helper.from_array(rng.standard_normal((3, 3)).astype(np.float32), "w")
    nodes = [n("Identity", ["w"], ["w1"]), n("Identity", ["w1"], ["w2"]), n("MatMul", ["x", "w2"], ["y"]),
             n("Add", ["y", "w1"], ["z"])]
    model = _model(nodes, [helper.make_tensor_value_info("x", T.FLOAT, [3, 3])],
                   [helper.make_tensor_value_info("z", T.FLOAT, None), helper.make_tensor_value_info("w2", T.FLOAT, None)],
                   [w])
    rep = Backend.prepare(model, "CPU")
    assert list(rep.folded) == ["Identity", "Identity"]
    assert [list(node.input) for node in rep.graph.node] == [["x", "w"], ["y", "w"]]
    assert "w1" not in rep.constants and "w2" in rep.constants
    x = rng.standard_normal((3, 3)).astype(np.float32)
    for g, want in zip(rep.run({"x": x}), _ort(model, {"x": x})):
        np.testing.assert_allclose(g, want, rtol=1e-6, atol=1e-6)


def test_a_node_folded_over_an_identity_of_a_constant_reads_the_source(rng):
    """A foldable node that reads an Identity of a constant (a tied weight then transposed) is
    evaluated on the source: the fold succeeds (it failed on the alias's name and left every
    node of the graph unfolded)."""
    w = numpy_helper.from_array(rng.standard_normal((3, 4)).astype(np.float32), "w")
    nodes = [n("Identity", ["w"], ["w1"]), n("Transpose", ["w1"], ["wt"], perm=[1, 0]),
             n("Neg", ["wt"], ["wn"]), n("MatMul", ["x", "wn"], ["y"])]
    model = _model(nodes, [helper.make_tensor_value_info("x", T.FLOAT, [2, 4])],
                   [helper.make_tensor_value_info("y", T.FLOAT, None)], [w])
    rep = Backend.prepare(model, "CPU")
    assert rep.fold_note == "" and sorted(rep.folded) == ["Identity", "Neg", "Transpose"]
    assert [node.op_type for node in rep.graph.node] == ["MatMul"]
    x = rng.standard_normal((2, 4)).astype(np.float32)
    np.testing.assert_allclose(rep.run({"x": x})[0], _ort(model, {"x": x})[0], rtol=1e-6, atol=1e-6)


def test_a_node_no_engine_runs_leaves_the_other_folds_standing(rng):
    """One impossible Reshape of constants stays a node (with its readers); the independent
    constant chain beside it still folds."""
    w = numpy_helper.from_array(rng.standard_normal((4, 4)).astype(np.float32), "w")
    nodes = [n("Constant", [], ["c"], value=numpy_helper.from_array(np.ones(6, np.float32))),
             n("Constant", [], ["s"], value_ints=[4, 4]), n("Reshape", ["c", "s"], ["r"]),
             n("Neg", ["w"], ["wn"]), n("Add", ["x", "wn"], ["y"]), n("Add", ["y", "r"], ["z"])]
    model = _model(nodes, [helper.make_tensor_value_info("x", T.FLOAT, [4, 4])],
                   [helper.make_tensor_value_info("y", T.FLOAT, None), helper.make_tensor_value_info("z", T.FLOAT, None)],
                   [w])
    rep = Backend.prepare(model, "CPU")
    assert sorted(rep.folded) == ["Constant", "Constant", "Neg"] and "not folded (" in rep.fold_note
    assert [node.op_type for node in rep.graph.node] == ["Reshape", "Add", "Add"]


def test_one_element_quantization_folds_for_the_plan(rng):
    """A QDQ model's Pad value: Constant -> QuantizeLinear -> DequantizeLinear of one element folds
    (the host needs it while planning; before, the run went node by node); a quantized tensor of more
    elements stays quantized."""
    nodes = [n("Constant", [], ["v"], value=numpy_helper.from_array(np.array(0.37, np.float32))),
             n("QuantizeLinear", ["v", "s", "z"], ["vq"]), n("DequantizeLinear", ["vq", "s", "z"], ["vd"]),
             n("Pad", ["x", "pads", "vd"], ["p"]),
             n("DequantizeLinear", ["wq", "s", "z"], ["w"]), n("Add", ["p", "w"], ["y"])]
    inits = [numpy_helper.from_array(np.array(0.01, np.float32), "s"), numpy_helper.from_array(np.array(3, np.uint8), "z"),
             numpy_helper.from_array(np.array([0, 1, 0, 2], np.int64), "pads"),
             numpy_helper.from_array(rng.integers(0, 256, (2, 8)).astype(np.uint8), "wq")]
    m = _model(nodes, [helper.make_tensor_value_info("x", T.FLOAT, [2, 5])], [helper.make_tensor_value_info("y", T.FLOAT, None)],
               inits)
    rep = Backend.prepare(m, "CPU")
    assert sorted(rep.folded) == ["Constant", "DequantizeLinear", "QuantizeLinear"], rep.folded
    assert [x.op_type for x in rep.graph.node] == ["Pad", "DequantizeLinear", "Add"]
    x = rng.standard_normal((2, 5)).astype(np.float32)
    for _ in range(2):
        (got,) = rep.run({"x": x})
        assert not rep.last_run.events, rep.last_run.events  # the whole-graph plan: no node-by-node note
        assert (rep.last_run.uploads, rep.last_run.downloads) == (1, 1)
        np.testing.assert_array_equal(got, _ort(m, {"x": x})[0])


def test_quantized_shape_arithmetic_resolves_on_the_host(rng):
    """quantize_static's QDQ pairs on float shape arithmetic (MobileViT's ceil(h / patch)): the
    QuantizeLinear of host-known values resolves on the host (its one-node engine), so the Reshape
    that reads the result plans with the rest (before, the run went node by node)."""
    nodes = [n("Shape", ["x"], ["sh"]), n("Gather", ["sh", "one"], ["w"], axis=0), n("Cast", ["w"], ["wf"], to=T.FLOAT),
             n("QuantizeLinear", ["wf", "s", "z"], ["wq"]), n("DequantizeLinear", ["wq", "s", "z"], ["wd"]),
             n("Cast", ["wd"], ["wi"], to=T.INT64), n("Unsqueeze", ["wi", "ax"], ["wu"]),
             n("Concat", ["minus1", "wu"], ["shape"], axis=0), n("Reshape", ["x", "shape"], ["r"]), n("Relu", ["r"], ["y"])]
    inits = [numpy_helper.from_array(np.array(1, np.int64), "one"), numpy_helper.from_array(np.array(1.0, np.float32), "s"),
             numpy_helper.from_array(np.array(0, np.uint8), "z"), numpy_helper.from_array(np.array([0], np.int64), "ax"),
             numpy_helper.from_array(np.array([-1], np.int64), "minus1")]
    m = _model(nodes, [helper.make_tensor_value_info("x", T.FLOAT, ["b", 6])], [helper.make_tensor_value_info("y", T.FLOAT, None)],
               inits)
    rep = Backend.prepare(m, "CPU")
    x = rng.standard_normal((4, 6)).astype(np.float32)
    for _ in range(2):
        (got,) = rep.run({"x": x})
        assert not rep.last_run.events, rep.last_run.events
        np.testing.assert_array_equal(got, _ort(m, {"x": x})[0])
