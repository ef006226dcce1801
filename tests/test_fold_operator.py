"""FOLD (ops/fold.py, shaders/fold.comp; tests/test_fold.py is the constant folding): the page's three
examples; 1-D to 3-D folds with strides, dilations and asymmetric padding against an independent numpy reference (each output's float32
sum in ascending window position: its bits; and float64 within rounding), FLOAT32 and FLOAT16,
inputs of 3 dimensions or of the output's count with leading 1s, strided inputs and a strided
output poisoned first (every byte outside it unchanged); refused descriptors with the field they
name; the helper; ONNX Col2Im's node test cases wholly on the device."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from helpers import assert_outside_unchanged, compile_at_level, place, poison_against, random_strides, read_logical

import kompute_dml as kdml
from kompute_dml.ops import fold as fold_op

DT = kdml.DataType
TD = kdml.TensorDesc
NP = {DT.FLOAT32: np.float32, DT.FLOAT16: np.float16}


def reference(x, size, window, strides, dilations, start, end, npd):
    """(N, C, *size): each output element the float32 sum, in ascending window position, of the
    input values landing on it; and the float64 sum. x: (N, C x prod(window), BlockCount)."""
    n, rows, count = x.shape
    k = math.prod(window)
    c = rows // k
    blocks = [(s + p + q - d * (w - 1) - 1) // st + 1 for s, w, st, d, p, q in zip(size, window, strides, dilations, start, end)]
    assert math.prod(blocks) == count
    x32 = x.astype(np.float32)
    y32 = np.zeros((n, c, *size), np.float32)
    y64 = np.zeros((n, c, *size), np.float64)
    for o in itertools.product(*(range(s) for s in size)):
        for ki, kpos in enumerate(itertools.product(*(range(w) for w in window))):
            b = []
            for ax in range(len(size)):
                t = o[ax] + start[ax] - kpos[ax] * dilations[ax]
                if t < 0 or t % strides[ax] or t // strides[ax] >= blocks[ax]:
                    break
                b.append(t // strides[ax])
            else:
                blk = int(np.ravel_multi_index(b, blocks))
                for ci in range(c):
                    v = x32[:, ci * k + ki, blk]
                    y32[(slice(None), ci, *o)] = (y32[(slice(None), ci, *o)] + v).astype(np.float32)
                    y64[(slice(None), ci, *o)] += v.astype(np.float64)
    return y32.astype(npd), y64


# the page's examples: (input sizes, window, start padding, end padding, output sizes, output values)
EXAMPLES = [
    ((1, 9, 4), (0, 0), (0, 0), (1, 1, 4, 4),
     [[0, 5, 13, 9], [14, 38, 54, 32], [38, 86, 102, 56], [26, 57, 65, 35]]),
    ((1, 9, 8), (1, 0), (1, 0), (1, 1, 4, 4),
     [[26, 70, 102, 60], [78, 183, 231, 129], [84, 195, 243, 135], [82, 182, 214, 116]]),
    ((1, 18, 8), (1, 0), (1, 0), (1, 2, 4, 4),
     [[26, 70, 102, 60], [78, 183, 231, 129], [84, 195, 243, 135], [82, 182, 214, 116],
      [170, 358, 390, 204], [294, 615, 663, 345], [300, 627, 675, 351], [226, 470, 502, 260]]),
]


@pytest.mark.parametrize("case", range(len(EXAMPLES)))
def test_the_pages_examples(dev, case):
    shape, start, end, out_shape, want = EXAMPLES[case]
    x = np.arange(math.prod(shape), dtype=np.float32).reshape(shape)
    y = kdml.fold(x, out_shape[2:], (3, 3), start_padding=start, end_padding=end, device=dev).numpy()
    np.testing.assert_array_equal(y, np.array(want, np.float32).reshape(out_shape))


# (N, C, output size, window, strides, dilations, start padding, end padding)
CASES = [
    (2, 3, (11,), (3,), (2,), (1,), (1,), (0,)),  # 1-D, stride 2
    (1, 2, (5, 6), (2, 3), (1, 2), (2, 1), (0, 1), (1, 0)),  # asymmetric padding, dilation
    (2, 1, (7, 7), (4, 4), (4, 4), (1, 1), (1, 0), (0, 1)),  # non-overlapping patches (VOLO's fold)
    (1, 2, (4, 3, 5), (2, 2, 3), (1, 2, 1), (1, 1, 2), (0, 1, 1), (1, 0, 0)),  # 3-D
    (3, 4, (6, 6), (1, 1), (1, 1), (1, 1), (0, 0), (0, 0)),  # a 1 x 1 window: a reshape
]


@pytest.mark.parametrize("dt", [DT.FLOAT32, DT.FLOAT16], ids=lambda d: d.name)
@pytest.mark.parametrize("lead", [False, True], ids=["3d", "lead"])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_fold_against_numpy(dev, rng, case, lead, dt):
    n, c, size, window, strides, dilations, start, end = CASES[case]
    npd = NP[dt]
    k = math.prod(window)
    blocks = fold_op.blocks_per_dimension(size, window, strides, dilations, start, end)
    x = (rng.standard_normal((n, c * k, math.prod(blocks))) * 4).astype(npd)
    x.reshape(-1)[:3] = (-0.0, np.inf if case == 0 else 0.5, 1e-3)
    want, want64 = reference(x, size, window, strides, dilations, start, end, npd)
    out_shape = (n, c, *size)
    lead_n = len(out_shape) - 3 if lead else 0
    xs = random_strides(rng, x.shape, allow_broadcast=False)
    xd = TD(dt, (1,) * lead_n + x.shape, (0,) * lead_n + xs)
    tx, _ = place(dev, rng, xd, x.reshape(xd.sizes))
    yd = TD(dt, out_shape, random_strides(rng, out_shape, allow_broadcast=False))
    ty, _ = place(dev, rng, yd)
    before = poison_against(ty, want, rng)
    desc = fold_op.FoldDesc(xd, yd, window, strides, dilations, start, end)
    dev.compile(desc).execute([tx], [ty])
    got = read_logical(assert_outside_unchanged(ty, before), ty.offset, yd)
    assert got.dtype == npd and got.shape == want.shape
    np.testing.assert_array_equal(got.view(f"u{got.itemsize}"), want.view(f"u{want.itemsize}"))
    finite = np.isfinite(want64)
    tol = 1e-5 if dt == DT.FLOAT32 else 2e-3
    np.testing.assert_allclose(got[finite].astype(np.float64), want64[finite], rtol=tol, atol=tol)


def _desc(**over):
    f32 = DT.FLOAT32
    d = {"input_tensor": TD(f32, (1, 9, 4)), "output_tensor": TD(f32, (1, 1, 4, 4)), "window_sizes": (3, 3),
         "strides": (1, 1), "dilations": (1, 1), "start_padding": (0, 0), "end_padding": (0, 0)}
    d.update(over)
    return fold_op.FoldDesc(**d)


@pytest.mark.parametrize("over, error, field", [
    ({"output_tensor": TD(DT.FLOAT16, (1, 1, 4, 4))}, kdml.InvalidArgumentError, "output_tensor.data_type"),
    ({"strides": (1,)}, kdml.InvalidArgumentError, "strides"),
    ({"dilations": (1, 0)}, kdml.InvalidArgumentError, "dilations"),
    ({"start_padding": (0, -1)}, kdml.InvalidArgumentError, "start_padding"),
    ({"window_sizes": ()}, kdml.InvalidArgumentError, "window_sizes"),
    ({"window_sizes": (9, 1)}, kdml.InvalidArgumentError, "window_sizes"),  # longer than the output
    ({"input_tensor": TD(DT.FLOAT32, (1, 9, 5))}, kdml.InvalidArgumentError, "input_tensor.sizes"),
    ({"input_tensor": TD(DT.FLOAT32, (2, 1, 9, 4))}, kdml.InvalidArgumentError, "input_tensor.sizes"),
    ({"output_tensor": TD(DT.FLOAT32, (2, 1, 1, 4, 4))}, kdml.InvalidArgumentError, "output_tensor.sizes"),
    ({"input_tensor": TD(DT.INT32, (1, 9, 4)), "output_tensor": TD(DT.INT32, (1, 1, 4, 4))}, kdml.UnsupportedError,
     "input_tensor"),
    ({"input_tensor": TD(DT.FLOAT32, (1, 1, 9, 4, 1)), "output_tensor": TD(DT.FLOAT32, (1, 1, 4, 4, 1, 1)),
      "window_sizes": (3, 3, 1, 1), "strides": (1,) * 4, "dilations": (1,) * 4, "start_padding": (0,) * 4,
      "end_padding": (0,) * 4}, kdml.UnsupportedError, "window_sizes"),
    ({"output_tensor": TD(DT.FLOAT32, (1, 1, 4, 4), (16, 16, 0, 1))}, kdml.InvalidArgumentError, "output_tensor"),
])
def test_refused(dev, over, error, field):
    with pytest.raises(error, match=field.replace(".", r"\.")):
        dev.compile(_desc(**over))
    assert dev.compile(_desc()) is not None  # the device stays usable


def test_feature_level():
    with pytest.raises(kdml.UnsupportedError, match="6_4"):
        compile_at_level(kdml.FeatureLevel.FL_6_3, _desc())


def test_helper(dev, rng):
    x = rng.standard_normal((2, 12, 6)).astype(np.float32)  # C 3, window 2 x 2, blocks 2 x 3
    y = kdml.fold(x, (3, 4), (2, 2), strides=(1, 1), device=dev)
    assert y.shape == (2, 3, 3, 4)
    want, _ = reference(x, (3, 4), (2, 2), (1, 1), (1, 1), (0, 0), (0, 0), np.float32)
    np.testing.assert_array_equal(y.numpy(), want)
    out = dev.empty((2, 3, 3, 4))
    assert kdml.fold(x, (3, 4), (2, 2), out=out, device=dev) is out
    with pytest.raises(kdml.InvalidArgumentError, match="output_size"):
        kdml.fold(x, (3,), (2, 2), device=dev)


onnx = pytest.importorskip("onnx")
from onnx_node_cases import node_cases, run_on_device  # noqa: E402

COL2IM, COL2IM_NAMES = node_cases(r"^test_col2im.*_cpu$", __name__)


@pytest.mark.parametrize("name", COL2IM_NAMES)
def test_onnx_col2im_node_cases_on_the_device(name):
    (rep,) = run_on_device(COL2IM, name)
    assert "FOLD" in rep.summary()
