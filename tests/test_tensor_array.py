"""Tensors as arrays (issue 25, item 1): the array attributes, numpy's protocol, repr, basic
indexing (views where DirectML can bind them, copies elsewhere), strict writes."""

from __future__ import annotations

import numpy as np
import pytest

import kompute_dml as kdml
from kompute_dml.device import views

IAE = kdml.InvalidArgumentError


def test_array_attributes(dev):
    a = np.arange(24, dtype=np.int16).reshape(2, 3, 4)
    t = dev.tensor(a)
    assert t.dtype == np.dtype(np.int16) and isinstance(t.dtype, np.dtype)
    assert (t.shape, t.ndim, t.size, t.nbytes, len(t)) == ((2, 3, 4), 3, 24, 48, 2)
    assert t.device is dev


def test_nbytes_counts_the_elements_not_the_bound_range(dev):
    desc = kdml.TensorDesc(kdml.DataType.FLOAT32, (2, 3), (8, 2))  # strided: spans 15 elements
    t = dev.empty(desc)
    assert t.nbytes == 24 and t.size == 6 and desc.byte_size == 52


def test_numpy_protocol_downloads(dev, rng):
    a = rng.standard_normal((3, 5)).astype(np.float32)
    t = dev.tensor(a)
    got = np.asarray(t)
    assert got.dtype == np.float32 and got.shape == (3, 5)
    np.testing.assert_array_equal(got, a)
    np.testing.assert_array_equal(np.asarray(t, dtype=np.float64), a.astype(np.float64))
    np.testing.assert_array_equal(np.array(t, copy=True), a)
    with pytest.raises(ValueError, match="without a copy"):
        np.array(t, copy=False)
    got = np.add(t, 1)  # numpy's ufuncs run on the device (tests/test_tensor_ops.py): a Tensor back
    assert isinstance(got, kdml.Tensor)
    np.testing.assert_array_equal(got.numpy(), a + 1)


def test_repr_shows_values_and_device(dev):
    t = dev.tensor(np.array([[1.5, -2.0], [3.0, 4.25]], np.float32))
    r = repr(t)
    assert "1.5" in r and "4.25" in r and "-2." in r
    assert "float32" in r and dev.name in r and "(2, 2)" in r
    big = repr(dev.tensor(np.arange(10000, dtype=np.int32)))
    assert "..." in big and "9999" in big and "5000" not in big  # summarised as numpy does


def test_repr_of_a_closed_device_does_not_raise():
    d = kdml.Device()
    t = d.tensor(np.ones(3, np.float32))
    d.close()
    assert "unreadable" in repr(t)


# ---- indexing ---------------------------------------------------------------------------------
KEYS = [
    (slice(1, None), slice(None, None, 2)),  # the t[1:, ::2]
    0, -1, 3, (2, 5), (1, slice(2, 7)), (Ellipsis, 1), (Ellipsis, slice(None, None, 3)),
    (None,), (slice(None), None, slice(1, 3)), (slice(None, None, -1),), (slice(None), slice(None, None, -2)),
    (slice(1, 3), Ellipsis, None), (slice(0, 4, 2), 4), (-2, slice(-3, None)),
]


@pytest.mark.parametrize("key", KEYS, ids=repr)
@pytest.mark.parametrize("dtype", [np.float32, np.int8, np.float64])
def test_basic_indexing_matches_numpy(dev, rng, key, dtype):
    a = rng.integers(-100, 100, (4, 8)).astype(dtype)
    t = dev.tensor(a)
    v = t[key]
    want = a[key]
    assert v.shape == want.shape  # every dimension indexed by an integer: 0-d, as numpy and v.dtype == a.dtype
    np.testing.assert_array_equal(v.numpy(), want)
    np.testing.assert_array_equal(np.asarray(v), want)


def test_aligned_slices_are_views_sharing_the_buffer(dev):
    a = np.arange(64, dtype=np.float32).reshape(8, 8)  # a row is 32 bytes
    t = dev.tensor(a)
    v = t[2:6, ::2]  # first element at byte 64: bindable
    assert v.buffer is t.buffer and v.offset == 64 and v.desc.strides == (8, 2)
    # writing through a view of the parent shows in the parent
    row = t[3]
    assert row.buffer is t.buffer
    row.write_numpy(np.full(8, -1, np.float32))
    want = a.copy()
    want[3] = -1
    np.testing.assert_array_equal(t.numpy(), want)
    np.testing.assert_array_equal(v.numpy(), want[2:6, ::2])
    # a view feeds an operator like any tensor
    np.testing.assert_array_equal(kdml.copy(v).numpy(), want[2:6, ::2])


def test_unaligned_slices_take_a_device_copy(dev, monkeypatch):
    a = np.arange(24, dtype=np.float32).reshape(4, 6)  # a row is 24 bytes: row 1 is off the grid
    t = dev.tensor(a)
    calls = []
    real = views._device_copy
    monkeypatch.setattr(views, "_device_copy", lambda *args: calls.append(args) or real(*args))
    v = t[1:, ::2]
    assert calls and v.buffer is not t.buffer and v.offset % 16 == 0
    np.testing.assert_array_equal(v.numpy(), a[1:, ::2])
    # the copy is its own: writing it leaves the parent alone
    v.write_numpy(np.zeros((3, 3), np.float32))
    np.testing.assert_array_equal(t.numpy(), a)


def test_negative_steps_take_a_host_round_trip(dev, monkeypatch):
    a = np.arange(12, dtype=np.int32).reshape(3, 4)
    t = dev.tensor(a)
    monkeypatch.setattr(views, "_device_copy", lambda *args: pytest.fail("a negative stride has no device copy"))
    v = t[::-1, 1:3]
    assert v.buffer is not t.buffer
    np.testing.assert_array_equal(v.numpy(), a[::-1, 1:3])


def test_indexing_errors(dev):
    t = dev.tensor(np.zeros((3, 4), np.float32))
    with pytest.raises(IndexError, match="out of bounds"):
        t[3]
    with pytest.raises(IndexError, match="too many indices"):
        t[0, 0, 0]
    with pytest.raises(IAE, match="index: slice .* is empty"):
        t[2:1]
    with pytest.raises(IAE, match="index: only basic indexing"):
        t[[0, 1]]
    with pytest.raises(IAE, match="index: only basic indexing"):
        t[True]
    with pytest.raises(IAE, match="single ellipsis"):
        t[..., ...]
    with pytest.raises(IAE, match="at most 8"):
        t[None, None, None, None, None, None, None]
    assert [r.numpy().tolist() for r in t] == [[0.0] * 4] * 3  # iteration stops at IndexError


# ---- strict writes ------------------------------------------------------------------------------
@pytest.mark.parametrize("value,dtype,rule", [
    (np.array([300, 1], np.int64), np.int8, "'safe' casting"),           # the issue: 300 stored as 44
    (np.array([1e40, 1.0]), np.float32, "'safe' casting"),               # the issue: 1e40 became inf
    ([300, 1], np.int8, "do not fit int8"),
    ([1e40, 1.0], np.float32, "would become inf"),
    ([1.5, 2.0], np.int32, "non-integral"),
    ([2**53 + 1, 0], np.float64, "cannot represent exactly"),
    (np.array([1, 2], np.uint64), np.int64, "'safe' casting"),
])
def test_write_refuses_value_changing_casts(dev, value, dtype, rule):
    t = dev.tensor(np.array([7, 7], dtype))
    with pytest.raises(IAE, match=f"^array: .*{rule}"):
        t.write_numpy(value)
    np.testing.assert_array_equal(t.numpy(), np.array([7, 7], dtype))  # nothing written


def test_write_refuses_another_shape_or_size(dev):
    t = dev.tensor(np.zeros((2, 3), np.float32))
    with pytest.raises(IAE, match=r"array: has shape \(3, 2\), the tensor \(2, 3\): another shape"):
        t.write_numpy(np.ones((3, 2), np.float32))  # the issue: it went in reshaped
    with pytest.raises(IAE, match="another size"):
        t.write_numpy(np.ones(5, np.float32))
    np.testing.assert_array_equal(t.numpy(), np.zeros((2, 3), np.float32))


@pytest.mark.parametrize("value,dtype,want", [
    (np.array([1, -2], np.int8), np.int32, [1, -2]),                   # safe cast
    (np.array([1.5, 2], np.float16), np.float32, [1.5, 2]),
    ([3, 4], np.int8, [3, 4]),                                          # Python ints that fit
    ([0.1, 2.0], np.float32, np.array([0.1, 2.0], np.float32)),         # Python floats round to nearest
    ([2.0, -3.0], np.int16, [2, -3]),                                   # integral Python floats
    ([True, False], np.uint8, [1, 0]),
])
def test_write_takes_value_preserving_conversions(dev, value, dtype, want):
    t = dev.tensor(np.zeros(2, dtype))
    t.write_numpy(value)
    np.testing.assert_array_equal(t.numpy(), np.asarray(want, dtype))


def test_write_cast_true_converts_like_astype(dev):
    t = dev.tensor(np.zeros(3, np.int8))
    src = np.array([300, -129, 5], np.int64)
    t.write_numpy(src, cast=True)
    np.testing.assert_array_equal(t.numpy(), src.astype(np.int8))  # [44, 127, 5]: numpy's wrap
    one = dev.tensor(np.zeros(1, np.float32))
    one.write_numpy(2.5)  # a scalar fills a one-element tensor
    assert one.numpy().tolist() == [2.5]


def test_the_readme_example_of_tensors_as_arrays_runs():
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    block = re.search(r"## Tensors as arrays\n.*?```python\n(.*?)```", text, re.S)
    assert block, "README.md has no python block under 'Tensors as arrays'"
    scope: dict = {}
    exec(compile(block.group(1), "README.md", "exec"), scope)
    assert scope["row"].buffer is scope["t"].buffer and scope["v"].buffer is not scope["t"].buffer
