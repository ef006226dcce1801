"""ACTIVATION_GELU (ops/activation.py, shaders/float_unary.comp, gelu_math.glsl) against the float64
reference of tests/activation_reference.py (the page's exact erf form, through math.erfc) within
docs/gelu.md's bound: a dense sweep of float32 over [-16, 16] and its tails, every float16 value,
the special values (-0, +-inf, NaN, subnormals, the largest floats), 1-8 dimensions with random
strides and broadcast inputs at random offsets with guard bytes and poisoned outputs whose every
other byte must stay unchanged, host-enumerated dimensions, the helper and refused descriptors.
Also: the constants of gelu_math.glsl are those tools/fit_gelu.py derives, and that derivation's
float32 emulation stays within the stated erf / erfc / GELU errors over a dense sweep."""

from __future__ import annotations

import importlib.util
import math
import re
from pathlib import Path

import numpy as np
import pytest
from activation_reference import FLT_MIN, GELU_REL, U, check_close, gelu_bound, gelu_ref
from helpers import assert_outside_unchanged, place, poison_against, random_strides, read_logical

import kompute_dml as kdml

DT = kdml.DataType
FL = kdml.FeatureLevel
TD = kdml.TensorDesc
FLOATS = (DT.FLOAT32, DT.FLOAT16)
IDS = ("f32", "f16")
ROOT = Path(__file__).resolve().parent.parent


def run_packed(dev, x: np.ndarray) -> np.ndarray:
    d = TD(DT.FLOAT32 if x.dtype == np.float32 else DT.FLOAT16, x.shape)
    t, _ = place(dev, np.random.default_rng(0), d, x, guard=16)
    y, _ = place(dev, np.random.default_rng(1), d, guard=16)
    dev.compile(kdml.ActivationGeluDesc(d, d)).execute([t], [y])
    return y.numpy()


def float32_sweep(points: int) -> np.ndarray:
    """Evenly spaced float32 bit patterns over [-16, 16] (both signs, zero to 16), and every
    float32 of two stretches of the negative tail, where the result approaches underflow."""
    top = int(np.array([16.0], np.float32).view(np.uint32)[0])
    pos = np.linspace(0, top, points, dtype=np.int64).astype(np.uint32)
    tail = [np.arange(int(np.array([a], np.float32).view(np.uint32)[0]), int(np.array([a], np.float32).view(np.uint32)[0])
                      + 4096, dtype=np.uint32) for a in (13.0, 14.375)]
    bits = np.concatenate([pos, pos | np.uint32(0x80000000), *(t | np.uint32(0x80000000) for t in tail)])
    return bits.view(np.float32)


# ---- the function -----------------------------------------------------------------------------------
def test_float32_dense_sweep(dev):
    x = float32_sweep(1 << 19)
    got = run_packed(dev, x)
    ref = gelu_ref(x)
    check_close(got, ref, gelu_bound(ref), "GELU float32")
    normal = np.abs(ref) >= FLT_MIN
    worst = np.max(np.abs(got.astype(np.float64) - ref)[normal] / np.abs(ref[normal]))
    assert worst <= GELU_REL
    # the normal CDF it used, Phi(x) = GELU(x) / x, against math.erfc: the same relative bound
    nz = normal & (x != 0)
    phi = got[nz].astype(np.float64) / x[nz].astype(np.float64)
    phi_ref = 0.5 * np.vectorize(math.erfc, otypes=[np.float64])(-x[nz].astype(np.float64) / math.sqrt(2))
    assert np.max(np.abs(phi / phi_ref - 1)) <= GELU_REL + U


def test_every_float16(dev):
    x = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    got = run_packed(dev, x)
    ref = gelu_ref(x)
    check_close(got, ref, gelu_bound(ref), "GELU float16")
    assert np.all(np.isnan(got) == np.isnan(x))


def test_the_coefficient_table_gives_the_same_bits(dev, monkeypatch):
    """gelu_tab_* (the erfc coefficients from the table, DevicePolicy.gelu_table: GPUs) against gelu_*
    (selects), float32 bit for bit over the five polynomial pieces, their bounds and the special values.
    FLOAT32 alone here: lavapipe takes about half a minute to compile the table's variant (two for
    FLOAT16, which the GPU runs cover)."""
    import dataclasses

    x = np.concatenate([float32_sweep(1 << 12), np.array([0.5, 1.0, 2.0, 4.0, 8.0, 14.5, 0.99999994, 1.9999999,
                                                          3.9999998, 7.9999995, np.nan, np.inf, -np.inf], np.float32)])
    want = run_packed(dev, x)
    monkeypatch.setattr(dev, "policy", dataclasses.replace(dev.policy, gelu_table=not dev.policy.gelu_table))
    monkeypatch.setitem(dev.caches, "compiled", {})  # (compile_cached keys by descriptor, not by the policy)
    desc = kdml.ActivationGeluDesc(kdml.TensorDesc(kdml.DataType.FLOAT32, x.shape), kdml.TensorDesc(kdml.DataType.FLOAT32, x.shape))
    assert any(v.startswith("gelu_tab" if dev.policy.gelu_table else "gelu_f32") for v in dev.compile(desc).variants)
    got = run_packed(dev, x)
    same = (got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want))
    assert same.all(), x[~same][:8]


SPECIAL = [  # (input, expected exactly)
    (0.0, 0.0), (-0.0, -0.0), (np.inf, np.inf), (-np.inf, -0.0), (float(np.finfo(np.float32).max), None),
    (-float(np.finfo(np.float32).max), -0.0), (20.0, 20.0), (6.0, 6.0), (-15.0, -0.0), (-14.5, None), (1e-45, None),
]


@pytest.mark.parametrize("dt", FLOATS, ids=IDS)
def test_special_values(dev, dt):
    npd = dt.numpy_dtype
    big = float(np.finfo(npd).max)
    xs = [v if abs(v) != float(np.finfo(np.float32).max) else math.copysign(big, v) for v, _ in SPECIAL]
    x = np.array(xs, npd)
    got = run_packed(dev, x)
    for v, (_, want), g in zip(x, SPECIAL, got):
        if want is not None:
            want = math.copysign(big, want) if abs(want) == float(np.finfo(np.float32).max) else want
            assert g == want and math.copysign(1, g) == math.copysign(1, want), f"GELU({v!r}) = {g!r}, want {want!r}"
    assert got[4] == x[4]  # the largest float: GELU(x) = x
    nans = (np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0xFFFFFFFF], np.uint32).view(np.float32) if dt == DT.FLOAT32
            else np.array([0x7E00, 0xFE00, 0x7C01, 0xFFFF], np.uint16).view(np.float16))
    assert np.isnan(run_packed(dev, nans)).all()


def test_subnormal_inputs(dev):
    """Subnormal inputs and results: within 2^-126 (a device may flush them to zero)."""
    x = np.array([1e-45, -1e-45, 1e-40, -1e-40, 1.1e-38, -1.1e-38, -13.8, -14.0, -14.3], np.float32)
    got = run_packed(dev, x)
    ref = gelu_ref(x)
    assert np.all(np.abs(got.astype(np.float64) - ref) <= gelu_bound(ref))


# ---- layouts ------------------------------------------------------------------------------------------
def random_sizes(rng, rank: int, max_elems: int = 400) -> tuple[int, ...]:
    sizes = [int(rng.integers(1, 7)) for _ in range(rank)]
    while np.prod(sizes) > max_elems:
        sizes[int(np.argmax(sizes))] //= 2
    return tuple(max(1, s) for s in sizes)


def values(rng, dt: DT, sizes) -> np.ndarray:
    x = rng.standard_normal(sizes) * 10.0 ** rng.integers(-2, 2, sizes)
    flat = x.reshape(-1)
    k = min(flat.size, 5)
    flat[rng.choice(flat.size, k, replace=False)] = [0.0, -0.0, np.inf, -np.inf, np.nan][:k]
    return x.astype(dt.numpy_dtype)


def run(dev, rng, x_desc: TD, y_desc: TD, v: np.ndarray) -> None:
    x, xraw = place(dev, rng, x_desc, v)
    y, _ = place(dev, rng, y_desc)
    xv = read_logical(xraw, x.offset, x_desc)
    ref = gelu_ref(xv)
    with np.errstate(over="ignore"):
        before = poison_against(y, np.nan_to_num(ref).astype(y_desc.data_type.numpy_dtype), rng)
    dev.compile(kdml.ActivationGeluDesc(x_desc, y_desc)).execute([x], [y])
    got = read_logical(assert_outside_unchanged(y, before), y.offset, y_desc)
    assert x.buffer.read() == xraw
    check_close(got, ref, gelu_bound(ref), f"GELU {x_desc.sizes}")


@pytest.mark.parametrize("dt", FLOATS, ids=IDS)
@pytest.mark.parametrize("rank", range(1, 9))
def test_layouts(dev, rng, dt, rank):
    for _ in range(3):
        sizes = random_sizes(rng, rank)
        xs = random_strides(rng, sizes, allow_broadcast=True) if rng.random() < 0.7 else None
        ys = random_strides(rng, sizes, allow_broadcast=False) if rng.random() < 0.7 else None
        run(dev, rng, TD(dt, sizes, xs), TD(dt, sizes, ys), values(rng, dt, sizes))


@pytest.mark.parametrize("dt", FLOATS, ids=IDS)
def test_host_enumerated_dimensions(dev, rng, dt):
    """8 dimensions of size >= 2 that do not merge: the host enumerates the smallest ones."""
    sizes = (2, 3, 2, 2, 3, 2, 2, 3)
    for _ in range(2):
        run(dev, rng, TD(dt, sizes, random_strides(rng, sizes, allow_broadcast=True, max_gap=2)),
            TD(dt, sizes, random_strides(rng, sizes, allow_broadcast=False, max_gap=2)), values(rng, dt, sizes))


@pytest.mark.parametrize("n", [1, 2, 3, 255, 256, 257, 4099])
def test_float16_word_boundaries(dev, rng, n):
    """Odd counts and offsets: float16 outputs share words with bytes outside the tensor."""
    d = TD(DT.FLOAT16, (n,))
    run(dev, rng, d, TD(DT.FLOAT16, (n,), (3,)), values(rng, DT.FLOAT16, (n,)))
    run(dev, rng, d, d, values(rng, DT.FLOAT16, (n,)))


# ---- the derivation --------------------------------------------------------------------------------
def _fit_gelu():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("fit_gelu", ROOT / "tools" / "fit_gelu.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _glsl_array(text: str, name: str) -> np.ndarray:
    body = re.search(rf"const float {re.escape(name)}\[[^=]*=\s*float\[[^(]*\((.*?)\);", text, re.S)
    assert body is not None, name
    return np.array([float(v) for v in re.findall(r"[-+]?\d\.\d+e[-+]\d+", body.group(1))], np.float32)


def test_shader_constants_are_the_derivation():
    """gelu_math.glsl's constants are those tools/fit_gelu.py derives (up to the last bits the
    least-squares solver may move on another machine)."""
    fit = _fit_gelu()
    k = fit.constants()
    text = (ROOT / "shaders" / "gelu_math.glsl").read_text()
    for name, want in (("KDML_ERFCX_C", k["R"].reshape(-1)), ("KDML_EXP_C", k["E"])):
        got = _glsl_array(text, name)
        assert got.shape == want.shape
        assert np.allclose(got, want, rtol=4 * U, atol=0), name


def test_derivation_error_over_a_dense_sweep():
    """The float32 emulation of the algorithm (tools/fit_gelu.py) against float64 math.erf /
    math.erfc: erfc(z) within 2^-21 relative (z up to 10.25, where erfc >= 2^-126), erf(z) within
    2^-22 absolute, GELU within its bound."""
    fit = _fit_gelu()
    k = fit.constants()
    x = fit.sweep(400_000)
    scaled: list[np.ndarray] = []
    got = fit.gelu32(x, k, scaled).astype(np.float64)
    ref = gelu_ref(x)
    normal = np.abs(ref) >= FLT_MIN
    assert np.max(np.abs(got - ref)[normal] / np.abs(ref[normal])) <= GELU_REL
    z = np.abs(x.astype(np.float64)) / math.sqrt(2)
    erfc_ref = np.vectorize(math.erfc, otypes=[np.float64])(z)
    erfc_got = scaled[0].astype(np.float64) * 2.0**-64
    m = erfc_ref >= FLT_MIN
    assert np.max(np.abs(erfc_got - erfc_ref)[m] / erfc_ref[m]) <= 2.0**-21
    erf_ref = np.vectorize(math.erf, otypes=[np.float64])(z)
    assert np.max(np.abs((1 - erfc_got) - erf_ref)) <= 2.0**-22


# ---- the helper and refusals ----------------------------------------------------------------------------
def test_helper(dev, rng):
    x = values(rng, DT.FLOAT32, (3, 4, 5))
    y = kdml.gelu(x, device=dev)
    assert y.desc.data_type == DT.FLOAT32 and y.desc.sizes == (3, 4, 5)
    ref = gelu_ref(x)
    check_close(y.numpy(), ref, gelu_bound(ref), "helper")
    out_desc = TD(DT.FLOAT32, (3, 4, 5), random_strides(rng, (3, 4, 5), allow_broadcast=False))
    out, _ = place(dev, rng, out_desc)
    assert kdml.gelu(y, out=out) is out
    ref2 = gelu_ref(y.numpy())
    check_close(out.numpy(), ref2, gelu_bound(ref2), "out=")
    h = kdml.gelu(x.astype(np.float16), device=dev)
    assert h.desc.data_type == DT.FLOAT16
    with pytest.raises(kdml.InvalidArgumentError, match="^out"):
        kdml.gelu(x, out=h)
    with pytest.raises(kdml.UnsupportedError, match="^input_tensor: ACTIVATION_GELU does not support INT32"):
        kdml.gelu(np.arange(4, dtype=np.int32), device=dev)


F = TD(DT.FLOAT32, (2, 3))
BAD = [
    (kdml.ActivationGeluDesc(F, TD(DT.FLOAT16, (2, 3))), kdml.InvalidArgumentError,
     r"^output_tensor\.data_type: must equal input_tensor's"),
    (kdml.ActivationGeluDesc(F, TD(DT.FLOAT32, (3, 2))), kdml.InvalidArgumentError, r"^output_tensor\.sizes: must equal"),
    (kdml.ActivationGeluDesc(F, TD(DT.FLOAT32, (1, 2, 3))), kdml.InvalidArgumentError,
     r"^output_tensor\.sizes: dimension count"),
    (kdml.ActivationGeluDesc(F, TD(DT.FLOAT32, (2, 3), (0, 1))), kdml.InvalidArgumentError, r"^output_tensor\.strides"),
    (kdml.ActivationGeluDesc(TD(DT.UINT8, (2, 3)), TD(DT.UINT8, (2, 3))), kdml.UnsupportedError,
     r"^input_tensor: ACTIVATION_GELU does not support UINT8"),
    (kdml.ActivationGeluDesc(TD(DT.FLOAT64, (2, 3)), TD(DT.FLOAT64, (2, 3))), kdml.UnsupportedError,
     r"^input_tensor: ACTIVATION_GELU does not support FLOAT64"),
]


@pytest.mark.parametrize(("desc", "error", "match"), BAD, ids=[m[1:40] for _, _, m in BAD])
def test_refused(dev, desc, error, match):
    with pytest.raises(error, match=match):
        dev.compile(desc)


def test_output_may_not_alias_the_input(dev, rng):
    x, _ = place(dev, rng, F, values(rng, DT.FLOAT32, (2, 3)))
    op = dev.compile(kdml.ActivationGeluDesc(F, F))
    with pytest.raises(kdml.InvalidArgumentError, match="^output_tensor: overlaps input_tensor"):
        op.execute([x], [x])


@pytest.mark.parametrize("level", [FL.FL_5_0, FL.FL_5_1], ids=str)
def test_feature_levels(level):
    d = kdml.Device(feature_level=level)
    try:
        desc = kdml.ActivationGeluDesc(F, F)
        if level >= FL.FL_5_1:
            d.compile(desc)
        else:
            with pytest.raises(kdml.UnsupportedError, match="^ACTIVATION_GELU: introduced at DML_FEATURE_LEVEL_5_1"):
                d.compile(desc)
    finally:
        d.close()
