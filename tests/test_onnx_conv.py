"""ONNX Conv through the backend on CONVOLUTION (onnx_backend/handlers_conv.py) against
onnxruntime's CPU EP: the layers of the families people bring (ResNet's 7x7 stride-2 stem, 3x3 and
1x1, depthwise, grouped, ViT's patch embedding, Whisper's Conv1d pair), auto_pad's modes,
asymmetric pads, dilations, no bias; float32 and float16, batch 1 and 3; every node on the device
(no CPU sub-graph, no run-time fallback), in a whole-graph plan and node by node."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from kompute_dml.onnx_backend import Backend

ort = pytest.importorskip("onnxruntime")

CASES = {
    "resnet-stem": ((3, 32, 32), (8, 3, 7, 7), dict(strides=[2, 2], pads=[3, 3, 3, 3])),
    "3x3": ((8, 10, 10), (16, 8, 3, 3), dict(pads=[1, 1, 1, 1])),
    "1x1": ((16, 7, 7), (24, 16, 1, 1), {}),
    "depthwise": ((8, 10, 10), (8, 1, 3, 3), dict(group=8, pads=[1, 1, 1, 1], strides=[2, 2])),
    "grouped-asymmetric": ((4, 9, 9), (6, 2, 2, 2), dict(group=2, pads=[0, 1, 1, 0])),
    "vit-patches": ((3, 32, 32), (16, 3, 16, 16), dict(strides=[16, 16])),
    "whisper-conv1": ((20, 30), (12, 20, 3), dict(pads=[1, 1])),
    "whisper-conv2": ((12, 30), (12, 12, 3), dict(pads=[1, 1], strides=[2])),
    "same-upper": ((4, 9, 9), (6, 4, 3, 3), dict(auto_pad="SAME_UPPER", strides=[2, 2])),
    "same-lower": ((4, 9, 9), (6, 4, 3, 3), dict(auto_pad="SAME_LOWER", strides=[2, 2])),
    "valid-dilated": ((4, 9, 9), (6, 4, 3, 3), dict(auto_pad="VALID", dilations=[2, 2])),
    "dilated-pads": ((8, 12, 12), (8, 8, 3, 3), dict(dilations=[2, 2], pads=[2, 2, 2, 2])),
    "1d-dilated-asymmetric": ((6, 17), (4, 3, 3), dict(group=2, dilations=[3], pads=[2, 0], strides=[2])),
    "3d": ((2, 5, 6, 7), (3, 2, 2, 3, 2), dict(pads=[1, 0, 1, 0, 1, 1])),
    "3d-strided-same": ((4, 5, 6, 7), (6, 4, 3, 3, 3), dict(auto_pad="SAME_UPPER", strides=[2, 1, 2])),
}


def model(case: str, dt: int, rng, bias: bool) -> onnx.ModelProto:
    xs, ws, attrs = CASES[case]
    npd = np.float16 if dt == TensorProto.FLOAT16 else np.float32
    inits = [numpy_helper.from_array((rng.standard_normal(ws) * 0.3).astype(npd), "w")]
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(ws[0]).astype(npd), "b"))
    node = helper.make_node("Conv", ["x", "w"] + (["b"] if bias else []), ["y"], kernel_shape=list(ws[2:]), **attrs)
    g = helper.make_graph([node, helper.make_node("Relu", ["y"], ["z"])], "conv",
                          [helper.make_tensor_value_info("x", dt, ["N", *xs])],
                          [helper.make_tensor_value_info("z", dt, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("dt", [TensorProto.FLOAT, TensorProto.FLOAT16], ids=["f32", "f16"])
@pytest.mark.parametrize("case", list(CASES))
def test_conv_matches_onnxruntime_on_the_device(rng, case, dt):
    m = model(case, dt, rng, bias=case != "1x1")
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    rep = Backend.prepare(m, "CPU")
    for batch in (1, 3):
        x = rng.standard_normal((batch, *CASES[case][0])).astype(np.float16 if dt == TensorProto.FLOAT16 else np.float32)
        want = sess.run(None, {"x": x})[0]
        got = rep.run({"x": x})[0]
        stats = rep.last_run
        assert stats.cpu_segments == 0 and stats.runtime_fallbacks == 0, stats.events
        assert got.shape == want.shape and got.dtype == want.dtype
        # float32: within 1e-5 of |y|'s scale; float16: a float16 ulp at the outputs' scale
        tol = 2e-5 if dt == TensorProto.FLOAT else 4e-3
        scale = max(1.0, float(np.abs(want.astype(np.float64)).max()))
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), atol=tol * scale, rtol=0)


def test_conv_node_by_node_and_refusals(rng):
    m = model("3x3", TensorProto.FLOAT, rng, bias=True)
    x = rng.standard_normal((2, 8, 10, 10)).astype(np.float32)
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    rep = Backend.prepare(m, "CPU")
    rep.state.node_by_node = True
    got = rep.run({"x": x})[0]
    assert rep.last_run.cpu_segments == 0 and rep.last_run.runtime_fallbacks == 0
    np.testing.assert_allclose(got, want, atol=2e-5 * max(1.0, float(np.abs(want).max())), rtol=0)
    bad = model("3x3", TensorProto.FLOAT, rng, bias=True)
    bad.graph.node[0].attribute.append(helper.make_attribute("auto_pad", "SAME_MIDDLE"))
    with pytest.raises(ValueError, match="auto_pad"):
        Backend.prepare(bad, "CPU").run({"x": x})


T_CASES = {  # ConvTranspose: x sizes (no batch), weight (Cin, Cout / group, window), attributes
    "up-2x2/2": ((8, 5, 5), (8, 4, 2, 2), dict(strides=[2, 2])),
    "3x3/2-p1-op1": ((4, 5, 5), (4, 6, 3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1])),
    "grouped-dilated-asymmetric": ((4, 6, 6), (4, 3, 3, 3), dict(group=2, dilations=[2, 2], pads=[0, 1, 1, 0])),
    "depthwise": ((6, 5, 5), (6, 1, 4, 4), dict(group=6, strides=[2, 2], pads=[1, 1, 1, 1])),
    "1d-k4/2": ((6, 9), (6, 5, 4), dict(strides=[2], pads=[1, 1])),
    "3d": ((3, 3, 4, 3), (3, 2, 2, 2, 2), dict(strides=[2, 2, 2])),
    "output-shape": ((4, 5, 5), (4, 6, 3, 3), dict(strides=[2, 2], output_shape=[10, 10])),
    # output_shape beyond the full result (9 x 7): the output past it is the bias (no input reaches it)
    "output-shape-beyond": ((3, 3, 3), (3, 2, 3, 3), dict(strides=[3, 2], output_shape=[10, 8])),
    "same-upper": ((4, 5, 5), (4, 6, 3, 3), dict(strides=[2, 2], auto_pad="SAME_UPPER")),
    "same-lower": ((4, 5, 5), (4, 6, 3, 3), dict(strides=[2, 2], auto_pad="SAME_LOWER")),
}


@pytest.mark.parametrize("dt", [TensorProto.FLOAT, TensorProto.FLOAT16], ids=["f32", "f16"])
@pytest.mark.parametrize("case", list(T_CASES))
def test_conv_transpose_matches_onnxruntime_on_the_device(rng, case, dt):
    xs, ws, attrs = T_CASES[case]
    npd = np.float16 if dt == TensorProto.FLOAT16 else np.float32
    cout = ws[1] * attrs.get("group", 1)
    inits = [numpy_helper.from_array((rng.standard_normal(ws) * 0.3).astype(npd), "w"),
             numpy_helper.from_array(rng.standard_normal(cout).astype(npd), "b")]
    node = helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], kernel_shape=list(ws[2:]), **attrs)
    g = helper.make_graph([node], "convt", [helper.make_tensor_value_info("x", dt, ["N", *xs])],
                          [helper.make_tensor_value_info("y", dt, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    rep = Backend.prepare(m, "CPU")
    for batch in (1, 3):
        x = rng.standard_normal((batch, *xs)).astype(npd)
        want = sess.run(None, {"x": x})[0]
        got = rep.run({"x": x})[0]
        assert rep.last_run.cpu_segments == 0 and rep.last_run.runtime_fallbacks == 0, rep.last_run.events
        assert got.shape == want.shape and got.dtype == want.dtype
        tol = 2e-5 if dt == TensorProto.FLOAT else 4e-3
        scale = max(1.0, float(np.abs(want.astype(np.float64)).max()))
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), atol=tol * scale, rtol=0)


@pytest.mark.parametrize("attrs", [dict(output_shape=[11, 8]), dict(output_shape=[10, 8], auto_pad="SAME_UPPER")])
def test_conv_transpose_output_beyond_at_its_start_runs_on_the_cpu(rng, attrs):
    """output_shape beyond the full result where the split puts padding before it (the result at
    an element offset inside the output): the node runs on the CPU, named, and agrees with
    onnxruntime."""
    inits = [numpy_helper.from_array((rng.standard_normal((3, 2, 3, 3)) * 0.3).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(2).astype(np.float32), "b")]
    node = helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], kernel_shape=[3, 3], strides=[3, 2], **attrs)
    g = helper.make_graph([node], "convt", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 3, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    x = rng.standard_normal((1, 3, 3, 3)).astype(np.float32)
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    rep = Backend.prepare(m, "CPU")
    got = rep.run({"x": x})[0]
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)
    assert any("beyond the full result at its start" in e for e in rep.last_run.events), rep.last_run.events


@pytest.mark.parametrize("dt", [TensorProto.FLOAT, TensorProto.FLOAT16], ids=["f32", "f16"])
def test_conv_relu_fused_gives_the_unfused_chains_bits(rng, dt):
    """Conv -> Relu runs as one CONVOLUTION with its fused ReLU (fusions.PATTERNS) and gives the
    bits of Conv then Relu (the same model with the Conv's output also a graph output: unfused),
    small sums that round to -0 in float16 and NaN included; both against onnxruntime."""
    m = model("3x3", dt, rng, bias=False)  # (with a bias: test_conv_matches_onnxruntime_on_the_device, fused too)
    rep = Backend.prepare(m, "CPU")
    fused = {p.index: p for p in rep.placement}
    assert fused[0].fused_into == 1 and "Conv+Relu" in fused[1].operator
    m2 = onnx.ModelProto()
    m2.CopyFrom(m)
    m2.graph.output.append(helper.make_tensor_value_info("y", dt, None))
    rep2 = Backend.prepare(m2, "CPU")
    assert all(p.fused_into is None and "fused" not in p.operator for p in rep2.placement)
    npd = np.float16 if dt == TensorProto.FLOAT16 else np.float32
    x = rng.standard_normal((2, *CASES["3x3"][0])).astype(npd)
    x[0, :, :4] *= npd(3e-7)  # tiny sums (float16: hundreds near 0, some round to -0 before the ReLU)
    x[1, 0, 3, 3] = np.nan
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    for node_by_node in (False, True):
        rep.state.node_by_node = rep2.state.node_by_node = node_by_node
        got = rep.run({"x": x})[0]
        want, y = rep2.run({"x": x})  # outputs: the Relu's, then the Conv's
        assert rep.last_run.cpu_segments == 0 and rep2.last_run.cpu_segments == 0
        bits = np.uint16 if dt == TensorProto.FLOAT16 else np.uint32
        np.testing.assert_array_equal(got.view(bits), want.view(bits))
        assert np.isnan(got).any() and not np.signbit(got[~np.isnan(got)]).any()
        ref = sess.run(None, {"x": x})[0]
        np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
        ok = ~np.isnan(ref)
        tol = 2e-5 if dt == TensorProto.FLOAT else 4e-3
        np.testing.assert_allclose(got[ok].astype(np.float64), ref[ok].astype(np.float64),
                                   atol=tol * max(1.0, float(np.abs(ref[ok]).max())), rtol=0)
    if dt == TensorProto.FLOAT16:
        assert (y.view(np.uint16) == 0x8000).any()  # the unfused Conv did give -0s
