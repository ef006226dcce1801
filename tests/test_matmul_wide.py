"""The exact 16/32-bit kernel of MATRIX_MULTIPLY_INTEGER_TO_FLOAT (kernel "wide",
shaders/matmul_wide.comp), forced on this device, against an exact reference.

Reference: S = sum_k (A - AZP)(B - BZP) as Python integers (int64 limb products combined in
Python ints), rounded once to float32 by integer arithmetic (round to nearest, ties to even:
`round_f32`), then the epilogue in numpy float32 in the kernel's order:
float32(S) * (AScale * BScale) + Bias (each operation rounded once, no fused multiply-add).
Tolerance: none. FLOAT32 outputs must equal that value bit for bit (so the integer part is
exact: with unit scales and no bias the output is float32(S) itself, sums beyond 2^53
included); FLOAT16 outputs are that float32 value rounded to half, within one half ulp of
numpy's round-to-nearest (packHalf2x16's rounding is the implementation's).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers import assert_outside_unchanged, element_byte_positions, force_kernel, place, random_strides, read_logical

import kompute_dml as kdml
from kompute_dml.ops.matmul_integer import compile_matmul_integer
from kompute_dml.ops.matmul_wide import BLOCKS, INT64_CAPABILITY, compile_wide

DT = kdml.DataType
PAIRS = [(DT.INT16, DT.INT16), (DT.UINT16, DT.UINT16), (DT.UINT16, DT.INT16), (DT.INT16, DT.UINT16),
         (DT.INT32, DT.INT32), (DT.UINT32, DT.UINT32), (DT.UINT32, DT.INT32), (DT.INT32, DT.UINT32)]
IDS = [f"{a.name}x{b.name}" for a, b in PAIRS]


# ---- exact reference --------------------------------------------------------------------
def exact_sum(a1: np.ndarray, b1: np.ndarray) -> np.ndarray:
    """sum_k a1 b1 exactly (object array of Python ints) for |a1|, |b1| < 2^33 and K < 2^28:
    16-bit limbs (a1 = ah * 2^16 + al, al in [0, 2^16)) so that every partial sum fits int64."""
    al, ah = a1 & 0xFFFF, a1 >> 16
    bl, bh = b1 & 0xFFFF, b1 >> 16
    hh, lo = ah @ bh, al @ bl
    mid = ah @ bl + al @ bh
    return hh.astype(object) * 2**32 + mid.astype(object) * 2**16 + lo.astype(object)


def round_f32(v: int) -> np.float32:
    """The float32 nearest to the integer v (ties to even), by integer arithmetic (float(v)
    would round to float64 first)."""
    v = int(v)
    mag, shift = abs(v), max(abs(v).bit_length() - 24, 0)
    if shift:
        q, r = divmod(mag, 1 << shift)
        half = 1 << (shift - 1)
        mag = q + (r > half or (r == half and q & 1))
    return np.float32(math.copysign(math.ldexp(float(mag), shift), v))


def expected(s: np.ndarray, asc: np.ndarray, bsc: np.ndarray, bias: np.ndarray | None, out_dt: DT) -> np.ndarray:
    """The kernel's epilogue on the exact sums s (B, C, M, N): float32 arithmetic, one rounding each."""
    f = np.vectorize(round_f32, otypes=[np.float32])(s)
    with np.errstate(over="ignore"):
        v = f * (asc.astype(np.float32) * bsc.astype(np.float32)) + (
            np.float32(0) if bias is None else bias.astype(np.float32))
    return v.astype(np.float32)


# ---- case runner ------------------------------------------------------------------------
def run(dev, rng, a, b, azp=None, bzp=None, asc=None, bsc=None, bias=None, *, out_dt=DT.FLOAT32, layouts=None,
        kernel="wide", block=None, int64=None, qdims=4):
    """Place (random offsets, guard bytes, optional strides), poison, execute, return
    (output as float32/float16 array, expected array). a: (..., M, K), b: (..., K, N) already
    broadcast; azp (M,), bzp (N,), asc (M,) or (1,), bsc (N,) or (1,), bias (..., M, N)."""
    a_dt, b_dt = DT.from_numpy(a.dtype), DT.from_numpy(b.dtype)
    *lead, M, _ = a.shape
    N = b.shape[-1]
    layouts = layouts or {}
    o_sizes = (*lead, M, N)

    def qdesc(dt, n, per):
        if n == 1:
            return kdml.TensorDesc(dt, (1,) * qdims)
        return kdml.TensorDesc(dt, ((1, 1, n, 1) if per == "row" else (1, 1, 1, n))[4 - qdims:] if qdims > 1 else (n,))

    asc = np.ones(1, out_dt.numpy_dtype) if asc is None else asc
    bsc = np.ones(1, out_dt.numpy_dtype) if bsc is None else bsc
    descs = [kdml.TensorDesc(a_dt, a.shape, layouts.get("a")), qdesc(out_dt, asc.size, "row"),
             None if azp is None else qdesc(a_dt, azp.size, "row"),
             kdml.TensorDesc(b_dt, b.shape, layouts.get("b")), qdesc(out_dt, bsc.size, "col"),
             None if bzp is None else qdesc(b_dt, bzp.size, "col"),
             None if bias is None else kdml.TensorDesc(out_dt, o_sizes, layouts.get("bias"))]
    o_desc = kdml.TensorDesc(out_dt, o_sizes, layouts.get("out"))
    tensors, seen = [], []
    for d, v in zip(descs, (a, asc, azp, b, bsc, bzp, bias)):
        if d is None:
            tensors.append(None)
            seen.append(None)
            continue
        t, raw0 = place(dev, rng, d, np.asarray(v).reshape(d.sizes))
        tensors.append(t)
        seen.append(read_logical(raw0, t.offset, d))  # what the operator reads (broadcast strides)
    out, _ = place(dev, rng, o_desc)
    raw = np.frombuffer(out.buffer.read(), np.uint8).copy()
    raw[element_byte_positions(out.offset, o_desc)] = 0xFF  # NaN poison in every output element
    out.buffer.write(raw.tobytes())
    before = raw.tobytes()
    desc = kdml.MatrixMultiplyIntegerToFloatDesc(*descs, o_desc)
    if block is not None or int64 is not None:
        op = compile_wide(dev, desc, block, int64)
    else:
        op = compile_matmul_integer(dev, desc, kernel=kernel)
    op.execute(tensors, [out])
    after = assert_outside_unchanged(out, before)
    got = read_logical(after, out.offset, o_desc)
    a1 = seen[0].astype(np.int64) - (0 if azp is None else seen[2].astype(np.int64).reshape(-1, 1))
    b1 = seen[3].astype(np.int64) - (0 if bzp is None else seen[5].astype(np.int64).reshape(1, -1))
    s = exact_sum(a1, b1)
    exp = expected(s, seen[1].reshape(-1, 1), seen[4].reshape(1, -1), seen[6], out_dt)
    return op, got, exp, s


def assert_exact(got: np.ndarray, exp: np.ndarray) -> None:
    if got.dtype == np.float16:
        want = exp.astype(np.float16)
        gi, wi = got.view(np.int16).astype(np.int32), want.view(np.int16).astype(np.int32)
        bad = np.argwhere(np.abs(gi - wi) > 1)  # one half ulp (same sign: values away from 0)
    else:
        bad = np.argwhere(got.view(np.uint32) != exp.view(np.uint32))
    assert bad.size == 0, (f"{len(bad)} of {got.size} differ, first at {bad[:4].tolist()}: got "
                           f"{got[tuple(bad[0])]!r} want {exp[tuple(bad[0])]!r}")


def ints(rng, dt, shape):
    info = np.iinfo(dt.numpy_dtype)
    v = rng.integers(info.min, info.max, shape, endpoint=True).astype(dt.numpy_dtype)
    flat = v.reshape(-1)
    flat[rng.choice(flat.size, min(flat.size, 4), replace=False)] = np.array(
        [info.min, info.max, 0, 1], dt.numpy_dtype)[:min(flat.size, 4)]
    return v


# ---- tests ------------------------------------------------------------------------------
@pytest.mark.parametrize("pair", PAIRS, ids=IDS)
def test_random_exact(dev, rng, pair):
    """Full-range values, per-row / per-column zero points and scales, a bias: bit for bit.
    M and N cut the 128x64 tile; K crosses the 16-deep slices and the 128-K limb flushes."""
    for M, K, N in ((37, 300, 29), (130, 129, 65)):
        a, b = ints(rng, pair[0], (M, K)), ints(rng, pair[1], (K, N))
        azp, bzp = ints(rng, pair[0], (M,)), ints(rng, pair[1], (N,))
        asc = rng.uniform(0.5, 2, M).astype(np.float32)
        bsc = rng.uniform(0.5, 2, 1).astype(np.float32)
        bias = (rng.standard_normal((M, N)) * 1e6).astype(np.float32)
        op, got, exp, _ = run(dev, rng, a, b, azp, bzp, asc, bsc, bias)
        assert op.variants == [f"mmw{8 * pair[0].size}_r4c4"]  # few work groups: the small block
        assert_exact(got, exp)


@pytest.mark.parametrize("k", [1, 2, 15, 16, 17, 127, 128, 129, 255, 256, 257, 2000])
def test_k_range_unit_scales(dev, rng, k):
    """Unit scales, no bias: the output is float32(S) itself, for K around every boundary."""
    for a_dt, b_dt in ((DT.INT16, DT.UINT16), (DT.UINT32, DT.INT32)):
        a, b = ints(rng, a_dt, (9, k)), ints(rng, b_dt, (k, 70))
        _, got, exp, _ = run(dev, rng, a, b, ints(rng, a_dt, (1,)), ints(rng, b_dt, (70,)))
        assert_exact(got, exp)


@pytest.mark.parametrize("pair", PAIRS[4:], ids=IDS[4:])
def test_32bit_extremes_beyond_2_53(dev, rng, pair):
    """Elements at the types' extremes and zero points at the opposite ones: |A - AZP| and
    |B - BZP| up to 2^32 - 1, products near 2^64, sums near K * 2^64 (far beyond 2^53)."""
    a_dt, b_dt = pair
    ia, ib = np.iinfo(a_dt.numpy_dtype), np.iinfo(b_dt.numpy_dtype)
    M, K, N = 6, 3000, 5
    a = rng.choice(np.array([ia.min, ia.max, ia.max - 1, ia.min + 1], a_dt.numpy_dtype), (M, K))
    a[0] = ia.min  # row 0: one sign all along
    b = rng.choice(np.array([ib.min, ib.max, ib.min + 3], b_dt.numpy_dtype), (K, N))
    b[:, 0] = ib.max
    azp = np.array([ia.max, ia.min, ia.max, ia.min, 0, ia.max - 2], a_dt.numpy_dtype)
    bzp = np.array([ib.min, ib.max, ib.min, 0, ib.max], b_dt.numpy_dtype)
    _, got, exp, s = run(dev, rng, a, b, azp, bzp)
    assert abs(int(s[0, 0])) > 2**75
    assert_exact(got, exp)


def cancelling(dt):
    """A 1x3 by 3x1 product of cancelling terms near the largest products that fit the type's
    range: 32767^2 - 32766 * 32767 + 1 = 32768 (16-bit), (2^24+1)^2 - 2^24 (2^24+2) + 0 * 1 = 1
    (32-bit). Zero points 0 (signed) or 2^(W-1) (unsigned)."""
    if dt.size == 4:
        a1, b1 = [2**24 + 1, 2**24, 0], [2**24 + 1, -(2**24 + 2), 1]
    else:
        a1, b1 = [32767, -32766, 1], [32767, 32767, 1]
    zp = 0 if dt in (DT.INT16, DT.INT32) else 2 ** (8 * dt.size - 1)
    a = (np.array([a1], np.int64) + zp).astype(dt.numpy_dtype)
    b = (np.array(b1, np.int64)[:, None] + zp).astype(dt.numpy_dtype)
    return a, b, np.array([zp], dt.numpy_dtype)


@pytest.mark.parametrize("dt", [DT.INT16, DT.UINT16, DT.INT32, DT.UINT32], ids=lambda d: d.name)
def test_cancellation_exact_where_gpu_family_is_not(dev, rng, dt):
    """Heavily cancelling terms: 'wide' gives the exact sum; the float `gpu` family (kernel="gpu")
    does not. 16-bit: the products round to multiples of 64 in its float block sum (32769 where
    the multiply and add round apart, as on lavapipe; 32767 with fused multiply-adds). 32-bit:
    -2^25 (A - AZP = 2^24 + 1 rounds to 2^24 when converted to float)."""
    a, b, zp = cancelling(dt)
    _, got, _, s = run(dev, rng, a, b, zp, zp)
    want = 32768 if dt.size == 2 else 1
    assert int(s[0, 0]) == want and got[0, 0] == want
    _, got_gpu, _, _ = run(dev, rng, a, b, zp, zp, kernel="gpu")
    assert got_gpu[0, 0] in ((32767.0, 32769.0) if dt.size == 2 else (-(2.0**25),))


@pytest.mark.parametrize("rank", [2, 3, 4])
def test_layouts_strides_broadcast(dev, rng, rank):
    """Random strides with gaps, transposed and broadcast (stride 0) batch dimensions, output
    strides with gaps, a bias with any strides (stride 0 allowed), 1-4-D quantization tensors."""
    for a_dt, b_dt in ((DT.UINT16, DT.INT16), (DT.INT32, DT.UINT32)):
        lead = tuple(int(rng.integers(1, 4)) for _ in range(rank - 2))
        M, K, N = (int(rng.integers(1, 70)) for _ in range(3))
        a, b = ints(rng, a_dt, (*lead, M, K)), ints(rng, b_dt, (*lead, K, N))
        layouts = {"a": random_strides(rng, a.shape, allow_broadcast=True),
                   "b": random_strides(rng, b.shape, allow_broadcast=True),
                   "bias": random_strides(rng, (*lead, M, N), allow_broadcast=True),
                   "out": random_strides(rng, (*lead, M, N), allow_broadcast=False)}
        azp = ints(rng, a_dt, (M,)) if rng.random() < 0.5 else ints(rng, a_dt, (1,))
        bzp = ints(rng, b_dt, (N,)) if rng.random() < 0.5 else None
        asc = rng.uniform(0.5, 2, 1).astype(np.float32)
        bsc = rng.uniform(0.5, 2, N).astype(np.float32)
        bias = (rng.standard_normal((*lead, M, N)) * 1e3).astype(np.float32)
        _, got, exp, _ = run(dev, rng, a, b, azp, bzp, asc, bsc, bias, layouts=layouts,
                             qdims=int(rng.integers(1, 5)))
        assert_exact(got, exp)


@pytest.mark.parametrize("pair", [PAIRS[0], PAIRS[3], PAIRS[5], PAIRS[6]], ids=[IDS[0], IDS[3], IDS[5], IDS[6]])
def test_float16_output(dev, rng, pair):
    """FLOAT16 scales, bias and output, with an N stride of 2 (half-words beside untouched
    ones): values near a random point of the range so that the results fit a half."""
    a_dt, b_dt = pair
    M, K, N = 21, 40, 67
    ca = int(rng.integers(np.iinfo(a_dt.numpy_dtype).min + 300, np.iinfo(a_dt.numpy_dtype).max - 300))
    cb = int(rng.integers(np.iinfo(b_dt.numpy_dtype).min + 300, np.iinfo(b_dt.numpy_dtype).max - 300))
    a = rng.integers(ca - 300, ca + 300, (M, K)).astype(a_dt.numpy_dtype)
    b = rng.integers(cb - 300, cb + 300, (K, N)).astype(b_dt.numpy_dtype)
    azp, bzp = np.array([ca], a_dt.numpy_dtype), np.array([cb], b_dt.numpy_dtype)
    asc = rng.uniform(0.5, 1, M).astype(np.float16)
    bsc = np.array([1e-3], np.float16)
    bias = rng.standard_normal((M, N)).astype(np.float16)
    _, got, exp, _ = run(dev, rng, a, b, azp, bzp, asc, bsc, bias, out_dt=DT.FLOAT16, layouts={"out": (2 * N, 2)})
    assert_exact(got, exp)


def needs_int64(dev, int64):
    if int64 and INT64_CAPABILITY not in dev.capabilities:
        pytest.skip(f"the device did not enable {INT64_CAPABILITY}")


@pytest.mark.parametrize("int64", [False, True], ids=["portable", "int64"])
@pytest.mark.parametrize("block", BLOCKS, ids=str)
def test_every_variant(dev, rng, block, int64):
    """Every variant (outputs per invocation; 32-bit words or 64-bit integers) of both widths:
    partial tiles, zero points, full-range values, FLOAT32 with scales and a bias."""
    needs_int64(dev, int64)
    for a_dt, b_dt in ((DT.INT16, DT.UINT16), (DT.UINT16, DT.UINT16), (DT.INT32, DT.INT32), (DT.UINT32, DT.INT32)):
        M, K, N = 67, 150, 70
        a, b = ints(rng, a_dt, (M, K)), ints(rng, b_dt, (K, N))
        asc, bsc = rng.uniform(0.5, 2, M).astype(np.float32), rng.uniform(0.5, 2, N).astype(np.float32)
        bias = (rng.standard_normal((M, N)) * 1e6).astype(np.float32)
        op, got, exp, _ = run(dev, rng, a, b, ints(rng, a_dt, (M,)), ints(rng, b_dt, (N,)), asc, bsc, bias,
                              block=block, int64=int64)
        assert op.variants == [f"mmw{8 * a_dt.size}{'l' if int64 else ''}_r{block[0]}c{block[1]}"]
        assert_exact(got, exp)


def test_int64_variant_refusals(dev):
    """The 64-bit variant for 32-bit inputs takes K <= 2^16; a device without shader_int64 refuses it."""
    def desc(dt, k):
        return kdml.MatrixMultiplyIntegerToFloatDesc(
            kdml.TensorDesc(dt, (2, k)), kdml.TensorDesc(DT.FLOAT32, (1,)), None, kdml.TensorDesc(dt, (k, 3)),
            kdml.TensorDesc(DT.FLOAT32, (1,)), None, None, kdml.TensorDesc(DT.FLOAT32, (2, 3)))

    if INT64_CAPABILITY not in dev.capabilities:
        with pytest.raises(kdml.UnsupportedError, match=f"^kernel: .*{INT64_CAPABILITY}"):
            compile_wide(dev, desc(DT.INT16, 8), int64=True)
        return
    assert compile_wide(dev, desc(DT.INT16, 2**17), int64=True).variants == ["mmw16l_r4c4"]
    assert compile_wide(dev, desc(DT.INT32, 2**16), int64=True).variants == ["mmw32l_r4c4"]
    with pytest.raises(kdml.UnsupportedError, match="^a_tensor.sizes: .*K <= 65536"):
        compile_wide(dev, desc(DT.INT32, 2**16 + 1), int64=True)


def test_dispatch(dev, monkeypatch):
    """'wide' for 16/32-bit when forced (or by any GPU policy); 8-bit forced 'wide' takes the
    `gpu` family; this device's automatic choice is unchanged on CPU policies."""
    force_kernel(monkeypatch, dev, "auto")

    def desc(dt, m=4, n=3):
        return kdml.MatrixMultiplyIntegerToFloatDesc(
            kdml.TensorDesc(dt, (m, 8)), kdml.TensorDesc(DT.FLOAT32, (1,)), None, kdml.TensorDesc(dt, (8, n)),
            kdml.TensorDesc(DT.FLOAT32, (1,)), None, None, kdml.TensorDesc(DT.FLOAT32, (m, n)))

    assert compile_matmul_integer(dev, desc(DT.INT16), kernel="wide").variants == ["mmw16_r4c4"]
    assert compile_matmul_integer(dev, desc(DT.UINT32), kernel="WIDE").variants == ["mmw32_r4c4"]
    # 64x64 tiles (4x4 per invocation) at every size: the H100 sweep's choice; 8x4 when asked
    assert compile_matmul_integer(dev, desc(DT.INT16, 2048, 512), kernel="wide").variants == ["mmw16_r4c4"]
    assert compile_wide(dev, desc(DT.INT16, 2048, 512), block=(8, 4)).variants == ["mmw16_r8c4"]
    assert compile_matmul_integer(dev, desc(DT.INT32, 2048, 320), kernel="wide").variants == ["mmw32_r4c4"]
    assert compile_matmul_integer(dev, desc(DT.INT8), kernel="wide").variants == ["mmi_gpu_8"]
    assert compile_matmul_integer(dev, desc(DT.INT16), kernel="gpu").variants == ["mmi_gpu_16"]
    auto = compile_matmul_integer(dev, desc(DT.INT32)).variants[0]
    assert auto.startswith("mmw32") == (not dev.policy.matmul_family.startswith("cpu"))
    with pytest.raises(kdml.UnsupportedError, match="^a_tensor.data_type"):
        compile_wide(dev, desc(DT.UINT8))


@pytest.mark.slow
@pytest.mark.parametrize("int64", [False, True], ids=["portable", "int64"])
@pytest.mark.parametrize("dt", [DT.INT16, DT.INT32], ids=lambda d: d.name)
def test_large_k(dev, rng, dt, int64):
    """K = 65536 at the extremes (32-bit sums near 2^80; 16-bit sums beyond 2^47): the
    64-bit variant's largest K for 32-bit inputs."""
    needs_int64(dev, int64)
    info = np.iinfo(dt.numpy_dtype)
    M, K, N = 3, 65536, 66
    a = rng.choice(np.array([info.min, info.max], dt.numpy_dtype), (M, K))
    b = rng.choice(np.array([info.min, info.max], dt.numpy_dtype), (K, N))
    a[0], b[:, 0] = info.max, info.min
    _, got, exp, s = run(dev, rng, a, b, np.array([info.min], dt.numpy_dtype), np.array([info.max], dt.numpy_dtype),
                         int64=int64)
    assert abs(int(s[0, 0])) > 2 ** (79 if dt.size == 4 else 47)
    assert_exact(got, exp)
