"""ops/activation_params.py (the parameterized activations and ELEMENT_WISE_CLIP) against
tests/act_reference.py: the exact operators bit for bit a numpy float32 evaluation of the same
steps, the others within docs/activation_params.md's bounds; every float16 input and 2^16
float32 inputs with the special values, two parameter sets each; strided, broadcast and offset
inputs with poisoned outputs whose every other byte must stay unchanged; refused parameters,
types and levels; ONNX nodes against onnxruntime, float32 and float16."""

from __future__ import annotations

import numpy as np
import pytest
from act_reference import exact32, reference64, swish_terms
from helpers import assert_outside_unchanged, place, poison_against, random_strides, read_logical
from unary_reference import check_close, check_exact, every_float16, float32_inputs

import kompute_dml as kdml
from kompute_dml.ops.activation_params import OPS

DT = kdml.DataType
FL = kdml.FeatureLevel
TD = kdml.TensorDesc
IDS = [op.helper for op in OPS]
# float32 ulps: 5-15% above the largest errors measured by `tools/measure_unary.py --params`
BOUND = {"elu": 2.2, "celu": 2.3, "selu": 2.75, "scaled_tanh": 3.0, "parametric_softplus": 2.2}
F16_BOUND = 0.5 + 1e-3
PARAMS = {
    "leaky_relu": ({}, {"alpha": -0.3}), "elu": ({}, {"alpha": 0.3}), "celu": ({}, {"alpha": 0.7}),
    "selu": ({}, {"alpha": 2.0, "gamma": 0.75}), "hard_sigmoid": ({}, {"alpha": 0.1666, "beta": -0.25}),
    "hard_swish": ({}, {"alpha": 0.3, "beta": 0.4}), "thresholded_relu": ({}, {"alpha": -0.5}),
    "shrink": ({}, {"bias": 0.3, "threshold": 1.5}), "linear": ({}, {"alpha": -1.5, "beta": 0.1}),
    "scaled_tanh": ({}, {"alpha": 1.7159, "beta": 0.6667}), "parametric_softplus": ({}, {"alpha": 0.5, "beta": 3.0}),
    "clip": ({}, {"min": -1.5, "max": 2.0, "scale_bias": kdml.ScaleBias(0.5, 0.25)}),
    "threshold": ({}, {"min": 0.25, "scale_bias": kdml.ScaleBias(-2.0, 1.0)}, {"min": -np.inf}),
    "swish": ({}, {"sigmoid_input_scale": 1.702}, {"sigmoid_input_scale": -0.5}),
}
# SWISH: the sigmoid's ulps (SIGMOID's bound, docs/elementwise_unary.md: 2.6 with a correctly rounded
# division, plus 2 for the device's; float16: rounded once from float32) scaled by |x|, plus the product's half ulp
SWISH_SIGMOID_ULPS = {np.dtype(np.float32): 4.6, np.dtype(np.float16): 0.5 + 1e-3}


def desc_type(op):
    return getattr(kdml, "".join(w.capitalize() for w in op.name.split("_")) + "Desc")


def ref_of(op, x, kw):
    kw = dict(kw)
    sb = kw.pop("scale_bias", None)
    if sb is not None:  # g(x) = x * scale + bias in float32 first
        with np.errstate(all="ignore"):
            x = (x.astype(np.float32) * np.float32(sb.scale)).astype(np.float32) + np.float32(sb.bias)
    with np.errstate(invalid="ignore"):  # NaN payloads widened
        return exact32(op.helper, x, **kw).astype(np.float64) if op.exact else reference64(op.helper, x, **kw)


def spacing(v, dtype):
    """The ulp of dtype at |v| (subnormal spacing below the normal range)."""
    with np.errstate(all="ignore"):
        return np.spacing(np.abs(v).astype(dtype)).astype(np.float64)


def check_swish(got, x, kw, flushes=False):
    """x * sigmoid(scale x) against float64: NaN where the reference is (NaN x, -inf * 0), the sign
    of x everywhere else (zeros included), and |got - x s| within the sigmoid's error times |x|
    plus the product's rounding (float32's sigmoid may be subnormal: its error is absolute there)."""
    v, sig = swish_terms(x, kw.get("sigmoid_input_scale", 1.0))
    with np.errstate(all="ignore"):
        ref = v * sig
    nan = np.isnan(ref)
    assert np.array_equal(np.isnan(got), nan), "NaN results differ"
    g, r, v, sig = got[~nan].astype(np.float64), ref[~nan], v[~nan], sig[~nan]
    assert np.array_equal(np.signbit(g), np.signbit(v)), "a result without x's sign"
    inf = np.isinf(r)
    assert np.array_equal(g[inf], r[inf]) and np.isfinite(g[~inf]).all()
    g, r, v, sig = g[~inf], r[~inf], v[~inf], sig[~inf]
    with np.errstate(all="ignore"):
        budget = SWISH_SIGMOID_ULPS[got.dtype] * np.abs(v) * spacing(sig, got.dtype) + 0.5 * spacing(r, got.dtype)
    ok = np.abs(g - r) <= budget
    if flushes and got.dtype == np.float32:  # a GPU's multiply may flush a subnormal product or operand
        tiny = np.finfo(np.float32).tiny  # (the H100 gives -0 for x = -87.3, whose sigmoid is subnormal)
        ok |= (g == 0) & ((np.abs(r) < tiny) | (np.abs(v) < tiny) | (sig < tiny))
    bad = np.flatnonzero(~ok)
    assert bad.size == 0, f"{bad.size} beyond the bound, first x {v[bad[0]]!r}: got {g[bad[0]]!r}, want {r[bad[0]]!r}"


def check(op, got, x, kw, flushes=False):
    if op.helper == "swish":
        return check_swish(got, x, kw, flushes)
    ref = ref_of(op, x, kw)
    if op.exact and flushes and got.dtype == np.float32:
        # A GPU may flush a float32 sum's subnormal result to zero (the module's docstring): there,
        # such results are +-0 or exact; every other result must be exact.
        sub = (np.abs(ref) < np.finfo(np.float32).tiny) & (ref != 0)
        assert np.all((got[sub] == 0) | (got[sub] == ref[sub].astype(np.float32))), "a subnormal result is neither 0 nor exact"
        check_exact(got[~sub], ref[~sub])
    elif op.exact:
        check_exact(got, ref)
    else:
        check_close(got, ref, BOUND[op.helper] if got.dtype == np.float32 else F16_BOUND)


def run_packed(dev, op, x, **kw):
    d = TD(DT.from_numpy(x.dtype), x.shape)
    t, _ = place(dev, np.random.default_rng(0), d, x, guard=16)
    y, _ = place(dev, np.random.default_rng(1), d, guard=16)
    dev.compile(desc_type(op)(d, d, **kw)).execute([t], [y])
    return y.numpy()


@pytest.mark.parametrize("op", OPS, ids=IDS)
def test_values(dev, rng, op):
    for x in (every_float16(), float32_inputs(rng, 1 << 16)):
        for kw in PARAMS[op.helper]:
            check(op, run_packed(dev, op, x, **kw), x, kw, flushes=dev.device_type != "cpu")


def test_special_values(dev):
    x = np.array([np.nan, -0.0, 0.0, np.inf, -np.inf, -1e-45], np.float32)
    bits = lambda y: y.numpy().view(np.uint32).tolist()  # noqa: E731
    assert bits(kdml.thresholded_relu(x, alpha=-1.0, device=dev)) == [0, 0x80000000, 0, 0x7F800000, 0, 0x80000001]
    assert bits(kdml.shrink(x, device=dev))[:1] == [0]  # NaN: the comparisons are false
    assert np.isnan(kdml.hard_swish(x, device=dev).numpy()[[0, 4]]).all()  # -inf * 0
    assert kdml.elu(x, device=dev).numpy()[4] == -1.0 and bits(kdml.elu(x, device=dev))[1] == 0x80000000
    assert kdml.leaky_relu(x, device=dev).numpy()[5] == 0.0  # 0.01 * -2^-149 rounds to -0
    # CELU's max(0, x) + min(0, ...) and SELU's Gamma (Alpha exp(x) - Alpha) are +0 at x = -0 and +0
    for alpha in (1.0, 0.7):
        assert bits(kdml.celu(x, alpha=alpha, device=dev))[1:3] == [0, 0]
    assert bits(kdml.selu(x, device=dev))[1:3] == [0, 0]
    assert bits(kdml.selu(x, gamma=-2.0, device=dev))[1:3] == [0x80000000, 0x80000000]  # Gamma * +0
    assert bits(kdml.elu(x, device=dev))[1:3] == [0x80000000, 0]  # x itself for x >= 0
    assert kdml.clip(x, min=-1.0, max=1.0, device=dev).numpy()[3:5].tolist() == [1.0, -1.0]
    # CLIP with Min > Max: the page's max(Min, min(x, Max)) gives Min
    assert kdml.clip(np.array([0.0, 5.0], np.float32), min=2.0, max=1.0, device=dev).numpy().tolist() == [2.0, 2.0]


def values(rng, dt, sizes):
    x = rng.standard_normal(sizes) * 3
    flat = x.reshape(-1)
    k = min(flat.size, 5)
    flat[rng.choice(flat.size, k, replace=False)] = [0.0, -0.0, np.inf, -np.inf, np.nan][:k]
    return x.astype(dt.numpy_dtype)


@pytest.mark.parametrize("op", OPS, ids=IDS)
@pytest.mark.parametrize("dt", (DT.FLOAT32, DT.FLOAT16), ids=("f32", "f16"))
def test_layouts(dev, rng, op, dt):
    kw = PARAMS[op.helper][1]
    for sizes in ((7,), (3, 5), (2, 3, 4), (1, 3, 1, 5, 2), (2, 1, 3, 2, 2, 1, 3, 2)):
        x_desc = TD(dt, sizes, random_strides(rng, sizes, allow_broadcast=True))
        y_desc = TD(dt, sizes, random_strides(rng, sizes, allow_broadcast=False))
        x, xraw = place(dev, rng, x_desc, values(rng, dt, sizes))
        y, _ = place(dev, rng, y_desc)
        logical = read_logical(xraw, x.offset, x_desc)
        before = poison_against(y, ref_of(op, logical, kw).astype(logical.dtype), rng)
        dev.compile(desc_type(op)(x_desc, y_desc, **kw)).execute([x], [y])
        got = read_logical(assert_outside_unchanged(y, before), y.offset, y_desc)
        assert x.buffer.read() == xraw
        check(op, got, logical, kw)


def test_in_place_and_helper(dev, rng):
    x = values(rng, DT.FLOAT16, (5, 7))
    t, _ = place(dev, rng, TD(DT.FLOAT16, (5, 7)), x)
    dev.compile(kdml.ActivationHardSigmoidDesc(t.desc, t.desc)).execute([t], [t])
    check(OPS[4], t.numpy(), x, {})
    y = kdml.shrink(x.astype(np.float32), bias=0.25, threshold=1.0, device=dev)
    check(OPS[7], y.numpy(), x.astype(np.float32), {"bias": 0.25, "threshold": 1.0})
    with pytest.raises(TypeError, match="unexpected keyword"):
        kdml.elu(x, gamma=2.0, device=dev)


SWISH = next(op for op in OPS if op.helper == "swish")


def bits_of(a):
    a = np.asarray(a)
    return a.view(np.uint16 if a.dtype == np.float16 else np.uint32)


@pytest.mark.parametrize("dt", (DT.FLOAT32, DT.FLOAT16), ids=("f32", "f16"))
def test_swish_is_the_unfused_pair(dev, rng, dt):
    """With SigmoidInputScale 1, the bits of ELEMENT_WISE_MULTIPLY(x, ACTIVATION_SIGMOID(x)): every
    float16, float32 specials and random bit patterns, packed and on a strided, offset layout
    (the kernel's sigmoid and product are the unfused operators' own)."""
    x = every_float16() if dt == DT.FLOAT16 else float32_inputs(rng, 1 << 16)
    unfused = kdml.mul(x, kdml.sigmoid(x, device=dev), device=dev).numpy()
    np.testing.assert_array_equal(bits_of(kdml.swish(x, device=dev).numpy()), bits_of(unfused))
    np.testing.assert_array_equal(bits_of(kdml.swish(x, sigmoid_input_scale=1.0, device=dev).numpy()), bits_of(unfused))
    sizes = (3, 4, 5)
    xd = TD(dt, sizes, random_strides(rng, sizes, allow_broadcast=True))
    yd = TD(dt, sizes, random_strides(rng, sizes, allow_broadcast=False))
    xt, xraw = place(dev, rng, xd, values(rng, dt, sizes))
    y, _ = place(dev, rng, yd)
    logical = read_logical(xraw, xt.offset, xd)
    want = kdml.mul(logical, kdml.sigmoid(logical, device=dev), device=dev).numpy()
    before = poison_against(y, want, rng)
    dev.compile(kdml.ActivationSwishDesc(xd, yd)).execute([xt], [y])
    got = read_logical(assert_outside_unchanged(y, before), y.offset, yd)
    np.testing.assert_array_equal(bits_of(got), bits_of(want))


def test_swish_special_values_and_in_place(dev, rng):
    """-0 stays -0, -inf gives NaN (-inf * 0), +inf gives +inf, a subnormal x about x / 2; in place."""
    x = np.array([-0.0, 0.0, -np.inf, np.inf, np.nan, -1e-40, 1e-40, -100.0, 100.0], np.float32)
    y = kdml.swish(x, device=dev).numpy()
    assert bits_of(y)[:2].tolist() == [0x80000000, 0] and np.isnan(y[[2, 4]]).all() and y[3] == np.inf
    assert y[8] == 100.0
    # a subnormal x, and sigmoid(-100), a float32 subnormal: the product keeps their rounding, or is
    # -0 on a GPU whose multiply flushes subnormal operands (the H100)
    flushed = dev.device_type != "cpu" and bits_of(y)[5] == bits_of(y)[7] == 0x80000000
    assert flushed or (y[5] == np.float32(-1e-40) * np.float32(0.5) and -4e-42 < y[7] < -3e-42)
    for dt in (DT.FLOAT16, DT.FLOAT32):
        v = values(rng, dt, (5, 7))
        t, _ = place(dev, rng, TD(dt, (5, 7)), v)
        dev.compile(kdml.ActivationSwishDesc(t.desc, t.desc, sigmoid_input_scale=0.75)).execute([t], [t])
        check_swish(t.numpy(), v, {"sigmoid_input_scale": 0.75})
    with pytest.raises(TypeError, match="unexpected keyword"):
        kdml.swish(x, alpha=2.0, device=dev)


F = TD(DT.FLOAT32, (2, 3))
BAD = [
    (kdml.ActivationLeakyReluDesc(F, F, alpha=float("nan")), kdml.InvalidArgumentError, r"^alpha: must be a number"),
    (kdml.ActivationScaledEluDesc(F, F, gamma="1"), kdml.InvalidArgumentError, r"^gamma: must be a real number"),
    (kdml.ElementWiseClipDesc(F, F, max=float("nan")), kdml.InvalidArgumentError, r"^max: must be a number"),
    (kdml.ActivationShrinkDesc(TD(DT.INT32, (2, 3)), TD(DT.INT32, (2, 3))), kdml.UnsupportedError,
     r"^input_tensor: ACTIVATION_SHRINK does not support INT32"),
    (kdml.ElementWiseClipDesc(F, TD(DT.FLOAT16, (2, 3))), kdml.InvalidArgumentError, r"^output_tensor\.data_type"),
    (kdml.ActivationEluDesc(F, TD(DT.FLOAT32, (2, 3), (0, 1))), kdml.InvalidArgumentError, r"^output_tensor\.strides"),
    (kdml.ActivationSwishDesc(F, F, sigmoid_input_scale=float("nan")), kdml.InvalidArgumentError,
     r"^sigmoid_input_scale: must be a number"),
    (kdml.ActivationSwishDesc(F, F, sigmoid_input_scale=None), kdml.InvalidArgumentError,
     r"^sigmoid_input_scale: must be a real number"),
    (kdml.ActivationSwishDesc(TD(DT.INT32, (2, 3)), TD(DT.INT32, (2, 3))), kdml.UnsupportedError,
     r"^input_tensor: ACTIVATION_SWISH does not support INT32"),
    (kdml.ActivationSwishDesc(F, TD(DT.FLOAT32, (3, 2))), kdml.InvalidArgumentError, r"^output_tensor\.sizes"),
    (kdml.ActivationSwishDesc(TD(DT.FLOAT32, (2,) * 9), TD(DT.FLOAT32, (2,) * 9)), kdml.InvalidArgumentError,
     r"^input_tensor\.sizes: dimension count must be 1 to 8"),
]


@pytest.mark.parametrize(("desc", "error", "match"), BAD, ids=[m[1:30] for _, _, m in BAD])
def test_refused(dev, desc, error, match):
    with pytest.raises(error, match=match):
        dev.compile(desc)
    run_packed(dev, OPS[0], np.ones(3, np.float32))  # the device stays usable


@pytest.mark.parametrize("op", OPS, ids=IDS)
def test_feature_levels(op):
    first, (lo, hi) = op.rows[0]
    with kdml.Device(feature_level=first) as d:
        for dims in (lo, hi):
            t = TD(DT.FLOAT16, (2,) * dims)
            d.compile(desc_type(op)(t, t))
    before = [lv for lv in FL if lv < first]
    if before:
        with kdml.Device(feature_level=before[-1]) as d, pytest.raises(kdml.UnsupportedError):
            t = TD(DT.FLOAT16, (2,) * 4)
            d.compile(desc_type(op)(t, t))


# ---- ONNX ---------------------------------------------------------------------------------------
ONNX_NODES = [  # (op_type, attributes, helper)
    ("LeakyRelu", {}, "leaky_relu"), ("LeakyRelu", {"alpha": 0.2}, "leaky_relu"), ("Elu", {"alpha": 0.5}, "elu"),
    ("Celu", {"alpha": 1.5}, "celu"), ("Selu", {}, "selu"), ("HardSigmoid", {}, "hard_sigmoid"),
    ("HardSigmoid", {"alpha": 0.25, "beta": 0.4}, "hard_sigmoid"), ("HardSwish", {}, "hard_swish"),
    ("ThresholdedRelu", {"alpha": 0.5}, "thresholded_relu"), ("Shrink", {"bias": 0.2, "lambd": 0.7}, "shrink"),
    ("Shrink", {}, "shrink"),
]


def _onnx():
    pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from onnx import helper

    from kompute_dml.onnx_backend import Backend
    return ort, helper, Backend


def edge_inputs(dt):
    x = (np.random.default_rng(5).standard_normal((4, 8)) * 4).astype(np.float32)
    x.reshape(-1)[:12] = [0.5, -2.5, 0.0, -0.0, 3.0, -3.0, 1e-3, -1e-3, 60000.0, -60000.0, 0.7, -0.7]
    return x.astype(dt)


@pytest.mark.parametrize("dt", (np.float32, np.float16), ids=("f32", "f16"))
def test_onnx_against_onnxruntime(dt):
    """Every node type with default and given attributes on the device, equal to onnxruntime
    (the exact operators bit for bit where onnxruntime computes the same steps, else close)."""
    ort, helper, Backend = _onnx()
    from onnx import TensorProto
    et = TensorProto.FLOAT if dt == np.float32 else TensorProto.FLOAT16
    cases = [c for c in ONNX_NODES if dt == np.float32 or c[0] != "Celu"]  # ONNX's Celu is float32 only
    nodes = [helper.make_node(t, ["x"], [f"y{i}"], **a) for i, (t, a, _) in enumerate(cases)]
    outs = [helper.make_tensor_value_info(f"y{i}", et, [4, 8]) for i in range(len(nodes))]
    graph = helper.make_graph(nodes, "act", [helper.make_tensor_value_info("x", et, [4, 8])], outs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    x = edge_inputs(dt)
    tiny, big = (1e-40, 3e38) if dt == np.float32 else (6e-8, 65504.0)  # a subnormal, near the largest finite
    x.reshape(-1)[12:21] = [np.nan, np.inf, -np.inf, tiny, -tiny, big, -big, 1.0, -1.0]
    rep = Backend.prepare(model)
    got = rep.run({"x": x})
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    # atol: onnxruntime's exp(x) - 1 is 0 where kompute_dml's expm1 keeps a subnormal x
    tol = dict(rtol=2e-6, atol=1e-7) if dt == np.float32 else dict(rtol=1e-3, atol=1e-4)
    for (t, a, _), g, w in zip(cases, got, want):
        assert g.dtype == w.dtype
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), err_msg=f"{t} {a}", **tol)
        # NaN where onnxruntime has NaN (in: NaN; HardSwish(-inf) = -inf * 0), zeros of its sign
        assert np.array_equal(np.isnan(g), np.isnan(w)), f"{t} {a}"
        zero = (g == 0) & (w == 0)
        if t == "Selu" and dt == np.float16:  # onnxruntime's float16 Selu(-0) is -0, its float32 one +0 as the page's
            zero &= ~((x == 0) & np.signbit(x))
        assert np.array_equal(np.signbit(g[zero]), np.signbit(w[zero])), f"{t} {a}: signed zeros differ"
    assert {p.target for p in rep.placement} == {"vulkan"}


def clip_model(helper, opset, et, attrs=None, bounds=None, fed=False):
    from onnx import numpy_helper
    inits, ins = [], [helper.make_tensor_value_info("x", et, [4, 8])]
    names = ["x"]
    for name, v in (bounds or {}).items():
        if v is None:
            names.append("")
        elif fed:
            ins.append(helper.make_tensor_value_info(name, et, []))
            names.append(name)
        else:
            inits.append(numpy_helper.from_array(np.array(v, {1: np.float32, 10: np.float16}[et]), name))
            names.append(name)
    node = helper.make_node("Clip", names, ["y"], **(attrs or {}))
    graph = helper.make_graph([node], "clip", ins, [helper.make_tensor_value_info("y", et, [4, 8])], initializer=inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


@pytest.mark.parametrize("dt", (np.float32, np.float16), ids=("f32", "f16"))
@pytest.mark.parametrize("case", [
    (6, {"min": -1.0, "max": 2.5}, None), (6, {}, None), (13, None, {"lo": -0.5, "hi": 1.0}),
    (13, None, {"lo": None, "hi": 1.0}), (13, None, {"lo": -2.0}), (13, None, {}), (13, None, {"lo": 3.0, "hi": 1.0}),
], ids=["opset6", "opset6-none", "inputs", "max-only", "min-only", "neither", "min>max"])
def test_onnx_clip(dt, case):
    """Clip's opset-6 attributes and opset-11+ constant inputs, each absent bound the type's
    lowest / highest finite value (infinities are clipped, as onnxruntime does), NaN kept,
    min > max giving max: bit for bit onnxruntime's."""
    ort, helper, Backend = _onnx()
    from onnx import TensorProto
    opset, attrs, bounds = case
    et = TensorProto.FLOAT if dt == np.float32 else TensorProto.FLOAT16
    model = clip_model(helper, opset, et, attrs, bounds)
    x = edge_inputs(dt)
    x.reshape(-1)[12:15] = [np.inf, -np.inf, np.nan]
    rep = Backend.prepare(model)
    got = rep.run({"x": x})[0]
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, want)
    assert [p.target for p in rep.placement] == ["vulkan"]


def test_onnx_clip_fed_bounds_on_device():
    """Fed bounds are read on the host at each run (node by node): one prepared model, the bounds
    changed between runs, each against numpy's clip."""
    _ort, helper, Backend = _onnx()
    from onnx import TensorProto
    model = clip_model(helper, 13, TensorProto.FLOAT, None, {"lo": -1.0, "hi": 1.0}, fed=True)
    x = edge_inputs(np.float32)
    rep = Backend.prepare(model)
    for lo, hi in ((-1.0, 1.0), (0.0, 6.0), (-0.5, 0.25)):
        feeds = {"x": x, "lo": np.array(lo, np.float32), "hi": np.array(hi, np.float32)}
        np.testing.assert_array_equal(rep.run(feeds)[0], np.clip(x, lo, hi))
    assert [p.target for p in rep.placement] == ["vulkan"] and rep.last_run.runtime_fallbacks == 0


@pytest.mark.parametrize("dt", (np.float32, np.float16), ids=("f32", "f16"))
def test_onnx_mish(dt):
    """Mish (opset 18) on the device as its function body, x * tanh(softplus(x)): within 3 float32 ulps
    (2 float16 ulps) of float64 where |Mish(x)| > 1e-3, within 1e-9 (1e-6) absolutely below (onnxruntime's
    own: 4.7 and 0.9 ulps); NaN, infinities and signed zeros as onnxruntime gives them."""
    ort, helper, Backend = _onnx()
    from onnx import TensorProto
    et = TensorProto.FLOAT if dt == np.float32 else TensorProto.FLOAT16
    n = 4000
    graph = helper.make_graph([helper.make_node("Mish", ["x"], ["y"])], "mish", [helper.make_tensor_value_info("x", et, [n])],
                              [helper.make_tensor_value_info("y", et, [n])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    x = (np.random.default_rng(11).standard_normal(n) * 8).astype(dt)
    x[:9] = [0.0, -0.0, np.nan, np.inf, -np.inf, 30.0, -30.0, 1e-3, -1e-3]
    rep = Backend.prepare(model)
    (got,) = rep.run({"x": x})
    assert {p.target for p in rep.placement} == {"vulkan"}
    (want,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    assert np.array_equal(np.isnan(got), np.isnan(want)) and np.array_equal(got[np.isinf(want)], want[np.isinf(want)])
    zero = (got == 0) & (want == 0)
    assert np.array_equal(np.signbit(got[zero]), np.signbit(want[zero]))
    finite = np.isfinite(x)
    x64 = x[finite].astype(np.float64)
    ref = x64 * np.tanh(np.log1p(np.exp(x64)))
    g = got[finite].astype(np.float64)
    big = np.abs(ref) > 1e-3
    ulp = np.spacing(np.abs(ref[big]).astype(dt)).astype(np.float64)
    assert (np.abs(g[big] - ref[big]) / ulp).max() <= (3.0 if dt == np.float32 else 2.0)
    assert np.abs(g[~big] - ref[~big]).max() <= (1e-9 if dt == np.float32 else 1e-6)
