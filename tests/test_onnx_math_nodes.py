"""ONNX Mod and BitShift on the device (onnx_backend/handlers_arith.py) against onnxruntime's CPU
results (numpy's where onnxruntime has no kernel: Mod fmod 0 of floats, BitShift of uint16 and
of opset 28's signed types), with broadcasting and the types' extremes; and onnx's own node cases
of Tan, Asin, Acos, Atan, Sinh, Cosh, Asinh, Acosh, Atanh, Mod and BitShift, placed on Vulkan."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from helpers import random_values  # noqa: E402
from onnx import helper  # noqa: E402
from test_elementwise_integer import mod_ref, same_bits  # noqa: E402

import kompute_dml as kdml  # noqa: E402
from kompute_dml.onnx_backend import VULKAN, Backend  # noqa: E402


def _model(op, dt, a_shape, b_shape, opset=17, **attrs):
    t = helper.np_dtype_to_tensor_dtype(np.dtype(dt))
    g = helper.make_graph([helper.make_node(op, ["a", "b"], ["y"], **attrs)], "g",
                          [helper.make_tensor_value_info("a", t, list(a_shape)),
                           helper.make_tensor_value_info("b", t, list(b_shape))],
                          [helper.make_tensor_value_info("y", t, None)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def _ort(model, feeds):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]


MOD_TYPES = [np.float32, np.float16, np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64]


@pytest.mark.parametrize("fmod", [0, 1])
@pytest.mark.parametrize("dt", MOD_TYPES, ids=lambda d: np.dtype(d).name)
def test_mod(rng, dt, fmod):
    """Broadcast operands (4, 1, 5) and (3, 5) of the types' range, divisors never 0 (onnxruntime
    refuses integer x mod 0): bit for bit onnxruntime's, or the exact reference where onnxruntime
    has no kernel (fmod 0 of floats) or is not exact (its int64 / uint64 fmod 1 through double)."""
    if np.dtype(dt).kind == "f":
        a = (rng.standard_normal((4, 1, 5)) * 50).astype(dt)
        b = (rng.standard_normal((3, 5)) * 7).astype(dt)
    else:
        a = random_values(rng, kdml.DataType.from_numpy(np.dtype(dt)), (4, 1, 5))
        b = random_values(rng, kdml.DataType.from_numpy(np.dtype(dt)), (3, 5))
        b[b == 0] = 3
    model = _model("Mod", dt, a.shape, b.shape, fmod=fmod)
    rep = Backend.prepare(model, "CPU")
    (got,) = rep.run({"a": a, "b": b})
    assert [(p.target, p.operator) for p in rep.placement] == [(VULKAN, "ELEMENT_WISE_MODULUS_FLOOR")]
    if fmod == 0 and np.dtype(dt).kind == "f":
        want = mod_ref("mod", a, b)
    elif fmod == 1 and np.dtype(dt).itemsize == 8:  # onnxruntime's 64-bit fmod goes through double: not exact
        want = mod_ref("fmod", a, b)
    else:
        want = _ort(model, {"a": a, "b": b})
    assert got.shape == want.shape == (4, 3, 5)
    same_bits(got, want.astype(got.dtype))


@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
@pytest.mark.parametrize("dt", [np.uint8, np.uint16, np.uint32, np.uint64, np.int8, np.int32, np.int64],
                         ids=lambda d: np.dtype(d).name)
def test_bitshift(rng, dt, direction):
    """Every shift amount from 0 past the width (0 from it on; a signed right shift fills with the
    sign: -1), broadcast over rows; onnxruntime's for its unsigned kernels, else the reference."""
    bits = 8 * np.dtype(dt).itemsize
    info = np.iinfo(dt)
    a = rng.integers(info.min, info.max, (3, 2 * bits), dtype=dt, endpoint=True)
    a[0, :4] = [info.min, info.max, 0, 1] if info.min < 0 else [info.max, 0, 1, 2]
    b = np.arange(2 * bits).astype(dt).reshape(1, -1)
    opset = 28 if info.min < 0 else 17
    model = _model("BitShift", dt, a.shape, b.shape, opset=opset, direction=direction)
    rep = Backend.prepare(model, "CPU")
    (got,) = rep.run({"a": a, "b": b})
    assert [p.target for p in rep.placement] == [VULKAN]
    a64 = a.astype(object)
    s = np.broadcast_to(b, a.shape).astype(object)
    if direction == "LEFT":
        want = np.where(s >= bits, 0, (a64 << np.minimum(s, bits)) & ((1 << bits) - 1))
    else:
        want = np.where(s >= bits, np.where(a64 < 0, -1, 0), a64 >> np.minimum(s, bits))
    want = np.array([int(v) - (1 << bits) if info.min < 0 and int(v) > info.max else int(v) for v in want.reshape(-1)],
                    object).astype(np.int64 if info.min < 0 else np.uint64).astype(dt).reshape(a.shape)
    np.testing.assert_array_equal(got, want)
    if dt in (np.uint8, np.uint32, np.uint64):  # onnxruntime's own kernels agree
        np.testing.assert_array_equal(got, _ort(model, {"a": a, "b": b}))


NODE_CASES = r"^test_(tan|asin|acos|atan|sinh|cosh|asinh|acosh|atanh|mod|bitshift)(_\w*)?_cpu$"


def test_onnx_node_cases():
    """onnx's node cases of these types pass on Vulkan (the ones whose operands are float64, which
    no DirectML operator here takes, stay on the CPU: onnxruntime runs Mod fmod 1 of them, not
    fmod 0, a newer opset's rule, so those two are left out)."""
    from onnx_node_cases import node_cases, run_case

    skip = ("float64_mixed_sign_fmod_0_cpu", "edge_cases_fmod_0_float64_cpu")
    case, names = node_cases(NODE_CASES, __name__, skip=skip)
    assert len(names) == 63, names
    for name in names:
        targets = {p.target for rep in run_case(case, name) for p in rep.placement}
        assert targets == ({"cpu"} if "float64" in name else {VULKAN}), (name, targets)
