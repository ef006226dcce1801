"""SLICE1 (ops/join.py: DML_SLICE1_OPERATOR_DESC, copies by ops/identity.plan_region_copy)
against numpy indexing (x[np.ix_(start + stride * c)]): every data type of the table, 1-8
dimensions, random windows with positive and negative strides and outputs smaller than the
window reaches, strided and broadcast inputs, strided outputs, random offsets with guard bytes,
poisoned outputs whose every other byte must stay unchanged, transfer and shader devices and
the GPU memory kernels, the page's examples, the helpers kdml.slice1 / kdml.onnx_slice against
numpy basic slicing (ONNX's clamping) and the refusals."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from helpers import assert_output, compile_at_level, place, poison_against, random_strides, random_values, read_logical

import kompute_dml as kdml
from kompute_dml.core.dtypes import HIGHEST_FEATURE_LEVEL
from kompute_dml.ops.join import SLICE1

DT = kdml.DataType
FL = kdml.FeatureLevel
TD = kdml.TensorDesc
TYPES = sorted(SLICE1.require(HIGHEST_FEATURE_LEVEL).tensor("input_tensor").types, key=lambda d: d.value)


def slice_ref(x, offsets, sizes, strides, out_sizes):
    """DML_SLICE1's pseudo-code: output[c] = input[start + strides * c]."""
    idx = []
    for o, s, st, n in zip(offsets, sizes, strides, out_sizes):
        start = o + s - 1 if st < 0 else o
        idx.append(start + st * np.arange(n))
    return x[np.ix_(*idx)]


def random_window(rng, in_sizes):
    offsets, sizes, strides, out = [], [], [], []
    for n in in_sizes:
        o = int(rng.integers(0, n))
        s = int(rng.integers(1, n - o + 1))
        st = int(rng.integers(1, 4)) * (1 if rng.random() < 0.5 else -1)
        reach = 1 + (s - 1) // abs(st)
        offsets.append(o)
        sizes.append(s)
        strides.append(st)
        out.append(int(rng.integers(1, reach + 1)) if rng.random() < 0.3 else reach)
    return offsets, sizes, strides, out


def run_slice(dev, rng, dt, in_sizes, window=None, *, strided=True):
    offsets, sizes, strides, out_sizes = window or random_window(rng, in_sizes)
    xd = TD(dt, tuple(in_sizes), random_strides(rng, in_sizes, allow_broadcast=True) if strided and rng.random() < 0.7
            else None)
    yd = TD(dt, tuple(out_sizes), random_strides(rng, out_sizes, allow_broadcast=False) if strided and rng.random() < 0.7
            else None)
    x, xraw = place(dev, rng, xd, random_values(rng, dt, xd.sizes))
    y, _ = place(dev, rng, yd)
    expected = slice_ref(read_logical(xraw, x.offset, xd), offsets, sizes, strides, out_sizes)
    before = poison_against(y, expected, rng)
    dev.compile(kdml.Slice1Desc(xd, yd, tuple(offsets), tuple(sizes), tuple(strides))).execute([x], [y])
    assert_output(y, before, expected)
    assert x.buffer.read() == xraw


def _sizes(rng, rank, max_elems=400):
    s = [int(rng.integers(1, 7)) for _ in range(rank)]
    while np.prod(s) > max_elems:
        s[int(np.argmax(s))] //= 2
    return [max(1, v) for v in s]


@pytest.mark.parametrize("dt", TYPES, ids=lambda d: d.name)
def test_every_type_and_rank(xdev, rng, dt):
    for rank in range(1, 9):
        for _ in range(2):
            run_slice(xdev, rng, dt, _sizes(rng, rank))


@pytest.mark.parametrize("dt", [DT.UINT8, DT.FLOAT16, DT.FLOAT32, DT.UINT64], ids=str)
def test_packed_windows(xdev, rng, dt):
    """Contiguous windows whose start is on or off the 16-byte grid; reversed rows."""
    w = dt.size
    n = 64 // w
    for window in (((2, 0), (3, n), (1, 1), (3, n)), ((1, 3), (4, n - 3), (1, 1), (4, n - 3)),
                   ((0, 0), (5, n), (-1, 1), (5, n)), ((0, 0), (5, n), (1, -1), (5, n)),
                   ((1, 1), (4, n - 2), (-2, -3), (2, (n - 3) // 3 + 1))):
        run_slice(xdev, rng, dt, (5, n), window, strided=False)
        run_slice(xdev, rng, dt, (5, n), window)


@pytest.mark.parametrize("dt", [DT.UINT8, DT.UINT16, DT.FLOAT32, DT.INT64], ids=str)
def test_gpu_memory_kernels(dev_shader, rng, monkeypatch, dt):
    monkeypatch.setattr(dev_shader, "policy", dataclasses.replace(dev_shader.policy, memory_kernel="gpu"))
    n = 128 // dt.size
    for window in (((4, 0), (4, n), (1, 1), (4, n)), ((0, 16 // dt.size), (8, n // 2), (1, 1), (8, n // 2)),
                   ((0, 0), (8, n), (2, 1), (4, n)), ((0, 0), (8, n), (-1, 1), (8, n))):
        run_slice(dev_shader, rng, dt, (8, n), window, strided=False)
        run_slice(dev_shader, rng, dt, (8, n), window)


def test_page_examples(dev):
    x = np.arange(1, 17, dtype=np.float32).reshape(1, 1, 4, 4)
    y = kdml.slice1(x, (0, 0, 0, 1), (1, 1, 4, 3), (1, 1, 2, 2), device=dev)
    np.testing.assert_array_equal(y.numpy(), [[[[2, 4], [10, 12]]]])
    y = kdml.slice1(x, (0, 0, 0, 1), (1, 1, 4, 3), (1, 1, -2, 2), device=dev)
    np.testing.assert_array_equal(y.numpy(), [[[[14, 16], [6, 8]]]])


def _onnx_ref(x, starts, ends, axes, steps):
    """numpy basic slicing, whose clamping is ONNX's but for one case: ONNX clamps a start
    before the beginning into [0, d - 1] when stepping backwards (index 0 is taken), numpy
    leaves the slice empty."""
    index = [slice(None)] * x.ndim
    for s, e, a, st in zip(starts, ends, axes, steps):
        if st < 0 and s < -x.shape[a]:
            s = 0
        index[a] = slice(s, e, st)
    return x[tuple(index)]


def test_onnx_slice_against_numpy(dev, rng):
    big = 1 << 62
    for _ in range(60):
        r = int(rng.integers(1, 6))
        shape = tuple(int(v) for v in rng.integers(1, 7, r))
        x = random_values(rng, DT.INT32, shape)
        k = int(rng.integers(1, r + 1))
        axes = [int(a) for a in rng.permutation(r)[:k]]
        starts = [int(rng.choice([rng.integers(-8, 9), big, -big])) for _ in axes]
        ends = [int(rng.choice([rng.integers(-8, 9), big, -big])) for _ in axes]
        steps = [int(rng.choice([1, 2, 3, -1, -2, -4])) for _ in axes]
        want = _onnx_ref(x, [min(max(v, -100), 100) for v in starts], [min(max(v, -100), 100) for v in ends],
                         axes, steps)
        signed_axes = [a - r if rng.random() < 0.5 else a for a in axes]
        if want.size == 0:
            with pytest.raises(kdml.UnsupportedError, match="is empty"):
                kdml.onnx_slice(x, starts, ends, signed_axes, steps, device=dev)
            continue
        got = kdml.onnx_slice(x, starts, ends, signed_axes, steps, device=dev)
        np.testing.assert_array_equal(got.numpy(), want)
    x = np.arange(24, dtype=np.float16).reshape(2, 3, 4)
    # the ONNX rule above, spelled out: start -100 stepping back from index 0 to the beginning
    np.testing.assert_array_equal(kdml.onnx_slice(x, [-100], [-100], [2], [-1], device=dev).numpy(), x[:, :, :1])
    np.testing.assert_array_equal(kdml.onnx_slice(x, [1, -1], [3, -5], None, [1, -1], device=dev).numpy(),
                                  x[1:3, -1:-5:-1])
    with pytest.raises(kdml.InvalidArgumentError, match="^axes: repeats axis 0"):
        kdml.onnx_slice(x, [0, 0], [1, 1], [0, -3], device=dev)
    with pytest.raises(kdml.InvalidArgumentError, match="^steps: may not be 0"):
        kdml.onnx_slice(x, [0], [1], [0], [0], device=dev)
    with pytest.raises(kdml.InvalidArgumentError, match="^axes: must be in"):
        kdml.onnx_slice(x, [0], [1], [3], device=dev)


def test_helpers_out_and_strided_input(dev, rng):
    x = rng.standard_normal((6, 5)).astype(np.float32)
    tx = dev.tensor(x)
    view = kdml.Tensor(tx.buffer, TD(DT.FLOAT32, (5, 6), (1, 5)), tx.offset)  # x.T
    got = kdml.slice1(view, (1, 0), (4, 6), (-1, 2), device=dev)
    np.testing.assert_array_equal(got.numpy(), x.T[4:0:-1, 0:6:2])
    ob = dev.buffer(bytes(4 * 3 * 4 * 2))
    out = kdml.Tensor(ob, TD(DT.FLOAT32, (3, 4), (8, 2)))
    assert kdml.onnx_slice(x, [-1, 0], [0, 4], None, [-2, 1], out=out) is out
    np.testing.assert_array_equal(out.numpy(), x[5:0:-2, 0:5][:, :4])
    with pytest.raises(kdml.InvalidArgumentError, match="^out: sizes must be"):
        kdml.onnx_slice(x, [0], [2], out=out)
    with pytest.raises(kdml.InvalidArgumentError, match="^strides: must hold 2 values"):
        kdml.slice1(x, (0, 0), (1, 1), (1,), device=dev)


def test_helper_pads_to_the_feature_levels_rank():
    d = kdml.Device(feature_level=FL.FL_2_1)
    try:
        x = np.arange(10, dtype=np.uint8)
        np.testing.assert_array_equal(kdml.onnx_slice(x, [8], [1], None, [-3], device=d).numpy(), x[8:1:-3])
        with pytest.raises(kdml.UnsupportedError, match="^input_tensor: SLICE1 does not support INT64"):
            kdml.slice1(x.astype(np.int64), (0,), (2,), (1,), device=d)
    finally:
        d.close()


X = TD(DT.FLOAT32, (4, 5))


@pytest.mark.parametrize(("desc", "match"), [
    (kdml.Slice1Desc(X, TD(DT.INT32, (2, 2)), (0, 0), (2, 2), (1, 1)), "^output_tensor.data_type: must equal"),
    (kdml.Slice1Desc(X, TD(DT.FLOAT32, (2, 2, 1)), (0, 0), (2, 2), (1, 1)), "^output_tensor.sizes: dimension count"),
    (kdml.Slice1Desc(X, TD(DT.FLOAT32, (2, 2)), (0,), (2, 2), (1, 1)), "^input_window_offsets: must hold DimensionCount = 2"),
    (kdml.Slice1Desc(X, TD(DT.FLOAT32, (2, 2)), (0, 0), (2, 2, 1), (1, 1)), "^input_window_sizes: must hold"),
    (kdml.Slice1Desc(X, TD(DT.FLOAT32, (2, 2)), (0, 0), (2, 2), (1,)), "^input_window_strides: must hold"),
    (kdml.Slice1Desc(X, TD(DT.FLOAT32, (2, 2)), (-1, 0), (2, 2), (1, 1)), r"^input_window_offsets: \[0\] must be >= 0"),
    (kdml.Slice1Desc(X, TD(DT.FLOAT32, (1, 2)), (0, 0), (0, 2), (1, 1)), r"^input_window_sizes: \[0\] must be >= 1"),
    (kdml.Slice1Desc(X, TD(DT.FLOAT32, (2, 2)), (3, 0), (2, 2), (1, 1)),
     r"^input_window_offsets: \[0\] \+ input_window_sizes\[0\] must be <= input_tensor.sizes\[0\] \(4\)"),
    (kdml.Slice1Desc(X, TD(DT.FLOAT32, (2, 2)), (0, 0), (2, 2), (1, 0)), r"^input_window_strides: \[1\] may not be 0"),
    (kdml.Slice1Desc(X, TD(DT.FLOAT32, (2, 3)), (0, 0), (2, 3), (1, -2)), r"^output_tensor.sizes: \[1\] must be in \[1, 2\]"),
    (kdml.Slice1Desc(X, TD(DT.FLOAT32, (3, 2)), (0, 0), (2, 2), (1, 1)), r"^output_tensor.sizes: \[0\] must be in \[1, 2\]"),
    (kdml.Slice1Desc(X, TD(DT.FLOAT32, (2, 2)), (0, True), (2, 2), (1, 1)), "^input_window_offsets"),
    (kdml.Slice1Desc(X, TD(DT.FLOAT32, (2, 2), (1, 1)), (0, 0), (2, 2), (1, 1)), "^output_tensor"),
])
def test_refusals(dev, desc, match):
    with pytest.raises(kdml.InvalidArgumentError, match=match):
        dev.compile(desc)


def test_feature_levels():
    for level, desc, match in (
        (FL.FL_2_1, kdml.Slice1Desc(TD(DT.INT8, (2, 3)), TD(DT.INT8, (2, 3)), (0, 0), (2, 3), (1, 1)),
         "^input_tensor: SLICE1 supports 4 to 5 dimensions"),
        (FL.FL_3_0, kdml.Slice1Desc(TD(DT.FLOAT64, (2, 3)), TD(DT.FLOAT64, (2, 3)), (0, 0), (2, 3), (1, 1)),
         "^input_tensor: SLICE1 does not support FLOAT64"),
        (FL.FL_2_0, kdml.Slice1Desc(TD(DT.INT8, (1, 1, 2, 3)), TD(DT.INT8, (1, 1, 2, 3)), (0,) * 4, (1, 1, 2, 3),
                                    (1,) * 4), "^SLICE1: introduced at DML_FEATURE_LEVEL_2_1"),
    ):
        with pytest.raises(kdml.UnsupportedError, match=match):
            compile_at_level(level, desc)


def test_output_may_not_overlap_the_input(dev):
    op = dev.compile(kdml.Slice1Desc(X, TD(DT.FLOAT32, (2, 2)), (0, 0), (2, 2), (1, 1)))
    buf = dev.buffer(bytes(128))
    with pytest.raises(kdml.InvalidArgumentError, match="^output_tensor: overlaps input_tensor"):
        op.execute([kdml.Tensor(buf, X, 0)], [kdml.Tensor(buf, TD(DT.FLOAT32, (2, 2)), 48)])
