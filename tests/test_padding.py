"""PADDING / PADDING1 (ops/padding.py) and TILE (ops/tile.py) on shaders/pad.comp against an
independent numpy reference (np.pad's constant / edge / reflect / symmetric / wrap modes, np.tile):
every type, 1-8 dimensions, strided inputs (stride 0 included) and outputs at random offsets,
pads beyond the input's size (reflection and symmetric fold periodically: np.pad applied one
size-limited step at a time), dimensions enumerated by the host, poisoned outputs whose every
other byte must stay unchanged, the pages' examples, refusals."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_output, place, poison_against, random_strides, random_values, read_logical

import kompute_dml as kdml
from kompute_dml.core.dtypes import HIGHEST_FEATURE_LEVEL
from kompute_dml.ops.padding import PADDING1
from kompute_dml.ops.tile import TILE

DT = kdml.DataType
TD = kdml.TensorDesc
PM = kdml.PaddingMode
TYPES = sorted(PADDING1.require(HIGHEST_FEATURE_LEVEL).tensor("input_tensor").types, key=lambda d: d.value)
TILE_TYPES = sorted(TILE.require(HIGHEST_FEATURE_LEVEL).tensor("input_tensor").types, key=lambda d: d.value)
_NP_MODE = {PM.EDGE: "edge", PM.REFLECTION: "reflect", PM.SYMMETRIC: "symmetric", PM.WRAP: "wrap"}


def pad_ref(x: np.ndarray, starts, ends, mode: PM, value) -> np.ndarray:
    """np.pad, one axis at a time; reflection / symmetric pads beyond what numpy takes at once
    are applied in steps (each a fold over the previous result, as the page describes)."""
    if mode == PM.CONSTANT:
        return np.pad(x, list(zip(starts, ends)), mode="constant", constant_values=np.array(value, x.dtype))
    y = x
    for ax, (s, e) in enumerate(zip(starts, ends)):
        n = x.shape[ax]
        for side in ("start", "end"):
            left = s if side == "start" else e
            while left:
                step = left if mode in (PM.EDGE, PM.WRAP) else min(left, max(n - (1 if mode == PM.REFLECTION else 0), 1))
                if mode == PM.REFLECTION and n == 1:
                    step = left
                    widths = [(0, 0)] * x.ndim
                    widths[ax] = (step, 0) if side == "start" else (0, step)
                    y = np.pad(y, widths, mode="edge")
                    break
                widths = [(0, 0)] * x.ndim
                widths[ax] = (step, 0) if side == "start" else (0, step)
                if mode == PM.WRAP:  # periodic in the input's size: take from the middle part
                    idx = (np.arange(-step, 0) if side == "start" else np.arange(n, n + step))
                    core = np.take(y, np.arange(s, s + n), axis=ax) if side == "end" else np.take(y, np.arange(0, n), axis=ax)
                    part = np.take(core, idx % n, axis=ax)
                    y = np.concatenate([part, y] if side == "start" else [y, part], axis=ax)
                else:
                    region = np.take(y, np.arange(0, n) if side == "start" else np.arange(y.shape[ax] - n, y.shape[ax]), axis=ax)
                    padded = np.pad(region, widths, mode=_NP_MODE[mode])
                    part = np.take(padded, np.arange(step) if side == "start" else np.arange(n, n + step), axis=ax)
                    y = np.concatenate([part, y] if side == "start" else [y, part], axis=ax)
                left -= step
    return y


def layout(rng, sizes, *, is_input):
    """Random strides, or packed (30%, and wherever the gaps of a rank-8 layout would span more
    than 16 MiB of elements: beyond a storage-buffer binding on some devices, and slow)."""
    if rng.random() < 0.3:
        return None
    strides = random_strides(rng, sizes, allow_broadcast=is_input)
    span = 1 + sum((n - 1) * st for n, st in zip(sizes, strides))
    return strides if span * 8 <= 16 << 20 else None


def run_pad(dev, rng, dt, in_sizes, starts, ends, mode, value, *, v1=True, strided=True, ref_value=None):
    out_sizes = tuple(i + s + e for i, s, e in zip(in_sizes, starts, ends))
    xd = TD(dt, in_sizes, layout(rng, in_sizes, is_input=True) if strided else None)
    yd = TD(dt, out_sizes, layout(rng, out_sizes, is_input=False) if strided else None)
    x, xraw = place(dev, rng, xd, random_values(rng, dt, in_sizes))
    y, _ = place(dev, rng, yd)
    expected = pad_ref(read_logical(xraw, x.offset, xd), starts, ends, mode, value if ref_value is None else ref_value)
    before = poison_against(y, expected, rng)
    desc = (kdml.Padding1Desc(xd, yd, mode, dt, value, starts, ends) if v1
            else kdml.PaddingDesc(xd, yd, mode, value, starts, ends))
    dev.compile(desc).execute([x], [y])
    assert_output(y, before, expected)
    assert x.buffer.read() == xraw


def small(rng, rank, max_elems=200):
    s = [int(rng.integers(1, 5)) for _ in range(rank)]
    while np.prod(s) > max_elems:
        s[int(np.argmax(s))] //= 2
    return tuple(max(1, v) for v in s)


@pytest.mark.parametrize("dt", TYPES, ids=str)
@pytest.mark.parametrize("mode", [PM.CONSTANT, PM.EDGE, PM.REFLECTION, PM.SYMMETRIC, PM.WRAP], ids=str)
def test_padding1_every_type_and_mode(dev, rng, dt, mode):
    for rank in range(1, 9):
        sizes = small(rng, rank, 100 if rank > 5 else 200)
        starts = tuple(int(rng.integers(0, 3)) for _ in range(rank))
        ends = tuple(int(rng.integers(0, 3)) for _ in range(rank))
        value = 0 if dt == DT.FLOAT64 else (3 if not dt.is_float else -2.5)
        run_pad(dev, rng, dt, sizes, starts, ends, mode, value)


@pytest.mark.parametrize("mode", [PM.REFLECTION, PM.SYMMETRIC, PM.WRAP, PM.EDGE], ids=str)
def test_pads_beyond_the_size_fold_periodically(dev, rng, mode):
    run_pad(dev, rng, DT.INT16, (3, 4), (7, 1), (2, 9), mode, 0)
    run_pad(dev, rng, DT.FLOAT32, (1, 2), (3, 5), (4, 0), mode, 0)


def test_host_enumerated_dimensions(dev, rng):
    sizes = (2, 3, 2, 2, 3, 2, 2, 2)
    for mode in (PM.CONSTANT, PM.REFLECTION):
        run_pad(dev, rng, DT.UINT8, sizes, (1, 0, 1, 0, 1, 0, 1, 1), (0, 1, 1, 1, 0, 1, 0, 1), mode, 9)


def test_padding_float_value_converted(dev, rng):
    """PADDING's FLOAT value: truncated and saturated for integers (DIAGONAL_MATRIX's rule)."""
    run_pad(dev, rng, DT.INT8, (2, 3, 4, 5), (0, 1, 0, 2), (1, 0, 2, 0), PM.CONSTANT, 300.7, v1=False, ref_value=127)
    xd, yd = TD(DT.INT8, (1, 1, 1, 1)), TD(DT.INT8, (1, 1, 1, 2))
    y = dev.empty(yd)
    op = dev.compile(kdml.PaddingDesc(xd, yd, PM.CONSTANT, -3.9, (0, 0, 0, 0), (0, 0, 0, 1)))
    op.execute([dev.tensor(np.array([[[[5]]]], np.int8))], [y])
    assert y.numpy().reshape(-1).tolist() == [5, -3]


PAGE_IN = np.array([[[[1, 2, 3, 4], [5, 6, 7, 8], [1, 2, 3, 4], [5, 6, 7, 8]]]], np.float32)
PAGE = {PM.CONSTANT: [9, 9, 9, 9, 9, 9, 9, 9, 9, 9], PM.EDGE: [1, 1, 1, 2, 3, 4, 4, 4, 4, 4],
        PM.REFLECTION: [7, 6, 5, 6, 7, 8, 7, 6, 5, 6], PM.SYMMETRIC: [2, 1, 1, 2, 3, 4, 4, 3, 2, 1]}


@pytest.mark.parametrize("mode", list(PAGE), ids=str)
def test_page_examples(dev, mode):
    """DML_PADDING1's examples 1-4: the first output row (start {0,0,1,2}, end {0,0,3,4})."""
    y = kdml.pad(PAGE_IN, (0, 0, 1, 2), (0, 0, 3, 4), mode, 9.0, device=dev).numpy()
    assert y.shape == (1, 1, 8, 10)
    assert y[0, 0, 0].tolist() == PAGE[mode]


@pytest.mark.parametrize("dt", TILE_TYPES, ids=str)
def test_tile_every_type(dev, rng, dt):
    for rank in range(1, 9):
        sizes = small(rng, rank, 60)
        reps = tuple(int(rng.integers(1, 4)) if rng.random() < 0.6 else 1 for _ in range(rank))
        out_sizes = tuple(s * r for s, r in zip(sizes, reps))
        xd = TD(dt, sizes, layout(rng, sizes, is_input=True))
        yd = TD(dt, out_sizes, layout(rng, out_sizes, is_input=False))
        x, xraw = place(dev, rng, xd, random_values(rng, dt, sizes))
        y, _ = place(dev, rng, yd)
        expected = np.tile(read_logical(xraw, x.offset, xd), reps)
        before = poison_against(y, expected, rng)
        dev.compile(kdml.TileDesc(xd, yd, reps)).execute([x], [y])
        assert_output(y, before, expected)


def test_tile_page_example(dev):
    y = kdml.tile(np.array([[[[1, 2, 3], [4, 5, 6]]]], np.float32), (1, 1, 3, 3), device=dev).numpy()
    assert y.shape == (1, 1, 6, 9) and y[0, 0, 5].tolist() == [4, 5, 6] * 3


X4, Y4 = TD(DT.FLOAT32, (1, 1, 2, 3)), TD(DT.FLOAT32, (1, 1, 5, 4))


@pytest.mark.parametrize(("desc", "error", "match"), [
    (kdml.Padding1Desc(X4, Y4, PM.CONSTANT, DT.FLOAT32, 0, (0, 0, 1, 0), (0, 0, 1, 1)), kdml.InvalidArgumentError,
     r"^output_tensor\.sizes: must be \(1, 1, 4, 4\)"),
    (kdml.Padding1Desc(X4, Y4, PM.CONSTANT, DT.FLOAT16, 0, (0, 0, 1, 0), (0, 0, 2, 1)), kdml.InvalidArgumentError,
     "^padding_value_data_type"),
    (kdml.Padding1Desc(X4, Y4, 7, DT.FLOAT32, 0, (0, 0, 1, 0), (0, 0, 2, 1)), kdml.InvalidArgumentError, "^padding_mode"),
    (kdml.PaddingDesc(X4, Y4, PM.WRAP, 0.0, (0, 0, 1, 0), (0, 0, 2, 1)), kdml.InvalidArgumentError, "^padding_mode"),
    (kdml.Padding1Desc(X4, Y4, PM.EDGE, DT.FLOAT32, 0, (0, 1, 0), (0, 0, 2, 1)), kdml.InvalidArgumentError, "^start_padding"),
    (kdml.Padding1Desc(X4, TD(DT.FLOAT16, (1, 1, 5, 4)), PM.EDGE, DT.FLOAT16, 0, (0, 0, 1, 0), (0, 0, 2, 1)),
     kdml.InvalidArgumentError, r"^output_tensor\.data_type"),
    (kdml.TileDesc(X4, Y4, (1, 1, 2, 1)), kdml.InvalidArgumentError, r"^output_tensor\.sizes: must be"),
    (kdml.TileDesc(X4, TD(DT.FLOAT32, (1, 1, 2, 3)), (1, 1, 0, 1)), kdml.InvalidArgumentError, "^repeats"),
    (kdml.TileDesc(X4, Y4, (1, 1, 2)), kdml.InvalidArgumentError, "^repeats"),
    (kdml.TileDesc(X4, TD(DT.FLOAT32, (1, 1, 2, 3), (0, 0, 0, 1)), (1, 1, 1, 1)), kdml.InvalidArgumentError, "^output_tensor"),
], ids=range(10))
def test_refused(dev, desc, error, match):
    with pytest.raises(error, match=match):
        dev.compile(desc)


def test_feature_levels():
    d = kdml.Device(feature_level=kdml.FeatureLevel.FL_2_1)
    try:
        with pytest.raises(kdml.UnsupportedError, match="^padding_mode: SYMMETRIC"):
            d.compile(kdml.PaddingDesc(X4, Y4, PM.SYMMETRIC, 0.0, (0, 0, 1, 0), (0, 0, 2, 1)))
        with pytest.raises(kdml.UnsupportedError, match="^PADDING1: introduced"):
            d.compile(kdml.Padding1Desc(X4, Y4, PM.EDGE, DT.FLOAT32, 0, (0, 0, 1, 0), (0, 0, 2, 1)))
        with pytest.raises(kdml.UnsupportedError, match="^input_tensor: TILE supports 4 dimensions"):
            d.compile(kdml.TileDesc(TD(DT.FLOAT32, (2, 3)), TD(DT.FLOAT32, (4, 3)), (2, 1)))
    finally:
        d.close()
