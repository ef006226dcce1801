"""ELEMENT_WISE_SIN / _COS / _TAN beyond the table-wide tests of tests/test_elementwise_unary.py:
the inputs where the argument reduction is hardest (the float32 values nearest multiples of
pi / 2, huge arguments up to float32's largest), the special values of those and of ASIN ...
ATANH (ops/elementwise_trig.py), a Llama-style rotary embedding (Range -> Mul(inv_freq) ->
Cos / Sin) through the ONNX backend against onnxruntime; ELEMENT_WISE_ATAN_YX against float64
numpy.arctan2 (special values bit for bit, layouts, in place, refused descriptors)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_outside_unchanged, place, poison_against, random_strides, read_logical
from test_elementwise_unary import BOUND
from unary_reference import check_close, every_float16, float32_inputs, near_half_pi_multiples, reference64

import kompute_dml as kdml


@pytest.mark.parametrize("fn", ["sin", "cos"])
def test_hard_reductions(dev, rng, fn):
    """Near k pi / 2 the reduced argument, and so sin or cos, is tiny relative to x: pi / 2
    carried to fewer bits than the reduction's 94 (removing its last 32 gives 750+ ulp here)
    shows as a relative error of the result; above 2^24 every bit of x matters. Both within the
    float32 bound of float64."""
    huge = rng.integers(0x4B800000, 0x7F800000, 1 << 16, dtype=np.uint64).astype(np.uint32).view(np.float32)
    x = np.concatenate([near_half_pi_multiples(1 << 18), huge, -huge])
    got = getattr(kdml, fn)(x, device=dev).numpy()
    ref = reference64(fn, x)
    check_close(got, ref, BOUND[fn][0])
    # the tiny results are really there: sin of the float32 nearest pi is -8.74e-8, not 0 or ~1e-7 off
    assert np.abs(ref).min() < 1e-6


def test_special_values(dev):
    """+-inf and NaN -> NaN (a NaN input kept, quieted); sin is odd (-0 -> -0, tiny x -> x,
    subnormals included), cos even (1 at +-0 and below 2^-12); sin(float32(pi)) is pi's float32
    error, float64's value rounded: -8.742278e-08."""
    bits = np.array([0x7F800000, 0xFF800000, 0x7F800001, 0x80000000, 0x00000001, 0x80000001, 0x39000000],
                    np.uint32).view(np.float32)
    s = kdml.sin(bits, device=dev).numpy()
    c = kdml.cos(bits, device=dev).numpy()
    assert np.isnan(s[:3]).all() and np.isnan(c[:3]).all()
    assert s.view(np.uint32)[2] == 0x7FC00001  # the NaN's payload, quieted
    assert s.view(np.uint32)[3:].tolist() == bits.view(np.uint32)[3:].tolist()
    assert c[3:].tolist() == [1.0] * 4
    pi32 = np.array([np.pi, -np.pi, np.pi / 2], np.float32)
    assert kdml.sin(pi32, device=dev).numpy().tolist() == np.sin(pi32.astype(np.float64)).astype(np.float32).tolist()
    assert kdml.sin(pi32[:1], device=dev).numpy()[0] == np.float32(-8.742278e-08)


def test_rotary_embedding_on_device():
    """Llama's rotary angles: positions (Range from a runtime start and the sequence length, so
    nothing folds to a constant) times inv_freq, then Cos and Sin, run on Vulkan (Range too, as
    FILL_VALUE_SEQUENCE), each output within 1 float32 ulp of 1 (onnxruntime's std::cos / std::sin) at
    positions up to 8192 and the float64 bound on the same float32 angles."""
    pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper, numpy_helper

    from kompute_dml.onnx_backend import Backend

    half = 32
    inv = (1.0 / 10000.0 ** (np.arange(half) / half)).astype(np.float32).reshape(1, half)
    nodes = [helper.make_node("Shape", ["ids"], ["shp"]), helper.make_node("Gather", ["shp", "one"], ["n"], axis=0),
             helper.make_node("Add", ["n", "start"], ["end"]), helper.make_node("Range", ["start", "end", "one"], ["pi"]),
             helper.make_node("Cast", ["pi"], ["pos"], to=TensorProto.FLOAT),
             helper.make_node("Unsqueeze", ["pos", "ax"], ["pos2"]), helper.make_node("Mul", ["pos2", "inv"], ["ang"]),
             helper.make_node("Cos", ["ang"], ["cos"]), helper.make_node("Sin", ["ang"], ["sin"])]
    inits = [numpy_helper.from_array(np.array(1, np.int64), "one"), numpy_helper.from_array(np.array([1], np.int64), "ax"),
             numpy_helper.from_array(inv, "inv")]
    ins = [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, "seq"]),
           helper.make_tensor_value_info("start", TensorProto.INT64, [])]
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["seq", half]) for n in ("cos", "sin")]
    model = helper.make_model(helper.make_graph(nodes, "rotary", ins, outs, inits),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    rep = Backend.prepare(model, "CPU")
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for start, seq in ((0, 7), (4096, 4096)):
        feeds = {"ids": np.zeros((1, seq), np.int64), "start": np.array(start, np.int64)}
        got, want = rep.run(feeds), sess.run(None, feeds)
        ang = np.float32(np.arange(start, start + seq, dtype=np.float32)[:, None] * inv)  # Mul's float32 product
        for fn, g, w in zip(("cos", "sin"), got, want):
            np.testing.assert_allclose(g, w, rtol=0, atol=2.0**-23, err_msg=fn)
            check_close(g, reference64(fn, ang), BOUND[fn][0])
    on = {p.op_type: p.target for p in rep.placement}
    assert on["Sin"] == on["Cos"] == on["Mul"] == on["Range"] == on["Cast"] == "vulkan"
    assert rep.summary().startswith("7 of 9 nodes on Vulkan")  # Shape and Gather on the host


# ---- TAN, the inverse and hyperbolic functions (ops/elementwise_trig.py; the table-wide tests of
# tests/test_elementwise_unary.py run them too) and ATAN_YX
def test_tan_hard_reductions(dev, rng):
    """TAN near multiples of pi / 2 (sin or cos tiny: the largest and smallest results) and up to
    float32's largest values, within its float32 bound of float64."""
    huge = rng.integers(0x4B800000, 0x7F800000, 1 << 15, dtype=np.uint64).astype(np.uint32).view(np.float32)
    x = np.concatenate([near_half_pi_multiples(1 << 16), huge, -huge])
    got = kdml.tan(x, device=dev).numpy()
    check_close(got, reference64("tan", x), BOUND["tan"][0])
    assert np.abs(got).max() > 1e7 and np.abs(got[np.isfinite(got)]).min() < 1e-6  # both extremes are there


SPECIAL = {  # input -> the result's bits (float32), C99 / numpy
    "tan": [(np.inf, None), (-0.0, 0x80000000), (1e-45, 0x00000001)],
    "asin": [(1.0, 0x3FC90FDB), (-1.0, 0xBFC90FDB), (1.0000001, None), (-0.0, 0x80000000), (-1e-45, 0x80000001)],
    "acos": [(1.0, 0x00000000), (-1.0, 0x40490FDB), (0.0, 0x3FC90FDB), (-1.0000001, None), (-1e-45, 0x3FC90FDB)],
    "atan": [(np.inf, 0x3FC90FDB), (-np.inf, 0xBFC90FDB), (-0.0, 0x80000000), (1e30, 0x3FC90FDB)],
    "sinh": [(np.inf, 0x7F800000), (-np.inf, 0xFF800000), (89.5, 0x7F800000), (-0.0, 0x80000000), (1e-45, 1)],
    "cosh": [(-np.inf, 0x7F800000), (89.5, 0x7F800000), (-0.0, 0x3F800000), (1e-45, 0x3F800000)],
    "asinh": [(-np.inf, 0xFF800000), (-0.0, 0x80000000), (3.4e38, None)],
    "acosh": [(1.0, 0x00000000), (np.inf, 0x7F800000), (0.9999999, None), (-0.0, None), (-np.inf, None)],
    "atanh": [(1.0, 0x7F800000), (-1.0, 0xFF800000), (1.0000001, None), (-0.0, 0x80000000)],
}


@pytest.mark.parametrize("fn", sorted(SPECIAL))
def test_inverse_and_hyperbolic_special_values(dev, fn):
    """The pages' domain edges as C99 has them (None: NaN); a NaN input comes out quieted with its
    payload; asinh(3.4e38) is finite (log(2x) taken as log(x) + ln 2)."""
    x = np.array([v for v, _ in SPECIAL[fn]] + [np.nan], np.float32)
    x[-1] = np.array([0x7F800001], np.uint32).view(np.float32)[0]
    got = getattr(kdml, fn)(x, device=dev).numpy()
    for (v, want), g in zip(SPECIAL[fn], got):
        if want is None:
            assert np.isnan(g) or (fn == "asinh" and g == np.float32(np.arcsinh(np.float64(v)))), (fn, v, g)
        else:
            assert g.view(np.uint32) == want, (fn, v, hex(int(g.view(np.uint32))), hex(want))
    assert got.view(np.uint32)[-1] == 0x7FC00001


ATAN2_BOUND = (1.6, 0.501)  # docs/elementwise_trig.md: the quotient's rounding passes through atan (1.47 measured)


def atan2_specials() -> tuple[np.ndarray, np.ndarray]:
    v = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 3e-45, -2.5, 1e38], np.float32)
    y, x = (a.reshape(-1) for a in np.meshgrid(v, v, indexing="ij"))
    return y, x


@pytest.mark.parametrize("dt", [np.float32, np.float16], ids=("f32", "f16"))
def test_atan_yx_values(dev, rng, dt):
    """ATAN_YX against float64 numpy.arctan2 (C99's signed zeros and infinities, every pair of
    special values, bit for bit there), random bit patterns and magnitudes far apart."""
    y, x = atan2_specials()
    with np.errstate(all="ignore"):  # 1e38 is a float16 infinity
        y, x = y.astype(dt), x.astype(dt)
    got = kdml.atan2(y, x, device=dev).numpy()
    with np.errstate(all="ignore"):
        ref = np.arctan2(y.astype(np.float64), x.astype(np.float64))
    want = ref.astype(dt)
    same = (got == want) & (np.signbit(got) == np.signbit(want))
    assert np.array_equal(np.isnan(got), np.isnan(want)) and same[~np.isnan(want)].all()
    n = 1 << 16
    if dt == np.float32:
        spread = [(rng.standard_normal(n) * np.exp2(rng.integers(-140, 120, n))).astype(np.float32) for _ in range(2)]
        y = np.concatenate([float32_inputs(rng, n), spread[0]])
        x = np.concatenate([float32_inputs(rng, n)[::-1], spread[1]])
    else:
        h = every_float16()
        y, x = np.repeat(h[::128], 512), np.tile(h[::128], 512)
    y, x = y[: min(y.size, x.size)].astype(dt), x[: min(y.size, x.size)].astype(dt)
    got = kdml.atan2(y, x, device=dev).numpy()
    with np.errstate(all="ignore"):
        check_close(got, np.arctan2(y.astype(np.float64), x.astype(np.float64)), ATAN2_BOUND[dt == np.float16])


@pytest.mark.parametrize("dt", [kdml.DataType.FLOAT32, kdml.DataType.FLOAT16], ids=("f32", "f16"))
def test_atan_yx_layouts(dev, rng, dt):
    """Strided, broadcast and offset operands, poisoned outputs; in place (A aliased)."""
    td = kdml.TensorDesc
    for sizes in ((9,), (3, 5), (2, 1, 3, 4), (2, 3, 1, 2, 2, 3, 2, 2)):
        ds = [td(dt, sizes, random_strides(rng, sizes, allow_broadcast=i < 2)) for i in range(3)]
        vals = [(rng.standard_normal(sizes) * 3).astype(dt.numpy_dtype) for _ in range(2)]
        (a, araw), (b, braw) = (place(dev, rng, d, v) for d, v in zip(ds, vals))
        o, _ = place(dev, rng, ds[2])
        ya, xb = read_logical(araw, a.offset, ds[0]), read_logical(braw, b.offset, ds[1])
        ref = np.arctan2(ya.astype(np.float64), xb.astype(np.float64))
        before = poison_against(o, ref.astype(dt.numpy_dtype), rng)
        dev.compile(kdml.ElementWiseAtanYxDesc(*ds)).execute([a, b], [o])
        got = read_logical(assert_outside_unchanged(o, before), o.offset, ds[2])
        check_close(got, ref, ATAN2_BOUND[dt == kdml.DataType.FLOAT16])
    y = (rng.standard_normal((4, 5)) * 2).astype(np.float32)
    t, _ = place(dev, rng, td(kdml.DataType.FLOAT32, (4, 5)), y)
    dev.compile(kdml.ElementWiseAtanYxDesc(t.desc, t.desc, t.desc)).execute([t, t], [t])
    check_close(t.numpy(), np.arctan2(y.astype(np.float64), y.astype(np.float64)), ATAN2_BOUND[0])


def test_atan_yx_refused():
    f = kdml.TensorDesc(kdml.DataType.FLOAT32, (2, 3))
    with kdml.Device(feature_level=kdml.FeatureLevel.FL_3_0) as d, pytest.raises(kdml.UnsupportedError):
        d.compile(kdml.ElementWiseAtanYxDesc(f, f, f))
    with kdml.Device() as d:
        with pytest.raises(kdml.InvalidArgumentError, match=r"^b_tensor\.data_type"):
            d.compile(kdml.ElementWiseAtanYxDesc(f, kdml.TensorDesc(kdml.DataType.FLOAT16, (2, 3)), f))
        i = kdml.TensorDesc(kdml.DataType.INT32, (2, 3))
        with pytest.raises(kdml.UnsupportedError, match="^a_tensor: ELEMENT_WISE_ATAN_YX does not support INT32"):
            d.compile(kdml.ElementWiseAtanYxDesc(i, i, i))
