"""The exported RMS normalization (kompute_dml/onnx_backend/fusion_rmsnorm.py) on hand-built
models: every variant torch.onnx.export writes (1 / s by Div or Reciprocal, or x / s at once; the
operands on either side; a Cast to x's own type or none; ReduceMean's axes as an attribute
(opset 17) or an input (18)) runs as one dispatch, within float32 rounding of a float64 numpy
reference and of onnxruntime; chains that are not an RMS normalization (another exponent,
another axis, a fed epsilon, another value normalized, a weight over more than the last axis)
run node by node with the unfused results. A Cast to a value's own type is a view (no
dispatch), its bits the input's."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

from kompute_dml.onnx_backend import Backend  # noqa: E402

N = helper.make_node
ELEM = {np.float32: T.FLOAT, np.float16: T.FLOAT16}
HIDDEN = 48
EPS = 1e-6


def _rms_model(dt=np.float32, inv="Div", x_side=0, cast=False, w_side=0, eps_side=1, opset=17, exponent=2.0,
               axes=(-1,), eps_input=False, normalized="x", weight_shape=(HIDDEN,)):
    rng = np.random.default_rng(7)
    c = {"two": np.array(exponent, dt), "eps": np.array(EPS, dt), "one": np.array(1.0, dt),
         "w": (rng.standard_normal(weight_shape) + 1).astype(dt)}
    mean_in = ["sq"] + (["axes"] if opset >= 18 else [])
    mean_attrs = {} if opset >= 18 else {"axes": list(axes)}
    nodes = [N("Pow", ["x", "two"], ["sq"]), N("ReduceMean", mean_in, ["ms"], keepdims=1, **mean_attrs),
             N("Add", ["ms", "eps"][::1 if eps_side else -1], ["var"]), N("Sqrt", ["var"], ["rms"])]
    if inv == "Div":
        nodes += [N("Div", ["one", "rms"], ["inv"]), N("Mul", [normalized, "inv"][::1 if x_side == 0 else -1], ["h"])]
    elif inv == "Reciprocal":
        nodes += [N("Reciprocal", ["rms"], ["inv"]), N("Mul", [normalized, "inv"][::1 if x_side == 0 else -1], ["h"])]
    else:
        nodes.append(N("Div", [normalized, "rms"], ["h"]))
    if cast:
        nodes.append(N("Cast", ["h"], ["hc"], to=ELEM[dt]))
    nodes.append(N("Mul", ["w", "hc" if cast else "h"][::1 if w_side == 0 else -1], ["y"]))
    inits = [numpy_helper.from_array(v, k) for k, v in c.items() if not (k == "eps" and eps_input)]
    if opset >= 18:
        inits.append(numpy_helper.from_array(np.array(axes, np.int64), "axes"))
    inputs = [helper.make_tensor_value_info("x", ELEM[dt], ["B", "S", HIDDEN])]
    if eps_input:
        inputs.append(helper.make_tensor_value_info("eps", ELEM[dt], []))
    if normalized != "x":
        inputs.append(helper.make_tensor_value_info(normalized, ELEM[dt], ["B", "S", HIDDEN]))
    g = helper.make_graph(nodes, "rms", inputs, [helper.make_tensor_value_info("y", ELEM[dt], None)], initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


def _feeds(rng, dt=np.float32, shape=(2, 5, HIDDEN)):
    x = (rng.standard_normal(shape) * 3).astype(dt)
    x[0, 0] = 0  # a row of zeros: epsilon alone in the denominator
    x[1, 1, :3] = (3e4 if dt == np.float16 else 1e18, -2, 0.5)  # a square near the float32 range
    return {"x": x}


def _numpy_rms(x, w):
    x = x.astype(np.float64)
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + EPS) * w.astype(np.float64)


def _weight(model):
    return next(numpy_helper.to_array(t) for t in model.graph.initializer if t.name == "w")


VARIANTS = [v for v in itertools.product(("Div", "Reciprocal", None), (0, 1), (False, True), (0, 1), (0, 1), (17, 18))
            if not (v[0] is None and v[1])]


@pytest.mark.parametrize("inv,x_side,cast,w_side,eps_side,opset", VARIANTS)
def test_exported_rms_norm_is_one_dispatch(rng, inv, x_side, cast, w_side, eps_side, opset):
    model = _rms_model(inv=inv, x_side=x_side, cast=cast, w_side=w_side, eps_side=eps_side, opset=opset)
    rep = Backend.prepare(model, "CPU")
    feeds = _feeds(rng)
    (y,) = rep.run(feeds)
    assert rep.last_run.dispatches == 1 and rep.last_run.cpu_segments == 0
    assert len(rep.fusions.by_carrier) == 1 and "MEAN_VARIANCE_NORMALIZATION1" in rep.summary()
    want = _numpy_rms(feeds["x"], _weight(model))
    np.testing.assert_allclose(y, want, rtol=2e-6, atol=1e-30)
    (o,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    np.testing.assert_allclose(y, o, rtol=1e-5, atol=1e-30)
    rep.state.node_by_node = True  # the eager executor runs the same fused dispatch
    assert np.array_equal(rep.run(feeds)[0], y)


def test_float16_rms_norm_has_float32_statistics(rng):
    model = _rms_model(np.float16, cast=True)
    rep = Backend.prepare(model, "CPU")
    feeds = _feeds(rng, np.float16)
    (y,) = rep.run(feeds)
    assert y.dtype == np.float16 and rep.last_run.dispatches == 1
    want = _numpy_rms(feeds["x"], _weight(model))
    np.testing.assert_allclose(y.astype(np.float64), want, rtol=2e-3, atol=1e-6)


@pytest.mark.parametrize("case", ["exponent 3", "axis -2", "fed epsilon", "another value", "weight over rows",
                                  "keep a second reader"])
def test_other_chains_run_node_by_node(rng, case):
    kw: dict = {}
    feeds = _feeds(rng)
    if case == "exponent 3":
        kw["exponent"] = 3.0
        # positive rows: a mean of cubes of both signs can cancel to near 0, and its square root
        # then spreads a summation-order difference past the tolerance (seed 1017004193 did)
        feeds["x"] = np.abs(feeds["x"])
    elif case == "axis -2":
        kw["axes"] = (-2,)
    elif case == "fed epsilon":
        kw["eps_input"] = True
        feeds["eps"] = np.array(EPS, np.float32)
    elif case == "another value":
        kw["normalized"] = "z"
        feeds["z"] = rng.standard_normal(feeds["x"].shape).astype(np.float32)
    elif case == "weight over rows":
        kw["weight_shape"] = (5, HIDDEN)
    model = _rms_model(**kw)
    if case == "keep a second reader":  # the mean square is a graph output too
        model.graph.output.append(helper.make_tensor_value_info("ms", T.FLOAT, None))
    rep = Backend.prepare(model, "CPU")
    outs = rep.run(feeds)
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    unfused = Backend.prepare(model, "CPU", fuse=False).run(feeds)
    for o, r, u in zip(outs, ref, unfused):
        np.testing.assert_allclose(o, r, rtol=1e-5, atol=1e-6)
        assert np.array_equal(o.view(np.uint32), u.view(np.uint32))  # the nodes' own bits (NaN where a mean is negative)
    if case == "weight over rows":  # matched at prepare, refused by the run's shapes
        assert "ran unfused" in " ".join(rep.last_run.events)
    else:
        assert not rep.fusions.by_carrier
    assert rep.last_run.dispatches >= 6


@pytest.mark.parametrize("dt", [np.float32, np.float16, np.int32, np.uint8])
def test_cast_to_its_own_type_is_a_view(rng, dt):
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dt))
    nodes = [N("Add", ["x", "x"], ["s"]), N("Cast", ["s"], ["c"], to=elem), N("Add", ["c", "x"], ["y"])]
    g = helper.make_graph(nodes, "cast", [helper.make_tensor_value_info("x", elem, [3, 7])],
                          [helper.make_tensor_value_info("y", elem, None), helper.make_tensor_value_info("c", elem, None)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    x = rng.standard_normal((3, 7)).astype(dt) if np.dtype(dt).kind == "f" else rng.integers(0, 50, (3, 7)).astype(dt)
    if np.dtype(dt) == np.float32:
        x[0, :2] = (np.nan, -0.0)
    rep = Backend.prepare(model, "CPU")
    y, c = rep.run({"x": x})
    assert rep.last_run.dispatches == 2  # the two Adds
    (s,) = Backend.prepare(model, "CPU", exclude_ops=["Cast"]).run({"x": x})[1:]  # the Add's own bits (NaN payloads are the device's)
    assert np.array_equal(c.view(f"u{c.dtype.itemsize}"), s.view(f"u{s.dtype.itemsize}"))
    np.testing.assert_array_equal(c, x + x)
    np.testing.assert_array_equal(y, x + x + x)
