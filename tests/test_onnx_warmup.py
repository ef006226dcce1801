"""Backend.prepare(..., warmup={input: shape}) runs the model once on zeros of those shapes, so
the first real run of those shapes records and builds nothing new (issue 22)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper

from kompute_dml.onnx_backend import Backend


def _model():
    b = helper.make_tensor("b", T.INT8, (8, 6), np.arange(48, dtype=np.int8).tobytes(), raw=True)
    bs = helper.make_tensor("bs", T.FLOAT, (1,), [0.5])
    node = helper.make_node("DynamicQuantizeMatMul", ["x", "b", "bs"], ["y"], domain="com.microsoft")
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", T.FLOAT, ["rows", 8])],
                          [helper.make_tensor_value_info("y", T.FLOAT, ["rows", 6])], initializer=[b, bs])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
                             ir_version=8)


def test_warmup_records_what_the_first_run_needs(rng):
    rep = Backend.prepare(_model(), "CPU", warmup={"x": (5, 8)})
    dev = rep.device
    before = dev.stats()
    x = rng.standard_normal((5, 8)).astype(np.float32)
    (y,) = rep.run({"x": x})
    after = dev.stats()
    assert rep.last_run.vulkan_nodes == 1
    assert after["recorded_sequences"] == before["recorded_sequences"]
    assert after["pipelines_created"] == before["pipelines_created"]
    assert y.shape == (5, 6) and np.isfinite(y).all()


def test_warmup_needs_every_input():
    with pytest.raises(ValueError, match="warmup: give a shape for every input"):
        Backend.prepare(_model(), "CPU", warmup={})
