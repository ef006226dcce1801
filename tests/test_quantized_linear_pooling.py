"""QUANTIZED_LINEAR_AVERAGE_POOLING (ops/quantized_linear_pooling.py, shaders/quantized_linear_pooling.comp):
against an independent numpy reference of the page's arithmetic (each window's exact integer sum of
X - XZeroPoint, dequantized, averaged and requantized in float32, each step correctly rounded, round half
to even, saturation), bit for bit, and the exact rational value within one step; INT8 / UINT8 inputs
and outputs in every combination, 4-D and 5-D, strides, dilations, asymmetric padding, IncludePadding
on and off (windows wholly in the padding: 0 / 0 gives Min), per-tensor and per-channel scales and zero
points (present or absent, at their type's ends), subnormal scales, strided inputs at offsets, strided
outputs poisoned first (every byte outside them unchanged); refused descriptors with the field they
name; the feature level; the helper."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from helpers import assert_output, compile_at_level, place, poison_against, random_strides, read_logical

import kompute_dml as kdml
from kompute_dml.ops import quantized_linear_pooling as qlp

DT = kdml.DataType
TD = kdml.TensorDesc
F = np.float32
LIMITS = {DT.INT8: (-128, 127), DT.UINT8: (0, 255)}


def reference(x, xs, xz, ys, yz, window, strides, dil, start, end, include, lo, hi):
    """(float32 steps as the page's, exact quotient in float64) for x (N, C, *spatial); xs, xz, ys, yz per channel."""
    n, c, *size = x.shape
    outs = [(s + p + q - d * (w - 1) - 1) // st + 1 for s, w, st, d, p, q in zip(size, window, strides, dil, start, end)]
    got = np.zeros((n, c, *outs), F)
    ex = np.zeros((n, c, *outs), np.float64)
    for o in itertools.product(*(range(v) for v in outs)):
        taps = []
        for k in itertools.product(*(range(w) for w in window)):
            pos = [o[a] * strides[a] - start[a] + k[a] * dil[a] for a in range(len(size))]
            if all(0 <= p < s for p, s in zip(pos, size)):
                taps.append(pos)
        count = math.prod(window) if include else len(taps)
        for ni, ci in itertools.product(range(n), range(c)):
            s_ = sum(int(x[(ni, ci, *p)]) - int(xz[ci]) for p in taps)
            with np.errstate(all="ignore"):
                q = F(F(F(s_) * F(xs[ci])) / F(count)) / F(ys[ci])
                got[(ni, ci, *o)] = F(lo) if np.isnan(q) else np.clip(np.rint(q) + F(yz[ci]), lo, hi)
                ex[(ni, ci, *o)] = np.float64(s_) * np.float64(xs[ci]) / (np.float64(count) * np.float64(ys[ci]))
    return got, ex


# (N, C, input spatial sizes, window, strides, dilations, start, end)
CASES = [
    (2, 3, (6, 7), (3, 2), (2, 1), (1, 1), (1, 0), (1, 1)),
    (1, 4, (5, 5), (3, 3), (1, 1), (2, 2), (2, 2), (2, 2)),  # dilated, padded: corners mostly padding
    (1, 2, (3, 4, 5), (2, 2, 3), (1, 2, 1), (1, 1, 2), (0, 1, 1), (1, 0, 0)),  # 5-D
    (2, 2, (4, 4), (2, 2), (3, 3), (1, 1), (3, 0), (0, 0)),  # the first rows' windows wholly in the padding
    (1, 3, (8, 9), (8, 9), (1, 1), (1, 1), (0, 0), (0, 0)),  # global
]


def _q(dev, rng, vals, dt, per_channel, rank, c):
    """A scale / zero point: per tensor (all sizes 1, a random rank) or per channel ({1, C, 1...})."""
    if per_channel:
        sizes = (1, c) + (1,) * (rank - 2)
        d = TD(dt, sizes, random_strides(rng, sizes, allow_broadcast=False))
        return place(dev, rng, d, np.asarray(vals, dt.numpy_dtype).reshape(sizes))[0]
    r = int(rng.integers(1, 6))
    return place(dev, rng, TD(dt, (1,) * r), np.asarray(vals[:1], dt.numpy_dtype).reshape((1,) * r))[0]


@pytest.mark.parametrize("types", list(itertools.product(LIMITS, LIMITS)), ids=lambda t: f"{t[0].name}_{t[1].name}")
@pytest.mark.parametrize("case", range(len(CASES)))
def test_against_numpy(dev, rng, case, types):
    xt, yt = types
    n, c, size, window, strides, dil, start, end = CASES[case]
    include = bool(rng.integers(0, 2)) if case != 3 else False
    per = bool(rng.integers(0, 2))
    zps = [bool(v) for v in rng.integers(0, 2, 2)]
    shape = (n, c, *size)
    x = rng.integers(*LIMITS[xt], shape, endpoint=True).astype(xt.numpy_dtype)
    xd = TD(xt, shape, random_strides(rng, shape, allow_broadcast=True))
    tx, raw = place(dev, rng, xd, x)
    x = read_logical(raw, tx.offset, xd)  # (a broadcast dimension: the values the device reads)
    k = c if per else 1
    xs = rng.uniform(0.001, 0.2, k).astype(F)
    ys = rng.uniform(0.001, 0.2, k).astype(F)
    xz = rng.integers(*LIMITS[xt], k, endpoint=True)
    yz = rng.integers(*LIMITS[yt], k, endpoint=True)
    xz[0], yz[-1] = LIMITS[xt][int(rng.integers(0, 2))], LIMITS[yt][int(rng.integers(0, 2))]  # the types' ends
    rank = len(shape)
    tensors = [tx, _q(dev, rng, xs, DT.FLOAT32, per, rank, c), _q(dev, rng, xz, xt, per, rank, c) if zps[0] else None,
               _q(dev, rng, ys, DT.FLOAT32, per, rank, c), _q(dev, rng, yz, yt, per, rank, c) if zps[1] else None]
    def chan(v, on=True):  # per channel (absent: 0)
        return np.broadcast_to(v if on else np.zeros_like(v), c)

    want, ex = reference(x, chan(xs), chan(xz, zps[0]), chan(ys), chan(yz, zps[1]), window, strides, dil, start, end,
                         include, *LIMITS[yt])
    want = want.astype(yt.numpy_dtype)
    yd = TD(yt, want.shape, random_strides(rng, want.shape, allow_broadcast=False))
    ty, _ = place(dev, rng, yd)
    before = poison_against(ty, want, rng)
    desc = qlp.QuantizedLinearAveragePoolingDesc(*(t.desc if t is not None else None for t in tensors), yd, strides, window,
                                                 start, end, dil, include)
    dev.compile(desc).execute(tensors, [ty])
    assert_output(ty, before, want)
    lo, hi = LIMITS[yt]
    yzc = chan(yz, zps[1]).reshape((1, c) + (1,) * (rank - 2))
    exact = np.clip(np.rint(ex) + yzc, lo, hi)
    fin = np.isfinite(ex)
    assert np.all(np.abs(want[fin].astype(np.float64) - exact[fin]) <= 1)
    if case == 3:
        assert np.all(want[:, :, 0] == lo)  # 0 / 0: Min


@pytest.mark.parametrize("scales", [(F(1e-40), F(3e-41)), (F(0.5), F(0.0)), (F(2.0), F(0.25))])
def test_edge_scales_and_saturation(dev, rng, scales):
    x = np.array([0, 255, 128, 127, 1, 254, 200, 3, 0, 0, 255, 255, 9, 99, 199, 100], np.uint8).reshape(1, 1, 4, 4)
    xs, ys = scales
    for yt in LIMITS:
        want, _ = reference(x, [xs], [128], [ys], [LIMITS[yt][0] + 1], (2, 2), (1, 1), (1, 1), (1, 0), (0, 1), True, *LIMITS[yt])
        y = kdml.quantized_linear_avg_pool(x, xs, ys, np.uint8(128), np.array([LIMITS[yt][0] + 1], yt.numpy_dtype),
                                           window_size=(2, 2), start_padding=(1, 0), end_padding=(0, 1),
                                           include_padding=True, device=dev).numpy()
        np.testing.assert_array_equal(y, want.astype(yt.numpy_dtype))


def _desc(**over):
    s, u = TD(DT.FLOAT32, (1, 1, 1, 1)), TD(DT.UINT8, (1, 1, 1, 1))
    d = {"input_tensor": TD(DT.UINT8, (1, 2, 5, 5)), "input_scale_tensor": s, "input_zero_point_tensor": u,
         "output_scale_tensor": s, "output_zero_point_tensor": u, "output_tensor": TD(DT.UINT8, (1, 2, 4, 4)),
         "strides": (1, 1), "window_size": (2, 2), "start_padding": (0, 0), "end_padding": (0, 0), "dilations": (1, 1)}
    d.update(over)
    return qlp.QuantizedLinearAveragePoolingDesc(**d)


@pytest.mark.parametrize("over, error, field", [
    ({"input_zero_point_tensor": TD(DT.INT8, (1, 1, 1, 1))}, kdml.InvalidArgumentError, "input_zero_point_tensor.data_type"),
    ({"output_zero_point_tensor": TD(DT.INT8, (1, 1, 1, 1))}, kdml.InvalidArgumentError, "output_zero_point_tensor.data_type"),
    ({"output_tensor": TD(DT.UINT8, (1, 2, 1, 4, 4))}, kdml.InvalidArgumentError, "output_tensor.sizes"),
    ({"output_tensor": TD(DT.UINT8, (1, 2, 3, 4))}, kdml.InvalidArgumentError, "output_tensor.sizes"),
    ({"window_size": (2,)}, kdml.InvalidArgumentError, "window_size"),
    ({"window_size": (0, 2)}, kdml.InvalidArgumentError, "window_size"),
    ({"strides": (1, 0)}, kdml.InvalidArgumentError, "strides"),
    ({"dilations": (0, 1)}, kdml.InvalidArgumentError, "dilations"),
    ({"start_padding": (-1, 0)}, kdml.InvalidArgumentError, "start_padding"),
    ({"dilations": (2, 1)}, kdml.InvalidArgumentError, "output_tensor.sizes"),  # the dilated window: 3 rows
    ({"input_scale_tensor": TD(DT.FLOAT32, (1, 3, 1, 1))}, kdml.InvalidArgumentError, "input_scale_tensor.sizes"),
    ({"output_scale_tensor": TD(DT.FLOAT32, (2, 1, 1, 1))}, kdml.InvalidArgumentError, "output_scale_tensor.sizes"),
    ({"output_zero_point_tensor": TD(DT.UINT8, (1, 1, 2, 1))}, kdml.InvalidArgumentError, "output_zero_point_tensor.sizes"),
    ({"input_tensor": TD(DT.FLOAT32, (1, 2, 5, 5)), "input_zero_point_tensor": None}, kdml.UnsupportedError, "input_tensor"),
    ({"input_tensor": TD(DT.UINT8, (2, 5, 5)), "output_tensor": TD(DT.UINT8, (2, 4, 4))}, kdml.UnsupportedError,
     "input_tensor"),
    ({"input_tensor": TD(DT.UINT8, (1, 1, 300, 300)), "output_tensor": TD(DT.UINT8, (1, 1, 1, 1)),
      "window_size": (300, 300)}, kdml.UnsupportedError, "window_size"),
    ({"output_tensor": TD(DT.UINT8, (1, 2, 4, 4), (32, 16, 0, 1))}, kdml.InvalidArgumentError, "output_tensor"),
])
def test_refused(dev, over, error, field):
    with pytest.raises(error, match=field.replace(".", r"\.")):
        dev.compile(_desc(**over))
    assert dev.compile(_desc()) is not None


def test_feature_level():
    with pytest.raises(kdml.UnsupportedError, match="6_2"):
        compile_at_level(kdml.FeatureLevel.FL_6_1, _desc())


def test_helper_and_the_composition(dev, rng):
    """Per-channel helper call; the dequantize / average pooling / quantize composition within one step."""
    x = rng.integers(-128, 128, (2, 3, 5, 6), dtype=np.int8)
    xs, ys = np.array([0.02, 0.05, 0.1], F), np.array([0.03, 0.01, 0.2], F)
    xz, yz = np.array([-3, 0, 127], np.int8), np.array([5, -128, 0], np.int8)
    y = kdml.quantized_linear_avg_pool(x, xs, ys, xz, yz, window_size=(2, 3), strides=(1, 2), start_padding=(1, 1),
                                       end_padding=(0, 1), device=dev).numpy()
    want, _ = reference(x, xs, xz, ys, yz, (2, 3), (1, 2), (1, 1), (1, 1), (0, 1), False, -128, 127)
    np.testing.assert_array_equal(y, want.astype(np.int8))
    dq = (x.astype(F) - xz.reshape(1, 3, 1, 1).astype(F)) * xs.reshape(1, 3, 1, 1)
    torch = pytest.importorskip("torch")  # (the composition's check: the operator's bits are checked above)
    pooled = torch.nn.functional.avg_pool2d(torch.from_numpy(np.pad(dq, ((0, 0), (0, 0), (1, 0), (1, 1)))), (2, 3), (1, 2))
    ones = torch.nn.functional.avg_pool2d(torch.from_numpy(np.pad(np.ones_like(dq), ((0, 0), (0, 0), (1, 0), (1, 1)))), (2, 3),
                                          (1, 2))
    comp = np.clip(np.rint(pooled.numpy() / ones.numpy() / ys.reshape(1, 3, 1, 1)) + yz.reshape(1, 3, 1, 1), -128, 127)
    assert np.all(np.abs(comp - y.astype(np.float64)) <= 1)
    out = dev.empty((2, 3, 4, 4), np.uint8)  # the output's type from `out`
    assert kdml.quantized_linear_avg_pool(x, 0.05, 0.04, window_size=(2, 3), out=out, device=dev) is out
    want, _ = reference(x, [0.05] * 3, [0] * 3, [0.04] * 3, [0] * 3, (2, 3), (1, 1), (1, 1), (0, 0), (0, 0), False, 0, 255)
    np.testing.assert_array_equal(out.numpy(), want.astype(np.uint8))
    with pytest.raises(kdml.InvalidArgumentError, match="x_scale"):
        kdml.quantized_linear_avg_pool(x, [0.1, 0.2], 0.05, window_size=(2, 2), device=dev)
