"""Device-resident inputs and outputs of the ONNX backend (onnxruntime's IO binding): kompute_dml
Tensors fed without a host round trip, outputs left on the device as Tensors no later run
changes, models chained on the device; in the whole-graph plan and node by node."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

import kompute_dml as kdml  # noqa: E402
from kompute_dml.onnx_backend import Backend  # noqa: E402

n = helper.make_node
vi = helper.make_tensor_value_info


def _model(nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    domains = [helper.make_opsetid("", opset), helper.make_opsetid("ai.onnx.ml", 3)]  # (Scaler: a CPU node)
    return helper.make_model(g, opset_imports=domains, ir_version=8)


def _relu_add():
    """z = relu(x) + b, and b[0, 0] as a second, 0-d output w."""
    nodes = [n("Relu", ["x"], ["y"]), n("Add", ["y", "b"], ["z"]), n("Gather", ["b", "zero"], ["row"]),
             n("Gather", ["row", "zero"], ["w"])]
    zero = numpy_helper.from_array(np.array(0, np.int64), "zero")
    return _model(nodes, [vi("x", T.FLOAT, ["n", 3]), vi("b", T.FLOAT, ["n", 3])],
                  [vi("z", T.FLOAT, None), vi("w", T.FLOAT, None)], [zero])


def _refuse(self, *a, **kw):
    raise AssertionError("a device tensor was read back to the host")


@pytest.mark.parametrize("cpu_node", [False, True], ids=["plan", "node-by-node"])
def test_tensor_inputs_and_device_outputs(rng, monkeypatch, cpu_node):
    rep = Backend.prepare(_relu_add(), "CPU", exclude_ops=["Relu"] if cpu_node else [])
    assert rep.graph_mode != cpu_node
    x = rng.standard_normal((4, 3)).astype(np.float32)
    b = rng.standard_normal((4, 3)).astype(np.float32)
    xt = rep.device.tensor(x)
    outs = []
    with monkeypatch.context() as m:
        if not cpu_node:  # the plan reads the Tensor on the device, never on the host
            m.setattr(kdml.Tensor, "numpy", _refuse)
            m.setattr(kdml.Tensor, "__array__", _refuse)
        for _ in range(3):
            z, w = rep.run({"x": xt, "b": b}, device_outputs=True)
            assert isinstance(z, kdml.Tensor) and isinstance(w, kdml.Tensor)
            outs.append((z, w))
        if not cpu_node:
            st = rep.last_run
            assert (st.downloads, st.uploads, st.submissions) == (0, 1, 3)  # b goes up; copies in, program, copies out
    assert len({id(z.buffer) for z, _ in outs}) == 3  # every run's outputs are its own
    for z, w in outs:
        assert z.shape == (4, 3) and w.shape == (1,)
        np.testing.assert_allclose(z.numpy(), np.maximum(x, 0) + b, rtol=1e-6)
        np.testing.assert_allclose(w.numpy(), [b[0, 0]], rtol=1e-6)
    # a strided Tensor (a transposed view, COPY into the plan's input) and a packed one at an offset
    # of a larger buffer (a transfer of its bytes), both after the packed one above
    big = rep.device.tensor(np.concatenate([rng.standard_normal(4).astype(np.float32), x.T.reshape(-1)]))
    view = kdml.Tensor(big.buffer, kdml.TensorDesc(kdml.DataType.FLOAT32, (4, 3), (1, 4)), 16)
    at = kdml.Tensor(big.buffer, kdml.TensorDesc(kdml.DataType.FLOAT32, (4, 3)), 16)
    for t, want in ((view, x), (at, x.T.reshape(4, 3))):
        z, _ = rep.run({"x": t, "b": b}, device_outputs=True)
        np.testing.assert_allclose(z.numpy(), np.maximum(want, 0) + b, rtol=1e-6)


def test_device_outputs_stay_and_chain(rng):
    rep = Backend.prepare(_relu_add(), "CPU")
    dev = rep.device
    x1, x2, b = (rng.standard_normal((5, 3)).astype(np.float32) for _ in range(3))
    z1, w1 = rep.run({"x": dev.tensor(x1), "b": b}, device_outputs=True)
    z2, _ = rep.run({"x": x2, "b": b}, device_outputs=True)  # a host input, same model
    np.testing.assert_allclose(z1.numpy(), np.maximum(x1, 0) + b, rtol=1e-6)  # not changed by the later run
    np.testing.assert_allclose(z2.numpy(), np.maximum(x2, 0) + b, rtol=1e-6)
    np.testing.assert_allclose(w1.numpy(), [b[0, 0]], rtol=1e-6)
    # chained: the first model's output is the second's input, on the device
    z3, _ = rep.run({"x": z1, "b": b})
    np.testing.assert_allclose(z3, np.maximum(np.maximum(x1, 0) + b, 0) + b, rtol=1e-6)
    # host outputs as before
    z4, w4 = rep.run({"x": x1, "b": b})
    assert isinstance(z4, np.ndarray) and w4.shape == ()


def test_device_inputs_are_refused_with_the_rule(rng):
    rep = Backend.prepare(_relu_add(), "CPU")
    b = np.ones((2, 3), np.float32)
    with pytest.raises(kdml.InvalidArgumentError, match="^input 'x': expected float32, got a Tensor of float16"):
        rep.run({"x": rep.device.tensor(np.ones((2, 3), np.float16)), "b": b})
    with pytest.raises(kdml.InvalidArgumentError, match=r"^input 'x': has shape \(2, 4\)"):
        rep.run({"x": rep.device.tensor(np.ones((2, 4), np.float32)), "b": b})
    other = kdml.Device()
    try:
        with pytest.raises(kdml.InvalidArgumentError, match="^input 'x': is a Tensor of"):
            rep.run({"x": other.tensor(np.ones((2, 3), np.float32)), "b": b})
    finally:
        other.close()
    (z, _) = rep.run({"x": rep.device.tensor(np.ones((2, 3), np.float32)), "b": b})  # still usable
    np.testing.assert_array_equal(z, np.full((2, 3), 2, np.float32))


def test_bool_outputs_come_back_to_the_host(rng):
    model = _model([n("Greater", ["x", "y"], ["g"]), n("Add", ["x", "y"], ["s"])],
                   [vi("x", T.FLOAT, [4]), vi("y", T.FLOAT, [4])], [vi("g", T.BOOL, None), vi("s", T.FLOAT, None)])
    rep = Backend.prepare(model, "CPU")
    x, y = rng.standard_normal(4).astype(np.float32), rng.standard_normal(4).astype(np.float32)
    g, s = rep.run({"x": rep.device.tensor(x), "y": y}, device_outputs=True)
    assert isinstance(g, np.ndarray) and g.dtype == np.bool_ and isinstance(s, kdml.Tensor)
    np.testing.assert_array_equal(g, x > y)
    np.testing.assert_array_equal(s.numpy(), x + y)


@pytest.mark.parametrize("node_by_node", [False, True])
def test_host_outputs_are_written_into_the_callers_arrays(node_by_node):
    """BackendRep.run(out=...): each host tensor output lands in the array the caller hands out
    (an execution provider's own output buffers), bool outputs included as copies."""
    nodes = [n("MatMul", ["x", "w"], ["y"]), n("Relu", ["y"], ["r"]), n("Greater", ["y", "zero"], ["pos"])]
    w = np.arange(12, dtype=np.float32).reshape(4, 3) - 5
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.zeros(3, np.float32), "zero")]
    if node_by_node:  # a node with no kompute_dml operator sends the run node by node
        nodes.append(n("Scaler", ["y"], ["h"], domain="ai.onnx.ml", offset=[0.0], scale=[1.0]))
    outs = [vi("r", T.FLOAT, ["b", 3]), vi("pos", T.BOOL, ["b", 3]), vi("y", T.FLOAT, ["b", 3])]
    if node_by_node:
        outs.append(vi("h", T.FLOAT, ["b", 3]))
    rep = Backend.prepare(_model(nodes, [vi("x", T.FLOAT, ["b", 4])], outs, inits))
    assert any(p.target == "cpu" for p in rep.placement) == node_by_node
    x = np.random.default_rng(3).standard_normal((5, 4)).astype(np.float32)
    want = rep.run({"x": x})
    given: dict[int, np.ndarray] = {}

    def out(k, shape, dtype):
        given[k] = np.full(shape, np.nan, dtype)
        return given[k]

    got = rep.run({"x": x}, out=out)
    assert set(given) == ({0, 2, 3} if node_by_node else {0, 2})  # every float output, no bool one
    for k, (g, w_) in enumerate(zip(got, want)):
        if k in given:
            assert g is given[k]
        assert g.dtype == w_.dtype
        np.testing.assert_array_equal(g, w_)


def test_first_run_with_every_input_on_the_device():
    """A model's very first run (the one that plans its program) with all its inputs on the device:
    the plan copied its host inputs' staging (empty) over the whole input buffer, so the device
    inputs read as zeros (fixed; before, only a later run was right)."""
    nodes = [n("MatMul", ["x", "w"], ["y"]), n("Relu", ["y"], ["r"])]
    w = np.arange(12, dtype=np.float32).reshape(4, 3) - 5
    model = _model(nodes, [vi("x", T.FLOAT, ["b", 4])], [vi("r", T.FLOAT, ["b", 3])], [numpy_helper.from_array(w, "w")])
    x = np.random.default_rng(4).standard_normal((5, 4)).astype(np.float32)
    want = np.maximum(x.astype(np.float64) @ w, 0)
    for device_outputs in (False, True):
        rep = Backend.prepare(model)
        (got,) = rep.run({"x": rep.device.tensor(x)}, device_outputs=device_outputs)
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)


def test_device_output_runs_leave_out_the_host_copies(rng, monkeypatch):
    """A plan run with its outputs left on the device runs its program less the copies of the outputs
    into host memory (made at the first such run), host and device runs alternating on one plan, each
    with its own inputs and right; the host staging keeps the last host run's outputs."""
    rep = Backend.prepare(_relu_add(), "CPU")
    b = rng.standard_normal((4, 3)).astype(np.float32)
    xs = [rng.standard_normal((4, 3)).astype(np.float32) for _ in range(6)]
    rep.run({"x": xs[0], "b": b})  # plans (host outputs)
    plan = next(iter(rep.state.plans.values()))
    assert plan._device_program is None and len(plan._out_at) == 2
    got = []
    for i, x in enumerate(xs):
        z, w = rep.run({"x": x, "b": b}, device_outputs=i % 2 == 1)
        got.append((np.asarray(z.numpy() if i % 2 else z), np.asarray(w.numpy() if i % 2 else w)))
        if i % 2:
            assert plan._device_program is not None
            assert plan._device_program.dispatch_count == plan.program.dispatch_count - 2
            labels = plan.program._labels[-2:]
            assert all(lb == ("outputs", "copy out") for lb in labels)
            assert plan._device_program._labels == plan.program._labels[:-2]
            # the host staging still holds the host run before (the device run copied nothing there)
            staged = plan._out[plan._out_at[0]:plan._out_at[0] + 48].view(np.float32).reshape(4, 3)
            np.testing.assert_array_equal(staged, np.maximum(xs[i - 1], 0) + b)
    for (z, w), x in zip(got, xs):
        np.testing.assert_array_equal(z, np.maximum(x, 0) + b)
        np.testing.assert_array_equal(w.reshape(-1), [b[0, 0]])
