"""ONNX DynamicQuantizeMatMul on the device (ops/matmul_dynamic.py): A quantized by the product
itself where the integer product runs on matmul_coop.comp (its `mmc8*_q*` variants), the two
operators one after the other elsewhere.

The oracle is numpy alone: tests/quantize_reference.py's ONNX Runtime DynamicQuantizeLinear, then the
exact int64 sum of (q - zp)(b - bzp), converted to float32 and scaled, plus the bias, each step one
float32 rounding as the operator's epilogue rounds it, so every output bit is checked. On lavapipe
the kernels run as `coopmat-emulated` (each cooperative-matrix operation as subgroup code) and
`dot` where the device has integer dot products; on GPUs also on the tensor cores. Outputs are
poisoned first, every other byte of their buffers checked unchanged, A's bytes too.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_outside_unchanged, force_kernel, place, poison_against, read_logical
from quantize_reference import dynamic_quantize_ref
from test_dynamic_quantize import ADVERSARIAL

import kompute_dml as kdml
from kompute_dml.ops import matmul_dynamic as md

DT = kdml.DataType
F32 = np.float32


def oracle(a, b, b_scale, b_zp, bias):
    """float32 result, bit for bit: q, scale, zp of A (ONNX Runtime's arithmetic), then
    float32(int64 sum) * float32(scale * b_scale) + bias, one rounding each (b_scale, b_zp: (N,) or
    scalars; bias (N,) or None)."""
    q, scale, zp = dynamic_quantize_ref(a, np.uint8)
    bz = np.zeros(b.shape[-1], np.int64) if b_zp is None else np.broadcast_to(np.asarray(b_zp).astype(np.int64), b.shape[-1:])
    s = np.matmul(q.astype(np.int64) - zp, b.astype(np.int64) - bz)
    with np.errstate(all="ignore"):
        y = s.astype(F32) * (F32(scale) * np.broadcast_to(np.asarray(b_scale, F32), b.shape[-1:]))
        return (y + bias).astype(F32) if bias is not None else y.astype(F32)


def families(dev):
    out = ["coopmat-emulated"]
    out += ["dot"] if "integer_dot_product" in dev.capabilities else []
    out += ["coopmat"] if "cooperative_matrix" in dev.capabilities else []
    return out


def run_case(dev, rng, a, b, b_scale, b_zp=None, bias=None, *, a_row_stride=None, b_k_contiguous=False):
    """The helper on placed tensors (random offsets, guard bytes, a poisoned output): the output's
    bits equal the oracle's, nothing else changed. Returns the fused operator's variant or None."""
    k = a.shape[-1]
    a_strides = None
    if a_row_stride is not None:
        a_strides = (*([a.shape[-2] * a_row_stride] if a.ndim == 3 else []), a_row_stride, 1)
    a_desc = kdml.TensorDesc(DT.FLOAT32, a.shape, a_strides)
    ta, a_before = place(dev, rng, a_desc, a)
    if b_k_contiguous:  # B as the ONNX backend binds a weight on the tensor cores: k contiguous
        tb_t, _ = place(dev, rng, kdml.TensorDesc(DT.from_numpy(b.dtype), b.shape[::-1]), np.ascontiguousarray(b.T))
        tb = kdml.Tensor(tb_t.buffer, kdml.TensorDesc(tb_t.desc.data_type, b.shape, (1, k)), tb_t.offset)
    else:
        tb = dev.tensor(b)
    want = oracle(a, b, b_scale, b_zp, bias)
    out, _ = place(dev, rng, kdml.TensorDesc(DT.FLOAT32, want.shape))
    before = poison_against(out, want, rng)
    args = [dev.tensor(np.asarray(b_scale, F32)), None if b_zp is None else dev.tensor(np.asarray(b_zp, b.dtype)),
            None if bias is None else dev.tensor(bias)]
    call = md.fused_call(dev, ta, tb, *args)
    assert md.dynamic_quantize_matmul(ta, tb, *args, out=out) is out
    after = assert_outside_unchanged(out, before)
    got = read_logical(after, out.offset, out.desc)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    # the bits, where the oracle's result is normal (or infinite); a subnormal one may be flushed to
    # either zero, as the device's float32 arithmetic may flush (lavapipe's, the H100's)
    tiny = np.abs(want) < np.finfo(F32).tiny
    keep = ~np.isnan(want) & ~tiny
    np.testing.assert_array_equal(got.view(np.uint32)[keep], want.view(np.uint32)[keep])
    assert np.all((got[tiny] == want[tiny]) | (got[tiny] == 0))
    assert ta.buffer.read() == a_before
    if call is not None:  # and the same bits as the two operators one after the other
        q, scale, zp = kdml.dynamic_quantize_linear(ta)
        two = kdml.matmul_integer_to_float(q, tb, scale, args[0], zp, args[1], args[2])
        assert two.numpy().tobytes() == got.tobytes()
    return None if call is None else call[0].variants[1]


SHAPES = [(1, 16, 16), (5, 32, 48), (37, 96, 64), (130, 256, 96), (64, 1024, 32), (3, 48, 50)]


@pytest.mark.parametrize("shape", SHAPES, ids=[f"{m}x{k}x{n}" for m, k, n in SHAPES])
@pytest.mark.parametrize("b_type", [np.int8, np.uint8])
def test_fused_product_matches_the_oracle(dev, rng, monkeypatch, shape, b_type):
    """Every family, signed and unsigned B, per-column scales with and without zero points and
    bias, B row-major and k-contiguous: the same bits as the oracle, in two dispatches (dql_minmax,
    then the product's `_q` variant: the helper fuses every one of these shapes)."""
    m, k, n = shape
    for family in families(dev):
        force_kernel(monkeypatch, dev, family)
        for zp, bias, kc in ((False, False, False), (True, True, False), (True, False, True), (False, True, True)):
            a = (rng.standard_normal((m, k)) * rng.uniform(0.1, 10)).astype(F32)
            lo, hi = (-128, 128) if b_type == np.int8 else (0, 256)
            b = rng.integers(lo, hi, (k, n)).astype(b_type)
            b_zp = rng.integers(lo, hi, n).astype(b_type) if zp else None
            variant = run_case(dev, rng, a, b, (rng.random(n) * 0.01 + 1e-4).astype(F32), b_zp,
                               rng.standard_normal(n).astype(F32) if bias else None, b_k_contiguous=kc)
            assert variant is not None and "_q" in variant, (family, variant)


@pytest.mark.parametrize("kind", ["normal", "ties", "near_ties", "huge", "subnormal", "zeros", "negative",
                                  "all_equal_positive", "plus_inf", "both_inf", "tiny_normal"])
def test_edge_values_of_a(dev, rng, monkeypatch, kind):
    """DynamicQuantizeLinear's hard inputs (test_dynamic_quantize.ADVERSARIAL: rounding ties and
    near-ties that need the exact division, subnormals, infinities, all zeros), with NaNs mixed
    in, laid out as A: the quantization inside the product rounds as DYNAMIC_QUANTIZE_LINEAR does."""
    force_kernel(monkeypatch, dev, "coopmat-emulated")
    x = np.asarray(ADVERSARIAL[kind](rng), F32).reshape(-1)
    k = 64
    a = np.resize(x, (max(1, -(-x.size // k)), k)).astype(F32)
    if kind == "normal":
        a[0, 5] = np.nan
    b = rng.integers(-128, 128, (k, 24)).astype(np.int8)
    assert run_case(dev, rng, a, b, F32(0.0078125), None, None) is not None


def test_batches_and_strided_rows(dev, rng, monkeypatch):
    """A with two batches over one B and over a B per batch, and A's rows 16 elements apart
    beyond K: fused; a K that is not a multiple of 16 takes the two operators (the same bits)."""
    force_kernel(monkeypatch, dev, "coopmat-emulated")
    a = rng.standard_normal((2, 9, 32)).astype(F32)
    b = rng.integers(-128, 128, (32, 16)).astype(np.int8)
    assert run_case(dev, rng, a, b, F32(0.01)) is not None
    assert run_case(dev, rng, a, rng.integers(-128, 128, (2, 32, 16)).astype(np.int8), F32(0.01)) is not None
    assert run_case(dev, rng, a[0], b, F32(0.01), a_row_stride=48) is not None
    assert run_case(dev, rng, rng.standard_normal((7, 20)).astype(F32), b[:20], F32(0.01)) is None


def test_other_families_run_the_two_operators(dev, rng, monkeypatch):
    """On the CPU and tiled GPU families nothing is fused: DYNAMIC_QUANTIZE_LINEAR, then
    MATRIX_MULTIPLY_INTEGER_TO_FLOAT, the same bits."""
    for family in ("cpu", "gpu"):
        force_kernel(monkeypatch, dev, family)
        a = rng.standard_normal((17, 64)).astype(F32)
        assert run_case(dev, rng, a, rng.integers(0, 256, (64, 32)).astype(np.uint8), F32(0.02), np.uint8(3)) is None


def test_refusals(dev):
    """A must be FLOAT32: the documented error class names the field."""
    with pytest.raises(kdml.InvalidArgumentError, match="a"):
        md.dynamic_quantize_matmul(dev.tensor(np.zeros((2, 16), np.float16)), dev.tensor(np.zeros((16, 4), np.int8)),
                                   dev.tensor(np.ones(4, F32)))


def test_onnx_dynamic_quantize_matmul_nodes(rng, monkeypatch):
    """A graph of com.microsoft DynamicQuantizeMatMul nodes (two reading one A, a third reading a
    product) on `coopmat-emulated`: one dispatch fewer per product than with the quantization
    apart (ops/matmul_dynamic.fused_operator disabled), the same output bits; y1 (the product of
    the graph's input) the oracle's bits."""
    from onnx import TensorProto as T
    from onnx import helper, numpy_helper

    from kompute_dml.onnx_backend import Backend

    k, n = 64, 48
    w = [rng.integers(-128, 128, (k, n)).astype(np.int8), rng.integers(-128, 128, (k, n)).astype(np.int8),
         rng.integers(-128, 128, (n, k)).astype(np.int8)]
    inits = [numpy_helper.from_array(v, f"w{i}") for i, v in enumerate(w)]
    inits += [numpy_helper.from_array(np.full(n, 0.01, F32), "s0"), numpy_helper.from_array(np.float32(0.02), "s1"),
              numpy_helper.from_array(rng.standard_normal(n).astype(F32), "bias")]
    ms = "com.microsoft"
    nodes = [helper.make_node("DynamicQuantizeMatMul", ["x", "w0", "s0", "", "bias"], ["y0"], domain=ms),
             helper.make_node("DynamicQuantizeMatMul", ["x", "w1", "s1"], ["y1"], domain=ms),
             helper.make_node("DynamicQuantizeMatMul", ["y0", "w2", "s1"], ["y2"], domain=ms)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", T.FLOAT, [2, 7, k])],
                          [helper.make_tensor_value_info(y, T.FLOAT, None) for y in ("y1", "y2")], initializer=inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(ms, 1)], ir_version=10)
    x = rng.standard_normal((2, 7, k)).astype(F32)
    runs = {}
    for label in ("fused", "apart"):
        if label == "apart":
            monkeypatch.setattr(md, "fused_operator", lambda *a: None)
            md._fused.clear()
        rep = Backend.prepare(model, "CPU")
        force_kernel(monkeypatch, rep.device, "coopmat-emulated")
        runs[label] = (rep.run({"x": x}), rep.last_run.dispatches)
        assert rep.last_run.cpu_segments == 0 and rep.last_run.runtime_fallbacks == 0
    md._fused.clear()
    (fused, d_fused), (apart, d_apart) = runs["fused"], runs["apart"]
    assert d_fused == d_apart - 1  # y2's product: 2 dispatches, not 3 (y0 and y1 share one quantization apart)
    for f, a in zip(fused, apart):
        assert f.tobytes() == a.tobytes()
    # y1 reads x alone: the independent reference's bits (y2 reads y0, whose last bit could move a quantization step)
    want = oracle(x, w[1], F32(0.02), None, None)
    assert fused[0].tobytes() == want.tobytes()
