"""DYNAMIC_QUANTIZE_MATRIX_MULTIPLY (ops/dynamic_quantize_matmul.py): ONNX Runtime's DynamicQuantizeMatMul
against the independent numpy references (tests/quantize_reference.py's DynamicQuantizeLinear, the
integer sum in int64, then float32(S) * (AScale * BScale) + Bias), bit for bit, on both plans: the
composed one (DYNAMIC_QUANTIZE_LINEAR's dispatches, then the product) and the fused one (A quantized
as the tensor-core kernel stages it: `coopmat-emulated` here, the same kernel with each
cooperative-matrix operation as subgroup code). Outputs poisoned, bytes outside unchanged; refusals."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_outside_unchanged, place, poison_against, random_strides, read_logical
from quantize_reference import dynamic_quantize_ref
from test_dynamic_quantize import ADVERSARIAL

import kompute_dml as kdml
from kompute_dml.ops import dynamic_quantize_matmul as dqmm

DT = kdml.DataType
F32 = np.float32
KERNELS = [None, "coopmat-emulated"]


def reference(a, b, b_scale, b_zp, bias):
    """float32 (.., M, N) of the page's composition, from the independent references."""
    q, scale, zp = dynamic_quantize_ref(a, np.uint8)
    s = np.matmul(q.astype(np.int64) - zp, b.astype(np.int64) - (0 if b_zp is None else b_zp.astype(np.int64)))
    res = s.astype(F32) * (F32(scale) * np.asarray(b_scale, F32))
    return (res + (F32(0) if bias is None else bias)).astype(F32)


def operands(rng, m, k, n, batch=(), b_type=np.int8, zp=True, bias=True, per_column=True, a=None):
    if a is None:
        a = (rng.standard_normal((*batch, m, k)) * rng.uniform(0.1, 4)).astype(F32)
    lo, hi = (-128, 128) if b_type == np.int8 else (0, 256)
    b = rng.integers(lo, hi, (k, n)).astype(b_type)
    b_scale = (rng.uniform(0.001, 0.05, n) if per_column else np.array([0.02])).astype(F32)
    b_zp = rng.integers(lo // 16, hi // 16, n if per_column else 1).astype(b_type) if zp else None
    c = rng.uniform(-1, 1, n).astype(F32) if bias else None
    return a, b, b_scale, b_zp, c


def run(dev, rng, a, b, b_scale, b_zp, bias, kernel, *, a_strides=None):
    """The helper's output in a poisoned placement, checked against the reference bit for bit."""
    want = reference(a, b, b_scale, b_zp, bias)
    ta, _ = place(dev, rng, kdml.TensorDesc(DT.FLOAT32, a.shape, a_strides), a)
    out, _ = place(dev, rng, kdml.TensorDesc(DT.FLOAT32, want.shape))
    before = poison_against(out, want, rng)
    got = kdml.dynamic_quantize_matmul(ta, b, b_scale, b_zp, bias, out=out, kernel=kernel, device=dev)
    assert got is out
    after = assert_outside_unchanged(out, before)
    res = read_logical(after, out.offset, out.desc)
    same = (res.view(np.uint32) == want.view(np.uint32)) | (np.isnan(res) & np.isnan(want))  # (any NaN's bits)
    bad = np.argwhere(~same)
    assert bad.size == 0, f"{len(bad)} of {res.size} differ, first {bad[:3].tolist()}: {res[tuple(bad[0])]} vs {want[tuple(bad[0])]}"


def variants(dev, shape_a, n, kernel, b_type=np.int8):
    m_k = shape_a
    desc = dqmm.DynamicQuantizeMatMulDesc(
        kdml.TensorDesc(DT.FLOAT32, m_k), kdml.TensorDesc(DT.from_numpy(np.dtype(b_type)), (m_k[-1], n)),
        kdml.TensorDesc(DT.FLOAT32, (1, n)), None, None, kdml.TensorDesc(DT.FLOAT32, (m_k[0], n)))
    return dqmm.compile_dynamic_quantize_matmul(dev, desc, kernel).variants


@pytest.mark.parametrize("kernel", KERNELS, ids=["policy", "emulated"])
@pytest.mark.parametrize("m,k,n,batch", [(17, 32, 24, ()), (64, 256, 96, ()), (5, 48, 8, (3,)), (130, 64, 33, (2, 2)),
                                         (7, 40, 16, ())])
@pytest.mark.parametrize("b_type", [np.int8, np.uint8])
def test_matches_reference(dev, rng, kernel, m, k, n, batch, b_type):
    for zp, bias, per_column in ((True, True, True), (False, False, False)):
        run(dev, rng, *operands(rng, m, k, n, batch, b_type, zp, bias, per_column), kernel)


def test_fused_plan_where_it_applies(dev):
    """coopmat-emulated: two dispatches (dql_minmax, mmcq8x_r*) for K a multiple of 16; K 40 composes
    DYNAMIC_QUANTIZE_LINEAR and the product (three)."""
    fused = variants(dev, (64, 64), 32, "coopmat-emulated")
    assert len(fused) == 2 and fused[0].startswith("dql_minmax") and fused[1].startswith("mmcq8x_r"), fused
    composed = variants(dev, (64, 40), 32, "coopmat-emulated")
    assert len(composed) == 3 and composed[1].startswith("dql_quant") and composed[2].startswith("mmc8x_"), composed
    if dev.device_type == "cpu":  # lavapipe's policy: the CPU family, no QA variant
        assert len(variants(dev, (64, 64), 32, None)) == 3


@pytest.mark.parametrize("kind", ["ties", "near_ties", "zeros", "negative_zeros", "subnormal", "huge", "plus_inf",
                                  "both_inf", "all_equal_negative", "wide"])
@pytest.mark.parametrize("kernel", KERNELS, ids=["policy", "emulated"])
def test_quantization_edges(dev, rng, kind, kernel):
    """A's values where DynamicQuantizeLinear's rounding is delicate (ties, subnormals, infinities: the
    fused kernel's exact fallback) laid out as a (M, 32) matrix; B small so the products stay finite
    where A is."""
    v = np.asarray(ADVERSARIAL[kind](rng), F32).reshape(-1)
    rows = -(-v.size // 32)
    a = np.resize(v, rows * 32).reshape(rows, 32)  # (the values again, cyclically, to fill the last row)
    a, b, b_scale, b_zp, c = operands(rng, rows, 32, 16, a=a)
    with np.errstate(all="ignore"):
        run(dev, rng, a, b, b_scale, b_zp, c, kernel)


@pytest.mark.parametrize("kernel", KERNELS, ids=["policy", "emulated"])
def test_strided_a(dev, rng, kernel):
    """A with padded rows (fused: outer strides multiples of 16) and with any strides (composed)."""
    a, b, bs, bz, c = operands(rng, 33, 64, 40)
    run(dev, rng, a, b, bs, bz, c, kernel, a_strides=(80, 1))
    run(dev, rng, a, b, bs, bz, c, kernel, a_strides=random_strides(rng, a.shape, allow_broadcast=False))


def test_recorded_runs_reuse_the_operator(dev, rng):
    """Two executions of one compiled operator with other A values: each its own scale (the keys scratch
    rewritten per execution)."""
    for scale in (1.0, 1000.0, 1e-3):
        a, b, bs, bz, c = operands(rng, 40, 64, 48)
        run(dev, rng, (a * F32(scale)).astype(F32), b, bs, bz, c, "coopmat-emulated")


def test_refusals(dev, rng):
    a, b, bs, bz, c = operands(rng, 8, 32, 16)
    with pytest.raises(kdml.UnsupportedError, match="a_tensor"):
        kdml.dynamic_quantize_matmul(a.astype(np.float16), b, bs, device=dev)
    with pytest.raises(kdml.InvalidArgumentError, match="b_tensor.sizes"):
        kdml.dynamic_quantize_matmul(a, b[:16], bs, device=dev)
    with pytest.raises(kdml.InvalidArgumentError, match="b_scale"):
        kdml.dynamic_quantize_matmul(a, b, np.ones(3, F32), device=dev)
    run(dev, rng, a, b, bs, bz, c, None)  # the device still works
