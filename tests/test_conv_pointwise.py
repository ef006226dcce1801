"""CONVOLUTION's pointwise case on GEMM's kernels (ops/conv_pointwise.py; forced here with
kernel="gemm", which GPUs' policy picks for FLOAT32): 1 x 1 windows, strides 1, no padding, one
group (KDML_CONV_KERNEL=gemm; compiled by Device.compile, which checks the plans against the
operator's families), in NCHW, NHWC and gapped layouts, batches of 1 and 3, with and without bias and fused
activations, at random offsets, outputs poisoned and every other byte unchanged, against the float64
reference within the convolution's bound; the fused activation gives the standalone operator's bits
on the unfused result; convolutions that are not pointwise, or whose pixels do not address as one
dimension, take the convolution kernels."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from conv_reference import reference
from helpers import assert_outside_unchanged, place, poison_against, read_logical
from test_conv_fused import ACTS
from test_convolution import check

import kompute_dml as kdml
from kompute_dml.runtime.coop_policy import choose_conv_kernel

DT = kdml.DataType
TD = kdml.TensorDesc


def layout(kind: str, sizes: tuple[int, ...]) -> tuple[int, ...]:
    """Strides of (N, C, H, W) `sizes`: packed NCHW, NHWC, or NCHW with gaps between channels and images."""
    _, c, h, w = sizes
    if kind == "nchw":
        return (c * h * w, h * w, w, 1)
    if kind == "nhwc":
        return (h * w * c, 1, w * c, c)
    return ((c + 1) * (h * w + 3), h * w + 3, w, 1)


@pytest.fixture(autouse=True)
def _gemm(monkeypatch):
    monkeypatch.setenv("KDML_CONV_KERNEL", "gemm")


def run(dev, rng, dt, n, cin, cout, hw, kinds, bias, act):
    """The convolution on placed tensors (layouts `kinds` of input and output); returns (output, the
    float64 reference without the activation, S, the operator's variants)."""
    npd = dt.numpy_dtype
    xs, ws, ys = (n, cin, *hw), (cout, cin, 1, 1), (n, cout, *hw)
    x = (rng.standard_normal(xs) * 2).astype(npd)
    w = (rng.standard_normal(ws) * 0.5).astype(npd)
    b = rng.standard_normal(cout).astype(npd) if bias else None
    want, s = reference(x, w, b, (1, 1), (1, 1), (0, 0), (0, 0), 1)
    xd, yd = TD(dt, xs, layout(kinds[0], xs)), TD(dt, ys, layout(kinds[1], ys))
    wd, bd = TD(dt, ws), TD(dt, (1, cout, 1, 1)) if bias else None
    tx, _ = place(dev, rng, xd, x)
    tw, _ = place(dev, rng, wd, w)
    tb = place(dev, rng, bd, b.reshape(bd.sizes))[0] if bias else None
    ty, _ = place(dev, rng, yd)
    before = poison_against(ty, np.nan_to_num(want).astype(npd), rng)
    op = dev.compile(kdml.ConvolutionDesc(xd, wd, bd, yd, fused_activation=act))  # (its plans' contract checked)
    op.execute([tx, tw, tb], [ty])
    got = read_logical(assert_outside_unchanged(ty, before), ty.offset, yd)
    return got, want, s, op.variants


@pytest.mark.parametrize("dt", [DT.FLOAT32, DT.FLOAT16], ids=lambda d: d.name)
@pytest.mark.parametrize("kinds", [("nchw", "nchw"), ("nhwc", "nchw"), ("gaps", "nhwc"), ("nchw", "gaps")])
@pytest.mark.parametrize("n, cin, cout, hw", [(1, 16, 40, (7, 9)), (3, 70, 130, (5, 5)), (2, 300, 19, (1, 1))])
def test_pointwise_on_gemm_against_numpy(dev, rng, dt, kinds, n, cin, cout, hw):
    for bias in (True, False):
        got, want, s, variants = run(dev, rng, dt, n, cin, cout, hw, kinds, bias, None)
        assert variants[0].startswith("gemm"), variants
        check(got, want, s, cin, dt)


@pytest.mark.parametrize("dt", [DT.FLOAT32, DT.FLOAT16], ids=lambda d: d.name)
@pytest.mark.parametrize("name", ["relu", "hard_swish", "sigmoid", "clip"])
def test_fused_activation_is_the_standalone_operators(dev, rng, dt, name):
    desc, fn, params = ACTS[name]
    seed = int(rng.integers(1 << 30))
    plain, _, _, _ = run(dev, np.random.default_rng(seed), dt, 2, 24, 40, (6, 6), ("nchw", "nchw"), True, None)
    fused, _, _, variants = run(dev, np.random.default_rng(seed), dt, 2, 24, 40, (6, 6), ("nchw", "nchw"), True, desc)
    assert variants[0].startswith("gemm") and variants[0].endswith("a")
    chain = fn(plain, **params).numpy()
    bits = np.uint32 if dt == DT.FLOAT32 else np.uint16
    np.testing.assert_array_equal(fused.view(bits), chain.view(bits))


def test_other_convolutions_take_the_convolution_kernels(dev, rng):
    """A forced "gemm" applies to pointwise convolutions only; output rows with gaps between them
    (pixels that do not address as one dimension) fall back too; both stay correct."""
    x = rng.standard_normal((1, 4, 6, 6)).astype(np.float32)
    w = rng.standard_normal((5, 4, 3, 3)).astype(np.float32)
    d = kdml.ConvolutionDesc(TD(DT.FLOAT32, x.shape), TD(DT.FLOAT32, w.shape), None, TD(DT.FLOAT32, (1, 5, 4, 4)))
    assert dev.compile(d).variants == ["conv_f32"]
    ys = (1, 5, 6, 6)
    rows_gapped = TD(DT.FLOAT32, ys, (5 * 6 * 8, 6 * 8, 8, 1))
    xd, wd = TD(DT.FLOAT32, (1, 4, 6, 6)), TD(DT.FLOAT32, (5, 4, 1, 1))
    op = dev.compile(kdml.ConvolutionDesc(xd, wd, None, rows_gapped))
    assert op.variants == ["conv_f32"]
    w1 = rng.standard_normal((5, 4, 1, 1)).astype(np.float32)
    y = dev.empty(rows_gapped)
    op.execute([dev.tensor(x), dev.tensor(w1), None], [y])
    want, s = reference(x, w1, None, (1, 1), (1, 1), (0, 0), (0, 0), 1)
    check(y.numpy(), want, s, 4, DT.FLOAT32)


def test_policy_picks_gemm_for_float32_pointwise_where_it_says(monkeypatch):
    monkeypatch.delenv("KDML_CONV_KERNEL")
    kw = dict(coutg=96, klen=576, backward=False)
    assert choose_conv_kernel("tiled", half=False, pointwise=True, pointwise_gemm=True, **kw) == "gemm"
    assert choose_conv_kernel("tiled", half=False, pointwise=False, pointwise_gemm=True, **kw) != "gemm"
    assert choose_conv_kernel("tiled", half=False, pointwise=True, pointwise_gemm=False, **kw) != "gemm"
    assert choose_conv_kernel("coopmat", half=True, pointwise=True, pointwise_gemm=True, **kw) == "coopmat"
    assert choose_conv_kernel("tiled", half=False, pointwise=False, pointwise_gemm=True, kernel="gemm", **kw) == "tiled"


@pytest.mark.parametrize("cin, pixels, want", [(16, 3136, "gemm"), (128, 12544, "gemm"), (1152, 49, "gemm"),
                                               (256, 3136, "coopmat"), (1024, 196, "coopmat"), (1024, 8, "coopmat"),
                                               (8, 3136, "direct")])
def test_policy_picks_gemm_for_float16_pointwise_within_its_bounds(monkeypatch, cin, pixels, want):
    """FLOAT16 tensors: GEMM (its tensor-core family) for few input channels or small images, where the
    device's family is coopmat; half precision of FLOAT32 tensors (allow_half_precision) keeps the tensor-core
    convolution; so does a device without tensor cores."""
    monkeypatch.delenv("KDML_CONV_KERNEL")
    coutg = 4 if want == "direct" else 96
    kw = dict(coutg=coutg, klen=cin, backward=False, pointwise=True, pointwise_gemm=True, pixels=pixels)
    assert choose_conv_kernel("coopmat", half=True, float16=True, **kw) == want
    if want == "gemm":
        assert choose_conv_kernel("coopmat", half=True, float16=False, **kw) == "coopmat"
        assert choose_conv_kernel("tiled", half=True, float16=True, **kw) == "tiled"


def test_pointwise_keeps_square_blocks_where_gemm_takes_8x4(dev, monkeypatch):
    """GEMM's 8 x 4 block (ops/gemm_blocks.py) is not measured on convolutions: under the GPUs' tile rule a
    1 x 1 layer of many 128 x 64 tiles stays on 64 x 64, where GEMM's own product of that shape takes 8 x 4."""
    monkeypatch.setattr(dev, "policy", dataclasses.replace(dev.policy, gemm_tiles="parallel", gemm_family="tiled",
                                                                  gemm_stream=(0, 0)))  # (the tiled kernel's blocks)
    monkeypatch.setitem(dev.caches, "compiled", {})
    n, cin, cout, hw = 8, 64, 256, (56, 56)
    xd, wd, yd = TD(DT.FLOAT32, (n, cin, *hw)), TD(DT.FLOAT32, (cout, cin, 1, 1)), TD(DT.FLOAT32, (n, cout, *hw))
    assert dev.compile(kdml.ConvolutionDesc(xd, wd, None, yd)).variants == ["gemm_f32_b4"]
    a, b, o = TD(DT.FLOAT32, (n, 1, cout, cin)), TD(DT.FLOAT32, (n, 1, cin, hw[0] * hw[1])), TD(DT.FLOAT32, (n, 1, cout, hw[0] * hw[1]))
    assert dev.compile(kdml.GemmDesc(a, b, None, o)).variants == ["gemm_f32_b8x4"]
