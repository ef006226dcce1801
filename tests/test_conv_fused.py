"""CONVOLUTION's fused activations (ops/conv_fused.py, shaders/conv_common.glsl): LEAKY_RELU, CLIP
(ReLU6), SIGMOID, HARD_SIGMOID, HARD_SWISH, TANH, ELU, SWISH (SigmoidInputScale 1 and not; at 1
also the bits of MULTIPLY(y, SIGMOID(y))) and RELU give, in every kernel (tiled, direct and its row variant,
split-K, the tensor cores' emulated family in FLOAT16 and FLOAT32 under allow_half_precision), the
bits of the unfused chain: the convolution without activation, then the standalone operator on its
output. Sums cover the activations' regimes (scales 1e-3 to 1e2, FLOAT16 overflow to infinity) and
NaN. Refusals name `fused_activation`. The ONNX fusions Conv+<activation> (onnx_backend/fusions.py)
give the unfused model's bits; a Clip with a fed bound is not fused; the prepared model's
allow_half_precision runs a float32 Conv on the tensor-core kernel with its weight uploaded once as
float16."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import pytest
from act_edges import EDGE_ACTS, EDGES16, EDGES32
from helpers import compile_at_level, direct_kernel
from onnx import TensorProto, helper, numpy_helper
from test_gemm_coop import coop_available

import kompute_dml as kdml
from kompute_dml.onnx_backend import Backend
from kompute_dml.onnx_backend.handlers_activation import FUSED_TYPES
from kompute_dml.onnx_backend.handlers_conv import _HALF_WEIGHTS

DT = kdml.DataType
TD = kdml.TensorDesc
F16, F32 = DT.FLOAT16, DT.FLOAT32

# (descriptor, the standalone helper and its keywords)
ACTS = {
    "relu": (kdml.ActivationReluDesc(None, None), kdml.relu, {}),
    "leaky_relu": (kdml.ActivationLeakyReluDesc(None, None, alpha=0.1), kdml.leaky_relu, {"alpha": 0.1}),
    "clip": (kdml.ElementWiseClipDesc(None, None, min=0.0, max=6.0), kdml.clip, {"min": 0.0, "max": 6.0}),
    "sigmoid": (kdml.ActivationSigmoidDesc(None, None), kdml.sigmoid, {}),
    "hard_sigmoid": (kdml.ActivationHardSigmoidDesc(None, None, alpha=0.2, beta=0.5), kdml.hard_sigmoid,
                     {"alpha": 0.2, "beta": 0.5}),
    "hard_swish": (kdml.ActivationHardSwishDesc(None, None), kdml.hard_swish, {}),
    "tanh": (kdml.ActivationTanhDesc(None, None), kdml.tanh, {}),
    "elu": (kdml.ActivationEluDesc(None, None, alpha=0.7), kdml.elu, {"alpha": 0.7}),
    "swish": (kdml.ActivationSwishDesc(None, None), kdml.swish, {}),
    "swish_scaled": (kdml.ActivationSwishDesc(None, None, sigmoid_input_scale=1.702), kdml.swish,
                     {"sigmoid_input_scale": 1.702}),
}
# kernel -> (KDML_CONV_KERNEL, KDML_CONV_SPLIT, the first variant's prefix)
KERNELS = {"tiled": ("tiled", "1", "conv_"), "direct": ("direct", "1", "convd3_"),
           "direct-rows": ("direct-rows", "1", "convd3s2_"), "split": ("tiled", "3", "convs_"),
           "coop": ("coopmat-emulated", "1", "convcx_"), "coop-split": ("coopmat-emulated", "2", "convcxs_")}


def inputs(rng, npd):
    """x (2, 16, 6, 5) whose batches sum at scales 1 and 30 (FLOAT16: some overflow), a NaN; w, b."""
    x = rng.standard_normal((2, 16, 6, 5))
    x[1] *= 30
    x[0, 3, 2, 2] = np.nan
    w = rng.standard_normal((16, 16, 3, 3)) * 0.3
    return x.astype(npd), w.astype(npd), rng.standard_normal(16).astype(npd)


@pytest.mark.parametrize("kernel", list(KERNELS))
@pytest.mark.parametrize("dt", [F32, F16], ids=lambda d: d.name)
def test_fused_equals_unfused_chain(dev, rng, monkeypatch, kernel, dt):
    env, split, pre = KERNELS[kernel]
    direct_kernel(monkeypatch, env)
    monkeypatch.setenv("KDML_CONV_SPLIT", split)
    half = kernel.startswith("coop") and dt == F32  # FLOAT32 on the tensor-core kernel: allow_half_precision
    npd = dt.numpy_dtype
    bits = np.uint16 if dt == F16 else np.uint32
    x, w, b = inputs(rng, npd)
    if dt == F16:  # FLOAT16: channel 0's sums beyond 65504 (infinities through the activations)
        x[1, :, :2] = 5000
        w[0] = 1
    kw = dict(start_padding=(1, 0), end_padding=(0, 1), strides=(1, 2), allow_half_precision=half)
    plain = kdml.conv(x, w, b, **kw)
    seen = set()
    for name, (desc, fn, params) in ACTS.items():
        fused = kdml.conv(x, w, b, activation=desc, **kw).numpy()
        chain = fn(plain, **params).numpy()
        np.testing.assert_array_equal(fused.view(bits), chain.view(bits), err_msg=name)
        seen.add(name)
    silu = kdml.mul(plain, kdml.sigmoid(plain)).numpy()  # SiLU as two operators: the fused SWISH's bits
    np.testing.assert_array_equal(kdml.conv(x, w, b, activation=ACTS["swish"][0], **kw).numpy().view(bits), silu.view(bits))
    assert np.isnan(plain.numpy()).any() and (dt == F32 or np.isinf(plain.numpy()).any())
    op = dev.compile(kdml.ConvolutionDesc(TD(dt, x.shape), TD(dt, w.shape), TD(dt, (1, 16, 1, 1)), plain.desc,
                                          start_padding=(1, 0), end_padding=(0, 1), strides=(1, 2),
                                          fused_activation=ACTS["elu"][0]), allow_half_precision=half)
    assert op.variants[0].startswith(pre)


@pytest.mark.parametrize("kernel", [*KERNELS, "tensor_cores"])
@pytest.mark.parametrize("dt", [F32, F16], ids=lambda d: d.name)
def test_activation_edges(dev, rng, monkeypatch, kernel, dt):
    """HardSwish and Swish in the epilogue give the unfused chain's bits on the activations' edge values
    (act_edges: where GEMM's fast forms hand over; FLOAT16's edges) times 8 scales, on every kernel: a
    1 x 1 filter over one channel, so each output is one value times one scale."""
    if kernel == "tensor_cores" and (why := coop_available(dev)):
        pytest.skip(why)
    env, split, _pre = KERNELS.get(kernel, ("coopmat", "1", "convc_"))
    direct_kernel(monkeypatch, env)
    monkeypatch.setenv("KDML_CONV_SPLIT", split)
    edges = np.array(EDGES16 if dt == F16 else EDGES32, dt.numpy_dtype)
    x = rng.permutation(np.concatenate([edges, (rng.standard_normal(30) * 4).astype(dt.numpy_dtype)]))
    scales = [1.0, -1.0, 0.5, 2.0 ** -10, 2.0 ** 10, -2.0 ** -14, 3.0, 1.0]
    if dt == F32:
        scales[3:6] = [2.0 ** -20, 2.0 ** 20, -2.0 ** -100]
    w = np.array(scales, dt.numpy_dtype).reshape(8, 1, 1, 1)
    half = kernel.startswith("coop") or kernel == "tensor_cores"
    plain = kdml.conv(x.reshape(1, 1, 1, -1), w, allow_half_precision=half and dt == F32)
    bits = np.uint16 if dt == F16 else np.uint32
    for name in ("hard_swish", "swish", "swish_scaled"):
        desc, fn, params = EDGE_ACTS[name]
        fused = kdml.conv(x.reshape(1, 1, 1, -1), w, activation=desc, allow_half_precision=half and dt == F32).numpy()
        chain = fn(plain, **params).numpy()
        bad = np.flatnonzero(fused.view(bits) != chain.view(bits))
        assert bad.size == 0, f"{name}: {bad.size} differ, first {fused.flat[bad[0]]!r} != {chain.flat[bad[0]]!r}"


def test_refusals(dev):
    """Other activations: UnsupportedError naming fused_activation; an activation's tensors, a NaN or
    non-numeric parameter: InvalidArgumentError naming it; CLIP with a ScaleBias, HARD_SWISH below
    its feature level 6_2 (SWISH too): UnsupportedError; relu=True with an activation: the helper's refusal."""
    base = kdml.ConvolutionDesc(TD(F32, (1, 4, 5, 5)), TD(F32, (6, 4, 3, 3)), None, TD(F32, (1, 6, 3, 3)))

    def compile_with(act):
        return dev.compile(dataclasses.replace(base, fused_activation=act))

    for act in (kdml.ActivationSoftplusDesc(None, None), kdml.ActivationGeluDesc(None, None),
                kdml.ElementWiseAddDesc(None, None, None)):
        with pytest.raises(kdml.UnsupportedError, match="^fused_activation"):
            compile_with(act)
    with pytest.raises(kdml.InvalidArgumentError, match="^fused_activation"):
        compile_with(kdml.ActivationSigmoidDesc(base.output_tensor, None))
    with pytest.raises(kdml.InvalidArgumentError, match="^fused_activation.alpha"):
        compile_with(kdml.ActivationLeakyReluDesc(None, None, alpha=float("nan")))
    with pytest.raises(kdml.InvalidArgumentError, match="^fused_activation.min"):
        compile_with(kdml.ElementWiseClipDesc(None, None, min="low", max=6.0))
    with pytest.raises(kdml.UnsupportedError, match="^fused_activation: a fused ELEMENT_WISE_CLIP takes no scale_bias"):
        compile_with(kdml.ElementWiseClipDesc(None, None, scale_bias=kdml.ScaleBias(2.0, 0.0), min=0.0, max=6.0))
    for act in (kdml.ActivationHardSwishDesc(None, None), kdml.ActivationSwishDesc(None, None)):
        swish = dataclasses.replace(base, fused_activation=act)
        name = "HARD_SWISH" if isinstance(act, kdml.ActivationHardSwishDesc) else "SWISH"
        with pytest.raises(kdml.UnsupportedError, match=f"^fused_activation: ACTIVATION_{name} needs feature level"):
            compile_at_level(kdml.FeatureLevel.FL_6_1, swish)
        compile_at_level(kdml.FeatureLevel.FL_6_2, swish)
    with pytest.raises(kdml.InvalidArgumentError, match="^fused_activation.sigmoid_input_scale"):
        compile_with(kdml.ActivationSwishDesc(None, None, sigmoid_input_scale=float("nan")))
    with pytest.raises(kdml.InvalidArgumentError, match="^activation"):
        kdml.conv(np.ones((1, 4, 5, 5), np.float32), np.ones((6, 4, 3, 3), np.float32), relu=True,
                  activation=kdml.ActivationSigmoidDesc(None, None))


# ---- ONNX: Conv+<activation> ------------------------------------------------------------------
ATTRS = {"LeakyRelu": {"alpha": 0.2}, "Elu": {"alpha": 0.5}, "HardSigmoid": {"alpha": 0.25, "beta": 0.4},
         "Swish": {"alpha": 1.5}}


def conv_act_model(op_type: str, dt: int, rng, clip_max_input: bool = False) -> onnx.ModelProto:
    npd = np.float16 if dt == TensorProto.FLOAT16 else np.float32
    inits = [numpy_helper.from_array((rng.standard_normal((16, 8, 3, 3)) * 0.4).astype(npd), "w"),
             numpy_helper.from_array(rng.standard_normal(16).astype(npd), "b")]
    act_in = ["y"]
    inputs = [helper.make_tensor_value_info("x", dt, ["N", 8, 7, 7])]
    if op_type == "Clip":
        inits.append(numpy_helper.from_array(np.array(0, npd), "lo"))
        act_in += ["lo", "hi"]
        if clip_max_input:
            inputs.append(helper.make_tensor_value_info("hi", dt, []))
        else:
            inits.append(numpy_helper.from_array(np.array(6, npd), "hi"))
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1]),
             helper.make_node(op_type, act_in, ["z"], **ATTRS.get(op_type, {}))]
    g = helper.make_graph(nodes, "conv_act", inputs, [helper.make_tensor_value_info("z", dt, None)], inits)
    opset, ir = (24, 10) if op_type == "Swish" else (17, 8)  # (Swish: opset 24)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=ir)


@pytest.mark.parametrize("dt", [TensorProto.FLOAT, TensorProto.FLOAT16], ids=["f32", "f16"])
@pytest.mark.parametrize("op_type", [t for t in FUSED_TYPES if t != "Relu"])  # (Relu: test_onnx_conv.py)
def test_onnx_conv_activation_fused_gives_the_unfused_bits(rng, op_type, dt):
    """Conv -> <activation> runs as one CONVOLUTION (its placement says so) and gives the bits of the
    same model with the Conv's output also a graph output (unfused), whole-graph and node by node;
    close to onnxruntime's."""
    ort = pytest.importorskip("onnxruntime")
    m = conv_act_model(op_type, dt, rng)
    rep = Backend.prepare(m, "CPU")
    placed = {p.index: p for p in rep.placement}
    assert placed[0].fused_into == 1 and f"Conv+{op_type}" in placed[1].operator
    m2 = onnx.ModelProto()
    m2.CopyFrom(m)
    m2.graph.output.append(helper.make_tensor_value_info("y", dt, None))
    rep2 = Backend.prepare(m2, "CPU")
    assert all(p.fused_into is None for p in rep2.placement)
    npd = np.float16 if dt == TensorProto.FLOAT16 else np.float32
    x = (rng.standard_normal((2, 8, 7, 7)) * 3).astype(npd)
    x[1, 0, 3, 3] = np.nan
    bits = np.uint16 if dt == TensorProto.FLOAT16 else np.uint32
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    ref = sess.run(None, {"x": x})[0].astype(np.float64)
    for node_by_node in (False, True):
        rep.state.node_by_node = rep2.state.node_by_node = node_by_node
        got = rep.run({"x": x})[0]
        want = rep2.run({"x": x})[0]
        assert rep.last_run.cpu_segments == 0 and rep.last_run.runtime_fallbacks == 0
        np.testing.assert_array_equal(got.view(bits), want.view(bits))
        np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
        ok = ~np.isnan(ref)
        tol = 1e-5 if dt == TensorProto.FLOAT else 4e-3
        np.testing.assert_allclose(got[ok].astype(np.float64), ref[ok], atol=tol * max(1.0, float(np.abs(ref[ok]).max())),
                                   rtol=0)


def test_onnx_clip_with_a_fed_bound_is_not_fused(rng):
    m = conv_act_model("Clip", TensorProto.FLOAT, rng, clip_max_input=True)
    rep = Backend.prepare(m, "CPU")
    assert all(p.fused_into is None and "fused" not in p.operator for p in rep.placement)
    assert {p.target for p in rep.placement} == {"vulkan"}  # the Clip alone, its bound read per run
    ort = pytest.importorskip("onnxruntime")
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    x = rng.standard_normal((2, 8, 7, 7)).astype(np.float32)
    for hi in (6.0, 0.5):
        feeds = {"x": x, "hi": np.array(hi, np.float32)}
        np.testing.assert_allclose(rep.run(feeds)[0], sess.run(None, feeds)[0], rtol=1e-5, atol=1e-5)


def test_onnx_allow_half_precision_hook(rng, monkeypatch):
    """The prepared model's allow_half_precision (ctx.prepared.allow_half_precision; set here on the
    rep as Backend.prepare's option sets it) runs a float32 Conv+HardSwish on the tensor-core kernel
    (forced to its emulated family on lavapipe) with the weight uploaded once as float16: the bits of
    kdml.conv with that float16 weight under allow_half_precision, close to onnxruntime's float32."""
    ort = pytest.importorskip("onnxruntime")
    monkeypatch.setenv("KDML_CONV_KERNEL", "coopmat-emulated")
    m = conv_act_model("HardSwish", TensorProto.FLOAT, rng)
    rep = Backend.prepare(m, "CPU")
    assert not getattr(rep, "allow_half_precision", False)
    # what Backend.prepare(..., allow_half_precision=True) sets (the rep is frozen after prepare)
    object.__setattr__(rep, "allow_half_precision", True)
    x = rng.standard_normal((2, 8, 7, 7)).astype(np.float32)
    got = rep.run({"x": x})[0]
    assert list(_HALF_WEIGHTS[rep]) == ["w"] and _HALF_WEIGHTS[rep]["w"].desc.data_type == F16
    inits = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    want = kdml.conv(x, inits["w"].astype(np.float16), inits["b"], start_padding=(1, 1), end_padding=(1, 1),
                     activation=kdml.ActivationHardSwishDesc(None, None), allow_half_precision=True).numpy()
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, ref, atol=3e-3 * max(1.0, float(np.abs(ref).max())), rtol=0)
