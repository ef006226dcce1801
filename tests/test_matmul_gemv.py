"""The small-M ("decode") family (shaders/matmul_gemv.comp, kompute_dml/ops/matmul_gemv.py)
against exact int64 references.

Two variants, each on the device that selects it: `mmg8d_r` (OpSDot) on the session device
where it enabled integer_dot_product (lavapipe does; skipped elsewhere), `mmg8_r` (plain 32-bit
integer code) on a Device(features="none"), which must pick it. The family is forced with
KDML_MATMUL_KERNEL=gemv (the CPU policy never picks it by itself). Cases are built, placed,
poisoned and checked by test_matmul_coop.run_case: S = sum_k (A - AZP)(B - BZP) in int64, then
float32(S) * (AScale * BScale) + Bias, FLOAT32 bitwise, FLOAT16 within one step; every byte
outside the output unchanged, inputs unchanged.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import test_matmul_coop as coop
from helpers import force_kernel
from test_matmul_coop import PAIR_IDS, PAIRS, matrix_strides, run_case

import kompute_dml as kdml
from kompute_dml.ops.matmul_coop import KMAX
from kompute_dml.ops.matmul_gemv import (
    GPU_ROW_CONFIG_TILED,
    GPU_ROW_CONFIGS,
    MAX_M,
    SMALL_M,
    TINY_B_BYTES,
    TINY_K,
    GemvConfig,
    compile_gemv,
    default_config,
    sweep_configs,
    tiny_config,
)
from kompute_dml.ops.matmul_integer import compile_matmul_integer
from kompute_dml.runtime.shaders import required_capabilities

DT = kdml.DataType
VARIANTS = {"dot": "mmg8d_r", "portable": "mmg8_r"}  # B n-contiguous; k-contiguous: `_c`


@pytest.fixture(scope="module")
def dev_none():
    d = kdml.Device(features="none")
    yield d
    d.close()


@pytest.fixture(params=list(VARIANTS))
def gdev(request, dev, dev_none, monkeypatch):
    """(device, expected variant) with the gemv family forced."""
    if request.param == "dot" and "integer_dot_product" not in dev.capabilities:
        pytest.skip("device has no integer_dot_product capability: the OpSDot run is skipped")
    d = dev if request.param == "dot" else dev_none
    force_kernel(monkeypatch, d, "gemv")
    return d, VARIANTS[request.param]


def gemv_case(gdev, rng, config=None, monkeypatch=None, **kw):
    """run_case through the gemv family; asserts the variant. `config` (with `monkeypatch`): the
    explicit specialization constants, through compile_gemv in place of run_case's compile_coop."""
    d, want = gdev
    if config is not None:
        sg = int(d.limits.get("subgroup_size") or 32)
        if config.problems(sg, d.limits):
            pytest.skip(f"{config} does not fit this device: {config.problems(sg, d.limits)}")
        monkeypatch.setattr(coop, "compile_coop", lambda dev, desc, **_: compile_gemv(dev, desc, config=config))
    op, out, s = run_case(d, rng, config=config, **kw)
    modes = "rc" if kw["N"] == 1 else ("c" if str(kw.get("b_layout")).startswith("col") else "r")  # N = 1: both
    assert op.variants[0] in [want[:-1] + mode for mode in modes]
    return op, out, s


# ---- zero points, scales, signedness, output types ---------------------------------------
@pytest.mark.parametrize("pair", PAIRS, ids=PAIR_IDS)
def test_zero_points_and_scales(gdev, rng, pair):
    """Every zero-point mode (absent, per tensor, per row / column), scale mode and bias mode, M in
    1..16, odd K and N, B packed (rows off 4-byte boundaries when N % 4 != 0), padded rows or
    column-major; FLOAT32 and FLOAT16 outputs alternate, so that over the pairs each mode has both."""
    modes = [(None, None, "tensor", "tensor", None), ("tensor", "tensor", "row", "col", "full"),
             ("row", "col", "tensor", "col", "n"), ("row", None, "row", "tensor", None),
             (None, "col", "row", "col", "full"), ("tensor", "col", "tensor", "tensor", "n")]
    for i, (a_zp, b_zp, a_q, b_q, bias) in enumerate(modes):
        out_dt = (DT.FLOAT32, DT.FLOAT16)[(i + PAIRS.index(pair)) % 2]
        M, K, N = int(rng.integers(1, 17)), int(rng.integers(1, 300)), int(rng.integers(1, 90))
        gemv_case(gdev, rng, pair=pair, out_dt=out_dt, M=M, K=K, N=N, a_q=a_q, b_q=b_q, a_zp=a_zp, b_zp=b_zp,
                  bias=bias, a_layout=str(rng.choice(["row", "random", "none"])), b_layout=str(rng.choice(["row", "none", "col"])))


# ---- shapes: tiles not multiples, row tiles, edges --------------------------------------------
@pytest.mark.parametrize("M", [1, 2, 3, 7, 16])
def test_rows(gdev, rng, M):
    """Every row tile (MT 1, 2, 4, 8, 16) with K and N off every tile (partial vector loads at N's edge)."""
    for K, N in [(1, 1), (3, 17), (17, 3), (129, 70)]:
        gemv_case(gdev, rng, pair=PAIRS[int(rng.integers(0, 4))], M=M, K=K, N=N, a_layout="row",
                  b_layout=str(rng.choice(["row", "none", "col"])), a_zp="row", b_zp="col", a_q="row", b_q="col",
                  bias="n")


@pytest.mark.parametrize("b_layout", ["col", "col4"])
@pytest.mark.parametrize("mkn", [(1, 1, 5), (3, 17, 33), (16, 100, 9), (2, 4095, 40), (8, 5000, 3)], ids=str)
def test_b_column_major(gdev, rng, monkeypatch, b_layout, mkn):
    """B k-contiguous: columns on 16-byte boundaries (uvec4 loads) and on 4-byte ones only (word
    loads), K off every group of 16 (bytes past K inside a loaded word), batches with broadcast."""
    def strides(kind, sizes, rng, broadcast=True):
        if kind != "col4":
            return matrix_strides(kind, sizes, rng, broadcast)
        *lead, r, c = sizes
        cs = -(-r // 4) * 4 + (4 if r % 16 == 0 else 0)  # a multiple of 4, never of 16 unless r < 4
        cs += 4 if cs % 16 == 0 else 0
        return (*[0 if broadcast else c * cs] * len(lead), 1, cs)
    monkeypatch.setattr(coop, "matrix_strides", strides)
    M, K, N = mkn
    batch = () if K > 1000 else ((2,) if rng.random() < 0.5 else (2, 2))
    gemv_case(gdev, rng, pair=PAIRS[int(rng.integers(0, 4))], M=M, K=K, N=N, batch=batch, a_layout="row",
              b_layout=b_layout, a_zp="row", b_zp="col", a_q="row", b_q="col", bias="full")


@pytest.mark.parametrize("mkn", [(1, 4095, 33), (16, 4095, 19), (2, 600, 4095), (7, 64, 4096)], ids=str)
def test_long_edges(gdev, rng, mkn):
    """K = 4095 (several staged chunks, partial last group of 4) and N = 4095 / 4096 (many tiles)."""
    M, K, N = mkn
    gemv_case(gdev, rng, pair=PAIRS[int(rng.integers(0, 4))], M=M, K=K, N=N, a_layout="row", b_layout="none",
              a_zp="tensor", b_zp="col", a_q="tensor", b_q="col", bias="n")


@pytest.mark.parametrize("M", [17, 40])
def test_beyond_small_m_forced(gdev, rng, M):
    """kernel='gemv' with more rows than one work group holds: several row tiles over the same B."""
    gemv_case(gdev, rng, pair=(DT.UINT8, DT.INT8), M=M, K=100, N=37, a_layout="row", b_layout="row",
              a_zp="row", b_zp="col", a_q="row", b_q="col", bias="full")


# ---- outputs and batches -------------------------------------------------------------------
@pytest.mark.parametrize("o_layout", ["packed", "padded", "transposed", "strided"])
@pytest.mark.parametrize("out_dt", [DT.FLOAT32, DT.FLOAT16], ids=lambda d: d.name)
def test_output_layouts(gdev, rng, out_dt, o_layout):
    """Packed rows (pair stores), rows of N + 1 (odd starts: FLOAT16 half-word atomics), column-major
    and random strides; 3-D and 4-D batches with broadcast inputs; guard bytes unchanged."""
    for M, K, N, batch in [(5, 40, 22, (3,)), (16, 64, 35, (2, 2)), (1, 77, 9, (2, 3))]:
        gemv_case(gdev, rng, pair=PAIRS[int(rng.integers(0, 4))], out_dt=out_dt, M=M, K=K, N=N, batch=batch,
                  a_layout=str(rng.choice(["row", "random"])), b_layout="row", o_layout=o_layout, a_zp="row",
                  b_zp="tensor", bias="full")


# ---- exactness at large K --------------------------------------------------------------------
@pytest.mark.parametrize("b_layout", ["row", "col"])
@pytest.mark.parametrize("K", [4096, 16384, pytest.param(KMAX, marks=pytest.mark.slow)])
@pytest.mark.parametrize("pair", PAIRS, ids=PAIR_IDS)
def test_large_k_extremes(gdev, rng, pair, K, b_layout):
    """|A - AZP| = |B - BZP| = 255 for every k (sums of +-K * 255^2), and a mixed row; exact in int32."""
    M, N, vals = coop.extreme_values(rng, pair, K)
    _, out, s = gemv_case(gdev, rng, pair=pair, M=M, K=K, N=N, a_layout="row", b_layout=b_layout, a_zp="row",
                          b_zp="col", values=vals)
    assert np.abs(s).max() == K * 255 * 255  # the extremes were reached
    assert np.array_equal(out.numpy(), s.astype(np.float32))


# ---- specialization constants ----------------------------------------------------------------
CONFIGS = [GemvConfig(64, 4, 16, 2, 256), GemvConfig(64, 4, 16, 1, 512), GemvConfig(32, 2, 8, 4, 32),
           GemvConfig(16, 16, 4, 8, 8), GemvConfig(64, 1, 4, 4, 64), GemvConfig(128, 8, 8, 8, 256)]


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: "wg{}_mt{}_n{}x{}_kc{}".format(*c.spec()))
def test_configs(gdev, rng, config, monkeypatch):
    """Other load widths, lanes along N, work-group sizes and chunk lengths (one K group per chunk,
    K beyond several chunks), over M up to twice MT."""
    for M, K, N in [(config.mt, 3 * config.kc + 5, 45), (min(2 * config.mt, MAX_M), 70, 16), (1, 1, 3)]:
        gemv_case(gdev, rng, config, monkeypatch, pair=PAIRS[int(rng.integers(0, 4))], M=M, K=K, N=N,
                  a_layout="row", b_layout="row", a_zp="row", b_zp="col", a_q="row", b_q="col", bias="n")


@pytest.mark.parametrize("gpu", [False, pytest.param(True, marks=pytest.mark.slow)], ids=["cpu", "gpu"])
def test_sweep_configs_run(gdev, rng, monkeypatch, gpu):
    """The alternatives `python -m benchmarks.bench_decode` times are exact too (the GPU-sized ones, for a
    subgroup of 8: slow-marked, long pipeline compiles on lavapipe)."""
    for config in sweep_configs(1, 8, gpu=gpu):
        gemv_case(gdev, rng, config, monkeypatch, pair=(DT.UINT8, DT.INT8), M=1, K=700, N=40, a_layout="row",
                  b_layout="row", a_zp="tensor", b_q="col", bias="n")


@pytest.mark.slow
@pytest.mark.parametrize("mt", [*GPU_ROW_CONFIGS, "tiled"])
def test_gpu_default_configs(gdev, rng, monkeypatch, mt):
    """The measured GPU defaults (GPU_ROW_CONFIGS, B row-major), exact wherever they can run: on
    lavapipe (subgroup 8) all but the tiled one, whose 16 lanes along N need a subgroup of 16."""
    ncol, nl, kc = GPU_ROW_CONFIG_TILED if mt == "tiled" else GPU_ROW_CONFIGS[mt]
    config = GemvConfig(256, 16 if mt == "tiled" else mt, ncol, nl, kc)
    for M, K, N in [(config.mt * (2 if mt == "tiled" else 1), 2 * kc + 37, 70), (1, 5, 3)]:
        gemv_case(gdev, rng, config, monkeypatch, pair=PAIRS[int(rng.integers(0, 4))], M=M, K=K, N=N,
                  a_layout="row", b_layout="row", a_zp="row", b_zp="col", a_q="row", b_q="col", bias="n")


@pytest.mark.parametrize("k", [1, 5, 37, 64, 200, TINY_K])
def test_tiny_configs(gdev, rng, monkeypatch, k):
    """The tiny-product configurations (one row of A per work group, k-slices sized to K), for this
    device's subgroup, exact over M up to SMALL_M, N narrower and wider than a tile, odd N."""
    sg = int(gdev[0].limits.get("subgroup_size") or 32)
    config = tiny_config(k, sg)
    assert config.kc >= k and config.mt == 1  # one chunk covers K
    for M, N in [(SMALL_M, 45), (3, 7), (1, 64)]:
        gemv_case(gdev, rng, config, monkeypatch, pair=PAIRS[int(rng.integers(0, 4))], M=M, K=k, N=N,
                  a_layout="row", b_layout="row", a_zp="row", b_zp="col", a_q="row", b_q="col", bias="n")


def test_tiny_rule():
    """A GPU's default is the tiny configuration exactly where B is row-major, K <= TINY_K and
    B <= TINY_B_BYTES; CPU devices and column-major B keep theirs."""
    assert default_config(16, 32, gpu=True, k=64, n=64) == tiny_config(64, 32)
    assert default_config(1, 32, gpu=True, k=TINY_K, n=TINY_B_BYTES // TINY_K) == tiny_config(TINY_K, 32)
    for m, k, n, gpu, col in [(16, TINY_K + 1, 64, True, False), (16, 256, TINY_B_BYTES // 256 + 1, True, False),
                              (16, 64, 64, False, False), (16, 64, 64, True, True)]:
        assert default_config(m, 32, gpu=gpu, col=col, k=k, n=n) == default_config(m, 32, gpu=gpu, col=col)


def test_impossible_config_refused(dev):
    desc = kdml.MatrixMultiplyIntegerToFloatDesc(
        kdml.TensorDesc(DT.INT8, (4, 8)), kdml.TensorDesc(DT.FLOAT32, (1, 1)), None, kdml.TensorDesc(DT.INT8, (8, 3)),
        kdml.TensorDesc(DT.FLOAT32, (1, 1)), None, None, kdml.TensorDesc(DT.FLOAT32, (4, 3)))
    with pytest.raises(kdml.UnsupportedError, match="^kernel: gemv configuration"):
        compile_gemv(dev, desc, config=GemvConfig(64, 4, 12, 2, 100))


# ---- where the family does not apply, capabilities ---------------------------------------------
def _desc(a_dt, b_dt, M, K, N, b_strides=None):
    return kdml.MatrixMultiplyIntegerToFloatDesc(
        kdml.TensorDesc(a_dt, (M, K)), kdml.TensorDesc(DT.FLOAT32, (1, 1)), None, kdml.TensorDesc(b_dt, (K, N), b_strides),
        kdml.TensorDesc(DT.FLOAT32, (1, 1)), None, None, kdml.TensorDesc(DT.FLOAT32, (M, N)))


@pytest.mark.parametrize("why", ["b_strided", "k_beyond_kmax", "m_beyond_max", "int16"])
def test_falls_back(dev, rng, monkeypatch, why):
    """Layouts and shapes the family does not take run on the device policy's family, exactly."""
    force_kernel(monkeypatch, dev, "gemv")
    M, K, N, dt, b_st = 2, 50, 7, DT.INT8, None
    if why == "b_strided":  # neither n- nor k-contiguous
        b_st = (2 * N, 2)
    elif why == "k_beyond_kmax":
        K = KMAX + 1
    elif why == "m_beyond_max":
        M = MAX_M + 1
    else:
        dt = DT.INT16
    a = rng.integers(-3, 4, (M, K)).astype(dt.numpy_dtype)
    b = rng.integers(-3, 4, (K, N)).astype(dt.numpy_dtype)
    desc = _desc(dt, dt, M, K, N, b_st)
    op = dev.compile(desc)
    assert not op.variants[0].startswith("mmg")
    b_buf = np.zeros((K, 2 * N), b.dtype) if b_st else b
    if b_st:
        b_buf[:, ::2] = b
    one = np.ones((1, 1), np.float32)
    out = dev.empty(desc.output_tensor)
    op.execute([dev.tensor(a), dev.tensor(one), None, kdml.Tensor(dev.tensor(b_buf).buffer, desc.b_tensor),
                dev.tensor(one), None, None], [out])
    assert np.array_equal(out.numpy(), (a.astype(np.int64) @ b.astype(np.int64)).astype(np.float32))


def test_cpu_policy_never_picks_gemv(dev, monkeypatch):
    """Automatic choice on a CPU device (lavapipe): its own family, also for one row."""
    force_kernel(monkeypatch, dev, "auto")
    if dev.policy.matmul_family != "cpu":
        pytest.skip("not a CPU-policy device")
    assert not dev.compile(_desc(DT.UINT8, DT.INT8, 1, 64, 32)).variants[0].startswith("mmg")


def test_variant_capabilities(dev_none):
    assert required_capabilities("mmg8d_r") == {"integer_dot_product"}
    assert required_capabilities("mmg8_r") == frozenset()
    with pytest.raises(kdml.UnsupportedError, match="^kernel: .*integer_dot_product"):
        compile_gemv(dev_none, _desc(DT.INT8, DT.INT8, 1, 8, 4), dot=True)


def test_recorded_executions(gdev, rng):
    d, want = gdev
    M, K, N = 4, 300, 48
    a = rng.integers(0, 256, (M, K)).astype(np.uint8)
    b = rng.integers(-128, 128, (K, N)).astype(np.int8)
    one = np.ones((1, 1), np.float32)
    desc = _desc(DT.UINT8, DT.INT8, M, K, N)
    op = d.compile(desc)
    assert op.variants == [want]
    ins = [d.tensor(a), d.tensor(one), None, d.tensor(b), d.tensor(one), None, None]
    outs = [d.empty(desc.output_tensor) for _ in range(3)]
    with d.record() as rec:
        for o in outs:
            rec.execute(op, ins, [o])
    ref = (a.astype(np.int64) @ b).astype(np.float32)
    for o in outs:
        assert np.array_equal(o.numpy(), ref)


def test_automatic_gpu_policy(dev, rng, monkeypatch):
    """On a device whose policy family is a GPU one, the automatic choice takes gemv for at most
    SMALL_M rows (where it applies), for at most GEMV_TINY_MAX_M rows of a tiny product, and the
    policy's family beyond; a forced family stays forced. Where gemv takes no k-contiguous B (the
    tensor-core GPUs' gemv_k_contiguous), such a B goes to the policy's family at any rows."""
    from kompute_dml.runtime.policy import GEMV_MAX_M, GEMV_TINY_MAX_M

    force_kernel(monkeypatch, dev, "auto")
    monkeypatch.setattr(dev, "policy", dataclasses.replace(dev.policy, matmul_family="gpu", gemv_max_m=GEMV_MAX_M,
                                                           gemv_k_contiguous=True))
    gemv = VARIANTS["dot" if "integer_dot_product" in dev.capabilities else "portable"]
    assert dev.compile(_desc(DT.UINT8, DT.INT8, SMALL_M, 64, 32)).variants == [gemv]
    assert dev.compile(_desc(DT.UINT8, DT.INT8, GEMV_TINY_MAX_M, 64, 32)).variants == [gemv]  # tiny
    assert dev.compile(_desc(DT.UINT8, DT.INT8, GEMV_TINY_MAX_M + 1, 64, 32)).variants == ["mmi_gpu_8"]
    assert dev.compile(_desc(DT.UINT8, DT.INT8, SMALL_M + 1, 1024, 32)).variants == ["mmi_gpu_8"]  # K > TINY_K
    assert dev.compile(_desc(DT.UINT8, DT.INT8, 1, 64, 32, (1, 64))).variants == [gemv[:-1] + "c"]  # B column-major
    assert dev.compile(_desc(DT.UINT8, DT.INT8, 1, 64, 32, (64, 2))).variants == ["mmi_gpu_8"]  # B strided
    assert compile_matmul_integer(dev, _desc(DT.INT8, DT.INT8, 1, 64, 32), kernel="gpu").variants == ["mmi_gpu_8"]
    monkeypatch.setattr(dev, "policy", dataclasses.replace(dev.policy, gemv_k_contiguous=False))
    assert dev.compile(_desc(DT.UINT8, DT.INT8, 1, 1024, 32, (1, 1024))).variants == ["mmi_gpu_8"]  # k-contiguous
    assert dev.compile(_desc(DT.UINT8, DT.INT8, 1, 1024, 32)).variants == [gemv]  # B row-major: still gemv
    gemv_case((dev, gemv), rng, pair=(DT.UINT8, DT.INT8), M=3, K=333, N=65, a_layout="row", b_layout="row",
              a_zp="tensor", b_zp="col", b_q="col", bias="n")


def test_default_fits_shared_memory(dev, monkeypatch):
    """The default configuration shortens its chunks of A to the device's shared memory, and gives
    the matrix to the other families (None) where even one group per chunk does not fit."""
    from kompute_dml.ops.matmul_gemv import default_config, plan_gemv
    desc = _desc(DT.UINT8, DT.INT8, 16, 4096, 64)
    sg = int(dev.limits.get("subgroup_size") or 32)
    full = default_config(16, sg, gpu=dev.device_type != "cpu")
    for limit, fits in ((full.shared_bytes() - 1, True), (64, False)):
        monkeypatch.setattr(dev, "limits", {**dev.limits, "max_compute_shared_memory_size": limit})
        plan = plan_gemv(dev, desc)
        assert (plan is not None) == fits
        if plan is not None:
            assert plan.spec[4] < full.kc and GemvConfig(*plan.spec).shared_bytes() <= limit


@pytest.mark.slow  # GPU-sized work groups and chunks: long pipeline compiles on lavapipe
@pytest.mark.parametrize("col", [False, True], ids=["Brow", "Bcol"])
@pytest.mark.parametrize("m", [1, 8, 16])
def test_gpu_defaults(gdev, rng, monkeypatch, m, col):
    """The GPU default configurations (for a subgroup of 8 here; chunks halved to fit the device's
    shared memory, as plan_gemv does) over several chunks, exactly."""
    from kompute_dml.ops.matmul_gemv import default_config
    config = default_config(m, 8, gpu=True, col=col)
    while config.problems(8, gdev[0].limits) and config.kc > config.group_k * config.wg // config.nl:
        config = dataclasses.replace(config, kc=config.kc // 2)
    gemv_case(gdev, rng, config, monkeypatch, pair=(DT.UINT8, DT.INT8), M=m, K=2 * config.kc + 37, N=70,
              a_layout="row", b_layout="col" if col else "row", a_zp="row", b_zp="col", b_q="col", bias="n")
