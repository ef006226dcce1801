"""com.microsoft's QOperator element-wise and pooling nodes (onnx_backend/handlers_qlinear.py):
QLinearAdd, QLinearMul, QLinearSigmoid, QLinearLeakyRelu, QLinearGlobalAveragePool, uint8 and
int8, zero points given or left out, broadcast operands. Against an independent numpy reference of
the definition (dq(v) = v_scale (v - v_zp) in float32, the float step, then round half to even of
x / y_scale plus y_zp, saturated) and against onnxruntime's CPU kernels, node by node and as the
whole-graph plan; and with host operands (a CPU sub-graph before the node), whose uploads are kept
by name within a run."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import helper, numpy_helper  # noqa: E402

from kompute_dml.onnx_backend import CPU, Backend  # noqa: E402

F32 = np.float32
BINARY = ("QLinearAdd", "QLinearMul")


def model(op, dt, zps, shapes, alpha=None, before=""):
    """One com.microsoft `op` node (inputs a [and b] of `shapes`); zero points (a, b, y) as given,
    None: left out; `before`: an op type each input passes through first (a CPU sub-graph)."""
    et = helper.np_dtype_to_tensor_dtype(np.dtype(dt))
    scales = {"a": 0.05, "b": 0.021, "y": 0.07 if op != "QLinearMul" else 0.3}
    inits, nodes, names = [], [], []
    operands = ("a", "b") if op in BINARY else ("a",)
    for v in (*operands, "y"):
        src = v
        if v != "y" and before:
            nodes.append(helper.make_node(before, [v], [f"{v}_"]))
            src = f"{v}_"
        inits.append(numpy_helper.from_array(np.array(scales[v], F32), f"{v}_scale"))
        zp = zps[v]
        if zp is not None:
            inits.append(numpy_helper.from_array(np.array(zp, dt), f"{v}_zp"))
        names += ([src] if v != "y" else []) + [f"{v}_scale", f"{v}_zp" if zp is not None else ""]
    while names and not names[-1]:
        names.pop()
    attrs = {"alpha": alpha} if alpha is not None else {}
    nodes.append(helper.make_node(op, names, ["y"], domain="com.microsoft", **attrs))
    inputs = [helper.make_tensor_value_info(v, et, s) for v, s in zip(operands, shapes)]
    g = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y", et, None)], initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
                          ir_version=9)
    return m, scales


def reference(op, feeds, scales, zps, dt, alpha):
    """The definition in numpy: float32 at each step; the float step's own function in float64,
    rounded to float32 (sigmoid, the mean)."""
    def dq(v):
        return (F32(scales[v]) * (feeds[v].astype(np.int32) - np.int32(zps[v] or 0)).astype(F32)).astype(F32)

    if op == "QLinearAdd":
        x = dq("a") + dq("b")
    elif op == "QLinearMul":
        x = dq("a") * dq("b")
    elif op == "QLinearSigmoid":
        x = (1 / (1 + np.exp(-dq("a").astype(np.float64)))).astype(F32)
    elif op == "QLinearLeakyRelu":
        a = dq("a")
        x = np.where(a < 0, a * F32(alpha), a).astype(F32)
    else:
        x = dq("a").astype(np.float64).mean(axis=(2, 3), keepdims=True).astype(F32)
    info = np.iinfo(dt)
    return np.clip(np.rint(x / F32(scales["y"])) + (zps["y"] or 0), info.min, info.max).astype(dt)


CASES = [("QLinearAdd", [(2, 3, 4, 5), (3, 1, 5)]), ("QLinearAdd", [(4, 6), (4, 6)]), ("QLinearMul", [(2, 3, 4), (1, 4)]),
         ("QLinearSigmoid", [(2, 3, 4, 5)]), ("QLinearLeakyRelu", [(3, 7, 5)]), ("QLinearGlobalAveragePool", [(2, 3, 5, 7)])]


@pytest.mark.parametrize("dt", [np.uint8, np.int8])
@pytest.mark.parametrize("zero_points", ["given", "absent"])
@pytest.mark.parametrize(("op", "shapes"), CASES)
def test_qlinear(rng, op, shapes, dt, zero_points):
    info = np.iinfo(dt)
    zps = ({"a": int(rng.integers(info.min, info.max)), "b": int(rng.integers(info.min, info.max)),
            "y": int(rng.integers(info.min // 2, info.max // 2))} if zero_points == "given" else dict.fromkeys("aby"))
    alpha = 0.2 if op == "QLinearLeakyRelu" else None
    m, scales = model(op, dt, zps, shapes, alpha)
    feeds = {v: rng.integers(info.min, int(info.max) + 1, s).astype(dt) for v, s in zip("ab", shapes)}
    want = reference(op, feeds, scales, zps, dt, alpha)
    # onnxruntime refuses zero points left out in the middle of the inputs (QLinearAdd: a type inference
    # error; QLinearSigmoid aborts the process): the numpy reference alone there
    peer = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0] \
        if zero_points == "given" else None
    rep = Backend.prepare(m, "CPU")
    assert all(p.target != CPU for p in rep.placement), rep.summary()
    for _ in range(2):  # node by node, then the whole-graph plan
        (got,) = rep.run(feeds)
        assert got.dtype == want.dtype and got.shape == want.shape
        off = np.abs(got.astype(int) - want.astype(int))
        if op in BINARY:  # one float32 rounding per step on both sides: the same bits
            np.testing.assert_array_equal(got, want)
        else:  # the device's sigmoid / mean against float64's rounded: a value on a step's boundary moves by one
            assert off.max() <= 1 and off.mean() < 0.02, (off.max(), off.mean())
        if peer is not None:  # onnxruntime's kernels
            assert np.abs(got.astype(int) - peer.astype(int)).max() <= 1


def test_host_operands_keep_their_own_uploads(rng):
    """Both operands arrive as host arrays (a CPU sub-graph first): each dequantization uploads its
    own (a run keeps uploads by name; the steps once shared one and added a to itself)."""
    zps = {"a": 120, "b": 3, "y": 128}
    m, scales = model("QLinearAdd", np.uint8, zps, [(2, 8, 6, 6), (2, 8, 6, 6)], before="Identity")
    rep = Backend.prepare(m, "CPU", exclude_ops={"Identity"})
    assert [p.op_type for p in rep.placement if p.target == CPU] == ["Identity", "Identity"], rep.summary()
    feeds = {v: rng.integers(0, 256, (2, 8, 6, 6)).astype(np.uint8) for v in "ab"}
    want = reference("QLinearAdd", feeds, scales, zps, np.uint8, None)
    for _ in range(2):
        np.testing.assert_array_equal(rep.run(feeds)[0], want)


def test_channels_last_pooling_runs_on_the_cpu(rng):
    m, _ = model("QLinearGlobalAveragePool", np.uint8, {"a": 3, "y": 5}, [(2, 5, 7, 3)])
    m.graph.node[-1].attribute.append(helper.make_attribute("channels_last", 1))
    feeds = {"a": rng.integers(0, 256, (2, 5, 7, 3)).astype(np.uint8)}
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    rep = Backend.prepare(m, "CPU")
    (got,) = rep.run(feeds)
    assert any("channels_last" in e for e in rep.last_run.events), rep.last_run.events
    np.testing.assert_array_equal(got, want)


def qgemm_model(m, k, n, trans_b, bias, quantized_out, a_zp, b_zp, y_zp, scales, rng):
    inits = [numpy_helper.from_array(np.array(scales["a"], F32), "a_scale"), numpy_helper.from_array(np.array(a_zp, np.uint8), "a_zp"),
             numpy_helper.from_array(rng.integers(-128, 128, (n, k) if trans_b else (k, n)).astype(np.int8), "w"),
             numpy_helper.from_array(np.array(scales["b"], F32), "b_scale"), numpy_helper.from_array(np.array(b_zp, np.int8), "b_zp")]
    names = ["a", "a_scale", "a_zp", "w", "b_scale", "b_zp"]
    if bias or quantized_out:
        names.append("c" if bias else "")
    if bias:
        inits.append(numpy_helper.from_array(rng.integers(-5000, 5000, n).astype(np.int32), "c"))
    if quantized_out:
        inits += [numpy_helper.from_array(np.array(scales["y"], F32), "y_scale"),
                  numpy_helper.from_array(np.array(y_zp, np.uint8), "y_zp")]
        names += ["y_scale", "y_zp"]
    node = helper.make_node("QGemm", names, ["y"], domain="com.microsoft", alpha=1.0, transB=int(trans_b))
    et = onnx.TensorProto.UINT8 if quantized_out else onnx.TensorProto.FLOAT
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("a", onnx.TensorProto.UINT8, [m, k])],
                          [helper.make_tensor_value_info("y", et, None)], initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
                             ir_version=9), {i.name: numpy_helper.to_array(i) for i in inits}


@pytest.mark.parametrize("trans_b", [True, False])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("quantized_out", [True, False])
def test_qgemm(rng, trans_b, bias, quantized_out):
    """Against numpy's exact integer sums (int64) scaled once: the float32 GEMM of the dequantized
    operands within one step (quantized) or float32 rounding of the sums (float output)."""
    m_, k, n = 5, 37, 11
    scales = {"a": 0.02, "b": 0.003, "y": 0.05}
    model_, c = qgemm_model(m_, k, n, trans_b, bias, quantized_out, 131, -3, 120, scales, rng)
    a = rng.integers(0, 256, (m_, k)).astype(np.uint8)
    w = c["w"].astype(np.int64)
    acc = (a.astype(np.int64) - 131) @ ((w.T if trans_b else w) + 3) + (c["c"].astype(np.int64) if bias else 0)
    real = acc.astype(np.float64) * (np.float64(F32(scales["a"]) * F32(scales["b"])))
    rep = Backend.prepare(model_, "CPU")
    assert all(p.target != CPU for p in rep.placement), rep.summary()
    for _ in range(2):
        (got,) = rep.run({"a": a})
        if quantized_out:
            want = np.clip(np.rint(real / np.float64(F32(scales["y"]))) + 120, 0, 255)
            off = np.abs(got.astype(int) - want.astype(int))
            assert got.dtype == np.uint8 and off.max() <= 1 and off.mean() < 0.05, (off.max(), off.mean())
        else:
            assert got.dtype == np.float32
            np.testing.assert_allclose(got, real, rtol=1e-5, atol=1e-5 * np.abs(real).max())


def _single(node, inputs, inits, out_type=onnx.TensorProto.UINT8):
    g = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info(node.output[0], out_type, None)],
                          initializer=[numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
                             ir_version=9)


@pytest.mark.parametrize(("opset", "axis"), [(13, -1), (13, 1), (11, 1), (11, 2)])
def test_qlinear_softmax(rng, opset, axis):
    """From opset 13 over the one axis; before, over every axis from `axis` on (the 2-D coercion)."""
    shape = (2, 3, 4, 5)
    inits = {"x_scale": F32(0.08), "x_zp": np.uint8(100), "y_scale": F32(1 / 256), "y_zp": np.uint8(0)}
    node = helper.make_node("QLinearSoftmax", ["x", "x_scale", "x_zp", "y_scale", "y_zp"], ["y"], domain="com.microsoft",
                            axis=axis, opset=opset)
    m = _single(node, [helper.make_tensor_value_info("x", onnx.TensorProto.UINT8, shape)], inits)
    x = rng.integers(0, 256, shape).astype(np.uint8)
    d = (F32(0.08) * (x.astype(np.int32) - 100).astype(F32)).astype(np.float64)
    axes = (axis % 4,) if opset >= 13 else tuple(range(axis % 4, 4))
    e = np.exp(d - d.max(axis=axes, keepdims=True))
    want = np.clip(np.rint((e / e.sum(axis=axes, keepdims=True)).astype(F32) * F32(256)), 0, 255).astype(np.uint8)
    peer = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    rep = Backend.prepare(m, "CPU")
    assert all(p.target != CPU for p in rep.placement), rep.summary()
    for _ in range(2):
        (got,) = rep.run({"x": x})
        off = np.abs(got.astype(int) - want.astype(int))
        assert off.max() <= 1 and off.mean() < 0.02, (off.max(), off.mean())
        assert np.abs(got.astype(int) - peer.astype(int)).max() <= 1  # onnxruntime's lookup-table exp


@pytest.mark.parametrize("middle", [5, 0])
def test_qlinear_concat(rng, middle):
    """QLinearConcat; an input empty along the axis left out, as Concat leaves it (no fallback)."""
    inits = {"y_scale": F32(0.05), "y_zp": np.uint8(128), "s0": F32(0.02), "z0": np.uint8(10), "s1": F32(0.09),
             "z1": np.uint8(200), "s2": F32(0.05), "z2": np.uint8(128)}
    shapes = [(2, 3, 4), (2, middle, 4), (2, 1, 4)]
    node = helper.make_node("QLinearConcat", ["y_scale", "y_zp", "a", "s0", "z0", "b", "s1", "z1", "c", "s2", "z2"], ["y"],
                            domain="com.microsoft", axis=1)
    m = _single(node, [helper.make_tensor_value_info(n, onnx.TensorProto.UINT8, s) for n, s in zip("abc", shapes)], inits)
    feeds = {n: rng.integers(0, 256, s).astype(np.uint8) for n, s in zip("abc", shapes)}
    dq = [(inits[f"s{i}"] * (feeds[n].astype(np.int32) - int(inits[f"z{i}"])).astype(F32)).astype(F32) for i, n in enumerate("abc")]
    want = np.clip(np.rint(np.concatenate(dq, axis=1) / F32(0.05)) + 128, 0, 255).astype(np.uint8)
    peer = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    rep = Backend.prepare(m, "CPU")
    assert all(p.target != CPU for p in rep.placement), rep.summary()
    for _ in range(2):
        (got,) = rep.run(feeds)
        np.testing.assert_array_equal(got, want)  # the same float32 steps
        assert np.abs(got.astype(int) - peer.astype(int)).max() <= 1
        assert rep.last_run.runtime_fallbacks == 0 and rep.last_run.cpu_segments == 0


@pytest.mark.parametrize("count_include_pad", [0, 1])
def test_qlinear_average_pool(rng, count_include_pad):
    """AveragePool's attributes (kernel, strides, pads, count_include_pad) on the dequantized input."""
    inits = {"x_scale": F32(0.04), "x_zp": np.uint8(7), "y_scale": F32(0.03), "y_zp": np.uint8(20)}
    node = helper.make_node("QLinearAveragePool", ["x", "x_scale", "x_zp", "y_scale", "y_zp"], ["y"], domain="com.microsoft",
                            kernel_shape=[3, 2], strides=[2, 1], pads=[1, 0, 1, 1], count_include_pad=count_include_pad)
    m = _single(node, [helper.make_tensor_value_info("x", onnx.TensorProto.UINT8, (2, 3, 7, 6))], inits)
    x = rng.integers(0, 256, (2, 3, 7, 6)).astype(np.uint8)
    d = np.pad((F32(0.04) * (x.astype(np.int32) - 7).astype(F32)).astype(np.float64), ((0, 0), (0, 0), (1, 1), (0, 1)))
    ones = np.pad(np.ones((7, 6)), ((1, 1), (0, 1)))
    rows = (7 + 2 - 3) // 2 + 1
    mean = np.stack([np.stack([d[..., 2 * i:2 * i + 3, j:j + 2].sum(axis=(-2, -1)) /
                               (6 if count_include_pad else ones[2 * i:2 * i + 3, j:j + 2].sum()) for j in range(6)], -1)
                     for i in range(rows)], -2)
    want = np.clip(np.rint(mean.astype(F32) / F32(0.03)) + 20, 0, 255).astype(np.uint8)
    peer = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    rep = Backend.prepare(m, "CPU")
    assert all(p.target != CPU for p in rep.placement), rep.summary()
    for _ in range(2):
        (got,) = rep.run({"x": x})
        assert got.shape == want.shape == peer.shape
        off = np.abs(got.astype(int) - want.astype(int))
        assert off.max() <= 1 and off.mean() < 0.02, (off.max(), off.mean())
        assert np.abs(got.astype(int) - peer.astype(int)).max() <= 1
