"""ONNX MaxPool, AveragePool, GlobalMaxPool and GlobalAveragePool through the backend
(onnx_backend/handlers_pool.py) against onnxruntime's CPU EP: ResNet's 3x3 stride-2 max pool, 2x2
pools, ceil_mode, asymmetric pads, auto_pad, dilations, count_include_pad, 1-D and 3-D, global
pools at 7x7 and 1x1; float32 and float16; MaxPool's int64 Indices (storage_order 0 and 1); every
node on the device."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from kompute_dml.onnx_backend import Backend

ort = pytest.importorskip("onnxruntime")

CASES = {
    "resnet-maxpool": ("MaxPool", (4, 16, 16), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    "max-2x2": ("MaxPool", (3, 8, 8), dict(kernel_shape=[2, 2], strides=[2, 2])),
    "max-ceil": ("MaxPool", (3, 9, 10), dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    "max-dilated-asym": ("MaxPool", (2, 9, 9), dict(kernel_shape=[2, 3], dilations=[2, 1], pads=[0, 1, 1, 0])),
    "max-same-upper": ("MaxPool", (2, 9, 9), dict(kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER")),
    "max-1d": ("MaxPool", (3, 11), dict(kernel_shape=[3], strides=[2], pads=[1, 1])),
    "max-3d": ("MaxPool", (2, 5, 6, 7), dict(kernel_shape=[2, 2, 3], strides=[1, 2, 2])),
    "avg-2x2": ("AveragePool", (3, 8, 8), dict(kernel_shape=[2, 2], strides=[2, 2])),
    "avg-pad": ("AveragePool", (3, 9, 9), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1])),
    "avg-pad-include": ("AveragePool", (3, 9, 9), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1)),
    "avg-ceil": ("AveragePool", (3, 9, 10), dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    "avg-1d": ("AveragePool", (3, 11), dict(kernel_shape=[3], strides=[2])),
    # ceil_mode windows past the padded input, padding counted: onnxruntime divides by the taps inside it
    "avg-ceil-include": ("AveragePool", (3, 8, 8), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                                                        ceil_mode=1, count_include_pad=1)),
    "avg-ceil-include-asym": ("AveragePool", (2, 9, 10), dict(kernel_shape=[3, 2], strides=[2, 3], pads=[0, 1, 1, 0],
                                                             ceil_mode=1, count_include_pad=1)),
    "avg-ceil-include-1d": ("AveragePool", (3, 12), dict(kernel_shape=[4], strides=[3], pads=[2, 1], ceil_mode=1,
                                                        count_include_pad=1)),
    "gap-7x7": ("GlobalAveragePool", (16, 7, 7), {}),
    "gap-1x1": ("GlobalAveragePool", (16, 1, 1), {}),
    "gmp": ("GlobalMaxPool", (8, 5, 6), {}),
}


@pytest.mark.parametrize("dt", [TensorProto.FLOAT, TensorProto.FLOAT16], ids=["f32", "f16"])
@pytest.mark.parametrize("case", list(CASES))
def test_pool_matches_onnxruntime_on_the_device(rng, case, dt):
    op, xs, attrs = CASES[case]
    g = helper.make_graph([helper.make_node(op, ["x"], ["y"], **attrs)], "pool",
                          [helper.make_tensor_value_info("x", dt, ["N", *xs])], [helper.make_tensor_value_info("y", dt, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    rep = Backend.prepare(m, "CPU")
    npd = np.float16 if dt == TensorProto.FLOAT16 else np.float32
    for batch in (1, 2):
        x = rng.standard_normal((batch, *xs)).astype(npd)
        want = sess.run(None, {"x": x})[0]
        got = rep.run({"x": x})[0]
        assert rep.last_run.cpu_segments == 0 and rep.last_run.runtime_fallbacks == 0, rep.last_run.events
        assert got.shape == want.shape
        if op.endswith("MaxPool"):
            np.testing.assert_array_equal(got, want)
        else:
            tol = 1e-6 if dt == TensorProto.FLOAT else 1e-3
            np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), atol=tol, rtol=tol)


INDEX_CASES = {
    "resnet": ((2, 3, 9, 9), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    "ceil-dilated": ((2, 2, 9, 10), dict(kernel_shape=[2, 3], strides=[2, 2], dilations=[2, 1], ceil_mode=1)),
    "asym": ((1, 3, 7, 6), dict(kernel_shape=[3, 2], pads=[0, 1, 2, 0])),
    "1d": ((2, 3, 11), dict(kernel_shape=[3], strides=[2], pads=[1, 1])),
    "3d": ((1, 2, 4, 5, 6), dict(kernel_shape=[2, 2, 3], strides=[1, 2, 2], pads=[1, 0, 1, 0, 1, 1])),
}


@pytest.mark.parametrize("order", [0, 1], ids=["row-major", "column-major"])
@pytest.mark.parametrize("dt", [TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.UINT8], ids=["f32", "f16", "u8"])
@pytest.mark.parametrize("case", list(INDEX_CASES))
def test_maxpool_indices_on_the_device(rng, case, dt, order):
    """Values and int64 Indices (storage_order 0 and 1) as onnxruntime's: ties (small integers)
    make the first maximum the one to match; every node on the device."""
    xs, attrs = INDEX_CASES[case]
    g = helper.make_graph([helper.make_node("MaxPool", ["x"], ["y", "i"], storage_order=order, **attrs)], "pool",
                          [helper.make_tensor_value_info("x", dt, list(xs))],
                          [helper.make_tensor_value_info("y", dt, None),
                           helper.make_tensor_value_info("i", TensorProto.INT64, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 12)], ir_version=8)
    npd = {TensorProto.FLOAT: np.float32, TensorProto.FLOAT16: np.float16, TensorProto.UINT8: np.uint8}[dt]
    x = rng.integers(0, 6, xs).astype(npd)
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    rep = Backend.prepare(m, "CPU")
    for run in range(3):  # the second run replays the plan; the third runs node by node
        rep.state.node_by_node = run == 2
        got = rep.run({"x": x})
        assert rep.last_run.cpu_segments == 0 and rep.last_run.runtime_fallbacks == 0, rep.last_run.events
        assert got[1].dtype == np.int64
        for g_, w in zip(got, want):
            np.testing.assert_array_equal(g_, w)


@pytest.mark.parametrize("dt", [TensorProto.FLOAT, TensorProto.FLOAT16], ids=["f32", "f16"])
def test_conv_net_pooling_chain_on_the_device(rng, dt):
    """A convolution net's other layers: BatchNormalization -> Relu (fused) -> ResNet's 3x3/2 max
    pool (19 -> 10) -> 2x2 ceil_mode average pool (-> 5) -> GlobalAveragePool (25 taps: the
    one-invocation kernel), and a GlobalMaxPool of the Relu (361 taps: the work-group kernel)."""
    from onnx import numpy_helper

    npd = np.float16 if dt == TensorProto.FLOAT16 else np.float32
    c = 8
    inits = [numpy_helper.from_array(a.astype(npd), n) for n, a in (
        ("s", rng.standard_normal(c)), ("b", rng.standard_normal(c)), ("m", rng.standard_normal(c)),
        ("v", rng.random(c) + 0.2))]
    nodes = [helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["bn"]),
             helper.make_node("Relu", ["bn"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["mp"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("AveragePool", ["mp"], ["ap"], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1),
             helper.make_node("GlobalAveragePool", ["ap"], ["gap"]),
             helper.make_node("GlobalMaxPool", ["r"], ["gmp"])]
    g = helper.make_graph(nodes, "tail", [helper.make_tensor_value_info("x", dt, ["N", c, 19, 19])],
                          [helper.make_tensor_value_info(n, dt, None) for n in ("gap", "gmp")], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    x = rng.standard_normal((2, c, 19, 19)).astype(npd)
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    rep = Backend.prepare(m, "CPU")
    got = rep.run({"x": x})
    assert rep.last_run.cpu_segments == 0 and rep.last_run.runtime_fallbacks == 0, rep.last_run.events
    assert "BatchNormalization+Relu x1 -> BATCH_NORMALIZATION" in rep.summary()
    tol = 2e-6 if dt == TensorProto.FLOAT else 4e-3
    for a, b in zip(got, want):
        np.testing.assert_allclose(a.astype(np.float64), b.astype(np.float64), rtol=tol, atol=tol * 4)
