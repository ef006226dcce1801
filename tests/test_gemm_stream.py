"""GEMM's streaming kernel (ops/gemm_stream.py, shaders/gemm_stream.comp), forced with GEMM's kernel
"stream" on this device: FLOAT32 products whose B and output columns are contiguous in rows of a
multiple of 4 elements, K up to 512. Against the float64 reference within the tiled kernel's bound
(tests/gemm_reference.py), outputs poisoned and every byte outside them unchanged, the inputs' bytes
unchanged; the same bits as the tiled kernel (the same arithmetic); fused activations give the
standalone operator's bits; the forms it does not take run on the tiled kernel; the policy's rule.
Pointwise convolutions (ops/conv_pointwise.py) reach it through GEMM."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from gemm_reference import check, expected
from helpers import assert_outside_unchanged, place, poison_against, random_strides, read_logical
from test_conv_fused import ACTS
from test_conv_pointwise import run as run_pointwise
from test_convolution import check as check_conv

import kompute_dml as kdml
from kompute_dml.ops.contract.gemm_stream import STREAM_MAX_K

DT = kdml.DataType
TD = kdml.TensorDesc
F32 = DT.FLOAT32


def forced(monkeypatch, dev, kernel: str = "stream", rule: tuple[int, int] | None = None) -> None:
    """GEMM's family forced on `dev` for one test (the policy reads KDML_GEMM_KERNEL once), and its rule."""
    policy = dataclasses.replace(dev.policy, gemm_kernel=kernel)
    monkeypatch.setattr(dev, "policy", policy if rule is None else dataclasses.replace(policy, gemm_stream=rule))


def gapped(sizes: tuple[int, ...], gap: int) -> tuple[int, ...]:
    """Row-major strides with `gap` elements after each row (and each matrix)."""
    strides, step = [], 1
    for i, s in enumerate(reversed(sizes)):
        strides.append(step)
        step = step * s + (gap if i == 0 else 0)
    return tuple(reversed(strides))


def run(dev, rng, batch, m, n, k, *, has_c=True, alpha=1.0, beta=1.0, ta=False, gap=0, act=None):
    """One product on placed tensors: A any strides (transposed where `ta`), B and the output rows
    `gap` elements apart, C any strides (broadcast included). Returns (got, op.variants, a, b, c)."""
    a_sz = (*batch, k, m) if ta else (*batch, m, k)
    b_sz, o_sz = (*batch, k, n), (*batch, m, n)
    ad = TD(F32, a_sz, random_strides(rng, a_sz, allow_broadcast=True))
    bd, od = TD(F32, b_sz, gapped(b_sz, gap)), TD(F32, o_sz, gapped(o_sz, gap))
    cd = TD(F32, o_sz, random_strides(rng, o_sz, allow_broadcast=True)) if has_c else None
    vals = [(rng.standard_normal(s) * 2).astype(np.float32) for s in (a_sz, b_sz, o_sz)]
    at, araw = place(dev, rng, ad, vals[0])
    bt, braw = place(dev, rng, bd, vals[1])
    ct, craw = place(dev, rng, cd, vals[2]) if has_c else (None, None)
    ot, _ = place(dev, rng, od)
    a, b = read_logical(araw, at.offset, ad), read_logical(braw, bt.offset, bd)
    c = read_logical(craw, ct.offset, cd) if has_c else None
    before = poison_against(ot, np.nan_to_num(expected(a, b, c, ta, False, alpha, beta)).astype(np.float32), rng)
    op = dev.compile(kdml.GemmDesc(ad, bd, cd, od, int(ta), 0, alpha, beta, fused_activation=act))
    op.execute([at, bt, ct], [ot])
    got = read_logical(assert_outside_unchanged(ot, before), ot.offset, od)
    assert at.buffer.read() == araw and bt.buffer.read() == braw and (ct is None or ct.buffer.read() == craw)
    return got, op.variants, a, b, c


CASES = [((), 1, 4, 1), ((), 9, 8, 3), ((2,), 8, 12, 16), ((3, 2), 17, 36, 17), ((1,), 3, 1028, 40),
         ((), 33, 260, STREAM_MAX_K), ((2,), 1, 4, 5)]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, (*c[0], *c[1:]))))
def test_products_against_numpy(dev, rng, monkeypatch, case):
    forced(monkeypatch, dev)
    batch, m, n, k = case
    for i, (alpha, beta) in enumerate([(1.0, 1.0), (0.5, -2.0), (-3.25, 0.0)]):
        got, variants, a, b, c = run(dev, rng, batch, m, n, k, has_c=i != 2, alpha=alpha, beta=beta, ta=i == 1,
                                     gap=4 * i)
        assert variants == ["gemmn_f32"], variants
        check(got, a, b, c, i == 1, False, alpha, beta, "tiled")


def test_same_bits_as_the_tiled_kernel(dev, rng, monkeypatch):
    seed = int(rng.integers(1 << 30))
    outs = {}
    for kernel in ("stream", "tiled"):
        forced(monkeypatch, dev, kernel)
        outs[kernel], variants, *_ = run(dev, np.random.default_rng(seed), (2,), 20, 64, 32, gap=4)
        assert variants[0].startswith("gemmn_" if kernel == "stream" else "gemm_"), variants
    np.testing.assert_array_equal(outs["stream"].view(np.uint32), outs["tiled"].view(np.uint32))


@pytest.mark.parametrize("name", ["relu", "sigmoid", "hard_swish", "swish", "swish_scaled", "clip", "elu"])
def test_fused_activation_is_the_standalone_operators(dev, rng, monkeypatch, name):
    """Each output's activation on the value the unfused product stores (the fast forms' redo included)."""
    desc, fn, params = ACTS[name]
    forced(monkeypatch, dev)
    seed = int(rng.integers(1 << 30))
    plain, *_ = run(dev, np.random.default_rng(seed), (2,), 11, 24, 16)
    fused, variants, *_ = run(dev, np.random.default_rng(seed), (2,), 11, 24, 16, act=desc)
    assert variants == ["gemmn_f32a"], variants
    np.testing.assert_array_equal(fused.view(np.uint32), fn(plain, **params).numpy().view(np.uint32))


def test_specials_propagate(dev, monkeypatch):
    forced(monkeypatch, dev)
    a = np.array([[np.inf, 1.0], [np.nan, 2.0], [1e30, 1e30]], np.float32)
    b = np.array([[0.0, 1.0, -1.0, 2.0], [1e30, 1.0, 1.0, -0.0]], np.float32)
    ta, tb = dev.tensor(a), dev.tensor(b)
    out = dev.empty(TD(F32, (3, 4)))
    op = dev.compile(kdml.GemmDesc(ta.desc, tb.desc, None, out.desc))
    op.execute([ta, tb, None], [out])
    assert op.variants == ["gemmn_f32"]
    with np.errstate(all="ignore"):
        want = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)
    np.testing.assert_array_equal(out.numpy(), want)  # inf * 0 -> NaN, NaN rows, float32 overflow to inf


@pytest.mark.parametrize("form", ["n-not-multiple-of-4", "k-over-the-limit", "b-transposed", "row-gap-3", "float16"])
def test_other_forms_run_on_the_tiled_kernel(dev, rng, monkeypatch, form):
    forced(monkeypatch, dev)
    m, n, k, dt, gap, tb = 5, 8, 7, F32, 0, False
    if form == "n-not-multiple-of-4":
        n = 6
    elif form == "k-over-the-limit":
        k = STREAM_MAX_K + 1
    elif form == "b-transposed":
        tb = True
    elif form == "row-gap-3":
        gap = 3
    else:
        dt = DT.FLOAT16
    a = rng.standard_normal((m, k)).astype(dt.numpy_dtype)
    b = rng.standard_normal((n, k) if tb else (k, n)).astype(dt.numpy_dtype)
    ta, tbt = dev.tensor(a), dev.tensor(b)
    od = TD(dt, (m, n), gapped((m, n), gap))
    out = kdml.Tensor(dev.buffer(od.byte_size), od, 0)
    op = dev.compile(kdml.GemmDesc(ta.desc, tbt.desc, None, od, 0, int(tb)))
    op.execute([ta, tbt, None], [out])
    assert op.variants[0].startswith(("gemm_", "gemms_")), op.variants  # (split-K on GPUs)
    want = a.astype(np.float64) @ (b.T if tb else b).astype(np.float64)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-2 if dt == DT.FLOAT16 else 1e-5, atol=1e-2)


def test_the_policys_rule(dev, monkeypatch):
    """(at most K terms, at least N columns per matrix), no fused activation: inside it the kernel, outside the
    tiled one."""
    forced(monkeypatch, dev, "auto", rule=(32, 64))
    relu = kdml.ActivationReluDesc(None, None)
    for (k, n, act), want in [((32, 64, None), "gemmn_"), ((33, 64, None), "gemm_"), ((32, 60, None), "gemm_"),
                              ((32, 64, relu), "gemm_")]:
        d = kdml.GemmDesc(TD(F32, (2, 8, k)), TD(F32, (2, k, n)), None, TD(F32, (2, 8, n)), fused_activation=act)
        assert dev.compile(d).variants[0].startswith(want), (k, n, act)
    forced(monkeypatch, dev, "auto", rule=(0, 0))
    assert dev.compile(kdml.GemmDesc(TD(F32, (8, 4)), TD(F32, (4, 64)), None, TD(F32, (8, 64)))).variants[0].startswith("gemm_")


@pytest.mark.parametrize("kinds, stream", [(("nchw", "nchw"), True), (("nhwc", "nchw"), False), (("nchw", "nhwc"), False)])
def test_pointwise_convolutions(dev, rng, monkeypatch, kinds, stream):
    """1 x 1 convolutions through GEMM (KDML_CONV_KERNEL=gemm, test_conv_pointwise's runner): NCHW pixels are
    the kernel's columns; NHWC ones are not contiguous and take the tiled kernel."""
    monkeypatch.setenv("KDML_CONV_KERNEL", "gemm")
    forced(monkeypatch, dev)
    for bias in (True, False):
        got, want, s, variants = run_pointwise(dev, rng, F32, 3, 24, 40, (4, 6), kinds, bias, None)
        assert variants[0].startswith("gemmn_" if stream else "gemm_"), variants
        check_conv(got, want, s, 24, F32)
