"""QUANTIZED_LINEAR_CONVOLUTION (ops/quantized_convolution.py; shaders/qconv.comp, qconv_tiled.comp:
each kernel forced, direct, tiled and split-K) bit for bit
against a numpy reference (int64 accumulation of (x - x_zp)(w - w_zp) plus the bias, then the
documented float32 requantization): int8 / uint8 in every combination, per-tensor and per-channel
filter scales and zero points, absent zero points and bias, strides, dilations, asymmetric padding,
groups, strided tensors at random offsets, outputs poisoned first and every other byte unchanged;
refused descriptors; ONNX QLinearConv and the fused QDQ DequantizeLinear -> Conv -> QuantizeLinear
against the reference and onnxruntime (whose QLinearConv requantizes the same way)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from helpers import assert_output, place, poison_against, random_strides

import kompute_dml as kdml

DT = kdml.DataType
TD = kdml.TensorDesc
Q8 = {np.int8: DT.INT8, np.uint8: DT.UINT8}


def reference(x, xs, xz, w, ws, wz, b, ys, yz, st, dl, ps, pe, g, out):
    n, c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    xp = np.full((n, c, h + ps[0] + pe[0], wd + ps[1] + pe[1]), int(xz), np.int64)
    xp[:, :, ps[0]:ps[0] + h, ps[1]:ps[1] + wd] = x
    oh = (h + ps[0] + pe[0] - ((kh - 1) * dl[0] + 1)) // st[0] + 1
    ow = (wd + ps[1] + pe[1] - ((kw - 1) * dl[1] + 1)) // st[1] + 1
    acc = np.zeros((n, m, oh, ow), np.int64)
    wz = np.broadcast_to(np.asarray(wz, np.int64).reshape(-1), (m,))
    for o in range(m):
        grp = o // (m // g)
        for i in range(kh):
            for j in range(kw):
                patch = xp[:, grp * cg:(grp + 1) * cg, i * dl[0]:i * dl[0] + st[0] * (oh - 1) + 1:st[0],
                           j * dl[1]:j * dl[1] + st[1] * (ow - 1) + 1:st[1]]
                acc[:, o] += np.einsum("nchw,c->nhw", patch - int(xz), w[o, :, i, j].astype(np.int64) - wz[o])
    acc += np.broadcast_to(np.asarray(b, np.int64).reshape(-1), (m,)).reshape(1, m, 1, 1)
    mult = (np.float32(xs) * np.broadcast_to(np.asarray(ws, np.float32).reshape(-1), (m,))) / np.float32(ys)
    v = acc.astype(np.float32) * mult.astype(np.float32).reshape(1, m, 1, 1)
    lo, hi = (-128, 127) if out == np.int8 else (0, 255)
    return np.clip(np.rint(v) + np.float32(yz), lo, hi).astype(out)


# each kernel forced (the device policy's choice: ops/quantized_convolution.py), its dispatches' variants
KERNELS = {"direct": ["qconv"], "tiled": ["qconvt"], "split": ["qconvs", "qconvr"]}


def force(monkeypatch, kernel):
    monkeypatch.setenv("KDML_CONV_KERNEL", "direct" if kernel == "direct" else "tiled")
    monkeypatch.setenv("KDML_CONV_SPLIT", "3" if kernel == "split" else "1")


def _q(rng, dt, shape):
    info = np.iinfo(dt)
    return rng.integers(info.min, info.max + 1, shape).astype(dt)


@pytest.mark.parametrize("types", [(np.uint8, np.int8, np.uint8), (np.int8, np.int8, np.int8), (np.uint8, np.uint8, np.int8),
                                   (np.int8, np.uint8, np.uint8)], ids=str)
@pytest.mark.parametrize("geo", [
    dict(xs=(2, 6, 9, 8), ws=(4, 3, 3, 3), st=(2, 1), dl=(1, 2), ps=(1, 2), pe=(0, 1), g=2),
    dict(xs=(1, 4, 7, 7), ws=(4, 1, 3, 3), st=(1, 1), dl=(1, 1), ps=(1, 1), pe=(1, 1), g=4),  # depthwise
    dict(xs=(3, 5, 6, 5), ws=(7, 5, 1, 1), st=(1, 2), dl=(1, 1), ps=(0, 0), pe=(0, 0), g=1),
    dict(xs=(2, 12, 9, 11), ws=(136, 6, 3, 2), st=(1, 1), dl=(2, 1), ps=(2, 0), pe=(1, 1), g=2),  # several tiles
], ids=["grouped", "depthwise", "pointwise", "tiles"])
@pytest.mark.parametrize("per_channel", [False, True], ids=["tensor", "channel"])
@pytest.mark.parametrize("optional", [True, False], ids=["zp-bias", "none"])
@pytest.mark.parametrize("kernel", KERNELS)
def test_against_numpy(dev, rng, types, geo, per_channel, optional, kernel, monkeypatch):
    force(monkeypatch, kernel)
    xt, wt, yt = types
    x, w = _q(rng, xt, geo["xs"]), _q(rng, wt, geo["ws"])
    m = geo["ws"][0]
    k = m if per_channel else 1
    xs, ys = np.float32(0.02), np.float32(0.3)
    ws = (rng.random(k) * 0.05 + 0.01).astype(np.float32)
    xz, wz, yz = (_q(rng, t, s) for t, s in ((xt, 1), (wt, k), (yt, 1)))
    b = rng.integers(-20000, 20000, m).astype(np.int32)
    if not optional:
        xz, wz, yz, b = np.zeros(1, xt), np.zeros(k, wt), np.zeros(1, yt), np.zeros(m, np.int32)
    want = reference(x, xs, xz[0], w, ws, wz, b, ys, yz[0], geo["st"], geo["dl"], geo["ps"], geo["pe"], geo["g"], yt)
    xd = TD(Q8[xt], x.shape, random_strides(rng, x.shape, allow_broadcast=False))
    wd = TD(Q8[wt], w.shape, random_strides(rng, w.shape, allow_broadcast=False))
    yd = TD(Q8[yt], want.shape, random_strides(rng, want.shape, allow_broadcast=False))
    tx, _ = place(dev, rng, xd, x)
    tw, _ = place(dev, rng, wd, w)
    ty, _ = place(dev, rng, yd)
    one, per = (1, 1, 1, 1), (1, k, 1, 1)

    def t(a, shape):
        tt, _ = place(dev, rng, TD(DT.from_numpy(a.dtype), shape), a.reshape(shape))
        return tt

    tensors = [tx, t(np.array([xs]), one), t(xz, one) if optional else None, tw, t(ws, per),
               t(wz, per) if optional else None, t(b, (1, m, 1, 1)) if optional else None, t(np.array([ys]), one),
               t(yz, one) if optional else None]
    before = poison_against(ty, want, rng)
    desc = kdml.QuantizedLinearConvolutionDesc(*(None if v is None else v.desc for v in tensors), yd, geo["st"], geo["dl"],
                                               geo["ps"], geo["pe"], geo["g"])
    op = dev.compile(desc)
    one_step = kernel == "split" and np.prod(geo["ws"][1:]) <= 16  # a single K step has no parts
    assert [p.variant for p in op.plans] == KERNELS["tiled" if one_step else kernel]
    op.execute(tensors, [ty])
    assert_output(ty, before, want)


@pytest.mark.parametrize("yt", [np.int8, np.uint8])
@pytest.mark.parametrize("kernel", KERNELS)
def test_packed_outputs_four_per_word(dev, rng, yt, kernel, monkeypatch):
    """A packed output of width 4k takes the word-store path in the direct kernel (four outputs per
    invocation, strides along the width in the taps), bytes in the tiled ones: the same bits, no byte
    outside the output changed."""
    force(monkeypatch, kernel)
    from kompute_dml.ops.quantized_convolution import writes_quads

    x, w = _q(rng, np.uint8, (2, 3, 9, 17)), _q(rng, np.int8, (5, 3, 3, 3))
    b = rng.integers(-9000, 9000, 5).astype(np.int32)
    want = reference(x, np.float32(0.04), 7, w, np.float32(0.01), 0, b, np.float32(0.05), 3, (1, 2), (1, 1), (1, 1),
                     (1, 0), 1, yt)
    assert want.shape[-1] % 4 == 0
    yd = TD(Q8[yt], want.shape)
    assert writes_quads(yd)
    ty, _ = place(dev, rng, yd)
    before = poison_against(ty, want, rng)
    kdml.quantized_conv(x, 0.04, w, 0.01, 0.05, x_zero_point=np.uint8(7), bias=b,
                        y_zero_point=np.array(3, yt), strides=(1, 2), start_padding=(1, 1), end_padding=(1, 0), out=ty,
                        device=dev)
    assert_output(ty, before, want)


def test_helper_and_saturation(dev, rng):
    x = np.full((1, 1, 3, 3), 255, np.uint8)
    w = np.full((2, 1, 3, 3), 127, np.int8)
    y = kdml.quantized_conv(x, 1.0, w, np.array([1.0, -1.0], np.float32), 0.001, y_zero_point=np.int8(0),
                            device=dev).numpy()
    np.testing.assert_array_equal(y.reshape(-1), [127, -128])  # far past the range: saturated
    with pytest.raises(kdml.InvalidArgumentError, match="^w_scale"):
        kdml.quantized_conv(x, 1.0, w, np.ones(3, np.float32), 1.0, device=dev)


U8, S, Z = DT.UINT8, TD(DT.FLOAT32, (1, 1, 1, 1)), TD(DT.UINT8, (1, 1, 1, 1))
BASE = kdml.QuantizedLinearConvolutionDesc(TD(U8, (1, 2, 5, 5)), S, Z, TD(DT.INT8, (4, 2, 3, 3)), S, None, None, S, Z,
                                           TD(U8, (1, 4, 3, 3)))


@pytest.mark.parametrize("change, field", [
    (dict(input_zero_point_tensor=TD(DT.INT8, (1, 1, 1, 1))), "input_zero_point_tensor.data_type"),
    (dict(input_scale_tensor=TD(DT.FLOAT32, (1, 2, 1, 1))), "input_scale_tensor.sizes"),
    (dict(filter_scale_tensor=TD(DT.FLOAT32, (1, 3, 1, 1))), "filter_scale_tensor.sizes"),
    (dict(bias_tensor=TD(DT.INT32, (1, 1, 1, 1))), "bias_tensor.sizes"),
    (dict(output_tensor=TD(U8, (1, 4, 3, 4))), "output_tensor.sizes"),
    (dict(group_count=3), "group_count"),
    (dict(filter_tensor=TD(DT.INT8, (4, 1, 3, 3))), "filter_tensor.sizes"),
    (dict(strides=(1,)), "strides"),
])
def test_refused_descriptors_name_their_field(dev, change, field):
    with pytest.raises(kdml.InvalidArgumentError, match=f"^{field}"):
        dev.compile(dataclasses.replace(BASE, **change))
    with pytest.raises(kdml.UnsupportedError, match="bias_tensor"):
        dev.compile(dataclasses.replace(BASE, bias_tensor=TD(DT.FLOAT32, (1, 4, 1, 1))))


onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx_node_cases import node_case_tests, one_node_model  # noqa: E402
from ort_exactness import onnxruntime_exact  # noqa: E402

from kompute_dml.onnx_backend import Backend  # noqa: E402

test_case_count, test_onnx_node_case_on_the_device = node_case_tests(r"^test_qlinearconv_cpu$", __name__, 1)
T = TensorProto


def _inits(rng, m, per_channel):
    w = _q(rng, np.int8, (m, 3, 3, 3))
    ws = (rng.random(m if per_channel else 1) * 0.02 + 0.005).astype(np.float32)
    return w, ws, rng.integers(-3000, 3000, m).astype(np.int32)


@pytest.mark.parametrize("per_channel", [False, True], ids=["tensor", "channel"])
def test_qlinearconv_against_onnxruntime(rng, per_channel):
    x = _q(rng, np.uint8, (2, 3, 10, 9))
    w, ws, b = _inits(rng, 5, per_channel)
    vals = {"xs": np.array(0.03, np.float32), "xz": np.array(120, np.uint8), "w": w, "ws": ws,
            "wz": np.zeros(ws.shape, np.int8), "ys": np.array(0.2, np.float32), "yz": np.array(90, np.uint8), "b": b}
    node = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], ["y"], pads=[1, 0, 2, 1],
                            strides=[1, 2])
    model = one_node_model(node, [("x", T.UINT8, x.shape)], T.UINT8, [numpy_helper.from_array(v, k) for k, v in vals.items()],
                           13)
    rep = Backend.prepare(model, "CPU")
    got = rep.run({"x": x})[0]
    np.testing.assert_array_equal(got, reference(x, vals["xs"], 120, w, ws, 0, b, vals["ys"], 90, (1, 2), (1, 1), (1, 0),
                                                 (2, 1), 1, np.uint8))
    assert [p.target for p in rep.placement] == ["vulkan"]
    if onnxruntime_exact(np.uint8, np.int8).exact:  # its u8 x s8 sums saturate without VNNI (tests/ort_exactness.py)
        want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        np.testing.assert_array_equal(got, want)


def test_qlinearconv_1d_as_height_one(rng):
    """A 1-D QLinearConv (3-D x: wav2vec2's, convbert's feature convolutions) runs as 2-D of height 1."""
    x = _q(rng, np.uint8, (2, 3, 17))
    w4, ws, b = _inits(rng, 5, True)
    w = np.ascontiguousarray(w4[:, :, 1, :])  # [5, 3, 3]
    vals = {"xs": np.array(0.03, np.float32), "xz": np.array(120, np.uint8), "w": w, "ws": ws,
            "wz": np.zeros(ws.shape, np.int8), "ys": np.array(0.2, np.float32), "yz": np.array(90, np.uint8), "b": b}
    node = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], ["y"], pads=[1, 2],
                            strides=[2], dilations=[2])
    model = one_node_model(node, [("x", T.UINT8, x.shape)], T.UINT8, [numpy_helper.from_array(v, k) for k, v in vals.items()],
                           13)
    rep = Backend.prepare(model, "CPU")
    assert [p.target for p in rep.placement] == ["vulkan"], rep.summary()
    want = reference(x[:, :, None, :], vals["xs"], 120, w[:, :, None, :], ws, 0, b, vals["ys"], 90, (1, 2), (1, 2), (0, 1),
                     (0, 2), 1, np.uint8)[:, :, 0, :]
    for _ in range(2):  # node by node, then the whole-graph plan
        np.testing.assert_array_equal(rep.run({"x": x})[0], want)


@pytest.mark.parametrize("bias", ["int32", "zeros", "float"])
def test_qdq_conv_fused(rng, bias):
    """Q(x) -> DQ -> Conv(DQ(w int8), bias) -> Q -> DQ: the middle three fused into one
    QUANTIZED_LINEAR_CONVOLUTION where the bias is quantize_static's int32 (or 0), bit for bit the
    reference; a float bias leaves them unfused (DQ, Conv, Q on the device, float arithmetic)."""
    x = (rng.standard_normal((2, 3, 8, 8)) * 2).astype(np.float32)
    w, ws, b = _inits(rng, 4, True)
    xs, ys = np.float32(0.02), np.float32(0.1)
    consts = {"xs": np.array(xs), "xz": np.array(128, np.uint8), "w": w, "ws": ws, "wz": np.zeros(4, np.int8),
              "ys": np.array(ys), "yz": np.array(100, np.uint8)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xf"]),
             helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wf"], axis=0)]
    if bias == "float":
        consts["bf"] = rng.standard_normal(4).astype(np.float32)
    else:
        consts["b"] = b if bias == "int32" else np.zeros(4, np.int32)
        consts["bs"], consts["bz"] = (xs * ws).astype(np.float32), np.zeros(4, np.int32)
        nodes.append(helper.make_node("DequantizeLinear", ["b", "bs", "bz"], ["bf"], axis=0))
    nodes += [helper.make_node("Conv", ["xf", "wf", "bf"], ["c"], pads=[1, 1, 1, 1]),
              helper.make_node("QuantizeLinear", ["c", "ys", "yz"], ["yq"]),
              helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", T.FLOAT, x.shape)],
                              [helper.make_tensor_value_info("y", T.FLOAT, None)],
                              [numpy_helper.from_array(v, k) for k, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    rep = Backend.prepare(model, "CPU")
    got = rep.run({"x": x})[0]
    assert "cpu" not in {p.target for p in rep.placement} and rep.last_run.runtime_fallbacks == 0
    fused = "DequantizeLinear+Conv+QuantizeLinear" in rep.summary()
    assert fused == (bias != "float"), rep.summary()
    xq = np.clip(np.rint(x / xs) + 128, 0, 255).astype(np.uint8)
    if fused:
        yq = reference(xq, xs, 128, w, ws, 0, consts["b"], ys, 100, (1, 1), (1, 1), (1, 1), (1, 1), 1, np.uint8)
        np.testing.assert_array_equal(got, (yq.astype(np.float32) - 100) * ys)
        if onnxruntime_exact(np.uint8, np.int8).exact:  # (as above)
            want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
            np.testing.assert_array_equal(got, want)  # onnxruntime fuses it into QLinearConv too
