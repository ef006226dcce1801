"""MAX_POOLING, MAX_POOLING1, MAX_POOLING2's INT8 / UINT8 rows and AVERAGE_POOLING1 (ops/pooling.py,
shaders/pooling.comp) against an independent numpy reference (each window's taps visited in
row-major order in Python): strides, dilations, asymmetric padding, 2-D and 3-D; strided inputs at
random offsets, strided outputs poisoned first and every byte outside them unchanged; maxima and
UINT32 indices exact, averages within (K + 1) u S / divisor + u |y|; the levels that bring them."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest
from helpers import assert_output, assert_outside_unchanged, compile_at_level, place, poison_against, random_strides, read_logical

import kompute_dml as kdml

DT = kdml.DataType
TD = kdml.TensorDesc
FL = kdml.FeatureLevel
U = 2.0 ** -24


def reference(x, window, strides, dilations, start, end, fn, include=False):
    """(result float64, index of the max as a packed flat input index / S = sum |x| of the taps,
    divisor)."""
    x64 = x.astype(np.float64)
    n = x.ndim - 2
    sp = x.shape[2:]
    out = [(sp[a] + start[a] + end[a] - ((window[a] - 1) * dilations[a] + 1)) // strides[a] + 1 for a in range(n)]
    y = np.zeros((*x.shape[:2], *out))
    aux = np.zeros(y.shape, np.int64 if fn == "max" else np.float64)
    div = np.zeros(y.shape)
    for b, c in itertools.product(range(x.shape[0]), range(x.shape[1])):
        for o in itertools.product(*(range(k) for k in out)):
            best, best_i, total, sabs, count = None, 0, 0.0, 0.0, 0
            for k in itertools.product(*(range(w) for w in window)):
                pos = tuple(o[a] * strides[a] - start[a] + k[a] * dilations[a] for a in range(n))
                if not all(0 <= pos[a] < sp[a] for a in range(n)):
                    continue
                v = x64[(b, c, *pos)]
                count += 1
                total += v
                sabs += abs(v)
                if best is None or (not np.isnan(best) and (np.isnan(v) or v > best)):
                    best = v
                    best_i = int(np.ravel_multi_index((b, c, *pos), x.shape))
            at = (b, c, *o)
            if fn == "max":
                y[at], aux[at] = best, best_i
            else:
                d = int(np.prod(window)) if include else count
                y[at], aux[at], div[at] = total / d, sabs, d
    return y, aux, div


CASES = [  # x sizes, window, strides, dilations, start, end
    ((1, 4, 9, 9), (3, 3), (2, 2), (1, 1), (1, 1), (1, 1)),  # ResNet's stem pool
    ((1, 2, 7, 6), (3, 2), (1, 2), (1, 1), (0, 1), (2, 0)),  # asymmetric
    ((1, 2, 9, 9), (2, 3), (2, 1), (2, 2), (1, 0), (0, 1)),  # dilated
    ((1, 2, 4, 5, 6), (2, 2, 3), (1, 2, 2), (1, 2, 1), (1, 0, 1), (0, 1, 1)),  # 3-D
    ((3, 1, 1, 11), (1, 4), (1, 3), (1, 2), (0, 2), (0, 1)),  # 1-D as height 1
]


def _placed(dev, rng, dt, xs, x, ys):
    xd = TD(dt, xs, random_strides(rng, xs, allow_broadcast=False))
    yd = TD(dt, ys, random_strides(rng, ys, allow_broadcast=False))
    tx, _ = place(dev, rng, xd, x)
    ty, _ = place(dev, rng, yd)
    return xd, yd, tx, ty


@pytest.mark.parametrize("dt", [DT.INT8, DT.UINT8], ids=lambda d: d.name)
@pytest.mark.parametrize("case", range(len(CASES)))
def test_max_pooling2_bytes_against_numpy(dev, rng, case, dt):
    xs, win, st, dl, ps, pe = CASES[case]
    info = np.iinfo(dt.numpy_dtype)
    x = rng.integers(info.min, info.max, xs, endpoint=True).astype(dt.numpy_dtype)
    x.flat[rng.choice(x.size, 2, replace=False)] = [info.min, info.max]
    want, idx, _ = reference(x, win, st, dl, ps, pe, "max")
    xd, yd, tx, ty = _placed(dev, rng, dt, xs, x, want.shape)
    idd = TD(DT.UINT32, want.shape, random_strides(rng, want.shape, allow_broadcast=False))
    ti, _ = place(dev, rng, idd)
    before = poison_against(ty, want.astype(x.dtype), rng)
    ibefore = poison_against(ti, idx.astype(np.uint32), rng)
    dev.compile(kdml.MaxPooling2Desc(xd, yd, idd, win, st, ps, pe, dl)).execute([tx], [ty, ti])
    assert_output(ty, before, want.astype(x.dtype))
    assert_output(ti, ibefore, idx.astype(np.uint32))


@pytest.mark.parametrize("dt", [DT.FLOAT32, DT.FLOAT16], ids=lambda d: d.name)
@pytest.mark.parametrize("case", [0, 1, 3])
def test_max_pooling_and_max_pooling1_against_numpy(dev, rng, case, dt):
    xs, win, st, _, ps, pe = CASES[case]
    dl = (1,) * len(win)
    x = (rng.standard_normal(xs) * 4).astype(dt.numpy_dtype)
    x.flat[rng.choice(x.size, 2, replace=False)] = [np.nan, -np.inf]
    want, idx, _ = reference(x, win, st, dl, ps, pe, "max")
    for version in (0, 1, 2):
        xd, yd, tx, ty = _placed(dev, rng, dt, xs, x, want.shape)
        before = poison_against(ty, want.astype(x.dtype), rng)
        if version == 0:
            dev.compile(kdml.MaxPoolingDesc(xd, yd, win, st, ps, pe)).execute([tx], [ty])
        else:
            idd = TD(DT.UINT32, want.shape) if version == 2 else None
            ti = dev.empty(idd) if idd is not None else None
            dev.compile(kdml.MaxPooling1Desc(xd, yd, idd, win, st, ps, pe)).execute([tx], [ty, ti])
            if ti is not None:
                np.testing.assert_array_equal(ti.numpy(), idx)
        after = assert_outside_unchanged(ty, before)
        got = read_logical(after, ty.offset, yd)
        np.testing.assert_array_equal(got, want.astype(x.dtype))  # NaN where the window holds one


@pytest.mark.parametrize("include", [False, True])
@pytest.mark.parametrize("dt", [DT.FLOAT32, DT.FLOAT16], ids=lambda d: d.name)
@pytest.mark.parametrize("case", range(len(CASES)))
def test_average_pooling1_against_numpy(dev, rng, case, dt, include):
    xs, win, st, dl, ps, pe = CASES[case]
    npd = dt.numpy_dtype
    x = (rng.standard_normal(xs) * 3).astype(npd)
    want, s, div = reference(x, win, st, dl, ps, pe, "avg", include)
    xd, yd, tx, ty = _placed(dev, rng, dt, xs, x, want.shape)
    before = poison_against(ty, want.astype(npd), rng)
    dev.compile(kdml.AveragePooling1Desc(xd, yd, win, st, ps, pe, dl, include)).execute([tx], [ty])
    after = assert_outside_unchanged(ty, before)
    got = read_logical(after, ty.offset, yd).astype(np.float64)
    bound = (np.prod(win) + 4) * U * s / div + np.abs(want) * U
    if dt == DT.FLOAT16:
        bound = bound + np.abs(want) * 2.0 ** -11 + 2.0 ** -25
    err = np.abs(got - want)
    assert np.all(err <= bound), f"worst error / bound {np.max(err / np.maximum(bound, 1e-300)):.3f}"


def test_helper_dilated_average_and_bytes(dev, rng):
    x = rng.standard_normal((2, 3, 9, 8)).astype(np.float32)
    got = kdml.avg_pool(x, (2, 3), dilations=(3, 2), start_padding=(1, 0), include_padding=True).numpy()
    want = reference(x, (2, 3), (1, 1), (3, 2), (1, 0), (0, 0), "avg", True)[0]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    q = rng.integers(0, 256, (1, 2, 5, 5)).astype(np.uint8)
    np.testing.assert_array_equal(kdml.max_pool(q, (5, 5)).numpy(), q.max(axis=(2, 3), keepdims=True))
    # a window wholly in the padding: the type's lowest value
    s8 = np.full((1, 1, 2, 2), 5, np.int8)
    y = kdml.max_pool(s8, (1, 1), start_padding=(1, 0)).numpy()
    assert y[0, 0, 0, 0] == -128 and y[0, 0, 1, 0] == 5


def test_levels_of_the_versions():
    f, i8 = DT.FLOAT32, DT.INT8
    d8 = kdml.MaxPooling2Desc(TD(i8, (1, 2, 5, 5)), TD(i8, (1, 2, 2, 2)), None, (3, 3), (2, 2))
    with pytest.raises(kdml.UnsupportedError, match="^input_tensor"):
        compile_at_level(FL.FL_2_1, d8)
    compile_at_level(FL.FL_3_0, d8)
    a1 = kdml.AveragePooling1Desc(TD(f, (1, 2, 5, 5)), TD(f, (1, 2, 1, 1)), (3, 3), (2, 2), (), (), (2, 2))
    with pytest.raises(kdml.UnsupportedError, match="^AVERAGE_POOLING1: introduced"):
        compile_at_level(FL.FL_6_1, a1)
    compile_at_level(FL.FL_6_2, a1)
    with pytest.raises(kdml.InvalidArgumentError, match="^output_tensor.sizes"):
        compile_at_level(FL.FL_6_2, dataclasses.replace(a1, dilations=(1, 1)))
    with pytest.raises(kdml.UnsupportedError, match="^input_tensor"):
        compile_at_level(FL.FL_6_2, kdml.MaxPooling1Desc(TD(i8, (1, 2, 5, 5)), TD(i8, (1, 2, 2, 2)), None, (3, 3), (2, 2)))
