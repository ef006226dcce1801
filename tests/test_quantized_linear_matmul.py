"""QUANTIZED_LINEAR_MATRIX_MULTIPLY (ops/quantized_linear_matmul.py): bit for bit against an independent
numpy reference of what is computed (int64 sums wrapped to int32; float32 multiplier (AScale * BScale) /
OutputScale, each step rounded once; float32(acc) * multiplier; round half to even; zero point;
saturation), and within one quantization step of the exact quotient acc * AScale * BScale /
OutputScale; every type combination, per tensor / row / column parameters, absent zero points, 2 to 4
dimensions, strided operands, saturation at both ends; outputs poisoned first, every byte outside them
unchanged; refused descriptors; the helper."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_output, place, poison_against, random_strides

import kompute_dml as kdml
from kompute_dml.ops.quantized_linear_matmul import QuantizedLinearMatrixMultiplyDesc as Desc

DT = kdml.DataType
TD = kdml.TensorDesc
Q8 = (DT.UINT8, DT.INT8)


def reference(a, asc, az, b, bsc, bz, ysc, yz, yt):
    """a (.., M, K), b (.., K, N); asc / az / ysc / yz (M, 1) or scalars, bsc / bz (N,) or scalars."""
    acc = np.matmul(a.astype(np.int64) - az, b.astype(np.int64) - bz)
    acc = ((acc + 2**31) % 2**32 - 2**31).astype(np.int32)
    mult = ((np.float32(1) * asc * bsc).astype(np.float32) / np.float32(1) / ysc).astype(np.float32)
    v = (acc.astype(np.float32) * mult).astype(np.float32)
    info = np.iinfo(yt)
    exact = acc.astype(np.float64) * asc.astype(np.float64) * bsc.astype(np.float64) / ysc.astype(np.float64) + yz
    return np.clip(np.rint(v).astype(np.float64) + yz, info.min, info.max).astype(yt), np.clip(exact, info.min, info.max)


def vals(rng, dt, shape):
    info = np.iinfo(dt.numpy_dtype)
    return rng.integers(info.min, info.max + 1, shape).astype(dt.numpy_dtype)


def run(dev, rng, ta, tb, ty, batch, m, k, n, per, *, zps=True, strided=False, scale=1.0):
    a, b = vals(rng, ta, (*batch, m, k)), vals(rng, tb, (*batch, k, n))
    r = max(1, len(batch) + 2) if per else 1
    shp = {"a": (m, 1) if per else (1,), "b": (n,) if per else (1,), "y": (m, 1) if per else (1,)}
    def lead(s):
        return (1,) * (r - len(s)) + s
    asc = rng.uniform(0.002, 0.05, shp["a"]).astype(np.float32)
    bsc = rng.uniform(0.002, 0.05, shp["b"]).astype(np.float32)
    ysc = (rng.uniform(0.02, 0.2, shp["y"]) * scale).astype(np.float32)
    az, bz, yz = (vals(rng, t, shp[w]) if zps else None for t, w in ((ta, "a"), (tb, "b"), (ty, "y")))
    tensors = []
    for v, dt, s in ((a, ta, None), (asc, DT.FLOAT32, 0), (az, ta, 0), (b, tb, None), (bsc, DT.FLOAT32, 0), (bz, tb, 0),
                     (ysc, DT.FLOAT32, 0), (yz, ty, 0)):
        if v is None:
            tensors.append(None)
            continue
        shape = lead(v.shape) if s == 0 else v.shape
        strides = random_strides(rng, shape, allow_broadcast=False) if strided and s is None else None
        tensors.append(place(dev, rng, TD(dt, shape, strides), v.reshape(shape))[0])
    yshape = (*batch, m, n)
    yd = TD(ty, yshape, random_strides(rng, yshape, allow_broadcast=False) if strided else None)
    tyt, _ = place(dev, rng, yd)
    def z(v):
        return 0 if v is None else v.astype(np.int64)
    want, exact = reference(a, asc, z(az), b, bsc, z(bz), ysc, z(yz), ty.numpy_dtype)
    before = poison_against(tyt, want, rng)
    desc = Desc(*(t.desc if t is not None else None for t in tensors), yd)
    dev.compile(desc).execute(tensors, [tyt])
    assert_output(tyt, before, want)
    assert np.abs(want.astype(np.float64) - exact).max() <= 1.0  # within one step of the exact quotient
    return want


@pytest.mark.parametrize("types", [(a, b, y) for a in Q8 for b in Q8 for y in Q8], ids=lambda t: "x".join(x.name for x in t))
@pytest.mark.parametrize("per", [False, True], ids=["per-tensor", "per-row-column"])
def test_against_numpy(dev, rng, types, per):
    run(dev, rng, *types, (2, 3), 5, 19, 6, per)


@pytest.mark.parametrize("batch", [(), (3,), (2, 2)], ids=str)
@pytest.mark.parametrize("zps", [True, False], ids=["zero-points", "none"])
def test_ranks_strides_absent_zero_points(dev, rng, batch, zps):
    run(dev, rng, DT.UINT8, DT.INT8, DT.INT8, batch, 4, 33, 5, True, zps=zps, strided=True)


def test_saturation_and_long_sums(dev, rng):
    """Small output scales saturate at both ends; K = 700 gives sums beyond 2^16 (the multiplier path)."""
    want = run(dev, rng, DT.UINT8, DT.INT8, DT.UINT8, (), 8, 700, 8, True, scale=0.01)
    assert (want == 0).any() and (want == 255).any()
    run(dev, rng, DT.INT8, DT.INT8, DT.INT8, (2,), 3, 700, 4, False, scale=50.0)


def _desc(**kw):
    s, u, i = TD(DT.FLOAT32, (1, 1, 1, 1)), TD(DT.UINT8, (1, 1, 1, 1)), TD(DT.INT8, (1, 1, 1, 1))
    d = dict(a=TD(DT.UINT8, (1, 2, 3, 4)), as_=s, az=u, b=TD(DT.INT8, (1, 2, 4, 5)), bs=s, bz=i, ys=s, yz=u,
             y=TD(DT.UINT8, (1, 2, 3, 5)))
    d.update(kw)
    return Desc(d["a"], d["as_"], d["az"], d["b"], d["bs"], d["bz"], d["ys"], d["yz"], d["y"])


@pytest.mark.parametrize("kw, error, field", [
    ({"az": TD(DT.INT8, (1, 1, 1, 1))}, kdml.InvalidArgumentError, "a_zero_point_tensor.data_type"),
    ({"yz": TD(DT.INT8, (1, 1, 1, 1))}, kdml.InvalidArgumentError, "output_zero_point_tensor.data_type"),
    ({"bs": TD(DT.FLOAT32, (1, 1, 5, 1))}, kdml.InvalidArgumentError, "b_scale_tensor.sizes"),
    ({"as_": TD(DT.FLOAT32, (1, 1, 1, 3))}, kdml.InvalidArgumentError, "a_scale_tensor.sizes"),
    ({"ys": TD(DT.FLOAT32, (1, 1, 2, 1))}, kdml.InvalidArgumentError, "output_scale_tensor.sizes"),
    ({"bz": TD(DT.INT8, (1, 1, 1))}, kdml.InvalidArgumentError, "b_zero_point_tensor.sizes"),
    ({"b": TD(DT.INT8, (1, 2, 3, 5))}, kdml.InvalidArgumentError, "b_tensor.sizes"),
    ({"b": TD(DT.INT8, (2, 4, 5))}, kdml.InvalidArgumentError, "b_tensor.sizes"),
    ({"y": TD(DT.UINT8, (1, 2, 3, 4))}, kdml.InvalidArgumentError, "output_tensor.sizes"),
    ({"y": TD(DT.INT32, (1, 2, 3, 5))}, kdml.UnsupportedError, "output_tensor"),
    ({"as_": TD(DT.FLOAT16, (1, 1, 1, 1))}, kdml.UnsupportedError, "a_scale_tensor"),
])
def test_refused(dev, kw, error, field):
    with pytest.raises(error, match="^" + field.replace(".", r"\.")):
        dev.compile(_desc(**kw))


def test_levels():
    two_d = dict(a=TD(DT.UINT8, (3, 4)), b=TD(DT.INT8, (4, 5)), y=TD(DT.UINT8, (3, 5)))
    with kdml.Device(feature_level=kdml.FeatureLevel.FL_2_1) as d:
        d.compile(_desc())
        with pytest.raises(kdml.UnsupportedError, match="^a_tensor"):
            d.compile(_desc(**two_d))
    with kdml.Device(feature_level=kdml.FeatureLevel.FL_4_0) as d:
        s = TD(DT.FLOAT32, (1, 1))
        d.compile(_desc(**two_d, as_=s, az=TD(DT.UINT8, (1, 1)), bs=s, bz=TD(DT.INT8, (1, 1)), ys=s, yz=TD(DT.UINT8, (1, 1))))


def test_helper(dev, rng):
    a, b = vals(rng, DT.UINT8, (4, 9)), vals(rng, DT.INT8, (9, 3))
    asc, bsc, ysc = np.float32(0.02), rng.uniform(0.01, 0.03, 3).astype(np.float32), np.float32(0.1)
    got = kdml.quantized_linear_matmul(a, asc, b, bsc, ysc, np.uint8(128), None, np.int8(-5), device=dev).numpy()
    want, _ = reference(a, asc, 128, b, bsc, 0, ysc, -5, np.int8)
    np.testing.assert_array_equal(got, want)
