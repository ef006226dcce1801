"""RESAMPLE_GRAD and RESAMPLE_GRAD1 (ops/grad_resample.py, shaders/grad_resample.comp): the pages'
example exactly (with the offsets it implies, and what RESAMPLE's offsets give instead); nearest and
linear, FLOAT32 and FLOAT16, 1 to 4 dimensions, strided views at random offsets, the output poisoned
first (every byte outside it unchanged) against an independent numpy reference (per-axis weight
matrices from the pages' relation in rational arithmetic, float64 sums, the module's bound); the
adjoint identity against kompute_dml's RESAMPLE1 / RESAMPLE2; torch autograd of F.interpolate where
its forward is RESAMPLE's; refused descriptors and feature levels."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from helpers import assert_outside_unchanged, compile_at_level, place, poison_against, random_strides, read_logical

import kompute_dml as kdml
from kompute_dml.ops import grad_resample as gr

DT = kdml.DataType
TD = kdml.TensorDesc
IM = kdml.InterpolationMode
NN, LIN = IM.NEAREST_NEIGHBOR, IM.LINEAR
DEC, INC = kdml.AxisDirection.DECREASING, kdml.AxisDirection.INCREASING
NP = {DT.FLOAT32: np.float32, DT.FLOAT16: np.float16}


def axis_matrix(n_in, n_out, mode, rounding, s, ip, op):
    """W[o, i]: the weight forward output o gives input i on one axis (float64 of the exact value).
    rounding: "half_up" (RESAMPLE1: floor(c + 1/2)), "floor" or "ceil" (RESAMPLE2)."""
    s, ip, op = Fraction(s), Fraction(ip), Fraction(op)
    w = np.zeros((n_out, n_in))
    for o in range(n_out):
        c = (o - op) / s - ip
        if mode == NN:
            k = {"half_up": math.floor(c + Fraction(1, 2)), "floor": math.floor(c), "ceil": math.ceil(c)}[rounding]
            w[o, min(max(k, 0), n_in - 1)] += 1
        else:
            c = min(max(c, Fraction(0)), Fraction(n_in - 1))
            i0 = math.floor(c)
            f = c - i0
            w[o, i0] += float(1 - f)
            w[o, min(i0 + 1, n_in - 1)] += float(f)
    return w


def reference(dy, in_sizes, mode, rounding, scales, ips, ops):
    """(dx in float64, sum |w dy| per element: the bound's scale)."""
    dx, mag = dy.astype(np.float64), np.abs(dy.astype(np.float64))
    for a, n in enumerate(in_sizes):
        w = axis_matrix(n, dy.shape[a], mode, rounding, scales[a], ips[a], ops[a])
        dx = np.moveaxis(np.tensordot(dx, w, axes=([a], [0])), -1, a)
        mag = np.moveaxis(np.tensordot(mag, np.abs(w), axes=([a], [0])), -1, a)
    return dx, mag


def run(dev, rng, dt, in_sizes, out_sizes, mode, scales, ips, ops, v1=None):
    """v1: None for RESAMPLE_GRAD, else RESAMPLE_GRAD1's rounding direction."""
    npd = NP[dt]
    dy = (rng.standard_normal(out_sizes) * 3).astype(npd)
    rounding = "half_up" if v1 is None else ("ceil" if v1 == INC else "floor")
    want, mag = reference(dy, in_sizes, mode, rounding, scales, ips, ops)
    gd = TD(dt, out_sizes, random_strides(rng, out_sizes, allow_broadcast=False))
    tg, _ = place(dev, rng, gd, dy)
    yd = TD(dt, in_sizes, random_strides(rng, in_sizes, allow_broadcast=False))
    ty, _ = place(dev, rng, yd)
    before = poison_against(ty, want.astype(npd), rng)
    if v1 is None:
        desc = gr.ResampleGradDesc(gd, yd, mode, scales, ips, ops)
    else:
        desc = gr.ResampleGrad1Desc(gd, yd, mode, v1, scales, ips, ops)
    dev.compile(desc).execute([tg], [ty])
    got = read_logical(assert_outside_unchanged(ty, before), ty.offset, yd).astype(np.float64)
    terms = max(1, int(np.prod([math.ceil(2 * o / i) + 2 for o, i in zip(out_sizes, in_sizes)])))
    bound = (len(in_sizes) + terms + 1) * 2.0 ** -24 * mag + (2.0 ** -11 * np.abs(want) if dt == DT.FLOAT16 else 0)
    assert np.all(np.abs(got - want) <= bound + 1e-30), np.max(np.abs(got - want) - bound)
    return got


EXAMPLE_DY = np.array([[[[4, 5, 6]]]], np.float32)


def example(dev, desc):
    y = dev.empty((1, 1, 2, 2))
    dev.compile(desc).execute([dev.tensor(EXAMPLE_DY)], [y])
    return y.numpy()[0, 0]


def test_the_pages_example(dev):
    """Nearest, scales 0.5 (height) and 1.5 (width): [4, 5, 6] -> [[9, 6], [0, 0]] with the offsets the
    forward example implies (RESAMPLE1: InputPixelOffsets 0.5, OutputPixelOffsets 0; RESAMPLE2: 0, 0
    DECREASING); RESAMPLE's centres (0.5, -0.5) sample exactly half way, where halves go up."""
    g, y = TD(DT.FLOAT32, (1, 1, 1, 3)), TD(DT.FLOAT32, (1, 1, 2, 2))
    scales = (1, 1, 0.5, 1.5)
    np.testing.assert_array_equal(example(dev, gr.ResampleGradDesc(g, y, NN, scales, (0.5,) * 4, (0,) * 4)), [[9, 6], [0, 0]])
    np.testing.assert_array_equal(example(dev, gr.ResampleGrad1Desc(g, y, NN, DEC, scales, (0,) * 4, (0,) * 4)),
                                  [[9, 6], [0, 0]])
    np.testing.assert_array_equal(example(dev, gr.ResampleGradDesc(g, y, NN, scales, (0.5,) * 4, (-0.5,) * 4)),
                                  [[0, 0], [4, 11]])


# (input sizes, output sizes, scales, input offsets, output offsets)
CASES = [
    ((1, 2, 3, 4), (1, 2, 6, 8), (1, 1, 2, 2), (0.5,) * 4, (-0.5,) * 4),
    ((2, 1, 5, 4), (2, 1, 3, 6), (1, 1, 0.6, 1.5), (0.5, 0.5, 0.25, 0), (-0.5, 0, 0.5, -1)),
    ((1, 1, 7, 3), (1, 1, 2, 9), (1, 1, 0.3, 3), (0, 0, 0, 0.5), (0, 0, 0, -0.5)),  # coordinates beyond the edges
    ((3, 2, 2, 2), (1, 4, 5, 1), (0.5, 2, 2.5, 0.5), (0.5,) * 4, (-0.5,) * 4),
]


@pytest.mark.parametrize("dt", [DT.FLOAT32, DT.FLOAT16], ids=lambda d: d.name)
@pytest.mark.parametrize("mode", [NN, LIN], ids=lambda m: m.name)
@pytest.mark.parametrize("case", range(len(CASES)))
def test_resample_grad_against_numpy(dev, rng, case, mode, dt):
    run(dev, rng, dt, *CASES[case][:2], mode, *CASES[case][2:])


@pytest.mark.parametrize("direction", [DEC, INC], ids=lambda d: d.name)
@pytest.mark.parametrize("mode", [NN, LIN], ids=lambda m: m.name)
@pytest.mark.parametrize("shape", [((5,), (9,), (1.8,), (0.5,), (-0.5,)), ((4, 3), (3, 7), (0.75, 7 / 3), (0, 0.5), (0, -0.5)),
                                   ((2, 3, 4), (3, 2, 8), (1.5, 0.5, 2), (0.5, 0, 0.5), (-0.5, 0, -0.5))],
                         ids=("1d", "2d", "3d"))
def test_resample_grad1_against_numpy(dev, rng, shape, mode, direction):
    run(dev, rng, DT.FLOAT32, shape[0], shape[1], mode, *shape[2:], v1=direction)


def test_float16_resample_grad1(dev, rng):
    run(dev, rng, DT.FLOAT16, (2, 3, 5), (2, 6, 4), LIN, (1, 2, 0.8), (0.5,) * 3, (-0.5,) * 3, v1=DEC)


@pytest.mark.parametrize("mode", [NN, LIN], ids=lambda m: m.name)
def test_adjoint_of_kompute_dmls_resample(dev, rng, mode):
    """<RESAMPLE1(x), dy> == <x, RESAMPLE_GRAD(dy)> and the same for RESAMPLE2 / RESAMPLE_GRAD1."""
    xs, ys = (1, 2, 4, 5), (1, 2, 7, 3)
    scales, ips, ops = (1, 1, 1.75, 0.6), (0.5,) * 4, (-0.5,) * 4
    x = rng.standard_normal(xs).astype(np.float32)
    dy = rng.standard_normal(ys).astype(np.float32)
    f = DT.FLOAT32
    for fwd, bwd in ((kdml.Resample1Desc(TD(f, xs), TD(f, ys), mode, scales, ips, ops),
                      gr.ResampleGradDesc(TD(f, ys), TD(f, xs), mode, scales, ips, ops)),
                     (kdml.Resample2Desc(TD(f, xs), TD(f, ys), mode, INC, scales, ips, ops),
                      gr.ResampleGrad1Desc(TD(f, ys), TD(f, xs), mode, INC, scales, ips, ops))):
        y, dx = dev.empty(ys), dev.empty(xs)
        dev.compile(fwd).execute([dev.tensor(x)], [y])
        dev.compile(bwd).execute([dev.tensor(dy)], [dx])
        lhs = float(np.sum(y.numpy().astype(np.float64) * dy))
        rhs = float(np.sum(x.astype(np.float64) * dx.numpy()))
        assert abs(lhs - rhs) <= 1e-5 * (1 + abs(lhs))


def test_against_torch(dev, rng):
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    f = DT.FLOAT32
    x = rng.standard_normal((2, 3, 5, 4)).astype(np.float32)
    # (torch arguments, output size, scales, input offsets, output offsets) whose forward is RESAMPLE1's
    cases = [(dict(mode="nearest"), (10, 8), (2, 2), (0.5, 0.5), (0, 0)),  # floor(o / s)
             (dict(mode="nearest-exact"), (10, 6), (2, 1.5), (0.5, 0.5), (-0.5, -0.5)),  # floor((o + 1/2) / s)
             (dict(mode="bilinear", align_corners=False), (9, 6), (1.8, 1.5), (0.5, 0.5), (-0.5, -0.5)),
             (dict(mode="bilinear", align_corners=True), (9, 7), (2, 2), (0, 0), (0, 0))]
    for kw, size, scales, ips, ops in cases:
        tx = torch.tensor(x, requires_grad=True)
        out = F.interpolate(tx, size=size, **kw)
        dy = rng.standard_normal(out.shape).astype(np.float32)
        out.backward(torch.tensor(dy))
        mode = NN if kw["mode"].startswith("nearest") else LIN
        desc = gr.ResampleGradDesc(TD(f, dy.shape), TD(f, x.shape), mode, (1, 1, *scales), (0, 0, *ips), (0, 0, *ops))
        dx = dev.empty(x.shape)
        dev.compile(desc).execute([dev.tensor(dy)], [dx])
        np.testing.assert_allclose(dx.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-5, err_msg=str(kw))


def test_refused(dev):
    f, h = TD(DT.FLOAT32, (1, 1, 2, 4)), TD(DT.FLOAT16, (1, 1, 1, 2))
    y = TD(DT.FLOAT32, (1, 1, 1, 2))
    four = (1, 1, 0.5, 0.5)
    bad = [
        (gr.ResampleGradDesc(f, h, NN, four, (0,) * 4, (0,) * 4), kdml.InvalidArgumentError, "output_gradient_tensor"),
        (gr.ResampleGradDesc(f, y, IM.CUBIC, four, (0,) * 4, (0,) * 4), kdml.InvalidArgumentError, "interpolation_mode"),
        (gr.ResampleGradDesc(f, y, NN, (1, 1, 0.5), (0,) * 4, (0,) * 4), kdml.InvalidArgumentError, "scales"),
        (gr.ResampleGradDesc(f, y, NN, (1, 1, 0, 0.5), (0,) * 4, (0,) * 4), kdml.InvalidArgumentError, "scales[2]"),
        (gr.ResampleGradDesc(f, y, NN, four, (0, 0, float("nan"), 0), (0,) * 4), kdml.InvalidArgumentError,
         "input_pixel_offsets[2]"),
        (gr.ResampleGradDesc(TD(DT.FLOAT32, (1, 2, 4)), TD(DT.FLOAT32, (1, 1, 2)), NN, (1, 0.5, 0.5), (0,) * 3, (0,) * 3),
         kdml.UnsupportedError, "input_gradient_tensor"),
        (gr.ResampleGrad1Desc(f, y, NN, 7, four, (0,) * 4, (0,) * 4), kdml.InvalidArgumentError, "rounding_direction"),
        (gr.ResampleGrad1Desc(f, TD(DT.FLOAT32, (1, 1, 2, 2), (4, 4, 1, 1)), NN, DEC, four, (0,) * 4, (0,) * 4),
         kdml.InvalidArgumentError, "output_gradient_tensor"),
    ]
    for desc, err, field in bad:
        with pytest.raises(err) as e:
            dev.compile(desc)
        assert str(e.value).startswith(field) or field in str(e.value), (field, str(e.value))


def test_feature_levels():
    f, y = TD(DT.FLOAT32, (1, 1, 2, 4)), TD(DT.FLOAT32, (1, 1, 1, 2))
    with pytest.raises(kdml.UnsupportedError):
        compile_at_level(kdml.FeatureLevel.FL_2_1, gr.ResampleGradDesc(f, y, NN, (1, 1, 0.5, 0.5), (0,) * 4, (0,) * 4))
    with pytest.raises(kdml.UnsupportedError):
        compile_at_level(kdml.FeatureLevel.FL_5_0, gr.ResampleGrad1Desc(f, y, NN, DEC, (1, 1, 0.5, 0.5), (0,) * 4, (0,) * 4))
    compile_at_level(kdml.FeatureLevel.FL_3_0, gr.ResampleGradDesc(f, y, NN, (1, 1, 0.5, 0.5), (0,) * 4, (0,) * 4))
