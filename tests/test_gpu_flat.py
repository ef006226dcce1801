"""The flat diagonal plan (ops/gpu_flat.py, shaders/mem_flat.comp: flat_diag[_in]_b*), forced
on whatever device runs the suite through DevicePolicy.memory_kernel = "gpu": packed outputs
whose rows are off the 16-byte grid, as one range of 16-byte chunks (chunks spanning rows,
rows shorter than a chunk), every data type, batch dimensions, bands beyond the matrix and
inverted bands, with and without input, poisoned outputs and guard bytes, against numpy's
eye / triu / tril; and which plan each layout gets."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from helpers import ALL_TYPES, assert_output, place, poison_against, random_values, read_logical

import kompute_dml as kdml
from kompute_dml.ops import gpu_flat, gpu_memory
from kompute_dml.ops.diagonal import value1_bits

DT = kdml.DataType
I32_MIN, I32_MAX = -(2**31), 2**31 - 1
# (begin, end): normal and inverted (End < Begin) bands, bands beyond the matrix on either
# side (nothing / everything takes Value), the int32 extremes
BANDS = [(0, 1), (-3, 4), (2, -2), (1, 0), (5000, 5001), (-5000, -4999), (I32_MIN, I32_MAX), (I32_MAX, I32_MIN),
         (I32_MIN, 1), (1, I32_MAX), (-1, 40), (7, 7)]
# odd row lengths (off the 16-byte grid for every width), rows shorter than a chunk, batches
SHAPES = [(7, 1), (5, 3), (2, 3, 15), (4, 17), (2, 2, 3, 33), (3, 4097), (1, 17), (33, 15), (2, 1, 5), (1, 1)]


@pytest.fixture(scope="module")
def dev_gpu():
    d = kdml.Device(transfer_commands=False)
    d.policy = dataclasses.replace(d.policy, memory_kernel="gpu")
    yield d
    d.close()


def band_mask(rows: int, cols: int, begin: int, end: int) -> np.ndarray:
    """Where DIAGONAL_MATRIX1 writes Value: begin <= x - y < end, or outside [end, begin)."""
    ones = np.ones((rows, cols), bool)

    def upper(k: int) -> np.ndarray:  # x - y >= k (k clamped where numpy.triu stops changing)
        return np.triu(ones, min(max(k, -rows - 1), cols + 1))
    if end >= begin:
        return upper(begin) & ~upper(end)
    return ~(upper(end) & ~upper(begin))


def some_value(rng, dt):
    return random_values(rng, dt, (8,))[int(rng.integers(8))].item()


def run_band(dev, rng, dt, sizes, begin, end, with_input, *, in_desc=None, variant="flat_diag"):
    out_desc = kdml.TensorDesc(dt, sizes)
    x = src = None
    if with_input:
        in_desc = in_desc or kdml.TensorDesc(dt, sizes)
        x, raw = place(dev, rng, in_desc, random_values(rng, dt, sizes))
        src = read_logical(raw, x.offset, in_desc)
    value = some_value(rng, dt)
    mask = np.broadcast_to(band_mask(sizes[-2], sizes[-1], begin, end), sizes)
    other = src if src is not None else np.zeros(sizes, dt.numpy_dtype)
    expected = np.where(mask, np.asarray(value, dt.numpy_dtype), other)
    op = dev.compile(kdml.DiagonalMatrix1Desc(in_desc if with_input else None, out_desc, dt, value, begin, end))
    suffix = "_in" if with_input else ""
    assert [p.variant for p in op.plans] == [f"{variant}{suffix}_b{8 * dt.size}"]
    out, _ = place(dev, rng, out_desc)  # random 16-byte offset, random guard bytes after
    before = poison_against(out, expected, rng)
    op.execute([x], [out])
    assert_output(out, before, expected)
    if x is not None:
        assert x.buffer.read() == raw


@pytest.mark.parametrize("dt", ALL_TYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("with_input", [False, True], ids=["no_input", "input"])
def test_flat_bands(dev_gpu, rng, dt, with_input):
    every = int(rng.integers(len(SHAPES)))
    for i, sizes in enumerate(SHAPES):  # two random bands per shape, every band on one shape
        for j in range(len(BANDS)) if i == every else rng.choice(len(BANDS), 2, replace=False):
            run_band(dev_gpu, rng, dt, sizes, *BANDS[int(j)], with_input)


@pytest.mark.parametrize("dt", [DT.INT8, DT.UINT16, DT.FLOAT32, DT.INT64], ids=lambda d: d.name)
@pytest.mark.parametrize("offset", [0, 1, -1, 3, -40, 5000, I32_MIN, I32_MAX])
def test_flat_diagonal_matrix(dev_gpu, rng, dt, offset):
    for sizes in [(3, 4097), (2, 5, 17), (40, 3), (2, 2, 9, 1)]:
        desc = kdml.TensorDesc(dt, sizes)
        op = dev_gpu.compile(kdml.DiagonalMatrixDesc(desc, offset, 7.0))
        assert [p.variant for p in op.plans] == [f"flat_diag_b{8 * dt.size}"]
        k = min(max(offset, -sizes[-2]), sizes[-1])  # numpy.eye: no diagonal beyond the matrix
        eye = np.eye(sizes[-2], sizes[-1], k, dtype=np.int64) * 7
        expected = np.broadcast_to(eye.astype(dt.numpy_dtype), sizes)
        out, _ = place(dev_gpu, rng, desc)
        before = poison_against(out, expected, rng)
        op.execute([], [out])
        assert_output(out, before, expected)


@pytest.mark.parametrize("with_input", [False, True], ids=["no_input", "input"])
def test_every_short_row_length(dev_gpu, rng, with_input):
    """8-bit rows of 1..33 elements (up to 16 rows per chunk, a chunk's segments at every
    phase), two batch matrices, a band edge through each chunk."""
    for cols in range(1, 34):
        if cols % 16:
            run_band(dev_gpu, rng, DT.UINT8, (2, 5, cols), int(rng.integers(-3, 4)), int(rng.integers(-3, 6)), with_input)


@pytest.mark.parametrize("dt", [DT.INT8, DT.FLOAT16, DT.FLOAT32, DT.UINT64], ids=lambda d: d.name)
@pytest.mark.parametrize("vecs", [1, 8])
def test_other_vecs_settings(dev_gpu, rng, monkeypatch, dt, vecs):
    monkeypatch.setattr(gpu_memory, "VECS", vecs)
    monkeypatch.setattr(gpu_memory, "SMALL_OUTPUT_BYTES", 0)  # VECS for every size
    for sizes, band in [((3, 4097), (0, 1)), ((2, 33, 15), (3, -2)), ((5, 300 + 1), (I32_MIN, 2))]:
        run_band(dev_gpu, rng, dt, sizes, *band, False)
        run_band(dev_gpu, rng, dt, sizes, *band, True)


@pytest.mark.parametrize("with_input", [False, True], ids=["no_input", "input"])
def test_folded_grid(dev_gpu, rng, monkeypatch, with_input):
    """More work groups than maxComputeWorkGroupCount[0] (here 3): the grid folds into y and
    the groups past ngroups find nothing to do."""
    monkeypatch.setattr(gpu_memory, "VECS", 1)
    monkeypatch.setattr(gpu_memory, "SMALL_OUTPUT_BYTES", 0)  # VECS for every size
    sizes, dt, (begin, end) = (7, 2049), DT.INT8, (-2, 3)
    desc = kdml.TensorDesc(dt, sizes)
    op = dev_gpu.compile(kdml.DiagonalMatrix1Desc(desc if with_input else None, desc, dt, 5, begin, end))
    plans = gpu_flat.plan_diagonal_flat(desc, desc if with_input else None, begin, end, 5, 1, max_groups=3)
    assert plans is not None and plans[0].groups[1] > 1
    op.plans[:] = plans
    x, raw = place(dev_gpu, rng, desc, random_values(rng, dt, sizes))
    other = read_logical(raw, x.offset, desc) if with_input else np.zeros(sizes, dt.numpy_dtype)
    expected = np.where(band_mask(*sizes, begin, end), np.int8(5), other)
    out, _ = place(dev_gpu, rng, desc)
    before = poison_against(out, expected, rng)
    op.execute([x if with_input else None], [out])
    assert_output(out, before, expected)


@pytest.mark.parametrize("dt", [DT.INT8, DT.INT16, DT.FLOAT32, DT.INT64], ids=lambda d: d.name)
@pytest.mark.parametrize("with_input", [False, True], ids=["no_input", "input"])
def test_range_starting_mid_chunk(dev_gpu, rng, dt, with_input):
    """Tensor offsets are multiples of 16 bytes, so the range's first chunk is whole and the
    input is at the output's phase. The shader also handles a first partial chunk and an input
    at another phase (the gathered input chunk): driven here by element offsets set by hand in
    the push constants (offset_slots dropped), inside one buffer with every other byte checked."""
    n = 16 // dt.size
    sizes = (3, 5, 19)
    total = int(np.prod(sizes))
    begin, end, value = -1, 2, 3
    desc = kdml.TensorDesc(dt, sizes)
    for phase, in_phase in [(1, 1), (n - 1, 0), (n // 2, 1), (0, n - 1)]:
        out_off, in_off = 3 * n + phase, n + in_phase  # in elements
        bits = value1_bits(value, dt)
        plans = gpu_flat.plan_diagonal_flat(desc, desc if with_input else None, begin, end, bits, 1, 65535)
        assert plans is not None
        push = list(plans[0].push)
        push[0], push[1] = out_off, in_off
        plan = dataclasses.replace(plans[0], push=tuple(push), offset_slots=())
        nbytes = (max(out_off, in_off) + total + n) * dt.size
        init = rng.integers(0, 256, nbytes, dtype=np.uint8)
        buf = dev_gpu.buffer(init.tobytes())
        src_buf = dev_gpu.buffer(rng.integers(0, 256, nbytes, dtype=np.uint8).tobytes())
        src_raw = np.frombuffer(src_buf.read(), dt.numpy_dtype)
        other = src_raw[in_off:in_off + total].reshape(sizes) if with_input else np.zeros(sizes, dt.numpy_dtype)
        expected = np.where(band_mask(*sizes[1:], begin, end), np.asarray(value, dt.numpy_dtype), other)
        op = dev_gpu.compile(kdml.DiagonalMatrix1Desc(desc if with_input else None, desc, dt, value, begin, end))
        op.plans[:] = [plan]
        op.execute([kdml.Tensor(src_buf, desc, 0) if with_input else None], [kdml.Tensor(buf, desc, 0)])
        want = init.copy()
        want[out_off * dt.size:(out_off + total) * dt.size] = np.frombuffer(expected.tobytes(), np.uint8)
        got = np.frombuffer(buf.read(), np.uint8)
        assert np.array_equal(got, want), np.nonzero(got != want)[0][:8]


def test_plan_choice(dev_gpu):
    """flat where the output is packed with rows off the 16-byte grid (and the input packed);
    rows_diag where rows are on the grid or the layouts are strided or broadcast."""
    def chosen(sizes, out_strides=None, in_strides=None, dt=DT.INT8, with_input=False):
        out = kdml.TensorDesc(dt, sizes, out_strides)
        inp = kdml.TensorDesc(dt, sizes, in_strides) if with_input else None
        return [p.variant for p in dev_gpu.compile(kdml.DiagonalMatrix1Desc(inp, out, dt, 0, I32_MIN, 0)).plans]
    assert chosen((63, 63)) == ["flat_diag_b8"]
    assert chosen((2, 63, 63), with_input=True) == ["flat_diag_in_b8"]
    assert chosen((63, 1, 63), dt=DT.INT16, with_input=True) == ["flat_diag_in_b16"]  # size-1 dims merge away
    assert chosen((64, 64)) == ["rows_diag_b8"]  # rows on the 16-byte grid
    assert chosen((64, 68), dt=DT.FLOAT32) == ["rows_diag_b32"]
    assert chosen((65, 65), (80, 1)) == ["rows_diag_b8"]  # a row pitch: not one range
    assert chosen((65, 65), with_input=True, in_strides=(80, 1)) == ["rows_diag_in_b8"]
    assert chosen((2, 65, 65), with_input=True, in_strides=(0, 65, 1)) == ["rows_diag_in_b8"]  # broadcast batch
    assert chosen((100, 15), dt=DT.FLOAT32) == ["flat_diag_b32"]  # short rows: flat instead of diag_b32
    assert chosen((100, 15), (16, 1), dt=DT.FLOAT32) == ["diag_b32"]
    # the shader's 32-bit element and word indices (plans only: nothing is allocated)
    for dt, sizes in [(DT.INT8, (2**16, 2**15 + 1)), (DT.INT64, (23171, 23171))]:
        assert gpu_flat.plan_diagonal_flat(kdml.TensorDesc(dt, sizes), None, 0, 1, 1, 0, 65535) is None
    assert gpu_flat.plan_diagonal_flat(kdml.TensorDesc(DT.INT64, (23169, 23169)), None, 0, 1, 1, 0, 65535)
    cpu = kdml.Device(transfer_commands=False)
    try:
        cpu.policy = dataclasses.replace(cpu.policy, memory_kernel="cpu")
        out = kdml.TensorDesc(DT.INT8, (63, 63))
        assert [p.variant for p in cpu.compile(kdml.DiagonalMatrixDesc(out)).plans] == ["diag_b8"]
    finally:
        cpu.close()
