"""com.microsoft BiasGelu (onnxruntime's fusion of MatMul -> Add -> Gelu) on the device: ADD then
ACTIVATION_GELU, against onnxruntime's own kernel and a float64 reference."""

from __future__ import annotations

import math

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

from kompute_dml.onnx_backend import VULKAN, Backend  # noqa: E402


@pytest.mark.parametrize("shape", [(3, 8), (2, 5, 16)])
def test_bias_gelu_on_the_device(rng, shape):
    bias = rng.standard_normal(shape[-1]).astype(np.float32)
    g = helper.make_graph([helper.make_node("BiasGelu", ["x", "b"], ["y"], domain="com.microsoft")], "g",
                          [helper.make_tensor_value_info("x", T.FLOAT, list(shape))],
                          [helper.make_tensor_value_info("y", T.FLOAT, None)], initializer=[numpy_helper.from_array(bias, "b")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
                              ir_version=8)
    rep = Backend.prepare(model, "CPU")
    assert [(p.target, p.operator) for p in rep.placement] == [(VULKAN, "ACTIVATION_GELU")]
    x = (rng.standard_normal(shape) * 3).astype(np.float32)
    (y,) = rep.run({"x": x})
    s = (x + bias).astype(np.float32).astype(np.float64)  # the float32 sum, then GELU in float64
    exact = 0.5 * s * (1 + np.vectorize(math.erf)(s / math.sqrt(2)))
    np.testing.assert_allclose(y, exact, rtol=2e-6, atol=1e-7)
    (want,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)
