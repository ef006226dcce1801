"""MATRIX_MULTIPLY_INTEGER_TO_FLOAT (seed 003) against a float64 numpy reference.

Every type pair (INT/UINT 8, 16, 32 of one width, either signedness), FLOAT32/FLOAT16
scales+bias+output, per-tensor / per-row / per-column scales and zero points, optional zero
points and bias, 2-4 dimensions with batch broadcast, strided / transposed / broadcast
layouts at random offsets, poisoned outputs with guard bytes, both kernel families (forced
with KDML_MATMUL_KERNEL), ONNX Runtime's own cases, edge sizes, the feature level and the
constraints. Tolerance: 1e-4 of sum_k |a'||b'| + |bias| for FLOAT32 (1e-3 plus the rounding
for FLOAT16), a' = (A - AZP) * AScale, b' = (B - BZP) * BScale.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers import assert_outside_unchanged, element_byte_positions, force_kernel, place, random_strides, random_values, read_logical

import kompute_dml as kdml
from kompute_dml.ops.matmul_integer import kernel_family

DT = kdml.DataType
FL = kdml.FeatureLevel
FAMILIES = ["cpu", "gpu"]
TEXEL_FAMILIES = ["cpu", "cpu-ssbo"]  # the CPU family with and without the texel variant
INT_PAIRS = {
    8: [(DT.INT8, DT.INT8), (DT.UINT8, DT.UINT8), (DT.UINT8, DT.INT8), (DT.INT8, DT.UINT8)],
    16: [(DT.INT16, DT.INT16), (DT.UINT16, DT.UINT16), (DT.UINT16, DT.INT16), (DT.INT16, DT.UINT16)],
    32: [(DT.INT32, DT.INT32), (DT.UINT32, DT.UINT32), (DT.UINT32, DT.INT32), (DT.INT32, DT.UINT32)],
}
ALL_PAIRS = [p for ps in INT_PAIRS.values() for p in ps]


@pytest.fixture(params=FAMILIES)
def family(request, dev, monkeypatch):
    force_kernel(monkeypatch, dev, request.param)
    return request.param


# ---- reference and comparison ---------------------------------------------------------
def reference(a, asc, azp, b, bsc, bzp, bias):
    """float64 result and magnitude sum_k |a'||b'| + |bias| (all arrays already broadcast to
    the 4-D shapes: a (B,C,M,K), asc/azp (M,1), b (B,C,K,N), bsc/bzp (1,N), bias (B,C,M,N))."""
    a1 = (a.astype(np.float64) - azp.astype(np.float64)) * asc.astype(np.float64)
    b1 = (b.astype(np.float64) - bzp.astype(np.float64)) * bsc.astype(np.float64)
    bias = bias.astype(np.float64)
    return a1 @ b1 + bias, np.abs(a1) @ np.abs(b1) + np.abs(bias)


def assert_close_output(t: kdml.Tensor, before: bytes, ref: np.ndarray, mag: np.ndarray) -> None:
    """Every byte outside the output unchanged; every element within the tolerance."""
    after = assert_outside_unchanged(t, before)
    got = read_logical(after, t.offset, t.desc).astype(np.float64)
    ref = np.broadcast_to(ref, t.desc.sizes)
    mag = np.broadcast_to(mag, t.desc.sizes)
    if t.desc.data_type == DT.FLOAT16:
        tol = 1e-3 * mag + np.abs(ref) * 2.0**-11 + 2.0**-24
    else:
        tol = 1e-4 * mag + 1e-37
    err = np.abs(got - ref)
    bad = np.argwhere(~(err <= tol))
    assert bad.size == 0, (
        f"{len(bad)} of {got.size} elements out of tolerance, first at {bad[:4].tolist()}: "
        f"got {got[tuple(bad[0])]!r} want {ref[tuple(bad[0])]!r} (tol {tol[tuple(bad[0])]:.3g})"
    )


# ---- case builder ---------------------------------------------------------------------
def quant_sizes(mode: str, count: int, dims: int, per: str) -> tuple[int, ...]:
    if mode == "tensor":
        return (1,) * dims
    if per == "row":
        return (1, 1, count, 1)[4 - dims:] if dims > 1 else (count,)
    return (1, 1, 1, count)[4 - dims:]


def near_values(rng):
    centers = {}

    def gen(rng, dt, shape):
        info = np.iinfo(dt.numpy_dtype)
        c = centers.setdefault(dt, int(rng.integers(info.min + 500, info.max - 500)))
        return rng.integers(c - 500, c + 500, shape).astype(dt.numpy_dtype)

    return gen


def make_scale(rng, dt, sizes, magnitude):
    vals = (rng.uniform(0.5, 1.0, sizes) * rng.choice([-1.0, 1.0], sizes)) * magnitude
    return vals.astype(dt.numpy_dtype)


def run_case(
    dev, rng, *, a_dt, b_dt, out_dt, M, K, N, batch=(), rank=2, a_scale="tensor", b_scale="tensor",
    a_zp=True, b_zp=True, bias=True, qdims=None, layout="packed", values=None, check=True,
):
    """Build, place, poison, execute and check one case; returns the output tensor.
    bias: False, True (the layout's strides) or "n" (one value per column: stride 0 along M and
    the batch dimensions, as ONNX's (N,) bias)."""
    lead = tuple(batch)
    assert len(lead) == rank - 2
    a_sizes, b_sizes, o_sizes = (*lead, M, K), (*lead, K, N), (*lead, M, N)
    qd = qdims if qdims is not None else int(rng.integers(1, 5))

    def strides_for(sizes, is_input):
        if layout == "packed":
            return None
        if layout == "rows16" and is_input:
            # unit inner stride, rows padded by whole 16-byte texels, batch dimensions packed
            # outside the rows or broadcast (stride 0): the texel variant's layouts
            st = [sizes[-1] + 16 * int(rng.integers(0, 3)), 1]
            acc = sizes[-2] * st[0]
            for s in reversed(sizes[:-2]):
                st.insert(0, 0 if rng.random() < 0.4 else acc)
                acc *= s
            return tuple(st)
        if layout == "broadcast" and is_input:
            return random_strides(rng, sizes, allow_broadcast=True)
        if layout == "transposed" and is_input:
            # the last two dimensions column-major, the leading ones packed outside them
            st, acc = [1, sizes[-2]], sizes[-2] * sizes[-1]
            for s in reversed(sizes[:-2]):
                st.insert(0, acc)
                acc *= s
            return tuple(st)
        return random_strides(rng, sizes, allow_broadcast=False)

    a_desc = kdml.TensorDesc(a_dt, a_sizes, strides_for(a_sizes, True))
    b_desc = kdml.TensorDesc(b_dt, b_sizes, strides_for(b_sizes, True))
    o_desc = kdml.TensorDesc(out_dt, o_sizes, strides_for(o_sizes, False))
    if bias == "n":
        bias_st = (0,) * (rank - 1) + (int(rng.integers(1, 3)),)
        bias_desc = kdml.TensorDesc(out_dt, o_sizes, bias_st)
    else:
        bias_desc = kdml.TensorDesc(out_dt, o_sizes, strides_for(o_sizes, True)) if bias else None
    as_desc = kdml.TensorDesc(out_dt, quant_sizes(a_scale, M, qd, "row"))
    bs_desc = kdml.TensorDesc(out_dt, quant_sizes(b_scale, N, qd, "col"))
    az_mode = a_scale if a_zp == "same" else ("row" if rng.random() < 0.5 else "tensor")
    bz_mode = b_scale if b_zp == "same" else ("col" if rng.random() < 0.5 else "tensor")
    az_desc = kdml.TensorDesc(a_dt, quant_sizes(az_mode, M, qd, "row")) if a_zp else None
    bz_desc = kdml.TensorDesc(b_dt, quant_sizes(bz_mode, N, qd, "col")) if b_zp else None

    vals = dict(values or {})
    if out_dt == DT.FLOAT16 and a_dt.size > 1:
        # FLOAT16 cannot hold sums of 16/32-bit products: values (and zero points) within
        # +-500 of a random point of the type's range, so A - AZP stays small.
        gen = near_values(rng)
    else:
        gen = random_values
    a_v = vals.get("a", gen(rng, a_dt, a_sizes))
    b_v = vals.get("b", gen(rng, b_dt, b_sizes))
    az_v = vals.get("azp", gen(rng, a_dt, az_desc.sizes)) if a_zp else None
    bz_v = vals.get("bzp", gen(rng, b_dt, bz_desc.sizes)) if b_zp else None
    a4 = np.broadcast_to(a_v, a_sizes)
    b4 = np.broadcast_to(b_v, b_sizes)
    azr = np.asarray(az_v, np.float64).reshape(-1, 1) if a_zp else np.zeros((1, 1))
    bzr = np.asarray(bz_v, np.float64).reshape(1, -1) if b_zp else np.zeros((1, 1))
    # scales: keep FLOAT16 results finite and of moderate size
    a1max = max(1.0, float(np.max(np.abs(a4.astype(np.float64) - azr))))
    b1max = max(1.0, float(np.max(np.abs(b4.astype(np.float64) - bzr))))
    if out_dt == DT.FLOAT16:
        amag, bmag = 1.0 / a1max, 100.0 / (b1max * K)
    else:
        amag, bmag = 10.0 ** rng.integers(-3, 2), 10.0 ** rng.integers(-3, 2)
    as_v = vals.get("a_scale", make_scale(rng, out_dt, as_desc.sizes, amag))
    bs_v = vals.get("b_scale", make_scale(rng, out_dt, bs_desc.sizes, bmag))
    bias_v = vals.get("bias", (rng.standard_normal(o_sizes) * 10).astype(out_dt.numpy_dtype)) if bias else None

    tensors, seen = [], []
    for desc, v in ((a_desc, a_v), (as_desc, as_v), (az_desc, az_v), (b_desc, b_v), (bs_desc, bs_v),
                    (bz_desc, bz_v), (bias_desc, bias_v)):
        if desc is None:
            tensors.append(None)
            seen.append(None)
            continue
        t, raw0 = place(dev, rng, desc, np.asarray(v))
        tensors.append(t)
        seen.append(read_logical(raw0, t.offset, desc))  # what the operator reads (broadcast strides)
    out, _ = place(dev, rng, o_desc)
    ref, mag = reference(
        seen[0], seen[1].reshape(-1, 1), azr, seen[3], seen[4].reshape(1, -1), bzr,
        seen[6] if bias else np.zeros(o_sizes),
    )
    # poison: every output element starts far from its expected value
    raw = np.frombuffer(out.buffer.read(), np.uint8).copy()
    pos = element_byte_positions(out.offset, o_desc)
    poison = np.full(o_sizes, np.nan, out_dt.numpy_dtype)
    raw[pos] = np.frombuffer(poison.tobytes(), np.uint8)
    out.buffer.write(raw.tobytes())
    before = raw.tobytes()
    inputs_before = [t.buffer.read() if t is not None else None for t in tensors]

    desc = kdml.MatrixMultiplyIntegerToFloatDesc(a_desc, as_desc, az_desc, b_desc, bs_desc, bz_desc, bias_desc, o_desc)
    op = dev.compile(desc)
    op.execute(tensors, [out])
    if check:
        assert_close_output(out, before, ref, mag)
        for t, raw_in in zip(tensors, inputs_before):
            if t is not None:
                assert t.buffer.read() == raw_in
    return op, out, ref, mag


# ---- ONNX Runtime's cases -------------------------------------------------------------
@pytest.mark.parametrize("b_scale", ["tensor", "col"])
@pytest.mark.parametrize("zp_bias", [(False, False), (True, False), (False, True), (True, True)], ids=str)
@pytest.mark.parametrize("pair", INT_PAIRS[8], ids=lambda p: f"{p[0].name}x{p[1].name}")
def test_ort_cases_m4_k128_n128(dev, rng, family, pair, zp_bias, b_scale):
    zp, bias = zp_bias
    op, *_ = run_case(dev, rng, a_dt=pair[0], b_dt=pair[1], out_dt=DT.FLOAT32, M=4, K=128, N=128, b_scale=b_scale,
                      a_zp=zp, b_zp=zp, bias=bias, qdims=2)
    if family == "gpu":
        assert op.variants[0] == "mmi_gpu_8"
    else:
        assert_cpu_variant(dev, op, texel_name(op.desc.output_tensor, bias))


def test_ort_float16_case(dev, rng, family):
    """ORT's FP16 test: 2x3 by 3x2, per-column b_scale [1.10, 1.123], b_zp [98, 71]."""
    a = np.array([[11, 7, 3], [10, 6, 2]], np.uint8)
    b = np.array([[1, 4], [2, 5], [3, 6]], np.uint8)
    vals = {
        "a": a, "b": b, "azp": np.array([[1]], np.uint8), "bzp": np.array([[98, 71]], np.uint8),
        "a_scale": np.array([[0.5]], np.float16), "b_scale": np.array([[1.10, 1.123]], np.float16),
        "bias": np.array([[0.25, -0.5], [1.0, 2.0]], np.float16),
    }
    _, out, ref, _ = run_case(dev, rng, a_dt=DT.UINT8, b_dt=DT.UINT8, out_dt=DT.FLOAT16, M=2, K=3, N=2,
                              b_scale="col", a_zp="same", b_zp="same", bias=True, qdims=2, values=vals)
    expected = ((a - 1.0) * np.float64(np.float16(0.5))) @ (
        (b - np.array([98.0, 71.0])) * np.array([np.float16(1.10), np.float16(1.123)], np.float64)
    ) + vals["bias"].astype(np.float64)
    assert np.allclose(ref, expected)
    assert np.allclose(out.numpy().astype(np.float64), expected, rtol=2e-3, atol=0.05)


@pytest.mark.parametrize("pair", [(DT.INT8, DT.INT8), (DT.UINT8, DT.INT8)], ids=lambda p: f"{p[0].name}x{p[1].name}")
def test_ort_broadcast_5x4x3_by_3x4(dev, rng, family, pair):
    """numpy-broadcast {5,4,3} x {3,4} as a 4-D desc: B repeated over channels by stride 0."""
    a = random_values(rng, pair[0], (1, 5, 4, 3))
    b = random_values(rng, pair[1], (3, 4))
    a_desc = kdml.TensorDesc(pair[0], (1, 5, 4, 3))
    b_desc = kdml.TensorDesc(pair[1], (1, 5, 3, 4), (0, 0, 4, 1))
    o_desc = kdml.TensorDesc(DT.FLOAT32, (1, 5, 4, 4))
    s = kdml.TensorDesc(DT.FLOAT32, (1, 1, 1, 1))
    zp_a = kdml.TensorDesc(pair[0], (1, 1, 1, 1))
    bs_desc = kdml.TensorDesc(DT.FLOAT32, (1, 1, 1, 4))
    bias_desc = kdml.TensorDesc(DT.FLOAT32, (1, 5, 4, 4), (0, 0, 0, 1))  # ONNX bias (N,) broadcast
    asv, bsv = np.array([0.02], np.float32), rng.uniform(0.01, 0.1, 4).astype(np.float32)
    azv = random_values(rng, pair[0], (1,))
    biasv = rng.standard_normal(4).astype(np.float32)
    def bind(arr, desc):
        return kdml.Tensor(dev.tensor(arr).buffer, desc)

    ins = [bind(a, a_desc), bind(asv, s), bind(azv, zp_a), bind(b, b_desc), bind(bsv, bs_desc), None,
           bind(biasv, bias_desc)]
    out = dev.empty(o_desc)
    desc = kdml.MatrixMultiplyIntegerToFloatDesc(a_desc, s, zp_a, b_desc, bs_desc, None, bias_desc, o_desc)
    dev.compile(desc).execute(ins, [out])
    ref = ((a[0].astype(np.float64) - azv[0]) * asv[0]) @ (b.astype(np.float64) * bsv) + biasv
    mag = np.abs((a[0].astype(np.float64) - azv[0]) * asv[0]) @ np.abs(b.astype(np.float64) * bsv) + np.abs(biasv)
    assert np.all(np.abs(out.numpy()[0] - ref) <= 1e-4 * mag)


def test_ort_broadcast_15x14x13_by_15x13x27(dev, rng, family):
    run_case(dev, rng, a_dt=DT.UINT8, b_dt=DT.INT8, out_dt=DT.FLOAT32, M=14, K=13, N=27, batch=(1, 15), rank=4,
             b_scale="col", a_zp=True, b_zp=False, bias=True)


# ---- random differential tests --------------------------------------------------------
LAYOUTS = ["packed", "strided", "broadcast", "transposed"]


@pytest.mark.parametrize("out_dt", [DT.FLOAT32, DT.FLOAT16], ids=lambda d: d.name)
@pytest.mark.parametrize("pair", ALL_PAIRS, ids=lambda p: f"{p[0].name}x{p[1].name}")
def test_random_differential(dev, rng, family, pair, out_dt):
    for _ in range(2):
        rank = int(rng.integers(2, 5))
        batch = tuple(int(rng.integers(1, 4)) for _ in range(rank - 2))
        M, K, N = (int(rng.integers(1, 20)) for _ in range(3))
        run_case(
            dev, rng, a_dt=pair[0], b_dt=pair[1], out_dt=out_dt, M=M, K=K, N=N, batch=batch, rank=rank,
            a_scale=str(rng.choice(["tensor", "row"])), b_scale=str(rng.choice(["tensor", "col"])),
            a_zp=bool(rng.random() < 0.7), b_zp=bool(rng.random() < 0.7), bias=bool(rng.random() < 0.6),
            layout=str(rng.choice(LAYOUTS)),
        )


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("width", [8, 16, 32])
def test_layouts_both_families(dev, rng, family, width, layout):
    a_dt, b_dt = INT_PAIRS[width][int(rng.integers(0, 4))]
    run_case(dev, rng, a_dt=a_dt, b_dt=b_dt, out_dt=DT.FLOAT32, M=37, K=45, N=29, batch=(2,), rank=3,
             a_scale="row", b_scale="col", layout=layout)


@pytest.mark.parametrize("mnk", [(1, 1, 1), (1, 64, 33), (7, 1, 9), (9, 5, 1), (1, 3, 1), (65, 67, 66),
                                 (4, 4, 4), (5, 129, 3), (130, 20, 70)], ids=str)
@pytest.mark.parametrize("width", [8, 16, 32])
def test_edge_sizes(dev, rng, family, width, mnk):
    M, K, N = mnk
    a_dt, b_dt = INT_PAIRS[width][int(rng.integers(0, 4))]
    run_case(dev, rng, a_dt=a_dt, b_dt=b_dt, out_dt=DT.FLOAT32, M=M, K=K, N=N, a_scale="row", b_scale="col",
             layout="packed")


@pytest.mark.parametrize("k", [4, 8, 12, 16, 20, 24, 36])
def test_packed_variant_k_multiples(dev, rng, k):
    """Aligned rows (K multiple of the word) take the packed CPU variant; K tails included."""
    for width, (a_dt, b_dt) in ((8, (DT.INT8, DT.UINT8)), (16, (DT.UINT16, DT.INT16)), (32, (DT.INT32, DT.INT32))):
        op, *_ = run_case(dev, rng, a_dt=a_dt, b_dt=b_dt, out_dt=DT.FLOAT32, M=6, K=k, N=4 * (k // 4) + 8,
                          a_scale="row", b_scale="col", layout="packed")
        if kernel_family(dev) == "cpu":
            assert op.variants[0].startswith(f"mmi_cpu_p{width}")


def large_k_extremes(a_dt, b_dt, M, K, N):
    """run_case values whose 8-bit sums exceed int32 at large K: A at its minimum (row 1 at its
    maximum every third k), B at its maximum (column 2 at its minimum every seventh k), zero
    points at the opposite ends, unit scales."""
    ia, ib = np.iinfo(a_dt.numpy_dtype), np.iinfo(b_dt.numpy_dtype)
    a = np.full((M, K), ia.min, a_dt.numpy_dtype)
    a[1, ::3] = ia.max
    b = np.full((K, N), ib.max, b_dt.numpy_dtype)
    b[::7, 2] = ib.min
    return {"a": a, "b": b, "azp": np.array([[ia.max]], a_dt.numpy_dtype), "bzp": np.array([[ib.min]], b_dt.numpy_dtype),
            "a_scale": np.array([[1.0]], np.float32), "b_scale": np.array([[1.0]], np.float32)}


# ---- the texel variant (8-bit, 16-byte-aligned rows) --------------------------------------
def texel_covers_buffers(dev) -> bool:
    """The texel variant binds A and B as uniform texel buffers of 16-byte texels, so the CPU
    family takes it only where maxTexelBufferElements texels cover the largest storage buffer
    (lavapipe: 128 MiB both; NVIDIA H100: 2 GiB of texels for 4 GiB buffers, so never)."""
    return dev.limits["max_texel_buffer_elements"] * 16 >= dev.limits["max_storage_buffer_range"]


def assert_cpu_variant(dev, op, texel_variant):
    """The CPU family's pick: `texel_variant` where the device's texel limit allows it, else
    one of the storage-buffer variants (same results, tested the same way)."""
    if texel_covers_buffers(dev):
        assert op.variants[0] == texel_variant
    else:
        assert op.variants[0].startswith("mmi_cpu_") and not op.variants[0].startswith("mmi_cpu_t"), op.variants


def texel_name(out_desc, bias):
    """The texel variant's name: the output store and the bias mode (run_case's bias) are
    compile-time. FLOAT32 rows with unit N stride on 16-byte boundaries are stored as uvec4
    (the stride of a size-1 dimension is never used)."""
    mode = "_bn" if bias == "n" else ("" if bias else "_nb")
    st, sizes = out_desc.effective_strides, out_desc.sizes
    if out_desc.data_type == DT.FLOAT16:
        store = "h"
    elif st[-1] == 1 and all(x % 4 == 0 for x, n in zip(st[:-1], sizes[:-1]) if n > 1):
        store = ""
    else:
        store = "s"
    return "mmi_cpu_t8" + store + mode


@pytest.mark.parametrize("kernel", TEXEL_FAMILIES)
@pytest.mark.parametrize("out_dt", [DT.FLOAT32, DT.FLOAT16], ids=lambda d: d.name)
@pytest.mark.parametrize("pair", INT_PAIRS[8], ids=lambda p: f"{p[0].name}x{p[1].name}")
def test_texel_variant_differential(dev, rng, monkeypatch, kernel, pair, out_dt):
    """Shapes and layouts the texel variant takes (K, N multiples of 16, rows on 16-byte
    texels, batch broadcast) against the float64 reference; 'cpu-ssbo' runs the same cases
    on the storage-buffer variants."""
    force_kernel(monkeypatch, dev, kernel)
    for bias in (True, False, "n"):  # the three compile-time bias modes
        rank = int(rng.integers(2, 5))
        batch = tuple(int(rng.integers(1, 3)) for _ in range(rank - 2))
        M = int(rng.integers(4, 30))
        K = 16 * int(rng.integers(1, 20))
        N = 16 * int(rng.integers(1, 5))
        op, *_ = run_case(
            dev, rng, a_dt=pair[0], b_dt=pair[1], out_dt=out_dt, M=M, K=K, N=N, batch=batch, rank=rank,
            a_scale=str(rng.choice(["tensor", "row"])), b_scale=str(rng.choice(["tensor", "col"])),
            a_zp=bool(rng.random() < 0.7), b_zp=bool(rng.random() < 0.7), bias=bias,
            layout=str(rng.choice(["packed", "rows16"])),
        )
        assert (op.variants[0] == texel_name(op.desc.output_tensor, bias)) == (kernel == "cpu" and texel_covers_buffers(dev))


@pytest.mark.parametrize("mkn", [(4, 16, 16), (9, 16, 48), (31, 48, 16), (130, 64, 80)], ids=str)
def test_texel_variant_edges(dev, rng, monkeypatch, mkn):
    """Row blocks cut by M (the invocation's last rows are clamped), one K chunk, N = 16."""
    force_kernel(monkeypatch, dev, "cpu")
    M, K, N = mkn
    a_dt, b_dt = INT_PAIRS[8][int(rng.integers(0, 4))]
    op, *_ = run_case(dev, rng, a_dt=a_dt, b_dt=b_dt, out_dt=DT.FLOAT32, M=M, K=K, N=N, a_scale="row",
                      b_scale="col")
    assert_cpu_variant(dev, op, texel_name(op.desc.output_tensor, True))


@pytest.mark.parametrize("bias", [True, False, "n"], ids=str)
@pytest.mark.parametrize("out_layout", ["packed", "padded", "strided"])
def test_texel_variant_stores(dev, rng, monkeypatch, out_layout, bias):
    """Every FLOAT32 store and bias mode: packed and padded rows (row stride N + 4) take the
    uvec4 row stores (the pad stays untouched), an N stride of 2 the per-element stores."""
    force_kernel(monkeypatch, dev, "cpu")
    M, K, N = 11, 48, 32
    a = rng.integers(-128, 128, (M, K)).astype(np.int8)
    b = rng.integers(0, 256, (K, N)).astype(np.uint8)
    o_strides = {"packed": None, "padded": (N + 4, 1), "strided": (2 * N, 2)}[out_layout]
    o_desc = kdml.TensorDesc(DT.FLOAT32, (M, N), o_strides)
    bias_v = (rng.standard_normal(N) * 10).astype(np.float32)
    bias_desc = {True: kdml.TensorDesc(DT.FLOAT32, (M, N)), "n": kdml.TensorDesc(DT.FLOAT32, (M, N), (0, 1)),
                 False: None}[bias]
    bias_full = np.broadcast_to(bias_v, (M, N)) if bias == "n" else (rng.standard_normal((M, N)) * 10).astype(np.float32)
    desc = kdml.MatrixMultiplyIntegerToFloatDesc(
        kdml.TensorDesc(DT.INT8, (M, K)), kdml.TensorDesc(DT.FLOAT32, (1, 1)), None,
        kdml.TensorDesc(DT.UINT8, (K, N)), kdml.TensorDesc(DT.FLOAT32, (1, N)), None, bias_desc, o_desc)
    op = dev.compile(desc)
    assert_cpu_variant(dev, op, texel_name(o_desc, bias))
    out, _ = place(dev, rng, o_desc)
    before = out.buffer.read()
    b_scale = rng.uniform(0.5, 2.0, (1, N)).astype(np.float32)
    bias_t = None
    if bias == "n":
        bias_t = kdml.Tensor(dev.tensor(bias_v).buffer, bias_desc)
    elif bias:
        bias_t = dev.tensor(bias_full)
    op.execute([dev.tensor(a), dev.tensor(np.full((1, 1), 0.5, np.float32)), None, dev.tensor(b),
                dev.tensor(b_scale), None, bias_t], [out])
    ref = (a.astype(np.float64) @ b.astype(np.float64)) * 0.5 * b_scale.astype(np.float64)
    if bias:
        ref += bias_full
    raw = assert_outside_unchanged(out, before)  # random bytes before: every element is written
    got = np.frombuffer(raw[element_byte_positions(out.offset, o_desc)].tobytes(), np.float32).reshape(M, N)
    assert np.allclose(got, ref, rtol=1e-6, atol=1e-3)


@pytest.mark.parametrize("mkn", [(3, 16, 16), (8, 24, 16), (8, 16, 24)], ids=str)
def test_texel_variant_not_taken(dev, rng, monkeypatch, mkn):
    """M <= 3 or K, N not multiples of 16: the storage-buffer variants, still correct."""
    force_kernel(monkeypatch, dev, "cpu")
    M, K, N = mkn
    op, *_ = run_case(dev, rng, a_dt=DT.UINT8, b_dt=DT.INT8, out_dt=DT.FLOAT32, M=M, K=K, N=N)
    assert op.variants[0].startswith("mmi_cpu_p8")


def test_texel_variant_unaligned_row_stride(dev, rng, monkeypatch):
    """A row stride that is a multiple of 4 but not of 16 bytes: not the texel variant."""
    force_kernel(monkeypatch, dev, "cpu")
    M, K, N = 8, 32, 16
    a = rng.integers(-128, 128, (M, K)).astype(np.int8)
    b = rng.integers(-128, 128, (K, N)).astype(np.int8)
    a_desc = kdml.TensorDesc(DT.INT8, (M, K), (K + 4, 1))
    desc = kdml.MatrixMultiplyIntegerToFloatDesc(
        a_desc, kdml.TensorDesc(DT.FLOAT32, (1, 1)), None,
        kdml.TensorDesc(DT.INT8, (K, N)), kdml.TensorDesc(DT.FLOAT32, (1, 1)), None, None,
        kdml.TensorDesc(DT.FLOAT32, (M, N)))
    op = dev.compile(desc)
    assert op.variants[0] == "mmi_cpu_p8v"
    a_t, _ = place(dev, rng, a_desc, a)
    out = dev.empty(desc.output_tensor)
    one = np.ones((1, 1), np.float32)
    op.execute([a_t, dev.tensor(one), None, dev.tensor(b), dev.tensor(one), None, None], [out])
    assert np.array_equal(out.numpy(), (a.astype(np.float64) @ b).astype(np.float32))


@pytest.mark.parametrize("pair", [(DT.UINT8, DT.INT8), (DT.INT8, DT.INT8)], ids=lambda p: f"{p[0].name}x{p[1].name}")
def test_texel_variant_large_k_extremes(dev, rng, monkeypatch, pair):
    """K = 40000 at the types' extremes: block sums beyond int32, compensated accumulation."""
    force_kernel(monkeypatch, dev, "cpu")
    a_dt, b_dt = pair
    M, K, N = 5, 40000, 16
    vals = large_k_extremes(a_dt, b_dt, M, K, N)
    ia = np.iinfo(a_dt.numpy_dtype)
    vals["a"][4] = rng.integers(ia.min, ia.max, K, endpoint=True)
    op, out, ref, _ = run_case(dev, rng, a_dt=a_dt, b_dt=b_dt, out_dt=DT.FLOAT32, M=M, K=K, N=N, a_zp="same",
                               b_zp="same", bias=False, qdims=2, values=vals)
    assert_cpu_variant(dev, op, "mmi_cpu_t8_nb")
    assert abs(ref[0, 0]) > 2**31
    assert np.allclose(out.numpy(), ref, rtol=1e-6)


# ---- accuracy at the extremes ----------------------------------------------------------
@pytest.mark.parametrize("pair", INT_PAIRS[32], ids=lambda p: f"{p[0].name}x{p[1].name}")
def test_32bit_extremes(dev, rng, family, pair):
    """A - AZP reaches +-(2^32 - 1) and products 2^64: exact differences, bounded error."""
    a_dt, b_dt = pair
    ia, ib = np.iinfo(a_dt.numpy_dtype), np.iinfo(b_dt.numpy_dtype)
    M, K, N = 5, 300, 6
    a = rng.choice(np.array([ia.min, ia.max, ia.min + 1, ia.max - 1, 0], a_dt.numpy_dtype), (M, K))
    b = rng.choice(np.array([ib.min, ib.max, ib.max - 7, 0], b_dt.numpy_dtype), (K, N))
    azp = np.array([[ia.max], [ia.min], [ia.max - 1], [0], [ia.min + 3]], a_dt.numpy_dtype)
    bzp = np.array([[ib.min, ib.max, ib.min, ib.max, 0, 5]], b_dt.numpy_dtype)
    run_case(dev, rng, a_dt=a_dt, b_dt=b_dt, out_dt=DT.FLOAT32, M=M, K=K, N=N, a_scale="row", b_scale="col",
             a_zp="same", b_zp="same", bias=False, qdims=2, values={"a": a, "b": b, "azp": azp, "bzp": bzp})


def test_32bit_cancellation(dev, rng, family):
    """a and zp adjacent at the top of the range: a' = +-1 must not vanish in float rounding."""
    M, K, N = 2, 8, 3
    top = np.iinfo(np.int32).max
    a = np.full((M, K), top, np.int32)
    a[1] = top - 1
    b = np.ones((K, N), np.int32)
    vals = {"a": a, "b": b, "azp": np.array([[top - 1]], np.int32), "bzp": np.array([[0]], np.int32),
            "a_scale": np.array([[1.0]], np.float32), "b_scale": np.array([[1.0]], np.float32)}
    _, out, _, _ = run_case(dev, rng, a_dt=DT.INT32, b_dt=DT.INT32, out_dt=DT.FLOAT32, M=M, K=K, N=N, a_zp="same",
                            b_zp="same", bias=False, qdims=2, values=vals)
    assert np.array_equal(out.numpy(), np.array([[8.0] * N, [0.0] * N], np.float32))


@pytest.mark.parametrize("pair", [(DT.UINT8, DT.INT8), (DT.INT8, DT.UINT8)], ids=lambda p: f"{p[0].name}x{p[1].name}")
def test_8bit_large_k(dev, rng, family, pair):
    """K = 40000: an int32 sum of (a - zpa)(b - zpb) = +-255^2 per term would overflow."""
    a_dt, b_dt = pair
    M, K, N = 3, 40000, 5
    vals = large_k_extremes(a_dt, b_dt, M, K, N)
    _, out, ref, _ = run_case(dev, rng, a_dt=a_dt, b_dt=b_dt, out_dt=DT.FLOAT32, M=M, K=K, N=N, a_zp="same",
                              b_zp="same", bias=False, qdims=2, values=vals)
    assert abs(ref[0, 0]) > 2**31  # beyond int32 accumulation
    assert np.allclose(out.numpy(), ref, rtol=1e-6)


def test_16bit_large_k_random(dev, rng, family):
    run_case(dev, rng, a_dt=DT.UINT16, b_dt=DT.INT16, out_dt=DT.FLOAT32, M=3, K=3000, N=5, a_scale="row",
             b_scale="col")


# ---- recording, family choice, functional ---------------------------------------------
def test_kernel_family_choice(dev, monkeypatch):
    force_kernel(monkeypatch, dev, "auto")
    assert kernel_family(dev) == dev.policy.matmul_family  # the per-device policy's (tests/test_policy.py)
    force_kernel(monkeypatch, dev, "gpu")
    assert kernel_family(dev) == "gpu"
    assert kernel_family(dev, "cpu") == "cpu"
    force_kernel(monkeypatch, dev, "CPU-SSBO")
    assert kernel_family(dev) == "cpu-ssbo"
    force_kernel(monkeypatch, dev, "tpu")
    with pytest.raises(kdml.InvalidArgumentError, match="kernel"):
        kernel_family(dev)


def test_recorded_twice_and_reused(dev, rng):
    M, K, N = 8, 16, 12
    a = rng.integers(-128, 128, (M, K)).astype(np.int8)
    b = rng.integers(0, 256, (K, N)).astype(np.uint8)
    s = np.array([0.5], np.float32)
    desc = kdml.MatrixMultiplyIntegerToFloatDesc(
        kdml.TensorDesc(DT.INT8, (M, K)), kdml.TensorDesc(DT.FLOAT32, (1,)), None,
        kdml.TensorDesc(DT.UINT8, (K, N)), kdml.TensorDesc(DT.FLOAT32, (1,)), None, None,
        kdml.TensorDesc(DT.FLOAT32, (M, N)))
    op = dev.compile(desc)
    ins = [dev.tensor(a), dev.tensor(s), None, dev.tensor(b), dev.tensor(s), None, None]
    o1, o2 = dev.empty(desc.output_tensor), dev.empty(desc.output_tensor)
    with dev.record() as rec:
        rec.execute(op, ins, [o1])
        rec.execute(op, ins, [o2])
    ref = (a * 0.5) @ (b * 0.5)
    assert np.array_equal(o1.numpy(), ref.astype(np.float32))
    assert np.array_equal(o2.numpy(), ref.astype(np.float32))
    op.execute(ins, [o1])
    assert np.array_equal(o1.numpy(), ref.astype(np.float32))


def _ref_functional(a, b, asc, bsc, azp, bzp, bias):
    a1 = (a.astype(np.float64) - (0 if azp is None else np.asarray(azp, np.float64).reshape(-1, 1) if np.size(azp) > 1
                                  else np.float64(np.asarray(azp).reshape(())))) * (
        np.asarray(asc, np.float64).reshape(-1, 1) if np.size(asc) > 1 else np.float64(np.asarray(asc).reshape(())))
    b1 = (b.astype(np.float64) - (0 if bzp is None else np.asarray(bzp, np.float64))) * np.asarray(bsc, np.float64)
    out = np.matmul(a1, b1)
    return out if bias is None else out + bias.astype(np.float64)


@pytest.mark.parametrize("shapes", [((4, 5), (5, 3)), ((2, 4, 5), (5, 3)), ((5,), (5, 3)), ((4, 5), (5,)),
                                    ((3, 1, 4, 5), (2, 5, 6)), ((2, 3, 4), (2, 4, 6))], ids=str)
def test_functional_matmul_integer_to_float(dev, rng, shapes):
    sa, sb = shapes
    a = rng.integers(0, 256, sa).astype(np.uint8)
    b = rng.integers(-128, 128, sb).astype(np.int8)
    n = sb[-1] if len(sb) > 1 else 1
    asc = np.float32(0.02)
    bsc = rng.uniform(0.01, 0.05, n).astype(np.float32) if len(sb) > 1 else np.float32(0.03)
    azp = np.uint8(128)
    bzp = rng.integers(-3, 3, n).astype(np.int8) if len(sb) > 1 else np.int8(1)
    bias = rng.standard_normal(n).astype(np.float32) if len(sb) > 1 else None
    got = kdml.matmul_integer_to_float(a, b, asc, bsc, azp, bzp, bias, device=dev).numpy()
    ref = _ref_functional(a, b, asc, bsc, azp, bzp, bias)
    assert got.shape == ref.shape
    assert np.allclose(got, ref, rtol=1e-5, atol=1e-4)


def test_functional_options(dev, rng):
    a = rng.integers(-128, 128, (6, 7)).astype(np.int8)
    b = rng.integers(-128, 128, (7, 5)).astype(np.int8)
    asc = rng.uniform(0.01, 0.02, 6).astype(np.float16)  # per row
    bsc = np.float16(0.05)
    got = kdml.matmul_integer_to_float(a, b, asc, bsc, device=dev)
    assert got.desc.data_type == DT.FLOAT16
    ref = (a * asc.astype(np.float64)[:, None]) @ (b * np.float64(bsc))
    assert np.allclose(got.numpy().astype(np.float64), ref, rtol=2e-3, atol=1e-3)
    got32 = kdml.matmul_integer_to_float(a, b, asc, bsc, out_data_type=DT.FLOAT32, device=dev)
    assert got32.desc.data_type == DT.FLOAT32
    full_bias = rng.standard_normal((6, 5)).astype(np.float32)
    out = dev.empty(kdml.TensorDesc(DT.FLOAT32, (6, 5)))
    res = kdml.matmul_integer_to_float(dev.tensor(a), dev.tensor(b), asc.astype(np.float32), np.float32(bsc),
                                       bias=full_bias, out=out)
    assert res is out
    assert np.allclose(out.numpy(), ref + full_bias, rtol=1e-5, atol=1e-5)
    with pytest.raises(kdml.InvalidArgumentError):
        kdml.matmul_integer_to_float(a, b[:6], asc, bsc, device=dev)


# ---- feature level and constraints -----------------------------------------------------
def _desc(**over):
    base = dict(
        a_tensor=kdml.TensorDesc(DT.UINT8, (1, 1, 4, 8)), a_scale_tensor=kdml.TensorDesc(DT.FLOAT32, (1, 1, 1, 1)),
        a_zero_point_tensor=kdml.TensorDesc(DT.UINT8, (1, 1, 1, 1)), b_tensor=kdml.TensorDesc(DT.INT8, (1, 1, 8, 3)),
        b_scale_tensor=kdml.TensorDesc(DT.FLOAT32, (1, 1, 1, 3)), b_zero_point_tensor=kdml.TensorDesc(DT.INT8, (1, 1, 1, 3)),
        bias_tensor=kdml.TensorDesc(DT.FLOAT32, (1, 1, 4, 3)), output_tensor=kdml.TensorDesc(DT.FLOAT32, (1, 1, 4, 3)),
    )
    base.update(over)
    return kdml.MatrixMultiplyIntegerToFloatDesc(**base)


def test_feature_level():
    for level, ok in ((FL.FL_6_1, False), (FL.FL_5_1, False), (FL.FL_6_2, True)):
        d = kdml.Device(feature_level=level)
        try:
            if ok:
                d.compile(_desc())
            else:
                with pytest.raises(kdml.UnsupportedError, match="6_2"):
                    d.compile(_desc())
        finally:
            d.close()


@pytest.mark.parametrize(
    "over,field",
    [
        (dict(b_tensor=kdml.TensorDesc(DT.INT16, (1, 1, 8, 3)), b_zero_point_tensor=None), "b_tensor.data_type"),
        (dict(a_zero_point_tensor=kdml.TensorDesc(DT.INT8, (1, 1, 1, 1))), "a_zero_point_tensor.data_type"),
        (dict(b_zero_point_tensor=kdml.TensorDesc(DT.UINT8, (1, 1, 1, 3))), "b_zero_point_tensor.data_type"),
        (dict(a_scale_tensor=kdml.TensorDesc(DT.FLOAT16, (1, 1, 1, 1))), "a_scale_tensor.data_type"),
        (dict(bias_tensor=kdml.TensorDesc(DT.FLOAT16, (1, 1, 4, 3))), "bias_tensor.data_type"),
        (dict(b_tensor=kdml.TensorDesc(DT.INT8, (1, 1, 7, 3))), "b_tensor.sizes"),
        (dict(b_tensor=kdml.TensorDesc(DT.INT8, (2, 1, 8, 3))), "b_tensor.sizes"),
        (dict(b_tensor=kdml.TensorDesc(DT.INT8, (1, 8, 3))), "b_tensor.sizes"),
        (dict(output_tensor=kdml.TensorDesc(DT.FLOAT32, (1, 1, 4, 4))), "output_tensor.sizes"),
        (dict(bias_tensor=kdml.TensorDesc(DT.FLOAT32, (1, 1, 1, 3))), "bias_tensor.sizes"),
        (dict(bias_tensor=kdml.TensorDesc(DT.FLOAT32, (4, 3))), "bias_tensor.sizes"),
        (dict(a_scale_tensor=kdml.TensorDesc(DT.FLOAT32, (1, 1, 1, 4))), "a_scale_tensor.sizes"),
        (dict(a_zero_point_tensor=kdml.TensorDesc(DT.UINT8, (1, 1, 3, 1))), "a_zero_point_tensor.sizes"),
        (dict(b_scale_tensor=kdml.TensorDesc(DT.FLOAT32, (1, 1, 3, 1))), "b_scale_tensor.sizes"),
        (dict(b_zero_point_tensor=kdml.TensorDesc(DT.INT8, (1, 1, 1, 2))), "b_zero_point_tensor.sizes"),
        (dict(b_scale_tensor=kdml.TensorDesc(DT.FLOAT32, (1, 3))), "b_scale_tensor.sizes"),
        (dict(output_tensor=kdml.TensorDesc(DT.FLOAT32, (1, 1, 4, 3), (0, 0, 0, 1))), "output_tensor.strides"),
        (dict(a_tensor=kdml.TensorDesc(DT.UINT8, (1, 1, 4, 8), total_tensor_size_in_bytes=4)), "a_tensor"),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_constraints(dev, over, field):
    with pytest.raises(kdml.InvalidArgumentError) as e:
        dev.compile(_desc(**over))
    assert str(e.value).startswith(field), str(e.value)


@pytest.mark.parametrize(
    "over,field",
    [
        (dict(a_tensor=kdml.TensorDesc(DT.FLOAT32, (1, 1, 4, 8))), "a_tensor"),
        (dict(output_tensor=kdml.TensorDesc(DT.INT32, (1, 1, 4, 3)), bias_tensor=None), "output_tensor"),
        (dict(a_tensor=kdml.TensorDesc(DT.INT64, (1, 1, 4, 8))), "a_tensor"),
        (dict(a_tensor=kdml.TensorDesc(DT.UINT8, (1, 1, 1, 4, 8)), b_tensor=kdml.TensorDesc(DT.INT8, (1, 1, 1, 8, 3)),
              output_tensor=kdml.TensorDesc(DT.FLOAT32, (1, 1, 1, 4, 3)), bias_tensor=None), "a_tensor"),
        (dict(a_scale_tensor=kdml.TensorDesc(DT.FLOAT32, (1, 1, 1, 1, 1))), "a_scale_tensor"),
        (dict(output_tensor=kdml.TensorDesc(DT.FLOAT64, (1, 1, 4, 3)), bias_tensor=None), "output_tensor"),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_unsupported(dev, over, field):
    with pytest.raises(kdml.UnsupportedError) as e:
        dev.compile(_desc(**over))
    assert str(e.value).startswith(field), str(e.value)


def test_required_and_binding_checks(dev):
    with pytest.raises(kdml.InvalidArgumentError, match="^a_scale_tensor"):
        dev.compile(_desc(a_scale_tensor=None))
    with pytest.raises(kdml.InvalidArgumentError, match="^b_tensor"):
        dev.compile(_desc(b_tensor=None))
    op = dev.compile(_desc(a_zero_point_tensor=None, b_zero_point_tensor=None, bias_tensor=None))
    d = op.desc
    ins = [dev.empty(d.a_tensor), dev.empty(d.a_scale_tensor), None, dev.empty(d.b_tensor), dev.empty(d.b_scale_tensor),
           None, None]
    out = dev.empty(d.output_tensor)
    with pytest.raises(kdml.InvalidArgumentError, match="inputs"):
        op.execute(ins[:6], [out])
    bad = list(ins)
    bad[6] = dev.empty(kdml.TensorDesc(DT.FLOAT32, (1, 1, 4, 3)))
    with pytest.raises(kdml.InvalidArgumentError, match="^bias_tensor"):
        op.execute(bad, [out])
    # output aliasing an input's bytes
    shared = dev.buffer(math.prod((1, 1, 4, 3)) * 4 + 64)
    a_alias = kdml.Tensor(shared, d.a_tensor, 0)
    out_alias = kdml.Tensor(shared, d.output_tensor, 16)
    with pytest.raises(kdml.InvalidArgumentError, match="^output_tensor"):
        op.execute([a_alias, *ins[1:]], [out_alias])


@pytest.mark.parametrize("mkn", [(3, 65_537, 5), (8, 65_552, 16)], ids=str)
def test_long_sums_exact_within_llvmpipes_loop_limit(dev, rng, mkn):
    """K past the CPU family's bound (runtime/llvmpipe.CPU_MATMUL_MAX_K: lavapipe stops an invocation's
    loops after 65,535 iterations, and the CPU family's generic variant returned partial sums there:
    checked) is still exact: on CPU devices such products take the gpu family's tiles."""
    m, k, n = mkn
    a = rng.integers(-128, 128, (m, k)).astype(np.int8)
    b = rng.integers(-128, 128, (k, n)).astype(np.int8)
    y = kdml.matmul_integer_to_float(a, b, np.float32(1.0), np.float32(1.0), device=dev).numpy()
    np.testing.assert_array_equal(y, (a.astype(np.int64) @ b.astype(np.int64)).astype(np.float32))
