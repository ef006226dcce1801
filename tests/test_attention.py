"""MULTIHEAD_ATTENTION / MULTIHEAD_ATTENTION1 (ops/attention.py, shaders/attention.comp) against the
float64 reference of tests/attention_reference.py within docs/attention.md's bound, on every kernel
("rows", "tiled": every tile variant, "blocked", "coopmat" or its emulation), FLOAT32 and FLOAT16: separate and stacked query / key /
value, split heads over transposed strides, bias, every mask type, relative position bias, past
key / value with present outputs (bit exact), GQA head counts, past sequence lengths (clamped),
causal, keys from the past alone, odd lengths and batch > 1 over several query blocks and key
tiles, random strides and offsets with guard bytes, poisoned outputs whose every other byte must
stay unchanged; the rows of NaN and infinities; refusals; the helper."""

from __future__ import annotations

import dataclasses
import types

import numpy as np
import pytest
from attention_reference import bound, mha_ref
from helpers import assert_outside_unchanged, compiled_variants, place, poison_against, random_strides, read_logical

import kompute_dml as kdml

DT = kdml.DataType
TD = kdml.TensorDesc
MT = kdml.MultiheadAttentionMaskType
# coopmat: its emulation where the device has no tensor cores; gemm: the two-GEMM kernel (ops/attention_gemm.py) at every
# size, the device's own kernel for the problems it does not take
KERNELS = ("rows", "tiled", "blocked", "coopmat", "gemm")
FLOATS = {"f32": DT.FLOAT32, "f16": DT.FLOAT16}


@pytest.fixture(params=KERNELS)
def kdev(request, dev, monkeypatch):
    """The session's device with the policy's attention kernel forced; the helpers' compile cache
    emptied (it keys operators by descriptor, not by the policy they were compiled under)."""

    kernel = request.param
    if kernel == "coopmat" and dev.policy.gemm_family != "coopmat":
        kernel = "coopmat-emulated"
    two = kernel == "gemm"
    # blocked: from one query row (the GPU policy's threshold would leave the small cases to the tiled kernel)
    monkeypatch.setattr(dev, "policy", dataclasses.replace(dev.policy, attention_kernel=dev.policy.attention_kernel if two
                                                           else kernel, attention_blocked_min_rows=1,
                                                           attention_gemm_min_flops=0.0 if two else float("inf")))
    monkeypatch.setitem(dev.caches, "compiled", {})
    return dev


def _desc(rng, dt, sizes, strided, broadcast=False):
    return TD(dt, tuple(sizes), random_strides(rng, sizes, allow_broadcast=broadcast) if strided else None)


@dataclasses.dataclass
class Case:
    B: int = 2
    S: int = 5
    T: int = 7
    P: int = 0
    Hq: int = 2
    Hkv: int = 2
    D: int = 8
    Dv: int = 8
    form: str = "sep"  # sep | split | sqk | skv | sqkv | past (keys and values from the past alone)
    bias: bool = False
    mask: int = 0
    rb: bool = False
    causal: bool = False
    psl: bool = False
    present: bool = False
    strided: bool = True
    grow: float = 0.0  # key row j scaled by 1 + grow j: later tiles' scores far past the first's


def _logical(rng, c: Case, npd):
    def r(*shape, s=1.0):
        return (rng.standard_normal(shape) * s).astype(npd)
    q = r(c.B, c.Hq, c.S, c.D)
    k, v = r(c.B, c.Hkv, c.T, c.D), r(c.B, c.Hkv, c.T, c.Dv)
    pk, pv = (r(c.B, c.Hkv, c.P, c.D), r(c.B, c.Hkv, c.P, c.Dv)) if c.P else (None, None)
    if c.grow:
        k = (k * (1 + c.grow * (c.P + np.arange(c.T)))[:, None]).astype(npd)
    return q, k, v, pk, pv


def run_case(dev, rng, c: Case, dt: DT, half: bool = False):
    """Build the descriptor for case `c`, place every tensor, poison the outputs, run, check; returns
    the operator and the largest error as a fraction of the bound. `half`: compiled with
    allow_half_precision (the tensor-core kernel's float16 weights: their bound)."""
    npd = dt.numpy_dtype
    q, k, v, pk, pv = _logical(rng, c, npd)
    if c.form == "past":
        k, v = k[:, :, :0], v[:, :, :0]
    total = c.P + k.shape[2]
    f: dict = {name: None for name in ("query_tensor", "key_tensor", "value_tensor", "stacked_query_key_tensor",
                                       "stacked_key_value_tensor", "stacked_query_key_value_tensor")}
    vals: dict = {}

    def put(name, sizes, array, broadcast=False):
        f[name] = _desc(rng, dt if array.dtype.kind == "f" else DT.INT32, sizes, c.strided, broadcast)
        vals[name] = array

    bshd = lambda x: x.transpose(0, 2, 1, 3)  # noqa: E731  [B, H, S, D] -> [B, S, H, D]
    hidden = lambda x: bshd(x).reshape(x.shape[0], x.shape[2], -1)  # noqa: E731
    if c.form in ("sep", "past", "skv"):
        put("query_tensor", (c.B, c.S, c.Hq * c.D), hidden(q))
    if c.form == "split":
        put("query_tensor", (c.B, c.S, c.Hq, c.D), bshd(q))
        put("key_tensor", (c.B, c.T, c.Hkv, c.D), bshd(k))
        put("value_tensor", (c.B, c.T, c.Hkv, c.Dv), bshd(v))
    if c.form == "sep":
        put("key_tensor", (c.B, c.T, c.Hkv * c.D), hidden(k))
        put("value_tensor", (c.B, c.T, c.Hkv * c.Dv), hidden(v))
    if c.form == "sqk":
        put("stacked_query_key_tensor", (c.B, c.S, c.Hq, 2, c.D), np.stack([bshd(q), bshd(k)], 3))
        put("value_tensor", (c.B, c.T, c.Hkv * c.Dv), hidden(v))
    if c.form == "skv":
        put("stacked_key_value_tensor", (c.B, c.T, c.Hq, 2, c.D), np.stack([bshd(k), bshd(v)], 3))
    if c.form == "sqkv":
        put("stacked_query_key_value_tensor", (c.B, c.S, c.Hq, 3, c.D), np.stack([bshd(q), bshd(k), bshd(v)], 3))
    bias = None
    if c.bias:
        bias = [rng.standard_normal(n).astype(npd) for n in (c.Hq * c.D, c.Hkv * c.D, c.Hkv * c.Dv)]
        put("bias_tensor", (sum(len(b) for b in bias),), np.concatenate(bias))
    mask = None
    if c.mask == MT.BOOLEAN:
        mask = rng.integers(-2, 3, (c.B, c.Hq, c.S, total)).astype(np.int32)  # <= 0: padding
        put("mask_tensor", mask.shape, mask, broadcast=True)
    elif c.mask:
        n = {1: (1, c.B), 2: (2, c.B), 3: (3 * c.B + 2,)}[c.mask]
        mask = rng.integers(0, total + 2, n).astype(np.int32)
        put("mask_tensor", n, mask)
    rb = None
    if c.rb:
        rb = (rng.standard_normal((c.B, c.Hq, c.S, total)) * 2).astype(npd)
        put("relative_position_bias_tensor", rb.shape, rb, broadcast=True)
    if c.P:
        put("past_key_tensor", pk.shape, pk)
        put("past_value_tensor", pv.shape, pv)
    psl = None
    if c.psl:
        psl = rng.integers(-1, c.P + 2, c.B).astype(np.int32)
        put("past_sequence_lengths_tensor", (c.B,), psl)
    out_sizes = (c.B, c.S, c.Hq, c.Dv) if c.form == "split" else (c.B, c.S, c.Hq * c.Dv)
    outs = {"output_tensor": _desc(rng, dt, out_sizes, c.strided),
            "output_present_key_tensor": _desc(rng, dt, (c.B, c.Hkv, total, c.D), c.strided) if c.present else None,
            "output_present_value_tensor": _desc(rng, dt, (c.B, c.Hkv, total, c.Dv), c.strided) if c.present else None}
    mha1 = c.psl or c.Hkv != c.Hq
    common = dict(**outs, scale=float(rng.uniform(0.2, 0.6)), mask_filter_value=-10000.0, mask_type=c.mask,
                  causal=c.causal, split_heads=c.form == "split")
    inputs = {n: f.get(n) for n in (*list(f)[:6], "bias_tensor", "mask_tensor", "relative_position_bias_tensor",
                                    "past_key_tensor", "past_value_tensor")}
    if mha1:
        desc = kdml.MultiheadAttention1Desc(**inputs, past_sequence_lengths_tensor=f.get("past_sequence_lengths_tensor"),
                                            query_head_count=c.Hq, key_value_head_count=c.Hkv, **common)
    else:
        desc = kdml.MultiheadAttentionDesc(**inputs, head_count=c.Hq, **common)
    op = dev.compile(desc, allow_half_precision=half)
    names = list(op.input_fields)
    bound_in = []
    for n in names:
        d = getattr(desc, n)
        bound_in.append(None if d is None else place(dev, rng, d, vals[n])[0])
    bmask = None
    if c.mask == MT.BOOLEAN:
        t = bound_in[names.index("mask_tensor")]
        bmask = read_logical(t.buffer.read(), t.offset, t.desc)
    if c.rb:
        t = bound_in[names.index("relative_position_bias_tensor")]
        rb = read_logical(t.buffer.read(), t.offset, t.desc).astype(np.float64)
    want, weight, mag = mha_ref(q, k, v, past_k=pk, past_v=pv, psl=psl, bias=bias, scale=desc.scale, rb=rb,
                                mask_kind=c.mask, mask=bmask if c.mask == MT.BOOLEAN else mask, causal=c.causal)
    out_t = [place(dev, rng, d)[0] if d is not None else None for d in outs.values()]
    want_out = want.transpose(0, 2, 1, 3)  # [B, S, Hq, Dv]
    want_out = want_out if c.form == "split" else want_out.reshape(out_sizes)
    with np.errstate(invalid="ignore", over="ignore"):
        before = [poison_against(t, w.astype(npd), rng) if t is not None else None
                  for t, w in zip(out_t, (want_out, *_presents(c, k, v, pk, pv, psl, bias, npd)))]
    op.execute(bound_in, out_t)
    got = read_logical(assert_outside_unchanged(out_t[0], before[0]), out_t[0].offset, out_t[0].desc)
    got = got.reshape(want_out.shape).astype(np.float64)
    half_inputs = op.plans[0].variant.startswith("mhac32")
    half_weights = half_inputs or op.plans[0].variant.startswith(("mhac16h", "mhac16xh"))
    vmax = max(float(np.abs(np.asarray(x, np.float64)).max(initial=0.0)) for x in (v, pv) if x is not None)
    err = bound(weight, mag, c.D, total, dt == DT.FLOAT16, want, half_weights, vmax, half_inputs)
    err = err.transpose(0, 2, 1, 3).reshape(want_out.shape)
    nan = np.isnan(want_out)
    assert (np.isnan(got) == nan).all(), np.argwhere(np.isnan(got) != nan)[:4]
    bad = np.argwhere(~nan & ~(np.abs(got - want_out) <= err))
    assert bad.size == 0, (bad[:4], got[tuple(bad[0])], want_out[tuple(bad[0])], err[tuple(bad[0])])
    for t, b, w in zip(out_t[1:], before[1:], _presents(c, k, v, pk, pv, psl, bias, npd)):
        if t is not None:
            g = read_logical(assert_outside_unchanged(t, b), t.offset, t.desc)
            assert (g.view(np.uint8) == w.view(np.uint8)).all()
    return op, float(np.max(np.abs(got - want_out)[~nan] / err[~nan], initial=0.0))


def _presents(c: Case, k, v, pk, pv, psl, bias, npd):
    """The present key and value, bit exact: past rows, new rows + bias (in float32, rounded once), zeros."""
    outs = []
    for new, past, part in ((k, pk, 1), (v, pv, 2)):
        b = None if bias is None else bias[part].astype(np.float32).reshape(c.Hkv, 1, -1)
        nb = new.astype(np.float32) + (0 if b is None else b)
        total = c.P + new.shape[2]
        x = np.zeros((c.B, c.Hkv, total, new.shape[3]), np.float32)
        for bi in range(c.B):
            pb = c.P if psl is None else int(np.clip(psl[bi], 0, c.P))
            if c.P:
                x[bi, :, :pb] = past[bi, :, :pb]
            x[bi, :, pb:pb + new.shape[2]] = nb[bi]
        outs.append(x.astype(npd))
    return outs


CASES = {
    "plain": Case(),
    "odd-batch3": Case(B=3, S=17, T=13, Hq=3, Hkv=3, D=5, Dv=7),
    "blocks-tiles": Case(B=1, S=33, T=70, D=16, Dv=16),
    "bias-bool-mask": Case(bias=True, mask=MT.BOOLEAN),
    "lengths": Case(mask=MT.KEY_SEQUENCE_LENGTH, rb=True),
    "end-start": Case(mask=MT.KEY_SEQUENCE_END_START, B=3),
    "packed-lengths": Case(mask=MT.KEY_QUERY_SEQUENCE_LENGTH_START_END),
    "past-present": Case(P=6, present=True, bias=True, rb=True),
    "causal-past": Case(P=4, S=3, T=3, causal=True, present=True),
    "gqa": Case(Hq=4, Hkv=2, S=6, T=9, D=8, Dv=4, bias=True),
    "gqa-psl": Case(Hq=6, Hkv=2, S=1, T=1, P=9, psl=True, present=True, B=4),
    "psl-prompt": Case(Hq=2, Hkv=1, S=5, T=5, P=3, psl=True, present=True),
    "past-only": Case(form="past", P=11, mask=MT.KEY_SEQUENCE_LENGTH),
    "split": Case(form="split", S=9, T=11, bias=True, causal=True),
    "split-rb": Case(form="split", S=9, T=40, rb=True),
    "stacked-qk": Case(form="sqk", T=5, bias=True),
    "stacked-kv": Case(form="skv", mask=MT.BOOLEAN),
    "stacked-qkv": Case(form="sqkv", T=5, P=2, present=True),
    "d128": Case(D=100, Dv=72, S=4, T=6),
    "d256": Case(D=200, Dv=256, S=9, T=20, B=1, Hq=1, Hkv=1),
    "d-past-tiles": Case(D=300, Dv=260, S=3, T=4, B=1, Hq=1, Hkv=1),
    "packed": Case(strided=False, bias=True, P=3, present=True, mask=MT.BOOLEAN),
    # the tensor-core kernel's (FLOAT16 without bias, more than 4 query rows): several work groups of
    # 64 rows and key tiles, causal GQA, head sizes to 128, past rows with their sequence lengths
    "coop-blocks-tiles": Case(B=2, S=70, T=100, D=64, Dv=64, mask=MT.KEY_SEQUENCE_LENGTH),
    "coop-causal-gqa": Case(B=1, S=37, T=37, Hq=4, Hkv=2, D=40, Dv=24, causal=True, rb=True),
    "coop-d128-split": Case(form="split", B=1, S=9, T=45, D=96, Dv=120, mask=MT.BOOLEAN),
    "coop-psl-past": Case(Hq=4, Hkv=1, S=8, T=8, P=30, psl=True, present=True, B=3),
    # plain scores (no mask, no bias): the tiles every row of a subgroup attends whole take the fast path
    "coop-plain-causal": Case(B=2, S=50, T=80, Hq=2, Hkv=1, D=64, Dv=48, causal=True),
    "coop-plain-past": Case(B=1, S=20, T=20, P=45, Hq=2, Hkv=2, D=32, Dv=32, present=True),
    # scores growing along the keys: the rows' reference maxima move, accumulators rescaled
    "coop-rescale": Case(B=2, S=40, T=120, D=64, Dv=64, grow=0.3),
    "coop-rescale-masked": Case(B=1, S=20, T=100, D=32, Dv=32, grow=0.2, causal=True, mask=MT.KEY_SEQUENCE_LENGTH),
}


def _takes_coop(kdev, c: Case) -> bool:
    """Whether the tensor-core kernel (or its emulation) takes case c under kdev's policy."""
    return kdev.policy.attention_kernel.startswith("coopmat") and not c.bias and c.S > 4 and max(c.D, c.Dv) <= 128


def _takes_gemm(kdev, c: Case, t: str) -> bool:
    """Whether the two-GEMM kernel takes case c under kdev's policy: FLOAT32 without mask tensor, bias,
    past, causality, GQA's shared heads or stacked tensors."""
    return kdev.policy.attention_gemm_min_flops == 0 and t == "f32" and not (c.bias or c.mask or c.P or c.causal or c.psl) \
        and c.Hq == c.Hkv and c.form in ("sep", "split")


@pytest.mark.parametrize("t", FLOATS)
@pytest.mark.parametrize("name", CASES)
def test_attention(kdev, name, t):
    if kdev.policy.attention_kernel.startswith("coopmat") and t == "f32":
        pytest.skip("the tensor-core kernel takes FLOAT16 only (FLOAT32: the blocked and tiled kernels, tested as such)")
    two = _takes_gemm(kdev, CASES[name], t)
    if kdev.policy.attention_gemm_min_flops == 0 and not two:
        pytest.skip("the two-GEMM kernel does not take it: the device's own kernel, tested as such")
    c = CASES[name]
    op, _ = run_case(kdev, np.random.default_rng(abs(hash((name, t))) % 2**32), c, FLOATS[t])
    assert op.plans[0].variant.startswith("gemmx_") == two, op.plans[0].variant
    if two:
        return
    coop = _takes_coop(kdev, c)
    assert op.plans[0].variant.startswith("mhac16") == coop, op.plans[0].variant
    # the blocked kernel: forced, or the "coopmat" policy's for what the tensor cores do not take (the fixture's
    # threshold: from one row)
    blocked = (kdev.policy.attention_kernel == "blocked" or (not coop and kdev.policy.attention_kernel.startswith("coopmat"))) \
        and max(c.D, c.Dv) <= 64
    assert ("_blocked" in op.plans[0].variant) == blocked, op.plans[0].variant


@pytest.mark.parametrize("d", [8, 16, 32])
def test_rows_kernel_policy_past_llvmpipes_loop_limit(dev, monkeypatch, d):
    """Under the rows kernel's policy (CPU devices), keys whose loops would pass llvmpipe's 65,535
    iterations per invocation (attention_layout.ROWS_MAX_ITERATIONS; the rows kernel's output was
    cut short there: checked) take the tiled kernel, and the result is the float64 one."""
    monkeypatch.setattr(dev, "policy", dataclasses.replace(dev.policy, attention_kernel="rows",
                                                           attention_gemm_min_flops=float("inf")))
    rng = np.random.default_rng(d)
    for keys, rows in ((300, True), (4000, False)):
        monkeypatch.setitem(dev.caches, "compiled", {})
        q = rng.standard_normal((1, 2, d)).astype(np.float32)
        k, v = (rng.standard_normal((1, keys, d)).astype(np.float32) for _ in range(2))
        y = kdml.multihead_attention(q, k, v, heads=1, scale=0.25, device=dev).numpy().astype(np.float64)
        variants = compiled_variants("MultiheadAttention", dev)
        assert len(variants) == 1 and variants.pop().endswith("_rows") == rows, (keys, variants)
        s = (q[0].astype(np.float64) @ k[0].T.astype(np.float64)) * 0.25
        p = np.exp(s - s.max(-1, keepdims=True))
        np.testing.assert_allclose(y[0], (p / p.sum(-1, keepdims=True)) @ v[0].astype(np.float64), rtol=1e-5, atol=1e-6)


def test_head_sizes_past_the_tiles_past_llvmpipes_loop_limit(dev, monkeypatch):
    """Head sizes no tile takes (the rows kernel's alone) over keys past the loop limit, on a CPU
    device: FLOAT32 on the two-GEMM kernel, the float64 result; FLOAT16 refused, naming the keys
    (the rows kernel's output was wrong there: checked)."""
    if dev.device_type != "cpu":
        pytest.skip("llvmpipe's loop limit: CPU devices only")
    monkeypatch.setattr(dev, "policy", dataclasses.replace(dev.policy, attention_gemm_min_flops=float("inf")))
    rng = np.random.default_rng(300)
    q = rng.standard_normal((1, 2, 300)).astype(np.float32)
    k, v = (rng.standard_normal((1, 1000, 300)).astype(np.float32) for _ in range(2))
    monkeypatch.setitem(dev.caches, "compiled", {})
    y = kdml.multihead_attention(q, k, v, heads=1, scale=0.1, device=dev).numpy().astype(np.float64)
    variants = compiled_variants("MultiheadAttention", dev)
    assert variants and all(x.startswith("gemmx_f32_") for x in variants), variants
    s = (q[0].astype(np.float64) @ k[0].T.astype(np.float64)) * 0.1
    p = np.exp(s - s.max(-1, keepdims=True))
    np.testing.assert_allclose(y[0], (p / p.sum(-1, keepdims=True)) @ v[0].astype(np.float64), rtol=1e-5, atol=1e-6)
    with pytest.raises(kdml.UnsupportedError, match="^key_tensor: 1000 keys of head size 300 pass the rows kernel's loop"):
        kdml.multihead_attention(q.astype(np.float16), k.astype(np.float16), v.astype(np.float16), heads=1, scale=0.1,
                                 device=dev)


def test_two_gemm_kernel_blocks_within_the_devices_shared_memory(dev, monkeypatch):
    """The two-GEMM kernel halves a dispatch's block until its shared memory fits the device's (the product
    with V at BLK 4 takes 16,640 bytes, past Vulkan's guaranteed 16 KiB), and the result is unchanged. (The CPU
    devices' tile rule, which takes BLK 4 at these sizes: GPUs' takes BLK 2 for so few tiles.)"""
    monkeypatch.setattr(dev, "policy", dataclasses.replace(dev.policy, attention_gemm_min_flops=0.0, gemm_tiles="work"))
    rng = np.random.default_rng(4)
    q = rng.standard_normal((1, 70, 64)).astype(np.float32)
    k, v = (rng.standard_normal((1, 90, 64)).astype(np.float32) for _ in range(2))
    got, own = {}, dev.limits["max_compute_shared_memory_size"]
    for smem in (own, 16384):
        monkeypatch.setattr(dev, "limits", types.MappingProxyType({**dev.limits, "max_compute_shared_memory_size": smem}))
        monkeypatch.setitem(dev.caches, "compiled", {})
        y = kdml.multihead_attention(q, k, v, heads=1, scale=0.125, device=dev).numpy()
        ops = [o for o in dev.caches["compiled"].values() if type(o.desc).__name__.startswith("MultiheadAttention")]
        got[smem] = (y, [p.variant for p in ops[0].plans])
    assert got[16384][1] == ["gemmx_f32_b4s", "gemmx_f32_b2x"], got[16384][1]
    assert got[own][1][1] != "gemmx_f32_b2x" or own < 16640
    s = (q[0].astype(np.float64) @ k[0].T.astype(np.float64)) * 0.125
    p = np.exp(s - s.max(-1, keepdims=True))
    want = (p / p.sum(-1, keepdims=True)) @ v[0].astype(np.float64)
    for y, _ in got.values():
        np.testing.assert_allclose(y[0], want, rtol=1e-5, atol=1e-6)


def test_two_gemm_kernel_refuses_more_score_tiles_than_its_factors(dev, monkeypatch):
    """Keys beyond SMX_TILES column tiles of the scores GEMM (gemm.comp's shared factors per tile)
    keep the device's own kernel, as does a FLOAT32 problem below the policy's flops."""
    from kompute_dml.ops.attention_gemm import SMX_TILES

    rng = np.random.default_rng(3)
    for keys, floor, two in ((SMX_TILES * 128 + 1, 0.0, False), (300, 0.0, True), (300, 1e12, False)):
        monkeypatch.setattr(dev, "policy", dataclasses.replace(dev.policy, attention_gemm_min_flops=floor))
        monkeypatch.setitem(dev.caches, "compiled", {})
        q = rng.standard_normal((1, 2, 16)).astype(np.float32)
        k, v = (rng.standard_normal((1, keys, 16)).astype(np.float32) for _ in range(2))
        y = kdml.multihead_attention(q, k, v, heads=1, scale=0.25, device=dev).numpy().astype(np.float64)
        variants = compiled_variants("MultiheadAttention", dev)
        assert len(variants) == 1 and variants.pop().startswith("gemmx_") == two, (keys, floor, variants)
        s = (q[0].astype(np.float64) @ k[0].T.astype(np.float64)) * 0.25
        p = np.exp(s - s.max(-1, keepdims=True))
        np.testing.assert_allclose(y[0], (p / p.sum(-1, keepdims=True)) @ v[0].astype(np.float64), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("t", FLOATS)
@pytest.mark.parametrize("k16", [False, True], ids=["grid-tiles", "k16"])
@pytest.mark.parametrize("name", [n for n in CASES if n.startswith("coop")] + ["plain", "causal-past"])
def test_attention_half_precision(kdev, monkeypatch, name, k16, t):
    """allow_half_precision: the tensor-core kernel takes its float16-weight variant (FLOAT32: with
    query, key and value converted to float16 as they load), within docs/attention.md's looser
    bounds (`k16`: its key tiles of 16 at any grid); every other kernel is the one compiled without
    the flag."""
    if k16:
        from kompute_dml.runtime import attention_policy

        monkeypatch.setattr(attention_policy, "ATTENTION_COOP_HALF_K16_MIN_GROUPS", 0)
    c = CASES[name]
    if kdev.policy.attention_gemm_min_flops == 0:
        pytest.skip("the two-GEMM kernel is the same with or without the flag (test_attention)")
    rng = np.random.default_rng(abs(hash((name, "half"))) % 2**32)
    op, _ = run_case(kdev, rng, c, FLOATS[t], half=True)
    plain, _ = run_case(kdev, rng, c, FLOATS[t])
    v, want = op.plans[0].variant, plain.plans[0].variant
    coop = _takes_coop(kdev, c)
    emulated = "x" if kdev.policy.attention_kernel == "coopmat-emulated" else ""
    if coop:  # (its key tiles by the grid: test_coop_half_tiles_by_grid)
        assert v.startswith(f"mhac16{emulated}h_" if t == "f16" else f"mhac32{emulated}h_"), (v, want)
    else:
        assert v == want


SPLIT_CASES = {
    "long": Case(B=1, S=3, T=100, Hq=2, Hkv=2, D=16, Dv=12),
    "causal-past": Case(B=2, S=5, T=5, P=70, causal=True, present=True, bias=True),
    "gqa-psl-decode": Case(Hq=4, Hkv=2, S=1, T=1, P=150, psl=True, present=True, B=3),
    "masks": Case(B=2, S=17, T=90, mask=MT.KEY_SEQUENCE_END_START, rb=True),
}


@pytest.mark.parametrize("t", FLOATS)
@pytest.mark.parametrize("name", SPLIT_CASES)
def test_keys_split_over_work_groups(dev, monkeypatch, name, t):
    """The tiled kernel with its keys cut into chunks (KDML_ATTENTION_SPLIT) and combined."""
    monkeypatch.setattr(dev, "policy", dataclasses.replace(dev.policy, attention_kernel="tiled"))
    monkeypatch.setenv("KDML_ATTENTION_SPLIT", "3")
    op, _ = run_case(dev, np.random.default_rng(abs(hash((name, t))) % 2**32), SPLIT_CASES[name], FLOATS[t])
    assert [p.variant.split("_")[-1] for p in op.plans[:2]] == ["split", "combine"]


@pytest.mark.parametrize("t", FLOATS)
def test_tiled_variants(dev, monkeypatch, t):
    """The tiled kernel picks the smallest tile bound on both head sizes (blocks of 4 rows for at most
    4 query rows), the rows kernel past them."""
    monkeypatch.setattr(dev, "policy", dataclasses.replace(dev.policy, attention_kernel="tiled"))
    for s, d, want in ((5, 64, "d64"), (5, 65, "d128"), (5, 256, "d256"), (5, 257, "rows"), (4, 64, "q4d64"),
                       (1, 128, "q4d128"), (2, 129, "d256")):
        q = TD(FLOATS[t], (1, s, d))
        op = dev.compile(kdml.MultiheadAttentionDesc(q, q, q, None, None, None, None, None, None, None, None, q, None,
                                                     None, 1.0, -1e4, 1))
        assert op.plans[0].variant == f"mha_{t}_{want}"


@pytest.mark.parametrize(("smem", "invocations", "want"), [(49152, 1024, "blocked64"), (49152, 128, "blocked32"),
                                                           (32768, 1024, "blocked32"), (16384, 1024, "d64")])
def test_blocked_variants(dev, monkeypatch, smem, invocations, want):
    """The blocked kernel's most rows per work group whose shared memory and invocations the device has
    (80 work groups of 64 rows: past the policy's small grid), the tiled kernel where neither fits; head
    sizes past 64 take the tiled kernel."""
    import types

    monkeypatch.setattr(dev, "policy", dataclasses.replace(dev.policy, attention_kernel="blocked",
                                                           attention_blocked_min_rows=1))
    monkeypatch.setattr(dev, "limits", types.MappingProxyType({**dev.limits, "max_compute_shared_memory_size": smem,
                                                               "max_compute_work_group_invocations": invocations}))
    for d, expect in ((64, want), (65, "d128")):
        q = TD(DT.FLOAT32, (40, 70, d))
        op = dev.compile(kdml.MultiheadAttentionDesc(q, q, q, None, None, None, None, None, None, None, None, q, None,
                                                     None, 1.0, -1e4, 1))
        assert op.plans[0].variant == f"mha_f32_{expect}"


@pytest.mark.parametrize(("batch", "heads", "seq", "want"), [(8, 4, 128, "blocked32"), (1, 1, 70, "blocked32"),
                                                              (16, 4, 128, "blocked64"), (8, 4, 129, "blocked64"),
                                                              (8, 8, 64, "blocked32"), (8, 9, 64, "blocked64")])
def test_blocked_rows_on_a_small_grid(dev, monkeypatch, batch, heads, seq, want):
    """Where 64 rows per work group would make at most DevicePolicy.attention_blocked32_max_groups (64) work
    groups (batch x heads x blocks of 64 rows), the blocked kernel takes 32 rows, on a device with room for 64."""
    import types

    monkeypatch.setattr(dev, "policy", dataclasses.replace(dev.policy, attention_kernel="blocked"))
    monkeypatch.setattr(dev, "limits", types.MappingProxyType({**dev.limits, "max_compute_shared_memory_size": 49152,
                                                               "max_compute_work_group_invocations": 1024}))
    assert dev.policy.attention_blocked32_max_groups == 64
    q = TD(DT.FLOAT32, (batch, seq, heads * 64))
    op = dev.compile(kdml.MultiheadAttentionDesc(q, q, q, None, None, None, None, None, None, None, None, q, None,
                                                 None, 1.0, -1e4, heads))
    assert op.plans[0].variant == f"mha_f32_{want}"


@pytest.mark.parametrize("emulated", [True, False])
def test_coop_variants(dev, monkeypatch, emulated):
    """The tensor-core kernel takes FLOAT16 without bias, more than 4 query rows and head sizes up to 128,
    the largest key tile whose shared memory the device has; the tiled kernel the rest. Without the
    device's cooperative matrices "coopmat" is refused, as GEMM's forced family is."""
    kernel = "coopmat-emulated" if emulated else "coopmat"
    monkeypatch.setattr(dev, "policy", dataclasses.replace(dev.policy, attention_kernel=kernel))
    x = "x" if emulated else ""
    cases = ((DT.FLOAT16, 5, 64, False, f"mhac16{x}_d64k16"), (DT.FLOAT16, 5, 65, False, f"mhac16{x}_d128k32"),
             (DT.FLOAT16, 5, 129, False, "mha_f16_d256"), (DT.FLOAT16, 4, 64, False, "mha_f16_q4d64"),
             (DT.FLOAT16, 5, 64, True, "mha_f16_d64"), (DT.FLOAT32, 5, 64, False, "mha_f32_d64"))
    for dt, s, d, bias, want in cases:
        q = TD(dt, (1, s, d))
        desc = kdml.MultiheadAttentionDesc(q, q, q, None, None, None, TD(dt, (3 * d,)) if bias else None, None, None,
                                           None, None, q, None, None, 1.0, -1e4, 1)
        if not emulated and dev.policy.gemm_family != "coopmat" and want.startswith("mhac16"):
            with pytest.raises(kdml.UnsupportedError, match="coopmat"):
                dev.compile(desc)
            continue
        assert dev.compile(desc).plans[0].variant == want


def test_coop_half_tiles_by_grid(dev, monkeypatch):
    """allow_half_precision's variant takes key tiles of 32 below ATTENTION_COOP_HALF_K16_MIN_GROUPS work
    groups (batch x heads x blocks of 64 rows), of 16 from there; the float32-weight kernel 16 at any grid;
    head sizes past 64 the d128 tiles."""
    from kompute_dml.runtime import attention_policy

    monkeypatch.setattr(dev, "policy", dataclasses.replace(dev.policy, attention_kernel="coopmat-emulated"))
    monkeypatch.setattr(attention_policy, "ATTENTION_COOP_HALF_K16_MIN_GROUPS", 6)
    for batch, heads, d, half, want in ((1, 2, 64, True, "mhac16xh_d64k32"), (2, 3, 64, True, "mhac16xh_d64k16"),
                                        (1, 2, 64, False, "mhac16x_d64k16"), (2, 3, 100, True, "mhac16xh_d128k32")):
        q = TD(DT.FLOAT16, (batch, 70, heads * d))  # 2 blocks of 64 rows per head
        desc = kdml.MultiheadAttentionDesc(q, q, q, None, None, None, None, None, None, None, None, q, None, None,
                                           1.0, -1e4, heads)
        assert dev.compile(desc, allow_half_precision=half).plans[0].variant == want


def _plain(dt=DT.FLOAT32, **kw):
    q = TD(dt, (2, 3, 8))
    fields = dict(query_tensor=q, key_tensor=q, value_tensor=q, stacked_query_key_tensor=None,
                  stacked_key_value_tensor=None, stacked_query_key_value_tensor=None, bias_tensor=None, mask_tensor=None,
                  relative_position_bias_tensor=None, past_key_tensor=None, past_value_tensor=None, output_tensor=q,
                  output_present_key_tensor=None, output_present_value_tensor=None, scale=1.0, mask_filter_value=-1e4,
                  head_count=2)
    fields.update(kw)
    return kdml.MultiheadAttentionDesc(**fields)


REFUSED = {
    "no-query": (dict(query_tensor=None), "^query_tensor: is required"),
    "two-queries": (dict(stacked_query_key_value_tensor=TD(DT.FLOAT32, (2, 3, 2, 3, 4))), "^stacked_query_key_value_tensor: excludes"),
    "key-without-value": (dict(value_tensor=None), "^value_tensor: is required"),
    "hidden-not-heads": (dict(head_count=3), r"^query_tensor.sizes: the hidden size 8 must be a multiple"),
    "key-batch": (dict(key_tensor=TD(DT.FLOAT32, (1, 3, 8))), r"^key_tensor.sizes: must be \[batch"),
    "value-rows": (dict(value_tensor=TD(DT.FLOAT32, (2, 4, 8))), r"^value_tensor.sizes: must be \[batch, key sequence\]"),
    "mixed-types": (dict(key_tensor=TD(DT.FLOAT16, (2, 3, 8))), r"^key_tensor.data_type: must equal output_tensor's"),
    "mask-without-type": (dict(mask_tensor=TD(DT.INT32, (1, 2))), "^mask_type: a mask tensor needs"),
    "mask-type-range": (dict(mask_type=5), "^mask_type: must be a DML_MULTIHEAD_ATTENTION_MASK_TYPE"),
    "mask-shape": (dict(mask_tensor=TD(DT.INT32, (2, 2)), mask_type=MT.KEY_SEQUENCE_LENGTH), r"^mask_tensor.sizes: must be \[1, batch\]"),
    "bool-mask-keys": (dict(mask_tensor=TD(DT.INT32, (2, 2, 3, 4)), mask_type=MT.BOOLEAN), r"^mask_tensor.sizes"),
    "rb-shape": (dict(relative_position_bias_tensor=TD(DT.FLOAT32, (2, 1, 3, 3))), r"^relative_position_bias_tensor.sizes"),
    "bias-length": (dict(bias_tensor=TD(DT.FLOAT32, (16,))), r"^bias_tensor.sizes: must be \[hidden"),
    "leading-not-1": (dict(query_tensor=TD(DT.FLOAT32, (2, 2, 3, 8)), output_tensor=TD(DT.FLOAT32, (2, 2, 3, 8))),
                      r"^query_tensor.sizes: dimensions before"),
    "past-alone": (dict(past_key_tensor=TD(DT.FLOAT32, (2, 2, 1, 4))), "^past_value_tensor: is required with"),
    "present-rows": (dict(output_present_key_tensor=TD(DT.FLOAT32, (2, 2, 4, 4))), r"^output_present_key_tensor.sizes"),
    "heads-zero": (dict(head_count=0), "^head_count: must be at least 1"),
    "causal-not-bool": (dict(causal=2), "^causal: must be a bool"),
    "scale-not-float": (dict(scale="x"), "^scale: must be a FLOAT"),
    "split-stacked": (dict(split_heads=True, query_tensor=None, key_tensor=None, value_tensor=None,
                           stacked_query_key_value_tensor=TD(DT.FLOAT32, (2, 3, 2, 3, 4))),
                      "^stacked_query_key_value_tensor: stacked tensors are refused"),
    "output-overlap": (dict(output_tensor=TD(DT.FLOAT32, (2, 3, 8), (8, 8, 1))), "^output_tensor.strides: "),
}


@pytest.mark.parametrize("name", REFUSED)
def test_refused(dev, name):
    change, pattern = REFUSED[name]
    with pytest.raises(kdml.InvalidArgumentError, match=pattern):
        dev.compile(_plain(**change))


def test_gqa_refusals(dev):
    q, kv = TD(DT.FLOAT32, (1, 2, 12)), TD(DT.FLOAT32, (1, 2, 4))
    base = dict(query_tensor=q, key_tensor=kv, value_tensor=kv, stacked_query_key_tensor=None,
                stacked_key_value_tensor=None, stacked_query_key_value_tensor=None, bias_tensor=None, mask_tensor=None,
                relative_position_bias_tensor=None, past_key_tensor=None, past_value_tensor=None,
                past_sequence_lengths_tensor=None, output_tensor=q, output_present_key_tensor=None,
                output_present_value_tensor=None, scale=1.0, mask_filter_value=-1e4)
    with pytest.raises(kdml.InvalidArgumentError, match="^key_value_head_count: must divide"):
        dev.compile(kdml.MultiheadAttention1Desc(**base, query_head_count=3, key_value_head_count=2))
    with pytest.raises(kdml.InvalidArgumentError, match="^past_sequence_lengths_tensor: needs past_key_tensor"):
        dev.compile(kdml.MultiheadAttention1Desc(**{**base, "past_sequence_lengths_tensor": TD(DT.INT32, (1,))},
                                                 query_head_count=3, key_value_head_count=1))
    with pytest.raises(kdml.UnsupportedError, match="^MULTIHEAD_ATTENTION1: introduced at DML_FEATURE_LEVEL_6_3"), \
            kdml.Device(feature_level=kdml.FeatureLevel.FL_6_2) as d:
        d.compile(kdml.MultiheadAttention1Desc(**base, query_head_count=3, key_value_head_count=1))


@pytest.mark.parametrize("split", ["", "3"])
@pytest.mark.parametrize("t", FLOATS)
def test_nan_and_infinities(kdev, monkeypatch, t, split):
    """A NaN in a query row, or a +inf score, gives that row NaN; a -inf bias takes a key out; a row
    of only -inf scores is NaN; other rows are untouched (also with the keys split in chunks)."""
    dt = FLOATS[t]
    npd = dt.numpy_dtype
    rng = np.random.default_rng(5)
    B, S, T, H, D = 1, 6, 70 if split else 6, 1, 4  # 6 rows: the tensor-core kernel's too
    if split:
        monkeypatch.setenv("KDML_ATTENTION_SPLIT", split)
    q = rng.standard_normal((B, S, H * D)).astype(npd)
    k, v = rng.standard_normal((B, T, D)).astype(npd), rng.standard_normal((B, T, D)).astype(npd)
    q[0, 0, 1] = np.nan
    rb = rng.standard_normal((B, H, S, T)).astype(npd)
    rb[0, 0, 1, 2] = -np.inf
    rb[0, 0, 2, :] = -np.inf
    rb[0, 0, 3, T - 2] = np.inf
    y = kdml.multihead_attention(q, k, v, heads=H, relative_position_bias=rb, scale=0.5, device=kdev).numpy()
    assert np.isnan(y[0, 0]).all() and np.isnan(y[0, 2]).all() and np.isnan(y[0, 3]).all()
    assert np.isfinite(y[0, 4:]).all()
    s = (q[0, 1].astype(np.float64) @ k[0].T.astype(np.float64)) * 0.5 + rb[0, 0, 1]
    p = np.exp(s - s.max())
    want = (p / p.sum()) @ v[0].astype(np.float64)
    assert np.allclose(y[0, 1], want, rtol=1e-2 if dt == DT.FLOAT16 else 1e-5, atol=1e-3 if dt == DT.FLOAT16 else 1e-6)


@pytest.mark.parametrize("t", FLOATS)
def test_nan_and_infinities_in_whole_tiles(kdev, t):
    """Without mask or bias, over query blocks and key tiles each row attends whole (the tensor-core
    kernel's plain tiles): a NaN query element makes its row NaN, a +inf score its row NaN, a -inf
    score takes the key out; the other rows are the float64 result."""
    dt = FLOATS[t]
    npd = dt.numpy_dtype
    rng = np.random.default_rng(7)
    S, T, D = 40, 70, 16
    q = rng.standard_normal((1, S, D)).astype(npd)
    k, v = rng.standard_normal((1, T, D)).astype(npd), rng.standard_normal((1, T, D)).astype(npd)
    q[0, 3, 1] = np.nan
    k[0, 5, 0] = np.inf  # score 5 of row i: +inf where q[i, 0] > 0 (a NaN row), else -inf
    y = kdml.multihead_attention(q, k, v, heads=1, scale=0.25, device=kdev).numpy().astype(np.float64)
    bad = (q[0, :, 0] > 0) | (np.arange(S) == 3)
    assert np.isnan(y[0, bad]).all()
    good = np.flatnonzero(~bad)
    assert len(good) > 8
    kk = np.delete(k[0].astype(np.float64), 5, axis=0)
    s = (q[0, good].astype(np.float64) @ kk.T) * 0.25
    p = np.exp(s - s.max(-1, keepdims=True))
    want = (p / p.sum(-1, keepdims=True)) @ np.delete(v[0].astype(np.float64), 5, axis=0)
    assert np.allclose(y[0, good], want, rtol=1e-2 if dt == DT.FLOAT16 else 1e-5, atol=1e-3 if dt == DT.FLOAT16 else 1e-6)


def test_helper_forms(dev):
    """kdml.multihead_attention: masks by their shape (lengths, 2-D key padding), the default
    scale, GQA through MULTIHEAD_ATTENTION1, present outputs, `out=`."""
    rng = np.random.default_rng(9)
    B, S, T, H, Hkv, D = 2, 3, 4, 4, 2, 8
    q = rng.standard_normal((B, S, H * D)).astype(np.float32)
    k = rng.standard_normal((B, T, Hkv * D)).astype(np.float32)
    v = rng.standard_normal((B, T, Hkv * D)).astype(np.float32)
    pad = np.array([[1, 1, 0, 0], [1, 1, 1, 0]], np.int32)
    lens = pad.sum(1)
    want, _, _ = mha_ref(q.reshape(B, S, H, D).transpose(0, 2, 1, 3), k.reshape(B, T, Hkv, D).transpose(0, 2, 1, 3),
                         v.reshape(B, T, Hkv, D).transpose(0, 2, 1, 3), scale=1 / np.sqrt(D), mask_kind=1, mask=lens)
    want = want.transpose(0, 2, 1, 3).reshape(B, S, H * D)
    a = kdml.multihead_attention(q, k, v, heads=H, kv_heads=Hkv, mask=lens, device=dev).numpy()
    b = kdml.multihead_attention(q, k, v, heads=H, kv_heads=Hkv, mask=pad, device=dev).numpy()
    assert np.allclose(a, want, atol=1e-5) and np.allclose(b, want, atol=1e-5)
    out = kdml.zeros((B, S, H * D), np.float32, device=dev)
    y, pk, _pv = kdml.multihead_attention(q, k, v, heads=H, kv_heads=Hkv, present=True, out=out, device=dev)
    assert y is out and pk.shape == (B, Hkv, T, D)
    assert np.array_equal(pk.numpy(), k.reshape(B, T, Hkv, D).transpose(0, 2, 1, 3))
    with pytest.raises(kdml.InvalidArgumentError, match="^mask: must be INT32"):
        kdml.multihead_attention(q, k, v, heads=H, mask=kdml.zeros((B, T), np.float32, device=dev), device=dev)


def test_plans_ahead(dev, monkeypatch):
    """OperatorSpec.ahead: the tiled kernel's other tiles of the same bound, its split and combine
    variants, each a variant of the operator's families with their words, once per type and bound;
    the rows kernel has none."""
    from kompute_dml.ops import BY_NAME
    from kompute_dml.ops.contract import by_variant

    spec = BY_NAME["MULTIHEAD_ATTENTION"]
    q = TD(DT.FLOAT16, (2, 5, 64))
    desc = kdml.MultiheadAttentionDesc(q, q, q, None, None, None, None, None, None, None, None, q, None, None, 1.0,
                                       -1e4, 2)
    monkeypatch.setattr(dev, "policy", dataclasses.replace(dev.policy, attention_kernel="tiled"))
    done: set = set()
    plans = spec.ahead(dev, dev.compile(desc), done)
    assert sorted(p.variant for p in plans) == ["mha_f16_combine", "mha_f16_d64_split", "mha_f16_q4d64",
                                                "mha_f16_q4d64_split"]
    assert all(p.variant in spec.variants and len(p.push) == by_variant()[p.variant].words for p in plans)
    dev.engine.prepare_many(plans)  # their pipelines can be made
    assert spec.ahead(dev, dev.compile(desc), done) == []
    monkeypatch.setattr(dev, "policy", dataclasses.replace(dev.policy, attention_kernel="rows"))
    assert spec.ahead(dev, dev.compile(desc), set()) == []


def test_plans_ahead_of_the_blocked_kernel(dev, monkeypatch):
    """After the blocked kernel, its other rows per work group where the device has room for it
    (the grid picks one: a small batch 32 rows, a larger one 64), with the tiled kernel's variants."""
    import types

    from kompute_dml.ops import BY_NAME

    spec = BY_NAME["MULTIHEAD_ATTENTION"]
    q = TD(DT.FLOAT32, (1, 70, 64))
    desc = kdml.MultiheadAttentionDesc(q, q, q, None, None, None, None, None, None, None, None, q, None, None, 1.0,
                                       -1e4, 1)
    monkeypatch.setattr(dev, "policy", dataclasses.replace(dev.policy, attention_kernel="blocked"))
    for smem, want in ((49152, {"mha_f32_blocked64"}), (32768, set())):
        monkeypatch.setattr(dev, "limits", types.MappingProxyType({**dev.limits, "max_compute_shared_memory_size": smem,
                                                                   "max_compute_work_group_invocations": 1024}))
        op = dev.compile(desc)
        assert op.plans[0].variant == "mha_f32_blocked32"
        assert {p.variant for p in spec.ahead(dev, op, set()) if "blocked" in p.variant} == want


def test_key_splits(monkeypatch):
    """Chunks of keys: GPUs only, for small grids and long key sequences; the environment forces."""
    import types

    from kompute_dml.ops.attention_layout import key_splits

    gpu = types.SimpleNamespace(policy=types.SimpleNamespace(name="discrete-gpu"))
    cpu = types.SimpleNamespace(policy=types.SimpleNamespace(name="cpu"))
    monkeypatch.delenv("KDML_ATTENTION_SPLIT", raising=False)
    assert key_splits(cpu, 8, 4096) == 1
    assert key_splits(gpu, 12, 2048) == 32  # decoding, 12 heads, 2048 keys: chunks of 64
    assert key_splits(gpu, 96, 513) == 8 and key_splits(gpu, 32, 1024) == 16  # up to 1,024 groups
    assert key_splits(gpu, 8, 8192) == 32 and key_splits(gpu, 256, 4096) == 1 and key_splits(gpu, 8, 300) == 1
    monkeypatch.setenv("KDML_ATTENTION_SPLIT", "4")
    assert key_splits(cpu, 8, 100) == 4
    monkeypatch.setenv("KDML_ATTENTION_SPLIT", "x")
    with pytest.raises(kdml.UnsupportedError, match="KDML_ATTENTION_SPLIT"):
        key_splits(gpu, 8, 100)
