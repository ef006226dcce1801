"""DequantizeLinear with per-axis scales and zero points on a value computed at run time (not a
folded weight): on the device (DEQUANTIZE_LINEAR with the 1-D scale and zero point seen along
`axis` by stride-0 views), against numpy's (x - zero point) * scale in float32, which is exact to
the last bit (an 8-bit difference is exact in float32, one rounding in the product); blocked ones
(block_size) on the CPU, correct too."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

from kompute_dml.onnx_backend import Backend  # noqa: E402

ELEM = {np.int8: T.INT8, np.uint8: T.UINT8}


def _model(shape, qt, axis, zero_point, per_axis_len):
    """y = DequantizeLinear(x, scale, zero point) with x a graph input."""
    rng = np.random.default_rng([len(shape), axis % len(shape), int(zero_point)])
    scale = (rng.random(per_axis_len) * 0.1 + 0.01).astype(np.float32)
    inits = [numpy_helper.from_array(scale, "s")]
    names = ["x", "s"]
    zp = None
    if zero_point:
        info = np.iinfo(qt)
        zp = rng.integers(info.min, info.max + 1, per_axis_len).astype(qt)
        inits.append(numpy_helper.from_array(zp, "z"))
        names.append("z")
    node = helper.make_node("DequantizeLinear", names, ["y"], axis=axis)
    graph = helper.make_graph([node], "dq", [helper.make_tensor_value_info("x", ELEM[qt], list(shape))],
                              [helper.make_tensor_value_info("y", T.FLOAT, list(shape))], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=9), scale, zp


@pytest.mark.parametrize("qt", [np.int8, np.uint8])
@pytest.mark.parametrize(("shape", "axis"), [((5, 7), 0), ((5, 7), 1), ((5, 7), -1), ((2, 3, 4, 5), 1), ((2, 3, 4, 5), -2)])
@pytest.mark.parametrize("zero_point", [True, False])
def test_per_axis_on_the_device(qt, shape, axis, zero_point):
    n = shape[axis]
    model, scale, zp = _model(shape, qt, axis, zero_point, n)
    info = np.iinfo(qt)
    x = np.random.default_rng(7).integers(info.min, info.max + 1, shape).astype(qt)
    x.reshape(-1)[:2] = (info.min, info.max)  # the edges
    rep = Backend.prepare(model, "CPU")
    (y,) = rep.run({"x": x})
    along = [1] * len(shape)
    along[axis] = n
    z = zp.astype(np.float32).reshape(along) if zp is not None else np.float32(0)
    want = (x.astype(np.float32) - z) * scale.reshape(along)
    np.testing.assert_array_equal(y, want)
    assert rep.last_run.planned and not rep.last_run.runtime_fallbacks and not rep.last_run.cpu_segments


def test_blocked_on_the_cpu_and_right():
    shape, block = (4, 6), 3
    rng = np.random.default_rng(3)
    x = rng.integers(-128, 128, shape).astype(np.int8)
    s = (rng.random((4, 2)) * 0.1 + 0.01).astype(np.float32)
    z = rng.integers(-128, 128, (4, 2)).astype(np.int8)
    node = helper.make_node("DequantizeLinear", ["x", "s", "z"], ["y"], axis=1, block_size=block)
    graph = helper.make_graph([node], "dq", [helper.make_tensor_value_info("x", T.INT8, list(shape))],
                              [helper.make_tensor_value_info("y", T.FLOAT, list(shape))],
                              [numpy_helper.from_array(s, "s"), numpy_helper.from_array(z, "z")])
    rep = Backend.prepare(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=9), "CPU")
    (y,) = rep.run({"x": x})
    want = (x.astype(np.float32) - np.repeat(z, block, 1).astype(np.float32)) * np.repeat(s, block, 1)
    np.testing.assert_array_equal(y, want)
    assert "block_size" in " ".join(rep.last_run.events)
