"""LOCAL_RESPONSE_NORMALIZATION (ops/local_response_normalization.py, shaders/lrn.comp) against a
float64 loop reference of the page's formula: CrossChannel and the spatial region, even and odd
LocalSize, FLOAT32 and FLOAT16, strided inputs and outputs at random offsets, outputs poisoned
first and every other byte unchanged, the documented relative bound; refused descriptors; ONNX LRN
node cases on the device and models against onnxruntime."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from helpers import assert_outside_unchanged, place, poison_against, random_strides, read_logical

import kompute_dml as kdml

DT = kdml.DataType
TD = kdml.TensorDesc
U = 2.0 ** -24


def reference(x, cross, size, alpha, beta, bias):
    """float64 outputs and the bound's scale |Beta log(base)| per element, and the region's size."""
    x64 = x.astype(np.float64)
    _, c, h, w = x.shape
    lo, hi = (size - 1) // 2, size // 2
    y, t, k = np.zeros(x.shape), np.zeros(x.shape), np.zeros(x.shape)
    for i in np.ndindex(*x.shape):
        b_, c_, h_, w_ = i
        if cross:
            region = x64[b_, max(0, c_ - lo):min(c - 1, c_ + hi) + 1, h_, w_]
        else:
            region = x64[b_, c_, max(0, h_ - lo):min(h - 1, h_ + hi) + 1, max(0, w_ - lo):min(w - 1, w_ + hi) + 1]
        base = bias + alpha / size * np.sum(region ** 2)
        y[i] = x64[i] / base ** beta
        t[i], k[i] = abs(beta * math.log(base)), region.size
    return y, t, k


@pytest.mark.parametrize("dt", [DT.FLOAT32, DT.FLOAT16], ids=lambda d: d.name)
@pytest.mark.parametrize("cross, size, alpha, beta, bias", [
    (True, 3, 1e-4, 0.75, 1.0), (True, 4, 0.5, 0.6, 2.0), (True, 1, 2.0, 1.5, 0.5),
    (False, 3, 0.2, 0.75, 1.0), (False, 2, 1.0, -0.5, 3.0),
])
def test_against_numpy(dev, rng, dt, cross, size, alpha, beta, bias):
    xs = (2, 6, 5, 7)
    x = (rng.standard_normal(xs) * 3).astype(dt.numpy_dtype)
    x[0, 0, 0, 0] = -0.0
    want, t, k = reference(x, cross, size, alpha, beta, bias)
    xd = TD(dt, xs, random_strides(rng, xs, allow_broadcast=False))
    yd = TD(dt, xs, random_strides(rng, xs, allow_broadcast=False))
    tx, _ = place(dev, rng, xd, x)
    ty, _ = place(dev, rng, yd)
    before = poison_against(ty, want.astype(dt.numpy_dtype), rng)
    dev.compile(kdml.LocalResponseNormalizationDesc(xd, yd, cross, size, alpha, beta, bias)).execute([tx], [ty])
    got = read_logical(assert_outside_unchanged(ty, before), ty.offset, yd).astype(np.float64)
    bound = U * (abs(beta) * (k + 4) + 3 * t + 6) * np.abs(want)
    if dt == DT.FLOAT16:
        bound = bound + np.abs(want) * 2.0 ** -11 + 2.0 ** -25
    assert np.all(np.abs(got - want) <= bound), float(np.max(np.abs(got - want) / np.maximum(bound, 1e-300)))
    assert np.signbit(got[0, 0, 0, 0])


def test_special_values(dev):
    x = np.array([[1.0, np.inf, np.nan, -2.0]], np.float32).reshape(1, 4, 1, 1)
    y = kdml.lrn(x, 1, alpha=1.0, beta=1.0, bias=0.0, device=dev).numpy().reshape(-1)
    assert y[0] == 1.0 and np.isnan(y[1]) and np.isnan(y[2]) and y[3] == -0.5  # inf / inf, NaN, -2 / 4


F = DT.FLOAT32
BASE = kdml.LocalResponseNormalizationDesc(TD(F, (1, 5, 3, 4)), TD(F, (1, 5, 3, 4)), True, 3)


@pytest.mark.parametrize("change, field", [
    (dict(local_size=0), "local_size"),
    (dict(cross_channel=1), "cross_channel"),
    (dict(alpha=float("nan")), "alpha"),
    (dict(beta="0.75"), "beta"),
    (dict(bias=1e39), "bias"),
    (dict(output_tensor=TD(F, (1, 5, 3, 5))), "output_tensor.sizes"),
    (dict(output_tensor=TD(DT.FLOAT16, (1, 5, 3, 4))), "output_tensor.data_type"),
])
def test_refused_descriptors_name_their_field(dev, change, field):
    with pytest.raises(kdml.InvalidArgumentError, match=f"^{field}"):
        dev.compile(dataclasses.replace(BASE, **change))
    with pytest.raises(kdml.UnsupportedError, match="input_tensor"):
        dev.compile(dataclasses.replace(BASE, input_tensor=TD(F, (5, 3, 4)), output_tensor=TD(F, (5, 3, 4))))


onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402
from onnx_node_cases import node_case_tests, one_node_model  # noqa: E402

from kompute_dml.onnx_backend import Backend  # noqa: E402

test_case_count, test_onnx_node_case_on_the_device = node_case_tests(r"^test_lrn\w*_cpu$", __name__, 2)


@pytest.mark.parametrize("shape", [(2, 7, 9), (1, 6, 4, 5), (2, 5, 3, 2, 4)], ids=str)
@pytest.mark.parametrize(("dt", "et"), [(np.float32, TensorProto.FLOAT), (np.float16, TensorProto.FLOAT16)],
                         ids=["f32", "f16"])
def test_models_against_onnxruntime(rng, shape, dt, et):
    x = (rng.standard_normal(shape) * 4).astype(dt)
    node = helper.make_node("LRN", ["x"], ["y"], size=3, alpha=0.3, beta=0.8, bias=1.5)
    model = one_node_model(node, [("x", et, shape)], et, opset=13)
    rep = Backend.prepare(model, "CPU")
    got = rep.run({"x": x})[0].astype(np.float64)
    tol = 1e-5 if dt == np.float32 else 2e-3
    # the channel region sees one position at a time: any rank as (N, C, 1, rest)
    want, _, _ = reference(x.reshape(shape[0], shape[1], 1, -1), True, 3, 0.3, 0.8, 1.5)
    np.testing.assert_allclose(got, want.reshape(shape), rtol=tol, atol=tol)
    if len(shape) == 4 and dt == np.float32:  # onnxruntime's CPU kernel: 4-D float32 only
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        np.testing.assert_allclose(got, sess.run(None, {"x": x})[0], rtol=tol, atol=tol)
    assert [p.target for p in rep.placement] == ["vulkan"] and rep.last_run.runtime_fallbacks == 0
