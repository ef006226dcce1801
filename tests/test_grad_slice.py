"""SLICE_GRAD (ops/grad_slice.py: a fill of zeros, then SLICE1's strided copy): the page's example;
random windows with positive and negative strides and gradients shorter than the window, over the
table's types, against a numpy reference (the output zero except SLICE1's window, which holds the
gradient's bits), strided views at random offsets, a strided output poisoned first (every byte outside
it unchanged); SLICE1 then SLICE_GRAD round trips; torch's slicing gradient; refused descriptors and
the feature level."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_output, compile_at_level, place, poison_against, random_strides, random_values

import kompute_dml as kdml
from kompute_dml.ops import grad_slice as gs

DT = kdml.DataType
TD = kdml.TensorDesc


def reference(g, shape, offsets, sizes, strides):
    """numpy's view of the forward window, written into zeros."""
    y = np.zeros(shape, g.dtype)
    idx = []
    for o, s, st, m in zip(offsets, sizes, strides, g.shape):
        first = o if st > 0 else o + s - 1
        idx.append(first + st * np.arange(m))
    y[np.ix_(*idx)] = g
    return y


def test_the_pages_example(dev):
    g = np.array([[1, 3], [9, 11]], np.float32)  # a, c / i, k of the 4 x 4 input
    got = kdml.slice_grad(g, (4, 4), (0, 0), (4, 4), (2, 2), device=dev).numpy()
    np.testing.assert_array_equal(got, [[1, 0, 3, 0], [0, 0, 0, 0], [9, 0, 11, 0], [0, 0, 0, 0]])


# (output shape, offsets, sizes, strides, gradient shape)
CASES = [
    ((5, 6), (1, 0), (4, 6), (2, -3), (2, 2)),
    ((3, 4, 7), (0, 1, 2), (3, 3, 5), (-1, 1, 2), (3, 3, 3)),
    ((2, 3, 4, 5), (1, 0, 1, 0), (1, 3, 3, 5), (1, -2, 1, -1), (1, 2, 2, 4)),  # a shorter gradient on the last axis
]


@pytest.mark.parametrize("dt", [DT.FLOAT32, DT.FLOAT16, DT.INT8, DT.UINT16, DT.INT32], ids=lambda d: d.name)
@pytest.mark.parametrize("case", range(len(CASES)))
def test_against_numpy(dev, rng, case, dt):
    shape, offsets, sizes, strides, gshape = CASES[case]
    g = random_values(rng, dt, gshape)
    want = reference(g, shape, offsets, sizes, strides)
    gd = TD(dt, gshape, random_strides(rng, gshape, allow_broadcast=False))
    tg, _ = place(dev, rng, gd, g)
    yd = TD(dt, shape, random_strides(rng, shape, allow_broadcast=False))
    ty, _ = place(dev, rng, yd)
    before = poison_against(ty, want, rng)
    dev.compile(gs.SliceGradDesc(gd, yd, offsets, sizes, strides)).execute([tg], [ty])
    assert_output(ty, before, want)


def test_round_trip_with_slice1(dev, rng):
    x = rng.standard_normal((6, 7)).astype(np.float32)
    window = ((1, 2), (5, 4), (-2, 3))
    s = kdml.slice1(x, *window, device=dev)
    back = kdml.slice_grad(s, x.shape, *window, device=dev).numpy()
    keep = back != 0
    np.testing.assert_array_equal(back[keep], x[keep])
    assert keep.sum() == s.numpy().size


def test_against_torch(dev, rng):
    torch = pytest.importorskip("torch")
    x = torch.zeros((5, 8), requires_grad=True)
    y = x.flip(1)[1:5:2, 1:5:3]  # rows 1, 3; columns 6, 3 (SLICE1: offsets (1, 1), sizes (4, 6), strides (2, -3))
    g = rng.standard_normal(tuple(y.shape)).astype(np.float32)
    y.backward(torch.tensor(g))
    got = kdml.slice_grad(g, (5, 8), (1, 1), (4, 6), (2, -3), device=dev).numpy()
    np.testing.assert_array_equal(got, x.grad.numpy())


_G, _Y = TD(DT.FLOAT32, (2, 2)), TD(DT.FLOAT32, (4, 4))


@pytest.mark.parametrize("desc, error, field", [
    (gs.SliceGradDesc(_G, _Y, (0, 0), (4, 4), (2, 0)), kdml.InvalidArgumentError, "input_window_strides"),
    (gs.SliceGradDesc(_G, _Y, (0,), (4,), (2,)), kdml.InvalidArgumentError, "input_window_offsets"),
    (gs.SliceGradDesc(_G, _Y, (1, 0), (4, 4), (2, 2)), kdml.InvalidArgumentError, "input_window_offsets"),
    (gs.SliceGradDesc(_G, _Y, (-1, 0), (4, 4), (2, 2)), kdml.InvalidArgumentError, "input_window_offsets"),
    (gs.SliceGradDesc(_G, _Y, (0, 0), (0, 4), (2, 2)), kdml.InvalidArgumentError, "input_window_sizes"),
    (gs.SliceGradDesc(_G, _Y, (0, 0), (4, 4), (4, 2)), kdml.InvalidArgumentError, "input_window_sizes"),  # reach 1
    (gs.SliceGradDesc(TD(DT.FLOAT16, (2, 2)), _Y, (0, 0), (4, 4), (2, 2)), kdml.InvalidArgumentError,
     "input_gradient_tensor.data_type"),
    (gs.SliceGradDesc(TD(DT.FLOAT32, (1, 2, 2)), _Y, (0, 0), (4, 4), (2, 2)), kdml.InvalidArgumentError,
     "input_gradient_tensor.sizes"),
    (gs.SliceGradDesc(_G, TD(DT.FLOAT32, (4, 4), (0, 1)), (0, 0), (4, 4), (2, 2)), kdml.InvalidArgumentError,
     "output_gradient_tensor"),
    (gs.SliceGradDesc(TD(DT.INT64, (2, 2)), TD(DT.INT64, (4, 4)), (0, 0), (4, 4), (2, 2)), kdml.UnsupportedError,
     "input_gradient_tensor"),
])
def test_refused(dev, desc, error, field):
    with pytest.raises(error, match=field.replace(".", r"\.")):
        dev.compile(desc)


def test_feature_level():
    with pytest.raises(kdml.UnsupportedError, match="3_0"):
        compile_at_level(kdml.FeatureLevel.FL_2_1, gs.SliceGradDesc(TD(DT.FLOAT32, (1, 1, 2, 2)), TD(DT.FLOAT32, (1, 1, 4, 4)),
                                                                    (0, 0, 0, 0), (1, 1, 4, 4), (1, 1, 2, 2)))


@pytest.mark.parametrize("fixture", ["dev_shader", "dev_transfer"])
def test_copy_paths(request, rng, fixture):
    """The fill's dispatch, then the window's copy as a shader or a transfer command."""
    d = request.getfixturevalue(fixture)
    shape, offsets, sizes, strides, gshape = (4, 64), (1, 0), (3, 64), (2, 1), (2, 64)
    g = random_values(rng, DT.FLOAT32, gshape)
    got = kdml.slice_grad(g, shape, offsets, sizes, strides, device=d).numpy()
    np.testing.assert_array_equal(got.view(np.uint32), reference(g, shape, offsets, sizes, strides).view(np.uint32))
