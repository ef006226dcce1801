"""Runtime: descriptors and their size formula, devices, buffers, recordings with
dependent dispatches (checked by synchronization validation)."""

from __future__ import annotations

import numpy as np
import pytest

import kompute_dml as kdml

DT = kdml.DataType


# ---- DMLCalcBufferTensorSize: the examples of notes/directml.md -----------------------
@pytest.mark.parametrize(
    "dt,sizes,strides,expected",
    [
        (DT.FLOAT32, (1, 3, 224, 224), None, 602112),
        (DT.FLOAT16, (3,), None, 8),
        (DT.FLOAT32, (2, 3), (5, 1), 32),
        (DT.UINT8, (1,), None, 4),
        (DT.INT64, (2, 2), (0, 0), 8),
        (DT.UINT8, (65536, 65536), (65536, 1), 2**32),  # past 32 bits: exact in Python ints
    ],
)
def test_calc_buffer_tensor_size(dt, sizes, strides, expected):
    assert kdml.calc_buffer_tensor_size(dt, sizes, strides) == expected


def test_desc_defaults_and_hash():
    a = kdml.TensorDesc(DT.FLOAT32, [2, 3])
    b = kdml.TensorDesc(DT.FLOAT32, (2, 3), None, 24)
    assert a == b and hash(a) == hash(b)
    assert a.total_tensor_size_in_bytes == 24
    assert kdml.DataType.from_numpy(np.int16) is DT.INT16
    assert DT.FLOAT16.numpy_dtype == np.float16 and DT.UINT64.size == 8
    assert kdml.FeatureLevel.FL_6_2 == 0x6200


@pytest.mark.parametrize(
    "kwargs,field",
    [
        (dict(sizes=(0, 3)), "sizes[0]"),
        (dict(sizes=()), "sizes"),
        (dict(sizes=(1,) * 9), "sizes"),
        (dict(sizes=(2, 3), strides=(1,)), "strides"),
        (dict(sizes=(2, 3), total_tensor_size_in_bytes=20), "total_tensor_size_in_bytes"),
        (dict(sizes=(2, 3), guaranteed_base_offset_alignment=3), "guaranteed_base_offset_alignment"),
        (dict(sizes=(2, 3), guaranteed_base_offset_alignment=2), "guaranteed_base_offset_alignment"),
        (dict(sizes=(65536, 65536)), "sizes"),
        (dict(sizes=(2, 3), flags=4), "flags"),
    ],
)
def test_desc_rules_raise_at_compile(dev, kwargs, field):
    bad = kdml.TensorDesc(DT.FLOAT32, **kwargs)
    good = kdml.TensorDesc(DT.FLOAT32, (2, 3))
    with pytest.raises(kdml.InvalidArgumentError, match=f"input_tensor.{field.split('[')[0]}"):
        dev.compile(kdml.ActivationIdentityDesc(bad, good))


def test_limits(dev):
    assert dev.limits["max_storage_buffer_range"] >= 2**27
    assert dev.limits["max_push_constants_size"] >= 128
    assert len(dev.limits["max_compute_work_group_count"]) == 3
    assert kdml.list_devices()[0]["name"] == dev.name


def test_buffer_roundtrip(dev, rng):
    data = rng.integers(0, 256, 1000, dtype=np.uint8)
    buf = dev.buffer(data)
    assert buf.nbytes == 1000 and buf.read() == data.tobytes()
    buf.write(b"\x01\x02\x03", offset=997)
    assert buf.read(995, 5) == bytes([data[995], data[996], 1, 2, 3])
    with pytest.raises(kdml.InvalidArgumentError):
        buf.write(b"\x00" * 4, offset=998)
    with pytest.raises(kdml.InvalidArgumentError):
        buf.read(990, 20)


def test_dependent_chain_in_one_recording(dev, rng):
    """A -> B -> C -> D -> A: each dispatch reads what the previous one wrote. Barriers
    make it correct; synchronization validation checks there is no hazard."""
    n = 4099
    x = rng.standard_normal(n).astype(np.float32)
    bufs = [dev.tensor(x)] + [dev.empty(kdml.TensorDesc(DT.FLOAT32, (n,))) for _ in range(3)]
    rev = kdml.TensorDesc(DT.FLOAT32, (n,), (1,))
    op = dev.compile(kdml.ActivationIdentityDesc(rev, rev))
    with dev.record() as rec:
        for i in range(8):
            rec.execute(op, [bufs[i % 4]], [bufs[(i + 1) % 4]])
    for b in bufs:
        assert np.array_equal(b.numpy(), x)


def test_recording_discarded_on_error(dev, rng):
    x = dev.tensor(np.ones(8, np.float32))
    y = dev.tensor(np.zeros(8, np.float32))
    op = dev.compile(kdml.ActivationIdentityDesc(x.desc, y.desc))
    with pytest.raises(kdml.InvalidArgumentError), dev.record() as rec:
        rec.execute(op, [x], [y])
        rec.execute(op, [x], [dev.tensor(np.zeros(4, np.float32))])
    assert not y.numpy().any()  # nothing was submitted


def test_binding_must_match_compiled_desc(dev):
    x = dev.tensor(np.ones((2, 4), np.float32))
    y = dev.tensor(np.zeros((2, 4), np.float32))
    op = dev.compile(kdml.ActivationIdentityDesc(x.desc, y.desc))
    with pytest.raises(kdml.InvalidArgumentError, match="output_tensor"):
        op.execute([x], [dev.tensor(np.zeros((4, 2), np.float32))])
    with pytest.raises(kdml.InvalidArgumentError, match="input_tensor"):
        op.execute([None], [y])
    with pytest.raises(kdml.InvalidArgumentError, match="outputs"):
        op.execute([x], [])
    assert not y.numpy().any()
    op.execute([x], [y])
    assert y.numpy().all()


def test_output_may_not_overlap_input_except_in_place(dev):
    buf = dev.buffer(64)
    d = kdml.TensorDesc(DT.FLOAT32, (8,))
    a = kdml.Tensor(buf, d, 0)
    b = kdml.Tensor(buf, d, 16)
    op = dev.compile(kdml.ActivationIdentityDesc(d, d))
    with pytest.raises(kdml.InvalidArgumentError, match="overlaps"):
        op.execute([a], [b])
    op.execute([a], [a])


def test_offsets_must_be_aligned(dev):
    buf = dev.buffer(64)
    with pytest.raises(kdml.InvalidArgumentError, match="16"):
        kdml.Tensor(buf, kdml.TensorDesc(DT.FLOAT32, (2,)), 8)
    with pytest.raises(kdml.InvalidArgumentError, match="guaranteed_base_offset_alignment"):
        kdml.Tensor(buf, kdml.TensorDesc(DT.FLOAT32, (2,), guaranteed_base_offset_alignment=32), 16)
    with pytest.raises(kdml.InvalidArgumentError, match="exceeds"):
        kdml.Tensor(buf, kdml.TensorDesc(DT.FLOAT32, (16,)), 16)


def test_missing_spirv_is_a_clear_error():
    from kompute_dml.runtime.shaders import ShaderBuildError, load_spirv

    with pytest.raises(ShaderBuildError, match="make spirv"):
        load_spirv("no_such_variant")


def test_stale_spirv_is_a_clear_error(tmp_path, monkeypatch):
    """Editing a shader without rebuilding is refused, naming the fix."""
    import shutil

    from kompute_dml.runtime import shaders

    root = shaders.SOURCE_DIR.parent
    shutil.copytree(root / "shaders", tmp_path / "shaders")
    shutil.copytree(root / "tools", tmp_path / "tools")
    src = tmp_path / "shaders" / "copy.comp"
    src.write_text(src.read_text() + "\n// edited\n")
    monkeypatch.setattr(shaders, "SOURCE_DIR", tmp_path / "shaders")
    shaders.load_spirv.cache_clear()
    shaders._builder.cache_clear()
    try:
        with pytest.raises(shaders.ShaderBuildError, match=r"stale.*make spirv"):
            shaders.load_spirv("copy_b8")
    finally:
        shaders.load_spirv.cache_clear()
        shaders._builder.cache_clear()


def test_staleness_check_skipped_only_after_a_build(tmp_path):
    """The per-variant digests are skipped only where the manifest is newer than every file the
    build reads: a shader, an ops module or a contract file written after it brings them back."""
    import os

    from kompute_dml.runtime import shaders

    pkg, src = tmp_path / "kompute_dml", tmp_path / "shaders"
    for d in (pkg / "spirv", pkg / "ops" / "contract", src / "sub", tmp_path / "tools"):
        d.mkdir(parents=True)
    files = [src / "a.comp", src / "sub" / "b.glsl", pkg / "ops" / "x.py", pkg / "ops" / "contract" / "c.py",
             tmp_path / "tools" / "build_spirv.py"]
    for f in files:
        f.write_text("x")
        os.utime(f, ns=(10**18, 10**18))
    manifest = pkg / "spirv" / "manifest.json"
    manifest.write_text("{}")
    os.utime(manifest, ns=(2 * 10**18, 2 * 10**18))
    assert shaders.built_after_sources.__wrapped__(pkg / "spirv", src)
    for f in files:
        os.utime(f, ns=(3 * 10**18, 3 * 10**18))
        assert not shaders.built_after_sources.__wrapped__(pkg / "spirv", src), f
        os.utime(f, ns=(10**18, 10**18))
    manifest.unlink()
    assert not shaders.built_after_sources.__wrapped__(pkg / "spirv", src)


@pytest.mark.parametrize("row", [1, 32])  # short rows: shader; long rows: transfer regions
def test_interleaved_bindings_in_one_buffer(dev, row):
    """Input and output interleaved in one buffer without a common byte are allowed."""
    n_rows = 7
    half = max(row, 4)  # rows of the output start half a row stride (a multiple of 16 bytes) later
    buf = dev.buffer(np.arange(n_rows * 2 * half, dtype=np.float32))
    d = kdml.TensorDesc(DT.FLOAT32, (n_rows, row), (2 * half, 1))
    src = kdml.Tensor(buf, d, 0)
    dst = kdml.Tensor(buf, d, 4 * half)
    before = np.frombuffer(buf.read(), np.float32).copy()
    expected = src.numpy()
    dev.compile(kdml.CopyDesc(d, d)).execute([src], [dst])
    assert np.array_equal(dst.numpy(), expected)
    after = np.frombuffer(buf.read(), np.float32)
    assert np.array_equal(src.numpy(), expected)
    assert np.count_nonzero(after != before) <= expected.size
