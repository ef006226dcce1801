"""DIAGONAL_MATRIX (seeds 000/001) and DIAGONAL_MATRIX1 (seed 002) against numpy.

Golden examples typed from the seed text; every data type x 2-4 dimensions x layouts
(strided / transposed outputs, strided and broadcast inputs) with random 16-byte offsets,
poisoned outputs and guard bytes; value conversion rules; feature-level tables; errors;
the functional helpers (eye_like, triu, tril with huge k)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from helpers import ALL_TYPES, assert_output, place, poison_against, random_strides, random_values, read_logical

import kompute_dml as kdml
from kompute_dml.ops.diagonal import plan_diagonal, value1_bits

DT = kdml.DataType
FL = kdml.FeatureLevel
I32_MIN, I32_MAX = -(2**31), 2**31 - 1
FLOAT_TYPES = [DT.FLOAT16, DT.FLOAT32, DT.FLOAT64]
INT_TYPES = [d for d in ALL_TYPES if d not in FLOAT_TYPES]


@pytest.fixture(scope="module")
def dev_constant():
    """A device whose policy copies every small packed descriptor-only output from a constant
    (DevicePolicy.constant_below; the H100 policy's path, here on any device)."""
    d = kdml.Device()
    d.policy = dataclasses.replace(d.policy, constant_below=1 << 20)
    yield d
    d.close()


@pytest.fixture(params=["transfer", "shader", "constant"])
def ddev(request, dev_transfer, dev_shader, dev_constant) -> kdml.Device:
    """Every path of the diagonal operators: transfer-assisted, shaders only, and the copy from a
    constant (packed outputs without input; others fall back to the device's path)."""
    return {"transfer": dev_transfer, "shader": dev_shader, "constant": dev_constant}[request.param]


# ---- independent numpy references --------------------------------------------------
def ref_dm_value(value: float, dt: kdml.DataType) -> np.ndarray:
    """The FLOAT value as the output type: float32 first; floats rounded (numpy casts),
    integers truncated toward zero and saturated, NaN -> 0."""
    v32 = np.float32(value)
    if dt.is_float:
        with np.errstate(over="ignore"):
            return np.array(v32).astype(dt.numpy_dtype)
    info = np.iinfo(dt.numpy_dtype)
    if np.isnan(v32):
        n = 0
    elif np.isinf(v32):
        n = int(info.max) if v32 > 0 else int(info.min)
    else:
        n = min(max(int(np.trunc(np.float64(v32))), int(info.min)), int(info.max))
    return np.array(n, dtype=dt.numpy_dtype)


def top_x(sizes) -> np.ndarray:
    rows, cols = sizes[-2], sizes[-1]
    return np.arange(cols, dtype=np.int64)[None, :] - np.arange(rows, dtype=np.int64)[:, None]


def ref_dm(sizes, offset: int, value: float, dt: kdml.DataType) -> np.ndarray:
    on = top_x(sizes) == offset  # y + offset == x
    out = np.where(on, ref_dm_value(value, dt), np.zeros((), dt.numpy_dtype)).astype(dt.numpy_dtype)
    return np.ascontiguousarray(np.broadcast_to(out, sizes))


def ref_dm1(sizes, begin: int, end: int, value: np.ndarray, dt: kdml.DataType, x: np.ndarray | None) -> np.ndarray:
    t = top_x(sizes)
    use = (end >= begin) ^ (t >= begin) ^ (t < end)
    other = x if x is not None else np.zeros(sizes, dt.numpy_dtype)
    out = np.where(np.broadcast_to(use, sizes), value, other)
    return out.astype(dt.numpy_dtype)


def py_value(v: np.generic, dt: kdml.DataType):
    return float(v) if dt.is_float else int(v)


def random_sizes(rng, rank, max_elems=600):
    sizes = [int(rng.integers(1, 8)) for _ in range(rank - 2)] + [int(rng.integers(1, 14)) for _ in range(2)]
    while np.prod(sizes) > max_elems:
        sizes[int(np.argmax(sizes))] //= 2
    return tuple(max(1, s) for s in sizes)


def transposed_strides(sizes):
    """Column-major-ish: x outermost in memory, y innermost (dense)."""
    order = list(range(len(sizes)))
    order[-2], order[-1] = order[-1], order[-2]
    strides = [0] * len(sizes)
    acc = 1
    for d in reversed(order):
        strides[d] = acc
        acc *= sizes[d]
    return tuple(strides)


def out_strides_for(rng, sizes, layout):
    if layout == "packed":
        return None
    if layout == "transposed":
        return transposed_strides(sizes)
    return random_strides(rng, sizes, allow_broadcast=False)


def bound_values(rng, begin_end_pool_extra=()):
    pool = [I32_MIN, I32_MAX, I32_MIN + 1, I32_MAX - 1, 0, 1, -1, *begin_end_pool_extra]
    return pool[int(rng.integers(len(pool)))]


def run_dm(dev, rng, dt, sizes, out_strides, offset, value):
    desc = kdml.TensorDesc(dt, sizes, out_strides)
    expected = ref_dm(sizes, offset, value, dt)
    y, _ = place(dev, rng, desc)
    before = poison_against(y, expected, rng)
    op = dev.compile(kdml.DiagonalMatrixDesc(desc, offset, value))
    op.execute([], [y])
    assert_output(y, before, expected)


def run_dm1(dev, rng, dt, sizes, in_layout, out_strides, begin, end, value):
    npd = dt.numpy_dtype
    out_desc = kdml.TensorDesc(dt, sizes, out_strides)
    x = None
    x_np = None
    in_desc = None
    if in_layout != "none":
        in_strides = {
            "packed": None,
            "strided": lambda: random_strides(rng, sizes, allow_broadcast=False),
            "broadcast": lambda: random_strides(rng, sizes, allow_broadcast=True),
        }[in_layout]
        in_desc = kdml.TensorDesc(dt, sizes, in_strides() if in_strides else None)
        x, x_raw = place(dev, rng, in_desc)  # random bytes: NaN payloads etc. copied bitwise
        x_np = read_logical(x_raw, x.offset, in_desc)
    val = np.array(value, npd) if dt.is_float else np.array(int(value), npd)
    expected = ref_dm1(sizes, begin, end, val, dt, x_np)
    y, _ = place(dev, rng, out_desc)
    before = poison_against(y, expected, rng)
    op = dev.compile(kdml.DiagonalMatrix1Desc(in_desc, out_desc, dt, value, begin, end))
    op.execute([x], [y])
    assert_output(y, before, expected)
    if x is not None:
        assert x.buffer.read() == x_raw


# ---- golden examples (seed text) ----------------------------------------------------
SEED_DM = [
    # (offset, value, sizes, expected) -- seeds 000 and 001 (the same page, two renderings)
    (0, 1.0, (1, 1, 3, 3), [[[[1, 0, 0], [0, 1, 0], [0, 0, 1]]]]),
    (1, 1.0, (1, 1, 3, 3), [[[[0, 1, 0], [0, 0, 1], [0, 0, 0]]]]),
    (-1, 1.0, (1, 1, 3, 2), [[[[0, 0], [1, 0], [0, 1]]]]),
    (-3, 1.0, (1, 1, 3, 2), [[[[0, 0], [0, 0], [0, 0]]]]),
]
SEED_X = [[4, 7, 3, 7, 9], [1, 2, 8, 6, 9], [9, 4, 1, 8, 7], [4, 3, 4, 2, 4]]
SEED_DM1 = [
    # (input, value, begin, end, expected) -- seed 002, all {4,5} FLOAT32
    # "Standardidentitätsmatrix": the seed shows ones but Value is 7 (seeds/README.md): sevens.
    (None, 7, 0, 1, [[7, 0, 0, 0, 0], [0, 7, 0, 0, 0], [0, 0, 7, 0, 0], [0, 0, 0, 7, 0]]),
    (None, 7, 0, 3, [[7, 7, 7, 0, 0], [0, 7, 7, 7, 0], [0, 0, 7, 7, 7], [0, 0, 0, 7, 7]]),
    (SEED_X, 0, I32_MIN, 1, [[0, 7, 3, 7, 9], [0, 0, 8, 6, 9], [0, 0, 0, 8, 7], [0, 0, 0, 0, 4]]),
    (SEED_X, 0, 1, 0, [[4, 0, 0, 0, 0], [0, 2, 0, 0, 0], [0, 0, 1, 0, 0], [0, 0, 0, 2, 0]]),
]


@pytest.mark.parametrize("seed", ["000", "001"])
@pytest.mark.parametrize("case", range(len(SEED_DM)))
def test_seed_diagonal_matrix(ddev, rng, seed, case):
    offset, value, sizes, expected = SEED_DM[case]
    desc = kdml.TensorDesc(DT.FLOAT32, sizes)
    exp = np.array(expected, np.float32)
    y, _ = place(ddev, rng, desc)
    before = poison_against(y, exp, rng)
    ddev.compile(kdml.DiagonalMatrixDesc(desc, offset=offset, value=value)).execute([], [y])
    assert_output(y, before, exp)


@pytest.mark.parametrize("case", range(len(SEED_DM1)))
def test_seed_diagonal_matrix1(ddev, rng, case):
    x_vals, value, begin, end, expected = SEED_DM1[case]
    desc = kdml.TensorDesc(DT.FLOAT32, (4, 5))
    x = ddev.tensor(np.array(x_vals, np.float32)) if x_vals is not None else None
    exp = np.array(expected, np.float32)
    y, _ = place(ddev, rng, desc)
    before = poison_against(y, exp, rng)
    op = ddev.compile(kdml.DiagonalMatrix1Desc(desc if x is not None else None, desc, DT.FLOAT32, value, begin, end))
    op.execute([x], [y])
    assert_output(y, before, exp)


# ---- random layouts over every type ---------------------------------------------------
@pytest.mark.parametrize("layout", ["packed", "strided", "transposed"])
@pytest.mark.parametrize("rank", [2, 3, 4])
@pytest.mark.parametrize("dt", ALL_TYPES, ids=lambda d: d.name)
def test_diagonal_matrix_random(ddev, rng, dt, rank, layout):
    sizes = random_sizes(rng, rank)
    rows, cols = sizes[-2:]
    offset = [int(rng.integers(-rows - 1, cols + 2)), 0, I32_MIN, I32_MAX][int(rng.integers(0, 4)) if rng.random() < 0.3 else 0]
    if dt.is_float:
        value = float(rng.choice([1.0, -2.5, 0.1, 7.0, 1e-3, -0.0, 65504.0, 3.0e38]))
    else:
        value = float(rng.uniform(-300, 300))
    run_dm(ddev, rng, dt, sizes, out_strides_for(rng, sizes, layout), offset, value)


@pytest.mark.parametrize("out_layout", ["packed", "strided", "transposed"])
@pytest.mark.parametrize("in_layout", ["none", "packed", "strided", "broadcast"])
@pytest.mark.parametrize("rank", [2, 3, 4])
@pytest.mark.parametrize("dt", ALL_TYPES, ids=lambda d: d.name)
def test_diagonal_matrix1_random(ddev, rng, dt, rank, in_layout, out_layout):
    sizes = random_sizes(rng, rank)
    rows, cols = sizes[-2:]
    extra = [int(rng.integers(-rows - 2, cols + 3)) for _ in range(6)]
    begin, end = bound_values(rng, extra), bound_values(rng, extra)
    value = py_value(random_values(rng, dt, (1,))[0], dt)
    run_dm1(ddev, rng, dt, sizes, in_layout, out_strides_for(rng, sizes, out_layout), begin, end, value)


@pytest.mark.parametrize("dt", [DT.INT8, DT.UINT16, DT.FLOAT16], ids=lambda d: d.name)
def test_sub_word_boundaries(ddev, rng, dt):
    """8/16-bit outputs: every column count around the word size, packed rows crossing
    words, gapped rows (partial words at both ends), odd strides and transposes."""
    for rows in (1, 2, 3, 5):
        for cols in range(1, 10):
            sizes = (rows, cols)
            layouts = [None, (cols + 1, 1), (cols + 3, 1), (1, rows), (2 * cols + 1, 2), (cols, 1)]
            for strides in layouts:
                begin, end = (int(rng.integers(-3, 4)), int(rng.integers(-3, 4)))
                value = py_value(random_values(rng, dt, (1,))[0], dt)
                in_layout = ["none", "packed", "strided", "broadcast"][int(rng.integers(0, 4))]
                run_dm1(ddev, rng, dt, sizes, in_layout, strides, begin, end, value)
            run_dm(ddev, rng, dt, sizes, (cols + 1, 1), int(rng.integers(-2, 3)), 3.0)


def test_constant_path_where_the_policy_allows(dev_constant, rng):
    """Packed outputs without input within constant_below are one copy from the operator's
    constant; an input, a strided output or a larger output take the kernels; the constant is
    never written and the outputs stay exact over repeated and recorded executions."""
    desc = kdml.TensorDesc(DT.FLOAT32, (2, 5, 7))
    op = dev_constant.compile(kdml.DiagonalMatrix1Desc(None, desc, DT.FLOAT32, 2.5, -1, 2))
    assert op.variants == ["transfer:copy"]
    exp = ref_dm1((2, 5, 7), -1, 2, np.array(2.5, np.float32), DT.FLOAT32, None)
    (constant,) = op.constants
    kept = constant.buffer.read()
    outs = [place(dev_constant, rng, desc)[0] for _ in range(3)]
    befores = [poison_against(y, exp, rng) for y in outs]
    op.execute([None], [outs[0]])
    op.execute([None], [outs[0]])
    with dev_constant.record() as rec:
        for y in outs[1:]:
            rec.execute(op, [None], [y])
    for y, before in zip(outs, befores):
        assert_output(y, before, exp)
    assert constant.buffer.read() == kept
    strided = kdml.TensorDesc(DT.FLOAT32, (5, 7), (8, 1))
    assert dev_constant.compile(kdml.DiagonalMatrixDesc(strided, 0, 1.0)).variants != ["transfer:copy"]
    assert dev_constant.compile(kdml.DiagonalMatrix1Desc(desc, desc, DT.FLOAT32, 0.0, 0, 1)).variants != ["transfer:copy"]
    big = kdml.TensorDesc(DT.FLOAT32, (1024, 257))  # 1052672 bytes > 1 MiB
    assert dev_constant.compile(kdml.DiagonalMatrixDesc(big, 0, 1.0)).variants != ["transfer:copy"]


def test_packed_output_is_one_run():
    """Fast path of diagonal.comp (the portable plan, whatever a device's policy takes): a packed
    (or batch-gapped but word-aligned) output is written word by word."""

    def push(desc):  # DIAGONAL_MATRIX, offset 0: the band [0, 1) of x - y
        return plan_diagonal(desc, None, 0, 1, value1_bits(1, desc.data_type), 0)[0].push

    p = push(kdml.TensorDesc(DT.INT8, (3, 5, 7)))
    assert (p[5] >> 4) & 15 == 0 and p[4] == 105 and p[3] == 7  # split, run_len, 16-byte chunks per run
    p = push(kdml.TensorDesc(DT.UINT8, (3, 5, 7), (40, 7, 1)))
    assert p[4] == 35 and p[3] == 3  # runs of 35 bytes (9 words), starting on word boundaries
    assert push(kdml.TensorDesc(DT.UINT8, (3, 5, 7), (1, 21, 3)))[4] == 105  # a permuted but dense output is one run too


def test_batch_merge(dev_shader):
    a = dev_shader.compile(kdml.DiagonalMatrixDesc(kdml.TensorDesc(DT.FLOAT32, (2, 3, 4, 5), (90, 30, 5, 1))))
    assert a.plans[0].push[5] & 15 == 3  # two batch dimensions merged into one (+ y, x)
    b = dev_shader.compile(kdml.DiagonalMatrixDesc(kdml.TensorDesc(DT.FLOAT32, (2, 3, 4, 5), (80, 20, 5, 1))))
    assert b.plans[0].push[5] & 15 == 4


def test_folded_grid(dev_shader, rng):
    """A grid folded into y (runtime.grid_for), with spare groups past the end."""
    for dt, sizes in ((DT.FLOAT32, (7, 1001)), (DT.INT8, (3, 31, 331)), (DT.UINT64, (2, 11, 357))):
        desc = kdml.TensorDesc(dt, sizes)
        op = dev_shader.compile(kdml.DiagonalMatrix1Desc(desc, desc, dt, 5, -3, 4))
        op.plans[:] = plan_diagonal(desc, desc, -3, 4, value1_bits(5, dt), 1, max_groups=4)
        assert op.plans[0].groups[1] > 1
        xs = random_values(rng, dt, sizes)
        x, x_raw = place(dev_shader, rng, desc, xs)
        expected = ref_dm1(sizes, -3, 4, np.array(5, dt.numpy_dtype), dt, read_logical(x_raw, x.offset, desc))
        y, _ = place(dev_shader, rng, desc)
        before = poison_against(y, expected, rng)
        op.execute([x], [y])
        assert_output(y, before, expected)


# ---- values ---------------------------------------------------------------------------
@pytest.mark.parametrize("dt", ALL_TYPES, ids=lambda d: d.name)
def test_diagonal_matrix_value_conversion(dev, rng, dt):
    """FLOAT -> type: truncation toward zero (10.6 -> 10), saturation, NaN -> 0, float16 RNE,
    exact float64 widening of the float32."""
    values = [10.6, -10.6, 0.1, 1.0009765625, 1.00048828125, 1.0014648437, 65519.0, 65520.0, 1e30, -1e30,
              float("inf"), float("-inf"), float("nan"), 255.9, 256.0, -0.9, 2.0**31, 2.0**63, 2.0**64, -(2.0**63)]
    for v in values:
        run_dm(dev, rng, dt, (3, 4), None, 0, v)
    if dt == DT.INT8:
        assert ref_dm_value(10.6, dt) == 10 and ref_dm_value(300.0, dt) == 127 and ref_dm_value(float("nan"), dt) == 0
    if dt == DT.FLOAT64:
        assert ref_dm_value(0.1, dt) == np.float64(np.float32(0.1)) != 0.1


def test_value_extremes_64bit(ddev, rng):
    cases = {
        DT.INT64: [-(2**63), 2**63 - 1, -1, 2**53 + 1, -(2**62) - 12345],
        DT.UINT64: [2**64 - 1, 2**63, 2**53 + 1, 0xDEADBEEFCAFEF00D],
        DT.FLOAT64: [np.finfo(np.float64).max, -np.finfo(np.float64).max, np.finfo(np.float64).tiny, 5e-324, -0.0,
                     float("inf"), float("-inf"), 1.0 / 3.0],
        DT.INT32: [I32_MIN, I32_MAX],
        DT.UINT32: [2**32 - 1],
        DT.INT8: [-128, 127, 5.0],
        DT.FLOAT16: [65504.0, 65519.0, 6e-8, 2**15 + 1],
        DT.FLOAT32: [2**128 - 2**104, 2**24 + 1, 16777217 * 2**80, -1.5e-45],
    }
    for dt, vals in cases.items():
        for v in vals:
            for in_layout in ("none", "strided"):
                run_dm1(ddev, rng, dt, (3, 5), in_layout, None, -1, 2, v)
    # exactness of the pattern itself
    assert value1_bits(2**64 - 1, DT.UINT64) == 2**64 - 1
    assert value1_bits(-(2**63), DT.INT64) == 2**63
    assert value1_bits(2**24 + 1, DT.FLOAT32) == np.float32(2**24).view(np.uint32)  # ties to even
    assert value1_bits(2**24 + 3, DT.FLOAT32) == np.float32(2**24 + 4).view(np.uint32)
    assert value1_bits(2**54 + 2**30 + 1, DT.FLOAT32) == np.float32(2**54 + 2**31).view(np.uint32)  # no double rounding


BAD_VALUES = [
    (DT.INT8, 128), (DT.INT8, -129), (DT.INT8, 1.5), (DT.INT8, float("nan")), (DT.INT8, float("inf")),
    (DT.UINT8, -1), (DT.UINT16, 65536), (DT.INT32, 2**31), (DT.UINT32, -0.5), (DT.INT64, 2**63),
    (DT.INT64, float(2**63)), (DT.UINT64, 2**64), (DT.UINT64, -1), (DT.FLOAT16, 65520.0), (DT.FLOAT16, 1e5),
    (DT.FLOAT32, 1e39), (DT.FLOAT32, 2**128), (DT.FLOAT32, 2**128 - 2**103), (DT.FLOAT64, 10**400), (DT.FLOAT32, "1"), (DT.INT32, None),
    (DT.FLOAT32, 1 + 2j),
]


@pytest.mark.parametrize("dt,value", BAD_VALUES, ids=lambda v: repr(v))
def test_diagonal_matrix1_bad_values(dev, dt, value):
    desc = kdml.TensorDesc(dt, (2, 3))
    with pytest.raises(kdml.InvalidArgumentError, match="^value"):
        dev.compile(kdml.DiagonalMatrix1Desc(None, desc, dt, value, 0, 1))


def test_bad_arguments(dev, rng):
    f32 = kdml.TensorDesc(DT.FLOAT32, (3, 4))
    i8 = kdml.TensorDesc(DT.INT8, (3, 4))
    DM, DM1 = kdml.DiagonalMatrixDesc, kdml.DiagonalMatrix1Desc
    cases = [
        (DM(f32, offset=2**31), "^offset"), (DM(f32, offset=I32_MIN - 1), "^offset"), (DM(f32, offset=1.5), "^offset"),
        (DM(f32, value="x"), "^value"), (DM(f32, value=1e39), "^value"),
        (DM(kdml.TensorDesc(DT.FLOAT32, (3, 4), (0, 1))), "^output_tensor.strides"),
        (DM(kdml.TensorDesc(DT.FLOAT32, (3, 4), flags=1)), "^output_tensor.flags"),
        (DM1(None, f32, DT.FLOAT16, 0, 0, 1), "^value_data_type"),
        (DM1(f32, f32, DT.INT8, 0, 0, 1), "^value_data_type"),
        (DM1(i8, f32, DT.FLOAT32, 0, 0, 1), "^output_tensor.data_type"),
        (DM1(kdml.TensorDesc(DT.FLOAT32, (1, 3, 4)), f32, DT.FLOAT32, 0, 0, 1), "^output_tensor.sizes"),
        (DM1(kdml.TensorDesc(DT.FLOAT32, (4, 3)), f32, DT.FLOAT32, 0, 0, 1), "^output_tensor.sizes"),
        (DM1(None, f32, DT.FLOAT32, 0, 2**31, 1), "^diagonal_fill_begin"),
        (DM1(None, f32, DT.FLOAT32, 0, 0, I32_MIN - 1), "^diagonal_fill_end"),
        (DM1(None, f32, DT.FLOAT32, 0, 0.5, 1), "^diagonal_fill_begin"),
        (DM1(None, f32, 99, 0, 0, 1), "^value_data_type"),
        (DM1(None, None, DT.FLOAT32, 0, 0, 1), "^output_tensor"),
        (DM1(None, kdml.TensorDesc(DT.FLOAT32, (3, 4), (1, 1)), DT.FLOAT32, 0, 0, 1), "^output_tensor.strides"),
    ]
    for desc, match in cases:
        with pytest.raises(kdml.InvalidArgumentError, match=match):
            dev.compile(desc)
    with pytest.raises(kdml.UnsupportedError, match="dimensions"):
        dev.compile(DM(kdml.TensorDesc(DT.FLOAT32, (2, 2, 2, 2, 2))))
    with pytest.raises(kdml.UnsupportedError, match="dimensions"):
        dev.compile(DM1(None, kdml.TensorDesc(DT.FLOAT32, (5,)), DT.FLOAT32, 0, 0, 1))

    # execute-time errors leave every buffer as it was
    op = dev.compile(DM1(f32, f32, DT.FLOAT32, 1.0, 0, 1))
    x, x_raw = place(dev, rng, f32)
    y, y_raw = place(dev, rng, f32)
    wrong, w_raw = place(dev, rng, kdml.TensorDesc(DT.FLOAT32, (4, 3)))
    for inputs, outputs in (([None], [y]), ([x], [wrong]), ([wrong], [y]), ([x], []), ([x, x], [y])):
        with pytest.raises(kdml.InvalidArgumentError):
            op.execute(inputs, outputs)
    alias = kdml.Tensor(x.buffer, f32, x.offset)
    with pytest.raises(kdml.InvalidArgumentError, match="overlaps"):
        op.execute([x], [alias])
    assert x.buffer.read() == x_raw and y.buffer.read() == y_raw and wrong.buffer.read() == w_raw
    op0 = dev.compile(DM1(None, f32, DT.FLOAT32, 1.0, 0, 1))
    with pytest.raises(kdml.InvalidArgumentError, match="input_tensor"):
        op0.execute([x], [y])
    assert y.buffer.read() == y_raw


# ---- feature levels (seed tables, typed independently of registry.py) ----------------
def dm_allowed(level):
    if level < FL.FL_2_0:
        return None
    small = {DT.FLOAT32, DT.FLOAT16}
    ints = {DT.INT32, DT.INT16, DT.INT8, DT.UINT32, DT.UINT16, DT.UINT8}
    if level < FL.FL_2_1:
        return {4}, small
    if level < FL.FL_4_0:
        return {4}, small | ints
    if level < FL.FL_5_1:
        return {2, 3, 4}, small | ints
    return {2, 3, 4}, set(DT)


def dm1_allowed(level):
    return None if level < FL.FL_5_1 else ({2, 3, 4}, set(DT))


@pytest.mark.parametrize("level", list(FL), ids=lambda lv: lv.name)
def test_feature_levels(level):
    d = kdml.Device(feature_level=level)
    try:
        for name, allowed, make in (
            ("DIAGONAL_MATRIX", dm_allowed(level), lambda desc: kdml.DiagonalMatrixDesc(desc)),
            ("DIAGONAL_MATRIX1", dm1_allowed(level),
             lambda desc: kdml.DiagonalMatrix1Desc(desc, desc, desc.data_type, 0, 0, 1)),
        ):
            for dt in DT:
                for rank in range(1, 6):
                    desc = kdml.TensorDesc(dt, (2,) * rank)
                    if allowed is None:
                        with pytest.raises(kdml.UnsupportedError, match=name):
                            d.compile(make(desc))
                    elif rank in allowed[0] and dt in allowed[1]:
                        d.compile(make(desc))
                    else:
                        with pytest.raises(kdml.UnsupportedError, match="dimensions" if rank not in allowed[0] else dt.name):
                            d.compile(make(desc))
            if allowed is not None:
                desc = kdml.TensorDesc(DT.FLOAT16, (1, 2, 3, 4))
                y = d.empty(desc)
                d.compile(make(desc)).execute([y] if name == "DIAGONAL_MATRIX1" else [], [d.empty(desc)])
    finally:
        d.close()


def test_recording_chain(dev, rng):
    """DM writes, DM1 reads it in the same submission (barrier between them)."""
    desc = kdml.TensorDesc(DT.INT16, (2, 6, 7))
    a, b = dev.empty(desc), dev.empty(desc)
    dm = dev.compile(kdml.DiagonalMatrixDesc(desc, 1, -4.9))
    dm1 = dev.compile(kdml.DiagonalMatrix1Desc(desc, desc, DT.INT16, 9, -1, 0))
    with dev.record() as rec:
        rec.execute(dm, [], [a])
        rec.execute(dm1, [a], [b])
    exp = ref_dm1((2, 6, 7), -1, 0, np.array(9, np.int16), DT.INT16, ref_dm((2, 6, 7), 1, -4.9, DT.INT16))
    assert np.array_equal(b.numpy(), exp)


# ---- functional helpers -----------------------------------------------------------------
HUGE_K = [0, 1, -1, 2, -2, 4, -4, 5, -5, 6, -6, 2**31 - 1, -(2**31), 2**31, -(2**31) - 1, 2**40, -(2**40),
          2**63 - 1, -(2**63)]


def ref_trilu(fn, x: np.ndarray, k: int) -> np.ndarray:
    """numpy.triu/tril; numpy itself overflows for k near the int64 limits, where the
    direct formula (column - row >= k, resp. <= k) is used."""
    try:
        return np.ascontiguousarray(fn(x, k))
    except OverflowError:
        t = top_x(x.shape)
        keep = t >= k if fn is np.triu else t <= k
        return np.where(keep, x, np.zeros((), x.dtype))


@pytest.mark.parametrize("shape", [(4, 5), (5, 4), (1, 7), (3, 2, 6), (2, 2, 3, 3)])
def test_triu_tril_huge_k(dev, rng, shape):
    for dt in (DT.FLOAT32, DT.INT64, DT.UINT8):
        x_np = random_values(rng, dt, shape)
        x = dev.tensor(x_np)
        for k in HUGE_K:
            for fn, ref in ((kdml.triu, np.triu), (kdml.tril, np.tril)):
                got = fn(x, k).numpy()
                assert got.view(np.uint8).tobytes() == ref_trilu(ref, x_np, k).view(np.uint8).tobytes(), (
                    fn.__name__, k
                )


def test_triu_tril_numpy_and_strided(ddev, rng):
    x_np = random_values(rng, DT.FLOAT16, (3, 4, 6))
    assert np.array_equal(kdml.triu(x_np, -1, device=ddev).numpy(), np.triu(x_np, -1), equal_nan=True)
    desc = kdml.TensorDesc(DT.FLOAT16, (3, 4, 6), random_strides(rng, (3, 4, 6), allow_broadcast=True))
    x, raw = place(ddev, rng, desc)
    xv = read_logical(raw, x.offset, desc)
    out_desc = kdml.TensorDesc(DT.FLOAT16, (3, 4, 6), random_strides(rng, (3, 4, 6), allow_broadcast=False))
    out, _ = place(ddev, rng, out_desc)
    before = poison_against(out, np.tril(xv, 2), rng)
    assert kdml.tril(x, 2, out=out) is out
    assert_output(out, before, np.tril(xv, 2))
    with pytest.raises(kdml.InvalidArgumentError, match="^k"):
        kdml.triu(x, 1.5)
    with pytest.raises(kdml.InvalidArgumentError, match="^x"):
        kdml.triu(np.arange(3.0, dtype=np.float32), device=ddev)


def test_eye_like(dev, rng):
    for shape in ((3, 3), (4, 6), (6, 4), (1, 5)):
        for k in HUGE_K:
            got = kdml.eye_like(np.zeros(shape, np.int32), k, device=dev).numpy()
            assert got.dtype == np.int32 and np.array_equal(got, np.eye(*shape, k=k, dtype=np.int32)), (shape, k)
    got = kdml.eye_like((3, 4), 1, data_type=DT.FLOAT64, device=dev)
    assert got.desc.data_type == DT.FLOAT64 and np.array_equal(got.numpy(), np.eye(3, 4, 1))
    t = dev.tensor(np.ones((2, 5), np.float16))
    assert np.array_equal(kdml.eye_like(t, -1).numpy(), np.eye(2, 5, -1, dtype=np.float16))
    out_desc = kdml.TensorDesc(DT.UINT8, (4, 3), (1, 5))
    out, _ = place(dev, rng, out_desc)
    before = poison_against(out, np.eye(4, 3, 0, dtype=np.uint8), rng)
    kdml.eye_like((4, 3), data_type=DT.UINT8, out=out)
    assert_output(out, before, np.eye(4, 3, dtype=np.uint8))
    with pytest.raises(kdml.InvalidArgumentError, match="^x"):
        kdml.eye_like((2, 3, 4), device=dev)
    # below feature level 4_0 DIAGONAL_MATRIX is 4-D only: eye_like writes through a 4-D view
    d = kdml.Device(feature_level=FL.FL_2_0)
    try:
        assert np.array_equal(kdml.eye_like((3, 5), 2, device=d).numpy(), np.eye(3, 5, 2, dtype=np.float32))
        with pytest.raises(kdml.UnsupportedError):
            kdml.eye_like((3, 5), data_type=DT.INT32, device=d)
    finally:
        d.close()


def test_diagonal_matrix_helpers(dev, rng):
    got = kdml.diagonal_matrix((2, 3, 4), offset=1, value=10.6, data_type=DT.INT32, device=dev)
    assert np.array_equal(got.numpy(), ref_dm((2, 3, 4), 1, 10.6, DT.INT32))
    assert got.numpy()[0, 0, 1] == 10
    got = kdml.diagonal_matrix([3, 3], device=dev)
    assert np.array_equal(got.numpy(), np.eye(3, dtype=np.float32))
    out_desc = kdml.TensorDesc(DT.FLOAT16, (3, 4), (8, 2))
    out, _ = place(dev, rng, out_desc)
    before = poison_against(out, ref_dm((3, 4), -1, 2.0, DT.FLOAT16), rng)
    assert kdml.diagonal_matrix((3, 4), offset=-1, value=2.0, data_type=DT.FLOAT16, out=out) is out
    assert_output(out, before, ref_dm((3, 4), -1, 2.0, DT.FLOAT16))
    with pytest.raises(kdml.InvalidArgumentError, match="^out"):
        kdml.diagonal_matrix((3, 4), out=out)  # FLOAT32 requested, FLOAT16 out

    # diagonal_matrix1: without x (sizes + data_type), with x (Tensor / numpy), -0.0 and NaN values
    got = kdml.diagonal_matrix1(sizes=(4, 5), data_type=DT.UINT64, value=2**64 - 1,
                                diagonal_fill_begin=0, diagonal_fill_end=3, device=dev)
    assert np.array_equal(got.numpy(), ref_dm1((4, 5), 0, 3, np.uint64(2**64 - 1), DT.UINT64, None))
    x_np = random_values(rng, DT.FLOAT32, (2, 4, 5))
    for value in (0.0, -0.0, float("nan"), 3):
        got = kdml.diagonal_matrix1(x_np, value=value, diagonal_fill_begin=I32_MIN, diagonal_fill_end=0, device=dev)
        exp = ref_dm1((2, 4, 5), I32_MIN, 0, np.float32(value), DT.FLOAT32, x_np)
        assert got.numpy().view(np.uint32).tobytes() == exp.view(np.uint32).tobytes(), value
    with pytest.raises(kdml.InvalidArgumentError, match="^sizes"):
        kdml.diagonal_matrix1(value=1, diagonal_fill_begin=0, diagonal_fill_end=1, data_type=DT.INT8, device=dev)
    with pytest.raises(kdml.InvalidArgumentError, match="^data_type"):
        kdml.diagonal_matrix1(sizes=(2, 2), value=1, diagonal_fill_begin=0, diagonal_fill_end=1, device=dev)
    with pytest.raises(kdml.InvalidArgumentError, match="^data_type"):
        kdml.diagonal_matrix1(x_np, data_type=DT.FLOAT16, diagonal_fill_begin=0, diagonal_fill_end=1, device=dev)
    with pytest.raises(kdml.InvalidArgumentError, match="^value"):
        kdml.diagonal_matrix1(x_np, value=1e39, diagonal_fill_begin=0, diagonal_fill_end=1, device=dev)


def test_dm_equals_dm1(ddev, rng):
    """Seed 002's remark: DIAGONAL_MATRIX == DIAGONAL_MATRIX1 with Begin = Offset, End = Offset + 1."""
    for dt in ALL_TYPES:
        sizes = random_sizes(rng, 3)
        offset = int(rng.integers(-sizes[-2], sizes[-1] + 1))
        v = 3.0 if dt.is_float or dt.is_signed else 200.0
        a = kdml.diagonal_matrix(sizes, offset=offset, value=v, data_type=dt, device=ddev).numpy()
        b = kdml.diagonal_matrix1(sizes=sizes, data_type=dt, value=v, diagonal_fill_begin=offset,
                                  diagonal_fill_end=offset + 1, device=ddev).numpy()
        assert np.array_equal(a, b)
    for offset in (I32_MIN, I32_MAX):
        assert not kdml.diagonal_matrix((3, 3), offset=offset, device=ddev).numpy().any()
    assert math.isclose(float(kdml.diagonal_matrix((2, 2), value=0.1, data_type=DT.FLOAT64, device=ddev).numpy()[0, 0]),
                        float(np.float32(0.1)), rel_tol=0, abs_tol=0)


def test_constant_bound_through_list_subclasses(dev_constant, rng):
    """Bindings given as list subclasses take bind's checked path: the constant is bound there too."""

    class Outputs(list):
        pass

    desc = kdml.TensorDesc(DT.INT16, (3, 4))
    op = dev_constant.compile(kdml.DiagonalMatrixDesc(desc, 1, 7.0))
    assert op.variants == ["transfer:copy"]
    y, _ = place(dev_constant, rng, desc)
    exp = ref_dm((3, 4), 1, 7.0, DT.INT16)
    before = poison_against(y, exp, rng)
    op.execute(Outputs(), Outputs([y]))
    assert_output(y, before, exp)
