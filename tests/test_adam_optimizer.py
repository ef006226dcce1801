"""ADAM_OPTIMIZER (ops/adam_optimizer.py, shaders/adam_optimizer.comp) against an independent numpy
implementation of the page's formula (the moments in float32 in the page's order: their bits; the
parameters in float64 within the module's bound), FLOAT32 and FLOAT16, the step as FLOAT32 / FLOAT16 /
UINT32, strided views at random offsets with the outputs poisoned first (every byte outside them
unchanged), in-place execution, T = 0, torch.optim.Adam's step where the formulas agree (Epsilon 0),
refused descriptors and the feature level."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_outside_unchanged, compile_at_level, place, poison_against, random_strides, read_logical

import kompute_dml as kdml
from kompute_dml.ops import adam_optimizer as ad

DT = kdml.DataType
TD = kdml.TensorDesc
NP = {DT.FLOAT32: np.float32, DT.FLOAT16: np.float16, DT.UINT32: np.uint32}
F32 = np.float32


def reference(x, m, v, g, t, lr, b1, b2, eps):
    """(X', M', V'): the moments in float32 as the page writes them, X' in float64."""
    b1, b2 = F32(b1), F32(b2)
    x, m, v, g = (a.astype(F32) for a in (x, m, v, g))
    m1 = b1 * m + (F32(1) - b1) * g
    v1 = b2 * v + ((F32(1) - b2) * g) * g
    t = float(t)
    with np.errstate(divide="ignore", invalid="ignore"):
        alpha = np.sqrt(1.0 - float(b2) ** t) / (1.0 - float(b1) ** t)
        x1 = x.astype(np.float64) - float(F32(lr)) * alpha * m1.astype(np.float64) / (np.sqrt(v1.astype(np.float64))
                                                                                     + float(F32(eps)))
    return x1, m1, v1


def run(dev, rng, dt, shape, t, step_type=None, lr=0.01, b1=0.9, b2=0.999, eps=1e-8):
    npd = NP[dt]
    x, m, g = (rng.standard_normal(shape).astype(npd) for _ in range(3))
    v = (rng.random(shape) * 2).astype(npd)
    step_type = step_type or dt
    want_x, want_m, want_v = reference(x, m, v, g, t, lr, b1, b2, eps)
    descs, tensors = [], []
    for i, vals in enumerate((x, m, v, g, np.full((1, 1, 1, 1), t, NP[step_type]), None, None, None)):
        d = TD(step_type if i == 4 else dt, (1, 1, 1, 1) if i == 4 else shape,
               random_strides(rng, (1, 1, 1, 1) if i == 4 else shape, allow_broadcast=False))
        tt, _ = place(dev, rng, d, vals)
        descs.append(d)
        tensors.append(tt)
    befores = [poison_against(tt, w.astype(npd), rng) for tt, w in zip(tensors[5:], (want_x, want_m, want_v))]
    dev.compile(ad.AdamOptimizerDesc(*descs, lr, b1, b2, eps)).execute(tensors[:5], tensors[5:])
    got = [read_logical(assert_outside_unchanged(tt, b), tt.offset, tt.desc) for tt, b in zip(tensors[5:], befores)]
    for gm, wm in ((got[1], want_m), (got[2], want_v)):  # the float32 formula's bits (rounded once for FLOAT16)
        np.testing.assert_array_equal(gm.view(f"u{gm.itemsize}"), wm.astype(npd).view(f"u{gm.itemsize}"))
    # X': the divisions exact, sqrt within a few ulps, B^T to ~2^-44: 2^-20 of the update, + float16's rounding
    gx = got[0].astype(np.float64)
    np.testing.assert_array_equal(np.isnan(gx), np.isnan(want_x))
    gx, want_x, x = (a[~np.isnan(want_x)] for a in (gx, want_x, x))
    tol = 2.0 ** -20 * np.abs(want_x - x.astype(np.float64)) + 2.0 ** -24 * np.abs(want_x)
    if dt == DT.FLOAT16:  # half a float16 ulp: 2^-11 of the value, 2^-25 among the subnormals (below 2^-14)
        tol = tol + 2.0 ** -11 * np.abs(want_x) + 2.0 ** -25
    assert np.all(np.abs(gx - want_x) <= tol), np.max(np.abs(gx - want_x) - tol)
    return got


@pytest.mark.parametrize("t", [1, 2, 7, 1000, 123456])
def test_float32(dev, rng, t):
    run(dev, rng, DT.FLOAT32, (2, 3, 4, 5), t)


@pytest.mark.parametrize("step", [DT.FLOAT16, DT.UINT32], ids=lambda d: d.name)
def test_float16(dev, rng, step):
    run(dev, rng, DT.FLOAT16, (1, 3, 5, 7), 3, step_type=step)


def test_uint32_step_and_hyperparameters(dev, rng):
    run(dev, rng, DT.FLOAT32, (1, 1, 6, 9), 5, step_type=DT.UINT32, lr=0.3, b1=0.5, b2=0.75, eps=0.125)
    run(dev, rng, DT.FLOAT32, (1, 2, 3, 3), 40, step_type=DT.UINT32, lr=1e-3, b1=0.0, b2=0.99, eps=0.0)


def test_step_zero_is_nan(dev, rng):
    """T = 0: the page's Alpha is 0 / 0 (sqrt(1 - 1) / (1 - 1)): NaN parameters, the moments updated."""
    got = run(dev, rng, DT.FLOAT32, (1, 1, 2, 3), 0)
    assert np.isnan(got[0]).all()


def test_in_place(dev, rng):
    shape = (1, 2, 3, 4)
    f = TD(DT.FLOAT32, shape)
    x, m, g = (rng.standard_normal(shape).astype(F32) for _ in range(3))
    v = rng.random(shape).astype(F32)
    want_x, want_m, want_v = reference(x, m, v, g, 4, 0.01, 0.9, 0.999, 1e-8)
    tx, tm, tv, tg = (dev.tensor(a) for a in (x, m, v, g))
    ts = dev.tensor(np.array([[[[4]]]], np.uint32))
    op = dev.compile(ad.AdamOptimizerDesc(f, f, f, f, TD(DT.UINT32, (1, 1, 1, 1)), f, f, f, 0.01, 0.9, 0.999, 1e-8))
    op.execute([tx, tm, tv, tg, ts], [tx, tm, tv])
    np.testing.assert_array_equal(tm.numpy(), want_m)
    np.testing.assert_array_equal(tv.numpy(), want_v)
    np.testing.assert_allclose(tx.numpy(), want_x, rtol=1e-6)


def test_against_torch(dev, rng):
    """torch.optim.Adam's step T from state (T - 1, M, V): its update is the page's with Epsilon scaled
    by sqrt(1 - Beta2^T), so they agree at Epsilon 0 (moments within rounding: torch lerps M)."""
    torch = pytest.importorskip("torch")
    shape, t, lr, b1, b2 = (2, 2, 3, 4), 6, 0.05, 0.8, 0.95
    x, m, g = (rng.standard_normal(shape).astype(F32) for _ in range(3))
    v = (rng.random(shape) + 0.1).astype(F32)
    p = torch.nn.Parameter(torch.tensor(x))
    opt = torch.optim.Adam([p], lr=lr, betas=(b1, b2), eps=0.0)
    p.grad = torch.tensor(g)
    opt.state[p] = {"step": torch.tensor(float(t - 1)), "exp_avg": torch.tensor(m), "exp_avg_sq": torch.tensor(v)}
    opt.step()
    f = TD(DT.FLOAT32, shape)
    outs = [dev.empty(shape) for _ in range(3)]
    dev.compile(ad.AdamOptimizerDesc(f, f, f, f, TD(DT.FLOAT32, (1, 1, 1, 1)), f, f, f, lr, b1, b2, 0.0)).execute(
        [dev.tensor(a) for a in (x, m, v, g, np.full((1, 1, 1, 1), t, F32))], outs)
    st = opt.state[p]
    np.testing.assert_allclose(outs[1].numpy(), st["exp_avg"].numpy(), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(outs[2].numpy(), st["exp_avg_sq"].numpy(), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(outs[0].numpy(), p.detach().numpy(), rtol=1e-6, atol=1e-6)


def test_refused(dev):
    f, h = TD(DT.FLOAT32, (1, 2, 3, 4)), TD(DT.FLOAT16, (1, 2, 3, 4))
    s, s16 = TD(DT.FLOAT32, (1, 1, 1, 1)), TD(DT.FLOAT16, (1, 1, 1, 1))
    hp = (0.01, 0.9, 0.999, 1e-8)
    bad = [
        (ad.AdamOptimizerDesc(f, h, f, f, s, f, f, f, *hp), kdml.InvalidArgumentError, "input_first_moment_tensor"),
        (ad.AdamOptimizerDesc(f, f, f, TD(DT.FLOAT32, (1, 2, 3, 5)), s, f, f, f, *hp), kdml.InvalidArgumentError,
         "gradient_tensor"),
        (ad.AdamOptimizerDesc(f, f, f, f, s16, f, f, f, *hp), kdml.InvalidArgumentError, "training_step_tensor"),
        (ad.AdamOptimizerDesc(f, f, f, f, TD(DT.FLOAT32, (1, 1, 1, 2)), f, f, f, *hp), kdml.InvalidArgumentError,
         "training_step_tensor"),
        (ad.AdamOptimizerDesc(f, f, f, f, TD(DT.INT32, (1, 1, 1, 1)), f, f, f, *hp), kdml.UnsupportedError,
         "training_step_tensor"),
        (ad.AdamOptimizerDesc(f, f, f, f, s, f, f, f, float("nan"), 0.9, 0.999, 1e-8), kdml.InvalidArgumentError,
         "learning_rate"),
        (ad.AdamOptimizerDesc(f, f, f, f, s, f, f, f, 0.01, 0.9, 0.999, "x"), kdml.InvalidArgumentError, "epsilon"),
        (ad.AdamOptimizerDesc(f, f, f, f, s, f, TD(DT.FLOAT32, (1, 2, 3, 4), (0, 0, 1, 1)), f, *hp),
         kdml.InvalidArgumentError, "output_first_moment_tensor"),
        (ad.AdamOptimizerDesc(*(TD(DT.FLOAT32, (2, 3, 4)),) * 4, s, *(TD(DT.FLOAT32, (2, 3, 4)),) * 3, *hp),
         kdml.UnsupportedError, "input_parameters_tensor"),
    ]
    for desc, err, field in bad:
        with pytest.raises(err) as e:
            dev.compile(desc)
        assert str(e.value).startswith(field) or field in str(e.value), (field, str(e.value))


def test_overlap_other_than_in_place_refused(dev):
    shape = (1, 1, 2, 4)
    f = TD(DT.FLOAT32, shape)
    buf = dev.buffer(bytes(64))
    a, b = kdml.Tensor(buf, f, 0), kdml.Tensor(buf, f, 16)
    op = dev.compile(ad.AdamOptimizerDesc(f, f, f, f, TD(DT.FLOAT32, (1, 1, 1, 1)), f, f, f, 0.01, 0.9, 0.999, 1e-8))
    others = [dev.tensor(np.zeros(shape, F32)) for _ in range(3)]
    with pytest.raises(kdml.InvalidArgumentError, match="output_parameters_tensor"):
        op.execute([a, *others, dev.tensor(np.ones((1, 1, 1, 1), F32))], [b, dev.empty(shape), dev.empty(shape)])


def test_feature_level():
    f, s = TD(DT.FLOAT32, (1, 1, 2, 2)), TD(DT.FLOAT32, (1, 1, 1, 1))
    desc = ad.AdamOptimizerDesc(f, f, f, f, s, f, f, f, 0.01, 0.9, 0.999, 1e-8)
    with pytest.raises(kdml.UnsupportedError):
        compile_at_level(kdml.FeatureLevel.FL_2_1, desc)
    compile_at_level(kdml.FeatureLevel.FL_3_0, desc)
