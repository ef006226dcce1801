"""The runtime at the device's speed (issue 22): transfers by byte range through staging,
pipelines shared per shader variant, the pipeline cache on disk, warm-up.

Behaviour only, never timings: a partial write touches only its range, chunked transfers
move every byte, a second execution on new buffers or a new shape builds no pipeline, a
new process reads the cache an earlier one wrote."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import kompute_dml as kdml
from kompute_dml.runtime import staging

DT = kdml.DataType


def _mm_desc(m: int, k: int = 16, n: int = 8) -> kdml.MatrixMultiplyIntegerToFloatDesc:
    f32 = kdml.TensorDesc(DT.FLOAT32, (1, 1, 1, 1))
    return kdml.MatrixMultiplyIntegerToFloatDesc(
        kdml.TensorDesc(DT.INT8, (1, 1, m, k)), f32, None, kdml.TensorDesc(DT.INT8, (1, 1, k, n)), f32, None, None,
        kdml.TensorDesc(DT.FLOAT32, (1, 1, m, n)),
    )


def _mm_run(dev: kdml.Device, op, m: int, rng: np.random.Generator, k: int = 16, n: int = 8) -> None:
    a = rng.integers(-128, 128, (1, 1, m, k), dtype=np.int8)
    b = rng.integers(-128, 128, (1, 1, k, n), dtype=np.int8)
    s = np.array([[[[0.5]]]], np.float32)
    out = dev.empty(kdml.TensorDesc(DT.FLOAT32, (1, 1, m, n)))
    op.execute([dev.tensor(a), dev.tensor(s), None, dev.tensor(b), dev.tensor(s), None, None], [out])
    expected = (a.astype(np.int64) @ b.astype(np.int64)).astype(np.float64) * 0.25
    np.testing.assert_array_equal(out.numpy(), expected.astype(np.float32))


def test_partial_write_touches_only_its_range(dev, rng):
    """A write of k bytes at an odd offset, after an operator wrote the buffer, changes those
    k bytes alone (nothing is read back and pushed whole)."""
    n = 64 << 10
    base = rng.integers(0, 256, n, dtype=np.uint8)
    src = dev.buffer(base)
    dst = dev.buffer(n)
    desc = kdml.TensorDesc(DT.FLOAT32, (n // 4,))
    dev.compile(kdml.ActivationIdentityDesc(desc, desc)).execute([kdml.Tensor(src, desc)], [kdml.Tensor(dst, desc)])
    patch = rng.integers(0, 256, 4096, dtype=np.uint8)
    dst.write(patch, offset=4099)
    expected = base.copy()
    expected[4099 : 4099 + 4096] = patch
    assert dst.read() == expected.tobytes()
    assert dst.read(4097, 5) == expected[4097:4102].tobytes()


@pytest.mark.parametrize("offset", [0, 3, 4096 + 1])
def test_chunked_transfers_move_every_byte(dev, rng, monkeypatch, offset):
    """Transfers larger than a staging chunk go in chunks over the slots, the CPU filling one
    while the device copies another; every byte arrives, whatever the alignment."""
    monkeypatch.setattr(staging, "CHUNK_BYTES", 4096)
    data = rng.integers(0, 256, 5 * 4096 + 123, dtype=np.uint8)
    buf = dev.buffer(data.size + offset + 7)
    before = buf.read()
    buf.write(data, offset=offset)
    out = np.empty_like(data)
    buf.read_into(out, offset=offset)
    np.testing.assert_array_equal(out, data)
    raw = np.frombuffer(buf.read(), np.uint8)
    np.testing.assert_array_equal(raw[:offset], np.frombuffer(before, np.uint8)[:offset])
    np.testing.assert_array_equal(raw[offset + data.size :], np.frombuffer(before, np.uint8)[offset + data.size :])


def test_host_array_is_read_and_written_by_the_device(dev, rng):
    """Device.host_array: uploads from it and downloads into it (also through a view at an
    offset) are exact; the staging slots are not used for them."""
    h = dev.host_array((3, 1000), np.float32)
    assert h.shape == (3, 1000) and h.dtype == np.float32 and not h.any()
    h[:] = rng.standard_normal((3, 1000)).astype(np.float32)
    t = dev.tensor(h[1:])  # a contiguous view inside the host memory
    np.testing.assert_array_equal(t.numpy(), h[1:])
    held = dev.stats()["staging_bytes"]
    back = dev.host_array(2000, np.float32)
    t.buffer.read_into(back)
    np.testing.assert_array_equal(back.reshape(2, 1000), h[1:])
    assert dev.stats()["staging_bytes"] == held


def test_host_array_transfers_repeated_and_released(dev, rng):
    """The same host array range moved again (a recorded transfer resubmitted) carries the
    array's current bytes each time, both ways; once the host array is released, no recorded
    transfer keeps its memory (Staging.forget)."""
    import gc
    import weakref

    h = dev.host_array(4096)
    buf = dev.buffer(4096 + 8)
    for _ in range(3):
        data = rng.integers(0, 256, 4096, dtype=np.uint8)
        h[:] = data
        buf.write(h, offset=8)
        assert buf.read(8, 4096) == data.tobytes()
        h[:] = 0
        buf.read_into(h, offset=8)
        np.testing.assert_array_equal(h, data)
    owner = h
    while isinstance(owner, np.ndarray):
        owner = owner.base
    mem = weakref.ref(owner)
    del owner
    recorded, serial = dev.engine.staging._recorded, mem().serial
    assert sorted(k[0] for k in recorded if serial in k[2]) == ["down", "up"]  # both ways recorded
    del h
    gc.collect()
    assert mem() is None
    assert not any(serial in k[2] for k in recorded)


def test_read_into_checks_its_argument(dev):
    buf = dev.buffer(64)
    with pytest.raises(kdml.InvalidArgumentError, match="out"):
        buf.read_into(np.empty(128, np.uint8))
    with pytest.raises(kdml.InvalidArgumentError, match="out"):
        buf.read_into(np.empty((8, 8), np.uint8)[:, ::2])


def test_new_buffers_and_shapes_build_no_pipeline(dev, rng):
    """One pipeline per shader variant: executing a compiled operator on new buffers, or
    another shape of the same kernel, builds none (only a descriptor set)."""
    _mm_run(dev, dev.compile(_mm_desc(8)), 8, rng)
    built = dev.stats()["pipelines_created"]
    _mm_run(dev, dev.compile(_mm_desc(8)), 8, rng)  # new buffers
    _mm_run(dev, dev.compile(_mm_desc(24)), 24, rng)  # a new M
    assert dev.stats()["pipelines_created"] == built


def test_warmup_builds_the_pipelines_first(rng):
    with kdml.Device() as dev:
        before = dev.stats()["pipelines_created"]
        assert dev.warmup([_mm_desc(40, 32, 24)]) >= 1
        built = dev.stats()["pipelines_created"]
        assert built > before
        _mm_run(dev, dev.compile(_mm_desc(40, 32, 24)), 40, rng, 32, 24)
        assert dev.stats()["pipelines_created"] == built


_CHILD = textwrap.dedent(
    """
    import json, numpy as np, kompute_dml as kdml
    f32 = kdml.TensorDesc(kdml.DataType.FLOAT32, (1, 1, 1, 1))
    desc = kdml.MatrixMultiplyIntegerToFloatDesc(
        kdml.TensorDesc(kdml.DataType.INT8, (1, 1, 8, 16)), f32, None,
        kdml.TensorDesc(kdml.DataType.INT8, (1, 1, 16, 8)), f32, None, None,
        kdml.TensorDesc(kdml.DataType.FLOAT32, (1, 1, 8, 8)))
    dev = kdml.Device()
    dev.warmup([desc])
    print(json.dumps(dev.stats()))
    if "KDML_TEST_LEAVE_OPEN" not in os.environ:
        dev.close()
    """
)


def _child(env: dict[str, str]) -> dict[str, int]:
    import json

    out = subprocess.run([sys.executable, "-c", "import os\n" + _CHILD], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("closed", [True, False], ids=["closed", "left-open-at-exit"])
def test_pipeline_cache_persists_across_processes(tmp_path, closed):
    """The cache file is written when the device goes: at Device.close, or from kp's exit
    callback for a device left open (kp patch level 9); a second process loads all of it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("VK_")}  # no validation layer: its own cache
    env["KDML_CACHE_DIR"] = str(tmp_path)
    if not closed:
        env["KDML_TEST_LEAVE_OPEN"] = "1"
    first = _child(env)
    files = list(tmp_path.glob("pipelines-*.bin"))
    assert len(files) == 1 and files[0].stat().st_size > 0
    assert first["pipeline_cache_loaded_bytes"] == 0
    second = _child(env)
    assert second["pipeline_cache_loaded_bytes"] == files[0].stat().st_size


def test_pipeline_cache_can_be_turned_off(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("VK_")}
    env["KDML_CACHE_DIR"] = "off"
    env["XDG_CACHE_HOME"] = str(tmp_path)
    env["HOME"] = str(tmp_path)
    assert _child(env)["pipeline_cache_loaded_bytes"] == 0
    assert not list(tmp_path.rglob("pipelines-*.bin"))


def test_repeated_helper_call_builds_and_uploads_nothing(dev, rng, monkeypatch):
    """kdml.matmul_integer_to_float called again with the same shapes, types and Python-number
    scales builds no descriptor, compiles nothing and uploads nothing (the scales live on the
    device); a new scale value is a new constant, and every result is exact."""
    from kompute_dml.device import memory
    from kompute_dml.functional import matmul_integer as functional_matmul

    a8 = rng.integers(-128, 128, (16, 32), dtype=np.int8)
    b8 = rng.integers(-128, 128, (32, 8), dtype=np.int8)
    a, b = dev.tensor(a8), dev.tensor(b8)
    ref = (a8.astype(np.int64) @ b8.astype(np.int64)).astype(np.float64)

    def expect(out, s1, s2):
        np.testing.assert_array_equal(out.numpy(), (ref * np.float32(s1) * np.float32(s2)).astype(np.float32))

    expect(kdml.matmul_integer_to_float(a, b, 0.5, 0.25, device=dev), 0.5, 0.25)
    writes, descs = [], []
    monkeypatch.setattr(memory.Buffer, "write", lambda self, *a, **k: writes.append(1))
    real_desc = functional_matmul.TensorDesc
    monkeypatch.setattr(functional_matmul, "TensorDesc", lambda *a, **k: descs.append(1) or real_desc(*a, **k))
    expect(kdml.matmul_integer_to_float(a, b, 0.5, 0.25, device=dev), 0.5, 0.25)
    assert writes == [] and descs == []
    monkeypatch.undo()
    expect(kdml.matmul_integer_to_float(a, b, 0.75, 0.25, device=dev), 0.75, 0.25)


def test_host_array_uploads_skip_the_staging_copy(dev, rng, monkeypatch):
    """A write from Device.host_array memory is copied by the device from that memory: the
    staging slots' copy is never called."""
    h = dev.host_array(4096, np.uint8)
    h[:] = rng.integers(0, 256, 4096, dtype=np.uint8)
    buf = dev.buffer(4096)
    chunked = []
    monkeypatch.setattr(staging.Staging, "_chunked", lambda self, *a: chunked.append(a))
    buf.write(h)
    t = dev.tensor(h)
    monkeypatch.undo()
    assert chunked == []
    assert buf.read() == h.tobytes() and t.numpy().tobytes() == h.tobytes()


def test_parallel_host_copy_moves_every_byte(monkeypatch, rng):
    monkeypatch.setattr(staging, "PARALLEL_BYTES", 1000)
    pool = staging.CopyPool(3)
    try:
        assert [pool.parts(n) for n in (999, 1000, 2_500, 100_003)] == [1, 1, 2, 3]  # parts of >= PARALLEL_BYTES
        for n in (999, 2_500, 100_003):
            src = rng.integers(0, 256, n, dtype=np.uint8)
            dst = np.zeros_like(src)
            staging.host_copy(dst, src, pool)
            np.testing.assert_array_equal(dst, src)
        assert pool._pool is not None and pool._pool._max_workers == 3  # the large one went over the threads
    finally:
        pool.close()
    assert pool._pool is None


def test_each_device_has_its_own_copy_threads(dev, monkeypatch, rng):
    monkeypatch.setattr(staging, "PARALLEL_BYTES", 1000)
    other = kdml.Device()
    copies = other.engine.staging.copies
    try:
        assert copies is not dev.engine.staging.copies
        copies.threads = 2  # (this host may have one core to spare: COPY_THREADS = 1)
        src = rng.integers(0, 256, 10_000, dtype=np.uint8)
        dst = np.zeros_like(src)
        copies.copy(dst, src)
        np.testing.assert_array_equal(dst, src)
        assert copies._pool is not None  # its own threads, made by its large copy
    finally:
        other.close()
    assert copies._pool is None  # closed with its device


def test_numpy_into_an_array(dev, rng):
    x = rng.standard_normal((4, 6)).astype(np.float32)
    t = dev.tensor(x)
    out = dev.host_array((4, 6), np.float32)
    assert t.numpy(out=out) is out
    np.testing.assert_array_equal(out, x)
    strided = kdml.Tensor(t.buffer, kdml.TensorDesc(DT.FLOAT32, (4, 3), (6, 2)))
    out2 = np.zeros((4, 3), np.float32)
    strided.numpy(out=out2)
    np.testing.assert_array_equal(out2, x[:, ::2])
    with pytest.raises(kdml.InvalidArgumentError, match="out"):
        t.numpy(out=np.zeros((6, 4), np.float32))


def test_repeated_transfers_reuse_their_recorded_commands(dev, rng):
    """The same range written or read again is resubmitted, not re-recorded; the records of a
    released buffer go with it; every transfer still moves its own bytes."""
    st = dev.engine.staging
    buf = dev.buffer(4096)
    for _ in range(3):
        data = rng.integers(0, 256, 1000, dtype=np.uint8)
        buf.write(data, offset=40)
        assert buf.read(40, 1000) == data.tobytes()
    keys = [k for k in st._recorded if buf.serial in k[2]]
    assert sorted(k[0] for k in keys) == ["down", "up"]
    serial = buf.serial
    del buf
    import gc

    gc.collect()
    assert not [k for k in st._recorded if serial in k[2]]


def test_a_damaged_or_foreign_cache_file_is_not_loaded(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("VK_")}
    env["KDML_CACHE_DIR"] = str(tmp_path)
    _child(env)
    (path,) = tmp_path.glob("pipelines-*.bin")
    good = path.read_bytes()
    for bad in (bytes(7), b"garbage" * 100, good[:16] + bytes(16) + good[32:]):  # short, junk, another UUID
        path.write_bytes(bad)
        assert _child(env)["pipeline_cache_loaded_bytes"] == 0
    path.write_bytes(good)
    assert _child(env)["pipeline_cache_loaded_bytes"] == len(good)


def test_a_recorded_program_moves_its_own_inputs_and_outputs(dev, rng):
    """Recording.copy_in / copy_out: the program copies host memory (Device.host_array) into
    its input and its output back, in its one submission; every run sees the host's new
    inputs, and host bytes outside the output's range stay as they were."""
    f32 = kdml.TensorDesc(DT.FLOAT32, (5, 7))
    x, y = dev.empty(f32), dev.empty(f32)
    ident = dev.compile(kdml.ActivationIdentityDesc(f32, f32))
    h_in = dev.host_array((5, 7), np.float32)
    h_out = dev.host_array(35 + 8, np.float32)
    h_out[:] = -7.0  # poison, and guards on both sides
    z = dev.empty(f32)
    with dev.capture() as rec:
        rec.copy_in(h_in, x)
        rec.execute(ident, [x], [y])
        y2 = kdml.add(y, y)  # functional helpers record too (a dispatch after a dispatch)
        rec.execute(ident, [y2], [z])
        rec.copy_out(z, h_out[4:39])
        prog = rec.compile()
    for _ in range(3):
        h_in[:] = rng.standard_normal((5, 7)).astype(np.float32)
        prog.run()
        np.testing.assert_array_equal(h_out[4:39].reshape(5, 7), h_in + h_in)
        assert (h_out[:4] == -7.0).all() and (h_out[39:] == -7.0).all()


def test_recorded_copies_check_their_arguments(dev):
    t = dev.empty(kdml.TensorDesc(DT.FLOAT32, (4, 4)))
    h = dev.host_array(16, np.float32)
    with dev.record() as rec:
        with pytest.raises(kdml.InvalidArgumentError, match="^host: must be a contiguous array inside"):
            rec.copy_in(np.zeros(16, np.float32), t)  # ordinary host memory
        with pytest.raises(kdml.InvalidArgumentError, match="^host: must be a contiguous"):
            rec.copy_out(t, dev.host_array(32, np.float32)[::2])
        with pytest.raises(kdml.InvalidArgumentError, match="^host: 60 bytes"):
            rec.copy_in(h[:15], t)
        with pytest.raises(kdml.InvalidArgumentError, match="^tensor: must be packed"):
            rec.copy_out(t[:, ::2], h[:8])
        with pytest.raises(kdml.InvalidArgumentError, match="^tensor: must be a kompute_dml Tensor"):
            rec.copy_in(h, np.zeros(16, np.float32))
        assert len(rec) == 0


def test_a_recorded_tensor_copy_moves_its_bytes_only(dev, rng):
    """Recording.copy_tensor: a packed tensor's bytes into another packed tensor of as many bytes
    (another shape, another offset), after what was recorded before it; the destination buffer's
    bytes around it stay as they were. Bad arguments raise before anything is recorded."""
    f32 = kdml.TensorDesc(DT.FLOAT32, (5, 7))
    x = dev.tensor(rng.standard_normal((5, 7)).astype(np.float32))
    ident = dev.compile(kdml.ActivationIdentityDesc(f32, f32))
    y = dev.empty(f32)
    buf = dev.tensor(np.full(64, -7.0, np.float32)).buffer
    dst = kdml.Tensor(buf, kdml.TensorDesc(DT.FLOAT32, (35,)), 16)
    with dev.record() as rec:
        rec.execute(ident, [x], [y])
        rec.copy_tensor(y, dst)
    got = np.frombuffer(buf.read(0, 256), np.float32)
    np.testing.assert_array_equal(got[4:39], x.numpy().reshape(-1))
    assert (got[:4] == -7.0).all() and (got[39:] == -7.0).all()
    with dev.record() as rec:
        with pytest.raises(kdml.InvalidArgumentError, match="^dst: 136 bytes, src's elements have 140"):
            rec.copy_tensor(y, kdml.Tensor(buf, kdml.TensorDesc(DT.FLOAT32, (34,)), 0))
        with pytest.raises(kdml.InvalidArgumentError, match="^src: must be packed"):
            rec.copy_tensor(y[:, ::2], dst)
        with pytest.raises(kdml.InvalidArgumentError, match="^dst: must be in another buffer"):
            rec.copy_tensor(kdml.Tensor(buf, kdml.TensorDesc(DT.FLOAT32, (35,)), 0), dst)
        with pytest.raises(kdml.InvalidArgumentError, match="^src: must be a kompute_dml Tensor"):
            rec.copy_tensor(np.zeros(35, np.float32), dst)
        assert len(rec) == 0


def test_a_first_transfer_records_nothing_of_its_own(rng, monkeypatch):
    """A range's first transfer goes through its slot's shared, re-recorded sequence and keeps no
    record (a plan's constants move once); the second records its own; chunked transfers over
    both slots move every byte either way; a buffer moved once is released as usual."""
    from kompute_dml.runtime import staging

    monkeypatch.setattr(staging, "CHUNK_BYTES", 4096)
    with kdml.Device() as dev:  # its own: the slots it makes are CHUNK_BYTES long
        _first_transfers(dev, rng)


def _first_transfers(dev, rng) -> None:
    st = dev.engine.staging
    buf = dev.buffer(64 << 10)
    data = rng.integers(0, 256, 20000, dtype=np.uint8)
    buf.write(data, offset=100)
    assert not [k for k in st._recorded if buf.serial in k[2]]
    assert buf.read(100, 20000) == data.tobytes()
    assert not [k for k in st._recorded if buf.serial in k[2]]
    data2 = rng.integers(0, 256, 20000, dtype=np.uint8)
    buf.write(data2, offset=100)  # the same ranges again: recorded now
    assert buf.read(100, 20000) == data2.tobytes()
    assert sorted({k[0] for k in st._recorded if buf.serial in k[2]}) == ["down", "up"]
    other = dev.buffer(8192)
    other.write(data[:5000], offset=7)  # a first transfer after the shared sequences were used
    assert other.read(7, 5000) == data[:5000].tobytes()
    live = dev.stats()["live_buffers"]
    del other
    import gc

    gc.collect()
    assert dev.stats()["live_buffers"] == live - 1
