"""BATCH_NORMALIZATION_GRAD, BATCH_NORMALIZATION_TRAINING_GRAD and LOCAL_RESPONSE_NORMALIZATION_GRAD
(ops/grad_normalization.py; shaders/bn_training.comp, lrn_grad.comp). Batch normalization: the bits
against an independent numpy float32 reference of the stated steps (sequential sums in row-major order
of the reduced dimensions), FLOAT32 / FLOAT16, 1 to 5 dimensions, strided views at random offsets, the
three outputs poisoned first (every byte outside them unchanged), and torch's batch_norm backward
(inference and training mode). LRN: float64 within the module's bound, torch's local_response_norm
backward (odd sizes: torch's window for even sizes is the mirror image of ONNX's), CrossChannel and
spatial, even and odd sizes, FLOAT16. Refused descriptors and the feature levels. (The pages have no
examples.)"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from helpers import assert_output, assert_outside_unchanged, compile_at_level, place, poison_against, random_strides, read_logical
from test_batch_normalization_training import rows, seq_sum

import kompute_dml as kdml
from kompute_dml.ops import grad_normalization as gn

DT = kdml.DataType
TD = kdml.TensorDesc
NP = {DT.FLOAT32: np.float32, DT.FLOAT16: np.float16}
F32 = np.float32


def bn_grad_reference(op, x, g, m, v, s, eps, ch):
    """(dX, dScale, dBias) in float32 by bn_training.comp's steps."""
    xf, gf, mf, vf, sf = (a.astype(F32) for a in (x, g, m, v, s))
    ve = vf + F32(eps)
    sd = np.sqrt(ve)
    c1 = gf * (xf - mf)
    sg, sc = seq_sum(rows(gf, ch)).reshape(ch), seq_sum(rows(c1, ch)).reshape(ch)
    dscale = sc / sd
    if op == "grad":
        dx = gf * (sf / sd)
    else:
        n = F32(rows(xf, ch).shape[1])
        mg, mc1 = sg / n, sc / n
        coef0 = F32(1) / sd
        dx = (sf * coef0) * ((gf - mg) - ((xf - mf) * mc1) / ve)
    return dx, dscale, sg


CASES = [((2, 3, 4, 5), (1, 3, 1, 1)), ((6, 4), (1, 4)), ((2, 3, 2, 2, 3), (1, 3, 1, 1, 3)), ((7,), (1,)),
         ((2, 3, 2), (2, 3, 2))]
DESCS = {"grad": gn.BatchNormalizationGradDesc, "tgrad": gn.BatchNormalizationTrainingGradDesc}


@pytest.mark.parametrize("dt", [DT.FLOAT32, DT.FLOAT16], ids=lambda d: d.name)
@pytest.mark.parametrize("case", range(len(CASES)))
@pytest.mark.parametrize("op", ["grad", "tgrad"])
def test_bn_against_numpy(dev, rng, op, case, dt):
    size, ch = CASES[case]
    npd = NP[dt]
    x = (rng.standard_normal(size) * 2 + 0.5).astype(npd)
    g = rng.standard_normal(size).astype(npd)
    xr = rows(x.astype(np.float64), ch)
    m = xr.mean(1).reshape(ch).astype(npd)
    v = (xr.var(1).reshape(ch) + rng.random(ch)).astype(npd)  # a running variance: not the batch's
    s = rng.standard_normal(ch).astype(npd)
    eps = 1e-3
    want = [a.astype(npd) for a in bn_grad_reference(op, x, g, m, v, s, eps, ch)]
    ind = [TD(dt, size if i < 2 else ch, random_strides(rng, size if i < 2 else ch, allow_broadcast=False))
           for i in range(5)]
    ins = [place(dev, rng, d, a)[0] for d, a in zip(ind, (x, g, m, v, s))]
    outd = [TD(dt, size, random_strides(rng, size, allow_broadcast=False))] + [
        TD(dt, ch, random_strides(rng, ch, allow_broadcast=False)) for _ in range(2)]
    outs = [place(dev, rng, d)[0] for d in outd]
    before = [poison_against(t, w, rng) for t, w in zip(outs, want)]
    dev.compile(DESCS[op](*ind, *outd, eps)).execute(ins, outs)
    for t, b, w in zip(outs, before, want):
        assert_output(t, b, w)


@pytest.mark.parametrize("op", ["grad", "tgrad"])
def test_bn_against_torch(dev, rng, op):
    torch = pytest.importorskip("torch")
    size, ch = (4, 3, 5, 6), (1, 3, 1, 1)
    x = (rng.standard_normal(size) * 3 + 1).astype(F32)
    g = rng.standard_normal(size).astype(F32)
    s, b = rng.standard_normal(3).astype(F32), rng.standard_normal(3).astype(F32)
    eps = 1e-5
    xt, st, bt = (torch.tensor(a, requires_grad=True) for a in (x, s, b))
    if op == "tgrad":
        m, v = x.mean((0, 2, 3)).astype(F32), x.var((0, 2, 3)).astype(F32)
        y = torch.nn.functional.batch_norm(xt, None, None, st, bt, training=True, eps=eps)
    else:
        m, v = rng.standard_normal(3).astype(F32), (rng.random(3) + 0.5).astype(F32)
        y = torch.nn.functional.batch_norm(xt, torch.tensor(m), torch.tensor(v), st, bt, training=False, eps=eps)
    y.backward(torch.tensor(g))
    T, C = TD(DT.FLOAT32, size), TD(DT.FLOAT32, ch)
    dx, ds, db = dev.empty(size), dev.empty(ch), dev.empty(ch)
    dev.compile(DESCS[op](T, T, C, C, C, T, C, C, eps)).execute(
        [dev.tensor(x), dev.tensor(g), dev.tensor(m.reshape(ch)), dev.tensor(v.reshape(ch)), dev.tensor(s.reshape(ch))],
        [dx, ds, db])
    np.testing.assert_allclose(dx.numpy(), xt.grad.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(ds.numpy().ravel(), st.grad.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(db.numpy().ravel(), bt.grad.numpy(), rtol=1e-5, atol=1e-5)


def lrn_grad64(x, g, cross, size, alpha, beta, bias):
    """(dX in float64, the module's bound per element)."""
    x, g = x.astype(np.float64), g.astype(np.float64)
    N, C, H, W = x.shape
    lo, hi = (size - 1) // 2, size // 2
    a_n = float(F32(alpha) / F32(size))
    c2 = float(F32(F32(2 * a_n) * F32(beta)))

    def region(c, h, w):
        if cross:
            return [(k, h, w) for k in range(max(0, c - lo), min(C - 1, c + hi) + 1)]
        return [(c, i, j) for i in range(max(0, h - lo), min(H - 1, h + hi) + 1)
                for j in range(max(0, w - lo), min(W - 1, w + hi) + 1)]

    D = np.zeros(x.shape)
    K = np.zeros(x.shape)
    for n, c, h, w in itertools.product(range(N), range(C), range(H), range(W)):
        r = region(c, h, w)
        D[n, c, h, w] = bias + a_n * sum(x[(n, *p)] ** 2 for p in r)
        K[n, c, h, w] = len(r)
    P = D ** beta
    T = g * x / (P * D)
    acc, tabs = np.zeros(x.shape), np.zeros(x.shape)
    for n, c, h, w in itertools.product(range(N), range(C), range(H), range(W)):
        for p in region(c, h, w):  # i = (c, h, w) adds its T to every j in its region
            acc[(n, *p)] += T[n, c, h, w]
            tabs[(n, *p)] += abs(T[n, c, h, w])
    dx = g / P - c2 * x * acc
    u = 2.0 ** -24
    E = abs(beta) * (K + 4) + 3 * np.abs(beta * np.log(D)) + 12
    bound = u * (E * np.abs(g / P) + (E.max() + K.max() + 8) * np.abs(c2 * x) * tabs)
    return dx, bound


LRN = [  # (sizes, cross, local size, alpha, beta, bias)
    ((2, 5, 3, 4), True, 3, 0.5, 0.75, 1.0),
    ((1, 6, 2, 3), True, 4, 0.3, 0.6, 2.0),  # even: the region [c - 1, c + 2]
    ((1, 2, 5, 4), False, 3, 0.4, 0.75, 1.0),
    ((1, 1, 4, 5), False, 2, 1.0, 1.5, 0.5),
]


@pytest.mark.parametrize("dt", [DT.FLOAT32, DT.FLOAT16], ids=lambda d: d.name)
@pytest.mark.parametrize("case", range(len(LRN)))
def test_lrn_against_float64(dev, rng, case, dt):
    size, cross, ls, alpha, beta, bias = LRN[case]
    npd = NP[dt]
    x = rng.standard_normal(size).astype(npd)
    g = rng.standard_normal(size).astype(npd)
    want, bound = lrn_grad64(x, g, cross, ls, alpha, beta, bias)
    xd, gd, yd = (TD(dt, size, random_strides(rng, size, allow_broadcast=False)) for _ in range(3))
    ty, _ = place(dev, rng, yd)
    before = poison_against(ty, want.astype(npd), rng)
    desc = gn.LocalResponseNormalizationGradDesc(xd, gd, yd, cross, ls, alpha, beta, bias)
    dev.compile(desc).execute([place(dev, rng, xd, x)[0], place(dev, rng, gd, g)[0]], [ty])
    got = read_logical(assert_outside_unchanged(ty, before), ty.offset, yd).astype(np.float64)
    if dt == DT.FLOAT16:
        bound = bound + np.abs(want) * 2.0 ** -11 + 2.0 ** -24
    assert np.all(np.abs(got - want) <= bound), np.max(np.abs(got - want) / bound)


@pytest.mark.parametrize("ls", [1, 3, 5])
def test_lrn_against_torch(dev, rng, ls):
    torch = pytest.importorskip("torch")
    size = (2, 6, 3, 3)
    x, g = rng.standard_normal(size).astype(F32), rng.standard_normal(size).astype(F32)
    xt = torch.tensor(x, requires_grad=True)
    torch.nn.functional.local_response_norm(xt, ls, alpha=0.2, beta=0.75, k=1.5).backward(torch.tensor(g))
    T = TD(DT.FLOAT32, size)
    y = dev.empty(size)
    dev.compile(gn.LocalResponseNormalizationGradDesc(T, T, T, True, ls, 0.2, 0.75, 1.5)).execute(
        [dev.tensor(x), dev.tensor(g)], [y])
    np.testing.assert_allclose(y.numpy(), xt.grad.numpy(), rtol=1e-5, atol=1e-6)


def _bn(cls=gn.BatchNormalizationGradDesc, **kw):
    f = DT.FLOAT32
    x, c = TD(f, (2, 3, 4)), TD(f, (1, 3, 1))
    base = dict(input_tensor=x, input_gradient_tensor=x, mean_tensor=c, variance_tensor=c, scale_tensor=c,
                output_gradient_tensor=x, output_scale_gradient_tensor=c, output_bias_gradient_tensor=c, epsilon=0.0)
    base.update(kw)
    return cls(**base)


_C2 = TD(DT.FLOAT32, (1, 2, 1))


@pytest.mark.parametrize("cls", [gn.BatchNormalizationGradDesc, gn.BatchNormalizationTrainingGradDesc])
@pytest.mark.parametrize("kw, field", [
    (dict(scale_tensor=TD(DT.FLOAT16, (1, 3, 1))), "scale_tensor.data_type"),
    (dict(variance_tensor=TD(DT.FLOAT32, (1, 3, 4))), "variance_tensor.sizes"),
    (dict(input_gradient_tensor=TD(DT.FLOAT32, (2, 3, 1))), "input_gradient_tensor.sizes"),
    (dict(mean_tensor=_C2, variance_tensor=_C2, scale_tensor=_C2, output_scale_gradient_tensor=_C2,
          output_bias_gradient_tensor=_C2), "mean_tensor.sizes"),
    (dict(output_bias_gradient_tensor=TD(DT.FLOAT32, (1, 3))), "output_bias_gradient_tensor.sizes"),
    (dict(epsilon=float("nan")), "epsilon"),
    (dict(output_scale_gradient_tensor=TD(DT.FLOAT32, (2, 3, 1), (0, 1, 1))), "output_scale_gradient_tensor"),
])
def test_bn_refused(dev, cls, kw, field):
    with pytest.raises(kdml.InvalidArgumentError, match=f"^{field}"):
        dev.compile(_bn(cls, **kw))


_L = TD(DT.FLOAT32, (1, 3, 2, 2))


@pytest.mark.parametrize("kw, field, error", [
    (dict(input_gradient_tensor=TD(DT.FLOAT16, (1, 3, 2, 2))), "input_gradient_tensor.data_type", kdml.InvalidArgumentError),
    (dict(output_gradient_tensor=TD(DT.FLOAT32, (1, 3, 2, 3))), "output_gradient_tensor.sizes", kdml.InvalidArgumentError),
    (dict(local_size=0), "local_size", kdml.InvalidArgumentError),
    (dict(beta=float("inf")), "beta", kdml.InvalidArgumentError),
    (dict(cross_channel=1), "cross_channel", kdml.InvalidArgumentError),
    (dict(input_tensor=TD(DT.FLOAT32, (3, 2, 2)), input_gradient_tensor=TD(DT.FLOAT32, (3, 2, 2)),
          output_gradient_tensor=TD(DT.FLOAT32, (3, 2, 2))), "input_tensor", kdml.UnsupportedError),
])
def test_lrn_refused(dev, kw, field, error):
    base = dict(input_tensor=_L, input_gradient_tensor=_L, output_gradient_tensor=_L, cross_channel=True, local_size=3)
    base.update(kw)
    with pytest.raises(error, match=f"^{field}"):
        dev.compile(gn.LocalResponseNormalizationGradDesc(**base))


def test_feature_levels():
    lrn = gn.LocalResponseNormalizationGradDesc(_L, _L, _L, True, 3)
    for desc, first, before in ((_bn(), "FL_3_1", "FL_3_0"), (lrn, "FL_3_1", "FL_3_0"),
                                (_bn(gn.BatchNormalizationTrainingGradDesc), "FL_4_1", "FL_4_0")):
        with pytest.raises(kdml.UnsupportedError):
            compile_at_level(kdml.FeatureLevel[before], desc)
        compile_at_level(kdml.FeatureLevel[first], desc)
