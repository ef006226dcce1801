"""ONNX BatchNormalization through the backend (onnx_backend/handlers_pool.py, ops/batch_normalization.py)
against onnxruntime's CPU EP: after a conv shape (N, C, H, W), (N, C, L), (N, C), 3-D; float32 and
float16; every node on the device, a following Relu fused (one dispatch, ReLU's bits: -0 to +0);
training mode left on the CPU."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from kompute_dml.onnx_backend import Backend

ort = pytest.importorskip("onnxruntime")


def _npd(dt):
    return np.float16 if dt == TensorProto.FLOAT16 else np.float32


def _run_both(m, x):
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, {"x": x})[0]
    rep = Backend.prepare(m, "CPU")
    got = rep.run({"x": x})[0]
    if len(m.graph.node) == 2:  # BatchNormalization -> Relu: one BATCH_NORMALIZATION with its fused ReLU
        assert [p.fused_into for p in rep.placement] == [1, None]
        assert "BatchNormalization+Relu x1 -> BATCH_NORMALIZATION" in rep.summary()
    return got, want, rep.last_run


def bn_model(dt, xs, rng, relu=True):
    npd = _npd(dt)
    c = xs[0]
    inits = [numpy_helper.from_array(rng.standard_normal(c).astype(npd), "scale"),
             numpy_helper.from_array(rng.standard_normal(c).astype(npd), "b"),
             numpy_helper.from_array(rng.standard_normal(c).astype(npd), "mean"),
             numpy_helper.from_array((rng.random(c) + 0.1).astype(npd), "var")]
    nodes = [helper.make_node("BatchNormalization", ["x", "scale", "b", "mean", "var"], ["y"], epsilon=1e-3)]
    if relu:
        nodes.append(helper.make_node("Relu", ["y"], ["z"]))
    g = helper.make_graph(nodes, "bn", [helper.make_tensor_value_info("x", dt, ["N", *xs])],
                          [helper.make_tensor_value_info("z" if relu else "y", dt, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 15)], ir_version=10)


@pytest.mark.parametrize("dt", [TensorProto.FLOAT, TensorProto.FLOAT16], ids=["f32", "f16"])
@pytest.mark.parametrize("xs", [(16, 7, 7), (6, 13), (5,), (3, 2, 4, 5)], ids=["conv", "1d", "nc", "3d"])
def test_batch_norm_matches_onnxruntime_on_the_device(rng, xs, dt):
    m = bn_model(dt, xs, rng)
    x = (rng.standard_normal((2, *xs)) * 2).astype(_npd(dt))
    got, want, stats = _run_both(m, x)
    assert stats.cpu_segments == 0 and stats.runtime_fallbacks == 0, stats.events
    tol = 2e-6 if dt == TensorProto.FLOAT else 4e-3
    scale = max(1.0, float(np.abs(want.astype(np.float64)).max()))
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), atol=tol * scale, rtol=0)
    assert not np.signbit(got[got == 0]).any()  # ReLU: +0, never -0


def test_batch_norm_training_mode_on_the_device(rng):
    """Training mode (the batch's statistics; running mean / variance outputs): on the device,
    Y as onnxruntime's (tests/test_batch_normalization.py checks every output against onnx's
    reference evaluator)."""
    m = bn_model(TensorProto.FLOAT, (4, 3, 3), rng, relu=False)
    node = m.graph.node[0]
    node.attribute.append(helper.make_attribute("training_mode", 1))
    node.output.extend(["rm", "rv"])
    x = rng.standard_normal((2, 4, 3, 3)).astype(np.float32)
    rep = Backend.prepare(m, "CPU")
    got = rep.run({"x": x})[0]
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert rep.last_run.cpu_segments == 0 and rep.last_run.runtime_fallbacks == 0, rep.last_run.events
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dt", [TensorProto.FLOAT, TensorProto.FLOAT16], ids=["f32", "f16"])
def test_fused_relu_same_bits_in_both_executors(rng, dt):
    """BatchNormalization -> Relu fused and unfused, as one program and node by node: the same bits
    (the fused ReLU is ACTIVATION_RELU's; its -0 case: tests/test_batch_normalization.py)."""
    m = bn_model(dt, (4, 3, 5), rng)
    x = (rng.standard_normal((2, 4, 3, 5)) * 2).astype(_npd(dt))
    outs = {}
    for fuse in (True, False):
        for graph in (True, False):
            rep = Backend.prepare(m, "CPU", fuse=fuse)
            rep.state.node_by_node = not graph
            outs[fuse, graph] = rep.run({"x": x})[0]
            assert rep.last_run.cpu_segments == 0 and rep.last_run.runtime_fallbacks == 0
    bits = np.uint32 if dt == TensorProto.FLOAT else np.uint16
    ref = outs[False, False].view(bits)
    for key, o in outs.items():
        np.testing.assert_array_equal(o.view(bits), ref, err_msg=str(key))
