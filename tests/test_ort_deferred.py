"""The device-memory provider's small host writes (kompute_dml/ort/deferred.py): kept on the host until
the device reads the buffer, and every read, on the host or the device, sees the bytes in write order."""

from __future__ import annotations

import sys

import numpy as np
import pytest

pytest.importorskip("onnx")
plugin = pytest.importorskip("kompute_dml.ort.plugin")
deferred = pytest.importorskip("kompute_dml.ort.deferred")


@pytest.fixture()
def factory():
    return plugin.Factory("kdml-test", device_memory=True)


def _host(arr: np.ndarray) -> memoryview:
    return memoryview(np.ascontiguousarray(arr).reshape(-1).view(np.uint8))


def _read(factory, buffer, offset, nbytes) -> np.ndarray:
    out = np.full(nbytes, 0xEE, np.uint8)
    factory.copy([((buffer, offset), memoryview(out), nbytes)])
    return out


def test_a_small_write_is_read_back_from_the_host_and_reaches_the_device_before_a_device_copy(factory):
    buf = factory.alloc(0, 256)
    data = np.arange(8, dtype=np.int64)
    factory.copy([(_host(data), (buf, 64), 64)])
    assert deferred.at(buf, 64, 64) is not None  # kept, not written
    np.testing.assert_array_equal(_read(factory, buf, 64, 64).view(np.int64), data)
    other = factory.alloc(0, 256)
    factory.copy([((buf, 64), (other, 0), 64)])  # the device reads buf: written first
    assert deferred.at(buf, 64, 64) is None
    np.testing.assert_array_equal(np.frombuffer(other.read(0, 64), np.int64), data)


def test_writes_land_in_order(factory):
    buf = factory.alloc(0, 256)
    first, second = np.full(16, 1, np.uint8), np.arange(16, dtype=np.uint8)
    factory.copy([(_host(first), (buf, 0), 16)])
    factory.copy([(_host(second), (buf, 8), 16)])  # overlaps the first's last 8 bytes: the first goes down
    factory.copy([(_host(np.full(4, 9, np.uint8)), (buf, 100), 4)])
    want = np.concatenate([first[:8], second])
    np.testing.assert_array_equal(_read(factory, buf, 0, 24), want)  # partly on the device, partly kept
    deferred.flush(buf)
    np.testing.assert_array_equal(np.frombuffer(buf.read(0, 24), np.uint8), want)
    assert buf.read(100, 4) == bytes([9] * 4)


def test_a_large_write_goes_to_the_device_after_what_was_kept(factory):
    buf = factory.alloc(0, 3 * deferred.SMALL)
    factory.copy([(_host(np.full(8, 5, np.uint8)), (buf, 0), 8)])
    big = np.arange(2 * deferred.SMALL, dtype=np.uint32).view(np.uint8)[:2 * deferred.SMALL]
    factory.copy([(_host(big), (buf, 4), big.nbytes)])
    got = np.frombuffer(buf.read(0, 4 + big.nbytes), np.uint8)
    np.testing.assert_array_equal(got[:4], [5] * 4)
    np.testing.assert_array_equal(got[4:], big)


def test_a_buffer_handed_out_again_forgets_its_bytes_and_is_not_kept_alive(factory):
    buf = factory.alloc(0, 64)
    refs = sys.getrefcount(buf)
    factory.copy([(_host(np.ones(8, np.int64)), (buf, 0), 64)])
    assert sys.getrefcount(buf) == refs  # held weakly: onnxruntime's free gives it back to the pool
    deferred.forget(buf)
    assert deferred.at(buf, 0, 64) is None
