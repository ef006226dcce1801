"""Values larger than one storage-buffer binding (maxStorageBufferRange: 128 MiB on lavapipe) on the
device (docs/large_values.md): a 144,000,000-byte float32 value (Whisper's attention scores at batch
4: 4 x 4 x 1500 x 1500) through the element-wise plans, CAST, a strided copy, softmax and batched
matrix products, each split over dispatches that bind windows of the buffers; against numpy. And
an attention block as an ONNX model whose scores are that value, wholly on the device (no CPU
node), against onnxruntime. Slow on lavapipe: each test moves several 144 MB values."""

from __future__ import annotations

import numpy as np
import pytest
from test_elementwise_unary import BOUND
from unary_reference import check_close

import kompute_dml as kdml

pytestmark = pytest.mark.slow

SHAPE = (4, 4, 1500, 1500)  # 36,000,000 float32: 144,000,000 bytes


@pytest.fixture(scope="module")
def big(dev):
    if np.prod(SHAPE) * 4 <= dev.limits["max_storage_buffer_range"]:
        pytest.skip("this device binds 144 MB at once: nothing to split")
    x = np.random.default_rng(7).standard_normal(SHAPE, dtype=np.float32)
    return x, dev.tensor(x)


def windows_of(op) -> int:
    """How many of the operator's dispatches bind a part of a value (DispatchPlan.windows)."""
    return sum(1 for p in op.plans if getattr(p, "windows", ()))


def test_elementwise_and_cast(dev, big):
    """ADD with a broadcast row, EXP, and CAST to float16 of the 144 MB value: each split into
    dispatches over parts of the outermost dimensions, bit for bit numpy's (ADD, CAST: correctly
    rounded in both) or within EXP's bound."""
    x, t = big
    row = np.linspace(-1, 1, SHAPE[-1], dtype=np.float32)
    s = kdml.add(t, row, device=dev)
    np.testing.assert_array_equal(s.numpy(), x + row)
    op = dev.compile(kdml.ElementWiseAdd1Desc(t.desc, kdml.TensorDesc(kdml.DataType.FLOAT32, SHAPE, (0, 0, 0, 1)),
                                              t.desc))
    assert windows_of(op) >= 2
    h = kdml.cast(t, kdml.DataType.FLOAT16, device=dev)
    np.testing.assert_array_equal(h.numpy(), x.astype(np.float16))
    e = kdml.exp(t, device=dev).numpy()
    check_close(e, np.exp(x.astype(np.float64)), BOUND["exp"][0])


def test_transposed_copy_and_softmax(dev, big):
    """A strided copy (the last two dimensions transposed) and ACTIVATION_SOFTMAX1 over the last
    dimension of the 144 MB value."""
    x, t = big
    view = kdml.Tensor(t.buffer, kdml.TensorDesc(kdml.DataType.FLOAT32, SHAPE, (9_000_000, 2_250_000, 1, 1500)), t.offset)
    np.testing.assert_array_equal(kdml.copy(view, device=dev).numpy(), x.transpose(0, 1, 3, 2))
    y = kdml.softmax(t, axes=[3], device=dev).numpy()
    e = np.exp(x - x.max(-1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-9)


def test_batched_matmul(dev, big):
    """Q K^T giving the 144 MB scores (the output split by batch), and the scores times V (the
    144 MB A split), against numpy in float64."""
    x, t = big
    rng = np.random.default_rng(8)
    q, k, v = (rng.standard_normal((4, 4, 1500, 64), dtype=np.float32) for _ in range(3))
    kt = dev.tensor(k)
    kt_view = kdml.Tensor(kt.buffer, kdml.TensorDesc(kdml.DataType.FLOAT32, (4, 4, 64, 1500), (384000, 96000, 1, 64)),
                          kt.offset)
    scores = kdml.matmul(q, kt_view, device=dev)
    assert scores.desc.byte_size > dev.limits["max_storage_buffer_range"]
    want = q.astype(np.float64) @ k.astype(np.float64).transpose(0, 1, 3, 2)
    np.testing.assert_allclose(scores.numpy(), want, rtol=1e-4, atol=1e-4)
    out = kdml.matmul(t, v, device=dev).numpy()
    np.testing.assert_allclose(out, x.astype(np.float64) @ v.astype(np.float64), rtol=1e-4, atol=2e-3)


def test_onnx_attention_scores_stay_on_the_device(dev, big):
    """Q K^T / 8 -> Softmax -> x V with 4 x 4 x 1500 x 1500 scores: every node on Vulkan (none on
    the CPU), the output within float32 products' error of onnxruntime's."""
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper, numpy_helper

    from kompute_dml.onnx_backend import Backend

    dims = [4, 4, 1500, 64]
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["q", "kt"], ["s"]), helper.make_node("Mul", ["s", "scale"], ["ss"]),
             helper.make_node("Softmax", ["ss"], ["p"], axis=-1), helper.make_node("MatMul", ["p", "v"], ["y"])]
    g = helper.make_graph(nodes, "attention", [helper.make_tensor_value_info(n, TensorProto.FLOAT, dims) for n in "qkv"],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, dims)],
                          [numpy_helper.from_array(np.array(0.125, np.float32), "scale")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    rng = np.random.default_rng(9)
    feeds = {n: rng.standard_normal(dims, dtype=np.float32) for n in "qkv"}
    rep = Backend.prepare(model, "CPU")
    (got,) = rep.run(feeds)
    assert {p.target for p in rep.placement} == {"vulkan"}, rep.summary()
    assert rep.last_run.runtime_fallbacks == 0, rep.last_run.events
    (want,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
