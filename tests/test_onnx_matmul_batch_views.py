"""MatMul whose batch dimensions DirectML GEMM's two (batch, channel) cannot address as the operands lie:
a window view of a Transpose (Twins' and NesT's locally grouped attention) strided across three batch
dimensions, and two operands broadcast across alternate ones. The product packs the operand (or expands
both) on the device, so the model stays one program (handlers_values.gemm_foldable), bit for bit numpy's
on integer-valued floats (every product and sum exact)."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

from kompute_dml.onnx_backend import Backend  # noqa: E402

N = helper.make_node
ELEM = {np.float32: T.FLOAT, np.float16: T.FLOAT16}
K, M = 8, 5


def _rep(nodes, inputs, dt, inits=()):
    g = helper.make_graph(nodes, "views", [helper.make_tensor_value_info(n, ELEM[dt], list(s)) for n, s in inputs],
                          [helper.make_tensor_value_info("y", ELEM[dt], None)], initializer=list(inits))
    return Backend.prepare(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), "CPU")


def _one_program(rep):
    st = rep.last_run
    assert not st.runtime_fallbacks and not st.cpu_segments and st.submissions == 1, st
    assert (st.uploads, st.downloads) == (1, 1)  # (the inputs go up in one transfer)


@pytest.mark.parametrize("dt", [np.float32, np.float16])
@pytest.mark.parametrize("bias", [False, True])
def test_a_window_view_across_three_batch_dimensions(rng, dt, bias):
    x = rng.integers(-3, 4, (2, 3, 4, 6, K)).astype(dt)
    w = rng.integers(-3, 4, (K, M)).astype(dt)
    c = rng.integers(-3, 4, (M,)).astype(dt)
    nodes = [N("Transpose", ["x"], ["xt"], perm=[0, 2, 1, 3, 4]), N("MatMul", ["xt", "w"], ["p" if bias else "y"])]
    inits = [numpy_helper.from_array(w, "w")]
    if bias:  # the MatMul -> Add fusion's GEMM
        nodes.append(N("Add", ["p", "c"], ["y"]))
        inits.append(numpy_helper.from_array(c, "c"))
    rep = _rep(nodes, [("x", x.shape)], dt, inits)
    want = np.matmul(x.transpose(0, 2, 1, 3, 4).astype(np.float64), w.astype(np.float64)) + (c if bias else 0)
    for _ in range(2):  # the run that plans, then its replay
        (y,) = rep.run({"x": x})
        np.testing.assert_array_equal(y, want.astype(dt))
        _one_program(rep)


@pytest.mark.parametrize("dt", [np.float32, np.float16])
def test_operands_broadcast_across_alternate_batch_dimensions(rng, dt):
    a = rng.integers(-3, 4, (2, 1, 3, 6, K)).astype(dt)
    b = rng.integers(-3, 4, (1, 4, 1, K, M)).astype(dt)
    rep = _rep([N("MatMul", ["a", "b"], ["y"])], [("a", a.shape), ("b", b.shape)], dt)
    (y,) = rep.run({"a": a, "b": b})
    np.testing.assert_array_equal(y, np.matmul(a.astype(np.float64), b.astype(np.float64)).astype(dt))
    assert y.shape == (2, 4, 3, 6, M)
    _one_program(rep)
