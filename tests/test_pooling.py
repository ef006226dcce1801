"""MAX_POOLING2 and AVERAGE_POOLING (ops/pooling.py, shaders/pooling.comp) against an independent
numpy reference (each window gathered from the input with its padding marked): 2-D and 3-D,
strides, dilations (MAX), asymmetric padding, IncludePadding, MAX's UINT32 indices (first maximum,
flat row-major input index), FLOAT32 and FLOAT16, strided inputs and outputs at random offsets,
outputs poisoned first and every other byte unchanged; NaN and infinities; refused descriptors."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest
from helpers import assert_output, assert_outside_unchanged, place, poison_against, random_strides, read_logical

import kompute_dml as kdml

DT = kdml.DataType
TD = kdml.TensorDesc
U = 2.0 ** -24


def reference(x, window, strides, dil, start, end, fn, include=False):
    """float64 outputs, MAX's flat indices, and sum |x| per window (AVERAGE's error scale)."""
    x64 = x.astype(np.float64)
    n = x.ndim - 2
    sp = x.shape[2:]
    out_sp = [(sp[i] + start[i] + end[i] - ((window[i] - 1) * dil[i] + 1)) // strides[i] + 1 for i in range(n)]
    y = np.zeros(x.shape[:2] + tuple(out_sp))
    idx = np.zeros(y.shape, np.int64)
    scale = np.zeros(y.shape)
    flat = np.arange(x.size).reshape(x.shape)
    for o in itertools.product(*(range(k) for k in out_sp)):
        pos = [[o[i] * strides[i] - start[i] + k * dil[i] for k in range(window[i])] for i in range(n)]
        inside = [[p for p in ax if 0 <= p < sp[i]] for i, ax in enumerate(pos)]
        vals = x64[(slice(None), slice(None), *np.ix_(*inside))].reshape(x.shape[0], x.shape[1], -1)
        ids = flat[(slice(None), slice(None), *np.ix_(*inside))].reshape(x.shape[0], x.shape[1], -1)
        at = (slice(None), slice(None), *o)
        if fn == "max":
            nan = np.isnan(vals)
            first = np.where(nan.any(-1), nan.argmax(-1), np.argmax(np.where(nan, -np.inf, vals), -1))
            y[at] = np.take_along_axis(vals, first[..., None], -1)[..., 0]
            idx[at] = np.take_along_axis(ids, first[..., None], -1)[..., 0]
        else:
            count = int(np.prod(window)) if include else vals.shape[-1]
            y[at] = vals.sum(-1) / count
            scale[at] = np.abs(vals).sum(-1) / count
    return y, idx, scale


def _placed(dev, rng, dt, x, want, want_idx, with_indices):
    """x in a random strided layout; the output (and the UINT32 indices where `with_indices`) placed
    likewise and poisoned against the wanted values: (xd, yd, tx, ty, before, idd, ti, ibefore)."""
    xd = TD(dt, x.shape, random_strides(rng, x.shape, allow_broadcast=False))
    yd = TD(dt, want.shape, random_strides(rng, want.shape, allow_broadcast=False))
    tx, _ = place(dev, rng, xd, x)
    ty, _ = place(dev, rng, yd)
    before = poison_against(ty, want.astype(dt.numpy_dtype), rng)
    if not with_indices:
        return xd, yd, tx, ty, before, None, None, None
    idd = TD(DT.UINT32, want.shape, random_strides(rng, want.shape, allow_broadcast=False))
    ti, _ = place(dev, rng, idd)
    return xd, yd, tx, ty, before, idd, ti, poison_against(ti, want_idx.astype(np.uint32), rng)


CASES = [  # x sizes, window, strides, dilations, start, end
    ((2, 3, 9, 11), (3, 3), (2, 2), (1, 1), (1, 1), (1, 1)),
    ((1, 4, 8, 8), (2, 2), (2, 2), (1, 1), (0, 0), (0, 0)),
    ((1, 2, 7, 9), (3, 2), (1, 2), (2, 1), (0, 1), (2, 0)),
    ((1, 2, 4, 5, 6), (2, 3, 2), (1, 2, 1), (1, 1, 2), (1, 0, 1), (0, 1, 0)),
    ((1, 5, 7, 7), (7, 7), (1, 1), (1, 1), (0, 0), (0, 0)),  # global
]


@pytest.mark.parametrize("dt", [DT.FLOAT32, DT.FLOAT16], ids=lambda d: d.name)
@pytest.mark.parametrize("fn", ["max", "avg", "avg-include"])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_pooling_against_numpy(dev, rng, case, fn, dt):
    xs, win, st, dl, ps, pe = CASES[case]
    if fn != "max":
        dl = (1,) * len(win)
    npd = dt.numpy_dtype
    x = (rng.standard_normal(xs) * 3).astype(npd)
    if fn == "max":
        x = np.round(x, 0).astype(npd)  # ties: the first maximum must win
    want, want_idx, scale = reference(x, win, st, dl, ps, pe, fn[:3], fn == "avg-include")
    xd, yd, tx, ty, before, idd, ti, ibefore = _placed(dev, rng, dt, x, want, want_idx, fn == "max")
    if fn == "max":
        dev.compile(kdml.MaxPooling2Desc(xd, yd, idd, win, st, ps, pe, dl)).execute([tx], [ty, ti])
        got_idx = read_logical(assert_outside_unchanged(ti, ibefore), ti.offset, idd)
        np.testing.assert_array_equal(got_idx, want_idx.astype(np.uint32))
    else:
        dev.compile(kdml.AveragePoolingDesc(xd, yd, win, st, ps, pe, fn == "avg-include")).execute([tx], [ty])
    got = read_logical(assert_outside_unchanged(ty, before), ty.offset, yd).astype(np.float64)
    if fn == "max":
        np.testing.assert_array_equal(got, want.astype(npd).astype(np.float64))
    else:
        n = int(np.prod(win))
        bound = (n + 4) * U * scale + (np.abs(want) * 2.0 ** -11 + 2.0 ** -25 if dt == DT.FLOAT16 else 0)
        assert np.all(np.abs(got - want) <= bound), float(np.max(np.abs(got - want) / np.maximum(bound, 1e-300)))


def test_special_values_and_helpers(dev, rng):
    x = rng.standard_normal((1, 1, 4, 4)).astype(np.float32)
    x[0, 0, 0, 1], x[0, 0, 2, 2], x[0, 0, 3, 0] = np.nan, np.inf, -np.inf
    y, idx = kdml.max_pool(x, (2, 2), strides=(2, 2), indices=True, device=dev)
    want, want_idx, _ = reference(x, (2, 2), (2, 2), (1, 1), (0, 0), (0, 0), "max")
    np.testing.assert_array_equal(y.numpy(), want.astype(np.float32))  # NaN at the first window, inf where it is
    np.testing.assert_array_equal(idx.numpy(), want_idx.astype(np.uint32))
    a = kdml.avg_pool(x, (2, 2), strides=(2, 2), device=dev).numpy()
    assert np.isnan(a[0, 0, 0, 0]) and a[0, 0, 1, 1] == np.inf


@pytest.mark.parametrize("fn", ["max", "avg"])
def test_float16_values_exact_subnormals_and_specials(dev, fn):
    """The float16 loads (f16_bits.glsl h2f_value) give every float16 value exactly, subnormals included
    (a device may flush them in its own conversion): a 1 x 1 window passes every finite nonzero float16
    of either sign bit for bit; infinities stay infinite, NaNs NaN."""
    bits = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    x = bits.view(np.float16).reshape(1, 1, 256, 256)
    pool = kdml.max_pool if fn == "max" else kdml.avg_pool
    got = pool(x, (1, 1), device=dev).numpy().reshape(-1)
    flat = x.reshape(-1)
    keep = np.isfinite(flat) & ((bits & 0x7FFF) != 0)
    np.testing.assert_array_equal(got.view(np.uint16)[keep], bits[keep])
    np.testing.assert_array_equal(got[np.isinf(flat)], flat[np.isinf(flat)])
    assert np.all(np.isnan(got[np.isnan(flat)])) and np.all(got[(bits & 0x7FFF) == 0] == 0)


F = DT.FLOAT32
BASE = kdml.MaxPooling2Desc(TD(F, (1, 2, 5, 5)), TD(F, (1, 2, 2, 2)), None, (3, 3), (2, 2))


@pytest.mark.parametrize("change, field", [
    (dict(window_size=(3,)), "window_size"),
    (dict(window_size=(0, 3)), "window_size.0."),
    (dict(strides=(2, 0)), "strides.1."),
    (dict(output_tensor=TD(F, (1, 2, 3, 3))), "output_tensor.sizes"),
    (dict(output_tensor=TD(DT.FLOAT16, (1, 2, 2, 2))), "output_tensor.data_type"),
    (dict(output_indices_tensor=TD(DT.UINT32, (1, 2, 3, 2))), "output_indices_tensor.sizes"),
    (dict(dilations=(0, 1)), "dilations.0."),
])
def test_refused_descriptors_name_their_field(dev, change, field):
    with pytest.raises(kdml.InvalidArgumentError, match=f"^{field}"):
        dev.compile(dataclasses.replace(BASE, **change))


def test_unsupported_type(dev):
    with pytest.raises(kdml.UnsupportedError, match="input_tensor"):
        dev.compile(kdml.AveragePoolingDesc(TD(DT.INT32, (1, 2, 5, 5)), TD(DT.INT32, (1, 2, 2, 2)), (3, 3), (2, 2)))


@pytest.mark.parametrize("dt", [DT.FLOAT32, DT.FLOAT16], ids=lambda d: d.name)
@pytest.mark.parametrize("xs, win, st, dl, ps, pe", [
    ((2, 3, 13), (3,), (2,), (1,), (1,), (1,)),
    ((1, 4, 17), (4,), (3,), (2,), (0,), (2,)),
    ((3, 2, 9, 8), (3, 2), (2, 1), (1, 2), (1, 0), (0, 1)),
], ids=["1d", "1d-dilated", "2d"])
def test_helpers_into_strided_outputs(dev, rng, dt, xs, win, st, dl, ps, pe):
    """kdml.max_pool (values and indices_out) and kdml.avg_pool, 1-D (through the (N, C, 1, W)
    view) and 2-D, from strided inputs into strided outputs at offsets: every other byte unchanged."""
    npd = dt.numpy_dtype
    x = np.round(rng.standard_normal(xs) * 3).astype(npd)  # ties: the first maximum must win
    x.flat[rng.choice(x.size, 2, replace=False)] = [np.nan, -np.inf]
    xd = TD(dt, xs, random_strides(rng, xs, allow_broadcast=False))
    tx, _ = place(dev, rng, xd, x)
    kw = dict(strides=st, start_padding=ps, end_padding=pe, dilations=dl)
    want, want_idx, _ = reference(x, win, st, dl, ps, pe, "max")
    ty, _ = place(dev, rng, TD(dt, want.shape, random_strides(rng, want.shape, allow_broadcast=False)))
    ti, _ = place(dev, rng, TD(DT.UINT32, want.shape, random_strides(rng, want.shape, allow_broadcast=False)))
    before, ibefore = poison_against(ty, want.astype(npd), rng), poison_against(ti, want_idx.astype(np.uint32), rng)
    y, idx = kdml.max_pool(tx, win, out=ty, indices_out=ti, **kw)
    assert y is ty and idx is ti
    assert_output(ty, before, want.astype(npd))
    assert_output(ti, ibefore, want_idx.astype(np.uint32))
    for include in (False, True):
        want, _, scale = reference(x, win, st, dl, ps, pe, "avg", include)
        ty, _ = place(dev, rng, TD(dt, want.shape, random_strides(rng, want.shape, allow_broadcast=False)))
        before = poison_against(ty, want.astype(npd), rng)
        kdml.avg_pool(tx, win, include_padding=include, out=ty, **kw)
        got = read_logical(assert_outside_unchanged(ty, before), ty.offset, ty.desc).astype(np.float64)
        finite = np.isfinite(want)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))  # a NaN in the window
        bound = (np.prod(win) + 4) * U * scale + (np.abs(want) * 2.0 ** -11 + 2.0 ** -25 if dt == DT.FLOAT16 else 0)
        assert np.all(np.abs(got[finite] - want[finite]) <= bound[finite])
        assert np.array_equal(got[~finite], want[~finite], equal_nan=True)


@pytest.mark.parametrize("kernel", ["auto", "group"])
def test_windows_wholly_in_the_padding_and_helper_errors(dev, kernel, monkeypatch):
    """Both kernels: -inf and index 0, NaN (0 / 0) or 0 with include_padding; the helpers' errors
    name their argument and leave the device usable. (A device of its own for the forced kernel:
    the helpers' compiled operators are cached by descriptor.)"""
    if kernel == "group":
        monkeypatch.setenv("KDML_POOL_KERNEL", kernel)
        dev = kdml.Device()
    try:
        _wholly_in_the_padding(dev, kernel)
    finally:
        if kernel == "group":
            dev.close()


def _wholly_in_the_padding(dev, kernel):
    x = np.arange(4, dtype=np.float32).reshape(1, 1, 4)
    op = dev.compile(kdml.AveragePoolingDesc(TD(DT.FLOAT32, (1, 1, 1, 4)), TD(DT.FLOAT32, (1, 1, 1, 5)), (1, 1),
                                             (), (0, 1), (0, 0)))
    assert op.plans[0].variant.endswith("_group") == (kernel == "group")
    y, idx = kdml.max_pool(x, (1,), start_padding=(1,), end_padding=(1,), indices=True, device=dev)
    np.testing.assert_array_equal(y.numpy(), [[[-np.inf, 0, 1, 2, 3, -np.inf]]])
    np.testing.assert_array_equal(idx.numpy(), [[[0, 0, 1, 2, 3, 0]]])
    a = kdml.avg_pool(x, (1,), start_padding=(1,), device=dev).numpy()
    assert np.isnan(a[0, 0, 0]) and a[0, 0, 1] == 0
    assert kdml.avg_pool(x, (1,), start_padding=(1,), include_padding=True, device=dev).numpy()[0, 0, 0] == 0
    with pytest.raises(kdml.InvalidArgumentError, match="^strides"):
        kdml.max_pool(x, (2,), strides=(1, 1), device=dev)
    with pytest.raises(kdml.InvalidArgumentError, match="^x"):
        kdml.max_pool(x.reshape(4), (2,), device=dev)
    with pytest.raises(kdml.InvalidArgumentError, match="^indices_out"):
        kdml.max_pool(x, (2,), indices_out=dev.tensor(np.zeros((1, 1, 3), np.int32)), device=dev)
    with pytest.raises(kdml.InvalidArgumentError, match="^output_tensor.sizes"):
        kdml.avg_pool(x, (5,), device=dev)
    np.testing.assert_array_equal(kdml.max_pool(x, (2,), device=dev).numpy(), [[[1, 2, 3]]])  # still usable


# large windows over few outputs: the work-group kernel (pooling.choose_pool_kernel)
GROUP_CASES = [  # (x sizes, window, strides, dilations, start, end)
    ((2, 3, 23, 19), (23, 19), (1, 1), (1, 1), (0, 0), (0, 0)),  # global, odd sizes
    ((1, 2, 20, 21), (16, 17), (3, 2), (1, 1), (2, 1), (1, 2)),  # strided, asymmetric padding
    ((1, 2, 60, 25), (26, 10), (2, 3), (2, 2), (3, 1), (0, 2)),  # dilated
    ((1, 3, 7, 8, 9), (7, 8, 9), (1, 1, 1), (1, 1, 1), (0, 0, 0), (0, 0, 0)),  # 3-D global
    ((2, 2, 1, 700), (1, 600), (1, 50), (1, 1), (0, 30), (0, 40)),  # 1-D as height 1
]


@pytest.mark.parametrize("kernel", ["group", "team"])
@pytest.mark.parametrize("dt", [DT.FLOAT32, DT.FLOAT16], ids=lambda d: d.name)
@pytest.mark.parametrize("fn", ["max", "avg", "avg-include"])
@pytest.mark.parametrize("case", range(len(GROUP_CASES)))
def test_group_kernel_against_numpy(dev, rng, case, fn, dt, kernel, monkeypatch):
    """One work group per output (pooling.choose_pool_kernel), or one team of contract.POOL_TEAM (forced:
    GPUs take it for many outputs): MAX's values and indices as the sequential rule's (ties, NaN, -inf; a
    window wholly in the padding), the same bits as the one-invocation kernel; AVERAGE within
    (ceil(n / T) + log2 T + 4) u S / count (T partial sums, log2 T tree levels)."""
    ts = 256 if kernel == "group" else kdml.ops.contract.POOL_TEAM
    monkeypatch.setenv("KDML_POOL_KERNEL", kernel)  # (GPUs' rule takes the team kernel for some of these)
    xs, win, st, dl, ps, pe = GROUP_CASES[case]
    npd = dt.numpy_dtype
    x = (rng.standard_normal(xs) * 3).astype(npd)
    if fn == "max":
        x = np.round(x, 0).astype(npd)
        x.flat[rng.choice(x.size, 3, replace=False)] = [np.nan, -np.inf, np.inf]
    want, want_idx, scale = reference(x, win, st, dl, ps, pe, fn[:3], fn == "avg-include")
    xd, yd, tx, ty, before, idd, ti, ibefore = _placed(dev, rng, dt, x, want, want_idx, fn == "max")
    if fn == "max":
        desc = kdml.MaxPooling2Desc(xd, yd, idd, win, st, ps, pe, dl)
        op = dev.compile(desc)
        assert op.plans[0].variant.endswith(f"_{kernel}")
        op.execute([tx], [ty, ti])
        assert_output(ty, before, want.astype(npd))
        assert_output(ti, ibefore, want_idx.astype(np.uint32))
        monkeypatch.setenv("KDML_POOL_KERNEL", "thread")  # the one-invocation kernel: the same bits
        op = dev.compile(desc)
        assert not op.plans[0].variant.endswith(("_group", "_team"))
        ty2, ti2 = dev.empty(yd), dev.empty(idd)
        op.execute([tx], [ty2, ti2])
        assert np.array_equal(ty2.numpy(), ty.numpy(), equal_nan=True) and np.array_equal(ti2.numpy(), ti.numpy())
        return
    dil = (1,) * len(win) if fn != "max" and any(d != 1 for d in dl) else dl
    if dil != dl:
        want, _, scale = reference(x, win, st, dil, ps, pe, "avg", fn == "avg-include")
        yd = TD(dt, want.shape)
        ty, _ = place(dev, rng, yd)
        before = poison_against(ty, want.astype(npd), rng)
    op = dev.compile(kdml.AveragePoolingDesc(xd, yd, win, st, ps, pe, fn == "avg-include"))
    assert op.plans[0].variant.endswith(f"_{kernel}")
    op.execute([tx], [ty])
    got = read_logical(assert_outside_unchanged(ty, before), ty.offset, yd).astype(np.float64)
    n = int(np.prod(win))
    bound = (-(-n // ts) + ts.bit_length() - 1 + 4) * U * scale + (np.abs(want) * 2.0 ** -11 + 2.0 ** -25 if dt == DT.FLOAT16 else 0)
    assert np.all(np.abs(got - want) <= bound), float(np.max(np.abs(got - want) / np.maximum(bound, 1e-300)))


@pytest.mark.parametrize("dt", [DT.FLOAT32, DT.FLOAT16], ids=lambda d: d.name)
@pytest.mark.parametrize("sizes", [(2, 3, 30, 20), (1, 2, 5, 7, 9), (1, 1, 3, 1500)], ids=lambda s: "x".join(map(str, s)))
def test_global_run_same_bits(dev, rng, sizes, dt):
    """A global window whose taps address as one dimension (pooling.global_run) loads them several at
    a time, in the same order: the same bits as the same window over a layout that does not merge
    (a gap after each row: the generic loop), for AVERAGE (with and without padding counted) and LP."""
    x = (rng.standard_normal(sizes) * 3).astype(dt.numpy_dtype)
    win = sizes[2:]
    packed = TD(dt, sizes)
    st = list(packed.effective_strides)
    st[-2] = sizes[-1] + 3  # rows 3 elements apart
    for i in range(len(sizes) - 3, -1, -1):
        st[i] = st[i + 1] * sizes[i + 1]
    gapped = TD(dt, sizes, tuple(st))
    yd = TD(dt, (*sizes[:2], *(1,) * len(win)))
    outs = []
    for xd in (packed, gapped):
        tx, _ = place(dev, rng, xd, x)
        for desc in (kdml.AveragePoolingDesc(xd, yd, win, include_padding=True), kdml.AveragePoolingDesc(xd, yd, win),
                     kdml.LpPoolingDesc(xd, yd, win, p=2)):
            op = dev.compile(desc)
            flags = int(op.constants[0].numpy()[34])
            assert op.plans[0].variant.endswith("_group") and bool(flags & 8) == (xd is packed), (xd, flags)
            ty = dev.empty(yd)
            op.execute([tx], [ty])
            outs.append(ty.numpy())
    for packed_out, gapped_out in zip(outs[:3], outs[3:]):
        np.testing.assert_array_equal(packed_out.view(np.uint8), gapped_out.view(np.uint8))
    want = x.astype(np.float64).reshape(*sizes[:2], -1).mean(axis=2).reshape(yd.sizes)
    for got in outs[:2]:  # the averages, padding counted or not (there is none)
        assert np.allclose(got, want, rtol=1e-3 if dt == DT.FLOAT16 else 1e-5, atol=1e-3 if dt == DT.FLOAT16 else 1e-6)


@pytest.mark.parametrize("dt", [DT.INT8, DT.UINT8], ids=lambda d: d.name)
def test_group_kernel_bytes(dev, rng, dt):
    info = np.iinfo(dt.numpy_dtype)
    x = rng.integers(info.min, info.max, (2, 3, 17, 18), endpoint=True).astype(dt.numpy_dtype)
    y, idx = kdml.max_pool(x, (17, 18), start_padding=(1, 0), indices=True, device=dev)
    want, want_idx, _ = reference(x, (17, 18), (1, 1), (1, 1), (1, 0), (0, 0), "max")
    np.testing.assert_array_equal(y.numpy(), want.astype(x.dtype))
    np.testing.assert_array_equal(idx.numpy(), want_idx.astype(np.uint32))


@pytest.mark.parametrize("fn", ["max", "avg"])
@pytest.mark.parametrize("strides, pairs", [
    (None, True), ((300, 96, 14, 1), True), ((130, 43, 7, 1), False), ((1, 2, 6, 36), False),
], ids=["packed", "gapped-even", "odd-rows", "column-major"])
def test_float16_outputs_by_words_and_by_fields(dev, rng, fn, strides, pairs):
    """FLOAT16 outputs whose rows pack whole words: two adjacent outputs per invocation and one
    plain store (indices per element); others STORE_FIELD; both exact, every other byte unchanged."""
    from kompute_dml.ops.pooling import writes_words

    xs, win, st, ps, pe = (2, 3, 11, 13), (3, 3), (2, 2), (1, 1), (1, 0)
    x = np.round(rng.standard_normal(xs) * 3).astype(np.float16)
    want, want_idx, scale = reference(x, win, st, (1, 1), ps, pe, fn)
    assert want.shape == (2, 3, 6, 6)
    yd = TD(DT.FLOAT16, want.shape, strides)
    assert writes_words(yd) == pairs
    tx, _ = place(dev, rng, TD(DT.FLOAT16, xs), x)
    ty, _ = place(dev, rng, yd)
    before = poison_against(ty, want.astype(np.float16), rng)
    if fn == "max":
        idd = TD(DT.UINT32, want.shape, strides)
        ti, _ = place(dev, rng, idd)
        ibefore = poison_against(ti, want_idx.astype(np.uint32), rng)
        dev.compile(kdml.MaxPooling2Desc(tx.desc, yd, idd, win, st, ps, pe)).execute([tx], [ty, ti])
        assert_output(ty, before, want.astype(np.float16))
        assert_output(ti, ibefore, want_idx.astype(np.uint32))
        return
    dev.compile(kdml.AveragePoolingDesc(tx.desc, yd, win, st, ps, pe)).execute([tx], [ty])
    got = read_logical(assert_outside_unchanged(ty, before), ty.offset, yd).astype(np.float64)
    bound = 13 * U * scale + np.abs(want) * 2.0 ** -11 + 2.0 ** -25
    assert np.all(np.abs(got - want) <= bound)


def test_pool_kernel_choice(monkeypatch):
    """The work-group kernel for large windows over few outputs (global pooling at small batches),
    the one-invocation kernel for small windows or many outputs; KDML_POOL_KERNEL forces one."""
    from kompute_dml.ops.pooling import choose_pool_kernel

    monkeypatch.delenv("KDML_POOL_KERNEL", raising=False)
    assert choose_pool_kernel(196, 96)  # MobileNetV3's squeeze at 14 x 14, batch 1
    assert choose_pool_kernel(49, 576) and not choose_pool_kernel(49, 8 * 576)  # 7 x 7: batch 1, batch 8
    assert choose_pool_kernel(3136, 16) and not choose_pool_kernel(9, 4)  # 56 x 56; a 3x3 window
    # the team kernel on GPUs where the variant exists (pooling.TEAM_*): EfficientNet's squeeze pools at batch 8 and
    # MobileNetV3's at batch 1; not the largest windows over few outputs, nor the most outputs
    assert choose_pool_kernel(49, 8 * 1152, team=True, gpu=True) == choose_pool_kernel(196, 96, team=True, gpu=True) == "_team"
    assert choose_pool_kernel(49, 8 * 1152, team=True, gpu=False) == choose_pool_kernel(49, 8 * 1152, gpu=True) == ""
    assert choose_pool_kernel(3136, 96, team=True, gpu=True) == "_group"
    assert choose_pool_kernel(49, 8 * 2048, team=True, gpu=True) == ""
    monkeypatch.setenv("KDML_POOL_KERNEL", "thread")
    assert not choose_pool_kernel(3136, 16)
    monkeypatch.setenv("KDML_POOL_KERNEL", "group")
    assert choose_pool_kernel(9, 10 ** 6)
    monkeypatch.setenv("KDML_POOL_KERNEL", "team")
    assert choose_pool_kernel(9, 4, team=True) == "_team" and choose_pool_kernel(9, 4) == "_group"
    monkeypatch.setenv("KDML_POOL_KERNEL", "warp")
    with pytest.raises(ValueError, match="KDML_POOL_KERNEL='warp'"):
        choose_pool_kernel(9, 4)
