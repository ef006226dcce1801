"""ONNX Resize and Upsample on RESAMPLE2 (onnx_backend/handlers_vision.py): onnx's own node cases
run through Backend with every node on Vulkan and no run-time fallback, and models against
onnxruntime's CPU provider (opsets 10 to 19, scales from initializers and from feeds, sizes, every
mode, float16). onnxruntime computes coordinates in float32: the models keep to scales where that
is exact."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx_node_cases import node_case_tests, one_node_model  # noqa: E402

from kompute_dml.onnx_backend import Backend  # noqa: E402

T = TensorProto
test_case_count, test_onnx_node_case_on_the_device = node_case_tests(r"^test_(resize|upsample)_\w+_cpu$", __name__, 40)


def _model(node, inputs, inits=(), opset=19, et=T.FLOAT):
    return one_node_model(node, inputs, et, inits, opset)


def _run_both(model, feeds, rtol=1e-5):
    rep = Backend.prepare(model, "CPU")
    got = rep.run(feeds)[0]
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol,
                               atol=rtol * float(np.abs(feeds["x"]).max()))
    assert {p.target for p in rep.placement} == {"vulkan"}, rep.summary()
    assert rep.last_run.runtime_fallbacks == 0, rep.last_run.events
    return rep


@pytest.mark.parametrize(("dt", "et"), [(np.float32, T.FLOAT), (np.float16, T.FLOAT16)], ids=["f32", "f16"])
@pytest.mark.parametrize("attrs, scales, sizes", [
    (dict(mode="nearest"), [1, 1, 2, 2], None),
    (dict(mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor"), [1, 1, 3, 0.5], None),
    (dict(mode="linear"), [1, 1, 2, 2], None),
    (dict(mode="linear", coordinate_transformation_mode="align_corners"), None, [2, 3, 11, 7]),
    (dict(mode="linear", coordinate_transformation_mode="pytorch_half_pixel"), None, [2, 3, 4, 1]),
    (dict(mode="cubic"), [1, 1, 0.5, 2], None),
    (dict(mode="cubic", cubic_coeff_a=-0.5, exclude_outside=1), None, [2, 3, 5, 9]),
], ids=str)
def test_resize_against_onnxruntime(rng, dt, et, attrs, scales, sizes):
    x = (rng.standard_normal((2, 3, 6, 8)) * 3).astype(dt)
    inits = [numpy_helper.from_array(np.array(scales if scales is not None else [], np.float32), "scales")]
    ins = ["x", "", "scales"]
    if sizes is not None:
        inits.append(numpy_helper.from_array(np.array(sizes, np.int64), "sizes"))
        ins = ["x", "", "", "sizes"]
    node = helper.make_node("Resize", ins, ["y"], **attrs)
    _run_both(_model(node, [("x", et, x.shape)], inits, et=et), {"x": x}, 1e-5 if dt == np.float32 else 2e-3)


def test_resize_scales_fed_and_older_opsets(rng):
    """Scales fed at run time (read on the host), Resize-10 (asymmetric, floor), Upsample-9 (scales an
    input) and Upsample-7 (an attribute)."""
    x = rng.standard_normal((1, 2, 5, 4)).astype(np.float32)
    node = helper.make_node("Resize", ["x", "", "s"], ["y"], mode="linear")
    model = _model(node, [("x", T.FLOAT, x.shape), ("s", T.FLOAT, (4,))], opset=13)
    for s in ([1, 1, 2, 2], [1, 1, 0.5, 1.5]):
        _run_both(model, {"x": x, "s": np.array(s, np.float32)})
    for op, opset, mode in (("Resize", 10, "nearest"), ("Upsample", 9, "linear"), ("Upsample", 9, "nearest")):
        node = helper.make_node(op, ["x", "s"], ["y"], mode=mode)
        s = numpy_helper.from_array(np.array([1, 1, 2, 3], np.float32), "s")
        _run_both(_model(node, [("x", T.FLOAT, x.shape)], [s], opset=opset), {"x": x})
    for mode in ("nearest", "linear"):  # Upsample-7: scales as an attribute
        node = helper.make_node("Upsample", ["x"], ["y"], mode=mode, scales=[1.0, 1.0, 2.0, 3.0])
        _run_both(_model(node, [("x", T.FLOAT, x.shape)], opset=7), {"x": x})


def test_nearest_crop_and_resize_stays_on_the_cpu():
    node = helper.make_node("Resize", ["x", "roi", "", "sizes"], ["y"], mode="nearest",
                            coordinate_transformation_mode="tf_crop_and_resize")
    inits = [numpy_helper.from_array(np.array([0, 0, 0.2, 0.2, 1, 1, 0.8, 0.9], np.float32), "roi"),
             numpy_helper.from_array(np.array([1, 1, 3, 3], np.int64), "sizes")]
    rep = Backend.prepare(_model(node, [("x", T.FLOAT, (1, 1, 4, 4))], inits), "CPU")
    assert [p.target for p in rep.placement] == ["cpu"] and "tf_crop_and_resize" in rep.placement[0].reason
    x = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
    assert rep.run({"x": x})[0].shape == (1, 1, 3, 3)
