"""LP_NORMALIZATION (ops/lp_normalization.py, shaders/lp_normalization.comp) against an independent
numpy reference: x / max(norm, epsilon), the norm a float32 sum in ascending axis position (each
step rounded once; P 2 squares rounded, then a correctly rounded square root), the quotient
correctly rounded (FLOAT16: decoded exactly, the float32 quotient rounded to float16). P 1: the
reference's bits; P 2: within 2^-21 relative of it (GLSL's sqrt need not be correctly rounded) and
its bits on lavapipe. Ranks 1 to 8 and every axis, zero lines (zeros out), lines with NaN or
infinity, strided views at random offsets with the output poisoned first (every byte outside it
unchanged); refused descriptors with the field they name; feature levels; the helper."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_outside_unchanged, compile_at_level, place, poison_against, random_strides, read_logical

import kompute_dml as kdml
from kompute_dml.ops import lp_normalization as lpn

DT = kdml.DataType
TD = kdml.TensorDesc
NP = {DT.FLOAT32: np.float32, DT.FLOAT16: np.float16}


def reference(x: np.ndarray, axis: int, p: int, eps: float, npd) -> np.ndarray:
    xm = np.moveaxis(x.astype(np.float32), axis, -1)
    acc = np.zeros(xm.shape[:-1], np.float32)
    with np.errstate(all="ignore"):
        for k in range(xm.shape[-1]):
            v = xm[..., k]
            acc = (acc + (np.abs(v) if p == 1 else (v * v).astype(np.float32))).astype(np.float32)
        norm = acc if p == 1 else np.sqrt(acc)
        d = np.where(np.isnan(norm), norm, np.maximum(norm, np.float32(eps))).astype(np.float32)
        y = (xm / d[..., None]).astype(np.float32)
    return np.moveaxis(y.astype(npd), -1, axis)


CASES = [((2, 3, 4, 5), 3), ((2, 3, 4, 5), 0), ((9,), 0), ((3, 70), 1), ((2, 1, 3, 2, 4), 2),
         ((2, 2, 2, 2, 2, 2, 2, 3), 7), ((2, 2, 2, 2, 2, 2, 3, 2), 1)]


@pytest.mark.parametrize("dt", [DT.FLOAT32, DT.FLOAT16], ids=lambda d: d.name)
@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_against_numpy(dev, rng, case, p, dt):
    shape, axis = CASES[case]
    npd = NP[dt]
    x = (rng.standard_normal(shape) * 10.0 ** rng.integers(-2, 3, shape)).astype(npd)
    lines = np.moveaxis(x, axis, -1)
    if lines.shape[:-1] and np.prod(lines.shape[:-1]) > 3:
        flat = lines.reshape(-1, lines.shape[-1])
        flat[0] = 0  # a zero line: zeros
        flat[1, 0] = np.nan
        flat[2, -1] = np.inf
        flat[3, :] = np.float16(1e-4) if dt == DT.FLOAT16 else np.float32(1e-7)  # norm below epsilon
        x = np.moveaxis(flat.reshape(lines.shape), -1, axis).copy()
    eps = 1e-5
    want = reference(x, axis, p, eps, npd)
    xd = TD(dt, shape, random_strides(rng, shape, allow_broadcast=False))
    yd = TD(dt, shape, random_strides(rng, shape, allow_broadcast=False))
    tx, _ = place(dev, rng, xd, x)
    ty, _ = place(dev, rng, yd)
    before = poison_against(ty, want, rng)
    dev.compile(lpn.LpNormalizationDesc(xd, yd, axis, eps, p)).execute([tx], [ty])
    got = read_logical(assert_outside_unchanged(ty, before), ty.offset, yd)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    if p == 1 or "llvmpipe" in dev.name:
        np.testing.assert_array_equal(got[ok].view(f"u{got.itemsize}"), want[ok].view(f"u{want.itemsize}"))
    # the float32 result within 2^-21 (the device's square root), then rounded to the output type: FLOAT16 may
    # round to the neighbouring half (one float16 step, 2^-10 relative; 2^-24 among subnormals)
    tol = {"rtol": 2 ** -21, "atol": 0} if dt == DT.FLOAT32 else {"rtol": 2 ** -10, "atol": 2 ** -24}
    np.testing.assert_allclose(got[ok].astype(np.float64), want[ok].astype(np.float64), **tol)


def test_seven_dimensions_besides_the_axis_take_a_dispatch_each(dev, rng):
    shape = (2, 3, 2, 3, 2, 3, 2, 4)
    x = rng.standard_normal(shape).astype(np.float32)
    xd = TD(DT.FLOAT32, shape, (1, 2, 6, 12, 36, 72, 216, 432))  # no neighbours merge
    yd = TD(DT.FLOAT32, shape, random_strides(rng, shape, allow_broadcast=False, max_gap=2))
    op = dev.compile(lpn.LpNormalizationDesc(xd, yd, 7, 1e-5, 2))
    assert len(op.plans) == 2
    tx, _ = place(dev, rng, xd, x)
    ty, _ = place(dev, rng, yd)
    want = reference(x, 7, 2, 1e-5, np.float32)
    before = poison_against(ty, want, rng)
    op.execute([tx], [ty])
    got = read_logical(assert_outside_unchanged(ty, before), ty.offset, yd)
    np.testing.assert_allclose(got, want, rtol=2 ** -21, atol=0)


def _desc(**over):
    d = {"input_tensor": TD(DT.FLOAT32, (2, 3, 4, 5)), "output_tensor": TD(DT.FLOAT32, (2, 3, 4, 5)), "axis": 3,
         "epsilon": 1e-5, "p": 2}
    d.update(over)
    return lpn.LpNormalizationDesc(**d)


@pytest.mark.parametrize("over, error, field", [
    ({"output_tensor": TD(DT.FLOAT16, (2, 3, 4, 5))}, kdml.InvalidArgumentError, "output_tensor.data_type"),
    ({"output_tensor": TD(DT.FLOAT32, (2, 3, 5, 4))}, kdml.InvalidArgumentError, "output_tensor.sizes"),
    ({"output_tensor": TD(DT.FLOAT32, (1, 2, 3, 4, 5))}, kdml.InvalidArgumentError, "output_tensor.sizes"),
    ({"axis": 4}, kdml.InvalidArgumentError, "axis"),
    ({"p": 3}, kdml.InvalidArgumentError, "p"),
    ({"p": 0}, kdml.InvalidArgumentError, "p"),
    ({"epsilon": -1.0}, kdml.InvalidArgumentError, "epsilon"),
    ({"epsilon": float("nan")}, kdml.InvalidArgumentError, "epsilon"),
    ({"epsilon": 1e39}, kdml.InvalidArgumentError, "epsilon"),
    ({"input_tensor": TD(DT.INT32, (2, 3, 4, 5)), "output_tensor": TD(DT.INT32, (2, 3, 4, 5))}, kdml.UnsupportedError,
     "input_tensor"),
    ({"output_tensor": TD(DT.FLOAT32, (2, 3, 4, 5), (60, 20, 0, 1))}, kdml.InvalidArgumentError, "output_tensor"),
])
def test_refused(dev, over, error, field):
    with pytest.raises(error, match=field.replace(".", r"\.")):
        dev.compile(_desc(**over))
    assert dev.compile(_desc()) is not None


def test_feature_levels():
    compile_at_level(kdml.FeatureLevel.FL_1_0, _desc())
    two = {"input_tensor": TD(DT.FLOAT32, (3, 4)), "output_tensor": TD(DT.FLOAT32, (3, 4)), "axis": 1}
    with pytest.raises(kdml.UnsupportedError, match="input_tensor"):
        compile_at_level(kdml.FeatureLevel.FL_3_0, _desc(**two))
    compile_at_level(kdml.FeatureLevel.FL_3_1, _desc(**two))


def test_helper(dev, rng):
    x = rng.standard_normal((4, 6)).astype(np.float32)
    y = kdml.lp_normalization(x, 0, p=1, device=dev).numpy()
    np.testing.assert_array_equal(y, reference(x, 0, 1, 1e-5, np.float32))
    np.testing.assert_allclose(kdml.lp_normalization(x, device=dev).numpy(),
                               x / np.linalg.norm(x.astype(np.float64), axis=-1, keepdims=True), rtol=1e-6)
    with pytest.raises(kdml.InvalidArgumentError, match="axis"):
        kdml.lp_normalization(x, 2, device=dev)
