"""Device limits: what is refused (buffers beyond maxMemoryAllocationSize, memory beyond the
Device's budget, an operator binding more of a tensor than maxStorageBufferRange where it does
not split it) and what is split (dispatches beyond maxComputeWorkGroupCount are folded into a
2-D grid; values beyond maxStorageBufferRange: tests/test_large_values.py). See
docs/reliability.md, docs/large_values.md."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import kompute_dml as kdml
import kompute_dml.runtime.budget as kbudget
from kompute_dml.runtime import grid_for

DT = kdml.DataType
TD = kdml.TensorDesc
MiB = 1 << 20


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


# ---- maxMemoryAllocationSize: refused; maxStorageBufferRange: bound as windows -------------------------
def _largest_buffer(limits) -> int:
    """Whole 32-bit words within maxMemoryAllocationSize rounded to 64 KiB (one allocation holds
    it) and within 4 GiB - 4; maxStorageBufferRange where the device reports no allocation size."""
    alloc = limits.get("max_memory_allocation_size")
    return min(alloc - alloc % 65536, 2**32 - 4) if alloc else limits["max_storage_buffer_range"] // 4 * 4


def test_buffer_beyond_the_largest_allocation_is_refused(dev):
    largest = _largest_buffer(dev.limits)
    before = dev.stats()["allocated_bytes"]
    with pytest.raises(kdml.InvalidArgumentError, match=rf"^nbytes: .*the largest buffer on this device is {largest}"):
        dev.buffer(largest + 1)
    assert dev.stats()["allocated_bytes"] == before


def test_buffer_beyond_max_storage_buffer_range_is_made(dev):
    """A buffer one word past maxStorageBufferRange (128 MiB on lavapipe) is made (it is bound a
    window at a time); an operator that takes its tensors whole refuses a tensor that large at
    compile (UnsupportedError naming the field), before anything runs."""
    limit = dev.limits["max_storage_buffer_range"]
    if limit + 4 > _largest_buffer(dev.limits):
        pytest.skip("maxStorageBufferRange is the largest allocation here")
    buf = dev.buffer(limit + 4)
    buf.write(b"\x01\x02\x03\x04", limit)
    assert buf.read(limit - 4) == b"\0\0\0\0\x01\x02\x03\x04"
    big = TD(DT.FLOAT32, (limit // 4 + 1,))
    with pytest.raises(kdml.UnsupportedError, match=r"^input_tensor: .*maxStorageBufferRange.*CUMULATIVE_SUMMATION"):
        dev.compile(kdml.CumulativeSummationDesc(big, big, 0))
    del buf
    gc.collect()


def test_buffer_of_exactly_the_largest_allocation(dev):
    """The largest buffer the device makes, written and read at its end (sizes are 64-bit end to
    end), where it is at most 1 GiB (lavapipe's 2 GiB and NVIDIA's 4 GiB - 2 MiB are left out on
    a shared machine). Made without zeroing: only its last bytes are touched."""
    largest = _largest_buffer(dev.limits)
    if largest > 1 << 30:
        pytest.skip("the largest allocation is beyond what this test should take of a shared machine")
    buf = kdml.Buffer(dev, largest, zeroed=False)
    buf.write(b"\x01\x02\x03\x04", largest - 4)
    assert buf.read(largest - 4) == b"\x01\x02\x03\x04"
    del buf
    gc.collect()


# ---- maxComputeWorkGroupCount: split into a 2-D grid ------------------------------------------------
def test_grid_for_folds_beyond_the_limit():
    assert grid_for(65535 * 256, 256) == (65535, 1, 1)
    gx, gy, gz = grid_for(65535 * 256 + 1, 256)
    assert gy == 2 and gx <= 65535 and gx * gy * 256 >= 65535 * 256 + 1 and gz == 1
    gx, gy, _ = grid_for(2**32 - 1, 64)
    assert gx <= 65535 and gy <= 65535 and gx * gy * 64 >= 2**32 - 1


@pytest.mark.parametrize("dt", [DT.UINT8, DT.FLOAT16], ids=lambda d: d.name)
def test_subword_copy_beyond_max_work_group_count(dev, rng, dt):
    """A strided copy of a sub-word type needing more than 65535 work groups of 256 (the
    smallest maxComputeWorkGroupCount Vulkan allows): the grid stays within this device's
    limits, folded into y where it needs more than its x limit. The transpose of a (cols, 2)
    array."""
    per_invocation = 4 // dt.size
    cols = 65535 * 256 * per_invocation // 2 + 256
    x = rng.integers(0, 256, cols * 2 * dt.size, dtype=np.uint8).view(dt.numpy_dtype).reshape(cols, 2)
    src = TD(dt, (2, cols), (1, 2))  # the transpose of x
    dst = TD(dt, (2, cols))
    op = dev.compile(kdml.CopyDesc(src, dst))
    limit = dev.limits["max_compute_work_group_count"]
    groups = op.plans[0].groups
    assert all(g <= m for g, m in zip(groups, limit))
    if groups[0] * groups[1] * groups[2] > limit[0]:
        assert groups[1] > 1
    guard = 64
    ybuf = dev.buffer(np.full(dst.byte_size + guard, 0xA5, np.uint8))
    op.execute([kdml.Tensor(dev.tensor(x).buffer, src)], [kdml.Tensor(ybuf, dst)])
    raw = np.frombuffer(ybuf.read(), np.uint8)
    assert (raw[dst.byte_size:] == 0xA5).all(), "guard bytes after the output changed"
    got = raw[: 2 * cols * dt.size].view(f"u{dt.size}").reshape(2, cols)
    assert np.array_equal(got, x.T.view(f"u{dt.size}"))


def test_diagonal_of_67m_elements(dev):
    """DIAGONAL_MATRIX over a UINT8 matrix of 67 M elements (rows of odd length: runs that
    do not start on word boundaries); the grid stays within maxComputeWorkGroupCount."""
    rows, cols = 8192, 8193
    desc = TD(DT.UINT8, (rows, cols))
    op = dev.compile(kdml.DiagonalMatrixDesc(desc, offset=3, value=7.9))
    limit = dev.limits["max_compute_work_group_count"]
    assert all(g <= m for g, m in zip(op.plans[0].groups, limit))
    y = dev.buffer(np.full(desc.byte_size + 64, 0xA5, np.uint8))
    op.execute([], [kdml.Tensor(y, desc)])
    raw = np.frombuffer(y.read(), np.uint8)
    assert (raw[desc.byte_size :] == 0xA5).all()
    assert np.array_equal(raw[: rows * cols].reshape(rows, cols), 7 * np.eye(rows, cols, 3, dtype=np.uint8))


# ---- memory exhaustion: OutOfMemoryError, device still usable --------------------------------------
def _identity_works(d: kdml.Device) -> None:
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    y = kdml.identity(d.tensor(x))
    assert np.array_equal(y.numpy(), x)


def test_out_of_memory_at_budget_then_recovers():
    d = kdml.Device(memory_budget=8 * MiB)
    try:
        bufs = []
        with pytest.raises(kdml.OutOfMemoryError, match="memory budget") as ei:
            for _ in range(100):
                bufs.append(d.buffer(MiB))
        assert isinstance(ei.value, MemoryError) and isinstance(ei.value, kdml.DMLError)
        assert 6 <= len(bufs) <= 8  # each buffer costs its size (device memory only, no staging copy)
        bufs[0].write(b"still here")
        assert bufs[0].read(0, 10) == b"still here"
        _identity_works(d)
        n = len(bufs)
        bufs.clear()
        gc.collect()
        # the device's own 16-byte dummy, what the functional helpers keep for reuse, and the spares (runtime/later.py)
        assert d.stats()["live_buffers"] == 1 + d.stats()["pooled_buffers"] + d.stats()["spare_buffers"]
        again = [d.buffer(MiB) for _ in range(n)]  # the memory came back to the budget
        _identity_works(d)
        del again
    finally:
        d.close()


def test_out_of_memory_when_the_host_runs_low(monkeypatch):
    """On a CPU device the 'device memory' is this process's RAM: an allocation that would
    leave the host without headroom is refused before the driver is asked (kp 0.9 ignores
    vkAllocateMemory's result and crashes on a failed allocation)."""
    d = kdml.Device()
    try:
        if d.device_type != "cpu":
            pytest.skip("host-memory check applies to CPU Vulkan devices")
        monkeypatch.setattr(kbudget, "host_available_bytes", lambda: 600 * MiB)
        small = d.buffer(MiB)  # 1 MiB + 512 MiB headroom fits in 600 MiB
        with pytest.raises(kdml.OutOfMemoryError, match="host"):
            d.buffer(96 * MiB)
        monkeypatch.undo()
        small.write(b"ok")
        _identity_works(d)
    finally:
        d.close()


@pytest.mark.slow
def test_out_of_memory_with_the_default_budget():
    """Allocate 120 MiB buffers until the default budget (the device's memory heaps: 2 GiB on
    lavapipe) refuses; the process stays alive, RSS stays near the budget, everything is
    freed afterwards and the device works."""
    d = kdml.Device()
    try:
        if d.device_type != "cpu":
            # A GPU's default budget is its heaps (186 GB on an H100: device-local plus host):
            # filling it would take the host's RAM. The budget rule
            # itself is tested on every device with an explicit budget (test above).
            pytest.skip(f"filling the default budget ({d.memory_budget >> 30} GiB) of a {d.device_type} "
                        "device takes the host's memory")
        budget = d.memory_budget
        assert budget == sum(d.info.memory_heaps)
        rss0 = _rss()
        bufs = []
        with pytest.raises(kdml.OutOfMemoryError, match="memory budget"):
            for _ in range(64):
                bufs.append(d.buffer(120 * MiB))
        peak = _rss() - rss0
        print(f"\n{len(bufs)} buffers of 120 MiB before OutOfMemoryError; budget {budget >> 20} MiB, "
              f"RSS grew {peak >> 20} MiB")
        assert len(bufs) == budget // (120 * MiB) or len(bufs) == budget // (120 * MiB) - 1
        assert peak <= budget + 256 * MiB
        bufs[-1].write(b"last")
        assert bufs[-1].read(0, 4) == b"last"
        bufs.clear()
        gc.collect()
        assert d.stats()["allocated_bytes"] == 16  # the dummy buffer only
        _identity_works(d)
    finally:
        d.close()
