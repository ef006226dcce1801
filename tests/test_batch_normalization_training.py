"""BATCH_NORMALIZATION_TRAINING (ops/batch_normalization_training.py, shaders/bn_training.comp): the bits
against an independent numpy float32 reference of the stated steps (sequential float32 sums in row-major
order of the reduced dimensions, each operation rounded once), float64 and torch's batch_norm in training
mode within the stated bound; FLOAT32 / FLOAT16, 1 to 5 dimensions, several kept dimensions, strided
views at random offsets, outputs poisoned first (every byte outside them unchanged), FusedAdd,
fused ReLU / LeakyReLU, refused descriptors and the feature level. (The page has no example.)"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_output, compile_at_level, place, poison_against, random_strides

import kompute_dml as kdml
from kompute_dml.ops import batch_normalization_training as bt

DT = kdml.DataType
TD = kdml.TensorDesc
NP = {DT.FLOAT32: np.float32, DT.FLOAT16: np.float16}
F32 = np.float32


def rows(a: np.ndarray, ch: tuple[int, ...]) -> np.ndarray:
    """a (the input's shape, float32) as (channels, n): channels row-major over the kept dimensions,
    each row its reduced elements in row-major order of the reduced dimensions."""
    kept = [d for d, c in enumerate(ch) if c != 1]
    red = [d for d, c in enumerate(ch) if c == 1]
    return np.transpose(a, kept + red).reshape(int(np.prod(ch)), -1)


def seq_sum(r: np.ndarray) -> np.ndarray:
    """Row sums in float32, sequentially from +0 then element 0 on (add.accumulate: one rounding per
    addition; the +0 start makes a sum of -0 terms +0, as the shader's)."""
    r = np.concatenate([np.zeros((r.shape[0], 1), F32), r.astype(F32)], axis=1)
    return np.add.accumulate(r, axis=1, dtype=F32)[:, -1]


def training_reference(x, s, b, add, eps, ch):
    """(y, mean, var) in float32 by bn_training.comp's steps: mean = sum / n, var = sum((x - mean)^2) / n."""
    xf = x.astype(F32)
    r = rows(xf, ch)
    n = F32(r.shape[1])
    mean = seq_sum(r) / n
    d = r - mean[:, None]
    var = seq_sum(d * d) / n
    m, v = mean.reshape(ch), var.reshape(ch)
    norm = (xf - m) / np.sqrt(v + F32(eps))
    y = s.astype(F32) * norm + b.astype(F32)
    if add is not None:
        y = y + add.astype(F32)
    return y, m, v


def activate(y32: np.ndarray, npd, act) -> np.ndarray:
    """The fused activation on the value the output type holds, rounded once more to it."""
    held = y32.astype(npd).astype(F32)
    if act is None:
        return held.astype(npd)
    neg = np.signbit(held) & ~np.isnan(held)
    if isinstance(act, kdml.ActivationReluDesc):
        out = np.where(neg, F32(0), held)
    else:  # LEAKY_RELU: alpha * x below zero (-0 kept)
        out = np.where(neg & (held != 0), F32(act.alpha) * held, held)
    return out.astype(npd)


def placed_outputs(dev, rng, descs, wants):
    ts = [place(dev, rng, d)[0] for d in descs]
    return ts, [poison_against(t, w, rng) for t, w in zip(ts, wants)]


CASES = [  # (input sizes, per-channel sizes)
    ((2, 3, 4, 5), (1, 3, 1, 1)),
    ((6, 4), (1, 4)),
    ((2, 3, 2, 2, 3), (1, 3, 1, 1, 3)),  # two kept dimensions
    ((7,), (1,)),  # everything reduced
    ((2, 3, 2), (2, 3, 2)),  # nothing reduced: n = 1, variance 0
    ((3, 1, 4), (1, 1, 4)),
]


@pytest.mark.parametrize("dt", [DT.FLOAT32, DT.FLOAT16], ids=lambda d: d.name)
@pytest.mark.parametrize("case", range(len(CASES)))
@pytest.mark.parametrize("with_add", [False, True], ids=["plain", "add"])
def test_against_numpy(dev, rng, case, dt, with_add):
    size, ch = CASES[case]
    npd = NP[dt]
    x = (rng.standard_normal(size) * 2 + 0.5).astype(npd)
    s, b = (rng.standard_normal(ch).astype(npd) for _ in range(2))
    add = rng.standard_normal(size).astype(npd) if with_add else None
    eps = 1e-3
    y32, m, v = training_reference(x, s, b, add, eps, ch)
    want = [y32.astype(npd), m.astype(npd), v.astype(npd)]
    xd = TD(dt, size, random_strides(rng, size, allow_broadcast=False))
    sd, bd = (TD(dt, ch, random_strides(rng, ch, allow_broadcast=False)) for _ in range(2))
    ins = [place(dev, rng, xd, x)[0], place(dev, rng, sd, s)[0], place(dev, rng, bd, b)[0]]
    ad = None
    if with_add:
        ad = TD(dt, size, random_strides(rng, size, allow_broadcast=False))
        ins.append(place(dev, rng, ad, add)[0])
    else:
        ins.append(None)
    odescs = [TD(dt, size, random_strides(rng, size, allow_broadcast=False))] + [
        TD(dt, ch, random_strides(rng, ch, allow_broadcast=False)) for _ in range(2)]
    outs, before = placed_outputs(dev, rng, odescs, want)
    desc = bt.BatchNormalizationTrainingDesc(xd, sd, bd, ad, *odescs, eps)
    dev.compile(desc).execute(ins, outs)
    for t, bb, w in zip(outs, before, want):
        assert_output(t, bb, w)


@pytest.mark.parametrize("dt", [DT.FLOAT32, DT.FLOAT16], ids=lambda d: d.name)
def test_against_float64_and_torch(dev, rng, dt):
    torch = pytest.importorskip("torch")
    npd = NP[dt]
    size, ch = (4, 3, 5, 6), (1, 3, 1, 1)
    x = (rng.standard_normal(size) * 3 + 1).astype(npd)
    s, b = (rng.standard_normal(ch).astype(npd) for _ in range(2))
    y, m, v = dev.empty(size, dt), dev.empty(ch, dt), dev.empty(ch, dt)
    desc = bt.BatchNormalizationTrainingDesc(TD(dt, size), TD(dt, ch), TD(dt, ch), None, TD(dt, size), TD(dt, ch),
                                             TD(dt, ch), 1e-5)
    dev.compile(desc).execute([dev.tensor(x), dev.tensor(s), dev.tensor(b), None], [y, m, v])
    x64 = x.astype(np.float64)
    m64, v64 = x64.mean((0, 2, 3), keepdims=True), x64.var((0, 2, 3), keepdims=True)
    norm = (x64 - m64) / np.sqrt(v64 + 1e-5)
    y64 = s * norm + b
    n = x.size // 3
    u = 2.0 ** -24 if dt == DT.FLOAT32 else 2.0 ** -11
    # bound: 64 n u relative to the terms' magnitudes (|x| + |mean| for the mean, their squares for the variance)
    np.testing.assert_array_less(np.abs(m.numpy() - m64), 64 * n * u * (np.abs(x64).max() + 1))
    np.testing.assert_array_less(np.abs(v.numpy() - v64), 64 * n * u * (np.abs(x64).max() + 1) ** 2)
    np.testing.assert_array_less(np.abs(y.numpy() - y64), 64 * n * u * (np.abs(s) * (np.abs(norm) + 1) + np.abs(b)))
    xt = torch.tensor(x.astype(np.float32))
    yt = torch.nn.functional.batch_norm(xt, None, None, torch.tensor(s.reshape(3).astype(np.float32)),
                                        torch.tensor(b.reshape(3).astype(np.float32)), training=True, eps=1e-5)
    tol = 1e-5 if dt == DT.FLOAT32 else 4e-3
    np.testing.assert_allclose(y.numpy().astype(np.float32), yt.numpy(), rtol=tol, atol=tol * 4)


@pytest.mark.parametrize("dt", [DT.FLOAT32, DT.FLOAT16], ids=lambda d: d.name)
@pytest.mark.parametrize("act", ["relu", "leaky"])
def test_fused_activation(dev, rng, dt, act):
    npd = NP[dt]
    size, ch = (3, 2, 4), (1, 2, 1)
    a = kdml.ActivationReluDesc(None, None) if act == "relu" else kdml.ActivationLeakyReluDesc(None, None, 0.1)
    x = rng.standard_normal(size).astype(npd)
    s, b = (rng.standard_normal(ch).astype(npd) for _ in range(2))
    add = rng.standard_normal(size).astype(npd)
    y32, m, v = training_reference(x, s, b, add, 0.0, ch)
    want = activate(y32, npd, a)
    yd = TD(dt, size, random_strides(rng, size, allow_broadcast=False))
    (ty, tm, tv), before = placed_outputs(dev, rng, (yd, TD(dt, ch), TD(dt, ch)),
                                          (want, m.astype(npd), v.astype(npd)))
    desc = bt.BatchNormalizationTrainingDesc(TD(dt, size), TD(dt, ch), TD(dt, ch), TD(dt, size), yd, TD(dt, ch),
                                             TD(dt, ch), 0.0, a)
    dev.compile(desc).execute([dev.tensor(x), dev.tensor(s), dev.tensor(b), dev.tensor(add)], [ty, tm, tv])
    assert_output(ty, before[0], want)
    assert (want == 0).any() if act == "relu" else (want < 0).any()


def _desc(**kw):
    f = DT.FLOAT32
    x, c = TD(f, (2, 3, 4)), TD(f, (1, 3, 1))
    base = dict(input_tensor=x, scale_tensor=c, bias_tensor=c, fused_add_tensor=None, output_tensor=x,
                output_mean_tensor=c, output_variance_tensor=c, epsilon=1e-5)
    base.update(kw)
    return bt.BatchNormalizationTrainingDesc(**base)


@pytest.mark.parametrize("kw, field, error", [
    (dict(bias_tensor=TD(DT.FLOAT16, (1, 3, 1))), "bias_tensor.data_type", kdml.InvalidArgumentError),
    (dict(scale_tensor=TD(DT.FLOAT32, (1, 2, 1)), bias_tensor=TD(DT.FLOAT32, (1, 2, 1)),
          output_mean_tensor=TD(DT.FLOAT32, (1, 2, 1)), output_variance_tensor=TD(DT.FLOAT32, (1, 2, 1))),
     "scale_tensor.sizes", kdml.InvalidArgumentError),
    (dict(output_variance_tensor=TD(DT.FLOAT32, (1, 3, 4))), "output_variance_tensor.sizes", kdml.InvalidArgumentError),
    (dict(fused_add_tensor=TD(DT.FLOAT32, (2, 3, 1))), "fused_add_tensor.sizes", kdml.InvalidArgumentError),
    (dict(output_mean_tensor=TD(DT.FLOAT32, (3,))), "output_mean_tensor.sizes", kdml.InvalidArgumentError),
    (dict(epsilon=float("inf")), "epsilon", kdml.InvalidArgumentError),
    (dict(output_tensor=TD(DT.FLOAT32, (2, 3, 4), (0, 4, 1))), "output_tensor", kdml.InvalidArgumentError),
    (dict(fused_activation=kdml.ActivationGeluDesc(None, None, "none")), "fused_activation", kdml.UnsupportedError),
])
def test_refused(dev, kw, field, error):
    with pytest.raises(error, match=f"^{field}"):
        dev.compile(_desc(**kw))


def test_feature_level():
    with pytest.raises(kdml.UnsupportedError):
        compile_at_level(kdml.FeatureLevel.FL_4_0, _desc())
    compile_at_level(kdml.FeatureLevel.FL_4_1, _desc())
