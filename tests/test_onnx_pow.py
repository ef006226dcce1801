"""ONNX Pow with a constant exponent of 1, 2 or 3 on the device (ELEMENT_WISE_MULTIPLY: x * x,
(x * x) * x, onnxruntime's own arithmetic for those exponents: compared bit for bit; a float16
cube in float32 between two CASTs, onnxruntime's single rounding: every float16 bit pattern);
any other exponent, or one a feed can change, stays on the CPU with the reason."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

from kompute_dml.onnx_backend import CPU, VULKAN, Backend  # noqa: E402

ONNX_TYPE = {np.float32: T.FLOAT, np.float16: T.FLOAT16}


def _model(dt, exponent, as_input=False):
    e = numpy_helper.from_array(np.array(exponent, dt), "e")
    inputs = [helper.make_tensor_value_info("x", ONNX_TYPE[dt], ["n", 7])]
    if as_input:
        inputs.append(helper.make_tensor_value_info("e", ONNX_TYPE[dt], []))
    g = helper.make_graph([helper.make_node("Pow", ["x", "e"], ["y"], name="pow")], "g", inputs,
                          [helper.make_tensor_value_info("y", ONNX_TYPE[dt], None)], initializer=[e])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _values(rng, dt):
    x = (rng.standard_normal((9, 7)) * 40).astype(dt)
    x.reshape(-1)[:8] = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e30 if dt == np.float32 else 300.0,
                                  -3e-39 if dt == np.float32 else -6e-8, 1.0], dt)
    return x


@pytest.mark.parametrize("dt,exponent", [(np.float32, 1), (np.float32, 2), (np.float32, 3), (np.float16, 1),
                                         (np.float16, 2), (np.float16, 3)])
def test_small_integer_powers_on_the_device_bit_for_bit(rng, dt, exponent):
    model = _model(dt, exponent)
    rep = Backend.prepare(model, "CPU")
    assert [(p.target, p.operator) for p in rep.placement] == [(VULKAN, "ELEMENT_WISE_MULTIPLY")]
    x = _values(rng, dt)
    if dt == np.float16:  # every float16 bit pattern: 65536 = 9362 rows of 7, the rest of the last row
        x = np.resize(np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16), (9363, 7))
    (y,) = rep.run({"x": x})
    (want,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    assert y.dtype == want.dtype
    nan = np.isnan(want)  # a NaN's payload is the processor's (NVIDIA returns its canonical NaN)
    np.testing.assert_array_equal(np.isnan(y), nan)
    np.testing.assert_array_equal(y[~nan].view(np.uint32 if dt == np.float32 else np.uint16),
                                  want[~nan].view(np.uint32 if dt == np.float32 else np.uint16))


@pytest.mark.parametrize("dt,exponent,as_input,why", [
    (np.float32, 2.5, False, "exponent 2.5"), (np.float32, 0.0, False, "exponent 0.0"),
    (np.float32, 2, True, "not a constant scalar"), (np.float16, 2.5, False, "exponent 2.5")])
def test_other_exponents_stay_on_the_cpu(rng, dt, exponent, as_input, why):
    model = _model(dt, exponent, as_input)
    rep = Backend.prepare(model, "CPU")
    (p,) = rep.placement
    assert p.target == CPU and why in p.reason
    x = np.abs(_values(rng, dt))
    feeds = {"x": x, **({"e": np.array(exponent, dt)} if as_input else {})}
    (y,) = rep.run(feeds)
    (want,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    np.testing.assert_array_equal(y, want)
