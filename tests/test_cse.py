"""Common sub-expressions merged at prepare (kompute_dml/onnx_backend/cse.py): a node repeating an earlier
one's op, attributes and inputs (small constants compared by value) is read through the earlier one;
random draws, nodes writing graph outputs, graphs with sub-graphs and inputs' overridable defaults are
not; results equal onnxruntime's and the unmerged model's."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

from kompute_dml.onnx_backend import Backend  # noqa: E402

N = helper.make_node


def _model(nodes, inits, outputs=("y",), extra_inputs=()):
    g = helper.make_graph(nodes, "cse", [helper.make_tensor_value_info("x", T.FLOAT, [2, 5]), *extra_inputs],
                          [helper.make_tensor_value_info(o, T.FLOAT, None) for o in outputs], initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def _c(name, value):
    return numpy_helper.from_array(np.asarray(value, np.float32), name)


def _check(model, feeds, merged):
    rep = Backend.prepare(model, "CPU")
    assert rep.merged == merged, rep.summary()
    got = rep.run(feeds)
    want = Backend.prepare(model, "CPU", fuse=False).run(feeds)
    ort = pytest.importorskip("onnxruntime")
    theirs = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    for a, b, c in zip(got, want, theirs):
        assert np.array_equal(a, b)
        np.testing.assert_allclose(a, c, rtol=1e-6)
    return rep


def test_repeated_chains_with_constants_of_their_own_merge(rng):
    """Each chain's constant by another name but the same value (as every exported layer's own Constant
    nodes): the second chain's two nodes read through the first's."""
    nodes = [N("Mul", ["x", "a1"], ["m1"]), N("Add", ["m1", "b1"], ["s1"]),
             N("Mul", ["x", "a2"], ["m2"]), N("Add", ["m2", "b2"], ["s2"]), N("Mul", ["s1", "s2"], ["y"])]
    model = _model(nodes, [_c("a1", 3.0), _c("a2", 3.0), _c("b1", [1, 2, 3, 4, 5]), _c("b2", [1, 2, 3, 4, 5])])
    rep = _check(model, {"x": rng.standard_normal((2, 5)).astype(np.float32)}, merged=2)
    assert "2 nodes repeated" in rep.summary()


@pytest.mark.parametrize("case", ["other value", "graph output", "random", "overridable", "sub-graph"])
def test_what_is_not_merged(rng, case):
    x = rng.standard_normal((2, 5)).astype(np.float32)
    inits = [_c("a1", 3.0), _c("a2", 3.0 if case != "other value" else 4.0)]
    nodes = [N("Mul", ["x", "a1"], ["m1"]), N("Mul", ["x", "a2"], ["m2"]), N("Add", ["m1", "m2"], ["y"])]
    outputs, extra, feeds = ("y",), (), {"x": x}
    if case == "graph output":
        outputs = ("y", "m2")
    elif case == "overridable":  # a graph input with a default: a feed may change it
        extra = (helper.make_tensor_value_info("a2", T.FLOAT, []),)
        feeds["a2"] = np.array(5.0, np.float32)
    elif case == "random":  # two draws of one shape: never one (nor two Dropouts: in training mode, draws)
        nodes = [N("RandomUniformLike", ["x"], ["r1"], seed=1.0), N("RandomUniformLike", ["x"], ["r2"], seed=1.0),
                 N("Dropout", ["x"], ["d1"]), N("Dropout", ["x"], ["d2"]), N("Sub", ["r1", "r2"], ["t"]),
                 N("Add", ["d1", "d2"], ["u"]), N("Add", ["t", "u"], ["y"])]
    elif case == "sub-graph":  # a sub-graph may read values by name: the graph is left as it is
        branch = helper.make_graph([N("Identity", ["m1"], ["z"])], "b", [], [helper.make_tensor_value_info("z", T.FLOAT, None)])
        nodes += [N("ReduceSum", ["x"], ["s"], keepdims=0), N("Greater", ["s", "a1"], ["c"]),
                  N("If", ["c"], ["w"], then_branch=branch, else_branch=branch)]
        outputs = ("y", "w")
    model = _model(nodes, inits, outputs, extra)
    if case == "random":
        assert Backend.prepare(model, "CPU").merged == 0
        return
    _check(model, feeds, merged=0)
