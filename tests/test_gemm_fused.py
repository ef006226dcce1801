"""GEMM's FusedActivation (ops/gemm.py, shaders/gemm_act.glsl): every activation CONVOLUTION fuses
and ACTIVATION_GELU in both forms, FLOAT32 and FLOAT16, on every kernel (the tiled kernel's three
register blocks, split-K, the cooperative-matrix family for FLOAT16: emulated, and on tensor cores where
the device has them), with random
strides and offsets on every tensor, C, alpha and beta, batches, shapes off the tiles, products over
the activations' regimes (scales 1e-2 to 30, FLOAT16 overflow), infinities and NaN, and poisoned
outputs whose other bytes stay unchanged. The reference is the unfused chain, bit for bit: the GEMM
without activation, then the standalone operator on its output (each checked against numpy in its
own tests). GELU and ReLU are also checked against float64 numpy of the unfused product. Refusals name
`fused_activation`."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from act_edges import EDGE_ACTS, EDGES16, EDGES32
from helpers import assert_outside_unchanged, compile_at_level, place, poison_against, read_logical
from test_add1_fused import _same
from test_conv_fused import ACTS
from test_gemm import layout, sizes_of, values, with_specials
from test_gemm_coop import coop_available

import kompute_dml as kdml
from kompute_dml.ops.gemm import compile_gemm

DT = kdml.DataType
TD = kdml.TensorDesc
FLOATS = (DT.FLOAT32, DT.FLOAT16)
GELU = kdml.ActivationGeluDesc(None, None)
GELU_TANH = kdml.ActivationGeluDesc(None, None, approximate="tanh")
ACTS_GEMM = {**ACTS, "gelu": (GELU, kdml.gelu, {}), "gelu_tanh": (GELU_TANH, kdml.gelu, {"approximate": "tanh"})}
# kernel -> (compile_gemm's kernel, KDML_GEMM_SPLIT)
KERNELS = {"tiled": ("tiled", "1"), "split": ("tiled", "3"), "coop": ("coopmat-emulated", "1"),
           "tensor_cores": ("coopmat", "1")}


def _operands(rng, dt, a_sz, b_sz, o_sz):
    """A with rows at scales 1e-2 .. 30 (the activations' regimes; FLOAT16 sums may overflow), B, C."""
    a = values(rng, dt, a_sz, 1).astype(np.float64)
    a *= rng.choice([1e-2, 0.3, 1.0, 3.0, 30.0], (*a_sz[:-1], 1))
    return a.astype(dt.numpy_dtype), values(rng, dt, b_sz, 1), values(rng, dt, o_sz, 1)


def run_fused(dev, rng, dt, act, kernel, batch, m, n, k, ta=False, tb=False, has_c=True, alpha=1.0, beta=1.0,
              vals=None, broadcast=True):
    """The GEMM with `act` fused (every tensor strided at a random offset, the output poisoned) and
    the same GEMM without it into a packed tensor. Returns (fused output, unfused output, the plans'
    variants). `broadcast`: the inputs' random layouts may broadcast a dimension (stride 0), which keeps
    one of its values; False where every given value must reach the product."""
    a_sz, b_sz, o_sz = sizes_of(batch, m, n, k, ta, tb)
    ad, bd = TD(dt, a_sz, layout(rng, a_sz, is_input=broadcast)), TD(dt, b_sz, layout(rng, b_sz, is_input=broadcast))
    cd = TD(dt, o_sz, layout(rng, o_sz, is_input=broadcast)) if has_c else None
    od = TD(dt, o_sz, layout(rng, o_sz, is_input=False))
    a, b, c = vals if vals is not None else _operands(rng, dt, a_sz, b_sz, o_sz)
    at, araw = place(dev, rng, ad, a)
    bt, braw = place(dev, rng, bd, b)
    ct = place(dev, rng, cd, c)[0] if has_c else None
    ot, _ = place(dev, rng, od)
    desc = kdml.GemmDesc(ad, bd, cd, od, int(ta), int(tb), alpha, beta, fused_activation=act)
    op = compile_gemm(dev, desc, kernel=kernel)
    plain = compile_gemm(dev, dataclasses.replace(desc, fused_activation=None, output_tensor=TD(dt, o_sz)), kernel=kernel)
    tmp = dev.tensor(np.zeros(o_sz, dt.numpy_dtype))
    plain.execute([at, bt, ct], [tmp])
    before = poison_against(ot, np.zeros(o_sz, dt.numpy_dtype), rng)
    op.execute([at, bt, ct], [ot])
    got = read_logical(assert_outside_unchanged(ot, before), ot.offset, od)
    assert at.buffer.read() == araw and bt.buffer.read() == braw
    return got, tmp, [p.variant for p in op.plans]


def _assert_same(got, want, what):
    bad = np.argwhere(~_same(got, want))
    assert bad.size == 0, f"{what}: {len(bad)} differ, first at {tuple(bad[0])}: {got[tuple(bad[0])]!r} != {want[tuple(bad[0])]!r}"


# the emulated cooperative-matrix family compiles for about 10 s per activation on lavapipe: the
# transformers' GELU forms and ReLU in `make test`, every other activation in `make test-all`
_QUICK_COOP = ("relu", "gelu", "gelu_tanh")
CASES = [pytest.param(k, n, marks=pytest.mark.slow) if k == "coop" and n not in _QUICK_COOP else (k, n)
         for k in KERNELS for n in ACTS_GEMM]


@pytest.mark.parametrize(("kernel", "name"), CASES)
@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: d.name)
def test_fused_activation(dev, rng, monkeypatch, kernel, dt, name):
    """The fused output is the unfused chain's bits, on shapes off the tiles, transposed, batched,
    with and without C; the variant is an ACT one."""
    forced, parts = KERNELS[kernel]
    if kernel in ("coop", "tensor_cores") and dt == DT.FLOAT32:
        pytest.skip("the cooperative-matrix family is FLOAT16's")
    if kernel == "tensor_cores" and (why := coop_available(dev)):
        pytest.skip(why)
    monkeypatch.setenv("KDML_GEMM_SPLIT", parts)
    act, fn, kw = ACTS_GEMM[name]
    cases = [((), 37, 45, 19, False, False, True, 1.0, 1.0), ((2,), 20, 33, 70, True, False, False, -0.5, 1.0),
             ((), 3, 5, 40, False, True, True, 2.0, -0.25)]
    for batch, m, n, k, ta, tb, has_c, alpha, beta in cases:
        got, tmp, variants = run_fused(dev, rng, dt, act, forced, batch, m, n, k, ta, tb, has_c, alpha, beta)
        _assert_same(got, fn(tmp, device=dev, **kw).numpy(), f"{name} {kernel} {m}x{n}x{k}")
        assert variants[-1].endswith("a") and all(not v.endswith("a") for v in variants[:-1]), variants


@pytest.mark.parametrize("blk", ["2", "4", "8"])
@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: d.name)
def test_register_blocks_and_specials(dev, rng, monkeypatch, blk, dt):
    """Each register block (FLOAT32's 16-byte stores included, a contiguous output) with GELU, and
    infinities and NaN through the product and C."""
    monkeypatch.setattr("kompute_dml.ops.gemm.gemm_block", lambda *args: blk)
    monkeypatch.setenv("KDML_GEMM_SPLIT", "1")
    for m, n, k in ((70, 130, 19), (33, 31, 5)):
        got, tmp, variants = run_fused(dev, rng, dt, GELU, "tiled", (2,), m, n, k)
        _assert_same(got, kdml.gelu(tmp, device=dev).numpy(), f"gelu b{blk}")
        assert variants == [f"gemm_{'f16' if dt == DT.FLOAT16 else 'f32'}_b{blk}a"]
    # (no broadcast layouts: one would keep a single value of a dimension and could leave every special
    # value out of the product, as a clean-clone CI run met)
    got, tmp, _ = run_fused(dev, rng, dt, GELU_TANH, "tiled", (), 40, 36, 90, vals=with_specials(rng, dt, 40, 36, 90, 3),
                            broadcast=False)
    _assert_same(got, kdml.gelu(tmp, device=dev, approximate="tanh").numpy(), "gelu_tanh specials")
    assert np.isnan(got).any()


@pytest.mark.parametrize("blk", ["2", "4", "8"])
@pytest.mark.parametrize("name", EDGE_ACTS)
def test_fast_forms_hand_over(dev, rng, monkeypatch, blk, name):
    """FLOAT32 HardSwish and Swish (their fast forms, the exact ones where those hand over) give the
    unfused chain's bits on the values where the hand-over happens, times 8 scales (a K = 1 product:
    each output is one value times one scale; no broadcast layouts, so every value reaches the
    product), on every register block, with C and without."""
    monkeypatch.setattr("kompute_dml.ops.gemm.gemm_block", lambda *args: blk)
    monkeypatch.setenv("KDML_GEMM_SPLIT", "1")
    act, fn, kw = EDGE_ACTS[name]
    edges = np.array(EDGES32, np.float32)
    a = rng.permutation(np.concatenate([edges, rng.standard_normal(27).astype(np.float32) * 4]))[:, None]
    b = np.array([[1.0, -1.0, 0.5, 2.0 ** -20, 2.0 ** 20, -2.0 ** -100, 3.0, 1.0] * 5], np.float32)
    m, n = a.shape[0], b.shape[1]
    for has_c in (False, True):
        c = np.zeros((m, n), np.float32) if has_c else None
        got, tmp, _ = run_fused(dev, rng, DT.FLOAT32, act, "tiled", (), m, n, 1, has_c=has_c, vals=(a, b, c), broadcast=False)
        _assert_same(got, fn(tmp, device=dev, **kw).numpy(), f"{name} b{blk}")


_KERNELS16 = [("tiled", "2"), ("tiled", "4"), ("tiled", "8"), pytest.param("coop", "", marks=pytest.mark.slow),
              ("tensor_cores", "")]


@pytest.mark.parametrize(("kernel", "blk"), _KERNELS16)
@pytest.mark.parametrize("name", ["hard_swish", "swish", "swish_scaled"])
def test_float16_activation_edges(dev, rng, monkeypatch, kernel, blk, name):
    """FLOAT16 HardSwish and Swish (gemm_act16 on the rounded half) give the unfused chain's bits on the
    activations' edge values (act_edges.EDGES16) times 8 scales, on the tiled kernel's register blocks and
    the cooperative-matrix family, with C and without."""
    if kernel == "tensor_cores" and (why := coop_available(dev)):
        pytest.skip(why)
    if blk:
        monkeypatch.setattr("kompute_dml.ops.gemm.gemm_block", lambda *args: blk)
    monkeypatch.setenv("KDML_GEMM_SPLIT", "1")
    act, fn, kw = EDGE_ACTS[name]
    edges = np.array(EDGES16, np.float16)
    a = rng.permutation(np.concatenate([edges, (rng.standard_normal(31) * 4).astype(np.float16)]))[:, None]
    b = np.array([[1.0, -1.0, 0.5, 2.0 ** -10, 2.0 ** 10, -2.0 ** -14, 3.0, 1.0] * 5], np.float16)
    m, n = a.shape[0], b.shape[1]
    for has_c in (False, True):
        c = np.zeros((m, n), np.float16) if has_c else None
        got, tmp, variants = run_fused(dev, rng, DT.FLOAT16, act, KERNELS[kernel][0], (), m, n, 1, has_c=has_c,
                                       vals=(a, b, c), broadcast=False)
        assert variants[-1].endswith("a"), variants
        _assert_same(got, fn(tmp, device=dev, **kw).numpy(), f"{name} {kernel} b{blk}")


@pytest.mark.parametrize("name", ["swish", "hard_swish", "gelu"])
def test_float16_table_while_capturing(dev, rng, monkeypatch, name):
    """A FLOAT16 product whose activation runs from its table (ops/act_table.py) compiled while a
    capture is open (as the ONNX backend plans): the table is made then, not captured, and every one
    of its 65,536 halves is the standalone operator's result for that float16 input; the captured
    product gives the eager one's bits."""
    monkeypatch.setenv("KDML_GEMM_SPLIT", "1")
    act, fn, kw = ACTS_GEMM[name]
    m, n, k = 9, 70, 5
    a, b = (rng.standard_normal(s).astype(np.float16) * 4 for s in ((m, k), (k, n)))
    at, bt = dev.tensor(a), dev.tensor(b)
    desc = kdml.GemmDesc(at.desc, bt.desc, None, TD(DT.FLOAT16, (m, n)), fused_activation=act)
    with dev.capture() as rec:
        op = compile_gemm(dev, desc, kernel="tiled")
        out = dev.tensor(np.zeros((m, n), np.float16))
        op.execute([at, bt, None], [out])
    every = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    want = fn(dev.tensor(every), device=dev, **kw).numpy()
    (table,) = op.constants
    np.testing.assert_array_equal(table.numpy().view(np.uint16), want.view(np.uint16))
    rec.submit()
    eager = dev.tensor(np.zeros((m, n), np.float16))
    compile_gemm(dev, desc, kernel="tiled").execute([at, bt, None], [eager])
    np.testing.assert_array_equal(out.numpy().view(np.uint16), eager.numpy().view(np.uint16))


def _gelu64(x):
    return 0.5 * x * np.vectorize(math.erfc)(-x / math.sqrt(2.0))  # erfc: no cancellation in the negative tail


@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: d.name)
def test_against_numpy(dev, rng, monkeypatch, dt):
    """Independently of the standalone operators: ReLU's bits from numpy, and GELU of the unfused
    product in float64 within docs/gelu.md's bound (float32 relative 2^-21, float16 its one rounding)."""
    monkeypatch.setenv("KDML_GEMM_SPLIT", "1")
    relu, tmp, _ = run_fused(dev, rng, dt, kdml.ActivationReluDesc(None, None), "tiled", (), 50, 40, 30)
    x = tmp.numpy()
    _assert_same(relu, np.where(np.isnan(x) | (x > 0), x, np.zeros_like(x)), "relu")
    got, tmp, _ = run_fused(dev, rng, dt, GELU, "tiled", (), 50, 40, 30)
    want = _gelu64(tmp.numpy().astype(np.float64))
    if dt == DT.FLOAT32:
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=2.0 ** -21, atol=2.0 ** -126)
    else:  # float16: the float32 result (within 2^-21) rounded once: the nearest half or a neighbour
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=2.0 ** -10, atol=2.0 ** -24)


def test_helper_and_refusals(dev, rng):
    a = rng.standard_normal((9, 12)).astype(np.float32)
    b = rng.standard_normal((12, 7)).astype(np.float32)
    c = rng.standard_normal(7).astype(np.float32)
    got = kdml.gemm(a, b, c, fused_activation=GELU, device=dev).numpy()
    _assert_same(got, kdml.gelu(kdml.gemm(a, b, c, device=dev), device=dev).numpy(), "helper")
    base = kdml.GemmDesc(TD(DT.FLOAT32, (2, 3)), TD(DT.FLOAT32, (3, 4)), None, TD(DT.FLOAT32, (2, 4)))
    with pytest.raises(kdml.UnsupportedError, match="^fused_activation: GEMM fuses .*ACTIVATION_GELU"):
        dev.compile(dataclasses.replace(base, fused_activation=kdml.ActivationSoftplusDesc(None, None)))
    with pytest.raises(kdml.InvalidArgumentError, match="^fused_activation: a fused activation's tensors must be None"):
        dev.compile(dataclasses.replace(base, fused_activation=kdml.ActivationGeluDesc(base.a_tensor, None)))
    with pytest.raises(kdml.InvalidArgumentError, match="^fused_activation.approximate"):
        dev.compile(dataclasses.replace(base, fused_activation=kdml.ActivationGeluDesc(None, None, approximate="erf")))
    with pytest.raises(kdml.UnsupportedError, match="^fused_activation: ACTIVATION_GELU needs feature level FL_5_1"):
        compile_at_level(kdml.FeatureLevel.FL_5_0, dataclasses.replace(base, fused_activation=GELU))
    with pytest.raises(kdml.InvalidArgumentError, match="^fused_activation.alpha"):
        dev.compile(dataclasses.replace(base, fused_activation=kdml.ActivationEluDesc(None, None, alpha=float("nan"))))
    np.testing.assert_array_equal(kdml.gemm(a, b, device=dev).numpy().shape, (9, 7))  # still usable
