"""ONNX Dropout through the Backend: in inference (no training_mode, or a false one) the output a
copy of the input and the optional mask all true, on the device (onnx's node cases, a chain);
training mode draws random numbers and runs on the CPU, named."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx_node_cases import node_case_tests  # noqa: E402

from kompute_dml.onnx_backend import Backend  # noqa: E402

test_case_count, test_onnx_node_case_on_the_device = node_case_tests(
    r"^test_dropout_(default|default_mask|default_mask_ratio|default_old|default_ratio|random_old)_cpu$", __name__, 6)


def _model(training: bool | None, mask: bool) -> onnx.ModelProto:
    w = numpy_helper.from_array(np.full((4, 3), 0.5, np.float32), "w")
    inits = [w, numpy_helper.from_array(np.float32(0.3), "ratio")]
    drop_in = ["h", "ratio"]
    if training is not None:
        inits.append(numpy_helper.from_array(np.array(training), "training"))
        drop_in.append("training")
    outs = ["d", "m"] if mask else ["d"]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Dropout", drop_in, outs),
             helper.make_node("Relu", ["d"], ["y"])]
    vis = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    if mask:
        vis.append(helper.make_tensor_value_info("m", TensorProto.BOOL, None))
    g = helper.make_graph(nodes, "drop", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])], vis, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


@pytest.mark.parametrize("training", [None, False])
@pytest.mark.parametrize("mask", [False, True])
def test_inference_dropout_chain_on_the_device(rng, training, mask):
    x = rng.standard_normal((2, 4)).astype(np.float32)
    rep = Backend.prepare(_model(training, mask), "CPU")
    got = rep.run({"x": x})
    assert {p.target for p in rep.placement} <= {"vulkan", "host"} and rep.last_run.runtime_fallbacks == 0, \
        rep.last_run.events
    np.testing.assert_array_equal(got[0], np.maximum(x @ np.full((4, 3), 0.5, np.float32), 0))
    if mask:
        assert got[1].dtype == np.bool_ and got[1].shape == (2, 3) and got[1].all()


def test_training_dropout_runs_on_the_cpu_named(rng):
    rep = Backend.prepare(_model(True, True), "CPU")
    got = rep.run({"x": rng.standard_normal((2, 4)).astype(np.float32)})
    assert got[0].shape == (2, 3) and got[1].dtype == np.bool_
    assert any("training mode draws random numbers" in e for e in rep.last_run.events), rep.last_run.events
