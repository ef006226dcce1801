"""The exported exact GELU (kompute_dml/onnx_backend/fusion_gelu.py): Div(x, sqrt 2) or Mul(x, 1 / sqrt 2)
-> Erf -> Add(1) -> Mul(x, .) -> Mul(0.5), or the dynamo exporter's Mul(0.5) -> Mul(x, .), each operand on
either side (and after a MatMul and its bias: one GEMM), runs as one ACTIVATION_GELU
dispatch within float32 (float16) rounding of a float64 reference and of the unfused nodes; other
constants, or a Mul reading another value, run node by node with the unfused bits."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

from kompute_dml.onnx_backend import Backend  # noqa: E402

N = helper.make_node
ELEM = {np.float32: T.FLOAT, np.float16: T.FLOAT16}


def _model(dt=np.float32, head="Div", sides=(0, 0, 0), consts=None, other=False, half_first=False):
    c = {"s": math.sqrt(2.0) if head == "Div" else math.sqrt(0.5), "one": 1.0, "half": 0.5, **(consts or {})}

    def pair(a, b, side):
        return [a, b] if side == 0 else [b, a]

    x2 = "z" if other else "x"
    nodes = [N(head, ["x", "s"], ["h"]), N("Erf", ["h"], ["e"]), N("Add", pair("e", "one", sides[0]), ["p"])]
    if half_first:  # the dynamo exporter's order
        nodes += [N("Mul", pair("p", "half", sides[2]), ["m"]), N("Mul", pair("m", x2, sides[1]), ["y"])]
    else:
        nodes += [N("Mul", pair("p", x2, sides[1]), ["m"]), N("Mul", pair("m", "half", sides[2]), ["y"])]
    inits = [numpy_helper.from_array(np.array(v, dt), k) for k, v in c.items()]
    inputs = [helper.make_tensor_value_info(n, ELEM[dt], ["B", 33]) for n in (["x", "z"] if other else ["x"])]
    g = helper.make_graph(nodes, "gelu", inputs, [helper.make_tensor_value_info("y", ELEM[dt], None)], initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def _x(rng, dt, rows=4):
    x = (rng.standard_normal((rows, 33)) * 4).astype(dt)
    x[0, :6] = (0.0, -0.0, 30.0, -30.0, 1e-30 if dt == np.float32 else 1e-4, -6.0)
    return x


def _close(y, want, x, eps):
    """|y - want| within eps of want plus eps times |x|: 1 + erf(x / sqrt 2) cancels for x far below 0,
    where any float evaluation of the formula keeps only its absolute error (about |x| ulp(1))."""
    y, want, x = (v.astype(np.float64) for v in (y, want, x))
    bad = np.abs(y - want) > eps * (np.abs(want) + 4 * np.abs(x)) + 1e-37
    assert not bad.any(), list(zip(x[bad][:5], y[bad][:5], want[bad][:5]))


def _gelu64(x):
    from math import erf
    x = x.astype(np.float64)
    return x * 0.5 * (1.0 + np.vectorize(erf)(x / math.sqrt(2.0)))


@pytest.mark.parametrize("half_first", [False, True], ids=["torchscript", "dynamo"])
@pytest.mark.parametrize("head,sides", list(itertools.product(("Div", "Mul"), itertools.product((0, 1), repeat=3))))
def test_exported_gelu_is_one_dispatch(rng, head, sides, half_first):
    model = _model(head=head, sides=sides, half_first=half_first)
    x = _x(rng, np.float32)
    rep = Backend.prepare(model, "CPU")
    (y,) = rep.run({"x": x})
    assert rep.last_run.dispatches == 1 and "ACTIVATION_GELU" in rep.summary()
    _close(y, _gelu64(x), x, 2.4e-7)
    (unfused,) = Backend.prepare(model, "CPU", fuse=False).run({"x": x})
    _close(y, unfused, x, 6e-7)
    rep.state.node_by_node = True
    assert np.array_equal(rep.run({"x": x})[0], y)


def test_float16_gelu(rng):
    x = _x(rng, np.float16)
    rep = Backend.prepare(_model(np.float16), "CPU")
    (y,) = rep.run({"x": x})
    assert y.dtype == np.float16 and rep.last_run.dispatches == 1
    _close(y, _gelu64(x), x, 1e-3)


@pytest.mark.parametrize("half_first", [False, True], ids=["torchscript", "dynamo"])
@pytest.mark.parametrize("case", ["divisor 2", "add 2", "half 0.25", "another value"])
def test_other_chains_run_node_by_node(rng, case, half_first):
    consts = {"divisor 2": {"s": 2.0}, "add 2": {"one": 2.0}, "half 0.25": {"half": 0.25}}.get(case)
    model = _model(consts=consts, other=case == "another value", half_first=half_first)
    feeds = {"x": _x(rng, np.float32)}
    if case == "another value":
        feeds["z"] = _x(rng, np.float32)
    rep = Backend.prepare(model, "CPU")
    (y,) = rep.run(feeds)
    (want,) = Backend.prepare(model, "CPU", fuse=False).run(feeds)
    assert not rep.fusions.by_carrier and rep.last_run.dispatches == 5
    assert np.array_equal(y.view(np.uint32), want.view(np.uint32))



def _tanh_model():
    """The tanh chain as torch.onnx.export writes GELU(approximate="tanh")."""
    a, b = (float(np.float32(v)) for v in (math.sqrt(2 / math.pi), 0.044715))
    nodes = [N("Mul", ["x", "half"], ["h"]), N("Pow", ["x", "three"], ["t0"]), N("Mul", ["t0", "cb"], ["t1"]),
             N("Add", ["x", "t1"], ["t2"]), N("Mul", ["t2", "ca"], ["t3"]), N("Tanh", ["t3"], ["t4"]),
             N("Add", ["t4", "one"], ["t5"]), N("Mul", ["h", "t5"], ["y"])]
    inits = [numpy_helper.from_array(np.array(v, np.float32), k)
             for k, v in {"half": 0.5, "three": 3.0, "cb": b, "ca": a, "one": 1.0}.items()]
    g = helper.make_graph(nodes, "gelu_tanh", [helper.make_tensor_value_info("x", T.FLOAT, ["B", 33])],
                          [helper.make_tensor_value_info("y", T.FLOAT, None)], initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


@pytest.mark.parametrize("form", ["erf", "tanh"])
def test_types_the_graph_does_not_declare(rng, form):
    """x behind a com.microsoft FastGelu, whose output onnx's shape inference cannot type (as in
    onnxruntime's optimized graphs): either GELU chain is still one dispatch (its type checked at run
    time; the tanh chain's constants read at their own type), with the bits of the chain on a typed x."""
    model = _model() if form == "erf" else _tanh_model()
    x = _x(rng, np.float32)
    front = helper.make_model(helper.make_graph(
        [N("FastGelu", ["x_in"], ["x"], domain="com.microsoft")], "front",
        [helper.make_tensor_value_info("x_in", T.FLOAT, ["B", 33])], [helper.make_tensor_value_info("x", T.FLOAT, None)]),
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)], ir_version=10)
    (gx,) = Backend.prepare(front, "CPU").run({"x_in": x})
    (want,) = Backend.prepare(model, "CPU").run({"x": gx})
    model.graph.input[0].name = "x_in"
    model.graph.node.insert(0, front.graph.node[0])
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    rep = Backend.prepare(model, "CPU")
    (y,) = rep.run({"x_in": x})
    assert rep.last_run.dispatches == 2 and "ACTIVATION_GELU" in rep.summary(), rep.summary()
    assert np.array_equal(y.view(np.uint32), want.view(np.uint32))
