"""SPLIT (ops/split.py: DML_SPLIT_OPERATOR_DESC, copies by ops/identity.plan_region_copy) against
numpy.split: every data type of the table, 1-8 dimensions, every axis, 1-4 outputs, strided and
broadcast inputs, strided outputs, random offsets with guard bytes, poisoned outputs whose every
other byte must stay unchanged (also with every output in one buffer), transfer and shader
devices and the GPU memory kernels, the page's examples, the helper kdml.split and the refusals.
ONNX Split through the backend: tests/test_onnx_split.py."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from helpers import (
    assert_output,
    compile_at_level,
    element_byte_positions,
    place,
    poison_against,
    random_strides,
    random_values,
    read_logical,
)

import kompute_dml as kdml
from kompute_dml.core.dtypes import HIGHEST_FEATURE_LEVEL
from kompute_dml.ops.split import SPLIT

DT = kdml.DataType
FL = kdml.FeatureLevel
TD = kdml.TensorDesc
TYPES = sorted(SPLIT.require(HIGHEST_FEATURE_LEVEL).tensor("input_tensor").types, key=lambda d: d.value)


def _layout(rng, sizes, *, is_input: bool):
    return None if rng.random() < 0.3 else random_strides(rng, sizes, allow_broadcast=is_input)


def _reference(x: np.ndarray, parts, axis):
    """numpy.split at the cumulative part sizes (its indices), the sizes themselves checked."""
    out = np.split(x, np.cumsum(parts)[:-1], axis=axis)
    assert [o.shape[axis] for o in out] == list(parts)
    return out


def run_split(dev, rng, dt, in_sizes, parts, axis, *, strided=True):
    xd = TD(dt, tuple(in_sizes), _layout(rng, in_sizes, is_input=True) if strided else None)
    out_sizes = [tuple(p if d == axis else s for d, s in enumerate(in_sizes)) for p in parts]
    yds = [TD(dt, s, _layout(rng, s, is_input=False) if strided else None) for s in out_sizes]
    x, raw = place(dev, rng, xd, random_values(rng, dt, xd.sizes))
    expected = _reference(read_logical(raw, x.offset, xd), parts, axis)
    ys = [place(dev, rng, d)[0] for d in yds]
    befores = [poison_against(y, e, rng) for y, e in zip(ys, expected)]
    dev.compile(kdml.SplitDesc(xd, tuple(yds), axis)).execute([x], ys)
    for y, before, e in zip(ys, befores, expected):
        assert_output(y, before, e)
    assert x.buffer.read() == raw


def _sizes(rng, rank, n_outputs, axis, max_elems=200):
    base = [int(rng.integers(1, 4)) for _ in range(rank)]
    while np.prod(base) > max_elems:
        base[int(np.argmax(base))] //= 2
    parts = [int(rng.integers(1, 5)) for _ in range(n_outputs)]
    base[axis] = sum(parts)
    return base, parts


@pytest.mark.parametrize("dt", TYPES, ids=lambda d: d.name)
def test_every_type_rank_and_axis(xdev, rng, dt):
    for rank in range(1, 9):
        axis = int(rng.integers(0, rank))
        sizes, parts = _sizes(rng, rank, int(rng.integers(1, 5)), axis)
        run_split(xdev, rng, dt, sizes, parts, axis)


@pytest.mark.parametrize("dt", [DT.UINT8, DT.FLOAT16, DT.FLOAT32, DT.INT64], ids=str)
def test_packed_parts_on_and_off_the_16_byte_grid(xdev, rng, dt):
    """Packed tensors: parts whose input starts are multiples of 16 bytes take plan_copy's plans
    moved by the start, the others the portable copy with the start packed in."""
    w = dt.size
    for sizes, parts, axis in (([2, 16 // w * 4], [16 // w * 3, 16 // w], 1), ([3, 13], [5, 7, 1], 1),
                               ([64 // w * 2 + 3, 4], [64 // w, 3, 64 // w], 0)):
        run_split(xdev, rng, dt, sizes, parts, axis, strided=False)


def test_broadcast_input(xdev, rng):
    """An input with stride-0 dimensions (a broadcast view): every part repeats its values."""
    xd = TD(DT.INT32, (3, 6, 4), (0, 1, 0))
    vals = np.arange(6, dtype=np.int32)
    x, _ = place(xdev, rng, xd, np.broadcast_to(vals[None, :, None], (3, 6, 4)))
    expected = _reference(np.broadcast_to(vals[None, :, None], (3, 6, 4)), [2, 4], 1)
    ys = [place(xdev, rng, TD(DT.INT32, e.shape))[0] for e in expected]
    befores = [poison_against(y, e, rng) for y, e in zip(ys, expected)]
    xdev.compile(kdml.SplitDesc(xd, tuple(y.desc for y in ys), 1)).execute([x], ys)
    for y, before, e in zip(ys, befores, expected):
        assert_output(y, before, e)


def test_outputs_share_one_buffer(xdev, rng):
    """Every output in one poisoned buffer at its own random offset, a strided input: each output
    holds its part and every byte of the buffer outside the outputs stays as it was."""
    for _ in range(3):
        dt = TYPES[int(rng.integers(0, len(TYPES)))]
        sizes, parts = _sizes(rng, 3, 3, 1)
        xd = TD(dt, tuple(sizes), random_strides(rng, sizes, allow_broadcast=True))
        x, raw = place(xdev, rng, xd, random_values(rng, dt, xd.sizes))
        expected = _reference(read_logical(raw, x.offset, xd), parts, 1)
        descs, offsets, at = [], [], 0
        for e in expected:
            d = TD(dt, e.shape, random_strides(rng, e.shape, allow_broadcast=False))
            at += int(rng.integers(0, 4)) * 16
            descs.append(d)
            offsets.append(at)
            at += -(-d.byte_size // 16) * 16
        init = rng.integers(0, 256, at + 40, dtype=np.uint8)
        buf = xdev.buffer(init.tobytes())
        ys = [kdml.Tensor(buf, d, o) for d, o in zip(descs, offsets)]
        for y, e in zip(ys, expected):
            poison_against(y, e, rng)
        before = np.frombuffer(buf.read(), np.uint8)
        xdev.compile(kdml.SplitDesc(xd, tuple(descs), 1)).execute([x], ys)
        after = np.frombuffer(buf.read(), np.uint8)
        outside = np.ones(after.size, bool)
        for y, e in zip(ys, expected):
            outside[element_byte_positions(y.offset, y.desc)] = False
            got = read_logical(after, y.offset, y.desc)
            np.testing.assert_array_equal(got.view(f"u{dt.size}"), e.view(f"u{dt.size}"))
        np.testing.assert_array_equal(after[outside], before[outside])


@pytest.mark.parametrize("dt", [DT.UINT8, DT.UINT16, DT.FLOAT32, DT.FLOAT64], ids=str)
def test_gpu_memory_kernels(dev_shader, rng, monkeypatch, dt):
    """The GPU memory-kernel family (copy_vec, rows_copy, copy_tile) moved by part starts."""
    monkeypatch.setattr(dev_shader, "policy", dataclasses.replace(dev_shader.policy, memory_kernel="gpu"))
    n16 = 16 // dt.size
    for sizes, parts, axis in (([8, 8 * n16], [4, 4], 0), ([5, 5 * n16], [2 * n16, 3 * n16], 1),
                               ([40, 64], [40, 24], 1), ([2, 8, 64], [3, 5], 1)):
        run_split(dev_shader, rng, dt, sizes, parts, axis, strided=False)
        run_split(dev_shader, rng, dt, sizes, parts, axis)


def test_page_examples(dev):
    x = np.arange(1, 13, dtype=np.float32).reshape(1, 1, 6, 2)
    a, b, c = kdml.split(x, [2, 1, 3], 2, device=dev)
    assert a.numpy().tolist() == [[[[1, 2], [3, 4]]]]
    assert b.numpy().tolist() == [[[[5, 6]]]]
    assert c.numpy().tolist() == [[[[7, 8], [9, 10], [11, 12]]]]
    a, b = kdml.split(x, 2, 3, device=dev)
    assert a.numpy().tolist() == [[[[1], [3], [5], [7], [9], [11]]]]
    assert b.numpy().tolist() == [[[[2], [4], [6], [8], [10], [12]]]]


def test_helper(dev, rng):
    x = rng.standard_normal((2, 9, 4)).astype(np.float32)
    for got, want in zip(kdml.split(x, [2, 3, 4], -2, device=dev), np.split(x, [2, 5], -2)):
        np.testing.assert_array_equal(got.numpy(), want)
    got = kdml.split(x, 3, 1, device=dev)
    assert len(got) == 3
    for g, w in zip(got, np.split(x, 3, 1)):
        np.testing.assert_array_equal(g.numpy(), w)
    (whole,) = kdml.split(x, 1, 2, device=dev)
    np.testing.assert_array_equal(whole.numpy(), x)
    tx = dev.tensor(x)
    view = kdml.Tensor(tx.buffer, TD(DT.FLOAT32, (2, 4, 9), (36, 1, 4)), tx.offset)  # a transposed view
    t = np.swapaxes(x, 1, 2)
    for g, w in zip(kdml.split(view, np.array([5, 4]), 2), np.split(t, [5], 2)):
        np.testing.assert_array_equal(g.numpy(), w)
    # out=: strided outputs
    outs = [kdml.Tensor(dev.buffer(bytes(4 * 2 * 5 * 4 * 2)), TD(DT.FLOAT32, (2, k, 4), (k * 8, 8, 2))) for k in (4, 5)]
    assert kdml.split(x, [4, 5], 1, out=outs) == outs
    for o, w in zip(outs, np.split(x, [4], 1)):
        np.testing.assert_array_equal(o.numpy(), w)
    assert [t.numpy().tolist() for t in kdml.split([1, 2, 3], [1, 2], device=dev)] == [[1], [2, 3]]
    for args, match in (
        (([2, 3, 5], 1), "^sizes_or_count: sizes must sum to the axis length 9, got 10"),
        (([2, 0, 7], 1), r"^sizes_or_count\[1\]: a part of size 0"),
        (([2, -1, 8], 1), r"^sizes_or_count\[1\]: must be >= 0"),
        (([], 1), "^sizes_or_count: must hold at least one size"),
        ((2, 1), "^sizes_or_count: 2 equal parts do not divide the axis length 9"),
        ((0, 1), "^sizes_or_count: a count of parts must be >= 1"),
        ((1.5, 1), "^sizes_or_count: must be an int or a sequence of ints"),
        ((3, 3), "^axis: must be in"),
    ):
        with pytest.raises(kdml.InvalidArgumentError, match=match):
            kdml.split(x, *args, device=dev)
    with pytest.raises(kdml.InvalidArgumentError, match="^out: must be a sequence of 2 Tensors"):
        kdml.split(x, [4, 5], 1, out=outs[:1])
    with pytest.raises(kdml.InvalidArgumentError, match=r"^out\[0\]: sizes must be \(2, 4, 4\), got \(2, 5, 4\)"):
        kdml.split(x, [4, 5], 1, out=outs[::-1])


def test_helper_pads_to_the_feature_levels_rank():
    """Before 3_0 SPLIT takes 4 dimensions: the helper adds leading 1s."""
    with kdml.Device(feature_level=FL.FL_2_1) as d:
        x = np.arange(15, dtype=np.int8).reshape(3, 5)
        got = kdml.split(x, [1, 4], 1, device=d)
        assert [g.desc.sizes for g in got] == [(3, 1), (3, 4)]
        for g, w in zip(got, np.split(x, [1], 1)):
            np.testing.assert_array_equal(g.numpy(), w)
        with pytest.raises(kdml.UnsupportedError, match="^input_tensor: SPLIT does not support INT64"):
            kdml.split(x.astype(np.int64), 3, 0, device=d)


F = TD(DT.FLOAT32, (4, 3))
H = TD(DT.FLOAT32, (2, 3))


@pytest.mark.parametrize(("desc", "match"), [
    (kdml.SplitDesc(F, (), 0), "^output_tensors: must hold at least one tensor"),
    (kdml.SplitDesc(F, [H, H], 0), "^output_tensors: must be a tuple"),
    (kdml.SplitDesc(F, (H, None), 0), r"^output_tensors\[1\]"),
    (kdml.SplitDesc(F, (H, H), 2), r"^axis: must be in \[0, 2\)"),
    (kdml.SplitDesc(F, (H, H), -1), r"^axis: must be in \[0, 2\)"),
    (kdml.SplitDesc(F, (H, H), True), "^axis"),
    (kdml.SplitDesc(F, (H, TD(DT.INT32, (2, 3))), 0), r"^output_tensors\[1\].data_type: must equal input_tensor's"),
    (kdml.SplitDesc(F, (H, TD(DT.FLOAT32, (2, 3, 1))), 0), r"^output_tensors\[1\].sizes: dimension count must equal"),
    (kdml.SplitDesc(F, (H, TD(DT.FLOAT32, (2, 4))), 0), r"^output_tensors\[1\].sizes: must equal input_tensor's sizes"),
    (kdml.SplitDesc(F, (H, H, TD(DT.FLOAT32, (1, 3))), 0), r"^output_tensors: sizes at axis 0 must sum to input_tensor's \(4\), got 5"),
    (kdml.SplitDesc(F, (H,), 0), r"^output_tensors: sizes at axis 0 must sum to input_tensor's \(4\), got 2"),
    (kdml.SplitDesc(F, (H, TD(DT.FLOAT32, (2, 3), (1, 1))), 0), r"^output_tensors\[1\]"),
])
def test_refusals(dev, desc, match):
    with pytest.raises(kdml.InvalidArgumentError, match=match):
        dev.compile(desc)


def test_feature_levels():
    four = TD(DT.INT8, (1, 1, 2, 3))
    one = TD(DT.INT16, (6,))
    for level, desc, match in (
        (FL.FL_1_0, kdml.SplitDesc(four, (four,), 3), "^input_tensor: SPLIT does not support INT8"),
        (FL.FL_2_1, kdml.SplitDesc(one, (one,), 0), "^input_tensor: SPLIT supports 4 dimensions"),
        (FL.FL_2_1, kdml.SplitDesc(four, (TD(DT.INT8, (1, 1, 1, 1, 3)),), 3), r"^output_tensors\[0\]: SPLIT supports 4"),
        (FL.FL_3_0, kdml.SplitDesc(TD(DT.FLOAT64, (6,)), (TD(DT.FLOAT64, (6,)),), 0),
         "^input_tensor: SPLIT does not support FLOAT64"),
    ):
        with pytest.raises(kdml.UnsupportedError, match=match):
            compile_at_level(level, desc)
    compile_at_level(FL.FL_2_1, kdml.SplitDesc(four, (TD(DT.INT8, (1, 1, 1, 3)),) * 2, 2))
    compile_at_level(FL.FL_3_0, kdml.SplitDesc(one, (TD(DT.INT16, (2,)), TD(DT.INT16, (4,))), 0))
    eight = TD(DT.UINT64, (1,) * 7 + (4,))
    compile_at_level(FL.FL_4_1, kdml.SplitDesc(eight, (TD(DT.UINT64, (1,) * 7 + (1,)), TD(DT.UINT64, (1,) * 7 + (3,))), 7))


def test_binding_rules(dev):
    op = dev.compile(kdml.SplitDesc(F, (H, H), 0))
    assert (op.input_fields, op.output_fields) == (("input_tensor",), ("output_tensors[0]", "output_tensors[1]"))
    buf = dev.buffer(bytes(256))
    x = kdml.Tensor(buf, F, 0)
    with pytest.raises(kdml.InvalidArgumentError, match=r"^outputs: SPLIT takes 2 \(output_tensors\[0\], output_tensors\[1\]\)"):
        op.execute([x], [kdml.Tensor(buf, H, 64)])
    with pytest.raises(kdml.InvalidArgumentError, match=r"^output_tensors\[1\]: overlaps output_tensors\[0\]"):
        op.execute([x], [kdml.Tensor(buf, H, 64), kdml.Tensor(buf, H, 80)])
    with pytest.raises(kdml.InvalidArgumentError, match=r"^output_tensors\[0\]: overlaps input_tensor"):
        op.execute([x], [kdml.Tensor(buf, H, 32), kdml.Tensor(buf, H, 128)])
    with pytest.raises(kdml.InvalidArgumentError, match=r"^output_tensors\[1\]: bound tensor"):
        op.execute([x], [kdml.Tensor(buf, H, 64), kdml.Tensor(buf, TD(DT.FLOAT32, (3, 2)), 128)])
    op.execute([x], [kdml.Tensor(buf, H, 64), kdml.Tensor(buf, H, 128)])  # disjoint: accepted
