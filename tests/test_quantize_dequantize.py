"""QUANTIZE / DEQUANTIZE (ops/quantize_dequantize.py): bit for bit against numpy (the correctly rounded
float32 quotient rounded half to even, the zero point, saturation, NaN to Min; the exact difference times
the scale in float32, FLOAT16 outputs rounded once), per element, per axis (size 1 and stride-0 views)
and block-wise parameters over 1 to 8 dimensions, FLOAT16 inputs and scales, strided inputs and outputs
poisoned first (every byte outside unchanged), SCALE and SCALE_ZERO_POINT, refused descriptors, the
helpers."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_output, place, poison_against, random_strides

import kompute_dml as kdml
from kompute_dml.ops.quantize_dequantize import DequantizeDesc, QuantizationType, QuantizeDesc

DT = kdml.DataType
TD = kdml.TensorDesc
SZ = QuantizationType.SCALE_ZERO_POINT
NP = {DT.FLOAT32: np.float32, DT.FLOAT16: np.float16, DT.UINT8: np.uint8, DT.INT8: np.int8}


def expand(p, shape):
    """A parameter of sizes dividing `shape` repeated over its blocks."""
    for d, (n, q) in enumerate(zip(shape, p.shape)):
        p = np.repeat(p, n // q, axis=d)
    return p


def q_ref(x, s, z, yt):
    info = np.iinfo(yt)
    q = (x.astype(np.float32) / s.astype(np.float32)).astype(np.float32)
    r = np.rint(q).astype(np.float64) + z
    r = np.where(np.isnan(r), info.min, r)
    return np.clip(r, info.min, info.max).astype(yt)


def dq_ref(x, s, z):
    return ((x.astype(np.int32) - z).astype(np.float32) * s.astype(np.float32)).astype(np.float32).astype(s.dtype)


CASES = [((6,), (3,)), ((4, 6), (4, 1)), ((4, 6), (1, 6)), ((2, 4, 6), (2, 1, 3)), ((2, 3, 8), (1, 3, 2)), ((5, 4), (5, 4)),
         ((2, 2, 2, 2, 2, 2, 2, 4), (2, 1, 2, 1, 1, 2, 1, 2)), ((3, 4, 5), (1, 1, 1))]


def _place_params(dev, rng, s, z, st, zt):
    ts = [place(dev, rng, TD(st, s.shape), s)[0]]
    if z is not None:
        ts.append(place(dev, rng, TD(zt, z.shape), z)[0])
    return ts


@pytest.mark.parametrize("case", CASES, ids=str)
@pytest.mark.parametrize("types", [(DT.FLOAT32, DT.FLOAT32, DT.UINT8), (DT.FLOAT32, DT.FLOAT32, DT.INT8),
                                   (DT.FLOAT16, DT.FLOAT16, DT.INT8), (DT.FLOAT16, DT.FLOAT32, DT.UINT8)],
                         ids=lambda t: "-".join(x.name for x in t))
@pytest.mark.parametrize("kind", [QuantizationType.SCALE, SZ], ids=lambda k: k.name)
def test_quantize(dev, rng, case, types, kind):
    shape, qshape = case
    xt, st, yt = types
    x = (rng.standard_normal(shape) * 60).astype(NP[xt])
    x.reshape(-1)[:3] = (np.nan, 1e4, -1e4)
    s = rng.uniform(0.1, 2.0, qshape).astype(NP[st])
    info = np.iinfo(NP[yt])
    z = rng.integers(info.min, info.max + 1, qshape).astype(NP[yt]) if kind == SZ else None
    want = q_ref(x, expand(s, shape), 0 if z is None else expand(z, shape).astype(np.int64), NP[yt])
    xd = TD(xt, shape, random_strides(rng, shape, allow_broadcast=False))
    tx, _ = place(dev, rng, xd, x)
    ps = _place_params(dev, rng, s, z, st, yt)
    yd = TD(yt, shape, random_strides(rng, shape, allow_broadcast=False))
    ty, _ = place(dev, rng, yd)
    before = poison_against(ty, want, rng)
    dev.compile(QuantizeDesc(xd, kind, tuple(t.desc for t in ps), yd)).execute([tx, *ps], [ty])
    assert_output(ty, before, want)


@pytest.mark.parametrize("case", CASES, ids=str)
@pytest.mark.parametrize("types", [(DT.UINT8, DT.FLOAT32), (DT.INT8, DT.FLOAT32), (DT.INT8, DT.FLOAT16), (DT.UINT8, DT.FLOAT16)],
                         ids=lambda t: "-".join(x.name for x in t))
@pytest.mark.parametrize("kind", [QuantizationType.SCALE, SZ], ids=lambda k: k.name)
def test_dequantize(dev, rng, case, types, kind):
    shape, qshape = case
    xt, st = types
    info = np.iinfo(NP[xt])
    x = rng.integers(info.min, info.max + 1, shape).astype(NP[xt])
    x.reshape(-1)[:2] = (info.min, info.max)
    s = rng.uniform(0.001, 3.0, qshape).astype(NP[st])
    z = rng.integers(info.min, info.max + 1, qshape).astype(NP[xt]) if kind == SZ else None
    if z is not None:
        z.reshape(-1)[:1] = info.max
    want = dq_ref(x, expand(s, shape), 0 if z is None else expand(z, shape).astype(np.int32))
    xd = TD(xt, shape, random_strides(rng, shape, allow_broadcast=False))
    tx, _ = place(dev, rng, xd, x)
    ps = _place_params(dev, rng, s, z, st, xt)
    yd = TD(st, shape, random_strides(rng, shape, allow_broadcast=False))
    ty, _ = place(dev, rng, yd)
    before = poison_against(ty, want, rng)
    dev.compile(DequantizeDesc(xd, kind, tuple(t.desc for t in ps), yd)).execute([tx, *ps], [ty])
    assert_output(ty, before, want)


def test_broadcast_views(dev, rng):
    """Per-axis parameters as stride-0 views of the input's sizes."""
    x = rng.integers(0, 256, (3, 4)).astype(np.uint8)
    s = rng.uniform(0.5, 1.5, (4,)).astype(np.float32)
    tx, _ = place(dev, rng, TD(DT.UINT8, (3, 4)), x)
    ts, _ = place(dev, rng, TD(DT.FLOAT32, (4,)), s)
    tsv = kdml.Tensor(ts.buffer, TD(DT.FLOAT32, (3, 4), (0, 1)), ts.offset)
    ty, _ = place(dev, rng, TD(DT.FLOAT32, (3, 4)))
    want = dq_ref(x, np.broadcast_to(s, (3, 4)), 0)
    before = poison_against(ty, want, rng)
    dev.compile(DequantizeDesc(tx.desc, QuantizationType.SCALE, (tsv.desc,), ty.desc)).execute([tx, tsv], [ty])
    assert_output(ty, before, want)


X, S, Z, Q = TD(DT.FLOAT32, (2, 4)), TD(DT.FLOAT32, (2, 2)), TD(DT.UINT8, (2, 2)), TD(DT.UINT8, (2, 4))


@pytest.mark.parametrize("desc, error, field", [
    (QuantizeDesc(X, QuantizationType.NONE, (S,), Q), kdml.InvalidArgumentError, "quantization_type"),
    (QuantizeDesc(X, 7, (S,), Q), kdml.InvalidArgumentError, "quantization_type"),
    (QuantizeDesc(X, QuantizationType.SCALE, (S, Z), Q), kdml.InvalidArgumentError, "quantization_tensors"),
    (QuantizeDesc(X, SZ, (S,), Q), kdml.InvalidArgumentError, "quantization_tensors"),
    (QuantizeDesc(X, SZ, (S, TD(DT.INT8, (2, 2))), Q), kdml.InvalidArgumentError, r"quantization_tensors\[1\].data_type"),
    (QuantizeDesc(X, SZ, (S, TD(DT.UINT8, (2, 1))), Q), kdml.InvalidArgumentError, r"quantization_tensors\[1\].sizes"),
    (QuantizeDesc(X, SZ, (Z, Z), Q), kdml.InvalidArgumentError, r"quantization_tensors\[0\].data_type"),
    (QuantizeDesc(X, QuantizationType.SCALE, (TD(DT.FLOAT32, (2, 3)),), Q), kdml.InvalidArgumentError, r"quantization_tensors\[0\].sizes"),
    (QuantizeDesc(X, QuantizationType.SCALE, (TD(DT.FLOAT32, (2,)),), Q), kdml.InvalidArgumentError, r"quantization_tensors\[0\].sizes"),
    (QuantizeDesc(X, QuantizationType.SCALE, (S,), TD(DT.UINT8, (4, 2))), kdml.InvalidArgumentError, "output_tensor.sizes"),
    (QuantizeDesc(X, QuantizationType.SCALE, (S,), TD(DT.UINT8, (2, 4), (0, 1))), kdml.InvalidArgumentError, "output_tensor"),
    (QuantizeDesc(X, QuantizationType.SCALE, (S,), TD(DT.INT32, (2, 4))), kdml.UnsupportedError, "output_tensor"),
    (QuantizeDesc(TD(DT.INT32, (2, 4)), QuantizationType.SCALE, (S,), Q), kdml.UnsupportedError, "input_tensor"),
    (QuantizeDesc(X, QuantizationType.SCALE, (), Q), kdml.InvalidArgumentError, "quantization_tensors"),
    (DequantizeDesc(Q, SZ, (S, TD(DT.INT8, (2, 2))), X), kdml.InvalidArgumentError, r"quantization_tensors\[1\].data_type"),
    (DequantizeDesc(Q, QuantizationType.SCALE, (S,), TD(DT.FLOAT16, (2, 4))), kdml.InvalidArgumentError, "output_tensor.data_type"),
    (DequantizeDesc(X, QuantizationType.SCALE, (S,), X), kdml.UnsupportedError, "input_tensor"),
])
def test_refused(dev, desc, error, field):
    with pytest.raises(error, match="^" + field):
        dev.compile(desc)


def test_level():
    with kdml.Device(feature_level=kdml.FeatureLevel.FL_6_2) as d, pytest.raises(kdml.UnsupportedError, match="6_3"):
        d.compile(QuantizeDesc(X, QuantizationType.SCALE, (S,), Q))


def test_helpers(dev, rng):
    x = (rng.standard_normal((4, 8)) * 20).astype(np.float32)
    s = rng.uniform(0.5, 2, (4, 2)).astype(np.float32)
    z = rng.integers(-128, 128, (4, 2)).astype(np.int8)
    q = kdml.quantize(x, s, z, device=dev)
    np.testing.assert_array_equal(q.numpy(), q_ref(x, expand(s, x.shape), expand(z, x.shape).astype(np.int64), np.int8))
    d = kdml.dequantize(q, s, z, device=dev).numpy()
    np.testing.assert_array_equal(d, dq_ref(q.numpy(), expand(s, x.shape), expand(z, x.shape).astype(np.int32)))
    assert kdml.quantize(x, np.float32(0.5), device=dev).desc.data_type == DT.UINT8
