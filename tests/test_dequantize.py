"""ELEMENT_WISE_DEQUANTIZE_LINEAR (ops/dequantize.py, shaders/dequantize.comp) against an
independent numpy reference (tests/dequantize_reference.py): every supported input type with
FLOAT32 and FLOAT16 scales / outputs, zero point present and absent, 1-8 dimensions, scales and
zero points per tensor (all strides 0), per axis (one stride non-zero) and full, strided layouts,
random offsets with guard bytes, poisoned outputs whose every other byte must stay unchanged,
edge values (type extremes, zero points at the extremes, NaN / infinite / subnormal / -0 / 0
scales, 32-bit differences beyond 2^24), host-enumerated dimensions, the helper and refusals."""

from __future__ import annotations

import numpy as np
import pytest
from dequantize_reference import dequantize_ref
from helpers import assert_output, compile_at_level, place, poison_against, random_strides, random_values, read_logical

import kompute_dml as kdml
from kompute_dml.core.dtypes import HIGHEST_FEATURE_LEVEL
from kompute_dml.ops.dequantize import ELEMENT_WISE_DEQUANTIZE_LINEAR as SUPPORT

DT = kdml.DataType
FL = kdml.FeatureLevel
TD = kdml.TensorDesc
Desc = kdml.ElementWiseDequantizeLinearDesc
TOP = SUPPORT.require(HIGHEST_FEATURE_LEVEL)
IN_TYPES = sorted(TOP.tensor("input_tensor").types, key=lambda d: d.value)
OUT_TYPES = sorted(TOP.tensor("output_tensor").types, key=lambda d: d.value)
CASES = [(i, o, z) for i in IN_TYPES for o in OUT_TYPES for z in (True, False)]
IDS = [f"{i.name}-{o.name}-{'zp' if z else 'nozp'}" for i, o, z in CASES]


def random_sizes(rng, rank: int, max_elems: int = 300) -> tuple[int, ...]:
    sizes = [int(rng.integers(1, 7)) for _ in range(rank)]
    while np.prod(sizes) > max_elems:
        sizes[int(np.argmax(sizes))] //= 2
    return tuple(max(1, s) for s in sizes)


def param_strides(rng, sizes) -> tuple[int, ...] | None:
    """A scale's / zero point's layout: per tensor, per axis, or a full (possibly strided) one."""
    kind = int(rng.integers(0, 4))
    if kind == 0:
        return (0,) * len(sizes)
    if kind == 1:
        axis = int(rng.integers(0, len(sizes)))
        return tuple(int(rng.integers(1, 3)) if d == axis else 0 for d in range(len(sizes)))
    return None if kind == 2 else random_strides(rng, sizes, allow_broadcast=True)


def run(dev, rng, src, dst, sizes, *, zp=True, x=None, s=None, z=None, x_strides="random", s_strides="random",
        z_strides="random", y_strides="random"):
    def lay(v, strides, fn):
        return fn() if isinstance(strides, str) else strides

    xd = TD(src, sizes, lay(x, x_strides, lambda: random_strides(rng, sizes, allow_broadcast=True) if rng.random() < .5 else None))
    sd = TD(dst, sizes, lay(s, s_strides, lambda: param_strides(rng, sizes)))
    zd = TD(src, sizes, lay(z, z_strides, lambda: param_strides(rng, sizes))) if zp else None
    yd = TD(dst, sizes, lay(None, y_strides, lambda: random_strides(rng, sizes, allow_broadcast=False) if rng.random() < .5 else None))
    xt, xraw = place(dev, rng, xd, random_values(rng, src, sizes) if x is None else x)
    st, sraw = place(dev, rng, sd, random_values(rng, dst, sizes) if s is None else s)
    zt, zraw = place(dev, rng, zd, random_values(rng, src, sizes) if z is None else z) if zp else (None, None)
    yt, _ = place(dev, rng, yd)
    expected = dequantize_ref(read_logical(xraw, xt.offset, xd), read_logical(sraw, st.offset, sd),
                              read_logical(zraw, zt.offset, zd) if zp else None, dst)
    before = poison_against(yt, expected, rng)
    dev.compile(Desc(xd, sd, zd, yd)).execute([xt, st, zt], [yt])
    assert_output(yt, before, expected)
    assert xt.buffer.read() == xraw and st.buffer.read() == sraw
    if zp:
        assert zt.buffer.read() == zraw


@pytest.mark.parametrize(("src", "dst", "zp"), CASES, ids=IDS)
def test_every_type(dev, rng, src, dst, zp):
    for rank in range(1, 9):
        for _ in range(2):
            run(dev, rng, src, dst, random_sizes(rng, rank), zp=zp)


@pytest.mark.parametrize(("src", "dst"), [(DT.UINT8, DT.FLOAT32), (DT.INT32, DT.FLOAT16), (DT.INT16, DT.FLOAT32)], ids=str)
def test_host_enumerated_dimensions(dev, rng, src, dst):
    """8 dimensions of size >= 2 that do not merge: the host enumerates the smallest ones."""
    sizes = (2, 3, 2, 2, 3, 2, 2, 3)
    for _ in range(2):
        run(dev, rng, src, dst, sizes, x_strides=random_strides(rng, sizes, allow_broadcast=True, max_gap=2),
            s_strides=random_strides(rng, sizes, allow_broadcast=True, max_gap=2),
            y_strides=random_strides(rng, sizes, allow_broadcast=False, max_gap=2))


# ---- edge values ---------------------------------------------------------------------------------
def scale_edges(dt: DT) -> np.ndarray:
    f = np.finfo(dt.numpy_dtype)
    vals = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, f.tiny, -f.tiny, f.smallest_subnormal,
            f.tiny / 2 + f.smallest_subnormal, f.max, -f.max, 0.1, 3.0, 1 / 3]
    if dt == DT.FLOAT32:
        vals += [2.0 ** -140, 2.0 ** -149 * 3, 1e-40]
    return np.array(vals, dt.numpy_dtype)


@pytest.mark.parametrize(("src", "dst"), [(i, o) for i in IN_TYPES for o in OUT_TYPES], ids=str)
def test_edge_values(dev, rng, src, dst):
    """Every (input, zero point) pair of extremes with every edge scale."""
    info = np.iinfo(src.numpy_dtype)
    ints = [info.min, info.min + 1, -1, 0, 1, info.max - 1, info.max, 2 ** 24 + 1, 2 ** 24 + 3, 2 ** 31 - 65, -(2 ** 24) - 3]
    ints = np.array(sorted({v for v in ints if info.min <= v <= info.max}), src.numpy_dtype)
    sc = scale_edges(dst)
    xs, zs, ss = np.meshgrid(ints, ints, sc, indexing="ij")
    shape = xs.shape
    run(dev, rng, src, dst, shape, x=xs, z=zs, s=ss, x_strides=None, s_strides=None, z_strides=None, y_strides=None)


def test_differences_beyond_2_24_round_to_nearest_even(dev):
    """INT32 / UINT32: the exact difference, one rounding to float32 (hand-computed), scale 1."""
    x = np.array([2 ** 31 - 1, 2 ** 24 + 1, 2 ** 24 + 3, -(2 ** 31), 2 ** 31 - 1], np.int32)
    z = np.array([-(2 ** 31), 0, 0, 2 ** 31 - 1, 2 ** 31 - 1], np.int32)
    got = kdml.dequantize_linear(x, np.float32(1.0), z, device=dev).numpy()
    assert got.tolist() == [2.0 ** 32, 2.0 ** 24, 2.0 ** 24 + 4, -(2.0 ** 32), 0.0]
    xu = np.array([2 ** 32 - 1, 0, 2 ** 25 + 3], np.uint32)
    zu = np.array([0, 2 ** 32 - 1, 1], np.uint32)
    got = kdml.dequantize_linear(xu, np.float32(1.0), zu, device=dev).numpy()
    assert got.tolist() == [2.0 ** 32, -(2.0 ** 32), 2.0 ** 25]


# ---- helper --------------------------------------------------------------------------------------
def test_helper_broadcasts_per_axis(dev, rng):
    x = rng.integers(-128, 128, (3, 4, 5), dtype=np.int8)
    s = rng.uniform(0.01, 2, (4, 1)).astype(np.float32)
    z = rng.integers(-5, 5, (5,), dtype=np.int8)
    got = kdml.dequantize_linear(x, s, z, device=dev)
    assert got.desc.sizes == (3, 4, 5) and got.desc.data_type == DT.FLOAT32
    exp = dequantize_ref(x, np.broadcast_to(s, x.shape), np.broadcast_to(z, x.shape), DT.FLOAT32)
    assert got.numpy().view(np.uint32).tolist() == exp.view(np.uint32).tolist()
    # Python scale (FLOAT32), Python zero point (x's type), no zero point, FLOAT16 scale, out=
    got = kdml.dequantize_linear(x, 0.5, 3, device=dev).numpy()
    assert np.array_equal(got, dequantize_ref(x, np.full(x.shape, 0.5, np.float32), np.full(x.shape, 3, np.int8), DT.FLOAT32))
    got = kdml.dequantize_linear(x, np.float16(0.25), device=dev)
    assert got.desc.data_type == DT.FLOAT16
    assert np.array_equal(got.numpy(), dequantize_ref(x, np.full(x.shape, 0.25, np.float16), None, DT.FLOAT16))
    out = dev.empty(TD(DT.FLOAT32, (3, 4, 5)))
    assert kdml.dequantize_linear(x, s, z, out=out, device=dev) is out
    with pytest.raises(kdml.InvalidArgumentError, match="^zero_point"):
        kdml.dequantize_linear(x, s, 300, device=dev)


# ---- refusals ------------------------------------------------------------------------------------
U8 = TD(DT.UINT8, (1, 2, 3, 4))
F32 = TD(DT.FLOAT32, (1, 2, 3, 4))


@pytest.mark.parametrize(("desc", "match"), [
    (Desc(U8, F32, TD(DT.INT8, (1, 2, 3, 4)), F32), "^zero_point_tensor.data_type: must equal input_tensor's"),
    (Desc(U8, F32, U8, TD(DT.FLOAT16, (1, 2, 3, 4))), "^output_tensor.data_type: must equal scale_tensor's"),
    (Desc(U8, TD(DT.FLOAT32, (1, 2, 3, 1)), U8, F32), r"^scale_tensor.sizes: must equal input_tensor's"),
    (Desc(U8, F32, TD(DT.UINT8, (2, 3, 4)), F32), "^zero_point_tensor.sizes: dimension count"),
    (Desc(U8, F32, U8, TD(DT.FLOAT32, (1, 2, 3, 5))), "^output_tensor.sizes: must equal"),
    (Desc(U8, F32, U8, TD(DT.FLOAT32, (1, 2, 3, 4), (0, 0, 0, 1))), "^output_tensor"),
], ids=["zp-type", "out-type", "scale-sizes", "zp-rank", "out-sizes", "out-overlap"])
def test_invalid(dev, desc, match):
    with pytest.raises(kdml.InvalidArgumentError, match=match):
        dev.compile(desc)


@pytest.mark.parametrize(("level", "desc", "exc", "match"), [
    (FL.FL_6_1, Desc(U8, F32, None, F32), kdml.InvalidArgumentError, "^zero_point_tensor: is required"),
    (FL.FL_3_0, Desc(U8, TD(DT.FLOAT16, U8.sizes), U8, TD(DT.FLOAT16, U8.sizes)), kdml.UnsupportedError,
     "^scale_tensor: ELEMENT_WISE_DEQUANTIZE_LINEAR does not support FLOAT16 at feature level 3_0"),
    (FL.FL_2_1, Desc(*[TD(d, (1,) * 5) for d in (DT.INT8, DT.FLOAT32, DT.INT8, DT.FLOAT32)]), kdml.UnsupportedError,
     "^input_tensor: ELEMENT_WISE_DEQUANTIZE_LINEAR supports 4 dimensions at feature level 2_1, got 5"),
    (FL.FL_1_0, Desc(TD(DT.INT8, U8.sizes), F32, TD(DT.INT8, U8.sizes), F32), kdml.UnsupportedError,
     "^input_tensor: ELEMENT_WISE_DEQUANTIZE_LINEAR does not support INT8 at feature level 1_0"),
], ids=["absent-zp-6_1", "f16-3_0", "rank5-2_1", "int8-1_0"])
def test_refused_by_feature_level(level, desc, exc, match):
    with pytest.raises(exc, match=match):
        compile_at_level(level, desc)


def test_levels_accept_what_their_table_lists():
    for level, desc in ((FL.FL_2_1, Desc(TD(DT.INT32, U8.sizes), F32, TD(DT.INT32, U8.sizes), F32)),
                        (FL.FL_3_0, Desc(*[TD(d, (7,)) for d in (DT.UINT16, DT.FLOAT32, DT.UINT16, DT.FLOAT32)])),
                        (FL.FL_6_0, Desc(*[TD(d, (7,)) for d in (DT.INT8, DT.FLOAT16, DT.INT8, DT.FLOAT16)]))):
        compile_at_level(level, desc)


def test_subnormal_scales_and_products_are_correctly_rounded(dev, rng):
    """Scales and products in and around the subnormal range take the integer-code product
    (shaders/f32_exact.glsl f32_mul_bits): every bit as the reference's, on devices that flush
    subnormals too."""
    n = 4096
    x = rng.integers(-(2 ** 31), 2 ** 31, n, dtype=np.int64).astype(np.int32)
    x[:64] = rng.integers(-3, 4, 64)
    sub = rng.integers(1, 1 << 23, n // 2, dtype=np.int64).astype(np.uint32).view(np.float32)
    tiny = (2.0 ** rng.uniform(-160, -100, n - n // 2)).astype(np.float32)
    s = np.concatenate([sub, tiny]) * np.where(rng.random(n) < 0.5, -1, 1).astype(np.float32)
    got = kdml.dequantize_linear(x, s, device=dev).numpy()
    exp = dequantize_ref(x, s, None, DT.FLOAT32)
    assert got.view(np.uint32).tolist() == exp.view(np.uint32).tolist()
