"""UNFOLD (ops/unfold.py, shaders/unfold.comp): the page's two examples exactly; 1-D to 3-D unfolds
with strides, dilations and asymmetric padding against an independent numpy reference (each output
element the input element its window position and block reach, 0 in the padding: its bits) and
against torch.nn.functional.unfold (2-D); every type of 8, 16 and 32 bits, inputs of the output's
count or more dimensions (leading 1s), strided (and broadcast) inputs at offsets, strided outputs
poisoned first (every byte outside them unchanged); FOLD(UNFOLD(x)) = x times each element's window
count (and = x for non-overlapping windows); refused descriptors with the field they name; the helper."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from helpers import assert_output, compile_at_level, place, poison_against, random_strides, random_values, read_logical

import kompute_dml as kdml
from kompute_dml.ops import unfold as unfold_op
from kompute_dml.ops.fold import blocks_per_dimension

DT = kdml.DataType
TD = kdml.TensorDesc


def reference(x, window, strides, dilations, start, end):
    """(N, C x prod(window), BlockCount) from x (N, C, *spatial), numpy indexing only."""
    n, c, *size = x.shape
    k = math.prod(window)
    blocks = [(s + p + q - d * (w - 1) - 1) // st + 1 for s, w, st, d, p, q in zip(size, window, strides, dilations, start, end)]
    y = np.zeros((n, c * k, math.prod(blocks)), x.dtype)
    for bi, b in enumerate(itertools.product(*(range(v) for v in blocks))):
        for ki, kp in enumerate(itertools.product(*(range(w) for w in window))):
            pos = [b[a] * strides[a] - start[a] + kp[a] * dilations[a] for a in range(len(size))]
            if all(0 <= p < s for p, s in zip(pos, size)):
                y[:, np.arange(c) * k + ki, bi] = x[(slice(None), slice(None), *pos)]
    return y


def test_the_pages_examples(dev):
    x = np.arange(25, dtype=np.float32).reshape(1, 1, 5, 5)
    y1 = kdml.unfold(x, (3, 3), device=dev).numpy()
    want1 = np.array([[r * 5 + cc + dr * 5 + dc for r in range(3) for cc in range(3)] for dr in range(3) for dc in range(3)],
                     np.float32)
    assert y1.shape == (1, 9, 9)
    np.testing.assert_array_equal(y1[0], want1)
    np.testing.assert_array_equal(y1[0, 0], [0, 1, 2, 5, 6, 7, 10, 11, 12])  # the page's first row
    y2 = kdml.unfold(x, (3, 3), start_padding=(1, 0), end_padding=(1, 0), device=dev).numpy()
    assert y2.shape == (1, 9, 15)
    np.testing.assert_array_equal(y2[0, 0], [0, 0, 0, 0, 1, 2, 5, 6, 7, 10, 11, 12, 15, 16, 17])
    np.testing.assert_array_equal(y2[0, 3], [0, 1, 2, 5, 6, 7, 10, 11, 12, 15, 16, 17, 20, 21, 22])
    np.testing.assert_array_equal(y2[0, 8], [7, 8, 9, 12, 13, 14, 17, 18, 19, 22, 23, 24, 0, 0, 0])
    np.testing.assert_array_equal(y2, reference(x, (3, 3), (1, 1), (1, 1), (1, 0), (1, 0)))


# (N, C, input size, window, strides, dilations, start padding, end padding)
CASES = [
    (2, 3, (11,), (3,), (2,), (1,), (1,), (0,)),  # 1-D, stride 2
    (1, 2, (5, 6), (2, 3), (1, 2), (2, 1), (0, 1), (1, 0)),  # asymmetric padding, dilation
    (2, 1, (8, 8), (4, 4), (4, 4), (1, 1), (0, 0), (0, 0)),  # non-overlapping patches
    (1, 2, (4, 3, 5), (2, 2, 3), (1, 2, 1), (1, 1, 2), (0, 1, 1), (1, 0, 0)),  # 3-D
    (3, 4, (6, 6), (1, 1), (1, 1), (1, 1), (0, 0), (0, 0)),  # a 1 x 1 window: a reshape
    (1, 1, (3, 3), (2, 2), (3, 3), (3, 3), (2, 2), (2, 2)),  # blocks wholly in the padding
]
TYPES = [DT.FLOAT32, DT.FLOAT16, DT.INT32, DT.UINT32, DT.INT16, DT.UINT16, DT.INT8, DT.UINT8]


@pytest.mark.parametrize("dt", TYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("case", range(len(CASES)))
def test_unfold_against_numpy(dev, rng, case, dt):
    n, c, size, window, strides, dilations, start, end = CASES[case]
    x = random_values(rng, dt, (n, c, *size))
    lead = int(rng.integers(0, 2))  # the input's dimensions past N, C and the spatial ones: leading 1s
    xd = TD(dt, (1,) * lead + x.shape, (0,) * lead + random_strides(rng, x.shape, allow_broadcast=True))
    tx, raw = place(dev, rng, xd, x.reshape(xd.sizes))
    x = read_logical(raw, tx.offset, xd).reshape(x.shape)  # (a broadcast dimension: the values the device reads)
    want = reference(x, window, strides, dilations, start, end)
    ylead = xd.dimension_count - 3 if rng.random() < 0.5 else 0  # 3-D, or the input's count
    yd = TD(dt, (1,) * ylead + want.shape, (0,) * ylead + random_strides(rng, want.shape, allow_broadcast=False))
    ty, _ = place(dev, rng, yd)
    before = poison_against(ty, want.reshape(yd.sizes), rng)
    dev.compile(unfold_op.UnfoldDesc(xd, yd, window, strides, dilations, start, end)).execute([tx], [ty])
    assert_output(ty, before, want.reshape(yd.sizes))


@pytest.mark.parametrize("case", [0, 1, 2, 3, 5])
def test_fold_of_unfold(dev, rng, case):
    """FOLD(UNFOLD(x)) = x times the number of windows covering each element (its UNFOLD of ones),
    exact for small integers in float32; x itself for non-overlapping windows covering everything."""
    n, c, size, window, strides, dilations, start, end = CASES[case]
    x = rng.integers(-8, 9, (n, c, *size)).astype(np.float32)
    args = {"strides": strides, "dilations": dilations, "start_padding": start, "end_padding": end}
    cols = kdml.unfold(x, window, device=dev, **args)
    back = kdml.fold(cols, size, window, device=dev, **args).numpy()
    ones = kdml.unfold(np.ones_like(x), window, device=dev, **args)
    counts = kdml.fold(ones, size, window, device=dev, **args).numpy()
    np.testing.assert_array_equal(back, x * counts)
    if case == 2:
        np.testing.assert_array_equal(back, x)


@pytest.mark.parametrize("case", [2, 4, 5])  # (torch pads both ends alike: test_against_torch_asymmetric)
def test_against_torch(dev, rng, case):
    torch = pytest.importorskip("torch")
    n, c, size, window, strides, dilations, start, end = CASES[case]
    x = rng.standard_normal((n, c, *size)).astype(np.float32)
    want = torch.nn.functional.unfold(torch.from_numpy(x), window, dilation=dilations, padding=start, stride=strides).numpy()
    got = kdml.unfold(x, window, strides=strides, dilations=dilations, start_padding=start, end_padding=end, device=dev)
    np.testing.assert_array_equal(got.numpy(), want)


def test_against_torch_asymmetric(dev, rng):
    torch = pytest.importorskip("torch")
    x = rng.standard_normal((2, 3, 7, 6)).astype(np.float32)
    xp = np.pad(x, ((0, 0), (0, 0), (2, 0), (1, 3)))  # torch on the input padded on the host
    want = torch.nn.functional.unfold(torch.from_numpy(xp), (3, 2), dilation=(2, 1), stride=(1, 3)).numpy()
    got = kdml.unfold(x, (3, 2), strides=(1, 3), dilations=(2, 1), start_padding=(2, 1), end_padding=(0, 3), device=dev)
    np.testing.assert_array_equal(got.numpy(), want)


def _desc(**over):
    f32 = DT.FLOAT32
    d = {"input_tensor": TD(f32, (1, 1, 5, 5)), "output_tensor": TD(f32, (1, 9, 9)), "window_sizes": (3, 3),
         "strides": (1, 1), "dilations": (1, 1), "start_padding": (0, 0), "end_padding": (0, 0)}
    d.update(over)
    return unfold_op.UnfoldDesc(**d)


@pytest.mark.parametrize("over, error, field", [
    ({"output_tensor": TD(DT.FLOAT16, (1, 9, 9))}, kdml.InvalidArgumentError, "output_tensor.data_type"),
    ({"strides": (1,)}, kdml.InvalidArgumentError, "strides"),
    ({"strides": (0, 1)}, kdml.InvalidArgumentError, "strides"),
    ({"dilations": (1, 0)}, kdml.InvalidArgumentError, "dilations"),
    ({"end_padding": (0, -1)}, kdml.InvalidArgumentError, "end_padding"),
    ({"window_sizes": ()}, kdml.InvalidArgumentError, "window_sizes"),
    ({"window_sizes": (6, 1)}, kdml.InvalidArgumentError, "window_sizes"),  # longer than the input
    ({"output_tensor": TD(DT.FLOAT32, (1, 9, 8))}, kdml.InvalidArgumentError, "output_tensor.sizes"),
    ({"output_tensor": TD(DT.FLOAT32, (2, 1, 9, 9))}, kdml.InvalidArgumentError, "output_tensor.sizes"),
    ({"output_tensor": TD(DT.FLOAT32, (1, 1, 1, 9, 9))}, kdml.InvalidArgumentError, "output_tensor.sizes"),
    ({"input_tensor": TD(DT.FLOAT32, (2, 1, 1, 5, 5))}, kdml.InvalidArgumentError, "input_tensor.sizes"),
    ({"input_tensor": TD(DT.INT64, (1, 1, 5, 5)), "output_tensor": TD(DT.INT64, (1, 9, 9))}, kdml.UnsupportedError,
     "input_tensor"),
    ({"input_tensor": TD(DT.FLOAT32, (1, 1, 5, 5, 1, 1)), "output_tensor": TD(DT.FLOAT32, (1, 9, 9)),
      "window_sizes": (3, 3, 1, 1), "strides": (1,) * 4, "dilations": (1,) * 4, "start_padding": (0,) * 4,
      "end_padding": (0,) * 4}, kdml.UnsupportedError, "window_sizes"),
    ({"output_tensor": TD(DT.FLOAT32, (1, 9, 9), (81, 0, 1))}, kdml.InvalidArgumentError, "output_tensor"),
])
def test_refused(dev, over, error, field):
    with pytest.raises(error, match=field.replace(".", r"\.")):
        dev.compile(_desc(**over))
    assert dev.compile(_desc()) is not None  # the device stays usable


def test_feature_level():
    with pytest.raises(kdml.UnsupportedError, match="6_4"):
        compile_at_level(kdml.FeatureLevel.FL_6_3, _desc())


def test_helper(dev, rng):
    x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    y = kdml.unfold(x, (2, 2), device=dev)
    assert y.shape == (2, 12, 12)
    np.testing.assert_array_equal(y.numpy(), reference(x, (2, 2), (1, 1), (1, 1), (0, 0), (0, 0)))
    out = dev.empty((2, 12, 12))
    assert kdml.unfold(x, (2, 2), out=out, device=dev) is out
    np.testing.assert_array_equal(out.numpy(), y.numpy())
    assert blocks_per_dimension((4, 5), (2, 2), (1, 1), (1, 1), (0, 0), (0, 0)) == (3, 4)
    with pytest.raises(kdml.InvalidArgumentError, match="x"):
        kdml.unfold(x, (2,), device=dev)
