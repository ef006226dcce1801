"""Plans made from the previous plan of the same input names (onnx_backend/step_reuse.py): a
decoder-like graph whose past grows by one row per run, its present fed back on the device,
every run a new input signature and so a new plan. The steps that read the same values as the
previous plan's take its recorded work; every output equals a float64 numpy reference and, bit for
bit, the same runs of a model whose plans repeat no step; plans made earlier still give their
results when run again after later ones (they share the model's buffers)."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

import kompute_dml as kdml  # noqa: E402
from kompute_dml.onnx_backend import Backend, step_reuse  # noqa: E402

D = 16


def _model(w: np.ndarray, v: np.ndarray, w2: np.ndarray) -> onnx.ModelProto:
    """h = relu(x W); present = concat(past, h) over rows; m = max over rows of present v;
    the row count n of past (shape arithmetic on the host); y = (h + m + n) W2."""
    n = helper.make_node
    inits = [numpy_helper.from_array(w, "W"), numpy_helper.from_array(v, "V"), numpy_helper.from_array(w2, "W2"),
             numpy_helper.from_array(np.array([1], np.int64), "ax1"), numpy_helper.from_array(np.array(1, np.int64), "i1")]
    nodes = [n("MatMul", ["x", "W"], ["h0"]), n("Relu", ["h0"], ["h"]),
             n("Unsqueeze", ["h", "ax1"], ["hx"]), n("Concat", ["past", "hx"], ["present"], axis=1),
             n("MatMul", ["present", "V"], ["s"]), n("ReduceMax", ["s", "ax1"], ["m"], keepdims=0),
             n("Shape", ["past"], ["shp"]), n("Gather", ["shp", "i1"], ["rows"]),
             n("Cast", ["rows"], ["rowsf"], to=T.FLOAT),
             n("Add", ["h", "m"], ["hm"]), n("Add", ["hm", "rowsf"], ["y0"]), n("MatMul", ["y0", "W2"], ["y"])]
    g = helper.make_graph(nodes, "decoder_like",
                          [helper.make_tensor_value_info("x", T.FLOAT, [1, D]),
                           helper.make_tensor_value_info("past", T.FLOAT, [1, "L", D])],
                          [helper.make_tensor_value_info("y", T.FLOAT, None),
                           helper.make_tensor_value_info("present", T.FLOAT, None)], initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def _reference(x, past, w, v, w2):
    x, past, w, v, w2 = (a.astype(np.float64) for a in (x, past, w, v, w2))
    h = np.maximum(x @ w, 0)
    present = np.concatenate([past, h[:, None, :]], axis=1)
    m = (present @ v).max(axis=1)
    return (h + m + past.shape[1]) @ w2, present


def _loop(rep, xs, past0):
    """Runs with each present fed back on the device; per run the outputs on the host and the
    device nodes the run's plan repeated."""
    past, outs, reused = past0, [], []
    for x in xs:
        y, present = rep.run({"x": x, "past": past}, device_outputs=True)
        outs.append((y.numpy(), present.numpy()))
        reused.append(rep.last_run.reused_nodes)
        past = present
    return outs, reused


def test_later_lengths_repeat_the_previous_plans_steps(rng):
    w, v, w2 = (rng.standard_normal(s).astype(np.float32) for s in ((D, D), (D, 1), (D, D)))
    model = _model(w, v, w2)
    xs = [rng.standard_normal((1, D)).astype(np.float32) for _ in range(40)]  # past rows 1..40: size classes crossed
    past0 = rng.standard_normal((1, 1, D)).astype(np.float32)
    fast = Backend.prepare(model, "CPU")
    slow = Backend.prepare(model, "CPU")
    slow.state.step_reuse = False
    got, reused = _loop(fast, xs, past0)
    want, none = _loop(slow, xs, past0)
    assert not any(none)
    assert sum(r > 0 for r in reused[1:]) >= len(xs) // 2, reused  # (a size class crossed: fewer)
    past = past0
    for (y, present), (y_slow, present_slow), x in zip(got, want, xs):
        ry, rp = _reference(x, past, w, v, w2)
        np.testing.assert_allclose(y, ry, rtol=1e-4, atol=1e-4)
        np.testing.assert_array_equal(present[:, :-1], past)  # the past as it was, the new row after it
        np.testing.assert_allclose(present[:, -1], rp[:, -1], rtol=1e-5, atol=1e-6)
        assert y.tobytes() == y_slow.tobytes() and present.tobytes() == present_slow.tobytes()
        past = present
    # an earlier plan run again after the later ones (they share the model's plan buffers)
    past = got[9][1]
    y, present = fast.run({"x": xs[10], "past": kdml.default_device().tensor(past)}, device_outputs=True)
    assert not fast.last_run.planned
    assert y.numpy().tobytes() == got[10][0].tobytes() and present.numpy().tobytes() == got[10][1].tobytes()


def test_a_step_repeats_only_with_the_same_inputs_and_buffers(rng):
    """The model's first plan repeats nothing; its next one repeats the steps before the past's
    concatenation (they read only x and weights: x in the same part of the same input buffer,
    whose size class 5 and 6 rows of past share); after release() the line starts again."""
    w, v, w2 = (rng.standard_normal(s).astype(np.float32) for s in ((D, D), (D, 1), (D, D)))
    rep = Backend.prepare(_model(w, v, w2), "CPU")
    x = rng.standard_normal((1, D)).astype(np.float32)
    rep.run({"x": x, "past": rng.standard_normal((1, 5, D)).astype(np.float32)})
    assert rep.last_run.planned and rep.last_run.reused_nodes == 0
    rep.run({"x": x, "past": rng.standard_normal((1, 6, D)).astype(np.float32)})
    assert rep.last_run.planned and rep.last_run.reused_nodes >= 2  # MatMul and Relu of x at least
    assert rep.last_run.reused_nodes < rep.last_run.vulkan_nodes  # the concatenation is new
    rep.release()
    assert not rep.state.plan_parent
    rep.run({"x": x, "past": rng.standard_normal((1, 7, D)).astype(np.float32)})
    assert rep.last_run.reused_nodes == 0


def test_equal_values_stand_for_the_previous_plans():
    dev = kdml.default_device()
    t = dev.tensor(np.zeros((2, 4), np.float32))
    from kompute_dml.onnx_backend.values import DeviceValue

    a = DeviceValue(t, (2, 4), np.dtype(np.float32))
    b = DeviceValue(kdml.Tensor(t.buffer, t.desc, t.offset), (2, 4), np.dtype(np.float32))
    assert step_reuse.same_value(a, b) and not step_reuse.same_value(a, DeviceValue(t, (8,), np.dtype(np.float32)))
    assert step_reuse.same_value(np.array([1, 2]), np.array([1, 2]))
    assert not step_reuse.same_value(np.array([1, 2]), np.array([1, 3]))
    assert not step_reuse.same_value(np.array([1, 2], np.int64), np.array([1, 2], np.int32))
    assert not step_reuse.same_value(np.array([0.0]), np.array([-0.0]))  # the bytes, not the value
    assert not step_reuse.same_value(np.zeros(step_reuse.SAME_HOST_BYTES), np.zeros(step_reuse.SAME_HOST_BYTES))


def test_a_smaller_length_takes_the_previous_plans_buffers(rng):
    """After a plan of 120 rows of past, one of 60 rows allocates no buffer: its outputs take the
    buffers the earlier plan made (a larger size class up to plan_context.LARGER_FREE times), as
    plans took the model's free buffers before they repeated steps."""
    w, v, w2 = (rng.standard_normal(s).astype(np.float32) for s in ((D, D), (D, 1), (D, D)))
    rep = Backend.prepare(_model(w, v, w2), "CPU")
    x = rng.standard_normal((1, D)).astype(np.float32)
    for rows in (120, 60):
        past = rng.standard_normal((1, rows, D)).astype(np.float32)
        y, present = rep.run({"x": x, "past": past})
        np.testing.assert_allclose(y, _reference(x, past, w, v, w2)[0], rtol=1e-4, atol=1e-4)
        np.testing.assert_array_equal(present[:, :-1], past)
    plan = next(reversed(rep.state.plans.values()))
    assert rep.last_run.planned and plan.device_bytes == 0
