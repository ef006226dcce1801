"""ONNX ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd, ReduceSumSquare, ReduceL1, ReduceL2,
ReduceLogSum, ReduceLogSumExp, ArgMax and ArgMin through Backend.prepare(model, "CPU").run against
onnxruntime's CPU results, placed on Vulkan (rep.placement); axes as an attribute (opset 13) and as
a constant input (opset 18), keepdims, negative axes, noop_with_empty_axes; fed axes (read on the
host per run); select_last_index = 1 (the axis reversed) on the device; Llama's RMSNorm (Pow -> ReduceMean -> Add -> Sqrt ->
Reciprocal -> Mul) wholly on the device."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from kompute_dml.onnx_backend import Backend  # noqa: E402

REDUCES = ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceSumSquare", "ReduceL1",
           "ReduceL2", "ReduceLogSum", "ReduceLogSumExp")
SHAPE = (3, 4, 5)


def model_of(nodes, inits, out_shape, out_type, opset, in_type=TensorProto.FLOAT):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", in_type, list(SHAPE))],
                              [helper.make_tensor_value_info("y", out_type, out_shape)], initializer=inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def ort_run(model, feeds):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def x_for(op, dtype=np.float32):
    rng = np.random.default_rng(7)
    x = rng.uniform(0.5, 1.5, SHAPE) if op in ("ReduceLogSum", "ReduceProd") else rng.standard_normal(SHAPE) * 2
    return x.astype(dtype)


def check(model, x, op, device_op="REDUCE"):
    rep = Backend.prepare(model, "CPU")
    got = rep.run({"x": x})[0]
    want = ort_run(model, {"x": x})[0]
    assert got.shape == want.shape and got.dtype == want.dtype
    if want.dtype.kind in "iu" or op in ("ReduceMax", "ReduceMin"):
        np.testing.assert_array_equal(got, want)  # indices and extremes are exact
    else:
        # both float32 results of float64-exact values: well within 1e-5 relative at 5-60 terms
        np.testing.assert_allclose(got, want, rtol=2e-5 if x.dtype == np.float32 else 2e-3, atol=1e-6)
    return rep


@pytest.mark.parametrize("op", REDUCES)
@pytest.mark.parametrize(("opset", "axes", "keepdims"), [(13, [1], 1), (13, [-1, 0], 0), (18, [2, -2], 1),
                                                         (18, None, 0)], ids=str)
def test_reduce_nodes(op, opset, axes, keepdims):
    as_input = opset >= 18 or (op == "ReduceSum" and opset >= 13)
    inits, inputs, attrs = [], ["x"], {"keepdims": keepdims}
    if axes is not None and as_input:
        inits.append(numpy_helper.from_array(np.array(axes, np.int64), "axes"))
        inputs.append("axes")
    elif axes is not None:
        attrs["axes"] = axes
    red = {a % 3 for a in axes} if axes is not None else {0, 1, 2}
    out_shape = [1 if d in red else s for d, s in enumerate(SHAPE)] if keepdims else \
        [s for d, s in enumerate(SHAPE) if d not in red]
    model = model_of([helper.make_node(op, inputs, ["y"], **attrs)], inits, out_shape, TensorProto.FLOAT, opset)
    rep = check(model, x_for(op), op)
    assert [(p.target, p.operator) for p in rep.placement] == [("vulkan", "REDUCE")]


@pytest.mark.parametrize("op", ("ArgMax", "ArgMin"))
@pytest.mark.parametrize(("axis", "keepdims"), [(0, 1), (-1, 0), (1, 1)], ids=str)
@pytest.mark.parametrize("dtype", (np.float32, np.float16, np.int32))
def test_arg_nodes(op, axis, keepdims, dtype):
    out_shape = [1 if d == axis % 3 else s for d, s in enumerate(SHAPE)] if keepdims else \
        [s for d, s in enumerate(SHAPE) if d != axis % 3]
    et = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    model = model_of([helper.make_node(op, ["x"], ["y"], axis=axis, keepdims=keepdims)], [], out_shape,
                     TensorProto.INT64, 13, in_type=et)
    x = np.round(x_for(op) * 3).astype(dtype)  # ties: the first index wins in both
    rep = check(model, x, op)
    assert [(p.target, p.operator) for p in rep.placement] == [("vulkan", "REDUCE")]


def test_float16_sum():
    model = model_of([helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=1)],
                     [numpy_helper.from_array(np.array([1], np.int64), "axes")], [3, 1, 5], TensorProto.FLOAT16, 13,
                     in_type=TensorProto.FLOAT16)
    check(model, x_for("ReduceSum", np.float16), "ReduceSum")


def test_noop_with_empty_axes():
    model = model_of([helper.make_node("ReduceSum", ["x"], ["y"], keepdims=1, noop_with_empty_axes=1)], [],
                     list(SHAPE), TensorProto.FLOAT, 13)
    rep = check(model, x_for("ReduceSum"), "ReduceSum")
    assert rep.placement[0].target == "vulkan"


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("axis, keepdims", [(1, 1), (0, 0), (-1, 1)])
def test_select_last_index_on_the_device(op, axis, keepdims):
    """The last index of ties (small integers make many) as onnxruntime's: REDUCE over the axis
    reversed by SLICE1, mapped back by a GATHER."""
    x = np.round(x_for(op) / 4).astype(np.float32)
    model = model_of([helper.make_node(op, ["x"], ["y"], axis=axis, keepdims=keepdims, select_last_index=1)], [],
                     None, TensorProto.INT64, 13)
    rep = Backend.prepare(model, "CPU")
    got = rep.run({"x": x})[0]
    np.testing.assert_array_equal(got, ort_run(model, {"x": x})[0])
    assert rep.placement[0].target == "vulkan" and rep.last_run.runtime_fallbacks == 0, rep.last_run.events
    first = (np.argmax if op == "ArgMax" else np.argmin)(x, axis=axis, keepdims=bool(keepdims))
    assert (got != first).any()  # ties: the last index is not the first


def test_fed_axes_on_device():
    graph = helper.make_graph([helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=1)], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(SHAPE)),
                               helper.make_tensor_value_info("axes", TensorProto.INT64, [None])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    rep = Backend.prepare(m, "CPU")
    x = x_for("ReduceSum")
    # a fed axes input is read on the host at each run (node by node): one prepared model, its
    # axes changed between runs, each against numpy's float64 sum and onnxruntime
    for axes in ([2], [0, -1], [1], [2]):
        feeds = {"x": x, "axes": np.array(axes, np.int64)}
        got = rep.run(feeds)[0]
        np.testing.assert_allclose(got, x.astype(np.float64).sum(axis=tuple(axes), keepdims=True), rtol=1e-5)
        np.testing.assert_allclose(got, ort_run(m, feeds)[0], rtol=1e-6)
    assert rep.placement[0].target == "vulkan" and rep.last_run.runtime_fallbacks == 0


def test_llama_rmsnorm_on_device():
    """Llama's RMSNorm export: x * 1/sqrt(mean(x^2, -1) + eps) * weight, every node on Vulkan."""
    w = numpy_helper.from_array(np.linspace(0.5, 1.5, 5).astype(np.float32), "w")
    two = numpy_helper.from_array(np.array(2.0, np.float32), "two")
    eps = numpy_helper.from_array(np.array(1e-6, np.float32), "eps")
    nodes = [helper.make_node("Pow", ["x", "two"], ["sq"]),
             helper.make_node("ReduceMean", ["sq"], ["ms"], axes=[-1], keepdims=1),
             helper.make_node("Add", ["ms", "eps"], ["mse"]), helper.make_node("Sqrt", ["mse"], ["rms"]),
             helper.make_node("Reciprocal", ["rms"], ["inv"]), helper.make_node("Mul", ["x", "inv"], ["xn"]),
             helper.make_node("Mul", ["xn", "w"], ["y"])]
    model = model_of(nodes, [w, two, eps], list(SHAPE), TensorProto.FLOAT, 17)
    x = x_for("ReduceMean")
    rep = Backend.prepare(model, "CPU")
    np.testing.assert_allclose(rep.run({"x": x})[0], ort_run(model, {"x": x})[0], rtol=1e-5, atol=1e-6)
    assert all(p.target == "vulkan" for p in rep.placement), rep.summary()
    assert rep.summary().startswith("7 of 7 nodes on Vulkan")
