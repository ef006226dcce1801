"""Rotary embedding as transformers' Llama exports it (kompute_dml/onnx_backend/fusion_rotary.py):
Slice(x, D/2:) -> Neg -> Concat(., Slice(x, :D/2)) -> Mul(sin), Mul(x, cos) -> Add, the half from
shape arithmetic, each operand on either side, runs as one ROTARY_EMBEDDING dispatch with the bits
of the unfused nodes (FLOAT32 and FLOAT16), within float32 rounding of onnxruntime; slices that are
not the two halves run node by node."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

from kompute_dml.onnx_backend import Backend  # noqa: E402

N = helper.make_node
ELEM = {np.float32: T.FLOAT, np.float16: T.FLOAT16}


def _model(dt=np.float32, sides=(0, 0, 0), cut=None, third=False):
    """y = x cos + rotate_half(x) sin; `sides`: the sine's Mul, the cosine's Mul, the Add operands
    swapped; `cut`: the slices at this constant instead of D/2 (not the halves); `third`: the Concat
    takes an empty slice of x as a third input."""
    def pair(a, b, side):
        return [a, b] if side == 0 else [b, a]

    ints = {"three": [3], "two": [2], "zero": [0], "big": [2 ** 62], "last": [-1], "one": [1], "ax0": [0]}
    nodes = [N("Shape", ["x"], ["sh"]), N("Gather", ["sh", "three"], ["d"], axis=0), N("Div", ["d", "two"], ["h"])]
    if cut is not None:
        ints["cutv"] = [cut]
        nodes.append(N("Identity", ["cutv"], ["h1"]))
    else:
        nodes.append(N("Identity", ["h"], ["h1"]))
    nodes += [N("Slice", ["x", "h1", "big", "last", "one"], ["hi"]), N("Neg", ["hi"], ["n"]),
              N("Slice", ["x", "zero", "h1", "last", "one"], ["lo"]),
              N("Concat", ["n", "lo", *(["x0"] if third else [])], ["rot"], axis=-1),
              N("Mul", pair("rot", "sin", sides[0]), ["ms"]), N("Mul", pair("x", "cos", sides[1]), ["mc"]),
              N("Add", pair("mc", "ms", sides[2]), ["y"])]
    if third:
        nodes.insert(0, N("Slice", ["x", "zero", "zero", "last", "one"], ["x0"]))
    inits = [numpy_helper.from_array(np.array(v, np.int64), k) for k, v in ints.items()]
    io = [helper.make_tensor_value_info("x", ELEM[dt], ["B", 4, "S", 16]),
          *(helper.make_tensor_value_info(n, ELEM[dt], ["B", 1, "S", 16]) for n in ("cos", "sin"))]
    g = helper.make_graph(nodes, "rotary", io, [helper.make_tensor_value_info("y", ELEM[dt], None)], initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def _feeds(rng, dt, b=2, s=5):
    x = (rng.standard_normal((b, 4, s, 16)) * 3).astype(dt)
    x[0, 0, 0, :4] = (0.0, -0.0, np.inf, 1e-30 if dt == np.float32 else 1e-6)
    ang = rng.uniform(0, 6.3, (b, 1, s, 16))
    return {"x": x, "cos": np.cos(ang).astype(dt), "sin": np.sin(ang).astype(dt)}


@pytest.mark.parametrize("sides", list(itertools.product((0, 1), repeat=3)))
def test_exported_rotary_is_one_dispatch(rng, sides):
    model = _model(sides=sides)
    feeds = _feeds(rng, np.float32)
    rep = Backend.prepare(model, "CPU")
    (y,) = rep.run(feeds)
    assert rep.last_run.dispatches == 1 and "ROTARY_EMBEDDING" in rep.summary()
    (unfused,) = Backend.prepare(model, "CPU", fuse=False).run(feeds)
    assert np.array_equal(y.view(np.uint32), unfused.view(np.uint32))
    ort = pytest.importorskip("onnxruntime")
    (want,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    fin = np.isfinite(want)
    assert np.array_equal(fin, np.isfinite(y))
    assert np.allclose(y[fin], want[fin], rtol=3e-7, atol=1e-30)
    rep.state.node_by_node = True
    assert np.array_equal(rep.run(feeds)[0].view(np.uint32), y.view(np.uint32))


def test_types_the_graph_does_not_declare(rng):
    """x behind a com.microsoft FastGelu, whose output onnx's shape inference cannot type (as in
    onnxruntime's optimized Llama graphs): the chain is fused, its type checked at run time."""
    model = _model()
    model.graph.input[0].name = "x_in"
    model.graph.node.insert(0, helper.make_node("FastGelu", ["x_in"], ["x"], domain="com.microsoft"))
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    feeds = _feeds(rng, np.float32)
    feeds["x_in"] = feeds.pop("x")
    rep = Backend.prepare(model, "CPU")
    (y,) = rep.run(feeds)
    assert rep.last_run.dispatches == 2 and "ROTARY_EMBEDDING" in rep.summary(), rep.summary()
    (unfused,) = Backend.prepare(model, "CPU", fuse=False).run(feeds)
    assert np.array_equal(y.view(np.uint32), unfused.view(np.uint32))


def test_float16(rng):
    model = _model(np.float16, sides=(1, 0, 1))
    feeds = _feeds(rng, np.float16, b=1, s=9)
    rep = Backend.prepare(model, "CPU")
    (y,) = rep.run(feeds)
    assert y.dtype == np.float16 and rep.last_run.dispatches == 1
    (unfused,) = Backend.prepare(model, "CPU", fuse=False).run(feeds)
    assert np.array_equal(y.view(np.uint16), unfused.view(np.uint16))


def test_other_slices_run_node_by_node(rng):
    """Slices at 3 of 16: the same chain's shape, not rotate_half; its nodes run one by one."""
    model = _model(cut=3)
    feeds = _feeds(rng, np.float32)
    rep = Backend.prepare(model, "CPU")
    (y,) = rep.run(feeds)
    assert rep.fusions.by_carrier and rep.last_run.dispatches > 1  # matched at prepare, unfused at the run
    (want,) = Backend.prepare(model, "CPU", fuse=False).run(feeds)
    assert np.array_equal(y.view(np.uint32), want.view(np.uint32))


def test_a_concat_of_three_is_not_matched(rng):
    feeds = _feeds(rng, np.float32)
    model = _model(third=True)
    rep = Backend.prepare(model, "CPU")
    assert not rep.fusions.by_carrier
    (y,) = rep.run(feeds)
    (want,) = Backend.prepare(model, "CPU", fuse=False).run(feeds)
    assert np.array_equal(y.view(np.uint32), want.view(np.uint32))
