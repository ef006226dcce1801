"""AVERAGE_POOLING_GRAD and MAX_POOLING_GRAD (ops/grad_pooling.py, shaders/grad_pooling.comp): the
pages' examples; 2-D and 3-D windows with strides, dilations (MAX), asymmetric padding and
IncludePadding against an independent numpy reference (the forward windows visited in ascending
order, each contribution added to the element it lands on in float32: the bits; and float64 within
the module's bound), FLOAT32 and FLOAT16, strided views at random offsets, a strided output
poisoned first (every byte outside it unchanged), ties and NaN (MAX_POOLING2's index output picks
the same element), torch's avg_pool2d / avg_pool3d / max_pool2d gradients, refused descriptors and
the feature level."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from helpers import assert_outside_unchanged, compile_at_level, place, poison_against, random_strides, read_logical

import kompute_dml as kdml
from kompute_dml.ops import grad_pooling as gp

DT = kdml.DataType
TD = kdml.TensorDesc
NP = {DT.FLOAT32: np.float32, DT.FLOAT16: np.float16}


def out_size(i, k, s, d, p, q):
    return (i + p + q - (k - 1) * d - 1) // s + 1


def window_positions(o, size, win, strides, dil, start):
    """The in-bounds input positions of forward window o in window (row-major) order, and the tap count."""
    axes = [[o[a] * strides[a] - start[a] + k * dil[a] for k in range(win[a])] for a in range(len(size))]
    inside = [p for p in itertools.product(*axes) if all(0 <= c < n for c, n in zip(p, size))]
    return inside


def reference(fn, size_nc, g, x, win, strides, dil, start, end, include, npd):
    """(float32 bits as npd, float64): each forward window's contribution added, windows in ascending
    row-major order, to the element(s) it lands on."""
    n, c, *size = size_nc
    y32 = np.zeros(size_nc, np.float32)
    y64 = np.zeros(size_nc, np.float64)
    outs = g.shape[2:]
    g32 = g.astype(np.float32)
    for b, ch in itertools.product(range(n), range(c)):
        for o in itertools.product(*(range(s) for s in outs)):
            pos = window_positions(o, size, win, strides, dil, start)
            dy = g32[(b, ch, *o)]
            if fn == "avg":
                cnt = int(np.prod(win)) if include else len(pos)
                term = np.float32(dy / np.float32(cnt)) if pos else None
                for p in pos:
                    y32[(b, ch, *p)] = np.float32(y32[(b, ch, *p)] + term)
                    y64[(b, ch, *p)] += float(dy) / cnt
            elif pos:
                vals = [np.float32(x[(b, ch, *p)]) for p in pos]
                best = 0
                for i, v in enumerate(vals):  # the first NaN, else the first largest
                    if not np.isnan(vals[best]) and (np.isnan(v) or v > vals[best]):
                        best = i
                p = pos[best]
                y32[(b, ch, *p)] = np.float32(y32[(b, ch, *p)] + dy)
                y64[(b, ch, *p)] += float(dy)
    return y32.astype(npd), y64


def run(dev, rng, fn, dt, size_nc, win, strides, dil, start, end, include=False, x=None, g=None):
    npd = NP[dt]
    outs = [out_size(i, k, s, d, p, q) for i, k, s, d, p, q in zip(size_nc[2:], win, strides, dil, start, end)]
    gshape = (*size_nc[:2], *outs)
    if g is None:
        g = (rng.standard_normal(gshape) * 3).astype(npd)
    if fn == "max" and x is None:
        x = rng.integers(-4, 5, size_nc).astype(npd)  # few values: many ties
    want, want64 = reference(fn, size_nc, g, x, win, strides, dil, start, end, include, npd)
    gd = TD(dt, gshape, random_strides(rng, gshape, allow_broadcast=False))
    tg, _ = place(dev, rng, gd, g)
    yd = TD(dt, size_nc, random_strides(rng, size_nc, allow_broadcast=False))
    ty, _ = place(dev, rng, yd)
    before = poison_against(ty, want, rng)
    if fn == "avg":
        desc = gp.AveragePoolingGradDesc(gd, yd, strides, win, start, end, include)
        inputs = [tg]
    else:
        xd = TD(dt, size_nc, random_strides(rng, size_nc, allow_broadcast=False))
        tx, _ = place(dev, rng, xd, x)
        desc = gp.MaxPoolingGradDesc(xd, gd, yd, strides, win, start, end, dil)
        inputs = [tx, tg]
    dev.compile(desc).execute(inputs, [ty])
    got = read_logical(assert_outside_unchanged(ty, before), ty.offset, yd)
    np.testing.assert_array_equal(got.view(f"u{got.itemsize}"), want.view(f"u{want.itemsize}"))
    # the stated bound: (m + 1) u per element's sum of |terms| (m <= covering windows), float16's rounding
    tol = 2e-3 if dt == DT.FLOAT16 else 1e-6
    finite = np.isfinite(want64)
    np.testing.assert_allclose(got[finite].astype(np.float64), want64[finite], rtol=tol, atol=tol)
    return got


def test_average_the_pages_example(dev):
    g = np.array([[[[1, 2], [3, 4]]]], np.float32)
    y = dev.empty((1, 1, 3, 3))
    desc = gp.AveragePoolingGradDesc(TD(DT.FLOAT32, (1, 1, 2, 2)), TD(DT.FLOAT32, (1, 1, 3, 3)), (1, 1), (2, 2),
                                     (0, 0), (0, 0), False)
    dev.compile(desc).execute([dev.tensor(g)], [y])
    np.testing.assert_array_equal(y.numpy()[0, 0], [[0.25, 0.75, 0.5], [1, 2.5, 1.5], [0.75, 1.75, 1]])


def test_max_the_pages_example(dev):
    x = np.array([[[[1, 2, 3], [2, 4, 2], [5, 6, 7]]]], np.float32)
    g = np.array([[[[1, 2], [4, 5]]]], np.float32)
    y = dev.empty((1, 1, 3, 3))
    f = DT.FLOAT32
    desc = gp.MaxPoolingGradDesc(TD(f, (1, 1, 3, 3)), TD(f, (1, 1, 2, 2)), TD(f, (1, 1, 3, 3)), (1, 1), (2, 2),
                                 (0, 0), (0, 0), (1, 1))
    dev.compile(desc).execute([dev.tensor(x), dev.tensor(g)], [y])
    np.testing.assert_array_equal(y.numpy()[0, 0], [[0, 0, 0], [0, 3, 0], [0, 4, 5]])


# (N, C, spatial, window, strides, start, end, include)
AVG = [
    ((2, 3, 7, 6), (3, 2), (2, 1), (1, 0), (0, 1), False),
    ((1, 2, 6, 5), (3, 3), (1, 2), (1, 1), (2, 1), True),
    ((1, 2, 4, 5, 4), (2, 3, 2), (1, 2, 2), (0, 1, 1), (1, 0, 1), False),  # 3-D
    ((1, 1, 5, 5), (2, 2), (3, 3), (2, 0), (0, 2), False),  # windows wholly in the padding; uncovered elements
]


@pytest.mark.parametrize("dt", [DT.FLOAT32, DT.FLOAT16], ids=lambda d: d.name)
@pytest.mark.parametrize("case", range(len(AVG)))
def test_average_against_numpy(dev, rng, case, dt):
    size, win, strides, start, end, include = AVG[case]
    run(dev, rng, "avg", dt, size, win, strides, (1,) * len(win), start, end, include)


# (N, C, H, W, window, strides, dilations, start, end)
MAX = [
    ((2, 2, 6, 7), (3, 2), (1, 2), (1, 1), (1, 0), (1, 1)),
    ((1, 3, 7, 7), (2, 3), (2, 1), (2, 2), (0, 2), (1, 0)),  # dilations
    ((1, 1, 5, 5), (2, 2), (2, 2), (1, 1), (2, 2), (0, 0)),  # a window wholly in the padding: nothing
]


@pytest.mark.parametrize("dt", [DT.FLOAT32, DT.FLOAT16], ids=lambda d: d.name)
@pytest.mark.parametrize("case", range(len(MAX)))
def test_max_against_numpy(dev, rng, case, dt):
    size, win, strides, dil, start, end = MAX[case]
    run(dev, rng, "max", dt, size, win, strides, dil, start, end)


def test_max_nan_and_signed_zero(dev, rng):
    x = np.zeros((1, 1, 4, 4), np.float32)
    x[0, 0] = [[-0.0, 0.0, 1, 1], [np.nan, 2, np.nan, 1], [3, 3, -np.inf, -np.inf], [-np.inf, 5, -np.inf, -np.inf]]
    run(dev, rng, "max", DT.FLOAT32, (1, 1, 4, 4), (2, 2), (1, 1), (1, 1), (0, 0), (0, 0), x=x)


def test_max_matches_max_pooling2_indices(dev, rng):
    """The element each window's gradient goes to is MAX_POOLING2's OutputIndicesTensor (flat index), ties included."""
    size, win, strides, dil, start, end = (1, 2, 6, 6), (3, 3), (2, 1), (1, 2), (1, 1), (0, 1)
    x = rng.integers(-2, 3, size).astype(np.float32)
    outs = tuple(out_size(i, k, s, d, p, q) for i, k, s, d, p, q in zip(size[2:], win, strides, dil, start, end))
    gshape = (*size[:2], *outs)
    f = DT.FLOAT32
    idx, y = dev.empty(gshape, DT.UINT32), dev.empty(gshape)
    dev.compile(kdml.MaxPooling2Desc(TD(f, size), TD(f, gshape), TD(DT.UINT32, gshape), win, strides, start, end,
                                     dil)).execute([dev.tensor(x)], [y, idx])
    for o in range(int(np.prod(gshape))):  # one window's gradient at a time: a one-hot at its index
        g = np.zeros(gshape, np.float32)
        g.reshape(-1)[o] = 1.0
        got = dev.empty(size)
        dev.compile(gp.MaxPoolingGradDesc(TD(f, size), TD(f, gshape), TD(f, size), strides, win, start, end, dil)).execute(
            [dev.tensor(x), dev.tensor(g)], [got])
        b, c = np.unravel_index(o, gshape)[:2]
        flat = got.numpy()[b, c].reshape(-1)
        plane = (b * size[1] + c) * size[2] * size[3]  # the index is flat over (N, C, H, W)
        assert np.nonzero(flat)[0].tolist() == [int(idx.numpy().reshape(-1)[o]) - plane]


def test_against_torch(dev, rng):
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    x = rng.standard_normal((2, 3, 7, 8)).astype(np.float32)  # distinct values: no ties
    for include in (False, True):
        tx = torch.tensor(x, requires_grad=True)
        out = F.avg_pool2d(tx, (3, 2), (2, 1), padding=(1, 1), count_include_pad=include)
        g = rng.standard_normal(out.shape).astype(np.float32)
        out.backward(torch.tensor(g))
        desc = gp.AveragePoolingGradDesc(TD(DT.FLOAT32, g.shape), TD(DT.FLOAT32, x.shape), (2, 1), (3, 2), (1, 1), (1, 1),
                                         include)
        y = dev.empty(x.shape)
        dev.compile(desc).execute([dev.tensor(g)], [y])
        np.testing.assert_allclose(y.numpy(), tx.grad.numpy(), rtol=1e-6, atol=1e-6)
    x3 = rng.standard_normal((1, 2, 4, 5, 6)).astype(np.float32)
    tx = torch.tensor(x3, requires_grad=True)
    out = F.avg_pool3d(tx, 2, (1, 2, 2), padding=1, count_include_pad=False)
    g = rng.standard_normal(out.shape).astype(np.float32)
    out.backward(torch.tensor(g))
    y = dev.empty(x3.shape)
    dev.compile(gp.AveragePoolingGradDesc(TD(DT.FLOAT32, g.shape), TD(DT.FLOAT32, x3.shape), (1, 2, 2), (2, 2, 2),
                                          (1, 1, 1), (1, 1, 1), False)).execute([dev.tensor(g)], [y])
    np.testing.assert_allclose(y.numpy(), tx.grad.numpy(), rtol=1e-6, atol=1e-6)
    tx = torch.tensor(x, requires_grad=True)
    out = F.max_pool2d(tx, (3, 3), (2, 1), padding=(1, 1), dilation=(1, 2))
    g = rng.standard_normal(out.shape).astype(np.float32)
    out.backward(torch.tensor(g))
    y = dev.empty(x.shape)
    dev.compile(gp.MaxPoolingGradDesc(TD(DT.FLOAT32, x.shape), TD(DT.FLOAT32, g.shape), TD(DT.FLOAT32, x.shape),
                                      (2, 1), (3, 3), (1, 1), (1, 1), (1, 2))).execute([dev.tensor(x), dev.tensor(g)], [y])
    np.testing.assert_allclose(y.numpy(), tx.grad.numpy(), rtol=1e-6, atol=1e-6)


_Y, _G = TD(DT.FLOAT32, (1, 2, 5, 5)), TD(DT.FLOAT32, (1, 2, 2, 2))


def _avg(**over):
    d = {"input_gradient_tensor": _G, "output_gradient_tensor": _Y, "strides": (2, 2), "window_size": (3, 3),
         "start_padding": (0, 0), "end_padding": (0, 0), "include_padding": False}
    d.update(over)
    return gp.AveragePoolingGradDesc(**d)


def _max(**over):
    d = {"input_tensor": _Y, "input_gradient_tensor": _G, "output_gradient_tensor": _Y, "strides": (2, 2),
         "window_size": (3, 3), "start_padding": (0, 0), "end_padding": (0, 0), "dilations": (1, 1)}
    d.update(over)
    return gp.MaxPoolingGradDesc(**d)


@pytest.mark.parametrize("desc, error, field", [
    (_avg(input_gradient_tensor=TD(DT.FLOAT16, (1, 2, 2, 2))), kdml.InvalidArgumentError, "input_gradient_tensor.data_type"),
    (_avg(input_gradient_tensor=TD(DT.FLOAT32, (1, 2, 3, 2))), kdml.InvalidArgumentError, "input_gradient_tensor.sizes"),
    (_avg(input_gradient_tensor=TD(DT.FLOAT32, (1, 2, 1, 2, 2))), kdml.InvalidArgumentError, "input_gradient_tensor.sizes"),
    (_avg(strides=(2,)), kdml.InvalidArgumentError, "strides"),
    (_avg(window_size=(3, 0)), kdml.InvalidArgumentError, "window_size"),
    (_avg(start_padding=(0, -1)), kdml.InvalidArgumentError, "start_padding"),
    (_avg(output_gradient_tensor=TD(DT.FLOAT32, (1, 2, 5, 5), (50, 25, 5, 0))), kdml.InvalidArgumentError,
     "output_gradient_tensor"),
    (_avg(input_gradient_tensor=TD(DT.INT32, (1, 2, 2, 2)), output_gradient_tensor=TD(DT.INT32, (1, 2, 5, 5))),
     kdml.UnsupportedError, "input_gradient_tensor"),
    (_max(output_gradient_tensor=TD(DT.FLOAT32, (1, 2, 5, 6))), kdml.InvalidArgumentError, "output_gradient_tensor.sizes"),
    (_max(input_tensor=TD(DT.FLOAT16, (1, 2, 5, 5))), kdml.InvalidArgumentError, "input_tensor.data_type"),
    (_max(dilations=(1, 0)), kdml.InvalidArgumentError, "dilations"),
    (_max(dilations=(2, 2), input_gradient_tensor=_G), kdml.InvalidArgumentError, "input_gradient_tensor.sizes"),
    (_max(input_tensor=TD(DT.FLOAT32, (1, 2, 1, 5, 5)), input_gradient_tensor=TD(DT.FLOAT32, (1, 2, 1, 2, 2)),
          output_gradient_tensor=TD(DT.FLOAT32, (1, 2, 1, 5, 5))), kdml.UnsupportedError, "input_tensor"),
])
def test_refused(dev, desc, error, field):
    with pytest.raises(error, match=field.replace(".", r"\.")):
        dev.compile(desc)


def test_feature_level():
    for desc in (_avg(), _max()):
        with pytest.raises(kdml.UnsupportedError, match="3_0"):
            compile_at_level(kdml.FeatureLevel.FL_2_1, desc)
