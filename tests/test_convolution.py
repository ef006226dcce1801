"""CONVOLUTION (ops/convolution.py, shaders/convolution.comp) against an independent float64 numpy
reference (windows gathered from the zero-padded input, one product per group): 1-D, 2-D and 3-D,
groups (depthwise too), strides, dilations, asymmetric padding, bias, the fused ReLU, CONVOLUTION
mode (the window reversed), FLOAT32 and FLOAT16; strided and broadcast inputs at random offsets,
strided outputs poisoned first, every byte outside them unchanged; the error bound of the module
(K + 1) u S; refused descriptors with the field they name; the helper."""

from __future__ import annotations

import numpy as np
import pytest
from conv_reference import reference, reference_backward
from helpers import assert_outside_unchanged, direct_kernel, place, poison_against, random_strides, read_logical

import kompute_dml as kdml

DT = kdml.DataType
TD = kdml.TensorDesc
FL = kdml.FeatureLevel
U = 2.0 ** -24


def check(got, want, s, k, dt):
    bound = (k + 1) * U * s
    if dt == DT.FLOAT16:
        bound = bound + np.abs(want) * 2.0 ** -11 + 2.0 ** -25  # the float16 rounding (subnormals absolute)
    err = np.abs(got.astype(np.float64) - want)
    assert np.all(err <= bound), f"worst error / bound {np.max(err / np.maximum(bound, 1e-300)):.3f}"


CASES = [  # x sizes, filter sizes, strides, dilations, start, end, groups
    ((1, 3, 9, 9), (5, 3, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 1),
    ((2, 4, 11, 7), (6, 2, 3, 2), (2, 1), (1, 2), (0, 1), (2, 0), 2),
    ((1, 6, 8, 8), (6, 1, 3, 3), (2, 2), (1, 1), (1, 1), (1, 1), 6),  # depthwise
    ((1, 4, 17, 17), (12, 4, 4, 4), (4, 4), (1, 1), (0, 0), (0, 0), 1),  # patch embedding
    ((2, 5, 13), (7, 5, 3), (2,), (1,), (1,), (1,), 1),  # 1-D (Whisper-style)
    ((1, 2, 4, 5, 6), (3, 2, 2, 3, 2), (1, 2, 1), (2, 1, 1), (1, 0, 1), (0, 1, 1), 1),  # 3-D
    ((1, 70, 9, 9), (130, 70, 1, 1), (1, 1), (1, 1), (0, 0), (0, 0), 1),  # tiles on both axes, 1x1
    ((3, 300, 1, 1), (19, 300, 1, 1), (1, 1), (1, 1), (0, 0), (0, 0), 1),  # squeeze-and-excitation: 1 pixel, long K
    ((1, 20, 5, 4), (10, 10, 3, 3), (1, 1), (1, 1), (1, 0), (1, 2), 2),  # more terms than a lanes round
    ((2, 4, 10, 9), (4, 1, 5, 5), (1, 2), (2, 1), (2, 1), (3, 2), 4),  # depthwise 5 x 5, dilated, padded unevenly
    ((2, 6, 9, 8), (6, 1, 7, 7), (1, 1), (1, 1), (3, 3), (3, 2), 6),  # depthwise 7 x 7 (ConvNeXt), padded unevenly
]


@pytest.mark.parametrize("kernel", ["tiled", "direct", "direct-rows", "split", "lanes"])
@pytest.mark.parametrize("dt", [DT.FLOAT32, DT.FLOAT16], ids=lambda d: d.name)
@pytest.mark.parametrize("case", range(len(CASES)))
def test_convolution_against_numpy(dev, rng, monkeypatch, case, dt, kernel):
    """"split": the tiled kernel over parts of the reduction (split-K, forced here; GPUs take it
    for grids of few tiles), the parts added by a second dispatch: the same bound. "direct-rows": the
    direct kernel's row variants where the window has them (cases 0, 2, 8 and 9)."""
    direct_kernel(monkeypatch, "tiled" if kernel == "split" else kernel)
    monkeypatch.setenv("KDML_CONV_SPLIT", str(2 + case % 3) if kernel == "split" else "1")
    xs, ws, st, dl, ps, pe, g = CASES[case]
    flip, relu, bias = bool(rng.integers(2)), bool(rng.integers(2)), case % 3 != 2
    npd = dt.numpy_dtype
    x = (rng.standard_normal(xs) * 2).astype(npd)
    w = (rng.standard_normal(ws) * 0.5).astype(npd)
    b = rng.standard_normal(ws[0]).astype(npd) if bias else None
    want, s = reference(x, w, b, st, dl, ps, pe, g, flip, relu)
    xd = TD(dt, xs, random_strides(rng, xs, allow_broadcast=False))
    wd = TD(dt, ws, random_strides(rng, ws, allow_broadcast=False))
    bd = TD(dt, (1, ws[0]) + (1,) * (len(xs) - 2)) if bias else None
    yd = TD(dt, want.shape, random_strides(rng, want.shape, allow_broadcast=False))
    tx, _ = place(dev, rng, xd, x)
    tw, _ = place(dev, rng, wd, w)
    tb = place(dev, rng, bd, b.reshape(bd.sizes))[0] if bias else None
    ty, _ = place(dev, rng, yd)
    before = poison_against(ty, want.astype(npd), rng)
    desc = kdml.ConvolutionDesc(xd, wd, bd, yd, kdml.ConvolutionMode(0 if flip else 1), kdml.ConvolutionDirection.FORWARD,
                                st, dl, ps, pe, (0,) * len(st), g, kdml.ActivationReluDesc(None, None) if relu else None)
    dev.compile(desc).execute([tx, tw, tb], [ty])
    after = assert_outside_unchanged(ty, before)
    got = read_logical(after, ty.offset, yd)
    check(got, want, s, int(np.prod(ws[1:])), dt)


@pytest.mark.parametrize("case", [0, 1, 2, 5, 8, 9, 10])
def test_both_kernels_give_the_same_bits(dev, rng, monkeypatch, case):
    """The direct and the tiled kernel sum in the same order: their outputs are bit for bit equal
    (cases 0, 2, 8, 9 and 10: the direct kernel's unrolled 3 x 3, 5 x 5 and 7 x 7 windows, convd3 /
    convd5 / convd7, and the row variants of the first two, convd3s1 / convd3s2 / convd5s2)."""
    xs, ws, st, dl, ps, pe, g = CASES[case]
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal(ws).astype(np.float32)
    got = {}
    shape = reference(x, w, None, st, dl, ps, pe, g)[0].shape
    monkeypatch.setenv("KDML_CONV_SPLIT", "1")  # (a GPU splits the reduction of some: another order)
    for kernel in ("tiled", "direct", "direct-rows"):
        direct_kernel(monkeypatch, kernel)
        y = dev.empty(kdml.TensorDesc(DT.FLOAT32, shape))
        op = dev.compile(kdml.ConvolutionDesc(TD(DT.FLOAT32, xs), TD(DT.FLOAT32, ws), None, y.desc,
                                              kdml.ConvolutionMode.CROSS_CORRELATION, kdml.ConvolutionDirection.FORWARD,
                                              st, dl, ps, pe, (0,) * len(st), g))
        window = str(ws[2]) if len(ws) == 4 and ws[2] == ws[3] in (3, 5, 7) else ""
        if kernel == "direct-rows" and window in ("3", "5") and dl[-1] == 1 and st[-1] in (1, 2):
            window += f"s{st[-1]}"
        assert op.variants[0] == (f"convd{window}_f32" if kernel != "tiled" else "conv_f32")
        op.execute([dev.tensor(x), dev.tensor(w), None], [y])
        got[kernel] = y.numpy()
    np.testing.assert_array_equal(got["tiled"].view(np.uint32), got["direct"].view(np.uint32))
    np.testing.assert_array_equal(got["tiled"].view(np.uint32), got["direct-rows"].view(np.uint32))


@pytest.mark.parametrize("kernel", ["direct", "direct-rows", "split"])
@pytest.mark.parametrize("layout", ["packed", "channel gaps", "row gaps", "column gaps"])
def test_float16_outputs_of_one_element_per_invocation(dev, rng, monkeypatch, kernel, layout):
    """The direct kernel and split-K's second dispatch store each FLOAT16 output as a 16-bit field of a
    word a neighbouring invocation may write too (the direct kernel's row variants store two of their
    own outputs that share a word whole): outputs of 49 pixels per channel (channels starting at even
    and odd elements), packed and with gaps after channels, rows or elements; every byte outside the
    output unchanged, within the reference's bound; the direct kernel gives the tiled kernel's bits."""
    direct = kernel.startswith("direct")
    cin, g = (3, 3) if direct else (16, 1)
    xs, ws = (2, cin, 7, 7), (3, cin // g, 3, 3)
    x = (rng.standard_normal(xs) * 2).astype(np.float16)
    w = (rng.standard_normal(ws) * 0.5).astype(np.float16)
    want, s = reference(x, w, None, (1, 1), (1, 1), (1, 1), (1, 1), g)
    strides = {"packed": None, "channel gaps": (3 * 51, 51, 7, 1), "row gaps": (3 * 7 * 9, 7 * 9, 9, 1),
               "column gaps": (3 * 7 * 14, 7 * 14, 14, 2)}[layout]
    yd = TD(DT.FLOAT16, want.shape, strides)
    offset = 16 * int(rng.integers(4))
    init = rng.integers(0, 256, offset + yd.byte_size + 6, dtype=np.uint8).tobytes()
    monkeypatch.setenv("KDML_CONV_SPLIT", "3" if kernel == "split" else "1")
    got = {}
    for k in ("tiled", kernel) if direct else ("tiled",):
        direct_kernel(monkeypatch, k)
        y = kdml.Tensor(dev.buffer(init), yd, offset)
        op = dev.compile(kdml.ConvolutionDesc(TD(DT.FLOAT16, xs), TD(DT.FLOAT16, ws), None, yd, group_count=g,
                                              start_padding=(1, 1), end_padding=(1, 1)))
        assert op.variants[-1] == {"direct": "convd3_f16", "direct-rows": "convd3s1_f16",
                                   "tiled": "convr_f16" if kernel == "split" else "conv_f16"}[k]
        op.execute([dev.tensor(x), dev.tensor(w), None], [y])
        got[k] = read_logical(assert_outside_unchanged(y, init), offset, yd)
        check(got[k], want, s, int(np.prod(ws[1:])), DT.FLOAT16)
    if direct:
        np.testing.assert_array_equal(got["tiled"].view(np.uint16), got[kernel].view(np.uint16))


@pytest.mark.parametrize("kernel", ["direct", "tiled"])
def test_float16_operands_exact_subnormals_and_specials(dev, monkeypatch, kernel):
    """The float16 loads (f16_bits.glsl h2f_value) give every float16 value exactly, subnormals included
    (a device may flush them in its own conversion): x times a filter of 1 is x, bit for bit, for every
    finite float16 of either sign; infinities stay infinite, NaNs NaN."""
    monkeypatch.setenv("KDML_CONV_KERNEL", kernel)
    monkeypatch.setenv("KDML_CONV_SPLIT", "1")
    bits = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    x = bits.view(np.float16).reshape(1, 1, 256, 256)
    y = dev.empty(TD(DT.FLOAT16, x.shape))
    op = dev.compile(kdml.ConvolutionDesc(TD(DT.FLOAT16, x.shape), TD(DT.FLOAT16, (1, 1, 1, 1)), None, y.desc))
    op.execute([dev.tensor(x), dev.tensor(np.ones((1, 1, 1, 1), np.float16)), None], [y])
    got = y.numpy().reshape(-1)
    finite = np.isfinite(x.reshape(-1))
    zero = (bits & 0x7FFF) == 0
    np.testing.assert_array_equal(got.view(np.uint16)[finite & ~zero], bits[finite & ~zero])
    assert np.all(got[zero] == 0)  # (the sum starts at +0: -0 + +0 is +0)
    inf = np.isinf(x.reshape(-1))
    np.testing.assert_array_equal(got[inf], x.reshape(-1)[inf])
    assert np.all(np.isnan(got[np.isnan(x.reshape(-1))]))


def test_broadcast_input_and_special_values(dev, rng):
    """A stride-0 (broadcast) input, and inf / NaN reaching the sums: IEEE results (a NaN or an
    inf times 0 gives NaN; inf + finite stays inf)."""
    x = np.ones((1, 2, 5, 5), np.float32) * rng.standard_normal((1, 2, 1, 5)).astype(np.float32)
    xd = TD(DT.FLOAT32, (1, 2, 5, 5), (0, 5, 0, 1))
    tx = kdml.Tensor(dev.buffer(x[0, :, 0].tobytes()), xd)
    w = rng.standard_normal((3, 2, 3, 3)).astype(np.float32)
    want, s = reference(x, w, None, (1, 1), (1, 1), (1, 1), (1, 1), 1)
    got = kdml.conv(tx, w, start_padding=(1, 1), end_padding=(1, 1)).numpy()
    check(got, want, s, 18, DT.FLOAT32)
    x2 = rng.standard_normal((1, 1, 4, 4)).astype(np.float32)
    x2[0, 0, 1, 1], x2[0, 0, 3, 3] = np.inf, np.nan
    w2 = np.ones((1, 1, 2, 2), np.float32)
    want2 = reference(x2, w2, None, (1, 1), (1, 1), (0, 0), (0, 0), 1)[0]
    got2 = kdml.conv(x2, w2).numpy()
    np.testing.assert_array_equal(np.isnan(got2), np.isnan(want2))
    np.testing.assert_array_equal(np.isinf(got2), np.isinf(want2))


def test_helper_matches_descriptor_and_takes_out(dev, rng):
    x = rng.standard_normal((2, 4, 6, 6)).astype(np.float32)
    w = rng.standard_normal((4, 2, 3, 3)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    want, s = reference(x, w, b, (1, 1), (1, 1), (1, 1), (1, 1), 2, relu=True)
    out = dev.empty(kdml.TensorDesc(DT.FLOAT32, want.shape))
    got = kdml.conv(x, w, b, start_padding=(1, 1), end_padding=(1, 1), groups=2, relu=True, out=out)
    assert got is out
    check(out.numpy(), want, s, 18, DT.FLOAT32)


F = DT.FLOAT32


@pytest.mark.parametrize("change, field", [
    (dict(filter_tensor=TD(F, (6, 3, 3, 3))), "filter_tensor.sizes"),
    (dict(group_count=3), "group_count"),
    (dict(output_tensor=TD(F, (1, 6, 4, 4))), "output_tensor.sizes"),
    (dict(bias_tensor=TD(F, (1, 5, 1, 1))), "bias_tensor.sizes"),
    (dict(strides=(1,)), "strides"),
    (dict(dilations=(0, 1)), "dilations[0]"),
    (dict(output_padding=(1, 0)), "output_padding"),
    (dict(filter_tensor=TD(DT.FLOAT16, (6, 4, 3, 3))), "filter_tensor.data_type"),
    (dict(mode=7), "mode"),
])
def test_refused_descriptors_name_their_field(dev, change, field):
    import dataclasses

    base = kdml.ConvolutionDesc(TD(F, (1, 4, 5, 5)), TD(F, (6, 4, 3, 3)), TD(F, (1, 6, 1, 1)), TD(F, (1, 6, 3, 3)))
    with pytest.raises(kdml.InvalidArgumentError, match=f"^{field.replace('[', '.').replace(']', '.')}"):
        dev.compile(dataclasses.replace(base, **change))


def test_unsupported_direction_activation_and_type(dev):
    import dataclasses

    base = kdml.ConvolutionDesc(TD(F, (1, 4, 5, 5)), TD(F, (6, 4, 3, 3)), None, TD(F, (1, 6, 3, 3)))
    with pytest.raises(kdml.UnsupportedError, match="^fused_activation"):
        dev.compile(dataclasses.replace(base, fused_activation=kdml.ActivationSoftplusDesc(None, None)))
    i32 = DT.INT32
    with pytest.raises(kdml.UnsupportedError, match="input_tensor"):
        dev.compile(kdml.ConvolutionDesc(TD(i32, (1, 4, 5, 5)), TD(i32, (6, 4, 3, 3)), None, TD(i32, (1, 6, 3, 3))))


def test_one_dimensional_needs_feature_level_3_0():
    from helpers import compile_at_level

    d = kdml.ConvolutionDesc(TD(F, (1, 2, 7)), TD(F, (3, 2, 3)), None, TD(F, (1, 3, 5)))
    with pytest.raises(kdml.UnsupportedError):
        compile_at_level(FL.FL_2_1, d)
    compile_at_level(FL.FL_3_0, d)


def test_capped_grid_loops_over_tiles_and_groups(dev, rng, monkeypatch):
    """Where the device's work-group counts are smaller than the pixel tiles (x) or the groups (z),
    each work-group takes several: the same bits as the full grid."""
    import types

    monkeypatch.setenv("KDML_CONV_KERNEL", "tiled")
    xs, ws, g = (2, 6, 13, 11), (24, 2, 3, 3), 3  # 2 x 11 x 9 = 198 pixels: 4 tiles; 3 groups
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal(ws).astype(np.float32)
    b = rng.standard_normal(ws[0]).astype(np.float32)
    want, s = reference(x, w, b, (1, 1), (1, 1), (0, 0), (0, 0), g)
    bd = TD(F, (1, 24, 1, 1))
    desc = kdml.ConvolutionDesc(TD(F, xs), TD(F, ws), bd, TD(F, want.shape), group_count=g)
    got = {}
    limits = dict(dev.limits)
    for cap in (None, (3, 65535, 2), (1, 65535, 1)):
        if cap is not None:
            monkeypatch.setattr(dev, "limits", types.MappingProxyType({**limits, "max_compute_work_group_count": cap}))
        op = dev.compile(desc)
        assert cap is None or op.plans[0].groups == (min(4, cap[0]), 1, min(3, cap[2]))
        y = dev.empty(desc.output_tensor)
        op.execute([dev.tensor(x), dev.tensor(w), dev.tensor(b.reshape(bd.sizes))], [y])
        got[cap] = y.numpy()
    check(got[None], want, s, 18, F)
    for cap in got:
        np.testing.assert_array_equal(got[cap].view(np.uint32), got[None].view(np.uint32))


@pytest.mark.parametrize("dt", [DT.FLOAT32, DT.FLOAT16], ids=lambda d: d.name)
def test_large_values_and_signed_zeros(dev, rng, dt):
    """Sums beyond the type's range give an infinity of their sign where the float64 sum is far
    beyond it (every partial sum then overflows the same way); -0 inputs give zeros."""
    npd = dt.numpy_dtype
    big = float(np.finfo(npd).max) / 4
    x = (rng.uniform(0.5, 1.0, (1, 3, 5, 5)) * big).astype(npd)
    w = np.full((2, 3, 2, 2), 8.0, npd)
    w[1] = -8.0  # every term of a channel the same sign: the first product already overflows
    got = kdml.conv(x, w).numpy()
    assert np.all(got[:, 0] == np.inf) and np.all(got[:, 1] == -np.inf)
    z = np.full((1, 2, 4, 4), -0.0, npd)
    wz = rng.standard_normal((3, 2, 3, 3)).astype(npd)
    gz = kdml.conv(z, wz, start_padding=(1, 1), end_padding=(1, 1)).numpy()
    assert np.all(gz == 0)


BACKWARD_CASES = [  # x sizes, filter sizes (Cin, CoutG, window), strides, dilations, start, end, output padding, groups
    ((1, 3, 5, 5), (3, 4, 3, 3), (2, 2), (1, 1), (1, 1), (1, 1), (1, 1), 1),
    ((2, 4, 4, 6), (4, 3, 2, 3), (1, 2), (2, 1), (0, 1), (1, 0), (0, 1), 2),
    ((1, 6, 5, 5), (6, 1, 3, 3), (2, 2), (1, 1), (1, 1), (1, 1), (0, 0), 6),  # depthwise
    ((2, 5, 9), (5, 7, 4), (3,), (1,), (1,), (2,), (2,), 1),  # 1-D
    ((1, 2, 3, 4, 3), (2, 3, 2, 3, 2), (2, 1, 2), (1, 2, 1), (0, 1, 1), (1, 0, 0), (1, 0, 1), 1),  # 3-D
    ((1, 70, 5, 5), (70, 66, 2, 2), (2, 2), (1, 1), (0, 0), (0, 0), (0, 0), 1),  # tiles on both axes
]


@pytest.mark.parametrize("split", [1, 3])
@pytest.mark.parametrize("dt", [DT.FLOAT32, DT.FLOAT16], ids=lambda d: d.name)
@pytest.mark.parametrize("case", range(len(BACKWARD_CASES)))
def test_backward_against_numpy(dev, rng, monkeypatch, case, dt, split):
    """BACKWARD (transposed convolution) against a scattering float64 reference: strided inputs and
    filters at random offsets, strided outputs poisoned first, both modes, bias and ReLU; in one
    pass and split into parts (split-K)."""
    monkeypatch.setenv("KDML_CONV_SPLIT", str(split))
    xs, ws, st, dl, ps, pe, op, g = BACKWARD_CASES[case]
    flip, relu, bias = bool(rng.integers(2)), bool(rng.integers(2)), case % 2 == 0
    npd = dt.numpy_dtype
    x = (rng.standard_normal(xs) * 2).astype(npd)
    w = (rng.standard_normal(ws) * 0.5).astype(npd)
    cout = ws[1] * g
    b = rng.standard_normal(cout).astype(npd) if bias else None
    want, s = reference_backward(x, w, b, st, dl, ps, pe, op, g, flip, relu)
    xd = TD(dt, xs, random_strides(rng, xs, allow_broadcast=False))
    wd = TD(dt, ws, random_strides(rng, ws, allow_broadcast=False))
    bd = TD(dt, (1, cout) + (1,) * (len(xs) - 2)) if bias else None
    yd = TD(dt, want.shape, random_strides(rng, want.shape, allow_broadcast=False))
    tx, _ = place(dev, rng, xd, x)
    tw, _ = place(dev, rng, wd, w)
    tb = place(dev, rng, bd, b.reshape(bd.sizes))[0] if bias else None
    ty, _ = place(dev, rng, yd)
    before = poison_against(ty, want.astype(npd), rng)
    desc = kdml.ConvolutionDesc(xd, wd, bd, yd, kdml.ConvolutionMode(0 if flip else 1), kdml.ConvolutionDirection.BACKWARD,
                                st, dl, ps, pe, op, g, kdml.ActivationReluDesc(None, None) if relu else None)
    dev.compile(desc).execute([tx, tw, tb], [ty])
    after = assert_outside_unchanged(ty, before)
    got = read_logical(after, ty.offset, yd)
    check(got, want, s, ws[0] // g * int(np.prod(ws[2:])), dt)


def test_backward_helper_and_refusals(dev, rng):
    import dataclasses

    x = rng.standard_normal((2, 4, 5, 5)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    b = rng.standard_normal(6).astype(np.float32)
    want, s = reference_backward(x, w, b, (2, 2), (1, 1), (1, 1), (1, 0), (1, 1), 2, relu=True)
    got = kdml.conv_transpose(x, w, b, strides=(2, 2), start_padding=(1, 1), end_padding=(1, 0), output_padding=(1, 1),
                              groups=2, relu=True)
    check(got.numpy(), want, s, 18, F)
    B = kdml.ConvolutionDirection.BACKWARD
    base = kdml.ConvolutionDesc(TD(F, (1, 4, 3, 3)), TD(F, (4, 2, 3, 3)), None, TD(F, (1, 2, 5, 5)), direction=B)
    dev.compile(base)
    for change, field in ((dict(filter_tensor=TD(F, (2, 2, 3, 3))), "filter_tensor.sizes"),
                          (dict(output_tensor=TD(F, (1, 2, 6, 6))), "output_tensor.sizes"),
                          (dict(output_padding=(1, 1)), "output_tensor.sizes"),
                          (dict(group_count=3), "group_count"),
                          (dict(bias_tensor=TD(F, (1, 4, 1, 1))), "bias_tensor.sizes")):
        with pytest.raises(kdml.InvalidArgumentError, match=f"^{field}"):
            dev.compile(dataclasses.replace(base, **change))


@pytest.mark.parametrize("dt", [DT.FLOAT32, DT.FLOAT16], ids=lambda d: d.name)
def test_fused_relu_has_activation_relus_bits_and_identity_applies_nothing(dev, dt):
    """The fused ReLU gives ACTIVATION_RELU's bits: a sum that rounds to -0 (FLOAT16: a negative
    below the smallest subnormal) comes out +0, NaN stays NaN; ACTIVATION_IDENTITY fuses as a no-op."""
    import dataclasses

    npd = dt.numpy_dtype
    bits = np.uint16 if dt == DT.FLOAT16 else np.uint32
    tiny = np.float16(2.0 ** -13) if dt == DT.FLOAT16 else np.float32(2.0 ** -75)  # products below the type's least
    x = np.array([[[tiny, np.nan, 1.0, -1.0]]], npd)
    w = np.array([[[-tiny]]], npd)
    plain = kdml.conv(x, w).numpy().view(bits).ravel()
    fused = kdml.conv(x, w, relu=True).numpy().view(bits).ravel()
    neg0 = 0x8000 if dt == DT.FLOAT16 else 0x80000000
    # FLOAT16: -0 without the ReLU, +0 with it (FLOAT32 sums start at +0 and never give -0)
    assert plain[0] == neg0 if dt == DT.FLOAT16 else plain[0] in (0, neg0)
    assert fused[0] == 0 and fused[2] == 0 and plain.view(npd)[2] < 0
    assert np.isnan(fused.view(npd)[1]) and fused[3] == plain[3] and plain.view(npd)[3] > 0
    base = kdml.ConvolutionDesc(TD(dt, x.shape), TD(dt, w.shape), None, TD(dt, x.shape))
    y = dev.empty(base.output_tensor)
    dev.compile(dataclasses.replace(base, fused_activation=kdml.ActivationIdentityDesc(None, None))).execute(
        [dev.tensor(x), dev.tensor(w), None], [y])
    np.testing.assert_array_equal(y.numpy().view(bits).ravel(), plain)
    with pytest.raises(kdml.InvalidArgumentError, match="^fused_activation"):
        dev.compile(dataclasses.replace(base, fused_activation=kdml.ActivationReluDesc(base.input_tensor, None)))


def test_helper_pads_forms(dev, rng):
    """`pads`: an int, one value per axis (both sides) or ONNX's starts then ends; not with
    start_padding / end_padding."""
    x = rng.standard_normal((1, 2, 6, 5)).astype(np.float32)
    w = rng.standard_normal((3, 2, 3, 2)).astype(np.float32)

    def same(pads, start, end):
        a = kdml.conv(x, w, pads=pads).numpy()
        b = kdml.conv(x, w, start_padding=start, end_padding=end).numpy()
        np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))

    same(1, (1, 1), (1, 1))
    same((2, 0), (2, 0), (2, 0))
    same((0, 1, 2, 3), (0, 1), (2, 3))
    wt = rng.standard_normal((2, 3, 3, 3)).astype(np.float32)
    a = kdml.conv_transpose(x, wt, strides=(2, 2), pads=(1, 0, 0, 1)).numpy()
    b = kdml.conv_transpose(x, wt, strides=(2, 2), start_padding=(1, 0), end_padding=(0, 1)).numpy()
    np.testing.assert_array_equal(a, b)
    for bad in ((1, 2, 3), dict(pads=1, start_padding=(1, 1))):
        kw = bad if isinstance(bad, dict) else dict(pads=bad)
        with pytest.raises(kdml.InvalidArgumentError, match="^pads"):
            kdml.conv(x, w, **kw)


def _grouped_relu(rng):
    """A grouped 3x3 convolution with bias and fused ReLU (2 x 6 x 13 x 11 input, 24 output channels
    in 3 groups, K = 18: two steps of 16) and its float64 reference: x, w, b, the bias desc, the
    descriptor, the expected output and the bound's S."""
    xs, ws, g = (2, 6, 13, 11), (24, 2, 3, 3), 3
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal(ws).astype(np.float32)
    b = rng.standard_normal(ws[0]).astype(np.float32)
    want, s = reference(x, w, b, (1, 1), (1, 1), (0, 0), (0, 0), g, relu=True)
    bd = TD(F, (1, 24, 1, 1))
    desc = kdml.ConvolutionDesc(TD(F, xs), TD(F, ws), bd, TD(F, want.shape), group_count=g,
                                fused_activation=kdml.ActivationReluDesc(None, None))
    return x, w, b, bd, desc, want, s


def test_split_k_plans_and_choice(dev, rng, monkeypatch):
    """Split-K: two dispatches (the parts' partial sums, then their sum, bias, ReLU), parts of a
    multiple of 16 terms, none where the reduction is one step; within the bound under capped
    grids too. The default: GPUs only, for grids of fewer than 256 work-groups and reductions of
    at least 512 terms."""
    import types

    from kompute_dml.ops import convolution as conv_mod

    monkeypatch.setenv("KDML_CONV_KERNEL", "tiled")
    x, w, b, bd, desc, want, s = _grouped_relu(rng)
    limits = dict(dev.limits)
    got = {}
    for split, cap in ((1, None), (2, None), (5, None), (2, (5, 65535, 1)), (2, (5, 1, 2))):
        monkeypatch.setenv("KDML_CONV_SPLIT", str(split))
        if cap is not None:
            monkeypatch.setattr(dev, "limits", types.MappingProxyType({**limits, "max_compute_work_group_count": cap}))
        op = dev.compile(desc)
        parts = 2 if split > 1 and (cap is None or cap[1] >= 2) else 1  # K = 18: at most 2 parts of 16
        assert [v[:5] for v in op.variants] == (["convs", "convr"] if parts > 1 else ["conv_"])
        if parts > 1:
            assert op.plans[0].groups[1] == parts
        y = dev.empty(desc.output_tensor)
        op.execute([dev.tensor(x), dev.tensor(w), dev.tensor(b.reshape(bd.sizes))], [y])
        got[split, cap] = y.numpy()
        check(got[split, cap], want, s, 18, F)
    np.testing.assert_array_equal(got[2, None], got[5, None])
    np.testing.assert_array_equal(got[2, None], got[2, (5, 65535, 1)])
    monkeypatch.setattr(dev, "limits", types.MappingProxyType(limits))
    for split in ("1", "2"):  # the other path's pipelines (OperatorSpec.ahead) can be made
        monkeypatch.setenv("KDML_CONV_SPLIT", split)
        ahead = conv_mod.plans_ahead(dev, dev.compile(desc), set())
        assert [p.variant[:5] for p in ahead] == (["convs", "convr", "convl"] if split == "1" else ["conv_"])
        dev.engine.prepare_many(ahead)
    monkeypatch.setenv("KDML_CONV_KERNEL", "lanes")  # and from the lanes kernel: the tiled kernel's two paths
    lanes = dev.compile(desc)
    assert lanes.variants == ["convl_f32"]
    ahead = conv_mod.plans_ahead(dev, lanes, set())
    assert [p.variant[:5] for p in ahead] == ["convs", "convr", "conv_"]
    dev.engine.prepare_many(ahead)
    monkeypatch.setenv("KDML_CONV_KERNEL", "tiled")
    gpu = types.SimpleNamespace(policy=types.SimpleNamespace(name="discrete-gpu"))
    cpu = types.SimpleNamespace(policy=types.SimpleNamespace(name="cpu"))
    monkeypatch.delenv("KDML_CONV_SPLIT")
    assert conv_mod.conv_split(cpu, 8, 4608) == 1
    assert conv_mod.conv_split(gpu, 8, 4608) == 32  # ResNet's 7 x 7 x 512 3x3 layer at batch 1: parts of 144
    assert conv_mod.conv_split(gpu, 49, 576) == 6  # 56 x 56, 64 -> 64, 3x3: 6 x 49 groups
    assert conv_mod.conv_split(gpu, 2, 288) == 9  # MobileNetV3's 1x1 288 -> 96 at 7 x 7: parts of 2 K steps
    assert conv_mod.conv_split(gpu, 300, 4608) == 1 and conv_mod.conv_split(gpu, 8, 40) == 1


def test_lanes_kernel_under_capped_grids(dev, rng, monkeypatch):
    """The lanes kernel (KDML_CONV_KERNEL=lanes) where the device's work-group count along x is
    smaller than the pixel blocks (each work-group loops over several, the barriers uniform): the
    same bits as uncapped; more channel blocks than the y count: UnsupportedError naming the filter."""
    import types

    monkeypatch.setenv("KDML_CONV_KERNEL", "lanes")
    x, w, b, bd, desc, want, s = _grouped_relu(rng)
    limits = dict(dev.limits)
    got = []
    for cap in (None, (5, 65535, 1)):
        if cap is not None:
            monkeypatch.setattr(dev, "limits", types.MappingProxyType({**limits, "max_compute_work_group_count": cap}))
        op = dev.compile(desc)
        assert op.variants == ["convl_f32"] and op.plans[0].groups[0] == (5 if cap else 50)  # 198 pixels / 4
        y = dev.empty(desc.output_tensor)
        op.execute([dev.tensor(x), dev.tensor(w), dev.tensor(b.reshape(bd.sizes))], [y])
        got.append(y.numpy())
        check(got[-1], want, s, 18, F)
    np.testing.assert_array_equal(got[0].view(np.uint32), got[1].view(np.uint32))
    monkeypatch.setattr(dev, "limits", types.MappingProxyType({**limits, "max_compute_work_group_count": (65535, 2, 1)}))
    with pytest.raises(kdml.UnsupportedError, match="^filter_tensor: 24 output channels need 3 work-groups"):
        dev.compile(desc)


@pytest.mark.parametrize("dt", [DT.FLOAT32, DT.FLOAT16], ids=lambda d: d.name)
def test_direct_row_variants_by_size_stride_and_dilation(dev, monkeypatch, dt):
    """The policy's table (coop_policy.DIRECT_ROW_MIN_OUTPUTS): a depthwise 3 x 3 layer takes the row
    variant from its bound of outputs, one output per invocation below it; a horizontal dilation or a
    stride beyond 2 never takes rows."""
    from kompute_dml.runtime.coop_policy import DIRECT_ROW_MIN_OUTPUTS

    monkeypatch.delenv("KDML_CONV_KERNEL", raising=False)
    t = "f16" if dt == DT.FLOAT16 else "f32"

    def variant(c, hw, stride=1, dil=1):
        side = (hw + 2 - 2 * dil - 1) // stride + 1
        desc = kdml.ConvolutionDesc(TD(dt, (1, c, hw, hw)), TD(dt, (c, 1, 3, 3)), None, TD(dt, (1, c, side, side)),
                                    strides=(stride, stride), dilations=(dil, dil), start_padding=(1, 1),
                                    end_padding=(1, 1), group_count=c)
        return dev.compile(desc).variants[0]

    bound = DIRECT_ROW_MIN_OUTPUTS[(dt == DT.FLOAT16, 3, 1)]
    big = -(-bound // (64 * 64))
    assert variant(big, 64) == f"convd3s1_{t}"
    assert variant(max(1, bound // (64 * 64) - 1), 64) == f"convd3_{t}"
    assert variant(big, 64, dil=2) == f"convd3_{t}"
    assert variant(big, 64, stride=3) == f"convd3_{t}"
