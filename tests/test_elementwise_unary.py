"""The unary math operators (ops/elementwise_unary.py, shaders/unary_math.glsl), parametrized
over the module's table, against the float64 numpy reference of tests/unary_reference.py: the
exact operators bit for bit, the others within docs/elementwise_unary.md's bounds; every float16
input, 2^20 float32 inputs with the special values; ScaleBias and ROUND's modes; 1-8 dimensions
with random strides and broadcast inputs at random offsets with guard bytes and poisoned outputs
whose every other byte must stay unchanged; in place; refused descriptors and feature levels;
ONNX nodes through the backend against onnxruntime. ops/elementwise_trig.py's rows of the table
(TAN ... ATANH) run the same tests."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_outside_unchanged, place, poison_against, random_strides, read_logical
from unary_reference import check_close, check_exact, every_float16, float32_inputs, reference64

import kompute_dml as kdml
from kompute_dml.ops import elementwise_trig, elementwise_unary
from kompute_dml.ops.elementwise_unary import UnaryOp

OPS = elementwise_unary.OPS + elementwise_trig.OPS  # the table and ops/elementwise_trig.py's rows of it
DT = kdml.DataType
FL = kdml.FeatureLevel
TD = kdml.TensorDesc
FLOATS = (DT.FLOAT32, DT.FLOAT16)
# ulps of the data type (docs/elementwise_unary.md): the stated bounds, 5-10% above the largest errors
# measured (tools/measure_unary.py and the suite's random inputs: a sampled maximum is not a bound,
# and bounds at the sampled maximum failed on a random draw: SIGMOID 2.40 against 2.3)
# SIGMOID: 2.6 with a correctly rounded division (lavapipe's: 2.40 measured), plus 2 for the device's
# division (Vulkan lets OpFDiv be off by 2.5 ulp; shaders/unary_math.glsl um_sigmoid)
SIGMOID_ULPS = 2.6 + 2.0
BOUND = {"exp": (1.3, 0.5), "log": (0.9, 0.5), "sigmoid": (SIGMOID_ULPS, 0.5), "softsign": (1.6, 0.5), "tanh": (1.6, 0.5),
         "elementwise_tanh": (1.6, 0.5), "erf": (1.6, 0.5), "softplus": (2.1, 0.5),
         "sin": (0.85, 0.5), "cos": (0.85, 0.5),  # SIN / COS: 0.819 / 0.813 over every float32 (docs/elementwise_unary.md)
         # ops/elementwise_trig.py (docs/elementwise_trig.md: the largest errors over every float32)
         "tan": (1.05, 0.5), "asin": (0.7, 0.5), "acos": (0.7, 0.5), "atan": (0.9, 0.5), "sinh": (0.95, 0.5),
         "cosh": (0.7, 0.5), "asinh": (0.7, 0.5), "acosh": (0.6, 0.5), "atanh": (0.8, 0.5)}
# SOFTPLUS with a steepness s != 1: softplus(t)'s error (BOUND: 2.1 ulp of it) scaled by ulp(y) / s
# against ulp(y / s), which reaches 4/3 at s = 3 (y / 3 one binade below y's third), plus the
# division's rounding: 2.1 * 4/3 + 0.5 = 3.3 (measured 2.76 at s = 3; a random draw gave 3.005)
STEEP_BOUND = (3.3, 0.5)
F16_SLACK = 1e-3  # the float16 results' reference is the float64 value: 0.5 ulp + the float32 error
IDS = [op.helper for op in OPS]


def desc_type(op: UnaryOp) -> type:
    return getattr(kdml, "".join(w.capitalize() for w in op.name.split("_")) + "Desc")


def check(op: UnaryOp, got: np.ndarray, ref64: np.ndarray, fields: dict | None = None) -> None:
    if op.exact:
        check_exact(got, ref64)
    else:
        b32, b16 = STEEP_BOUND if (fields or {}).get("steepness", 1.0) != 1.0 else BOUND[op.helper]
        check_close(got, ref64, b32 if got.dtype == np.float32 else b16 + F16_SLACK)


def run_packed(dev, op: UnaryOp, x: np.ndarray, **fields) -> np.ndarray:
    d = TD(DT.from_numpy(x.dtype), x.shape)
    t, _ = place(dev, np.random.default_rng(0), d, x, guard=16)
    y, _ = place(dev, np.random.default_rng(1), d, guard=16)
    dev.compile(desc_type(op)(d, d, **fields)).execute([t], [y])
    return y.numpy()


def modes(op: UnaryOp) -> list[dict]:
    if op.steepness:  # 2: s x exact; 3: s x rounded to float32 first (the reference does the same)
        return [{}, {"steepness": 2.0}, {"steepness": 3.0}]
    return [{"rounding_mode": m} for m in kdml.RoundingMode] if op.rounding_mode else [{}]


@pytest.mark.parametrize("op", OPS, ids=IDS)
def test_every_float16(dev, op):
    x = every_float16()
    for fields in modes(op):
        check(op, run_packed(dev, op, x, **fields), reference64(op.helper, x, **fields), fields)


@pytest.mark.parametrize("op", OPS, ids=IDS)
def test_float32(dev, rng, op):
    x = float32_inputs(rng)
    for fields in modes(op):
        check(op, run_packed(dev, op, x, **fields), reference64(op.helper, x, **fields), fields)


def test_special_values(dev):
    """The pages' and IEEE's values: SIGN of -0 and NaN is +0, sqrt(-0) = -0, recip(-0) = -inf,
    log(-0) = -inf, ABS / NEGATE keep a float32 NaN's payload, ROUND's halves per mode."""
    z = np.array([-0.0, np.nan, -2.5, 2.5, -0.5], np.float32)
    assert kdml.sign(z, device=dev).numpy().view(np.uint32).tolist() == [0, 0, 0xBF800000, 0x3F800000, 0xBF800000]
    assert np.signbit(kdml.sqrt(z[:1], device=dev).numpy()[0])
    assert kdml.reciprocal(z[:1], device=dev).numpy()[0] == -np.inf
    assert kdml.log(z[:1], device=dev).numpy()[0] == -np.inf
    nan = np.array([0xFFC01234], np.uint32).view(np.float32)
    assert kdml.abs(nan, device=dev).numpy().view(np.uint32)[0] == 0x7FC01234
    assert kdml.neg(nan, device=dev).numpy().view(np.uint32)[0] == 0x7FC01234
    assert kdml.round(z, device=dev).numpy()[2:].tolist() == [-2.0, 2.0, -0.0]
    got = kdml.round(z, rounding_mode=kdml.RoundingMode.TOWARD_INFINITY, device=dev).numpy()
    assert got[2:].tolist() == [-3.0, 3.0, -1.0]
    # erf: odd (-0 -> -0), +-1 at +-inf and from |x| = 4; the smallest subnormal: 2/sqrt(pi) 2^-149
    # rounds to 2^-149 (bits 1), computed without subnormal arithmetic
    e = np.array([-0.0, np.inf, -np.inf, 4.0, -1e-45, 1e-45], np.float32)
    assert kdml.erf(e, device=dev).numpy().view(np.uint32).tolist() == [
        0x80000000, 0x3F800000, 0xBF800000, 0x3F800000, 0x80000001, 0x00000001]
    # softplus: 0 at -inf, x itself for large x (no overflow), ln 2 at 0, exp(x) deep in the tail
    sp = kdml.softplus(np.array([-np.inf, np.inf, 1e30, 100.0, 0.0, -100.0], np.float32), device=dev).numpy()
    assert sp[:4].tolist() == [0.0, np.inf, np.float32(1e30), 100.0] and sp[4] == np.float32(np.log(2.0))
    assert sp[5] == np.float32(np.exp(-100.0))
    got = kdml.softplus(np.array([1e30, -np.inf], np.float32), steepness=10.0, device=dev).numpy()
    assert got.tolist() == [np.float32(1e30), 0.0]  # s x = 1e31: the result is x, not inf / s


SB_OPS = [op for op in OPS if op.scale_bias]


@pytest.mark.parametrize("op", SB_OPS, ids=[op.helper for op in SB_OPS])
@pytest.mark.parametrize("dt", FLOATS, ids=("f32", "f16"))
def test_scale_bias(dev, rng, op, dt):
    """f(x * scale + bias): the product and the sum each rounded to float32."""
    x = (every_float16() if dt == DT.FLOAT16 else float32_inputs(rng, 1 << 14))
    x = x[np.isfinite(x)]
    x = x[np.abs(x.astype(np.float32)) < 1e30]
    for scale, bias in ((2.0, 1.0), (-0.375, 0.1), (1.0, 0.0)):
        got = run_packed(dev, op, x, scale_bias=kdml.ScaleBias(scale, bias))
        g = np.float32(x.astype(np.float32) * np.float32(scale)) + np.float32(bias)
        keep = np.abs(g) >= np.finfo(np.float32).tiny  # a subnormal g may be flushed by the device (module docstring)
        ref = reference64(op.helper, g[keep])
        if dt == DT.FLOAT16 and op.exact:  # g has float32's precision: the float32 result, then float16's
            ref = ref.astype(np.float32).astype(np.float64)
        check(op, got[keep], ref)


def values(rng, dt: DT, sizes) -> np.ndarray:
    x = rng.standard_normal(sizes) * 3
    flat = x.reshape(-1)
    k = min(flat.size, 5)
    flat[rng.choice(flat.size, k, replace=False)] = [0.0, -0.0, np.inf, -np.inf, np.nan][:k]
    return x.astype(dt.numpy_dtype)


def random_sizes(rng, rank: int, max_elems: int = 300) -> tuple[int, ...]:
    sizes = [int(rng.integers(1, 7)) for _ in range(rank)]
    while np.prod(sizes) > max_elems:
        sizes[int(np.argmax(sizes))] //= 2
    return tuple(max(1, s) for s in sizes)


def run_layout(dev, rng, op: UnaryOp, x_desc: TD, y_desc: TD, v: np.ndarray, fields: dict) -> None:
    x, xraw = place(dev, rng, x_desc, v)
    y, _ = place(dev, rng, y_desc)
    logical = read_logical(xraw, x.offset, x_desc)
    ref = reference64(op.helper, logical, **fields)
    before = poison_against(y, ref.astype(logical.dtype), rng)
    dev.compile(desc_type(op)(x_desc, y_desc, **fields)).execute([x], [y])
    got = read_logical(assert_outside_unchanged(y, before), y.offset, y_desc)
    assert x.buffer.read() == xraw
    check(op, got, ref, fields)


@pytest.mark.parametrize("op", OPS, ids=IDS)
@pytest.mark.parametrize("dt", FLOATS, ids=("f32", "f16"))
def test_layouts(dev, rng, op, dt):
    for rank in range(1, 9):
        sizes = random_sizes(rng, rank)
        xs = random_strides(rng, sizes, allow_broadcast=True) if rng.random() < 0.8 else None
        ys = random_strides(rng, sizes, allow_broadcast=False) if rng.random() < 0.8 else None
        fields = modes(op)[rank % len(modes(op))]
        run_layout(dev, rng, op, TD(dt, sizes, xs), TD(dt, sizes, ys), values(rng, dt, sizes), fields)
    sizes = (2, 3, 2, 2, 3, 2, 2, 3)  # more merged dimensions than the shader walks: host-enumerated
    run_layout(dev, rng, op, TD(dt, sizes, random_strides(rng, sizes, allow_broadcast=True, max_gap=2)),
               TD(dt, sizes, random_strides(rng, sizes, allow_broadcast=False, max_gap=2)), values(rng, dt, sizes), {})


@pytest.mark.parametrize("op", OPS, ids=IDS)
def test_in_place(dev, rng, op):
    x = values(rng, DT.FLOAT16, (5, 7))
    t, _ = place(dev, rng, TD(DT.FLOAT16, (5, 7)), x)
    dev.compile(desc_type(op)(t.desc, t.desc)).execute([t], [t])
    check(op, t.numpy(), reference64(op.helper, x))


def test_helpers(dev, rng):
    x = values(rng, DT.FLOAT32, (3, 4, 5))
    y = kdml.sqrt(x, scale_bias=kdml.ScaleBias(2.0, 1.0), device=dev)
    assert y.desc.data_type == DT.FLOAT32 and y.desc.sizes == (3, 4, 5)
    check(OPS[7], y.numpy(), reference64("sqrt", np.float32(x * np.float32(2.0)) + np.float32(1.0)))
    out, _ = place(dev, rng, TD(DT.FLOAT32, (3, 4, 5), random_strides(rng, (3, 4, 5), allow_broadcast=False)))
    assert kdml.exp(x, out=out, device=dev) is out
    check(OPS[8], out.numpy(), reference64("exp", x))
    with pytest.raises(kdml.UnsupportedError, match="^input_tensor: ELEMENT_WISE_ABS does not support INT32"):
        kdml.abs(np.arange(4, dtype=np.int32), device=dev)


F = TD(DT.FLOAT32, (2, 3))
BAD = [
    (kdml.ElementWiseSqrtDesc(F, TD(DT.FLOAT16, (2, 3))), kdml.InvalidArgumentError,
     r"^output_tensor\.data_type: must equal input_tensor's"),
    (kdml.ElementWiseExpDesc(F, TD(DT.FLOAT32, (3, 2))), kdml.InvalidArgumentError, r"^output_tensor\.sizes: must equal"),
    (kdml.ActivationSigmoidDesc(F, TD(DT.FLOAT32, (2, 3), (0, 1))), kdml.InvalidArgumentError, r"^output_tensor\.strides"),
    (kdml.ElementWiseSignDesc(TD(DT.INT8, (2, 3)), TD(DT.INT8, (2, 3))), kdml.UnsupportedError,
     r"^input_tensor: ELEMENT_WISE_SIGN does not support INT8"),
    (kdml.ElementWiseAbsDesc(F, F, scale_bias=(1.0, 2.0, 3.0)), kdml.InvalidArgumentError, r"^scale_bias: must be"),
    (kdml.ElementWiseLogDesc(F, F, scale_bias=kdml.ScaleBias("2", 0.0)), kdml.InvalidArgumentError,
     r"^scale_bias\.scale: must be a real number"),
    (kdml.ElementWiseRoundDesc(F, F, rounding_mode=3), kdml.InvalidArgumentError, r"^rounding_mode: must be"),
    (kdml.ActivationSoftplusDesc(F, F, steepness=0.5), kdml.InvalidArgumentError, r"^steepness: must be a finite"),
    (kdml.ActivationSoftplusDesc(F, F, steepness=float("nan")), kdml.InvalidArgumentError, r"^steepness: must be"),
    (kdml.ActivationSoftplusDesc(F, F, steepness=float("inf")), kdml.InvalidArgumentError, r"^steepness: must be"),
    (kdml.ActivationSoftplusDesc(F, F, steepness="2"), kdml.InvalidArgumentError, r"^steepness: must be a real"),
]


@pytest.mark.parametrize(("desc", "error", "match"), BAD, ids=[m[1:40] for _, _, m in BAD])
def test_refused(dev, desc, error, match):
    with pytest.raises(error, match=match):
        dev.compile(desc)


@pytest.mark.parametrize("op", OPS, ids=IDS)
def test_feature_levels(op):
    """Each row of the table: its lowest and highest dimension counts compile at its level, one
    fewer is refused naming input_tensor, and the level before the first row refuses the operator."""
    for level, (lo, hi) in op.rows:
        with kdml.Device(feature_level=level) as d:
            for dims in (lo, hi):
                t = TD(DT.FLOAT16, (2,) * dims)
                d.compile(desc_type(op)(t, t))
            if lo > 1:
                t = TD(DT.FLOAT16, (2,) * (lo - 1))
                with pytest.raises(kdml.UnsupportedError, match=f"^input_tensor: {op.name} supports"):
                    d.compile(desc_type(op)(t, t))


def test_onnx_against_onnxruntime():
    """Every ONNX node type of the table runs on the device (placed by its OnnxOp declaration
    alone), each output equal to onnxruntime's (exact operators) or close to it and within the
    stated bound of the float64 reference."""
    pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper

    from kompute_dml.onnx_backend import Backend

    ops = [op for op in OPS if op.onnx]
    nodes = [helper.make_node(op.onnx, ["x"], [op.helper]) for op in ops]
    outs = [helper.make_tensor_value_info(op.helper, TensorProto.FLOAT, [4, 6]) for op in ops]
    graph = helper.make_graph(nodes, "unary", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 6])], outs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    x = (np.random.default_rng(5).standard_normal((4, 6)) * 4).astype(np.float32)
    x.reshape(-1)[:5] = [0.5, -2.5, 0.0, 3.5, -0.0]
    rep = Backend.prepare(model)
    got = rep.run({"x": x})
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    for op, g, w in zip(ops, got, want):
        if op.exact:
            np.testing.assert_array_equal(g, w, err_msg=op.onnx)
        else:  # onnxruntime's own approximations (MLAS: Sigmoid ~3e-5 relative) set the tolerance; the bound
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=0, err_msg=op.onnx)  # is checked against float64
            check(op, g, reference64(op.helper, x))
    assert sorted(p.operator for p in rep.placement) == sorted(op.name for op in ops)
    assert {p.target for p in rep.placement} == {"vulkan"}


# ---- ELEMENT_WISE_IS_INFINITY -------------------------------------------------------------------
def isinf_ref(x: np.ndarray, mode: int) -> np.ndarray:
    want = {0: np.isinf(x), 1: np.isposinf(x), 2: np.isneginf(x)}[mode]
    return want.astype(np.uint8)


@pytest.mark.parametrize("mode", list(kdml.IsInfinityMode), ids=str)
def test_isinf_values(dev, rng, mode):
    for x in (every_float16(), float32_inputs(rng)):
        d = TD(DT.from_numpy(x.dtype), x.shape)
        t, _ = place(dev, rng, d, x)
        y, _ = place(dev, rng, TD(DT.UINT8, x.shape))
        dev.compile(kdml.ElementWiseIsInfinityDesc(d, y.desc, mode)).execute([t], [y])
        np.testing.assert_array_equal(y.numpy(), isinf_ref(x, mode))
    np.testing.assert_array_equal(kdml.isinf(x, infinity_mode=mode, device=dev).numpy(), isinf_ref(x, mode))


@pytest.mark.parametrize("dt", FLOATS, ids=("f32", "f16"))
def test_isinf_layouts(dev, rng, dt):
    for rank in (*range(1, 9), 8):
        sizes = random_sizes(rng, rank)
        x_desc = TD(dt, sizes, random_strides(rng, sizes, allow_broadcast=True))
        y_desc = TD(DT.UINT8, sizes, random_strides(rng, sizes, allow_broadcast=False))
        mode = int(rng.integers(0, 3))
        x, xraw = place(dev, rng, x_desc, values(rng, dt, sizes))
        y, _ = place(dev, rng, y_desc)
        ref = isinf_ref(read_logical(xraw, x.offset, x_desc), mode)
        before = poison_against(y, ref, rng)
        dev.compile(kdml.ElementWiseIsInfinityDesc(x_desc, y_desc, mode)).execute([x], [y])
        np.testing.assert_array_equal(read_logical(assert_outside_unchanged(y, before), y.offset, y_desc), ref)


U8 = TD(DT.UINT8, (2, 3))
ISINF_BAD = [
    (kdml.ElementWiseIsInfinityDesc(F, F), kdml.UnsupportedError, r"^output_tensor: ELEMENT_WISE_IS_INFINITY does not"),
    (kdml.ElementWiseIsInfinityDesc(F, TD(DT.UINT8, (3, 2))), kdml.InvalidArgumentError, r"^output_tensor\.sizes"),
    (kdml.ElementWiseIsInfinityDesc(F, U8, 3), kdml.InvalidArgumentError, r"^infinity_mode: must be"),
]


@pytest.mark.parametrize(("desc", "error", "match"), ISINF_BAD, ids=[m[1:40] for _, _, m in ISINF_BAD])
def test_isinf_refused(dev, desc, error, match):
    with pytest.raises(error, match=match):
        dev.compile(desc)


def test_isinf_feature_levels():
    x, y = TD(DT.FLOAT32, (2,) * 4), TD(DT.UINT8, (2,) * 4)
    with kdml.Device(feature_level=FL.FL_2_1) as d:
        d.compile(kdml.ElementWiseIsInfinityDesc(x, y))
        with pytest.raises(kdml.UnsupportedError, match="^input_tensor: ELEMENT_WISE_IS_INFINITY supports"):
            d.compile(kdml.ElementWiseIsInfinityDesc(TD(DT.FLOAT32, (2, 2)), TD(DT.UINT8, (2, 2))))
    with kdml.Device(feature_level=FL.FL_2_0) as d, pytest.raises(kdml.UnsupportedError):
        d.compile(kdml.ElementWiseIsInfinityDesc(x, y))


def test_onnx_isinf():
    """ONNX IsInf's detect_negative / detect_positive as the InfinityMode, float32 and float16,
    each output equal to onnxruntime's; both 0 (all false) runs on the CPU, still equal."""
    pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper

    from kompute_dml.onnx_backend import Backend

    flags = [{}, {"detect_negative": 0}, {"detect_positive": 0}, {"detect_negative": 0, "detect_positive": 0}]
    nodes = [helper.make_node("IsInf", ["x"], [f"x{i}"], **f) for i, f in enumerate(flags)]
    nodes += [helper.make_node("IsInf", ["h"], [f"h{i}"], **f) for i, f in enumerate(flags[:3])]
    names = [n.output[0] for n in nodes]
    ins = [helper.make_tensor_value_info(n, t, [3, 5]) for n, t in (("x", TensorProto.FLOAT), ("h", TensorProto.FLOAT16))]
    outs = [helper.make_tensor_value_info(n, TensorProto.BOOL, [3, 5]) for n in names]
    model = helper.make_model(helper.make_graph(nodes, "isinf", ins, outs), opset_imports=[helper.make_opsetid("", 20)])
    model.ir_version = 9
    x = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 1e38, -1e38, 3.4e38, 1.0, -np.inf, np.inf, 5.0, -7.0, np.nan,
                  1e-45], np.float32).reshape(3, 5)
    with np.errstate(over="ignore"):
        feeds = {"x": x, "h": x.astype(np.float16)}  # +-1e38 and 3.4e38 become float16 infinities
    rep = Backend.prepare(model)
    got = rep.run(feeds)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    for name, g, w in zip(names, got, want):
        assert g.dtype == np.bool_ and np.array_equal(g, w), name
    assert [int(w.sum()) for w in want] == [4, 2, 2, 0, 7, 4, 3]  # the inputs tell every mode apart
    assert [p.target for p in rep.placement] == ["vulkan"] * 3 + ["cpu"] + ["vulkan"] * 3
    assert rep.summary().startswith("6 of 7 nodes on Vulkan")
