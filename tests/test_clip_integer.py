"""ELEMENT_WISE_CLIP of integer tensors (ops/activation_params.compile_clip on contract.EW_CLIP)
against a numpy reference written from the page: Min and Max (FLOAT fields, so float32) cast to
the element type by truncation toward zero, saturated to the type's range (kompute_dml's choice
where the page says nothing), then max(Min, min(x, Max)); every integer type of the page's table,
bit for bit; strided, broadcast and offset inputs with poisoned outputs; in place; refused
ScaleBias, types and levels; ONNX integer Clip against onnxruntime (int16 / uint16, which
onnxruntime's CPU Clip lacks, against numpy), bounds that do not survive float32 on the CPU."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_output, place, poison_against, random_strides, random_values, read_logical

import kompute_dml as kdml

DT = kdml.DataType
FL = kdml.FeatureLevel
TD = kdml.TensorDesc
INTS = [DT.INT8, DT.UINT8, DT.INT16, DT.UINT16, DT.INT32, DT.UINT32, DT.INT64, DT.UINT64]


def cast_bound(v: float, dt: np.dtype) -> int:
    """The page's cast of a FLOAT bound: float32, truncated toward zero; saturated."""
    info = np.iinfo(dt)
    f = np.float32(v)
    if np.isinf(f):
        return int(info.max) if f > 0 else int(info.min)
    t = int(np.trunc(np.float64(f)))
    return max(int(info.min), min(int(info.max), t))


def reference(x: np.ndarray, lo: float, hi: float) -> np.ndarray:
    a, b = cast_bound(lo, x.dtype), cast_bound(hi, x.dtype)
    xs = x.astype(object)  # exact for every 64-bit value
    y = np.where(xs > b, b, xs)
    y = np.where(y < a, a, y)
    return y.astype(x.dtype)


@pytest.mark.parametrize("dt", INTS, ids=lambda d: d.name)
def test_layouts(dev, rng, dt):
    info = np.iinfo(dt.numpy_dtype)
    lo, hi = (-37.9, 1000.5) if info.min < 0 else (3.2, 1000.5)
    for sizes in ((9,), (3, 5), (2, 3, 4), (1, 4, 1, 3, 2), (2, 1, 3, 2, 2, 1, 3, 2)):
        xd = TD(dt, sizes, random_strides(rng, sizes, allow_broadcast=True))
        od = TD(dt, sizes, random_strides(rng, sizes, allow_broadcast=False))
        vals = random_values(rng, dt, sizes)
        vals.reshape(-1)[:2] = [info.min, info.max]
        x, xraw = place(dev, rng, xd, vals)
        o, _ = place(dev, rng, od)
        want = reference(read_logical(xraw, x.offset, xd), lo, hi)
        before = poison_against(o, want, rng)
        dev.compile(kdml.ElementWiseClipDesc(xd, od, min=lo, max=hi)).execute([x], [o])
        assert_output(o, before, want)
        assert x.buffer.read() == xraw


@pytest.mark.parametrize("dt", INTS, ids=lambda d: d.name)
@pytest.mark.parametrize(("lo", "hi"), [
    (-2.7, 6.9), (-1e30, 1e30), (float("-inf"), float("inf")), (16777217.0, 3e9), (9.0, 4.0), (0.5, 0.5),
    (-0.99, -0.5), (-3e38, -5.5),
], ids=["fractions", "beyond", "infinities", "float32-rounded", "min>max", "half", "to-zero", "negative"])
def test_bound_casts(dev, dt, lo, hi):
    info = np.iinfo(dt.numpy_dtype)
    vals = [int(info.min), int(info.max), 0, 1, 2, 5, 6, 7, 100, 16777216, 16777218, -1, -7, -100]
    x = np.array([max(int(info.min), min(int(info.max), v)) for v in vals], dt.numpy_dtype)
    got = kdml.clip(x, min=lo, max=hi, device=dev).numpy()
    np.testing.assert_array_equal(got, reference(x, lo, hi))


def test_in_place(dev, rng):
    for dt in (DT.INT8, DT.UINT16, DT.INT64):
        t, raw = place(dev, rng, TD(dt, (5, 7)), random_values(rng, dt, (5, 7)))
        x = read_logical(raw, t.offset, t.desc)
        dev.compile(kdml.ElementWiseClipDesc(t.desc, t.desc, min=-3.0, max=90.0)).execute([t], [t])
        np.testing.assert_array_equal(t.numpy(), reference(x, -3.0, 90.0))


I = TD(DT.INT32, (2, 3, 1, 2))
BAD = [
    (kdml.ElementWiseClipDesc(I, I, scale_bias=kdml.ScaleBias(2.0, 1.0)), kdml.UnsupportedError,
     r"^scale_bias: kompute_dml's ELEMENT_WISE_CLIP takes a ScaleBias with FLOAT32 / FLOAT16 tensors only"),
    (kdml.ElementWiseClipDesc(I, I, min=float("nan")), kdml.InvalidArgumentError, r"^min: must be a number"),
    (kdml.ElementWiseClipDesc(I, I, max="3"), kdml.InvalidArgumentError, r"^max: must be a real number"),
    (kdml.ElementWiseClipDesc(I, TD(DT.UINT32, (2, 3, 1, 2))), kdml.InvalidArgumentError, r"^output_tensor\.data_type"),
    (kdml.ElementWiseClipDesc(I, TD(DT.INT32, (2, 3, 1, 2), (0, 1, 1, 1))), kdml.InvalidArgumentError,
     r"^output_tensor\.strides"),
]


@pytest.mark.parametrize(("desc", "error", "match"), BAD, ids=[m[1:30] for _, _, m in BAD])
def test_refused(dev, desc, error, match):
    with pytest.raises(error, match=match):
        dev.compile(desc)
    assert kdml.clip(np.int32([5, -5]), min=-1.0, max=1.0, device=dev).numpy().tolist() == [1, -1]  # still usable


def test_feature_levels():
    i4, i5, l4 = TD(DT.INT8, (2,) * 4), TD(DT.UINT32, (2,) * 5), TD(DT.INT64, (2,) * 4)
    with kdml.Device(feature_level=FL.FL_2_0) as d, pytest.raises(
            kdml.UnsupportedError, match="^input_tensor: ELEMENT_WISE_CLIP does not support INT8"):
        d.compile(kdml.ElementWiseClipDesc(i4, i4))
    with kdml.Device(feature_level=FL.FL_2_1) as d:
        d.compile(kdml.ElementWiseClipDesc(i4, i4))
        with pytest.raises(kdml.UnsupportedError):
            d.compile(kdml.ElementWiseClipDesc(i5, i5))
    with kdml.Device(feature_level=FL.FL_3_0) as d:
        d.compile(kdml.ElementWiseClipDesc(i5, i5))
        with pytest.raises(kdml.UnsupportedError, match="^input_tensor: ELEMENT_WISE_CLIP does not support INT64"):
            d.compile(kdml.ElementWiseClipDesc(l4, l4))
    with kdml.Device(feature_level=FL.FL_5_0) as d:
        d.compile(kdml.ElementWiseClipDesc(l4, l4))


# ---- ONNX ---------------------------------------------------------------------------------------
def clip_model(helper, np_dt, bounds):
    from onnx import numpy_helper
    et = helper.np_dtype_to_tensor_dtype(np.dtype(np_dt))
    inits, names = [], ["x"]
    for name, v in bounds.items():
        if v is None:
            names.append("")
            continue
        inits.append(numpy_helper.from_array(np.array(v, np_dt), name))
        names.append(name)
    graph = helper.make_graph([helper.make_node("Clip", names, ["y"])], "clip",
                              [helper.make_tensor_value_info("x", et, [3, 5])],
                              [helper.make_tensor_value_info("y", et, [3, 5])], initializer=inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


@pytest.mark.parametrize("np_dt", [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64],
                         ids=lambda d: np.dtype(d).name)
def test_onnx_against_onnxruntime(np_dt):
    pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from onnx import helper

    from kompute_dml.onnx_backend import Backend
    info = np.iinfo(np_dt)
    x = np.random.default_rng(4).integers(int(info.min), int(info.max), (3, 5), dtype=np_dt, endpoint=True)
    x.reshape(-1)[:6] = [info.min, info.max, 0, 5, 9, 100]
    lo = -3 if info.min < 0 else 3
    for bounds in ({"lo": lo, "hi": 100}, {"lo": None, "hi": 5}, {"lo": 7}, {}, {"lo": 9, "hi": 4},
                   {"lo": int(info.min), "hi": int(info.max)}):
        model = clip_model(helper, np_dt, bounds)
        rep = Backend.prepare(model)
        got = rep.run({"x": x})[0]
        if np.dtype(np_dt).itemsize == 2:  # onnxruntime's CPU Clip has no 16-bit integer kernel
            a = info.min if bounds.get("lo") is None else bounds["lo"]
            b = info.max if bounds.get("hi") is None else bounds["hi"]
            want = np.minimum(np.maximum(x, np_dt(a)), np_dt(b))
        else:
            want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
                None, {"x": x})[0]
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want, err_msg=str(bounds))
        assert [p.target for p in rep.placement] == ["vulkan"], str(bounds)


def test_onnx_inexact_bound_on_cpu():
    pytest.importorskip("onnx")
    from onnx import helper

    from kompute_dml.onnx_backend import Backend
    rep = Backend.prepare(clip_model(helper, np.int32, {"lo": 16777217}))  # not a float32
    x = np.arange(16777210, 16777225, dtype=np.int32).reshape(3, 5)
    np.testing.assert_array_equal(rep.run({"x": x})[0], np.maximum(x, 16777217))
    assert [p.target for p in rep.placement] == ["cpu"]
    assert "not exact through a float32" in rep.placement[0].reason
