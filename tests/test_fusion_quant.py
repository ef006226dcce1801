"""onnxruntime's quantize_dynamic output (DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul)
on the device as one MATRIX_MULTIPLY_INTEGER_TO_FLOAT (onnx_backend/fusion_quant.py), against an
exact oracle (numpy int64 products of the reference quantization, then the graph's two float32
roundings): onnxruntime's own u8 x s8 product is inexact on processors without VNNI."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402
from onnx_reference import dynamic_quantize_linear  # noqa: E402
from ort_exactness import skip_unless_exact  # noqa: E402

from kompute_dml.onnx_backend import CPU, VULKAN, Backend  # noqa: E402


def _quantized(tmp_path, w: np.ndarray, per_channel: bool, bias: np.ndarray | None = None):
    from onnxruntime.quantization import QuantType, quantize_dynamic

    nodes = [helper.make_node("MatMul", ["x", "w"], ["y0" if bias is not None else "y"])]
    inits = [numpy_helper.from_array(w, "w")]
    if bias is not None:
        nodes.append(helper.make_node("Add", ["y0", "bias"], ["y"]))
        inits.append(numpy_helper.from_array(bias, "bias"))
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", T.FLOAT, ["m", w.shape[0]])],
                          [helper.make_tensor_value_info("y", T.FLOAT, None)], initializer=inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), tmp_path / "f.onnx")
    quantize_dynamic(str(tmp_path / "f.onnx"), str(tmp_path / "q.onnx"), weight_type=QuantType.QInt8,
                     per_channel=per_channel)
    return onnx.load(str(tmp_path / "q.onnx"))


def _oracle(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    """The quantized graph's value: its weights, scales and zero points read from the model."""
    c = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    nodes = model.graph.node
    mmi = next(n for n in nodes if n.op_type == "MatMulInteger")
    cast = next(n for n in nodes if mmi.output[0] in n.input)
    mul = next(n for n in nodes if cast.output[0] in n.input)
    scale_mul = next(n for n in nodes if n.output[0] == mul.input[1])
    w_scale = c[next(i for i in scale_mul.input if i in c)]
    wq, wzp = c[mmi.input[1]], c[mmi.input[3]] if len(mmi.input) > 3 and mmi.input[3] else np.zeros((), np.int8)
    q, s, zp = dynamic_quantize_linear(x)
    acc = (q.astype(np.int64) - np.int64(zp)) @ (wq.astype(np.int64) - wzp.astype(np.int64))
    scale = np.float32(s) * w_scale.astype(np.float32)
    y = acc.astype(np.int32).astype(np.float32) * scale
    bias = [c[n] for node in model.graph.node if node.op_type == "Add" for n in node.input if n in c]
    return (y + bias[0]).astype(np.float32) if bias else y.astype(np.float32)


@pytest.mark.parametrize("per_channel", [False, True], ids=["per-tensor", "per-channel"])
@pytest.mark.parametrize("m,k,n", [(1, 16, 8), (7, 64, 33), (32, 96, 40)])
def test_quantize_dynamic_products_run_fused_and_exact(tmp_path, rng, per_channel, m, k, n):
    w = rng.standard_normal((k, n)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    model = _quantized(tmp_path, w, per_channel, bias)
    rep = Backend.prepare(model, "CPU")
    where = {p.op_type: (p.target, p.operator) for p in rep.placement}
    assert where["MatMulInteger"][0] == VULKAN and not rep.segments
    assert "MatMulInteger+Cast+Mul x1 -> MATRIX_MULTIPLY_INTEGER_TO_FLOAT" in rep.summary()
    for rows in (m, m + 2):
        x = rng.standard_normal((rows, k)).astype(np.float32) * 3
        (y,) = rep.run({"x": x})
        np.testing.assert_array_equal(y, _oracle(model, x))


def test_a_matmul_integer_alone_runs_on_the_device(rng):
    """Its int32 result read as it is (no Cast -> Mul): a 1 x 1 CONVOLUTION_INTEGER
    (tests/test_onnx_matmul_integer.py covers its forms)."""
    a = rng.integers(0, 256, (3, 5), dtype=np.uint8)
    b = rng.integers(-128, 128, (5, 4), dtype=np.int8)
    g = helper.make_graph([helper.make_node("MatMulInteger", ["a", "b"], ["y"])], "g",
                          [helper.make_tensor_value_info("a", T.UINT8, [3, 5])],
                          [helper.make_tensor_value_info("y", T.INT32, None)], initializer=[numpy_helper.from_array(b, "b")])
    rep = Backend.prepare(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), "CPU")
    assert rep.placement[0].target == VULKAN
    (y,) = rep.run({"a": a})
    np.testing.assert_array_equal(y, a.astype(np.int64) @ b.astype(np.int64))


def test_the_chain_is_not_claimed_where_the_caller_keeps_matmul_integer_on_the_cpu(tmp_path, rng):
    model = _quantized(tmp_path, rng.standard_normal((8, 4)).astype(np.float32), False)
    rep = Backend.prepare(model, "CPU", exclude_ops=["MatMulInteger"])
    assert {p.target for p in rep.placement if p.op_type == "MatMulInteger"} == {CPU}
    skip_unless_exact(np.uint8, np.int8, "MatMulInteger")  # the CPU runs the product
    x = rng.standard_normal((2, 8)).astype(np.float32)
    (y,) = rep.run({"x": x})
    np.testing.assert_array_equal(y, _oracle(model, x))
