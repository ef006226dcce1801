"""ACTIVATION_PARAMETERIZED_RELU (ops/activation_prelu.py) against a numpy reference from the
page's formula (x for x >= 0, else slope * x: float32 products correctly rounded, float16's exact
in float32 then rounded once, integers wrapping): bit for bit in every type; strided, broadcast
and offset operands with poisoned outputs; in place; refused types, levels and shapes; ONNX
PRelu against onnxruntime, float32 and float16."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_outside_unchanged, place, poison_against, random_strides, random_values, read_logical

import kompute_dml as kdml

DT = kdml.DataType
FL = kdml.FeatureLevel
TD = kdml.TensorDesc
TYPES = [DT.FLOAT32, DT.FLOAT16, DT.INT32, DT.INT16, DT.INT8]


def reference(x: np.ndarray, s: np.ndarray) -> np.ndarray:
    x, s = np.broadcast_arrays(x, s)
    with np.errstate(all="ignore"):
        if x.dtype.kind == "f":
            prod = (x.astype(np.float32) * s.astype(np.float32)).astype(x.dtype)  # one rounding to the type
            keep = (x >= 0) | np.isnan(x)
            y = np.where(keep, x, prod)
            u = f"u{x.dtype.itemsize}"
            bits = y.view(u).copy()
            bits[np.isnan(y)] |= {4: 0x00400000, 2: 0x0200}[x.dtype.itemsize]  # NaN quieted
            return bits.view(x.dtype)
        prod = (x.astype(np.int64) * s.astype(np.int64)).astype(x.dtype)  # the low bits
        return np.where(x >= 0, x, prod)


@pytest.mark.parametrize("dt", TYPES, ids=lambda d: d.name)
def test_layouts(dev, rng, dt):
    for sizes in ((9,), (3, 5), (2, 3, 4), (1, 4, 1, 3, 2), (2, 1, 3, 2, 2, 1, 3, 2)):
        xd = TD(dt, sizes, random_strides(rng, sizes, allow_broadcast=True))
        sd = TD(dt, sizes, random_strides(rng, sizes, allow_broadcast=True))
        od = TD(dt, sizes, random_strides(rng, sizes, allow_broadcast=False))
        x, xraw = place(dev, rng, xd, random_values(rng, dt, sizes))
        s, sraw = place(dev, rng, sd, random_values(rng, dt, sizes))
        o, _ = place(dev, rng, od)
        want = reference(read_logical(xraw, x.offset, xd), read_logical(sraw, s.offset, sd))
        before = poison_against(o, want, rng)
        dev.compile(kdml.ActivationParameterizedReluDesc(xd, sd, od)).execute([x, s], [o])
        got = read_logical(assert_outside_unchanged(o, before), o.offset, od)
        same_bits(got, want)


def same_bits(got: np.ndarray, want: np.ndarray) -> None:
    """Bit for bit, except that a NaN the product made (0 * inf, a NaN slope) may be any NaN."""
    u = f"u{got.dtype.itemsize}"
    if got.dtype.kind == "f":
        nan = np.isnan(want)
        assert np.array_equal(np.isnan(got), nan)
        got, want = got[~nan], want[~nan]
    assert np.array_equal(got.view(u), want.view(u))


def test_float32_products_and_specials(dev, rng):
    """Subnormal products rounded correctly; -0 kept; 0 * inf = NaN; NaN slope for x < 0."""
    x = np.concatenate([rng.standard_normal(4000).astype(np.float32) * np.float32(1e-30),
                        np.float32([-0.0, -np.inf, -1.0, 2.0, np.nan, -3.0])])
    s = np.concatenate([rng.standard_normal(4000).astype(np.float32) * np.float32(1e-10),
                        np.float32([5.0, 0.0, np.nan, np.nan, 1.0, np.inf])])
    got = kdml.prelu(x, s, device=dev).numpy()
    want = reference(x, s)
    same_bits(got, want)
    assert np.signbit(got[4000]) and np.isnan(got[4001]) and np.isnan(got[4002]) and got[4003] == 2.0
    y = kdml.prelu(np.float16([[-1, 2, -3]]), np.float16([[0.5], [2]]), device=dev)  # broadcasting
    assert y.desc.sizes == (2, 3) and y.numpy().tolist() == [[-0.5, 2, -1.5], [-2, 2, -6]]


def test_in_place(dev, rng):
    x = random_values(rng, DT.FLOAT16, (4, 6))
    t, _ = place(dev, rng, TD(DT.FLOAT16, (4, 6)), x)
    s = np.float16(rng.standard_normal((4, 6)))
    st, _ = place(dev, rng, TD(DT.FLOAT16, (4, 6)), s)
    dev.compile(kdml.ActivationParameterizedReluDesc(t.desc, st.desc, t.desc)).execute([t, st], [t])
    same_bits(t.numpy(), reference(x, s))


F = TD(DT.FLOAT32, (2, 3))
BAD = [
    (kdml.ActivationParameterizedReluDesc(F, TD(DT.FLOAT16, (2, 3)), F), kdml.InvalidArgumentError,
     r"^slope_tensor\.data_type"),
    (kdml.ActivationParameterizedReluDesc(F, TD(DT.FLOAT32, (3, 2)), F), kdml.InvalidArgumentError,
     r"^slope_tensor\.sizes"),
    (kdml.ActivationParameterizedReluDesc(*(TD(DT.UINT8, (2, 3)),) * 3), kdml.UnsupportedError,
     r"^input_tensor: ACTIVATION_PARAMETERIZED_RELU does not support UINT8"),
]


@pytest.mark.parametrize(("desc", "error", "match"), BAD, ids=[m[1:30] for _, _, m in BAD])
def test_refused(dev, desc, error, match):
    with pytest.raises(error, match=match):
        dev.compile(desc)
    assert kdml.prelu(np.float32([-2]), np.float32([0.5]), device=dev).numpy()[0] == -1.0


def test_feature_levels():
    f4, i4 = TD(DT.FLOAT32, (2,) * 4), TD(DT.INT8, (2,) * 4)
    with kdml.Device(feature_level=FL.FL_1_0) as d:
        d.compile(kdml.ActivationParameterizedReluDesc(f4, f4, f4))
        with pytest.raises(kdml.UnsupportedError, match="^input_tensor: ACTIVATION_PARAMETERIZED_RELU supports"):
            d.compile(kdml.ActivationParameterizedReluDesc(*(TD(DT.FLOAT32, (2,) * 5),) * 3))
    with kdml.Device(feature_level=FL.FL_5_0) as d, pytest.raises(kdml.UnsupportedError):
        d.compile(kdml.ActivationParameterizedReluDesc(i4, i4, i4))
    with kdml.Device(feature_level=FL.FL_5_1) as d:
        d.compile(kdml.ActivationParameterizedReluDesc(i4, i4, i4))


@pytest.mark.parametrize("np_dt", [np.float32, np.float16], ids=("f32", "f16"))
def test_onnx_against_onnxruntime(np_dt):
    pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from onnx import helper, numpy_helper

    from kompute_dml.onnx_backend import Backend
    et = helper.np_dtype_to_tensor_dtype(np.dtype(np_dt))
    rng = np.random.default_rng(4)
    slope_c = numpy_helper.from_array(rng.uniform(0, 0.5, (3, 1, 1)).astype(np_dt), "slope_c")
    nodes = [helper.make_node("PRelu", ["x", "slope_c"], ["y0"]), helper.make_node("PRelu", ["x", "s"], ["y1"])]
    graph = helper.make_graph(nodes, "prelu", [helper.make_tensor_value_info("x", et, [2, 3, 4, 5]),
                                                helper.make_tensor_value_info("s", et, [5])],
                              [helper.make_tensor_value_info(f"y{i}", et, [2, 3, 4, 5]) for i in range(2)],
                              initializer=[slope_c])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)])
    model.ir_version = 8
    x = (rng.standard_normal((2, 3, 4, 5)) * 3).astype(np_dt)
    x.reshape(-1)[:4] = [np.nan, -0.0, np.inf, -np.inf]
    feeds = {"x": x, "s": rng.uniform(-1, 1, 5).astype(np_dt)}
    rep = Backend.prepare(model)
    got = rep.run(feeds)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    assert {p.target for p in rep.placement} == {"vulkan"}


def test_onnx_int32_against_onnxruntime():
    """ONNX PRelu of int32 (opset 16), the product wrapping as onnxruntime's, slope broadcast."""
    pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from onnx import helper

    from kompute_dml.onnx_backend import Backend
    et = helper.np_dtype_to_tensor_dtype(np.dtype(np.int32))
    graph = helper.make_graph([helper.make_node("PRelu", ["x", "s"], ["y"])], "prelu",
                              [helper.make_tensor_value_info("x", et, [3, 4]), helper.make_tensor_value_info("s", et, [4])],
                              [helper.make_tensor_value_info("y", et, [3, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)])
    model.ir_version = 8
    rng = np.random.default_rng(6)
    x = rng.integers(-1000, 1000, (3, 4)).astype(np.int32)
    x[0, :3] = [np.iinfo(np.int32).min, np.iinfo(np.int32).max, -(1 << 30)]
    feeds = {"x": x, "s": np.int32([-3, 2, 7, 0])}
    rep = Backend.prepare(model)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_array_equal(rep.run(feeds)[0], want)
    assert [p.target for p in rep.placement] == ["vulkan"]
