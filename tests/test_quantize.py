"""ELEMENT_WISE_QUANTIZE_LINEAR (ops/quantize.py, shaders/quantize.comp) bit for bit against numpy
(float32 division, round half to even, the zero point added, clamped; NaN to the type's minimum):
FLOAT32 and INT32 inputs, INT8 and UINT8 outputs, per-tensor and per-axis scales (stride-0 views),
strided tensors at random offsets, outputs poisoned first and every other byte unchanged, ties,
infinities, subnormals; refused descriptors; ONNX QuantizeLinear against onnxruntime and its node
cases of 8-bit types on the device."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from dequantize_reference import dequantize_ref
from helpers import assert_output, place, poison_against, random_strides

import kompute_dml as kdml

DT = kdml.DataType
TD = kdml.TensorDesc


def reference(x, scale, zp, out):
    lo, hi = (-128, 127) if out == np.int8 else (0, 255)
    with np.errstate(all="ignore"):
        q = np.rint(x.astype(np.float32) / scale.astype(np.float32)) + zp.astype(np.float32)
        return np.where(np.isnan(q), lo, np.clip(q, lo, hi)).astype(out)


def inputs(rng, dt, shape):
    if dt == DT.INT32:
        x = rng.integers(-2 ** 31, 2 ** 31, shape, dtype=np.int64).astype(np.int32)
        x.flat[:3] = [2 ** 24 + 1, -2 ** 31, 2 ** 31 - 1]  # beyond float32's integers: rounded first
        return x
    x = (rng.standard_normal(shape) * 40).astype(np.float32)
    x.flat[:10] = [np.nan, np.inf, -np.inf, -0.0, 1e-45, 2.5, 3.5, -2.5, 1e30, -1e30]
    return x


@pytest.mark.parametrize("out", [np.int8, np.uint8], ids=["i8", "u8"])
@pytest.mark.parametrize("dt", [DT.FLOAT32, DT.INT32], ids=lambda d: d.name)
@pytest.mark.parametrize("per_axis", [False, True], ids=["tensor", "axis"])
def test_against_numpy(dev, rng, out, dt, per_axis):
    shape = (3, 5, 7)
    x = inputs(rng, dt, shape)
    scale = (rng.random((1, 5, 1) if per_axis else (1, 1, 1)) * 2 + 0.25).astype(np.float32)
    if dt == DT.INT32:
        scale = scale * 1e7
    scale.flat[0] = 0.5  # ties at x.5
    info = np.iinfo(out)
    zp = rng.integers(info.min, info.max + 1, scale.shape).astype(out)
    want = reference(x, scale, zp, out)
    (xd, sd, zd, yd), (tx, ts, tz, ty) = _placed(dev, rng, x, dt, scale, zp, DT.from_numpy(np.dtype(out)), per_axis)
    before = poison_against(ty, want, rng)
    dev.compile(kdml.ElementWiseQuantizeLinearDesc(xd, sd, zd, yd)).execute([tx, ts, tz], [ty])
    assert_output(ty, before, want)


def _placed(dev, rng, x, dt, scale, zp, out_dt, per_axis):
    """The operands' descriptors and placed tensors (random strides; the scale and zero point
    broadcast per tensor or along axis 1), the output's of `out_dt`."""
    shape, qdt = x.shape, DT.from_numpy(zp.dtype)
    xd = TD(dt, shape, random_strides(rng, shape, allow_broadcast=False))
    sd = TD(DT.FLOAT32, shape, (0, 1, 0) if per_axis else (0, 0, 0))
    zd = TD(qdt, shape, (0, 1, 0) if per_axis else (0, 0, 0))
    yd = TD(out_dt, shape, random_strides(rng, shape, allow_broadcast=False))
    tx, _ = place(dev, rng, xd, x)
    ts, _ = place(dev, rng, TD(DT.FLOAT32, scale.shape), scale)
    tz, _ = place(dev, rng, TD(qdt, zp.shape), zp)
    ts, tz = (kdml.Tensor(t.buffer, d, t.offset) for t, d in ((ts, sd), (tz, zd)))
    ty, _ = place(dev, rng, yd)
    return (xd, sd, zd, yd), (tx, ts, tz, ty)


@pytest.mark.parametrize("out", [np.int8, np.uint8], ids=["i8", "u8"])
@pytest.mark.parametrize("per_axis", [False, True], ids=["tensor", "axis"])
def test_round_trip_against_numpy(dev, rng, out, per_axis):
    """The round-trip extension: the quantized value dequantized with the same scale and zero
    point (FLOAT32), bit for bit the independent references of both operators and the two
    operators on the device; per axis, a subnormal scale takes the integer-code product."""
    shape = (3, 5, 7)
    x = inputs(rng, DT.FLOAT32, shape)
    scale = (rng.random((1, 5, 1) if per_axis else (1, 1, 1)) * 2 + 0.25).astype(np.float32)
    scale.flat[0] = 0.5  # ties at x.5
    if per_axis:
        scale.flat[1] = np.float32(3e-39)  # subnormal: products that a device may flush
    info = np.iinfo(out)
    zp = rng.integers(info.min, info.max + 1, scale.shape).astype(out)
    want = dequantize_ref(reference(x, scale, zp, out), scale, zp, DT.FLOAT32)
    (xd, sd, zd, yd), (tx, ts, tz, ty) = _placed(dev, rng, x, DT.FLOAT32, scale, zp, DT.FLOAT32, per_axis)
    before = poison_against(ty, want, rng)
    op = dev.compile(kdml.ElementWiseQuantizeLinearDesc(xd, sd, zd, yd, round_trip=True))
    assert op.variants == [f"qrt_f32_{'i8' if out == np.int8 else 'u8'}"]
    op.execute([tx, ts, tz], [ty])
    assert_output(ty, before, want)
    q = kdml.quantize_linear(tx, ts, tz, device=dev)
    two = kdml.dequantize_linear(q, ts, tz, device=dev).numpy()
    np.testing.assert_array_equal(two.view(np.uint32), want.view(np.uint32))


def test_helper_defaults(dev):
    x = np.array([0.25, 0.75, -1.0, 300.0, np.nan], np.float32)
    np.testing.assert_array_equal(kdml.quantize_linear(x, 0.5, device=dev).numpy(), [0, 2, 0, 255, 0])
    np.testing.assert_array_equal(kdml.quantize_linear(x, 0.5, np.int8(3), device=dev).numpy(), [3, 5, 1, 127, -128])
    np.testing.assert_array_equal(kdml.quantize_linear(x, 0.5, round_trip=True, device=dev).numpy(), [0, 1, 0, 127.5, 0])


F = DT.FLOAT32
BASE = kdml.ElementWiseQuantizeLinearDesc(TD(F, (2, 3)), TD(F, (2, 3), (0, 0)), TD(DT.UINT8, (2, 3), (0, 0)),
                                          TD(DT.UINT8, (2, 3)))


@pytest.mark.parametrize("change, field, err", [
    (dict(output_tensor=TD(DT.INT8, (2, 3))), "output_tensor.data_type", kdml.InvalidArgumentError),
    (dict(scale_tensor=TD(F, (2, 4), (0, 0))), "scale_tensor.sizes", kdml.InvalidArgumentError),
    (dict(zero_point_tensor=TD(DT.UINT8, (3,), (0,))), "zero_point_tensor.sizes", kdml.InvalidArgumentError),
    (dict(input_tensor=TD(DT.FLOAT16, (2, 3))), "input_tensor", kdml.UnsupportedError),
    (dict(zero_point_tensor=TD(DT.INT16, (2, 3), (0, 0)), output_tensor=TD(DT.INT16, (2, 3))), "zero_point_tensor",
     kdml.UnsupportedError),
    (dict(output_tensor=TD(F, (2, 3))), "output_tensor", kdml.UnsupportedError),
    (dict(round_trip=True), "output_tensor.data_type", kdml.InvalidArgumentError),
    (dict(round_trip=True, input_tensor=TD(DT.INT32, (2, 3)), output_tensor=TD(F, (2, 3))), "input_tensor.data_type",
     kdml.InvalidArgumentError),
    (dict(round_trip=True, output_tensor=TD(F, (2, 4))), "output_tensor.sizes", kdml.InvalidArgumentError),
    (dict(round_trip=True, input_tensor=None, output_tensor=TD(F, (2, 3))), "input_tensor", kdml.InvalidArgumentError),
    (dict(round_trip=True, zero_point_tensor=None, output_tensor=TD(F, (2, 3))), "zero_point_tensor",
     kdml.InvalidArgumentError),
])
def test_refused_descriptors_name_their_field(dev, change, field, err):
    with pytest.raises(err, match=f"^{field}"):
        dev.compile(dataclasses.replace(BASE, **change))


onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx_node_cases import node_case_tests, one_node_model  # noqa: E402

from kompute_dml.onnx_backend import Backend  # noqa: E402

test_case_count, test_onnx_node_case_on_the_device = node_case_tests(r"^test_quantizelinear(_axis)?_cpu$", __name__, 2)


@pytest.mark.parametrize("zp_type", [None, TensorProto.INT8, TensorProto.UINT8], ids=["none", "i8", "u8"])
@pytest.mark.parametrize("axis", [None, 1, -1], ids=["tensor", "axis1", "axis-1"])
def test_models_against_onnxruntime(rng, zp_type, axis):
    x = (rng.standard_normal((2, 4, 6)) * 30).astype(np.float32)
    k = 1 if axis is None else x.shape[axis]
    inits = [numpy_helper.from_array((rng.random(k) + 0.1).astype(np.float32).reshape(() if axis is None else (k,)), "s")]
    ins = ["x", "s"]
    if zp_type is not None:
        dt = np.int8 if zp_type == TensorProto.INT8 else np.uint8
        info = np.iinfo(dt)
        inits.append(numpy_helper.from_array(rng.integers(info.min, info.max, k).astype(dt).reshape(() if axis is None
                                                                                                   else (k,)), "z"))
        ins.append("z")
    node = helper.make_node("QuantizeLinear", ins, ["y"], **({} if axis is None else {"axis": axis}))
    model = one_node_model(node, [("x", TensorProto.FLOAT, x.shape)], zp_type or TensorProto.UINT8, inits, 13)
    rep = Backend.prepare(model, "CPU")
    got = rep.run({"x": x})[0]
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    assert [p.target for p in rep.placement] == ["vulkan"] and rep.last_run.runtime_fallbacks == 0
