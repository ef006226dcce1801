"""FORWARD CONVOLUTION on float16 cooperative matrices (ops/conv_coop.py, shaders/conv_coop.comp)
against the float64 reference (tests/conv_reference.py) under docs/convolution.md's bound for the
tensor cores (gamma(5K + P) S: any order, any adder of the device's), forced through
KDML_CONV_KERNEL: 'coopmat' (tensor cores, skipped where the device lacks the capabilities or the
f16 shape) and 'coopmat-emulated' (each cooperative-matrix operation as plain subgroup code: every
tile load, bounds check, padding, double buffering, tile walk and epilogue path runs on lavapipe).
The emulated sums are the tiled kernel's (fma over k in order from +0), so FLOAT16 results must
also equal shaders/convolution.comp's bit for bit.

Cases: groups, strides, dilations, asymmetric padding, 1-D / 2-D / 3-D, odd sizes off the 16 x 16 x
16 fragments and the tiles, both modes (the filter's 16-byte loads and its element loads), random
strides and offsets on every tensor, outputs poisoned first and every byte outside them unchanged;
split-K; capped grids; the default tiles; FLOAT32 under allow_half_precision (the input and filter
rounded to float16 as they load, or a FLOAT16 filter) under the bound with the conversion's error;
the device policy's choice and what it refuses.
"""

from __future__ import annotations

import dataclasses
import types

import numpy as np
import pytest
from conv_reference import bound, gamma, half_inputs_bound, reference
from helpers import assert_outside_unchanged, place, poison_against, random_strides, read_logical
from test_gemm_coop import coop_available

import kompute_dml as kdml
from kompute_dml.ops.conv_coop import tile_problems
from kompute_dml.ops.convolution import compile_convolution
from kompute_dml.ops.gemm_coop import LARGE, MEDIUM, CoopTile, subgroup_size
from kompute_dml.runtime.policy import CONV_KERNEL_ENV, policy_for

DT = kdml.DataType
TD = kdml.TensorDesc
F16, F32 = DT.FLOAT16, DT.FLOAT32
FAMILIES = ("coopmat", "coopmat-emulated")

CASES = [  # x sizes, filter sizes, strides, dilations, start, end, groups
    ((1, 16, 9, 9), (16, 16, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 1),  # K = 144: several steps
    ((2, 24, 11, 7), (32, 12, 3, 2), (2, 1), (1, 2), (0, 1), (2, 0), 2),  # groups, strides, dilations, pads
    ((2, 20, 13), (18, 20, 3), (2,), (1,), (1,), (2,), 1),  # 1-D; CoutG and K off the fragments
    ((1, 8, 4, 5, 6), (16, 8, 2, 3, 2), (1, 2, 1), (2, 1, 1), (1, 0, 1), (0, 1, 1), 1),  # 3-D
    ((1, 40, 9, 9), (70, 40, 1, 1), (1, 1), (1, 1), (0, 0), (0, 0), 1),  # 1x1: channel tiles, K = 40
    ((3, 17, 5, 7), (33, 17, 3, 3), (1, 1), (1, 1), (2, 0), (0, 2), 1),  # odd everything
]


@pytest.fixture(params=FAMILIES)
def family(request, dev, monkeypatch):
    if request.param == "coopmat" and (why := coop_available(dev)):
        pytest.skip(f"{why}: the 'coopmat' run is skipped")
    monkeypatch.setenv(CONV_KERNEL_ENV, request.param)
    monkeypatch.setenv("KDML_CONV_SPLIT", "1")
    return request.param


def prefix(family: str, split: bool = False) -> str:
    return "convc" + ("x" if family == "coopmat-emulated" else "") + ("s" if split else "") + "_"


def run_case(dev, rng, case, dt=F16, *, flip=False, bias=True, act=None, strided=True, packed_filter=False, half=False,
             filter_dt=None):
    """One convolution of CASES[case] placed at random offsets (strided where `strided`), the output
    poisoned; returns (got, want float64, S, K, the compiled operator)."""
    xs, ws, st, dl, ps, pe, g = CASES[case]
    npd = dt.numpy_dtype
    x = (rng.standard_normal(xs) * 2).astype(npd)
    w = (rng.standard_normal(ws) * 0.5).astype(npd)
    b = rng.standard_normal(ws[0]).astype(npd) if bias else None
    wdt = filter_dt or dt
    wv = w.astype(wdt.numpy_dtype)
    want, s = reference(x, wv if half else w, b, st, dl, ps, pe, g, flip, act is not None)
    strides = (lambda sz: random_strides(rng, sz, allow_broadcast=False)) if strided else (lambda sz: None)
    xd = TD(dt, xs, strides(xs))
    wd = TD(wdt, ws, None if packed_filter else strides(ws))
    bd = TD(dt, (1, ws[0]) + (1,) * (len(xs) - 2)) if bias else None
    yd = TD(dt, want.shape, strides(want.shape))
    tx, _ = place(dev, rng, xd, x)
    tw, _ = place(dev, rng, wd, wv)
    tb = place(dev, rng, bd, b.reshape(bd.sizes))[0] if bias else None
    ty, _ = place(dev, rng, yd)
    before = poison_against(ty, want.astype(npd), rng)
    desc = kdml.ConvolutionDesc(xd, wd, bd, yd, kdml.ConvolutionMode(0 if flip else 1),
                                kdml.ConvolutionDirection.FORWARD, st, dl, ps, pe, (0,) * len(st), g, act)
    op = dev.compile(desc, allow_half_precision=half)
    op.execute([tx, tw, tb], [ty])
    after = assert_outside_unchanged(ty, before)
    return read_logical(after, ty.offset, yd), want, s, int(np.prod(ws[1:])), op, (x, w, b)


def check(got, want, s, k, dt, parts=1):
    lim = bound(s, k, dt.numpy_dtype, "coopmat", parts, want)
    err = np.abs(got.astype(np.float64) - want)
    assert np.all(err <= lim), f"worst error / bound {np.max(err / np.maximum(lim, 1e-300)):.3f}"


@pytest.mark.parametrize("case", range(len(CASES)))
def test_against_numpy(dev, rng, family, case):
    """Every case, both modes, bias and ReLU at random, random strides (the filter's element loads) or
    a packed filter (its 16-byte loads where the mode allows); the emulated family gives the tiled
    kernel's bits."""
    flip, relu = bool(rng.integers(2)), bool(rng.integers(2))
    act = kdml.ActivationReluDesc(None, None) if relu else None
    got, want, s, k, op, (x, w, b) = run_case(dev, rng, case, flip=flip, bias=case != 3, act=act,
                                              packed_filter=case % 2 == 0)
    assert op.variants == [prefix(family) + "f16"]
    check(got, want, s, k, F16)
    if family != "coopmat-emulated":
        return
    xs, ws, st = CASES[case][:3]
    packed = dataclasses.replace(op.desc, input_tensor=TD(F16, xs), filter_tensor=TD(F16, ws), output_tensor=TD(F16, want.shape),
                                 bias_tensor=TD(F16, (1, ws[0]) + (1,) * len(st)) if b is not None else None)
    tiled = compile_convolution(dev, packed, kernel="tiled")
    assert tiled.variants == ["conv_f16"]
    y = dev.empty(packed.output_tensor)
    tb = dev.tensor(b.reshape(packed.bias_tensor.sizes)) if b is not None else None
    tiled.execute([dev.tensor(x), dev.tensor(w), tb], [y])
    np.testing.assert_array_equal(y.numpy().view(np.uint16), got.astype(np.float16).view(np.uint16))


@pytest.mark.parametrize("parts", [2, 3])
def test_split_k(dev, rng, family, monkeypatch, parts):
    """Split-K: the parts' float32 sums to the scratch (convcs*), added in part order by the portable
    REDUCE dispatch, then bias and the fused activation: within gamma(5K + P) S."""
    monkeypatch.setenv("KDML_CONV_SPLIT", str(parts))
    got, want, s, k, op, _ = run_case(dev, rng, 0, act=kdml.ActivationReluDesc(None, None))
    assert op.variants == [prefix(family, True) + "f16", "convr_f16"]
    check(got, want, s, k, F16, parts)


def test_tiles_and_capped_grid(dev, rng, family, monkeypatch):
    """The larger default tiles (LARGE: 16 subgroups, BK 64 in one shared stage; MEDIUM: 8 subgroups
    of 16 x 32) where they run here, a tile of one stage and 2 x 1 accumulators per subgroup, and capped
    grid axes (each work group loops over pixel tiles
    and groups): the same bits as the full grid."""
    xs, ws, g = (2, 32, 9, 11), (48, 16, 3, 3), 2
    x = rng.standard_normal(xs).astype(np.float16)
    w = (rng.standard_normal(ws) * 0.5).astype(np.float16)
    want, s = reference(x, w, None, (1, 1), (1, 1), (1, 1), (1, 1), g)
    desc = kdml.ConvolutionDesc(TD(F16, xs), TD(F16, ws), None, TD(F16, want.shape), start_padding=(1, 1),
                                end_padding=(1, 1), group_count=g)
    limits = dict(dev.limits)
    sg = subgroup_size(dev)
    got = {}
    for tile in (None, LARGE, MEDIUM, CoopTile(64, 32, 32, 16, bk=64, group_m=2, stages=1)):
        if tile is not None and tile_problems(tile, sg, dev.limits, family != "coopmat"):
            continue
        for cap in (None, (1, 65535, 1)):
            monkeypatch.setattr(dev, "limits", types.MappingProxyType(
                {**limits, **({"max_compute_work_group_count": cap} if cap else {})}))
            op = compile_convolution(dev, desc, config=tile)
            if tile is not None:
                assert op.plans[0].spec[1:4] == (tile.bm, tile.bn, tile.bk)
            if cap is not None:
                assert op.plans[0].groups[0] == 1 and op.plans[0].groups[2] == 1
            y = dev.empty(desc.output_tensor)
            op.execute([dev.tensor(x), dev.tensor(w), None], [y])
            got[tile, cap] = y.numpy()
            check(got[tile, cap], want, s, 144, F16)
    if family == "coopmat-emulated":  # the same sums in the same order whatever the tile
        first = next(iter(got.values())).view(np.uint16)
        for v in got.values():
            np.testing.assert_array_equal(v.view(np.uint16), first)


def test_default_tiles(dev, family):
    """The convolution's own tiles (ops/conv_coop.conv_tiles): 32 x 64 for at most 32 output channels
    per group, else 64 x 32; one 16 x 16 accumulator per subgroup, BK 64 in one stage."""
    from kompute_dml.ops.conv_coop import CONV_TILE, CONV_TILE_NARROW, conv_tiles

    assert conv_tiles(32)[0] == CONV_TILE_NARROW and conv_tiles(33)[0] == CONV_TILE and conv_tiles(256)[0] == CONV_TILE
    for tile in (CONV_TILE, CONV_TILE_NARROW):
        assert (tile.wm, tile.wn, tile.bk, tile.stages) == (16, 16, 64, 1) and tile.subgroups() == 8
    for cout, tile in ((32, CONV_TILE_NARROW), (48, CONV_TILE)):
        desc = kdml.ConvolutionDesc(TD(F16, (1, 16, 9, 9)), TD(F16, (cout, 16, 3, 3)), None, TD(F16, (1, cout, 9, 9)),
                                    start_padding=(1, 1), end_padding=(1, 1))
        if tile_problems(tile, subgroup_size(dev), dev.limits, family != "coopmat"):
            continue
        spec = compile_convolution(dev, desc).plans[0].spec
        assert spec[1:6] == (tile.bm, tile.bn, tile.bk, tile.wm, tile.wn) and spec[8] == 1


def half_check(got, want, s, k, x, w, case, emulated, parts=1):
    st, dl, ps, pe, g = CASES[case][2:]

    def conv(a, b):
        return reference(a, b, None, st, dl, ps, pe, g)[0]

    c = half_inputs_bound(x, w, s, k, emulated, conv)
    lim = c + gamma(5 * k + parts) * (s + c) + 2.0 ** -126
    err = np.abs(got.astype(np.float64) - want)
    assert np.all(err <= lim), f"worst error / bound {np.max(err / np.maximum(lim, 1e-300)):.3f}"


@pytest.mark.parametrize("case", [1, 5])
def test_float32_allow_half_precision(dev, rng, family, case):
    """FLOAT32 under allow_half_precision: the input and the filter rounded to float16 as the tiles
    load (convc*_f32), float32 bias and output, within the float16 rounding's bound; a FLOAT16 filter
    (convc*_f32h, converted once) gives the same bits where the conversion is f2h's (emulated)."""
    got, want, s, k, op, (x, w, _) = run_case(dev, rng, case, F32, half=True, packed_filter=True, strided=False)
    assert op.variants == [prefix(family) + "f32"]
    emulated = family == "coopmat-emulated"
    half_check(got, want, s, k, x, w, case, emulated)
    rng2 = np.random.default_rng(int(rng.integers(1 << 31)))
    got_h, want_h, s_h, _, op_h, (xh, wh, _) = run_case(dev, rng2, case, F32, half=True, filter_dt=F16)
    assert op_h.variants == [prefix(family) + "f32h"]
    half_check(got_h, want_h, s_h, k, xh, wh, case, emulated)
    if emulated:  # the same run with the filter converted on the fly
        st, dl, ps, pe, g = CASES[case][2:]
        y = kdml.conv(xh, wh, None, strides=st, dilations=dl, start_padding=ps, end_padding=pe, groups=g,
                      allow_half_precision=True)
        yh = kdml.conv(xh, wh.astype(np.float16), None, strides=st, dilations=dl, start_padding=ps, end_padding=pe,
                       groups=g, allow_half_precision=True)
        np.testing.assert_array_equal(y.numpy().view(np.uint32), yh.numpy().view(np.uint32))


def test_policy_choice(dev, monkeypatch):
    """The device policy's choice: on a GPU with the capabilities and the shape, "coopmat" for FORWARD
    in half precision (FLOAT16, or FLOAT32 under allow_half_precision) with enough channels; "direct"
    for few channels per group and few terms (depthwise); "tiled" for BACKWARD, FLOAT32 and small convolutions;
    KDML_CONV_KERNEL forces one (a coop family still leaving what it does not take to "tiled"); on
    lavapipe (no cooperative matrices) "tiled" / "direct"."""
    monkeypatch.delenv(CONV_KERNEL_ENV, raising=False)
    caps = frozenset({"cooperative_matrix", "shader_float16", "vulkan_memory_model"})
    gpu = policy_for("discrete-gpu", caps, {})
    assert gpu.conv_family == "coopmat" and gpu.describe()["conv_family"] == "coopmat"
    choose = gpu.conv_family_for
    assert choose(half=True, coutg=64, klen=576, backward=False) == "coopmat"
    assert choose(half=True, coutg=64, klen=576, backward=True) == "tiled"
    assert choose(half=False, coutg=64, klen=576, backward=False) == "tiled"
    assert choose(half=True, coutg=1, klen=9, backward=False) == "direct"
    assert choose(half=False, coutg=4, klen=64, backward=False) == "direct"
    assert choose(half=False, coutg=4, klen=96, backward=False) == "tiled"  # no pixel count: not a lanes candidate
    from kompute_dml.ops.convolution import lanes_work

    assert lanes_work(49, 96, 288) == 13 * 12 * 3 and lanes_work(392, 96, 288) == 3528
    assert choose(half=False, coutg=4, klen=96, backward=False, lanes_work=lanes_work(1, 4, 96)) == "lanes"  # a squeeze
    assert choose(half=False, coutg=96, klen=288, backward=False, lanes_work=lanes_work(49, 96, 288)) == "lanes"
    assert choose(half=False, coutg=96, klen=288, backward=False, lanes_work=lanes_work(392, 96, 288)) == "tiled"  # batch 8
    assert choose(half=False, coutg=96, klen=288, backward=True, lanes_work=lanes_work(1, 96, 288)) == "tiled"
    assert choose(half=True, coutg=12, klen=576, backward=False, lanes_work=lanes_work(1, 12, 576)) == "tiled"  # half
    cpu = policy_for("cpu", caps, {})
    assert cpu.conv_family_for(half=False, coutg=4, klen=96, backward=False, lanes_work=1) == "tiled"
    assert choose(half=True, coutg=12, klen=576, backward=False) == "tiled"
    assert choose(half=True, coutg=64, klen=8, backward=False) == "tiled"
    assert policy_for("discrete-gpu", frozenset(), {}).conv_family_for(half=True, coutg=64, klen=576,
                                                                         backward=False) == "tiled"
    assert dev.policy.conv_family_for(half=True, coutg=64, klen=576, backward=False) in ("tiled", "coopmat")
    monkeypatch.setenv(CONV_KERNEL_ENV, "coopmat-emulated")
    assert choose(half=False, coutg=64, klen=576, backward=False) == "tiled"
    assert choose(half=True, coutg=1, klen=9, backward=False) == "coopmat-emulated"
    monkeypatch.setenv(CONV_KERNEL_ENV, "tensor")
    with pytest.raises(kdml.InvalidArgumentError, match="^kernel"):
        choose(half=True, coutg=64, klen=576, backward=False)


def test_refusals(dev, monkeypatch):
    """A FLOAT16 filter with FLOAT32 tensors: InvalidArgumentError without allow_half_precision,
    UnsupportedError where the kernel taken is not the tensor cores'; 'coopmat' forced on a device
    without cooperative matrices: UnsupportedError naming the kernel."""
    desc = kdml.ConvolutionDesc(TD(F32, (1, 16, 5, 5)), TD(F16, (16, 16, 3, 3)), None, TD(F32, (1, 16, 3, 3)))
    with pytest.raises(kdml.InvalidArgumentError, match="^filter_tensor.data_type"):
        dev.compile(desc)
    monkeypatch.setenv(CONV_KERNEL_ENV, "tiled")
    with pytest.raises(kdml.UnsupportedError, match="^filter_tensor.data_type"):
        dev.compile(desc, allow_half_precision=True)
    if coop_available(dev):
        monkeypatch.setenv(CONV_KERNEL_ENV, "coopmat")
        with pytest.raises(kdml.UnsupportedError, match="^kernel: CONVOLUTION's 'coopmat'"):
            dev.compile(dataclasses.replace(desc, input_tensor=TD(F16, (1, 16, 5, 5)),
                                            output_tensor=TD(F16, (1, 16, 3, 3))))


def test_plans_ahead(dev, family, monkeypatch):
    """OperatorSpec.ahead: a tensor-core plan's other path (split-K and its REDUCE, or one pass), with
    the same tile, whose pipelines can be made."""
    from kompute_dml.ops.convolution import plans_ahead

    desc = kdml.ConvolutionDesc(TD(F16, (1, 16, 6, 6)), TD(F16, (16, 16, 3, 3)), TD(F16, (1, 16, 1, 1)),
                                TD(F16, (1, 16, 4, 4)))
    for split, want in (("1", [prefix(family, True) + "f16", "convr_f16"]), ("2", [prefix(family) + "f16"])):
        monkeypatch.setenv("KDML_CONV_SPLIT", split)
        op = dev.compile(desc)
        ahead = plans_ahead(dev, op, set())
        assert [p.variant for p in ahead] == want
        assert ahead[0].spec == op.plans[0].spec
        if family == "coopmat-emulated":
            dev.engine.prepare_many(ahead)
