"""JOIN (ops/join.py: DML_JOIN_OPERATOR_DESC, copies by ops/identity.plan_region_copy) against
numpy.concatenate: every data type of the table, 1-8 dimensions, every axis, 1-4 inputs,
strided and broadcast inputs, strided outputs, random offsets with guard bytes, poisoned
outputs whose every other byte must stay unchanged, transfer and shader devices and the GPU
memory kernels, the page's examples, the helper kdml.join and the refusals."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from helpers import assert_output, compile_at_level, place, poison_against, random_strides, random_values, read_logical

import kompute_dml as kdml
from kompute_dml.core.dtypes import HIGHEST_FEATURE_LEVEL
from kompute_dml.ops.join import JOIN

DT = kdml.DataType
FL = kdml.FeatureLevel
TD = kdml.TensorDesc
TYPES = sorted(JOIN.require(HIGHEST_FEATURE_LEVEL).tensor("input_tensors").types, key=lambda d: d.value)


def _layout(rng, sizes, *, is_input: bool):
    return None if rng.random() < 0.3 else random_strides(rng, sizes, allow_broadcast=is_input)


def run_join(dev, rng, dt, sizes_list, axis, *, strided=True):
    out_sizes = list(sizes_list[0])
    out_sizes[axis] = sum(s[axis] for s in sizes_list)
    descs = [TD(dt, tuple(s), _layout(rng, s, is_input=True) if strided else None) for s in sizes_list]
    yd = TD(dt, tuple(out_sizes), _layout(rng, out_sizes, is_input=False) if strided else None)
    ins, raws = [], []
    for d in descs:
        t, raw = place(dev, rng, d, random_values(rng, dt, d.sizes))
        ins.append(t)
        raws.append(raw)
    y, _ = place(dev, rng, yd)
    expected = np.concatenate([read_logical(r, t.offset, t.desc) for t, r in zip(ins, raws)], axis=axis)
    before = poison_against(y, expected, rng)
    dev.compile(kdml.JoinDesc(tuple(descs), yd, axis)).execute(ins, [y])
    assert_output(y, before, expected)
    for t, r in zip(ins, raws):
        assert t.buffer.read() == r


def _sizes(rng, rank, n_inputs, axis, max_elems=200):
    base = [int(rng.integers(1, 4)) for _ in range(rank)]
    while np.prod(base) > max_elems:
        base[int(np.argmax(base))] //= 2
    out = []
    for _ in range(n_inputs):
        s = list(base)
        s[axis] = int(rng.integers(1, 5))
        out.append(s)
    return out


@pytest.mark.parametrize("dt", TYPES, ids=lambda d: d.name)
def test_every_type_rank_and_axis(xdev, rng, dt):
    for rank in range(1, 9):
        axis = int(rng.integers(0, rank))
        run_join(xdev, rng, dt, _sizes(rng, rank, int(rng.integers(1, 5)), axis), axis)


@pytest.mark.parametrize("dt", [DT.UINT8, DT.FLOAT16, DT.FLOAT32, DT.INT64], ids=str)
def test_packed_parts_on_and_off_the_16_byte_grid(xdev, rng, dt):
    """Packed tensors: parts whose starts are multiples of 16 bytes take plan_copy's plans moved
    by the start, the others the portable copy with the start packed in."""
    w = dt.size
    for sizes in ([[2, 16 // w * 3], [2, 16 // w]], [[3, 5], [3, 7], [3, 1]], [[64 // w, 4], [3, 4], [64 // w, 4]]):
        for axis in range(2):
            if all(s[1 - axis] == sizes[0][1 - axis] for s in sizes):
                run_join(xdev, rng, dt, sizes, axis, strided=False)


@pytest.mark.parametrize("dt", [DT.UINT8, DT.UINT16, DT.FLOAT32, DT.FLOAT64], ids=str)
def test_gpu_memory_kernels(dev_shader, rng, monkeypatch, dt):
    """The GPU memory-kernel family (copy_vec, rows_copy, copy_tile) moved by part starts."""
    monkeypatch.setattr(dev_shader, "policy", dataclasses.replace(dev_shader.policy, memory_kernel="gpu"))
    n16 = 16 // dt.size
    for sizes, axis in (([[4, 8 * n16], [4, 8 * n16]], 0), ([[5, 2 * n16], [5, 3 * n16]], 1),
                        ([[40, 40], [40, 24]], 1), ([[2, 3, 64], [2, 5, 64]], 1)):
        run_join(dev_shader, rng, dt, sizes, axis, strided=False)
        run_join(dev_shader, rng, dt, sizes, axis)


def test_page_examples(dev):
    def go(inputs, axis, want):
        arrs = [np.array(a, np.float32) for a in inputs]
        y = kdml.join(arrs, axis, device=dev)
        np.testing.assert_array_equal(y.numpy(), np.array(want, np.float32))

    go([[[[[1, 2, 3], [4, 5, 6]]]], [[[[7, 8, 9, 10], [11, 12, 13, 14]]]]], 3,
       [[[[1, 2, 3, 7, 8, 9, 10], [4, 5, 6, 11, 12, 13, 14]]]])
    three = [[[[[1, 2], [3, 4]]]], [[[[5, 6], [7, 8]]]], [[[[9, 10], [11, 12]]]]]
    go(three, 1, [[[[1, 2], [3, 4]], [[5, 6], [7, 8]], [[9, 10], [11, 12]]]])
    go(three, 2, [[[[1, 2], [3, 4], [5, 6], [7, 8], [9, 10], [11, 12]]]])
    go(three, 3, [[[[1, 2, 5, 6, 9, 10], [3, 4, 7, 8, 11, 12]]]])


def test_helper(dev, rng):
    a = rng.standard_normal((2, 3, 4)).astype(np.float32)
    b = rng.standard_normal((2, 5, 4)).astype(np.float32)
    np.testing.assert_array_equal(kdml.join([a, b], -2, device=dev).numpy(), np.concatenate([a, b], -2))
    ta = dev.tensor(a)
    view = kdml.Tensor(ta.buffer, TD(DT.FLOAT32, (2, 4, 3), (12, 1, 4)), ta.offset)  # a transposed view
    c = np.swapaxes(a, 1, 2)
    np.testing.assert_array_equal(kdml.join([view, c, view], 2).numpy(), np.concatenate([c, c, c], 2))
    # out=: a strided output
    ob = dev.buffer(bytes(4 * 2 * 8 * 4 * 2))
    out = kdml.Tensor(ob, TD(DT.FLOAT32, (2, 8, 4), (64, 8, 2)))
    assert kdml.join([a, b], 1, out=out) is out
    np.testing.assert_array_equal(out.numpy(), np.concatenate([a, b], 1))
    ints = kdml.join([[1, 2], [3]], device=dev)
    assert ints.numpy().tolist() == [1, 2, 3]
    with pytest.raises(kdml.InvalidArgumentError, match=r"^tensors\[1\]: rank must equal"):
        kdml.join([a, b[0]], 0, device=dev)
    with pytest.raises(kdml.InvalidArgumentError, match=r"^tensors\[1\]: data type FLOAT16 differs from tensors\[0\]'s FLOAT32"):
        kdml.join([a, b.astype(np.float16)], 1, device=dev)
    with pytest.raises(kdml.InvalidArgumentError, match="^axis: must be in"):
        kdml.join([a, b], 3, device=dev)
    with pytest.raises(kdml.InvalidArgumentError, match="^tensors: must be a non-empty sequence"):
        kdml.join([], 0, device=dev)
    with pytest.raises(kdml.InvalidArgumentError, match=r"^input_tensors\[1\].sizes: must equal"):
        kdml.join([a, b], 2, device=dev)


def test_helper_pads_to_the_feature_levels_rank():
    """Below 4_1 JOIN takes 4 dimensions: the helper adds leading 1s."""
    d = kdml.Device(feature_level=FL.FL_3_0)
    try:
        a = np.arange(6, dtype=np.int16).reshape(2, 3)
        b = np.arange(4, dtype=np.int16).reshape(2, 2)
        np.testing.assert_array_equal(kdml.join([a, b], 1, device=d).numpy(), np.concatenate([a, b], 1))
        with pytest.raises(kdml.UnsupportedError, match=r"^input_tensors\[0\]: JOIN does not support INT64"):
            kdml.join([a.astype(np.int64)], 0, device=d)
    finally:
        d.close()


F = TD(DT.FLOAT32, (2, 3))


@pytest.mark.parametrize(("desc", "match"), [
    (kdml.JoinDesc((), F, 0), "^input_tensors: must hold at least one tensor"),
    (kdml.JoinDesc([F], F, 0), "^input_tensors: must be a tuple"),
    (kdml.JoinDesc((F, None), F, 0), r"^input_tensors\[1\]"),
    (kdml.JoinDesc((F, F), TD(DT.FLOAT32, (4, 3)), 2), r"^axis: must be in \[0, 2\)"),
    (kdml.JoinDesc((F, F), TD(DT.FLOAT32, (4, 3)), -1), r"^axis: must be in \[0, 2\)"),
    (kdml.JoinDesc((F, F), TD(DT.FLOAT32, (4, 3)), True), "^axis"),
    (kdml.JoinDesc((F, TD(DT.INT32, (2, 3))), TD(DT.FLOAT32, (4, 3)), 0), r"^input_tensors\[1\].data_type: must equal"),
    (kdml.JoinDesc((F, TD(DT.FLOAT32, (2, 3, 1))), TD(DT.FLOAT32, (4, 3)), 0),
     r"^input_tensors\[1\].sizes: dimension count must equal"),
    (kdml.JoinDesc((F, TD(DT.FLOAT32, (2, 4))), TD(DT.FLOAT32, (4, 3)), 0), r"^input_tensors\[1\].sizes: must equal"),
    (kdml.JoinDesc((F, F), TD(DT.FLOAT32, (5, 3)), 0), r"^output_tensor.sizes: axis 0 must be the sum of the inputs' \(4\)"),
    (kdml.JoinDesc((F, F), TD(DT.FLOAT32, (4, 3), (1, 1)), 0), "^output_tensor"),
])
def test_refusals(dev, desc, match):
    with pytest.raises(kdml.InvalidArgumentError, match=match):
        dev.compile(desc)


def test_feature_levels():
    four = TD(DT.INT8, (1, 1, 2, 3))
    for level, desc, match in (
        (FL.FL_1_0, kdml.JoinDesc((four,), four, 3), r"^input_tensors\[0\]: JOIN does not support INT8"),
        (FL.FL_2_1, kdml.JoinDesc((TD(DT.INT8, (1, 1, 1, 2, 3)),) * 2, TD(DT.INT8, (1, 1, 1, 2, 6)), 4),
         r"^input_tensors\[0\]: JOIN supports 4 dimensions"),
        (FL.FL_3_0, kdml.JoinDesc((TD(DT.INT8, (2, 3)),), TD(DT.INT8, (2, 3)), 0), r"^input_tensors\[0\]: JOIN supports 4 to 5"),
    ):
        with pytest.raises(kdml.UnsupportedError, match=match):
            compile_at_level(level, desc)
    compile_at_level(FL.FL_3_0, kdml.JoinDesc((TD(DT.INT8, (1, 1, 1, 2, 3)),) * 2, TD(DT.INT8, (1, 1, 1, 2, 6)), 4))


def test_binding_rules(dev, rng):
    a = TD(DT.FLOAT32, (2, 3))
    y = TD(DT.FLOAT32, (4, 3))
    op = dev.compile(kdml.JoinDesc((a, a), y, 0))
    assert op.input_fields == ("input_tensors[0]", "input_tensors[1]")
    buf = dev.buffer(bytes(256))
    ta = kdml.Tensor(buf, a, 0)
    with pytest.raises(kdml.InvalidArgumentError, match=r"^inputs: JOIN takes 2 \(input_tensors\[0\], input_tensors\[1\]\)"):
        op.execute([ta], [kdml.Tensor(buf, y, 64)])
    with pytest.raises(kdml.InvalidArgumentError, match=r"^output_tensor: overlaps input_tensors\[1\]"):
        op.execute([ta, kdml.Tensor(buf, a, 64)], [kdml.Tensor(buf, y, 64)])
    with pytest.raises(kdml.InvalidArgumentError, match=r"^input_tensors\[1\]: bound tensor"):
        op.execute([ta, kdml.Tensor(buf, TD(DT.FLOAT32, (3, 2)), 64)], [kdml.Tensor(buf, y, 128)])
