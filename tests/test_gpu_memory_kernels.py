"""The "gpu" memory-kernel family (ops/gpu_memory.py: copy_vec, copy_tile_b*, rows_copy_b*,
rows_diag[_in]_b*), forced on whatever device runs the suite (lavapipe included) through
DevicePolicy.memory_kernel: every data type, odd sizes, row pitches that leave rows
unaligned, transposed / broadcast / gathered inputs, random 16-byte offsets, poisoned
outputs and guard bytes, against numpy references; and which variant each layout gets."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from helpers import ALL_TYPES, assert_output, place, poison_against, random_strides, read_logical

import kompute_dml as kdml
from kompute_dml.ops import contract, gpu_memory
from kompute_dml.ops.diagonal import value1_bits

DT = kdml.DataType
I32_MIN, I32_MAX = -(2**31), 2**31 - 1
GPU_PREFIXES = ("copy_vec", "copy_tile", "rows_")


def _device(kernel: str) -> kdml.Device:
    d = kdml.Device(transfer_commands=False)
    d.policy = dataclasses.replace(d.policy, memory_kernel=kernel)
    return d


@pytest.fixture(scope="module")
def dev_gpu():
    d = _device("gpu")
    yield d
    d.close()


def variants(op) -> list[str]:
    return [p.variant for p in op.plans]


def random_elements(rng, dt, shape):
    return rng.integers(0, 256, int(np.prod(shape)) * dt.size, dtype=np.uint8).view(dt.numpy_dtype).reshape(shape)


def run_copy(dev, rng, dt, sizes, in_strides, out_strides):
    din = kdml.TensorDesc(dt, sizes, in_strides)
    dout = kdml.TensorDesc(dt, sizes, out_strides)
    x, x_raw = place(dev, rng, din)  # random bytes: every bit pattern (NaN payloads) is copied
    expected = read_logical(x_raw, x.offset, din)
    y, _ = place(dev, rng, dout)
    before = poison_against(y, expected, rng)
    op = dev.compile(kdml.CopyDesc(din, dout))
    op.execute([x], [y])
    assert_output(y, before, expected)
    assert x.buffer.read() == x_raw
    return variants(op)


def packed(sizes):
    return kdml.TensorDesc(DT.UINT8, sizes).effective_strides


# ---- copies ------------------------------------------------------------------------
@pytest.mark.parametrize("dt", ALL_TYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("n", [1, 3, 15, 16, 17, 1000, 4099, 256 * 8 * 4 + 5])
def test_packed_copy(dev_gpu, rng, dt, n):
    got = run_copy(dev_gpu, rng, dt, (n,), None, None)
    assert set(got) <= {"copy_vec", "copy_packed_tail"} and got[0] == ("copy_vec" if n * dt.size >= 16 else "copy_packed_tail")


# (name, sizes, input strides, output strides, expected variant prefix); strides in elements
def copy_layouts(dt):
    e = max(1, 4 // dt.size)
    return [
        ("row_pitch", (37, 141), (150, 1), None, "rows_copy"),
        ("odd_pitch_both", (29, 77), (83, 1), (79, 1), "rows_copy"),
        ("long_rows", (3, 9000 // dt.size), (9000 // dt.size + 7, 1), None, "rows_copy"),
        ("step2", (33, 70), (160, 2), None, "rows_copy"),
        ("broadcast_row", (40, 99), (0, 1), None, "rows_copy"),
        ("broadcast_col", (40, 99), (1, 0), None, "rows_copy"),
        ("batch_pitch", (3, 5, 7, 50), (1000, 170, 52, 1), (2000, 400, 55, 1), "rows_copy"),
        ("transpose", (67, 45 * e), (1, 67), None, "copy_tile"),
        ("transpose_batch", (3, 40, 33 * e), (40 * 33 * e, 1, 40), None, "copy_tile"),
        ("transpose_2batch", (2, 3, 35, 16 * e), (3 * 35 * 16 * e * 2, 35 * 16 * e, 1, 35), None, "copy_tile"),
        ("narrow_transpose", (2, 300), (1, 2), None, "rows_copy"),  # under half a tile: gathered
        ("transpose_out", (45 * e, 67), None, (1, 45 * e), "copy_tile"),
        ("strided_out", (20, 30), None, (60, 2), "copy_b"),
    ]


@pytest.mark.parametrize("case", range(13))
@pytest.mark.parametrize("dt", ALL_TYPES, ids=lambda d: d.name)
def test_copy_layouts(dev_gpu, rng, dt, case):
    name, sizes, in_strides, out_strides, prefix = copy_layouts(dt)[case]
    got = run_copy(dev_gpu, rng, dt, sizes, in_strides, out_strides)
    assert len(got) == 1 and got[0].startswith(prefix), (name, got)


@pytest.mark.parametrize("dt", [DT.INT8, DT.UINT16, DT.FLOAT16], ids=lambda d: d.name)
def test_transpose_with_unaligned_output_lines_gathers(dev_gpu, rng, dt):
    """A sub-word output line starting inside a word cannot take copy_tile (its whole-word
    stores would race with the neighbouring line): rows_copy gathers instead."""
    got = run_copy(dev_gpu, rng, dt, (45, 67), (1, 45), None)
    assert got == [f"rows_copy_b{8 * dt.size}"]


@pytest.mark.parametrize("rank", [1, 2, 3, 4, 5, 8])
@pytest.mark.parametrize("dt", ALL_TYPES, ids=lambda d: d.name)
def test_copy_random_layouts(dev_gpu, rng, dt, rank):
    sizes = [int(rng.integers(1, 9)) for _ in range(rank)]
    while np.prod(sizes) > 3000:
        sizes[int(np.argmax(sizes))] //= 2
    sizes = tuple(max(1, s) for s in sizes)
    for _ in range(3):
        broadcast = rng.random() < 0.3
        run_copy(dev_gpu, rng, dt, sizes, random_strides(rng, sizes, allow_broadcast=broadcast),
                 random_strides(rng, sizes, allow_broadcast=False) if rng.random() < 0.5 else None)


def test_identity_in_place(dev_gpu, rng):
    desc = kdml.TensorDesc(DT.FLOAT16, (3, 5, 70), (400, 80, 1))
    x, raw = place(dev_gpu, rng, desc)
    expected = read_logical(raw, x.offset, desc)
    op = dev_gpu.compile(kdml.ActivationIdentityDesc(desc, desc))
    assert variants(op) == ["rows_copy_b16"]
    op.execute([x], [x])
    assert_output(x, raw, expected)


@pytest.mark.parametrize("kind", ["packed", "rows", "tile"])
def test_folded_grids(dev_gpu, rng, monkeypatch, kind):
    """More work groups than maxComputeWorkGroupCount[0] (here 3): the grid folds into y and
    the extra groups of the rectangle find nothing to do."""
    monkeypatch.setattr(gpu_memory, "SMALL_OUTPUT_BYTES", 0)  # VECS groups: a grid of at most 3 x 3
    sizes, in_strides = {"packed": ((20000,), None), "rows": ((60, 300), (301, 1)), "tile": ((100, 60), (1, 100))}[kind]
    din = kdml.TensorDesc(DT.FLOAT32, sizes, in_strides)
    dout = kdml.TensorDesc(DT.FLOAT32, sizes)
    op = dev_gpu.compile(kdml.CopyDesc(din, dout))
    op.plans[:] = gpu_memory.plan_copy_gpu(din, dout, max_groups=3)
    assert any(p.groups[1] > 1 for p in op.plans)
    x, x_raw = place(dev_gpu, rng, din)
    y, _ = place(dev_gpu, rng, dout)
    expected = read_logical(x_raw, x.offset, din)
    before = poison_against(y, expected, rng)
    op.execute([x], [y])
    assert_output(y, before, expected)


def test_cpu_family_never_takes_gpu_variants(rng):
    d = _device("cpu")
    try:
        for sizes, strides in [((4099,), None), ((37, 141), (150, 1)), ((67, 45), (1, 67))]:
            din = kdml.TensorDesc(DT.FLOAT32, sizes, strides)
            op = d.compile(kdml.CopyDesc(din, kdml.TensorDesc(DT.FLOAT32, sizes)))
            assert not any(v.startswith(GPU_PREFIXES) for v in variants(op))
        out = kdml.TensorDesc(DT.FLOAT32, (64, 64))
        op = d.compile(kdml.DiagonalMatrix1Desc(out, out, DT.FLOAT32, 0.0, I32_MIN, 1))
        assert not any(v.startswith(GPU_PREFIXES) for v in variants(op))
    finally:
        d.close()


# ---- DIAGONAL_MATRIX / DIAGONAL_MATRIX1 ---------------------------------------------
def band_reference(sizes, begin, end, value, dt, x):
    rows, cols = sizes[-2], sizes[-1]
    t = np.arange(cols, dtype=np.int64)[None, :] - np.arange(rows, dtype=np.int64)[:, None]
    use = (end >= begin) ^ (t >= begin) ^ (t < end)
    other = x if x is not None else np.zeros(sizes, dt.numpy_dtype)
    return np.where(np.broadcast_to(use, sizes), np.asarray(value, dt.numpy_dtype), other).astype(dt.numpy_dtype)


def some_value(rng, dt):
    if dt.is_float:
        return float(np.asarray(rng.standard_normal() * 100, dt.numpy_dtype))
    info = np.iinfo(dt.numpy_dtype)
    pool = [int(info.min), int(info.max), -1 if info.min else 1, int(rng.integers(info.min, info.max, dtype=dt.numpy_dtype))]
    return pool[int(rng.integers(len(pool)))]


def diag_out_strides(name, sizes, e):
    rows, cols = sizes[-2], sizes[-1]
    return {
        "packed": None,
        "pitch": (rows * (cols + 16), cols + 16, 1)[-len(sizes):],
        "odd_pitch": (rows * (cols + 3) + 1, cols + 3, 1)[-len(sizes):],  # rows start anywhere
        "batch_gap": (rows * cols * 2 + e, cols, 1)[-len(sizes):],
    }[name]


def diag_in_strides(name, sizes):
    rows, cols = sizes[-2], sizes[-1]
    return {
        "packed": None,
        "pitch": (rows * (cols + 5), cols + 5, 1)[-len(sizes):],  # other 16-byte phase than the output
        "transposed": (rows * cols, 1, rows)[-len(sizes):],  # gathered with stride `rows`
        "broadcast": (0, cols, 1)[-len(sizes):],
        "broadcast_x": (rows, 1, 0)[-len(sizes):],
    }[name]


DIAG_CASES = [
    (out, inp) for out in ["packed", "pitch", "odd_pitch", "batch_gap"]
    for inp in ["none", "packed", "pitch", "transposed", "broadcast", "broadcast_x"]
]
BANDS = [(0, 1), (-3, 4), (5, 6), (I32_MIN, 1), (1, I32_MAX), (2, -2), (1, 0), (I32_MAX, I32_MIN), (-100, 100),
         (40, 200), (I32_MIN, I32_MAX), (-7, -7)]


@pytest.mark.parametrize("case", range(len(DIAG_CASES)), ids=lambda i: "-".join(DIAG_CASES[i]))
@pytest.mark.parametrize("dt", ALL_TYPES, ids=lambda d: d.name)
def test_diagonal1_layouts(dev_gpu, rng, dt, case):
    run_diagonal1(dev_gpu, rng, dt, *DIAG_CASES[case])


def run_diagonal1(dev_gpu, rng, dt, out_layout, in_layout):
    e = max(1, 4 // dt.size)
    rows = int(rng.integers(2, 40))
    cols = int(rng.integers(64 // dt.size, 64 // dt.size + 90))
    sizes = (3, rows, cols)
    out_desc = kdml.TensorDesc(dt, sizes, diag_out_strides(out_layout, sizes, e))
    x = in_desc = None
    if in_layout != "none":
        in_desc = kdml.TensorDesc(dt, sizes, diag_in_strides(in_layout, sizes))
        x, raw = place(dev_gpu, rng, in_desc)
    for begin, end in [BANDS[int(i)] for i in rng.choice(len(BANDS), 3, replace=False)]:
        value = some_value(rng, dt)
        expected = band_reference(sizes, begin, end, value, dt, None if x is None else read_logical(raw, x.offset, in_desc))
        op = dev_gpu.compile(kdml.DiagonalMatrix1Desc(in_desc, out_desc, dt, value, begin, end))
        # packed rows off the 16-byte grid take the flat plan (tests/test_gpu_flat.py)
        flat = out_layout == "packed" and (cols * dt.size) % 16 and in_layout in ("none", "packed")
        assert variants(op) == [f"{'flat' if flat else 'rows'}_diag{'_in' if x is not None else ''}_b{8 * dt.size}"]
        out, _ = place(dev_gpu, rng, out_desc)
        before = poison_against(out, expected, rng)
        op.execute([x], [out])
        assert_output(out, before, expected)
        if x is not None:
            assert x.buffer.read() == raw


@pytest.mark.parametrize("dt", ALL_TYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("offset", [0, 1, -1, 17, -300, 5000, I32_MIN, I32_MAX])
def test_diagonal_matrix(dev_gpu, rng, dt, offset):
    sizes = (2, 3, 45, 16 + 64 // dt.size)
    desc = kdml.TensorDesc(dt, sizes)
    op = dev_gpu.compile(kdml.DiagonalMatrixDesc(desc, offset, 3.0))
    assert variants(op) == [f"rows_diag_b{8 * dt.size}"]
    expected = band_reference(sizes, offset, offset + 1, 3, dt, None)
    out, _ = place(dev_gpu, rng, desc)
    before = poison_against(out, expected, rng)
    op.execute([], [out])
    assert_output(out, before, expected)


@pytest.mark.parametrize("dt", [DT.INT8, DT.FLOAT16, DT.FLOAT32, DT.UINT64], ids=lambda d: d.name)
@pytest.mark.parametrize("upper", [True, False])
def test_triu_tril_long_rows(dev_gpu, rng, dt, upper):
    """Rows of more than 256 * VECS chunks (several work groups per row) and triu/tril's
    bands, through the functional helpers."""
    cols = 40000 // dt.size
    x = random_elements(rng, dt, (5, cols))
    t = dev_gpu.tensor(x)
    for k in [0, 3, -2, cols - 20, 3000]:
        got = (kdml.triu if upper else kdml.tril)(t, k, device=dev_gpu).numpy()
        want = (np.triu if upper else np.tril)(x, k)
        assert got.view(np.uint8).tobytes() == want.view(np.uint8).tobytes()


def test_small_outputs_take_one_chunk_per_invocation(dev_gpu):
    """gpu_memory.vecs_for: outputs up to SMALL_OUTPUT_BYTES run with VECS = 1 (the
    specialization constant and the grid agree), larger ones with the module's VECS."""
    limit = gpu_memory.SMALL_OUTPUT_BYTES
    assert gpu_memory.vecs_for(limit) == 1 and gpu_memory.vecs_for(limit + 1) == gpu_memory.VECS
    for rows, expect in ((limit // 1024, 1), (limit // 1024 + 1, gpu_memory.VECS)):
        desc = kdml.TensorDesc(DT.FLOAT32, (rows, 256))  # 1 KiB rows
        plan = dev_gpu.compile(kdml.DiagonalMatrix1Desc(desc, desc, DT.FLOAT32, 0.0, 0, 2**31 - 1)).plans[0]
        assert plan.variant == "rows_diag_in_b32" and plan.spec == (expect,)
        tpr = 64 // expect  # 64 chunks a row
        assert plan.push[contract.ROWS_DIAG_IN.offset("ngroups")] == -(-rows // (256 // tpr))


def test_short_rows_keep_portable_variants(dev_gpu):
    desc = kdml.TensorDesc(DT.FLOAT32, (100, 15), (16, 1))  # 60-byte rows: diag_* chunks span rows
    assert variants(dev_gpu.compile(kdml.DiagonalMatrixDesc(desc))) == ["diag_b32"]
    tr = kdml.TensorDesc(DT.FLOAT32, (15, 100), (1, 15))  # x strided in the output
    assert variants(dev_gpu.compile(kdml.DiagonalMatrixDesc(tr))) == ["diag_b32"]


def test_folded_diagonal_grid(dev_gpu, rng, monkeypatch):
    monkeypatch.setattr(gpu_memory, "SMALL_OUTPUT_BYTES", 0)  # VECS groups: a grid of at most 3 x 3
    desc = kdml.TensorDesc(DT.INT16, (70, 300), (310, 1))
    op = dev_gpu.compile(kdml.DiagonalMatrix1Desc(desc, desc, DT.INT16, -5, -3, 4))
    op.plans[:] = gpu_memory.plan_diagonal_gpu(desc, desc, -3, 4, value1_bits(-5, DT.INT16), 1, max_groups=3)
    assert op.plans[0].groups[1] > 1
    x, raw = place(dev_gpu, rng, desc)
    expected = band_reference((70, 300), -3, 4, -5, DT.INT16, read_logical(raw, x.offset, desc))
    out, _ = place(dev_gpu, rng, desc)
    before = poison_against(out, expected, rng)
    op.execute([x], [out])
    assert_output(out, before, expected)


@pytest.mark.parametrize("dt", [DT.INT8, DT.FLOAT16, DT.FLOAT32, DT.UINT64], ids=lambda d: d.name)
@pytest.mark.parametrize("vecs", [1, 2, 4, 8])
def test_other_vecs_settings(dev_gpu, rng, monkeypatch, vecs, dt):
    """The VECS specialization constant (chunks per invocation) at other settings than the
    default 4: packed, row and transposing copies, and the diagonal kernels."""
    monkeypatch.setattr(gpu_memory, "VECS", vecs)
    monkeypatch.setattr(gpu_memory, "SMALL_OUTPUT_BYTES", 0)  # VECS for every size
    for n in [4099, 256 * 8 * 4 + 5]:
        run_copy(dev_gpu, rng, dt, (n,), None, None)
    for case in [0, 2, 7]:
        _, sizes, in_strides, out_strides, prefix = copy_layouts(dt)[case]
        assert run_copy(dev_gpu, rng, dt, sizes, in_strides, out_strides)[0].startswith(prefix)
    for out_layout, in_layout in [("pitch", "none"), ("odd_pitch", "pitch"), ("packed", "packed")]:
        run_diagonal1(dev_gpu, rng, dt, out_layout, in_layout)


@pytest.mark.parametrize("dt", ALL_TYPES, ids=lambda d: d.name)
def test_diagonal1_random_layouts(dev_gpu, rng, dt):
    """Random output and input strides (any dimension order, gaps, broadcast inputs): the gpu
    kernel where x is contiguous in the output, diag_* elsewhere, the same bytes either way."""
    for _ in range(4):
        batch = [int(rng.integers(1, 4)) for _ in range(int(rng.integers(0, 3)))]
        sizes = (*batch, int(rng.integers(1, 30)), int(rng.integers(64 // dt.size, 64 // dt.size + 60)))
        out_desc = kdml.TensorDesc(dt, sizes, random_strides(rng, sizes, allow_broadcast=False))
        in_desc = kdml.TensorDesc(dt, sizes, random_strides(rng, sizes, allow_broadcast=True)) if rng.random() < 0.7 else None
        x, raw = place(dev_gpu, rng, in_desc) if in_desc is not None else (None, b"")
        begin, end = BANDS[int(rng.integers(len(BANDS)))]
        value = some_value(rng, dt)
        expected = band_reference(sizes, begin, end, value, dt, None if x is None else read_logical(raw, x.offset, in_desc))
        op = dev_gpu.compile(kdml.DiagonalMatrix1Desc(in_desc, out_desc, dt, value, begin, end))
        out, _ = place(dev_gpu, rng, out_desc)
        before = poison_against(out, expected, rng)
        op.execute([x], [out])
        assert_output(out, before, expected)


# ---- the chunk mapping: spans of whole chunks, the partial chunk past them --------------
@pytest.mark.parametrize("dt", [DT.INT8, DT.FLOAT16, DT.FLOAT32, DT.UINT64], ids=lambda d: d.name)
@pytest.mark.parametrize("vecs", [1, 4])
@pytest.mark.parametrize("long_rows", [False, True], ids=["4_lanes", "256_lanes"])
def test_rows_one_chunk_past_the_spans(dev_gpu, rng, monkeypatch, dt, vecs, long_rows):
    """Rows whose whole-chunk count fills their spans exactly: on the 16-byte grid no work
    group is left without work (one span per row here), and rows starting at every other
    phase (pitch cols + 1) end in the partial chunk past the spans, which lane 0 of the last
    span writes; diagonals without and with input, and a strided copy."""
    monkeypatch.setattr(gpu_memory, "VECS", vecs)
    monkeypatch.setattr(gpu_memory, "SMALL_OUTPUT_BYTES", 0)  # VECS for every size
    n = 16 // dt.size
    cols = (256 if long_rows else 4) * vecs * n
    packed_desc = kdml.TensorDesc(dt, (17, cols))
    plan = dev_gpu.compile(kdml.DiagonalMatrixDesc(packed_desc, 0, 1.0)).plans[0]
    assert plan.push[contract.ROWS_DIAG.offset("spans")] == 1
    assert plan.push[contract.ROWS_DIAG.offset("ngroups")] == (17 if long_rows else 1)
    out_desc = kdml.TensorDesc(dt, (17, cols), (cols + 1, 1))
    in_desc = kdml.TensorDesc(dt, (17, cols), (cols + 3, 1))
    x, raw = place(dev_gpu, rng, in_desc)
    for inp in (None, x):
        for begin, end in [(0, 1), (I32_MIN, 3), (cols - 2, 5)]:
            value = some_value(rng, dt)
            src = None if inp is None else read_logical(raw, x.offset, in_desc)
            expected = band_reference((17, cols), begin, end, value, dt, src)
            op = dev_gpu.compile(kdml.DiagonalMatrix1Desc(None if inp is None else in_desc, out_desc, dt, value, begin, end))
            assert variants(op)[0].startswith("rows_diag")
            out, _ = place(dev_gpu, rng, out_desc)
            before = poison_against(out, expected, rng)
            op.execute([inp], [out])
            assert_output(out, before, expected)
    assert run_copy(dev_gpu, rng, dt, (17, cols), (cols + 3, 1), (cols + 1, 1)) == [f"rows_copy_b{8 * dt.size}"]


@pytest.mark.parametrize("dt", ALL_TYPES, ids=lambda d: d.name)
def test_band_edges_at_every_position_of_a_chunk(dev_gpu, rng, dt):
    """Band edges crossing a 16-byte chunk at each element position (the word masks of a
    crossing chunk), both edges in one chunk, normal and inverted bands, with and without
    input, every data type."""
    n = 16 // dt.size
    sizes = (n + 1, 4 * n)  # y = 0..n: the edges x = y + k move through every position
    x, raw = place(dev_gpu, rng, kdml.TensorDesc(dt, sizes))
    for in_desc in (None, kdml.TensorDesc(dt, sizes)):
        src = None if in_desc is None else read_logical(raw, x.offset, in_desc)
        for begin, end in [(0, 1), (1, 3), (2, 2 + n), (3, 0), (n, -n), (1, 1), (-1, n + 1), (I32_MIN, 2), (5, I32_MAX)]:
            value = some_value(rng, dt)
            expected = band_reference(sizes, begin, end, value, dt, src)
            op = dev_gpu.compile(kdml.DiagonalMatrix1Desc(in_desc, kdml.TensorDesc(dt, sizes), dt, value, begin, end))
            assert variants(op) == [f"rows_diag{'_in' if in_desc is not None else ''}_b{8 * dt.size}"]
            out, _ = place(dev_gpu, rng, kdml.TensorDesc(dt, sizes))
            before = poison_against(out, expected, rng)
            op.execute([None if in_desc is None else x], [out])
            assert_output(out, before, expected)
