"""MatMul with a 1-D operand, as numpy's matmul: a 1-D A is a row (1, K), a 1-D B a column (K, 1),
and that dimension is dropped from the result (both 1-D: a scalar). On the device (the operand seen
through a 2-D view), against numpy on integer-valued floats, whose products and sums are exact."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper  # noqa: E402

from kompute_dml.onnx_backend import Backend  # noqa: E402

ELEM = {np.float32: T.FLOAT, np.float16: T.FLOAT16}


@pytest.mark.parametrize("dt", [np.float32, np.float16])
@pytest.mark.parametrize(("a", "b"), [((7,), (7,)), ((7,), (7, 5)), ((7,), (2, 3, 7, 5)), ((4, 7), (7,)),
                                      ((2, 3, 4, 7), (7,)), ((1,), (1,))])
def test_vector_operands(rng, dt, a, b):
    graph = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["y"])], "mv",
                              [helper.make_tensor_value_info("a", ELEM[dt], list(a)),
                               helper.make_tensor_value_info("b", ELEM[dt], list(b))],
                              [helper.make_tensor_value_info("y", ELEM[dt], None)])
    rep = Backend.prepare(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), "CPU")
    x, w = (rng.integers(-4, 5, s).astype(dt) for s in (a, b))
    (y,) = rep.run({"a": x, "b": w})
    want = np.matmul(x.astype(np.float64), w.astype(np.float64)).astype(dt)
    assert y.shape == want.shape and y.dtype == want.dtype
    np.testing.assert_array_equal(y, want)
    assert rep.last_run.planned and not rep.last_run.runtime_fallbacks and not rep.last_run.cpu_segments
