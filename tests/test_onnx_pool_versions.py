"""ONNX pools on the pooling versions beyond MAX_POOLING2 / AVERAGE_POOLING against onnxruntime's
CPU EP: MaxPool of int8 / uint8 (MAX_POOLING2's 8-bit rows), AveragePool with dilations (opset 19,
AVERAGE_POOLING1), 1-D and 2-D, on the device (MaxPool's Indices: tests/test_onnx_pool.py)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from kompute_dml.onnx_backend import Backend

ort = pytest.importorskip("onnxruntime")


def _model(op, dt, xs, attrs, outputs=("y",), opset=19):
    node = helper.make_node(op, ["x"], list(outputs), **attrs)
    outs = [helper.make_tensor_value_info(o, dt if o == "y" else TensorProto.INT64, None) for o in outputs]
    g = helper.make_graph([node], op, [helper.make_tensor_value_info("x", dt, ["N", *xs])], outs)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


def _both(m, x):
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    rep = Backend.prepare(m, "CPU")
    return rep.run({"x": x}), want, rep.last_run


@pytest.mark.parametrize("dt, npd", [(TensorProto.INT8, np.int8), (TensorProto.UINT8, np.uint8)], ids=["i8", "u8"])
@pytest.mark.parametrize("xs, attrs", [
    ((8, 14, 14), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])),
    ((3, 9, 10), dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),
    ((5, 17), dict(kernel_shape=[3], strides=[2], pads=[1, 1])),
], ids=["resnet", "ceil", "1d"])
def test_maxpool_bytes_on_the_device(rng, dt, npd, xs, attrs):
    info = np.iinfo(npd)
    x = rng.integers(info.min, info.max, (2, *xs), endpoint=True).astype(npd)
    got, want, stats = _both(_model("MaxPool", dt, xs, attrs), x)
    assert stats.cpu_segments == 0 and stats.runtime_fallbacks == 0, stats.events
    np.testing.assert_array_equal(got[0], want[0])


@pytest.mark.parametrize("dt", [TensorProto.FLOAT, TensorProto.FLOAT16], ids=["f32", "f16"])
@pytest.mark.parametrize("xs, attrs", [
    ((3, 11, 10), dict(kernel_shape=[3, 2], dilations=[2, 3], pads=[1, 1, 2, 0])),
    ((3, 11, 10), dict(kernel_shape=[2, 2], dilations=[2, 2], strides=[2, 1], count_include_pad=1, pads=[1, 0, 1, 1])),
    ((4, 19), dict(kernel_shape=[3], dilations=[3], strides=[2])),
    ((3, 12, 11), dict(kernel_shape=[3, 2], dilations=[2, 3], strides=[2, 2], pads=[1, 1, 1, 0], ceil_mode=1,
                       count_include_pad=1)),
], ids=["2d", "2d-include", "1d", "2d-ceil-include"])
def test_dilated_averagepool_on_the_device(rng, dt, xs, attrs):
    npd = np.float16 if dt == TensorProto.FLOAT16 else np.float32
    x = rng.standard_normal((2, *xs)).astype(npd)
    got, want, stats = _both(_model("AveragePool", dt, xs, attrs), x)
    assert stats.cpu_segments == 0 and stats.runtime_fallbacks == 0, stats.events
    tol = 2e-6 if dt == TensorProto.FLOAT else 2e-3
    np.testing.assert_allclose(got[0].astype(np.float64), want[0].astype(np.float64), rtol=tol, atol=tol * 3)
