"""ONNX Pow on the device (ELEMENT_WISE_POW, onnx_backend/handlers_arith.py) against onnxruntime's
CPU results and float64 numpy: float32 / float16 bases with exponents of every type onnxruntime
takes (fed tensors and constants, scalars broadcast, int64 exponents beyond int32), a float32
cube by a constant 3 bit for bit onnxruntime's (x * x) * x (ELEMENT_WISE_MULTIPLY), int32 **
int32 bit for bit (onnxruntime's overflow and negative-exponent results included); int64 bases
and integer bases with float exponents on the CPU with the reason; onnx's own Pow node cases."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import helper, numpy_helper  # noqa: E402
from test_elementwise_pow import BOUND, ref64  # noqa: E402
from unary_reference import check_close  # noqa: E402

from kompute_dml.onnx_backend import CPU, VULKAN, Backend  # noqa: E402


def _model(xdt, edt, x_shape=("n", 7), e_shape=("n", 7), constant=None):
    inputs = [helper.make_tensor_value_info("x", helper.np_dtype_to_tensor_dtype(np.dtype(xdt)), list(x_shape))]
    inits = []
    if constant is None:
        inputs.append(helper.make_tensor_value_info("e", helper.np_dtype_to_tensor_dtype(np.dtype(edt)), list(e_shape)))
    else:
        inits.append(numpy_helper.from_array(np.asarray(constant, edt), "e"))
    g = helper.make_graph([helper.make_node("Pow", ["x", "e"], ["y"], name="pow")], "g", inputs,
                          [helper.make_tensor_value_info("y", helper.np_dtype_to_tensor_dtype(np.dtype(xdt)), None)],
                          initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 15)], ir_version=8)


ORT_EXPONENTS = {np.dtype(t) for t in (np.float32, np.float16, np.int32, np.int64, np.float64)}  # its CPU kernel's


def _run_both(model, feeds, edt=np.float32):
    """The backend's result and onnxruntime's (None where onnxruntime has no kernel for the types)."""
    rep = Backend.prepare(model, "CPU")
    (got,) = rep.run(feeds)
    if np.dtype(edt) not in ORT_EXPONENTS:
        return rep, got, None
    (want,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    assert got.dtype == want.dtype and got.shape == want.shape
    return rep, got, want


def _bases(rng, dt, shape=(9, 7)):
    x = (rng.standard_normal(shape) * 3).astype(dt)
    x.reshape(-1)[:8] = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 2.0], dt)
    return x


@pytest.mark.parametrize("xdt", [np.float32, np.float16], ids=("f32", "f16"))
@pytest.mark.parametrize("edt", [np.float32, np.float16, np.int32, np.int64, np.uint32, np.uint64], ids=str)
def test_float_base_fed_exponent(rng, xdt, edt):
    """A fed exponent tensor of each type: within onnxruntime's result by an ulp (std::pow is
    correctly rounded nearly always; ours is within BOUND of float64, which is checked too)."""
    model = _model(xdt, edt)
    x = _bases(rng, xdt)
    if np.dtype(edt).kind == "f":
        e = rng.uniform(-6, 6, x.shape).astype(edt)
        e.reshape(-1)[:4] = [2, 3, 0.5, -1]
    else:
        e = rng.integers(0 if np.dtype(edt).kind == "u" else -6, 7, x.shape).astype(edt)
    rep, got, want = _run_both(model, {"x": x, "e": e}, edt)
    assert [(p.target, p.operator) for p in rep.placement] == [(VULKAN, "ELEMENT_WISE_POW")]
    if want is not None:  # (no onnxruntime kernel for unsigned exponents)
        np.testing.assert_allclose(got, want, rtol=3e-7 if xdt == np.float32 else 1e-3, atol=0)
    check_close(got, ref64(x, e), BOUND[xdt == np.float16])


@pytest.mark.parametrize("value,edt", [(3.0, np.float32), (2.0, np.float32), (0.5, np.float32), (-1.5, np.float32),
                                       (3, np.int64), (2**40 + 1, np.int64), (-(2**40) - 1, np.int64),
                                       (0.25, np.float64), (7, np.uint64)], ids=str)
def test_float32_base_constant_exponent(rng, value, edt):
    """Constant scalars: 3 (a float32 cube) bit for bit onnxruntime's (x * x) * x; int64 / uint64
    constants narrowed on the host with their parity (-1 ** (2^40 + 1) = -1); a float64 one
    exactly a float32."""
    model = _model(np.float32, edt, e_shape=(), constant=value)
    x = _bases(rng, np.float32)
    rep, got, want = _run_both(model, {"x": x}, edt)
    assert [(p.target, p.operator) for p in rep.placement] == [(VULKAN, "ELEMENT_WISE_POW")]
    if want is None:
        want = ref64(x, np.float64(value)).astype(np.float32)
    if value == 3.0:
        nan = np.isnan(want)
        np.testing.assert_array_equal(np.isnan(got), nan)
        np.testing.assert_array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32))
    else:
        np.testing.assert_allclose(got, want, rtol=3e-7, atol=0)
    if float(value).is_integer():  # x = -1: the exponent's parity survived the narrowing
        assert got.reshape(-1)[6] == (-1.0 if int(value) % 2 else 1.0)


def test_broadcast_scalar_exponent_and_float64_not_a_float32():
    rng = np.random.default_rng(1)
    model = _model(np.float32, np.float32, x_shape=(4, 5), e_shape=(1, 5))
    x, e = np.abs(_bases(rng, np.float32, (4, 5))), rng.uniform(-3, 3, (1, 5)).astype(np.float32)
    rep, got, want = _run_both(model, {"x": x, "e": e})
    np.testing.assert_allclose(got, want, rtol=3e-7)
    rep, got, want = _run_both(_model(np.float32, np.float64, (4, 5), (), 0.1), {"x": np.abs(x)}, np.float64)
    np.testing.assert_array_equal(got, want)  # placed, then run on the CPU at run time: 0.1 is no float32
    assert rep.placement[0].target == VULKAN


def test_int32_bit_for_bit():
    """int32 ** int32: exact powers, onnxruntime's INT_MIN where the power leaves int32 (and for
    0 to a negative power), trunc(1 / b^n) for negative exponents."""
    b = np.array([3, 3, -3, 2, -2, 1, -1, 0, 0, 7, 46341, -46341, 2, 10, -2, 5, 0, 1, 2], np.int32)
    e = np.array([21, 20, 21, 31, 31, -5, -3, -2, 0, -1, 2, 2, 30, 9, 30, 13, 7, -2**31, 2**31 - 1], np.int32)
    rng = np.random.default_rng(2)
    b = np.concatenate([b, rng.integers(-40, 40, 2000).astype(np.int32)])
    e = np.concatenate([e, rng.integers(-3, 12, 2000).astype(np.int32)])
    rep, got, want = _run_both(_model(np.int32, np.int32, ("n",), ("n",)), {"x": b, "e": e})
    assert [(p.target, p.operator) for p in rep.placement] == [(VULKAN, "ELEMENT_WISE_POW")]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("xdt,edt,why", [(np.int64, np.int64, "base int64"), (np.int32, np.float32, "base int32"),
                                         (np.float64, np.float64, "base float64")], ids=str)
def test_other_types_stay_on_the_cpu(xdt, edt, why):
    model = _model(xdt, edt, ("n",), ("n",))
    feeds = {"x": np.arange(1, 6).astype(xdt), "e": np.arange(0, 5).astype(edt)}
    rep, got, want = _run_both(model, feeds)
    (p,) = rep.placement
    assert p.target == CPU and why in p.reason, p.reason
    np.testing.assert_array_equal(got, want)


def test_onnx_node_cases():
    """onnx's Pow cases pass; those with float bases (any exponent type) and int32 ** int32 on
    Vulkan, int64 bases and integer bases with float exponents on the CPU."""
    from onnx_node_cases import node_cases, run_case

    case, names = node_cases(r"^test_pow\w*_cpu$", __name__)
    assert len(names) == 12, names
    for name in names:
        targets = {p.target for rep in run_case(case, name) for p in rep.placement}
        cpu = "types_int64_" in name or "types_int32_float32" in name
        assert targets == ({CPU} if cpu else {VULKAN}), (name, targets)


def test_float16_cube_bit_for_bit_onnxruntime_over_every_float16():
    """A float16 base cubed by a constant 3 (GPT-2's GELU in a float16 model): onnxruntime's bits
    for every float16 bit pattern (its float32 cube rounded once to float16; POW's float16 is
    correctly rounded, which those double roundings equal for every finite float16)."""
    model = _model(np.float16, np.float16, x_shape=("n",), e_shape=(), constant=3.0)
    x = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16)
    rep, got, want = _run_both(model, {"x": x}, np.float16)
    assert [p.target for p in rep.placement] == [VULKAN]
    nan = np.isnan(want)  # a NaN's payload is the processor's
    np.testing.assert_array_equal(np.isnan(got), nan)
    np.testing.assert_array_equal(got[~nan].view(np.uint16), want[~nan].view(np.uint16))
