"""The transfer-assisted plans (vkCmdCopyBuffer / vkCmdFillBuffer + narrow shaders) are
chosen where they apply and give the same bytes as the numpy reference."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_output, place, poison_against, read_logical

import kompute_dml as kdml

DT = kdml.DataType
I32_MIN, I32_MAX = -(2**31), 2**31 - 1


def reference(x, rows, cols, begin, end, value, dt):
    y = np.arange(rows)[:, None]
    t = np.arange(cols)[None, :] - y
    use = (end >= begin) ^ (t >= begin) ^ (t < end)
    base = x if x is not None else np.zeros((rows, cols), dt.numpy_dtype)
    return np.where(use, np.asarray(value, dt.numpy_dtype), base)


@pytest.fixture
def dev(dev_transfer):
    """The transfer-assisted plans, on every device: its policy may prefer shaders."""
    return dev_transfer


def kinds(op):
    return [p.variant for p in op.plans]


@pytest.mark.parametrize("dt", [DT.FLOAT32, DT.INT32, DT.UINT32, DT.FLOAT64, DT.INT64, DT.UINT64], ids=lambda d: d.name)
@pytest.mark.parametrize(
    "begin,end",
    [(0, 1), (-3, 4), (5, 6), (I32_MIN, 1), (1, I32_MAX), (2, -2), (1, 0), (I32_MAX, I32_MIN), (-100, 100), (40, 200)],
)
@pytest.mark.parametrize("with_input", [False, True])
def test_diagonal1_transfer_matches_reference(dev, rng, dt, begin, end, with_input):
    sizes = (2, 3, 37, 45)
    # packed, or rows with gaps (row stride 48): rows stay contiguous so transfers apply
    out_strides = None if rng.random() < 0.5 else (3 * 37 * 48, 37 * 48, 48, 1)
    out_desc = kdml.TensorDesc(dt, sizes, out_strides)
    info_value = 7 if dt in (DT.FLOAT32, DT.FLOAT64) else (2**63 - 5 if dt is DT.INT64 else 9)
    x = None
    inputs = [None]
    if with_input:
        in_desc = kdml.TensorDesc(dt, sizes, (0, 45 * 37, 45, 1))  # broadcast over the first dimension
        xt, raw = place(dev, rng, in_desc)
        x = read_logical(raw, xt.offset, in_desc)
        inputs = [xt]
    desc = kdml.DiagonalMatrix1Desc(in_desc if with_input else None, out_desc, dt, info_value, begin, end)
    op = dev.compile(desc)
    assert any(v.startswith("transfer:") for v in kinds(op)) or dt in (DT.FLOAT64, DT.INT64, DT.UINT64)
    expected = np.stack([
        np.stack([reference(None if x is None else x[a, b], 37, 45, begin, end, info_value, dt) for b in range(3)])
        for a in range(2)
    ])
    out, _ = place(dev, rng, out_desc)
    before = poison_against(out, expected, rng)
    op.execute(inputs, [out])
    assert_output(out, before, expected)


def test_diagonal_matrix_uses_fill_and_band_shader(dev, rng):
    desc = kdml.TensorDesc(DT.FLOAT32, (1, 1, 300, 200))
    op = dev.compile(kdml.DiagonalMatrixDesc(desc, offset=-7, value=2.5))
    assert kinds(op) == ["transfer:fill", "diag_band_b32"]
    out, _ = place(dev, rng, desc)
    expected = np.eye(300, 200, -7, dtype=np.float32)[None, None] * 2.5
    before = poison_against(out, expected, rng)
    op.execute([], [out])
    assert_output(out, before, expected)


def test_triu_uses_copy_and_fill(dev, rng):
    x = rng.standard_normal((64, 96)).astype(np.float32)
    t = dev.tensor(x)
    op = dev.compile(kdml.DiagonalMatrix1Desc(t.desc, t.desc, DT.FLOAT32, 0.0, I32_MIN, 3))
    assert kinds(op) == ["transfer:copy", "transfer:fill"]
    assert np.array_equal(kdml.triu(t, 3, device=dev).numpy(), np.triu(x, 3))
    assert np.array_equal(kdml.tril(t, -2, device=dev).numpy(), np.tril(x, -2))


def test_dense_and_row_copies_are_transfers(dev, rng):
    d = kdml.TensorDesc(DT.INT8, (33, 130))
    assert kinds(dev.compile(kdml.CopyDesc(d, d))) == ["transfer:copy"]
    rows = kdml.TensorDesc(DT.INT8, (33, 130), (160, 1))
    assert kinds(dev.compile(kdml.CopyDesc(rows, d))) == ["transfer:copy"]
    short = kdml.TensorDesc(DT.INT8, (33, 13), (16, 1))
    strided = {"cpu": "copy_b8", "gpu": "rows_copy_b8"}[dev.policy.memory_kernel]  # the device's shader family
    assert kinds(dev.compile(kdml.CopyDesc(short, kdml.TensorDesc(DT.INT8, (33, 13))))) == [strided]
    x = rng.integers(-128, 128, (33, 160), dtype=np.int8)
    t = dev.tensor(x)
    out = kdml.copy(kdml.Tensor(t.buffer, rows), device=dev)
    assert np.array_equal(out.numpy(), x[:, :130])


def test_shader_only_device_uses_no_transfers(dev_shader):
    d = kdml.TensorDesc(DT.FLOAT32, (64, 64))
    assert all(not v.startswith("transfer:") for v in kinds(dev_shader.compile(kdml.CopyDesc(d, d))))
    assert all(not v.startswith("transfer:") for v in kinds(dev_shader.compile(kdml.DiagonalMatrixDesc(d))))


def test_recording_mixes_transfers_and_dispatches(dev, rng):
    """fill -> band shader -> copy -> strided shader copy in one submission: the barriers
    between transfer and compute work are checked by synchronization validation."""
    d = kdml.TensorDesc(DT.FLOAT32, (128, 128))
    a, b, c = dev.empty(d), dev.empty(d), dev.empty(d)
    eye = dev.compile(kdml.DiagonalMatrixDesc(d, offset=1, value=3.0))
    cp = dev.compile(kdml.CopyDesc(d, d))
    tr = kdml.TensorDesc(DT.FLOAT32, (128, 128), (1, 128))
    tcp = dev.compile(kdml.CopyDesc(tr, d))
    with dev.record() as rec:
        rec.execute(eye, [], [a])
        rec.execute(cp, [a], [b])
        rec.execute(tcp, [kdml.Tensor(b.buffer, tr)], [c])
        rec.execute(cp, [c], [a])
    expected = np.eye(128, 128, 1, dtype=np.float32).T * 3
    assert np.array_equal(a.numpy(), expected)
    assert np.array_equal(c.numpy(), expected)


@pytest.mark.parametrize("dt", [DT.FLOAT16, DT.INT8, DT.UINT8, DT.INT16, DT.UINT16], ids=lambda d: d.name)
@pytest.mark.parametrize("shape,offset", [((2, 3, 40, 52), 0), ((1, 1, 64, 36), -5), ((3, 9, 17), 2)])
def test_sub_word_diagonal_matrix_fill_and_band(dev, rng, dt, shape, offset):
    """8/16-bit DIAGONAL_MATRIX: a zero fill of whole words, then the diagonal merged into
    its words by the band shader (atomics); every byte around the output unchanged."""
    desc = kdml.TensorDesc(dt, shape)
    op = dev.compile(kdml.DiagonalMatrixDesc(desc, offset=offset, value=-3.0 if dt.is_signed else 3.0))
    if desc.byte_size % 4 == 0 and (shape[-1] * dt.size) % 4 == 0:
        assert kinds(op) == ["transfer:fill", f"diag_band_b{8 * dt.size}"]
    rows, cols = shape[-2:]
    v = -3 if dt.is_signed else 3
    eye = np.eye(rows, cols, offset, dtype=bool)
    expected = np.broadcast_to(np.where(eye, dt.numpy_dtype.type(v), dt.numpy_dtype.type(0)), shape)
    out, _ = place(dev, rng, desc)
    before = poison_against(out, expected, rng)
    op.execute([], [out])
    assert_output(out, before, expected)
