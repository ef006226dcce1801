"""ACTIVATION_IDENTITY (seed 004) and the all-type COPY against a numpy reference:
every data type x dimension count x layout, random offsets, poisoned outputs, guard bytes."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import ALL_TYPES, assert_output, place, poison_against, random_strides, read_logical

import kompute_dml as kdml

DT = kdml.DataType
FL = kdml.FeatureLevel
LAYOUTS = ["packed", "strided_out", "strided_in", "broadcast_in", "both"]


def random_sizes(rng, rank, max_elems=3000):
    sizes = [int(rng.integers(1, 9)) for _ in range(rank)]
    while np.prod(sizes) > max_elems:
        sizes[int(np.argmax(sizes))] //= 2
    return tuple(max(1, s) for s in sizes)


def run_copy(dev, rng, desc_cls, dt, sizes, layout):
    in_strides = None
    out_strides = None
    if layout in ("strided_in", "both"):
        in_strides = random_strides(rng, sizes, allow_broadcast=False)
    if layout == "broadcast_in":
        in_strides = random_strides(rng, sizes, allow_broadcast=True)
    if layout in ("strided_out", "both"):
        out_strides = random_strides(rng, sizes, allow_broadcast=False)
    din = kdml.TensorDesc(dt, sizes, in_strides)
    dout = kdml.TensorDesc(dt, sizes, out_strides)
    x, x_raw = place(dev, rng, din)  # random bytes: every bit pattern, NaN payloads included
    expected = read_logical(x_raw, x.offset, din)
    y, _ = place(dev, rng, dout)
    before = poison_against(y, expected, rng)
    op = dev.compile(desc_cls(din, dout))
    op.execute([x], [y])
    assert_output(y, before, expected)
    # the input is untouched
    assert x.buffer.read() == x_raw


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("rank", range(1, 9))
@pytest.mark.parametrize("dt", [DT.FLOAT32, DT.FLOAT16], ids=lambda d: d.name)
def test_identity_matches_numpy(xdev, rng, dt, rank, layout):
    run_copy(xdev, rng, kdml.ActivationIdentityDesc, dt, random_sizes(rng, rank), layout)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("rank", [1, 2, 3, 4, 5, 8])
@pytest.mark.parametrize("dt", ALL_TYPES, ids=lambda d: d.name)
def test_copy_all_types(xdev, rng, dt, rank, layout):
    run_copy(xdev, rng, kdml.CopyDesc, dt, random_sizes(rng, rank), layout)


@pytest.mark.parametrize("dt", ALL_TYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("n", [1, 2, 3, 5, 15, 16, 17, 1000, 4099])
def test_copy_packed_tails(xdev, rng, dt, n):
    """Packed fast path: every length around the 16-byte vector and word boundaries."""
    run_copy(xdev, rng, kdml.CopyDesc, dt, (n,), "packed")


def test_identity_in_place(xdev, rng):
    desc = kdml.TensorDesc(DT.FLOAT16, (3, 5, 7), (70, 14, 2))
    x, raw = place(xdev, rng, desc)
    expected = read_logical(raw, x.offset, desc)
    op = xdev.compile(kdml.ActivationIdentityDesc(desc, desc))
    op.execute([x], [x])
    assert_output(x, raw, expected)


def test_large_copy_uses_2d_grid(dev, rng):
    """More than 65535 work groups (the smallest maxComputeWorkGroupCount Vulkan allows): the
    grid stays within the device's limits, folded into y where its x limit is passed
    (lavapipe; not on NVIDIA, whose x limit is 2^31 - 1). Transpose of 16.8M uint32."""
    cols = (65536 * 256) // 2 + 128
    x = rng.integers(0, 2**32, (cols, 2), dtype=np.uint32)
    t = dev.tensor(x)
    src = kdml.TensorDesc(DT.UINT32, (2, cols), (1, 2))  # the transpose of x
    dst = kdml.TensorDesc(DT.UINT32, (2, cols))
    y = dev.empty(dst)
    op = dev.compile(kdml.CopyDesc(src, dst))
    groups, limit = op.plans[0].groups, dev.limits["max_compute_work_group_count"]
    assert all(g <= m for g, m in zip(groups, limit))
    assert groups[1] > 1 if groups[0] * groups[1] > limit[0] else groups[1] == 1
    op.execute([kdml.Tensor(t.buffer, src)], [y])
    assert np.array_equal(np.frombuffer(y.buffer.read(), np.uint32).reshape(2, cols), x.T)


# ---- feature levels (seed 004's table) ----------------------------------------------
@pytest.mark.parametrize(
    "level,ok_ranks",
    [(FL.FL_1_0, {4}), (FL.FL_2_0, {4, 5}), (FL.FL_2_1, {4, 5}), (FL.FL_3_0, set(range(1, 9))),
     (FL.FL_6_2, set(range(1, 9)))],
)
def test_identity_feature_levels(level, ok_ranks):
    d = kdml.Device(feature_level=level)
    try:
        for rank in range(1, 9):
            desc = kdml.TensorDesc(DT.FLOAT32, (2,) * rank)
            if rank in ok_ranks:
                d.compile(kdml.ActivationIdentityDesc(desc, desc))
            else:
                with pytest.raises(kdml.UnsupportedError, match="dimensions"):
                    d.compile(kdml.ActivationIdentityDesc(desc, desc))
        for dt in set(DT) - {DT.FLOAT32, DT.FLOAT16}:
            desc = kdml.TensorDesc(dt, (1, 2, 3, 4))
            with pytest.raises(kdml.UnsupportedError, match=dt.name):
                d.compile(kdml.ActivationIdentityDesc(desc, desc))
    finally:
        d.close()


def test_identity_rejects_mismatch(dev):
    a = kdml.TensorDesc(DT.FLOAT32, (2, 3))
    with pytest.raises(kdml.InvalidArgumentError, match="output_tensor.data_type"):
        dev.compile(kdml.ActivationIdentityDesc(a, kdml.TensorDesc(DT.FLOAT16, (2, 3))))
    with pytest.raises(kdml.InvalidArgumentError, match="output_tensor.sizes"):
        dev.compile(kdml.ActivationIdentityDesc(a, kdml.TensorDesc(DT.FLOAT32, (3, 2))))
    with pytest.raises(kdml.InvalidArgumentError, match="output_tensor.sizes"):
        dev.compile(kdml.ActivationIdentityDesc(a, kdml.TensorDesc(DT.FLOAT32, (1, 2, 3))))
    with pytest.raises(kdml.InvalidArgumentError, match="output_tensor.strides"):
        dev.compile(kdml.ActivationIdentityDesc(a, kdml.TensorDesc(DT.FLOAT32, (2, 3), (0, 1))))
