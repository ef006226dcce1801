"""ONNX LpNormalization on the device (REDUCE L1 / L2, ELEMENT_WISE_DIVIDE, ELEMENT_WISE_IF for a
zero norm) against onnxruntime: p 1 and 2, every axis, rows of zeros (0 out, not NaN), float32 and
float16; onnx's six node cases on the device."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402
from onnx_node_cases import node_case_tests  # noqa: E402

from kompute_dml.onnx_backend import Backend  # noqa: E402

test_case_count, test_onnx_node_case_on_the_device = node_case_tests(r"^test_(l1|l2|lp)normalization\w*_cpu$",
                                                                     __name__, 6)


@pytest.mark.parametrize("dt", [np.float32, np.float16], ids=["f32", "f16"])
@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_lp_normalization_matches_onnxruntime(rng, dt, p, axis):
    x = rng.standard_normal((4, 5, 6)).astype(dt)
    x[1, :, :] = 0  # zero norms along axes 1 and 2 (and a zero row along 0 where another row is too)
    x[:, 2, 3] = 0
    elem = TensorProto.FLOAT if dt == np.float32 else TensorProto.FLOAT16
    g = helper.make_graph([helper.make_node("LpNormalization", ["x"], ["y"], axis=axis, p=p)], "lp",
                          [helper.make_tensor_value_info("x", elem, list(x.shape))],
                          [helper.make_tensor_value_info("y", elem, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    rep = Backend.prepare(m, "CPU")
    got = rep.run({"x": x})[0]
    assert {pl.target for pl in rep.placement} == {"vulkan"} and rep.last_run.runtime_fallbacks == 0, \
        rep.last_run.events
    assert got.dtype == want.dtype and not np.isnan(got).any()
    tol = 2e-6 if dt == np.float32 else 2e-3
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol)
