"""ACTIVATION_RELU_GRAD, ELEMENT_WISE_CLIP_GRAD and ELEMENT_WISE_CLIP_GRAD1 (ops/grad_activation.py,
shaders/grad_elementwise.comp): every type of the pages' tables against a numpy reference written from
the pages' formulas (bit patterns: dY's bits or zero), strided and broadcast input views at random
offsets, a strided output poisoned first (every byte outside it unchanged), edge values (+-0, +-inf,
NaN, the integer limits, values on the bounds), more than 5 dimensions, in-place CLIP_GRAD, torch's
ReLU / clamp gradients, refused descriptors (error class and field) and the feature levels."""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers import assert_output, compile_at_level, place, poison_against, random_strides, random_values

import kompute_dml as kdml
from kompute_dml.ops import grad_activation as ga

DT = kdml.DataType
TD = kdml.TensorDesc
FLOATS = (DT.FLOAT32, DT.FLOAT16)
INTS32 = (DT.INT8, DT.UINT8, DT.INT16, DT.UINT16, DT.INT32, DT.UINT32)
INTS64 = (DT.INT64, DT.UINT64)


def zero_or(keep: np.ndarray, dy: np.ndarray) -> np.ndarray:
    """dY's bits where `keep`, else all bits zero."""
    return np.where(keep, dy, np.zeros_like(dy))


def ref_relu(x, dy):
    with np.errstate(invalid="ignore"):
        return zero_or(x.astype(np.float64) > 0, dy)


def ref_clip(x, dy, lo, hi):
    """The page's formula with exact comparisons (Python ints for integers: no wrap)."""
    if x.dtype.kind == "f":
        xv = x.astype(np.float64)
        with np.errstate(invalid="ignore"):
            return zero_or(~((xv <= lo) | (xv >= hi)), dy)
    xv = np.array([int(v) for v in x.reshape(-1)], dtype=object).reshape(x.shape)
    return zero_or(~((xv <= lo) | (xv >= hi)).astype(bool), dy)


def int_cast(v: float, dt: DT) -> int:
    """CLIP's integer cast of a FLOAT bound: float32, truncated toward zero, saturated (written here
    independently of the module)."""
    info = np.iinfo(dt.numpy_dtype)
    f = float(np.float32(v))
    t = math.trunc(f) if math.isfinite(f) else (int(info.max) if f > 0 else int(info.min))
    return min(max(t, int(info.min)), int(info.max))


def run(dev, rng, make, dt, shape, x, dy, want, broadcast=True):
    """Strided inputs (broadcast dimensions where `broadcast`) and output at random offsets."""
    xs = random_strides(rng, shape, allow_broadcast=broadcast)
    gs = random_strides(rng, shape, allow_broadcast=broadcast)
    xd, gd = TD(dt, shape, xs), TD(dt, shape, gs)
    # a broadcast dimension reads one element: the reference takes that one
    x = np.broadcast_to(x[tuple(slice(0, 1) if s == 0 else slice(None) for s in xs)], shape)
    dy = np.broadcast_to(dy[tuple(slice(0, 1) if s == 0 else slice(None) for s in gs)], shape)
    tx, _ = place(dev, rng, xd, x)
    tg, _ = place(dev, rng, gd, dy)
    yd = TD(dt, shape, random_strides(rng, shape, allow_broadcast=False))
    ty, _ = place(dev, rng, yd)
    expected = want(np.ascontiguousarray(x), np.ascontiguousarray(dy))
    before = poison_against(ty, expected, rng)
    dev.compile(make(xd, gd, yd)).execute([tx, tg], [ty])
    assert_output(ty, before, expected)


@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: d.name)
def test_relu_grad(dev, rng, dt):
    shape = (3, 5, 7)
    x = random_values(rng, dt, shape)
    x.reshape(-1)[:6] = (0.0, -0.0, np.nan, np.inf, -np.inf, 1e-7)  # 1e-7: a float16 subnormal / float32 normal
    dy = random_values(rng, dt, shape)
    run(dev, rng, ga.ActivationReluGradDesc, dt, shape, x, dy, ref_relu)


@pytest.mark.parametrize("dt", FLOATS + INTS32, ids=lambda d: d.name)
def test_clip_grad(dev, rng, dt):
    shape = (4, 3, 9)
    lo, hi = (-1.5, 2.25) if dt.is_float else ((-7.9, 100.5) if dt.is_signed else (3.7, 200.2))
    x = random_values(rng, dt, shape)
    if dt.is_float:
        x.reshape(-1)[:8] = (lo, hi, np.nextafter(np.float32(lo), 0), np.nan, -0.0, 0.0, np.inf, -np.inf)
        blo, bhi = float(np.float32(lo)), float(np.float32(hi))
    else:
        blo, bhi = int_cast(lo, dt), int_cast(hi, dt)
        x.reshape(-1)[:6] = (blo, bhi, blo + 1, bhi - 1, blo - 1 if blo > np.iinfo(x.dtype).min else blo, 0)
        x.reshape(-1)[6:30] = rng.integers(blo - 3, bhi + 3, 24)  # many near the bounds
    dy = random_values(rng, dt, shape)
    run(dev, rng, lambda a, b, o: ga.ElementWiseClipGradDesc(a, b, o, lo, hi), dt, shape, x, dy,
        lambda x_, g_: ref_clip(x_, g_, blo, bhi))


def test_clip_grad_integer_bounds_saturate(dev, rng):
    """FLOAT bounds beyond an integer type's range (and infinities) saturate: nothing passes <= min."""
    x = np.array([-128, -127, 0, 126, 127], np.int8)
    dy = np.arange(1, 6, dtype=np.int8)
    got = kdml.clip_grad(x, dy, -1e9, np.inf, device=dev).numpy()
    np.testing.assert_array_equal(got, [0, 2, 3, 4, 0])


@pytest.mark.parametrize("dt", FLOATS + INTS32 + INTS64, ids=lambda d: d.name)
def test_clip_grad1(dev, rng, dt):
    shape = (2, 3, 2, 5)
    if dt.is_float:
        lo, hi = -0.75, 3.0
    else:
        info = np.iinfo(dt.numpy_dtype)
        lo, hi = (int(info.min) + 3, int(info.max) - 5) if dt.size == 8 else (int(info.min) // 2 + 1, int(info.max) // 3)
    x = random_values(rng, dt, shape)
    flat = x.reshape(-1)
    flat[:4] = (lo, hi, lo + 1 if not dt.is_float else 0.0, hi - 1 if not dt.is_float else np.nan)
    dy = random_values(rng, dt, shape)
    run(dev, rng, lambda a, b, o: ga.ElementWiseClipGrad1Desc(a, b, o, dt, lo, hi), dt, shape, x, dy,
        lambda x_, g_: ref_clip(x_, g_, lo, hi))


def test_clip_grad1_float16_bound_rounded(dev):
    """CLIP_GRAD1's FLOAT16 Min is read as float16: 0.1 rounds to 0.0999755859375, so x = 0.1 (the same
    float16) is on the bound."""
    x = np.array([0.1, 0.2, 0.05], np.float16)
    got = kdml.clip_grad1(x, np.ones(3, np.float16), 0.1, 1.0, device=dev).numpy()
    np.testing.assert_array_equal(got, np.array([0, 1, 0], np.float16))


def test_more_dimensions_than_the_shader_walks(dev, rng):
    shape = (2, 2, 3, 2, 2, 3, 2, 2)  # 8 dimensions, none merge: the host enumerates some
    x = random_values(rng, DT.FLOAT32, shape)
    dy = random_values(rng, DT.FLOAT32, shape)
    run(dev, rng, ga.ActivationReluGradDesc, DT.FLOAT32, shape, x, dy, ref_relu, broadcast=False)


def test_clip_grad_in_place(dev, rng):
    """The pages allow OutputGradientTensor to alias InputTensor."""
    x = np.array([-3, -1, 0, 1, 2, 5], np.int16)
    dy = np.array([10, 20, 30, 40, 50, 60], np.int16)
    d = TD(DT.INT16, (6,))
    tx = dev.tensor(x)
    tg = dev.tensor(dy)
    dev.compile(ga.ElementWiseClipGradDesc(d, d, d, -1.0, 2.0)).execute([tx, tg], [tx])
    np.testing.assert_array_equal(tx.numpy(), [0, 0, 30, 40, 0, 0])


def test_against_torch(dev, rng):
    torch = pytest.importorskip("torch")
    x = rng.standard_normal((4, 33)).astype(np.float32)
    dy = rng.standard_normal((4, 33)).astype(np.float32)
    tx = torch.tensor(x, requires_grad=True)
    torch.relu(tx).backward(torch.tensor(dy))
    np.testing.assert_array_equal(kdml.relu_grad(x, dy, device=dev).numpy(), tx.grad.numpy())
    # torch's clamp passes the gradient on the bounds too (DirectML's page zeroes it): none lie there
    assert not np.isin(x, np.float32([-0.5, 0.75])).any()
    tx = torch.tensor(x, requires_grad=True)
    torch.clamp(tx, -0.5, 0.75).backward(torch.tensor(dy))
    np.testing.assert_array_equal(kdml.clip_grad(x, dy, -0.5, 0.75, device=dev).numpy(), tx.grad.numpy())


def test_helpers_broadcast_and_out(dev):
    x = np.array([[-1.0], [2.0]], np.float32)
    dy = np.array([[1.0, 2.0, 3.0]], np.float32)
    got = kdml.relu_grad(x, dy, device=dev)
    np.testing.assert_array_equal(got.numpy(), [[0, 0, 0], [1, 2, 3]])
    out = dev.empty((2, 3))
    assert kdml.clip_grad(x, dy, -5.0, 5.0, out=out, device=dev) is out
    with pytest.raises(kdml.InvalidArgumentError, match="dy"):
        kdml.relu_grad(x, dy.astype(np.float16), device=dev)


_F = TD(DT.FLOAT32, (2, 3))


@pytest.mark.parametrize("desc, error, field", [
    (ga.ActivationReluGradDesc(_F, TD(DT.FLOAT16, (2, 3)), _F), kdml.InvalidArgumentError, "input_gradient_tensor.data_type"),
    (ga.ActivationReluGradDesc(_F, _F, TD(DT.FLOAT32, (3, 2))), kdml.InvalidArgumentError, "output_gradient_tensor.sizes"),
    (ga.ActivationReluGradDesc(_F, TD(DT.FLOAT32, (1, 2, 3)), _F), kdml.InvalidArgumentError, "input_gradient_tensor.sizes"),
    (ga.ActivationReluGradDesc(*(TD(DT.INT32, (2, 3)),) * 3), kdml.UnsupportedError, "input_tensor"),
    (ga.ActivationReluGradDesc(_F, _F, TD(DT.FLOAT32, (2, 3), (1, 0))), kdml.InvalidArgumentError, "output_gradient_tensor"),
    (ga.ElementWiseClipGradDesc(_F, _F, _F, float("nan"), 1.0), kdml.InvalidArgumentError, "min"),
    (ga.ElementWiseClipGradDesc(_F, _F, _F, 0.0, "1"), kdml.InvalidArgumentError, "max"),
    (ga.ElementWiseClipGradDesc(*(TD(DT.INT64, (2, 3)),) * 3, 0.0, 1.0), kdml.UnsupportedError, "input_tensor"),
    (ga.ElementWiseClipGrad1Desc(_F, _F, _F, DT.FLOAT16, 0.0, 1.0), kdml.InvalidArgumentError, "min_max_data_type"),
    (ga.ElementWiseClipGrad1Desc(_F, _F, _F, None, None, 1.0), kdml.InvalidArgumentError, "min"),
    (ga.ElementWiseClipGrad1Desc(*(TD(DT.INT8, (2, 3)),) * 3, DT.INT8, 0, 300), kdml.InvalidArgumentError, "max"),
    (ga.ElementWiseClipGrad1Desc(*(TD(DT.FLOAT64, (2, 3)),) * 3, None, 0, 1), kdml.UnsupportedError, "input_tensor"),
])
def test_refused(dev, desc, error, field):
    with pytest.raises(error, match=field.replace(".", r"\.")):
        dev.compile(desc)


@pytest.mark.parametrize("desc, level, before", [
    (ga.ActivationReluGradDesc(_F, _F, _F), "3_0", kdml.FeatureLevel.FL_2_1),
    (ga.ElementWiseClipGradDesc(_F, _F, _F, 0.0, 1.0), "3_1", kdml.FeatureLevel.FL_3_0),
    (ga.ElementWiseClipGrad1Desc(_F, _F, _F, None, 0.0, 1.0), "5_0", kdml.FeatureLevel.FL_4_1),
])
def test_feature_levels(desc, level, before):
    with pytest.raises(kdml.UnsupportedError, match=level):
        compile_at_level(before, desc)
