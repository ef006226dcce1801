"""FLOAT16 GEMM on cooperative matrices (ops/gemm_coop.py, shaders/gemm_coop.comp) against the
float64 reference under docs/gemm.md's bound for the family (tests/gemm_reference.py, kernel
"coopmat": gamma(5K + 2), any order and any adder of the device's).

Two runs of one kernel, forced through the device policy (DevicePolicy.gemm_kernel, as
KDML_GEMM_KERNEL does): 'coopmat' (tensor cores; only where the device has the capabilities and lists
the f16 x f16 -> f32 16x16x16 shape, skipped elsewhere) and 'coopmat-emulated' (each
cooperative-matrix operation as plain subgroup code on the same shared tiles: any device, so CI runs
every tile order, load mode, tile walk and epilogue path on lavapipe). The emulated sums are the
tiled kernel's (fma over k in order), so its results must also equal shaders/gemm.comp's bit for
bit. Cases: shapes off the 16 x 16 x 16 fragments and the tiles down to 1 x 1 x 1, K = 1 to 4096,
every transposition, packed (16-byte loads) and random strides (element loads) with broadcast
(stride 0), C present or absent, offsets with guard bytes on every tensor and poisoned outputs whose
every other byte must stay unchanged, odd output row strides (half-word stores), infinities and
NaNs, signed zeros, the folded grid, the policy's choice and the ONNX MatMul path.
"""

from __future__ import annotations

import dataclasses
import types

import numpy as np
import pytest
from gemm_reference import check
from test_gemm import TRANS, run_case, values, with_specials

import kompute_dml as kdml
from kompute_dml.ops.gemm import compile_gemm
from kompute_dml.ops.gemm_coop import FAMILIES, LARGE, MEDIUM, SMALL, SMALL_K64, SMALL_K64_N32, CoopTile, candidate_tiles
from kompute_dml.runtime.policy import F16_SHAPE, GEMM_COOP_MIN, GEMM_KERNEL_ENV, DevicePolicy, has_f16_shape, policy_for

DT = kdml.DataType
TD = kdml.TensorDesc
F16 = DT.FLOAT16


def coop_available(dev) -> str | None:
    """Why the tensor-core family cannot run on `dev` (None: it can)."""
    missing = [c for c in FAMILIES["coopmat"][1] if c not in dev.capabilities]
    if missing:
        return f"device has no {', '.join(missing)} capability"
    if not has_f16_shape(dev.cooperative_matrix_shapes):
        return "device lists no f16 x f16 -> f32 16x16x16 cooperative-matrix shape"
    return None


@pytest.fixture(params=list(FAMILIES))
def family(request, dev, monkeypatch):
    if request.param == "coopmat" and (why := coop_available(dev)):
        pytest.skip(f"{why}: the 'coopmat' run is skipped")
    monkeypatch.setattr(dev, "policy", dataclasses.replace(dev.policy, gemm_kernel=request.param))
    return request.param


def variant_prefix(family: str) -> str:
    return f"gemmc16{FAMILIES[family][0]}_"


def coop_case(dev, rng, family, batch, m, n, k, ta=False, tb=False, **kw):
    """run_case (test_gemm: placed, poisoned, guard bytes checked) on the forced family, checked under
    its bound (the callers assert the variant through compiled_variant)."""
    return run_case(dev, rng, F16, batch, m, n, k, ta, tb, kernel="coopmat", **kw)


def compiled_variant(dev, batch, m, n, k, ta=False, tb=False, has_c=False, **kw):
    a_sz = (*batch, k, m) if ta else (*batch, m, k)
    b_sz = (*batch, n, k) if tb else (*batch, k, n)
    o_sz = (*batch, m, n)
    desc = kdml.GemmDesc(TD(F16, a_sz), TD(F16, b_sz), TD(F16, o_sz) if has_c else None, TD(F16, o_sz), int(ta), int(tb))
    return compile_gemm(dev, desc, **kw).plans[0]


# ---- shapes, transpositions, layouts ----------------------------------------------------------
SHAPES = [(1, 1, 1), (3, 1, 5), (16, 16, 16), (17, 15, 33), (32, 32, 32), (31, 45, 70), (64, 40, 1)]


@pytest.mark.parametrize(("ta", "tb"), TRANS, ids=["NN", "TN", "NT", "TT"])
def test_shapes_and_layouts(dev, rng, family, ta, tb):
    """Every shape of SHAPES (fragment and tile multiples, one off them, 1 x 1 x 1), random batch
    ranks, C present or not, alpha / beta; packed tensors (16-byte loads) and random strides with
    broadcast dimensions (element loads) on every tensor, at random offsets."""
    prefix = variant_prefix(family)
    for i, (m, n, k) in enumerate(SHAPES):
        rank = int(rng.integers(0, 3))
        batch = tuple(int(x) for x in rng.integers(1, 4, rank))
        alpha, beta = [(1.0, 1.0), (0.5, -2.0), (-3.25, 0.0), (1e-3, 7.0)][i % 4]
        assert compiled_variant(dev, batch, m, n, k, ta, tb).variant.startswith(prefix)
        coop_case(dev, rng, family, batch, m, n, k, ta, tb, has_c=bool(i % 3), alpha=alpha, beta=beta,
                  strided=bool(i % 2))


def test_tile_orders_and_vector_loads(dev, rng, family):
    """The four shared-tile orders (A k- or m-contiguous, B n- or k-contiguous) from the operands'
    layouts, with and without 16-byte loads, named by the plan."""
    prefix = variant_prefix(family)
    m, n, k = 40, 56, 48
    for ta, tb, order in ((False, False, "rr"), (True, False, "cr"), (False, True, "rc"), (True, True, "cc")):
        plan = compiled_variant(dev, (2,), m, n, k, ta, tb)
        assert plan.variant == prefix + order
        flags = plan.push[kdml.ops.contract.GEMM.offset("flags")]
        assert flags & kdml.ops.contract.GEMM_F_A_VEC and flags & kdml.ops.contract.GEMM_F_B_VEC
        coop_case(dev, rng, family, (2,), m, n, k, ta, tb, has_c=True, strided=False)
    # rows of 41 elements: no 16-byte loads (element loads of the same tiles)
    plan = compiled_variant(dev, (), 33, 20, 41)
    flags = plan.push[kdml.ops.contract.GEMM.offset("flags")]
    assert not flags & (kdml.ops.contract.GEMM_F_A_VEC | kdml.ops.contract.GEMM_F_B_VEC)
    coop_case(dev, rng, family, (), 33, 20, 41, has_c=True, strided=False)


def test_tiles(dev, rng, family, monkeypatch):
    """The default tiles where they fit (LARGE: 16 subgroups, BK 64 in one shared stage; MEDIUM: 8
    subgroups of 16 x 32; the small tiles of K 64: 8 subgroups of 16 x 16), several accumulators per
    subgroup, tile rows walked in groups (GROUP_M 2 over 5 tile rows), on shapes around the tile edges;
    every default tile is valid on a 48 KiB device."""
    for tile in (LARGE, MEDIUM, SMALL_K64, SMALL_K64_N32, CoopTile(64, 32, 32, 16, bk=64, group_m=2, stages=1)):
        if tile.shared_bytes("r", "r") > dev.limits["max_compute_shared_memory_size"]:
            continue
        plan = compiled_variant(dev, (2,), 150, 70, 90, config=tile)
        assert plan.spec[1:3] == (tile.bm, tile.bn) and plan.spec[3] == tile.bk
        for m, n, k, batch in ((150, 70, 90, (2,)), (65, 129, 17, ())):
            monkeypatch.setattr("kompute_dml.ops.gemm_coop.candidate_tiles", lambda *a, tile=tile: [tile])
            coop_case(dev, rng, family, batch, m, n, k, has_c=True, strided=False)
    for tile in (LARGE, MEDIUM, SMALL, SMALL_K64, SMALL_K64_N32):
        for order in ("rr", "cc", "rc", "cr"):
            assert tile.problems(32, order[0], order[1], {"max_compute_shared_memory_size": 49152}, False) == []
    assert candidate_tiles(4096, 4096, 4096, 1) == [LARGE, MEDIUM, SMALL]
    assert candidate_tiles(1024, 3072, 768, 1) == [LARGE, MEDIUM, SMALL]  # 192 large tiles
    assert candidate_tiles(256, 256, 256, 1024) == [LARGE, MEDIUM, SMALL]
    assert candidate_tiles(1024, 1024, 1024, 1) == [MEDIUM, SMALL]  # 64 large tiles, 256 medium
    assert candidate_tiles(4096, 4096, 128, 1) == [MEDIUM, SMALL]  # K too short for the large tiles
    assert candidate_tiles(512, 512, 512, 1) == [SMALL_K64, SMALL, MEDIUM]  # too few of any: the most work groups
    assert candidate_tiles(128, 32, 128, 96) == [SMALL_K64_N32, SMALL, MEDIUM]  # attention context: N 32
    assert candidate_tiles(128, 128, 32, 96) == [SMALL, MEDIUM]  # attention: K too short


@pytest.mark.parametrize("k", [1, 2, 15, 16, 17, 31, 33, 100, 257, 1000, 2049, 4096])
def test_k(dev, rng, family, k):
    """K from 1 to 4096: the padding of the last step, many steps (double-buffered stages)."""
    ta, tb = bool(rng.integers(0, 2)), bool(rng.integers(0, 2))
    coop_case(dev, rng, family, (2,), int(rng.integers(1, 40)), int(rng.integers(1, 40)), k, ta, tb,
              has_c=bool(k % 2), alpha=float(rng.choice([1.0, -0.75])), beta=0.5, strided=bool(k % 3))


def test_output_layouts(dev, rng, family):
    """Output rows of odd length (every other pair of halves straddles a word: STORE_FIELD), a
    transposed output (column stride M) and a broadcast C (one row, row stride 0)."""
    m, n, k = 21, 19, 24
    coop_case(dev, rng, family, (2,), m, n, k, has_c=True, strided=False, o_strides=(m * (n + 1), n + 1, 1))
    coop_case(dev, rng, family, (2,), m, n, k, has_c=True, strided=False, o_strides=(m * n, 1, m))
    a, b, c = values(rng, F16, (3, m, k)), values(rng, F16, (k, n)), values(rng, F16, (n,))
    at, bt, ct = dev.tensor(a), dev.tensor(b), dev.tensor(c)
    bd, cd = TD(F16, (3, k, n), (0, n, 1)), TD(F16, (3, m, n), (0, 0, 1))
    out = dev.empty(TD(F16, (3, m, n)))
    op = dev.compile(kdml.GemmDesc(at.desc, bd, cd, out.desc, alpha=2.0, beta=-1.0))
    assert op.plans[0].variant.startswith(variant_prefix(family))
    op.execute([at, kdml.Tensor(bt.buffer, bd, 0), kdml.Tensor(ct.buffer, cd, 0)], [out])
    check(out.numpy(), a, np.broadcast_to(b, (3, k, n)), np.broadcast_to(c, (3, m, n)), False, False, 2.0, -1.0, "coopmat")


def test_attention_shapes(dev, rng, family):
    """Q x K^T with K bound as the transposed view of its (B, S, H, D) storage (k contiguous: tile
    order 'rc', 16-byte loads) and probs x V with V strided (n contiguous: 'rr')."""
    bsz, heads, seq, d = 2, 3, 40, 32
    q, kv = values(rng, F16, (bsz, heads, seq, d), 1), values(rng, F16, (bsz, seq, heads, d), 1)
    qt, kt = dev.tensor(q), dev.tensor(kv)
    kT = TD(F16, (bsz, heads, d, seq), (seq * heads * d, d, 1, heads * d))
    scores = dev.empty(TD(F16, (bsz, heads, seq, seq)))
    op = dev.compile(kdml.GemmDesc(qt.desc, kT, None, scores.desc, alpha=0.125))
    assert op.plans[0].variant == variant_prefix(family) + "rc"
    op.execute([qt, kdml.Tensor(kt.buffer, kT, kt.offset), None], [scores])
    check(scores.numpy(), q, np.transpose(kv, (0, 2, 3, 1)), None, False, False, 0.125, 1.0, "coopmat")
    probs = np.abs(values(rng, F16, (bsz, heads, seq, seq), 2))
    pt = dev.tensor(probs)
    vview = TD(F16, (bsz, heads, seq, d), (seq * heads * d, d, heads * d, 1))
    ctx = dev.empty(TD(F16, (bsz, heads, seq, d)))
    op = dev.compile(kdml.GemmDesc(pt.desc, vview, None, ctx.desc))
    assert op.plans[0].variant == variant_prefix(family) + "rr"
    op.execute([pt, kdml.Tensor(kt.buffer, vview, kt.offset), None], [ctx])
    check(ctx.numpy(), probs, np.transpose(kv, (0, 2, 1, 3)), None, False, False, 1.0, 1.0, "coopmat")


# ---- values: the tiled kernel's results, magnitudes, infinities, NaN, zeros --------------------
def test_emulated_equals_tiled(dev, rng, monkeypatch):
    """The emulated family sums over k in order by fma, as shaders/gemm.comp does: bitwise the same
    outputs (signed zeros included) whatever the layouts and the tile (in one pass: a GPU's split-K,
    ops/gemm_split.py, sums its parts apart)."""
    monkeypatch.setenv("KDML_GEMM_SPLIT", "1")
    dev_policy = dev.policy
    for m, n, k, ta, tb in ((70, 45, 300, False, False), (33, 17, 64, True, True), (5, 40, 16, False, True)):
        a, b, c = values(rng, F16, (2, m, k)), values(rng, F16, (2, k, n)), values(rng, F16, (2, m, n))
        a[0, 0, :] = -1
        b[0, :, 0] = 0  # an exact -0 sum (every product -0)
        results = []
        for kernel in ("tiled", "coopmat-emulated"):
            monkeypatch.setattr(dev, "policy", dataclasses.replace(dev_policy, gemm_kernel=kernel))
            sa = np.ascontiguousarray(np.swapaxes(a, 1, 2)) if ta else a
            sb = np.ascontiguousarray(np.swapaxes(b, 1, 2)) if tb else b
            at, bt, ct = dev.tensor(sa), dev.tensor(sb), dev.tensor(c)
            out = dev.empty(TD(F16, (2, m, n)))
            for has_c in (False, True):
                op = dev.compile(kdml.GemmDesc(at.desc, bt.desc, ct.desc if has_c else None, out.desc, int(ta), int(tb),
                                               0.75, -1.5))
                assert op.plans[0].variant.startswith("gemm_f16" if kernel == "tiled" else "gemmc16x_")
                op.execute([at, bt, ct if has_c else None], [out])
                results.append(out.numpy())
        assert results[0].tobytes() == results[2].tobytes() and results[1].tobytes() == results[3].tobytes()
        assert np.signbit(results[0][0, 0, 0]) and results[0][0, 0, 0] == 0


def test_magnitudes(dev, rng, family):
    """Products across float16's range (subnormal operands included), cancellation, sums past
    float16's range brought back by alpha, and outputs that round to infinity."""
    for sa, sb, alpha in ((2.0 ** 7, 2.0 ** 7, 1e-3), (2.0 ** -7, 2.0 ** -7, 1.0), (2.0 ** -12, 2.0 ** -10, 1e4),
                          (100.0, 100.0, 1.0)):
        a = (rng.standard_normal((9, 70)) * sa).astype(np.float16)
        b = (rng.standard_normal((70, 11)) * sb).astype(np.float16)
        coop_case(dev, rng, family, (), 9, 11, 70, has_c=False, alpha=alpha, a_val=a, b_val=b)
    a = values(rng, F16, (6, 40), 2)
    a[:, ::3] = (2.0 ** 7 * rng.choice([-1.0, 1.0], (6, 14))).astype(np.float16)
    coop_case(dev, rng, family, (), 6, 7, 40, has_c=True, a_val=a, b_val=values(rng, F16, (40, 7), 2))
    sub = np.full((3, 20), 2.0 ** -20, np.float16)  # float16 subnormals: exact products 2^-40
    got, *_ = coop_case(dev, rng, family, (), 3, 2, 20, has_c=False, alpha=2.0 ** 30, a_val=sub,
                        b_val=np.full((20, 2), 2.0 ** -20, np.float16))
    assert (got == np.float16(20 * 2.0 ** -10)).all()
    # 255 x 255 summed twice is 130050 (float32 holds it); alpha 1/4 gives 32512 (nearest even)
    got, *_ = coop_case(dev, rng, family, (), 1, 1, 2, has_c=False, alpha=0.25, a_val=np.full((1, 2), 255, np.float16),
                        b_val=np.full((2, 1), 255, np.float16))
    assert got[0, 0] == np.float16(32512)


def test_inf_nan_propagate(dev, rng, family):
    """IEEE through the formula: a NaN operand in a term gives NaN, infinities keep their sign, inf x 0
    and inf - inf give NaN; alpha = 0 times an infinite sum and beta = 0 times an infinite C are NaN."""
    for alpha, beta in ((1.0, 1.0), (-2.0, 0.5), (0.0, 1.0), (1.0, 0.0)):
        m, n, k = 18, 20, 35
        a, b, c = with_specials(rng, F16, m, n, k, 3)
        coop_case(dev, rng, family, (), m, n, k, has_c=True, alpha=alpha, beta=beta, a_val=a, b_val=b, c_val=c)
    ones = np.ones((1, 1), np.float16)
    got, *_ = coop_case(dev, rng, family, (), 1, 1, 1, alpha=0.0, a_val=np.full((1, 1), np.inf, np.float16), b_val=ones,
                        c_val=ones)
    assert np.isnan(got).all()
    got, *_ = coop_case(dev, rng, family, (), 1, 1, 1, beta=0.0, a_val=ones, b_val=ones,
                        c_val=np.full((1, 1), np.inf, np.float16))
    assert np.isnan(got).all()


def test_zeros(dev, rng, family):
    """Exact zero sums are zeros (the sign of an exact zero sum is the device's on tensor cores; the
    emulated family gives IEEE's, as the tiled kernel); + beta * (+0) makes them +0."""
    for k in (1, 16, 40):
        a = -np.ones((3, k), np.float16)
        b = np.zeros((k, 2), np.float16)
        got, *_ = coop_case(dev, rng, family, (), 3, 2, k, has_c=False, alpha=2.0, a_val=a, b_val=b, strided=False)
        assert (got == 0).all()
        if family == "coopmat-emulated":
            assert np.signbit(got).all()
        got, *_ = coop_case(dev, rng, family, (), 3, 2, k, has_c=True, alpha=2.0, a_val=a, b_val=b,
                            c_val=np.zeros((3, 2), np.float16), strided=False)
        assert not np.signbit(got).any()


# ---- batches, the grid, recordings ------------------------------------------------------------
def test_batch_broadcast_and_folded_grid(dev, rng, family, monkeypatch):
    """A shared by every matrix (batch strides 0), many matrices, and a device whose
    maxComputeWorkGroupCount is (5, 3, 64): the groups fold into y and z."""
    a = values(rng, F16, (20, 24))
    b = values(rng, F16, (7, 3, 24, 18))
    at, bt = dev.tensor(a), dev.tensor(b)
    ad = TD(F16, (7, 3, 20, 24), (0, 0, 24, 1))
    out = dev.empty(TD(F16, (7, 3, 20, 18)))
    limits = dict(dev.limits)
    limits["max_compute_work_group_count"] = (5, 3, 64)
    monkeypatch.setattr(dev, "limits", types.MappingProxyType(limits))
    op = dev.compile(kdml.GemmDesc(ad, bt.desc, None, out.desc))
    groups = op.plans[0].groups
    assert op.plans[0].variant.startswith(variant_prefix(family)) and groups[0] <= 5 and groups[1] <= 3 and groups[2] > 1
    op.execute([kdml.Tensor(at.buffer, ad, 0), bt, None], [out])
    check(out.numpy(), np.broadcast_to(a, (7, 3, 20, 24)), b, None, False, False, 1.0, 1.0, "coopmat")


def test_recording_chains(dev, rng, family):
    a, b, c = values(rng, F16, (2, 30, 20), 1), values(rng, F16, (2, 20, 33), 1), values(rng, F16, (2, 33, 17), 1)
    at, bt, ct = dev.tensor(a), dev.tensor(b), dev.tensor(c)
    ab, out = dev.empty(TD(F16, (2, 30, 33))), dev.empty(TD(F16, (2, 30, 17)))
    op1 = dev.compile(kdml.GemmDesc(at.desc, bt.desc, None, ab.desc))
    op2 = dev.compile(kdml.GemmDesc(ab.desc, ct.desc, None, out.desc))
    with dev.record() as rec:
        rec.execute(op1, [at, bt, None], [ab])
        rec.execute(op2, [ab, ct, None], [out])
    check(ab.numpy(), a, b, None, False, False, 1.0, 1.0, "coopmat")
    check(out.numpy(), ab.numpy(), c, None, False, False, 1.0, 1.0, "coopmat")


# ---- the policy's choice ------------------------------------------------------------------------
def test_policy_choice(monkeypatch):
    monkeypatch.delenv(GEMM_KERNEL_ENV, raising=False)
    caps = frozenset({"cooperative_matrix", "shader_float16", "vulkan_memory_model"})
    shape = (*F16_SHAPE, 0, 3)
    gpu = policy_for("discrete-gpu", caps, {}, coop_shapes=[shape])
    assert gpu.gemm_family == "coopmat" and gpu.describe()["gemm_family"] == "coopmat"
    big = GEMM_COOP_MIN
    assert gpu.gemm_family_for(True, big, big, big) == "coopmat"
    assert gpu.gemm_family_for(True, big - 1, 4096, 4096) == "tiled"  # a fragment wider than the product
    assert gpu.gemm_family_for(False, 4096, 4096, 4096) == "tiled"
    # no f16 shape listed (only s8), a missing capability, a CPU device: the tiled kernel
    assert policy_for("discrete-gpu", caps, {}, coop_shapes=[(16, 16, 32, 3, 3, 5, 5, 0, 3)]).gemm_family == "tiled"
    assert policy_for("discrete-gpu", caps - {"shader_float16"}, {}, coop_shapes=[shape]).gemm_family == "tiled"
    assert policy_for("cpu", caps, {}, coop_shapes=[shape]).gemm_family == "tiled"
    # forced: the named family for every type (its planner declines FLOAT32), unknown names refused
    cpu = policy_for("cpu", frozenset(), {})
    assert cpu.gemm_family_for(True, 1, 1, 1, "coopmat-emulated") == "coopmat-emulated"
    assert dataclasses.replace(cpu, gemm_kernel="TILED").gemm_family_for(True, 64, 64, 64) == "tiled"
    with pytest.raises(kdml.InvalidArgumentError, match=f"^kernel.*{GEMM_KERNEL_ENV}"):
        cpu.gemm_family_for(True, 64, 64, 64, "tensor")
    monkeypatch.setenv(GEMM_KERNEL_ENV, "coopmat-emulated")
    assert policy_for("cpu", frozenset(), {}).gemm_kernel == "coopmat-emulated"
    assert isinstance(gpu, DevicePolicy)


def test_forced_families_on_this_device(dev, rng):
    """FLOAT32 forced to a coop family takes the tiled kernel; the tensor-core family forced on a
    device without it is refused (UnsupportedError naming `kernel`); a forced tile that cannot run
    is refused."""
    f32 = kdml.GemmDesc(TD(DT.FLOAT32, (32, 32)), TD(DT.FLOAT32, (32, 32)), None, TD(DT.FLOAT32, (32, 32)))
    assert compile_gemm(dev, f32, kernel="coopmat-emulated").plans[0].variant.startswith("gemm_f32")
    desc = kdml.GemmDesc(TD(F16, (32, 32)), TD(F16, (32, 32)), None, TD(F16, (32, 32)))
    if coop_available(dev):
        with pytest.raises(kdml.UnsupportedError, match="^kernel"):
            compile_gemm(dev, desc, kernel="coopmat")
    huge = CoopTile(256, 256, 64, 64, bk=256)
    with pytest.raises(kdml.UnsupportedError, match="^kernel: GEMM tile"):
        compile_gemm(dev, desc, kernel="coopmat-emulated", config=huge)
    # the automatic choice on this device: the tensor cores where it has them
    auto = dataclasses.replace(dev.policy, gemm_kernel="auto")
    assert auto.gemm_family_for(True, 32, 32, 32) == ("tiled" if coop_available(dev) else "coopmat")
    assert dev.policy.gemm_family == auto.gemm_family_for(True, 32, 32, 32) or dev.device_type == "cpu"


def test_onnx_matmul_float16_takes_the_family(rng, monkeypatch):
    """ONNX MatMul and com.microsoft FusedMatMul (transB, alpha) on FLOAT16 reach GEMM through the
    helpers, so the policy's family runs them (here forced to the emulated one)."""
    pytest.importorskip("onnx")
    from onnx import TensorProto as T
    from onnx import helper

    from kompute_dml.onnx_backend import Backend

    dev = kdml.default_device()
    monkeypatch.setattr(dev, "policy", dataclasses.replace(dev.policy, gemm_kernel="coopmat-emulated"))
    a, b = values(rng, F16, (2, 23, 37), 1), values(rng, F16, (29, 37), 1)
    nodes = [helper.make_node("FusedMatMul", ["A", "B"], ["Y"], domain="com.microsoft", transB=1, alpha=0.5),
             helper.make_node("MatMul", ["Y", "C"], ["Z"])]
    c = values(rng, F16, (29, 19), 1)
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("A", T.FLOAT16, a.shape),
                                           helper.make_tensor_value_info("B", T.FLOAT16, b.shape),
                                           helper.make_tensor_value_info("C", T.FLOAT16, c.shape)],
                              [helper.make_tensor_value_info("Z", T.FLOAT16, (2, 23, 19))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    rep = Backend.prepare(model, "CPU")
    with dev.profile() as p:
        (z,) = rep.run({"A": a, "B": b, "C": c})
    assert [r.variant for r in p.rows if r.variant.startswith("gemm")] == ["gemmc16x_rc", "gemmc16x_rr"]
    # Y is a FLOAT16 value of the graph: the second product reads it rounded (a reference without
    # that rounding missed atol for some seeds, e.g. 1954582228, where z is near 0)
    y = (np.matmul(a.astype(np.float64), b.T.astype(np.float64)) * 0.5).astype(np.float16).astype(np.float64)
    assert np.allclose(z.astype(np.float64), np.matmul(y, c.astype(np.float64)), rtol=2e-2, atol=2e-2)
