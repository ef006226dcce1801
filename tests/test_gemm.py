"""GEMM (ops/gemm.py, shaders/gemm.comp) against the float64 reference and the error bound of
docs/gemm.md (tests/gemm_reference.py): FLOAT32 and FLOAT16, every transposition, C present or
absent, alpha / beta, shapes that are not multiples of the tiles down to 1 x 1 x 1, K from 1 to
4096, extreme magnitudes, overflow, infinities and NaNs, signed zeros, random strides (0
broadcasts) and offsets with guard bytes on every tensor, poisoned outputs whose every other byte
must stay unchanged, large batch counts and the folded dispatch grid; the page's validation
rules and support table; the helpers kdml.gemm / kdml.matmul against numpy.matmul."""

from __future__ import annotations

import dataclasses
import math
import types

import numpy as np
import pytest
from gemm_reference import check, expected
from helpers import assert_outside_unchanged, place, poison_against, random_strides, read_logical

import kompute_dml as kdml
from kompute_dml.ops.gemm import BIG_TILES_MIN, BLK8_MIN_K, BLK8_MIN_TILES, RECT_MIN_TILES, choose_block, gemm_block, gemm_grid
from kompute_dml.ops.gemm_blocks import RECT_MIN_TILES_LONG_K
from kompute_dml.ops.gemm_split import SPLIT_FROM_K, gemm_split

DT = kdml.DataType
FL = kdml.FeatureLevel
TD = kdml.TensorDesc
FLOATS = (DT.FLOAT32, DT.FLOAT16)
T = kdml.MatrixTransform.TRANSPOSE


@pytest.fixture(autouse=True)
def tiled_kernel(dev, monkeypatch):
    """These tests are the tiled kernel's (shaders/gemm.comp) on every device: FLOAT16 products
    would take the cooperative-matrix family where a device has it (tests/test_gemm_coop.py)."""
    monkeypatch.setattr(dev, "policy", dataclasses.replace(dev.policy, gemm_kernel="tiled"))


def values(rng, dt: DT, shape, spread: int = 4) -> np.ndarray:
    """Random normal values of both signs over 2^-spread .. 2^spread, in the type."""
    v = rng.standard_normal(shape) * np.exp2(rng.integers(-spread, spread + 1, shape))
    return v.astype(dt.numpy_dtype)


def with_specials(rng, dt: DT, m: int, n: int, k: int, count: int) -> tuple[np.ndarray, ...]:
    """A (m x k), B (k x n), C (m x n) of small values with `count` infinities and NaNs each,
    A[0, 0] = inf and B[0, 0] = 0: an infinity of A meets a zero of B (output (0, 0) is NaN)."""
    specials = np.array([np.inf, -np.inf, np.nan], dt.numpy_dtype)
    a, b, c = values(rng, dt, (m, k), 2), values(rng, dt, (k, n), 2), values(rng, dt, (m, n), 2)
    for x in (a, b, c):
        pos = rng.choice(x.size, count, replace=False)
        x.reshape(-1)[pos] = rng.choice(specials, count)
    a[0, 0], b[0, 0] = np.inf, 0
    return a, b, c


def layout(rng, sizes, *, is_input: bool, strided: bool = True):
    if not strided or rng.random() < 0.3:
        return None
    return random_strides(rng, sizes, allow_broadcast=is_input)


def sizes_of(batch, m, n, k, ta, tb):
    a = (*batch, k, m) if ta else (*batch, m, k)
    b = (*batch, n, k) if tb else (*batch, k, n)
    return a, b, (*batch, m, n)


def run_case(dev, rng, dt, batch, m, n, k, ta=False, tb=False, has_c=True, alpha=1.0, beta=1.0, *, strided=True,
             a_val=None, b_val=None, c_val=None, check_result=True, kernel="tiled", o_strides=None):
    """One GEMM: every tensor placed at a random offset with guard bytes and (when `strided`) random
    strides (the output's `o_strides` where given); the output poisoned; checked against the reference
    and the bound of `kernel` (gemm_reference.check). Returns (got, a, b, c)."""
    a_sz, b_sz, o_sz = sizes_of(batch, m, n, k, ta, tb)
    ad = TD(dt, a_sz, layout(rng, a_sz, is_input=True, strided=strided))
    bd = TD(dt, b_sz, layout(rng, b_sz, is_input=True, strided=strided))
    cd = TD(dt, o_sz, layout(rng, o_sz, is_input=True, strided=strided)) if has_c else None
    od = TD(dt, o_sz, o_strides if o_strides is not None else layout(rng, o_sz, is_input=False, strided=strided))
    at, araw = place(dev, rng, ad, values(rng, dt, a_sz) if a_val is None else a_val)
    bt, braw = place(dev, rng, bd, values(rng, dt, b_sz) if b_val is None else b_val)
    ct, craw = place(dev, rng, cd, values(rng, dt, o_sz) if c_val is None else c_val) if has_c else (None, None)
    ot, _ = place(dev, rng, od)
    a = read_logical(araw, at.offset, ad)
    b = read_logical(braw, bt.offset, bd)
    c = read_logical(craw, ct.offset, cd) if has_c else None
    with np.errstate(all="ignore"):
        want = expected(a, b, c, ta, tb, alpha, beta).astype(dt.numpy_dtype)
    before = poison_against(ot, np.nan_to_num(want), rng)
    op = dev.compile(kdml.GemmDesc(ad, bd, cd, od, int(ta), int(tb), alpha, beta))
    op.execute([at, bt, ct], [ot])
    after = assert_outside_unchanged(ot, before)
    got = read_logical(after, ot.offset, od)
    assert at.buffer.read() == araw and bt.buffer.read() == braw
    if has_c:
        assert ct.buffer.read() == craw
    if check_result:
        check(got, a, b, c, ta, tb, alpha, beta, kernel)
    return got, a, b, c


# ---- shapes, transpositions, layouts ----------------------------------------------------------
SHAPES = [(1, 1, 1), (1, 7, 1), (3, 1, 5), (2, 3, 4), (31, 33, 17), (32, 32, 16), (33, 31, 47), (64, 64, 64),
          (65, 63, 15), (97, 130, 40)]
TRANS = [(False, False), (True, False), (False, True), (True, True)]


@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: d.name)
@pytest.mark.parametrize(("ta", "tb"), TRANS, ids=["NN", "TN", "NT", "TT"])
def test_shapes_and_layouts(dev, rng, dt, ta, tb):
    """Every shape of SHAPES (tile multiples, one off them, 1 x 1 x 1), random batch ranks, C present
    or not, random strides and offsets on every tensor."""
    for i, (m, n, k) in enumerate(SHAPES):
        rank = int(rng.integers(0, 3))
        batch = tuple(int(x) for x in rng.integers(1, 4, rank))
        alpha, beta = [(1.0, 1.0), (0.5, -2.0), (-3.25, 0.0), (1e-3, 7.0)][i % 4]
        run_case(dev, rng, dt, batch, m, n, k, ta, tb, has_c=bool(i % 3), alpha=alpha, beta=beta)


@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: d.name)
def test_k_from_1_to_4096(dev, rng, dt):
    for k in (1, 2, 3, 15, 16, 17, 31, 33, 100, 257, 1000, 2049, 4096):
        ta, tb = bool(rng.integers(0, 2)), bool(rng.integers(0, 2))
        run_case(dev, rng, dt, (2,), int(rng.integers(1, 9)), int(rng.integers(1, 9)), k, ta, tb,
                 has_c=bool(k % 2), alpha=float(rng.choice([1.0, -0.75])), beta=0.5)


def test_tile_sizes(dev, rng, monkeypatch):
    """Every register block (32 x 32, 64 x 64, 128 x 128 and 128 x 64 tiles) on shapes around their edges,
    and the policies' choice between them."""
    for blk in ("2", "4", "8", "8x4"):
        monkeypatch.setattr("kompute_dml.ops.gemm.gemm_block", lambda *args, blk=blk: blk)
        for m, n, nb in ((70, 70, 3), (129, 65, 2), (40, 200, 2), (33, 31, 1), (64, 128, 1), (257, 130, 1)):
            run_case(dev, rng, DT.FLOAT32, (nb,), m, n, 19, strided=False)
        if "x" not in blk:  # (8 x 4: FLOAT32 only)
            run_case(dev, rng, DT.FLOAT16, (2,), 130, 129, 35, ta=True, strided=False)
        ad, bd, od = TD(DT.FLOAT32, (5, 19)), TD(DT.FLOAT32, (19, 7)), TD(DT.FLOAT32, (5, 7))
        assert dev.compile(kdml.GemmDesc(ad, bd, None, od)).plans[0].variant == f"gemm_f32_b{blk}"
    monkeypatch.undo()
    # GPUs, FLOAT32 without an activation: 128 x 64 where 64 x 64 is chosen and there are RECT_MIN_TILES such tiles
    assert gemm_block("parallel", False, False, 128 * RECT_MIN_TILES, 64, 1) == "8x4"
    assert gemm_block("parallel", False, False, 128 * RECT_MIN_TILES - 128, 64, 1) == "4"
    assert gemm_block("parallel", True, False, 128 * RECT_MIN_TILES, 64, 1) == "4"
    assert gemm_block("parallel", False, True, 128 * RECT_MIN_TILES, 64, 1) == "4"
    assert gemm_block("parallel", False, False, 64, 128 * RECT_MIN_TILES, 4) == "4"
    assert gemm_block("parallel", False, False, 128 * RECT_MIN_TILES * 4, 48, 1) == "4"  # (N < RECT_MIN_N)
    assert gemm_block("parallel", False, False, 128 * 16, 128 * 16, BLK8_MIN_TILES // 256, BLK8_MIN_K) == "8"
    assert gemm_block("work", False, False, 128 * RECT_MIN_TILES, 64, 1) == "4"
    # ... over K >= SPLIT_FROM_K from RECT_MIN_TILES_LONG_K tiles
    assert gemm_block("parallel", False, False, 128 * RECT_MIN_TILES, 64, 1, SPLIT_FROM_K) == "4"
    assert gemm_block("parallel", False, False, 128 * RECT_MIN_TILES_LONG_K, 64, 1, SPLIT_FROM_K) == "8x4"
    # GPUs, FLOAT32 over K >= SPLIT_FROM_K: 64 x 64 however few the tiles (split-K makes the work groups)
    assert gemm_block("parallel", False, False, 128, 768, 1, SPLIT_FROM_K) == "4"
    assert gemm_block("parallel", False, False, 128, 768, 1, SPLIT_FROM_K - 1) == "2"
    assert gemm_block("parallel", True, False, 128, 768, 1, SPLIT_FROM_K) == "2"
    assert gemm_block("parallel", False, False, 32, 768, 1, SPLIT_FROM_K) == "2"
    assert gemm_block("work", False, False, 128, 768, 1, SPLIT_FROM_K) == "4"
    # GPUs: 64 x 64 where there are enough such tiles; CPU devices: the least padded work per speed
    assert choose_block("parallel", 128 * 16, 128 * 16, BLK8_MIN_TILES // 256, BLK8_MIN_K) == 8
    assert choose_block("parallel", 128 * 16, 128 * 16, BLK8_MIN_TILES // 256, BLK8_MIN_K - 1) == 4
    assert choose_block("parallel", 128 * 16, 128 * 16 - 128, BLK8_MIN_TILES // 256, BLK8_MIN_K) == 4
    assert choose_block("parallel", 64, 128 * 4096, 1, BLK8_MIN_K) == 4
    assert choose_block("parallel", 64, 4096, 1000) == 4
    assert choose_block("parallel", 128, 128, BIG_TILES_MIN // 4) == 4
    assert choose_block("parallel", 128, 128, BIG_TILES_MIN // 4 - 1) == 2
    assert choose_block("parallel", 32, 4096, 1000) == 2
    assert choose_block("work", 256, 256, 1) == 4
    assert choose_block("work", 32, 32, 100) == 2
    assert choose_block("work", 1, 1, 1) == 2
    assert choose_block("work", 96, 130, 1) == 4
    assert dev.policy.gemm_tiles == ("work" if dev.device_type == "cpu" else "parallel")


def test_the_8x4_block_is_a_float32_sibling_only():
    """The 8 x 4 block exists for FLOAT32 without an activation (the family's `where` rule), and is a sibling
    of those square blocks, so a model's other shapes have its pipeline made ahead (onnx_backend/siblings.py)."""
    from kompute_dml.ops import contract

    assert [v for v in contract.GEMM.variants if "8x4" in v] == ["gemm_f32_b8x4"]
    assert set(contract.GEMM.siblings("gemm_f32_b4")) == {"gemm_f32_b2", "gemm_f32_b8", "gemm_f32_b8x4"}
    assert set(contract.GEMM.siblings("gemm_f32_b4a")) == {"gemm_f32_b2a", "gemm_f32_b8a"}
    assert set(contract.GEMM.siblings("gemm_f16_b4")) == {"gemm_f16_b2", "gemm_f16_b8"}
    with pytest.raises(ValueError, match="not one of its variants"):
        contract.GEMM.name(t="f16", blk="8x4", act="")


@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: d.name)
@pytest.mark.parametrize("parts", ["2", "5"])
def test_split_k(dev, rng, monkeypatch, dt, parts):
    """Split-K (ops/gemm_split.py; KDML_GEMM_SPLIT forces it where lavapipe never splits): the parts'
    float32 sums to the scratch, added in part order with the epilogue (C, alpha, beta; FLOAT16 merged
    into words): shapes off the tiles, transpositions, batches, random strides and offsets, infinities
    and NaNs, within the tiled kernel's bound and every byte outside the output unchanged."""
    monkeypatch.setenv("KDML_GEMM_SPLIT", parts)
    for i, (m, n, k) in enumerate([(31, 33, 47), (97, 130, 200), (1, 1000, 300), (65, 63, 33), (3, 5, 17)]):
        ta, tb = bool(i % 2), bool(i // 2 % 2)
        run_case(dev, rng, dt, (2,) if i % 2 else (), m, n, k, ta, tb, has_c=i % 3 != 2,
                 alpha=(1.0, -0.5, 2.0)[i % 3], beta=(1.0, 0.25, 0.0)[i % 3])
    a, b, c = with_specials(rng, dt, 40, 36, 90, 3)
    run_case(dev, rng, dt, (), 40, 36, 90, a_val=a, b_val=b, c_val=c)
    ad, bd, od = TD(dt, (5, 100)), TD(dt, (100, 7)), TD(dt, (5, 7))
    t = "f16" if dt == DT.FLOAT16 else "f32"
    assert [p.variant for p in dev.compile(kdml.GemmDesc(ad, bd, None, od)).plans] == [f"gemms_{t}_b2", f"gemmr_{t}"]
    monkeypatch.setenv("KDML_GEMM_SPLIT", "1")
    assert [p.variant for p in dev.compile(kdml.GemmDesc(ad, bd, None, od)).plans] == [f"gemm_{t}_b2"]


def test_split_k_rule(monkeypatch):
    """GPUs cut a long K over few tiles into parts of at least SPLIT_MIN_K terms (multiples of 16),
    up to SPLIT_TARGET_GROUPS work groups; CPU devices never do."""
    monkeypatch.delenv("KDML_GEMM_SPLIT", raising=False)
    gpu = types.SimpleNamespace(policy=types.SimpleNamespace(name="discrete-gpu"))
    cpu = types.SimpleNamespace(policy=types.SimpleNamespace(name="cpu"))
    assert gemm_split(gpu, 64, 1024) == (4, 256)  # 1024 x 256 outputs on 64 x 64 tiles, K 1,024
    assert gemm_split(gpu, 32, 1024) == (8, 128)  # a classifier's 1,000 columns on 32 x 32 tiles
    assert gemm_split(gpu, 64, 200) == (1, 200) and gemm_split(gpu, 300, 1024) == (1, 1024)
    assert gemm_split(gpu, 300, 3072) == (2, 1536) and gemm_split(gpu, 512, 4096) == (1, 4096)  # (LONG_K)
    assert gemm_split(gpu, 100, 256) == (1, 256)  # short K: one pass
    assert gemm_split(cpu, 8, 4096) == (1, 4096)
    monkeypatch.setenv("KDML_GEMM_SPLIT", "3")
    assert gemm_split(cpu, 8, 100) == (3, 48)


@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: d.name)
def test_attention_shapes(dev, rng, dt):
    """BERT self-attention as the ONNX backend issues it: scores = Q (B, H, S, 32) x K^T, with K
    stored (B, S, H, 32) and bound as its transposed view (strides, no copy); then probs (B, H, S,
    S) x V, with V stored (B, S, H, 32)."""
    bsz, heads, seq, d = 2, 12, 128, 32
    npd = dt.numpy_dtype
    q = values(rng, dt, (bsz, heads, seq, d), 1)
    kv = values(rng, dt, (bsz, seq, heads, d), 1)
    vv = values(rng, dt, (bsz, seq, heads, d), 1)
    qt, kt, vt = dev.tensor(q), dev.tensor(kv), dev.tensor(vv)
    # K^T: (B, H, 32, S) over K's (B, S, H, 32) storage
    kT = TD(dt, (bsz, heads, d, seq), (seq * heads * d, d, 1, heads * d))
    scores = dev.empty(TD(dt, (bsz, heads, seq, seq)))
    scale = 1 / math.sqrt(d)
    dev.compile(kdml.GemmDesc(qt.desc, kT, None, scores.desc, alpha=scale)).execute(
        [qt, kdml.Tensor(kt.buffer, kT, kt.offset), None], [scores])
    k_logical = np.transpose(kv, (0, 2, 3, 1))
    check(scores.numpy(), q, k_logical, None, False, False, scale, 1.0)
    # the same through trans_b on K (B, H, S, 32) seen over its storage
    kview = TD(dt, (bsz, heads, seq, d), (seq * heads * d, d, heads * d, 1))
    dev.compile(kdml.GemmDesc(qt.desc, kview, None, scores.desc, trans_b=T, alpha=scale)).execute(
        [qt, kdml.Tensor(kt.buffer, kview, kt.offset), None], [scores])
    check(scores.numpy(), q, np.transpose(kv, (0, 2, 1, 3)), None, False, True, scale, 1.0)
    # probs x V
    probs = np.abs(values(rng, dt, (bsz, heads, seq, seq), 2)).astype(npd)
    pt = dev.tensor(probs)
    vview = TD(dt, (bsz, heads, seq, d), (seq * heads * d, d, heads * d, 1))
    ctx = dev.empty(TD(dt, (bsz, heads, seq, d)))
    dev.compile(kdml.GemmDesc(pt.desc, vview, None, ctx.desc)).execute([pt, kdml.Tensor(vt.buffer, vview, vt.offset), None],
                                                                       [ctx])
    check(ctx.numpy(), probs, np.transpose(vv, (0, 2, 1, 3)), None, False, False, 1.0, 1.0)


def test_broadcast_by_stride_0(dev, rng):
    """A shared by every matrix (batch strides 0), C one row repeated (row stride 0)."""
    dt = DT.FLOAT32
    a = values(rng, dt, (5, 3))
    b = values(rng, dt, (2, 4, 3, 6))
    c = values(rng, dt, (6,))
    at, bt, ct = dev.tensor(a), dev.tensor(b), dev.tensor(c)
    ad = TD(dt, (2, 4, 5, 3), (0, 0, 3, 1))
    cd = TD(dt, (2, 4, 5, 6), (0, 0, 0, 1))
    out = dev.empty(TD(dt, (2, 4, 5, 6)))
    dev.compile(kdml.GemmDesc(ad, bt.desc, cd, out.desc, alpha=2.0, beta=-1.0)).execute(
        [kdml.Tensor(at.buffer, ad, 0), bt, kdml.Tensor(ct.buffer, cd, 0)], [out])
    check(out.numpy(), np.broadcast_to(a, (2, 4, 5, 3)), b, np.broadcast_to(c, (2, 4, 5, 6)), False, False, 2.0, -1.0)


# ---- magnitudes, overflow, infinities, NaN, zeros ---------------------------------------------
@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: d.name)
def test_extreme_magnitudes(dev, rng, dt):
    npd = dt.numpy_dtype
    big, small = (1e18, 1e-18) if dt == DT.FLOAT32 else (2.0 ** 7, 2.0 ** -7)
    for m, n, k, sa, sb, alpha in ((4, 5, 100, big, big, 1.0), (4, 5, 37, big, small, 1.0), (3, 6, 50, small, small, 1.0),
                                   (6, 3, 20, 1.0, 1.0, 1e30 if dt == DT.FLOAT32 else 100.0),
                                   (5, 5, 64, big, 1.0, 1e-30 if dt == DT.FLOAT32 else 1e-3)):
        a = (rng.standard_normal((m, k)) * sa).astype(npd)
        b = (rng.standard_normal((k, n)) * sb).astype(npd)
        run_case(dev, rng, dt, (), m, n, k, has_c=False, alpha=alpha, a_val=a, b_val=b)
    # cancellation: huge terms of both signs around small ones
    a = values(rng, dt, (6, 40), 2)
    a[:, ::3] = (big * rng.choice([-1.0, 1.0], (6, 14))).astype(npd)
    b = values(rng, dt, (40, 7), 2)
    run_case(dev, rng, dt, (), 6, 7, 40, has_c=True, alpha=1.0, beta=1.0, a_val=a, b_val=b)
    # float32 subnormals (flushed or not, as the device's float controls say)
    if dt == DT.FLOAT32:
        a = values(rng, dt, (4, 9))
        a[0, :] = np.float32(1e-40)
        run_case(dev, rng, dt, (), 4, 3, 9, has_c=True, a_val=a, c_val=np.full((4, 3), 1e-41, np.float32))


def test_overflow_float32_accumulates_before_alpha(dev):
    """S = 3e38 * 2 overflows in float32 before alpha = 0.25 scales it (the documented order)."""
    a = np.array([[3e38]], np.float32)
    b = np.array([[2.0]], np.float32)
    at, bt = dev.tensor(a), dev.tensor(b)
    out = dev.empty(TD(DT.FLOAT32, (1, 1)))
    dev.compile(kdml.GemmDesc(at.desc, bt.desc, None, out.desc, alpha=0.25)).execute([at, bt, None], [out])
    assert out.numpy()[0, 0] == np.inf
    # and the largest finite sums stay finite: 2 x 1.5e38 = 3e38
    at2 = dev.tensor(np.array([[1.5e38, 1.5e38]], np.float32))
    bt2 = dev.tensor(np.array([[1.0], [1.0]], np.float32))
    dev.compile(kdml.GemmDesc(at2.desc, bt2.desc, None, out.desc)).execute([at2, bt2, None], [out])
    assert out.numpy()[0, 0] == np.float32(3e38)


def test_float16_accumulates_in_float32(dev):
    """255 x 255 + 255 x 255 = 130050 overflows float16 but not the float32 sum: alpha = 1/4
    brings it back (32512.5 -> 32512, nearest even); without alpha it rounds to infinity."""
    a = np.full((1, 2), 255, np.float16)
    b = np.full((2, 1), 255, np.float16)
    at, bt = dev.tensor(a), dev.tensor(b)
    out = dev.empty(TD(DT.FLOAT16, (1, 1)))
    dev.compile(kdml.GemmDesc(at.desc, bt.desc, None, out.desc, alpha=0.25)).execute([at, bt, None], [out])
    assert out.numpy()[0, 0] == np.float16(32512)
    dev.compile(kdml.GemmDesc(at.desc, bt.desc, None, out.desc)).execute([at, bt, None], [out])
    assert out.numpy()[0, 0] == np.inf
    # ties to even in the final rounding: 2049 = 2048 + 1 -> 2048; 2051 -> 2052
    at3 = dev.tensor(np.array([[2048, 1], [2048, 3]], np.float16))
    bt3 = dev.tensor(np.array([[1], [1]], np.float16))
    out2 = dev.empty(TD(DT.FLOAT16, (2, 1)))
    dev.compile(kdml.GemmDesc(at3.desc, bt3.desc, None, out2.desc)).execute([at3, bt3, None], [out2])
    assert out2.numpy().ravel().tolist() == [2048, 2052]


@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: d.name)
def test_inf_nan_propagate(dev, rng, dt):
    npd = dt.numpy_dtype
    for alpha, beta in ((1.0, 1.0), (-2.0, 0.5), (0.0, 1.0), (1.0, 0.0)):
        m, n, k = 6, 7, 9
        a, b, c = with_specials(rng, dt, m, n, k, 2)
        run_case(dev, rng, dt, (), m, n, k, has_c=True, alpha=alpha, beta=beta, a_val=a, b_val=b, c_val=c)
    # alpha = 0 times an infinite sum is NaN; beta = 0 times an infinite C is NaN (the formula as written)
    got, *_ = run_case(dev, rng, dt, (), 1, 1, 1, alpha=0.0, beta=1.0, a_val=np.full((1, 1), np.inf, npd),
                       b_val=np.ones((1, 1), npd), c_val=np.ones((1, 1), npd))
    assert np.isnan(got).all()
    got, *_ = run_case(dev, rng, dt, (), 1, 1, 1, alpha=1.0, beta=0.0, a_val=np.ones((1, 1), npd),
                       b_val=np.ones((1, 1), npd), c_val=np.full((1, 1), np.inf, npd))
    assert np.isnan(got).all()


@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: d.name)
def test_signed_zeros(dev, rng, dt):
    """An exact zero sum has IEEE's sign: -0 where every product is -0 (whatever K, past the
    tile's padding), +0 where signs mix; alpha keeps it; + beta * (+0) makes it +0."""
    npd = dt.numpy_dtype
    for k in (1, 2, 15, 16, 17, 40):
        a = -np.ones((3, k), npd)
        b = np.zeros((k, 2), npd)
        b[:, 1] = np.where(np.arange(k) % 2, -0.0, 0.0) if k > 1 else -0.0
        got, *_ = run_case(dev, rng, dt, (), 3, 2, k, has_c=False, alpha=2.0, a_val=a, b_val=b, strided=False)
        sign = np.signbit(got)
        assert sign[:, 0].all(), k  # -1 * +0 = -0 every time
        assert not sign[:, 1].any(), k  # mixed signs sum to +0 (k = 1: -1 * -0 = +0)
        got, *_ = run_case(dev, rng, dt, (), 3, 2, k, has_c=True, alpha=2.0, beta=1.0, a_val=a, b_val=b,
                           c_val=np.zeros((3, 2), npd), strided=False)
        assert not np.signbit(got).any()


# ---- batches and the dispatch grid ------------------------------------------------------------
def test_large_batch(dev, rng):
    """4100 matrices (batch 41 x channel 100) of 2 x 3 x 2, B shared by the channels (stride 0)."""
    dt = DT.FLOAT32
    a = values(rng, dt, (41, 100, 2, 3))
    b = values(rng, dt, (41, 1, 3, 2))
    at, bt = dev.tensor(a), dev.tensor(b)
    bd = TD(dt, (41, 100, 3, 2), (6, 0, 2, 1))
    out = dev.empty(TD(dt, (41, 100, 2, 2)))
    op = dev.compile(kdml.GemmDesc(at.desc, bd, None, out.desc))
    assert op.plans[0].groups[0] * op.plans[0].groups[1] * op.plans[0].groups[2] >= 4100
    op.execute([at, kdml.Tensor(bt.buffer, bd, 0), None], [out])
    check(out.numpy(), a, np.broadcast_to(b, (41, 100, 3, 2)), None, False, False, 1.0, 1.0)


def test_folded_grid(dev, rng, monkeypatch):
    """A device whose maxComputeWorkGroupCount is (5, 3, 64): the groups fold into y and z, and
    the shader finds every tile of every matrix."""
    limits = dict(dev.limits)
    limits["max_compute_work_group_count"] = (5, 3, 64)
    monkeypatch.setattr(dev, "limits", types.MappingProxyType(limits))
    run_case(dev, rng, DT.FLOAT32, (7, 3), 40, 70, 5, strided=True)  # 2 x 3 tiles x 21 matrices: 126 groups
    ad, bd, od = TD(DT.FLOAT32, (7, 3, 40, 5)), TD(DT.FLOAT32, (7, 3, 5, 70)), TD(DT.FLOAT32, (7, 3, 40, 70))
    groups = dev.compile(kdml.GemmDesc(ad, bd, None, od)).plans[0].groups
    assert groups[0] <= 5 and groups[1] <= 3 and groups[2] > 1


def test_grid_limits():
    assert gemm_grid(10, (65535, 65535, 65535)) == (10, 1, 1)
    assert gemm_grid(70000, (65535, 65535, 65535)) == (35000, 2, 1)
    assert gemm_grid(100, (4, 5, 6)) == (4, 5, 5)
    with pytest.raises(kdml.UnsupportedError, match="a_tensor.sizes"):
        gemm_grid(200, (4, 5, 6))


def test_recording_chains(dev, rng):
    """Two GEMMs in one recording, the second reading the first's output."""
    dt = DT.FLOAT32
    a, b, c = values(rng, dt, (2, 9, 5)), values(rng, dt, (2, 5, 11)), values(rng, dt, (2, 11, 4))
    at, bt, ct = dev.tensor(a), dev.tensor(b), dev.tensor(c)
    ab = dev.empty(TD(dt, (2, 9, 11)))
    out = dev.empty(TD(dt, (2, 9, 4)))
    op1 = dev.compile(kdml.GemmDesc(at.desc, bt.desc, None, ab.desc))
    op2 = dev.compile(kdml.GemmDesc(ab.desc, ct.desc, None, out.desc))
    with dev.record() as rec:
        rec.execute(op1, [at, bt, None], [ab])
        rec.execute(op2, [ab, ct, None], [out])
    check(ab.numpy(), a, b, None, False, False, 1.0, 1.0)
    check(out.numpy(), ab.numpy(), c, None, False, False, 1.0, 1.0)


# ---- validation: the page's rules and table ---------------------------------------------------
def _desc(dt=DT.FLOAT32, a=(1, 1, 2, 3), b=(1, 1, 3, 4), c=(1, 1, 2, 4), o=(1, 1, 2, 4), **kw):
    return kdml.GemmDesc(TD(dt, a), TD(dt, b), TD(dt, c) if c is not None else None, TD(dt, o), **kw)


def test_support_table(dev):
    lvl1 = kdml.Device(feature_level=FL.FL_1_0)
    try:
        lvl1.compile(_desc())
        with pytest.raises(kdml.UnsupportedError, match="^a_tensor"):
            lvl1.compile(_desc(a=(2, 3), b=(3, 4), c=(2, 4), o=(2, 4)))
        lvl1.compile(_desc(dt=DT.FLOAT16))
    finally:
        lvl1.close()
    lvl4 = kdml.Device(feature_level=FL.FL_4_0)
    try:
        lvl4.compile(_desc(a=(2, 3), b=(3, 4), c=(2, 4), o=(2, 4)))
        lvl4.compile(_desc(a=(5, 2, 3), b=(5, 3, 4), c=None, o=(5, 2, 4)))
    finally:
        lvl4.close()
    with pytest.raises(kdml.UnsupportedError, match="^a_tensor"):
        dev.compile(_desc(a=(2, 1, 1, 2, 3), b=(2, 1, 1, 3, 4), c=(2, 1, 1, 2, 4), o=(2, 1, 1, 2, 4)))
    with pytest.raises(kdml.UnsupportedError, match="^a_tensor"):
        dev.compile(_desc(a=(3,), b=(3,), c=None, o=(1,)))
    for bad in (DT.INT32, DT.FLOAT64, DT.UINT8):
        with pytest.raises(kdml.UnsupportedError, match="^a_tensor"):
            dev.compile(_desc(dt=bad))


@pytest.mark.parametrize(("kw", "field"), [
    ({"b": (1, 1, 4, 4)}, "b_tensor.sizes"),  # K 4 != 3
    ({"b": (1, 2, 3, 4), "o": (1, 2, 2, 4), "c": None}, "b_tensor.sizes"),  # batch differs from A's
    ({"o": (1, 1, 2, 5), "c": None}, "output_tensor.sizes"),
    ({"o": (1, 2, 2, 4), "c": None}, "output_tensor.sizes"),
    ({"c": (1, 1, 1, 4)}, "c_tensor.sizes"),  # broadcastable, but the page wants the output's sizes
    ({"c": (1, 2, 4)}, "c_tensor.sizes"),  # dimension count
    ({"b": (1, 3, 4)}, "b_tensor.sizes"),
    ({"trans_a": 2}, "trans_a"),
    ({"trans_a": True}, "trans_a"),
    ({"trans_b": "x"}, "trans_b"),
    ({"trans_a": T}, "b_tensor.sizes"),  # A (2, 3) transposed: K = 2
    ({"alpha": "1"}, "alpha"),
    ({"alpha": True}, "alpha"),
    ({"beta": 1e300}, "beta"),
    ({"alpha": None}, "alpha"),
])
def test_invalid(dev, kw, field):
    with pytest.raises(kdml.InvalidArgumentError, match=f"^{field}"):
        dev.compile(_desc(**kw))


def test_invalid_types_and_layouts(dev):
    f32, f16 = DT.FLOAT32, DT.FLOAT16
    with pytest.raises(kdml.InvalidArgumentError, match="^b_tensor.data_type"):
        dev.compile(kdml.GemmDesc(TD(f32, (2, 3)), TD(f16, (3, 4)), None, TD(f32, (2, 4))))
    with pytest.raises(kdml.InvalidArgumentError, match="^c_tensor.data_type"):
        dev.compile(kdml.GemmDesc(TD(f32, (2, 3)), TD(f32, (3, 4)), TD(f16, (2, 4)), TD(f32, (2, 4))))
    with pytest.raises(kdml.InvalidArgumentError, match="^output_tensor.data_type"):
        dev.compile(kdml.GemmDesc(TD(f32, (2, 3)), TD(f32, (3, 4)), None, TD(f16, (2, 4))))
    with pytest.raises(kdml.InvalidArgumentError, match="^output_tensor.strides"):
        dev.compile(kdml.GemmDesc(TD(f32, (2, 3)), TD(f32, (3, 4)), None, TD(f32, (2, 4), (0, 1))))
    with pytest.raises(kdml.UnsupportedError, match="^fused_activation"):
        dev.compile(_desc(fused_activation=object()))
    # absent C: beta is ignored, whatever it is
    dev.compile(_desc(c=None, beta=float("nan")))
    # the output may not alias an input
    a = dev.tensor(np.ones((4, 4), np.float32))
    op = dev.compile(kdml.GemmDesc(a.desc, a.desc, None, a.desc))
    with pytest.raises(kdml.InvalidArgumentError, match="^output_tensor"):
        op.execute([a, a, None], [a])


def test_descriptor_defaults_and_enum():
    d = _desc()
    assert (d.trans_a, d.trans_b, d.alpha, d.beta, d.fused_activation) == (0, 0, 1.0, 1.0, None)
    assert int(kdml.MatrixTransform.NONE) == 0 and int(kdml.MatrixTransform.TRANSPOSE) == 1
    assert dataclasses.replace(d, trans_a=T).trans_a == 1


# ---- helpers: kdml.gemm / kdml.matmul ---------------------------------------------------------
MATMUL_SHAPES = [((3,), (3,)), ((3,), (3, 4)), ((2, 3), (3,)), ((5, 2, 3), (3, 4)), ((2, 1, 5, 3), (4, 3, 2)),
                 ((2, 3, 4, 5, 3), (3, 2)), ((7,), (2, 3, 7, 5)), ((1, 1), (1, 1)), ((2, 2, 2, 2, 3, 4), (2, 2, 2, 2, 4, 1))]


@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: d.name)
def test_matmul_like_numpy(dev, rng, dt):
    for sa, sb in MATMUL_SHAPES:
        a, b = values(rng, dt, sa, 2), values(rng, dt, sb, 2)
        got = kdml.matmul(a, b, device=dev).numpy()
        want = np.matmul(a.astype(np.float64), b.astype(np.float64))
        assert got.shape == (want.shape or (1,)), (sa, sb)
        a2 = a.reshape(1, -1) if a.ndim == 1 else a
        b2 = b.reshape(-1, 1) if b.ndim == 1 else b
        ref = np.matmul(a2.astype(np.float64), b2.astype(np.float64))
        check(got.reshape(ref.shape), np.broadcast_to(a2, (*ref.shape[:-2], *a2.shape[-2:])),
              np.broadcast_to(b2, (*ref.shape[:-2], *b2.shape[-2:])), None, False, False, 1.0, 1.0)


def test_gemm_helper(dev, rng):
    dt = DT.FLOAT32
    a, b = values(rng, dt, (3, 4, 6)), values(rng, dt, (5, 4))
    c = values(rng, dt, (5,))
    got = kdml.gemm(a, b, c, trans_a=True, trans_b=True, alpha=0.5, beta=-2.0, device=dev)
    assert got.desc.sizes == (3, 6, 5)
    check(got.numpy(), np.swapaxes(a, 1, 2), np.broadcast_to(b.T, (3, 4, 5)), np.broadcast_to(c, (3, 6, 5)),
          False, False, 0.5, -2.0)
    # Python data take the other operand's type; out= with strides
    at = dev.tensor(values(rng, DT.FLOAT16, (2, 3)))
    out = dev.empty(TD(DT.FLOAT16, (2, 2), (1, 2)))
    r = kdml.gemm(at, [[1, 2], [3, 4], [5, 6]], 1.5, out=out)
    assert r is out
    check(out.numpy(), at.numpy(), np.array([[1, 2], [3, 4], [5, 6]], np.float16), np.full((2, 2), 1.5, np.float16),
          False, False, 1.0, 1.0)
    # a repeated call reuses its compiled operator (the device's gemm cache)
    n0 = len(dev.caches["gemm"])
    kdml.gemm(at, [[1, 2], [3, 4], [5, 6]], 1.5, out=out)
    assert len(dev.caches["gemm"]) == n0
    # -0.0 and NaN scalars are their own calls (not another call's cached operator)
    bt = dev.tensor(np.zeros((3, 2), np.float32))
    a32 = dev.tensor(np.ones((2, 3), np.float32))
    assert not np.signbit(kdml.gemm(a32, bt, alpha=1.0).numpy()).any()
    assert np.signbit(kdml.gemm(a32, bt, alpha=-1.0).numpy()).all()
    assert np.isnan(kdml.gemm(a32, bt, alpha=float("nan")).numpy()).all()


@pytest.mark.parametrize("ta", [False, True])
def test_shared_b_makes_one_matrix_of_the_batch(dev, rng, ta):
    """B shared by every matrix and A, C and the output continuing their rows across the batch: one
    product of batch x M rows (a ConvNeXt Linear over [batch, H, W, C] is 7-row matrices otherwise),
    the same values; a C or an output whose batch does not continue its rows keeps the batch."""
    dt = DT.FLOAT32
    a = values(rng, dt, (2, 3, 6, 7) if ta else (2, 3, 7, 6), 2)
    b, c = values(rng, dt, (6, 5), 2), values(rng, dt, (5,), 2)
    got = kdml.gemm(a, b, c, trans_a=ta, device=dev)
    op_a = np.swapaxes(a, -1, -2) if ta else a
    check(got.numpy(), op_a, np.broadcast_to(b, (2, 3, 6, 5)), np.broadcast_to(c, (2, 3, 7, 5)), False, False, 1.0, 1.0)
    descs = [d for _, d, _ in dev.caches["gemm"].values() if d[1].sizes == (1, 1, 6, 5)]
    assert any(d[3].sizes == (1, 1, 42, 5) for d in descs), [d[3].sizes for d in descs]
    # an output strided across its batch (every other matrix of a larger one): the batch stays
    big = dev.empty(TD(DT.FLOAT32, (2, 6, 7, 5)))
    out = kdml.Tensor(big.buffer, TD(DT.FLOAT32, (2, 3, 7, 5), (6 * 35, 70, 5, 1)), big.offset)
    kdml.gemm(a, b, c, trans_a=ta, out=out, device=dev)
    check(out.numpy(), op_a, np.broadcast_to(b, (2, 3, 6, 5)), np.broadcast_to(c, (2, 3, 7, 5)), False, False, 1.0, 1.0)
    assert any(d[3].sizes[2:] == (7, 5) for _, d, _ in dev.caches["gemm"].values())


def test_helper_refusals(dev, rng):
    f32 = np.float32
    with pytest.raises(kdml.InvalidArgumentError, match="^b"):
        kdml.matmul(np.ones((2, 3), f32), np.ones((4, 2), f32), device=dev)
    with pytest.raises(kdml.InvalidArgumentError, match="^b"):
        kdml.matmul(np.ones((2, 2, 3), f32), np.ones((3, 3, 2), f32), device=dev)
    with pytest.raises(kdml.InvalidArgumentError, match="^c"):
        kdml.gemm(np.ones((2, 3), f32), np.ones((3, 4), f32), np.ones((3,), f32), device=dev)
    with pytest.raises(kdml.InvalidArgumentError, match="^trans_a"):
        kdml.gemm(np.ones((2, 3), f32), np.ones((3, 4), f32), trans_a=2, device=dev)
    with pytest.raises(kdml.InvalidArgumentError, match="^out"):
        kdml.matmul(np.ones((2, 3), f32), np.ones((3, 4), f32), out=dev.empty(TD(DT.FLOAT32, (2, 5))), device=dev)
    with pytest.raises(kdml.InvalidArgumentError, match="^b: data type"):
        kdml.matmul(np.ones((2, 3), f32), np.ones((3, 4), np.float16), device=dev)
    with pytest.raises(kdml.UnsupportedError, match="^a_tensor"):
        kdml.matmul(np.ones((2, 3)), np.ones((3, 4)), device=dev)  # float64
    # three batch dimensions that no layout folds into two: a strided view of a device tensor
    big = dev.tensor(values(rng, DT.FLOAT32, (4, 6, 8, 5, 3)))
    view = big[::2, ::2, ::2]
    with pytest.raises(kdml.UnsupportedError, match="^a: the batch dimensions"):
        kdml.matmul(view, np.ones((3, 2), f32), device=dev)
    # ... which folds once copied into a packed tensor
    got = kdml.matmul(kdml.copy(view), np.ones((3, 2), f32), device=dev).numpy()
    v = view.numpy().astype(np.float64)
    # three float32 additions in whatever order: within 3 ulps of the sum of magnitudes (a row
    # whose terms cancel has no relative bound; the H100 showed 1.4e-5 relative on one)
    bound = 3 * np.finfo(f32).eps * np.abs(v).sum(axis=-1, keepdims=True)
    assert (np.abs(got - v.sum(axis=-1, keepdims=True)) <= bound).all()


@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: d.name)
def test_result_independent_of_layout_and_tile(dev, rng, monkeypatch, dt):
    """Each output's sum runs over k in order whatever the tile, the staging mode, the strides or
    the transposition: the same logical operands give bitwise the same result (docs/gemm.md)."""
    m, n, k = 70, 45, 300
    a, b, c = values(rng, dt, (3, m, k)), values(rng, dt, (3, k, n)), values(rng, dt, (3, m, n))
    results = []
    for ta, tb, big, blk in ((False, False, False, "2"), (True, True, False, "4"), (True, False, True, "4"),
                             (False, True, True, "8"), (True, False, False, "8"), (False, True, False, "8x4"),
                             (True, False, True, "8x4")):
        if "x" in blk and dt != DT.FLOAT32:  # (8 x 4: FLOAT32 only)
            continue
        monkeypatch.setattr("kompute_dml.ops.gemm.gemm_block", lambda *args, blk=blk: blk)
        sa = np.ascontiguousarray(np.swapaxes(a, 1, 2)) if ta else a
        sb = np.ascontiguousarray(np.swapaxes(b, 1, 2)) if tb else b
        at, bt, ct = dev.tensor(sa), dev.tensor(sb), dev.tensor(c)
        out = dev.empty(TD(dt, (3, m, n), (m, 1, 3 * m)) if big else TD(dt, (3, m, n)))
        op = dev.compile(kdml.GemmDesc(at.desc, bt.desc, ct.desc, out.desc, int(ta), int(tb), 0.75, -1.5))
        assert op.plans[0].variant.endswith(f"_b{blk}")
        op.execute([at, bt, ct], [out])
        results.append(out.numpy())
    for r in results[1:]:
        assert r.tobytes() == results[0].tobytes()
    check(results[0], a, b, c, False, False, 0.75, -1.5)
