"""ONNX LogSoftmax and Hardmax on ACTIVATION_LOG_SOFTMAX1 / ACTIVATION_HARDMAX1 through
Backend.prepare(model, "CPU").run, against onnxruntime's CPU results: opsets before 13 (the 2-D
flattening from `axis`, default 1) and from 13 (one axis, default -1), every axis of ranks 1-4,
float32 and float16, Hardmax's ties exactly as onnxruntime breaks them; placed on Vulkan
(rep.placement) with no run-time fallback; float64 stays on the CPU with the rule's reason; onnx's
own node cases for both types (the _expanded LogSoftmax cases' Exp / Log / Reduce* / Sub nodes
included) wholly on the device."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402
from onnx_node_cases import node_case_tests, one_node_model  # noqa: E402

from kompute_dml.onnx_backend import Backend  # noqa: E402

ET = {np.float32: TensorProto.FLOAT, np.float16: TensorProto.FLOAT16, np.float64: TensorProto.DOUBLE}
SHAPES = ((7,), (3, 40), (2, 3, 5), (2, 3, 4, 5))
OPSETS = (9, 11, 13, 19)


def run(op: str, x: np.ndarray, opset: int, axis: int | None):
    attrs = {} if axis is None else {"axis": axis}
    model = one_node_model(helper.make_node(op, ["x"], ["y"], **attrs), [("x", ET[x.dtype.type], x.shape)],
                           ET[x.dtype.type], opset=opset)
    rep = Backend.prepare(model, "CPU")
    got = rep.run({"x": x})[0]
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    return rep, got, want


def axes_of(rank: int, opset: int) -> list[int | None]:
    """The attribute's values to try: absent (before opset 13 that is axis 1, outside a rank-1
    input's range), every axis and its negative form (opsets before 11 take only axes >= 0)."""
    return [*([None] if opset >= 13 or rank > 1 else []), *range(rank), *(range(-rank, 0) if opset >= 11 else ())]


def on_device(rep) -> None:
    assert [p.target for p in rep.placement] == ["vulkan"], rep.summary()
    assert rep.last_run.runtime_fallbacks == 0


@pytest.mark.parametrize("opset", OPSETS)
@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=lambda d: d.__name__)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_log_softmax(opset, dtype, shape):
    rng = np.random.default_rng(opset + len(shape))
    x = (rng.standard_normal(shape) * 5).astype(dtype)
    for axis in axes_of(len(shape), opset):
        rep, got, want = run("LogSoftmax", x, opset, axis)
        on_device(rep)
        assert got.dtype == dtype and got.shape == shape
        if dtype == np.float32:
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=4e-6, err_msg=f"axis {axis}")
        else:  # onnxruntime's float16 result rounded once or twice: a float16 spacing apart at most
            np.testing.assert_allclose(got, want, rtol=2**-10, atol=2**-12, err_msg=f"axis {axis}")


@pytest.mark.parametrize("opset", OPSETS)
@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=lambda d: d.__name__)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_hardmax_ties_as_onnxruntime(opset, dtype, shape):
    """Few distinct values (most rows tied, signed zeros among them): the same one-hot as
    onnxruntime, bit for bit, for every axis (before opset 13 the first maximum of the flattened
    trailing block)."""
    rng = np.random.default_rng(opset * 7 + len(shape))
    x = (rng.integers(-2, 3, size=shape) * 0.5).astype(dtype)
    x = np.where(x == 0, np.where(rng.random(shape) < 0.5, -0.0, 0.0), x).astype(dtype)
    for axis in axes_of(len(shape), opset):
        rep, got, want = run("Hardmax", x, opset, axis)
        on_device(rep)
        assert got.dtype == dtype and np.array_equal(got.view(np.uint16 if dtype == np.float16 else np.uint32),
                                                     want.view(np.uint16 if dtype == np.float16 else np.uint32)), axis


def test_hardmax_nan_differs_from_onnxruntime():
    """docs/log_softmax.md: a NaN counts as the maximum here (1 at the row's first NaN, numpy's
    argmax); onnxruntime's kernel (the row's maximum, then the first element equal to it) gives no
    1 where its maximum comes out NaN and skips a later NaN. Rows without NaN agree."""
    x = np.array([[np.nan, 1, 2, 3], [1, np.nan, 3, 2], [1, 2, 3, 3]], np.float32)
    rep, got, want = run("Hardmax", x, 13, None)
    on_device(rep)
    assert got.tolist() == [[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0]]
    assert want.tolist() == [[0, 0, 0, 0], [0, 0, 1, 0], [0, 0, 1, 0]]


def test_log_softmax_special_values_as_onnxruntime():
    """Rows of -inf, +inf, NaN and the float32 extremes: the same NaN rows and infinities as
    onnxruntime, the finite results within its float32 rounding."""
    top = float(np.finfo(np.float32).max)
    x = np.array([[1, np.nan, 3, 2], [-np.inf] * 4, [np.inf, 1, np.inf, 2], [-np.inf, 1, -np.inf, 2],
                  [top, -top, 0, top], [1e30, -1e30, 3e29, 0], [-0.0, 0.0, -1, -2]], np.float32)
    rep, got, want = run("LogSoftmax", x, 13, None)
    on_device(rep)
    assert np.array_equal(np.isnan(got), np.isnan(want)) and np.array_equal(np.isinf(got), np.isinf(want))
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("op", ["LogSoftmax", "Hardmax"])
def test_axis_outside_the_range_is_refused(op):
    """axis = rank (a rank-1 input's default before opset 13) or below -rank: ValueError naming the
    axis and the range, as onnxruntime refuses the node."""
    for shape, axis, opset in (((7,), None, 11), ((2, 3), 2, 13), ((2, 3), -3, 11)):
        attrs = {} if axis is None else {"axis": axis}
        model = one_node_model(helper.make_node(op, ["x"], ["y"], **attrs), [("x", TensorProto.FLOAT, shape)],
                               TensorProto.FLOAT, opset=opset)
        with pytest.raises(ValueError, match=rf"\({op} ''\): axis -?\d+ is outside \[-{len(shape)}, {len(shape) - 1}\]"):
            Backend.prepare(model, "CPU").run({"x": np.ones(shape, np.float32)})
        with pytest.raises(Exception, match="axis"):
            ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
                None, {"x": np.ones(shape, np.float32)})


def test_float64_stays_on_the_cpu():
    rep, got, want = run("LogSoftmax", np.arange(12.0).reshape(3, 4), 13, None)
    np.testing.assert_array_equal(got, want)
    assert rep.placement[0].target == "cpu" and "float64" in rep.placement[0].reason
    model = one_node_model(helper.make_node("Hardmax", ["x"], ["y"]), [("x", TensorProto.DOUBLE, (3, 4))],
                           TensorProto.DOUBLE, opset=13)
    placement = Backend.prepare(model, "CPU").placement  # (onnxruntime has no float64 Hardmax to run it)
    assert placement[0].target == "cpu" and "float64" in placement[0].reason


test_case_count, test_onnx_node_case_on_the_device = node_case_tests(r"^test_(logsoftmax|hardmax)\w*_cpu$", __name__, 28)
