"""ONNX Tile, Pad, ConstantOfShape and Range on the device (onnx_backend/handlers_fill.py): onnx's
own node cases for these op types run through Backend and must place every node on Vulkan and
run it there (no run-time fallback), and models against onnxruntime's CPU results (pads and
repeats read at run time, every Pad mode, int64 data, Range over int64 and float32)."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx_node_cases import node_cases, run_case  # noqa: E402

from kompute_dml.onnx_backend import Backend  # noqa: E402

T = TensorProto
# every node case of these op types but bfloat16 Range (no DirectML type) and the _expanded
# forms (Range expanded into Loop, which runs on the CPU)
CASES = r"^test_(tile|tile_precomputed|constant_pad|constant_pad_axes|constant_pad_negative_axes|edge_pad|reflect_pad" \
        r"|wrap_pad|constantofshape_\w+|range_(float|float16|int32)_type_\w+?_delta)_cpu$"
_SKIP = ("_expanded_cpu",)
_CASE, NAMES = node_cases(CASES, __name__, _SKIP)


def test_case_count():
    assert len(NAMES) >= 14, NAMES


@pytest.mark.parametrize("name", NAMES)
def test_onnx_node_case_on_the_device(name):
    reps = run_case(_CASE, name)
    assert reps
    for rep in reps:
        assert {p.target for p in rep.placement} == {"vulkan"}, rep.summary()
        assert rep.last_run.runtime_fallbacks == 0, rep.last_run.events


def model_of(nodes, inputs, out_type, out_shape, inits=(), opset=17):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, t, list(s)) for n, t, s in inputs],
                              [helper.make_tensor_value_info("y", out_type, out_shape)], initializer=list(inits))
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def run_both(model, feeds, targets=frozenset({"vulkan"})):
    rep = Backend.prepare(model, "CPU")
    got = rep.run(feeds)[0]
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    assert {p.target for p in rep.placement} == targets, rep.summary()
    assert rep.last_run.runtime_fallbacks == 0, rep.last_run.events
    return rep


TYPES = [(np.float32, T.FLOAT), (np.float16, T.FLOAT16), (np.int64, T.INT64), (np.uint8, T.UINT8), (np.int32, T.INT32)]


@pytest.mark.parametrize(("dtype", "et"), TYPES, ids=lambda v: getattr(v, "__name__", str(v)))
@pytest.mark.parametrize("mode", ["constant", "edge", "reflect", "wrap"])
def test_pad_modes(dtype, et, mode):
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((2, 3, 4, 5)) * 100).astype(dtype)
    pads = np.array([0, 1, 2, 3, 1, 2, 3, 4], np.int64)  # reflect / wrap: below each size
    inits = [numpy_helper.from_array(pads, "pads")]
    ins = ["x", "pads"]
    if mode == "constant":
        inits.append(numpy_helper.from_array(np.array(7, dtype), "v"))
        ins.append("v")
    model = model_of([helper.make_node("Pad", ins, ["y"], mode=mode)], [("x", et, x.shape)], et, None, inits)
    run_both(model, {"x": x})


@pytest.mark.parametrize(("dtype", "et"), TYPES, ids=lambda v: getattr(v, "__name__", str(v)))
def test_tile_with_fed_repeats(dtype, et):
    x = (np.arange(2 * 3 * 4) - 7).astype(dtype).reshape(2, 3, 4)
    model = model_of([helper.make_node("Tile", ["x", "r"], ["y"])], [("x", et, x.shape), ("r", T.INT64, (3,))], et, None)
    for reps in ([1, 2, 3], [3, 1, 1], [2, 2, 2]):
        run_both(model, {"x": x, "r": np.array(reps, np.int64)})


@pytest.mark.parametrize(("start", "limit", "delta", "dtype", "et"), [
    (0, 17, 1, np.int64, T.INT64), (2 ** 40, 2 ** 40 - 30, -7, np.int64, T.INT64), (5, -9, -3, np.int32, T.INT32),
    (0.5, 9.0, 0.75, np.float32, T.FLOAT)], ids=str)
def test_range(start, limit, delta, dtype, et):
    names = ("s", "l", "d")
    model = model_of([helper.make_node("Range", list(names), ["y"])], [(n, et, ()) for n in names], et, None)
    run_both(model, {n: np.array(v, dtype) for n, v in zip(names, (start, limit, delta))})


def test_constant_of_shape_fed_and_from_a_shape():
    """ConstantOfShape of a fed shape runs on the device; of Shape(x) (the position-ids pattern of
    exported decoders) it reads no input data and stays on the host."""
    value = numpy_helper.from_array(np.array([2 ** 40 + 3], np.int64), "value")
    fed = model_of([helper.make_node("ConstantOfShape", ["s"], ["y"], value=value)], [("s", T.INT64, (3,))], T.INT64, None)
    run_both(fed, {"s": np.array([2, 3, 5], np.int64)})
    value = numpy_helper.from_array(np.array([3], np.int64), "value")
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("ConstantOfShape", ["s"], ["c"], value=value),
             helper.make_node("Add", ["c", "x"], ["y"])]
    model = model_of(nodes, [("x", T.INT64, (2, 5))], T.INT64, None)
    rep = run_both(model, {"x": np.arange(10, dtype=np.int64).reshape(2, 5) - 2 ** 35}, frozenset({"vulkan", "host"}))
    assert [p.target for p in rep.placement if p.op_type == "ConstantOfShape"] == ["host"]


@pytest.mark.parametrize(("dtype", "et"), TYPES[:3], ids=lambda v: getattr(v, "__name__", str(v)))
@pytest.mark.parametrize("pads", [[0, -1, 2, -3, 1, 2, -3, 0], [-1, 0, 0, 0, 0, 0, 0, -1], [0, 0, -4, 0, 0, 2, 0, 0]],
                         ids=["mixed", "crop-only", "whole-axis-cropped"])
def test_constant_pad_with_negative_pads_crops_on_the_device(dtype, et, pads):
    """Negative pads remove elements (SLICE1 first, then PADDING1 for the positive ones), as
    onnxruntime's; an axis cropped to nothing leaves an output of padding values only."""
    x = (np.random.default_rng(2).standard_normal((2, 3, 4, 5)) * 50).astype(dtype)
    inits = [numpy_helper.from_array(np.array(pads, np.int64), "pads"), numpy_helper.from_array(np.array(3, dtype), "v")]
    model = model_of([helper.make_node("Pad", ["x", "pads", "v"], ["y"], mode="constant")], [("x", et, x.shape)], et,
                     None, inits)
    run_both(model, {"x": x})


@pytest.mark.parametrize(("xs", "shape", "axes"), [((6, 7, 3), (4, 10, 3), None), ((5, 8), (2,), [1]),
                                                   ((3, 9, 4), (6, 5), [0, 1]), ((4, 4), (7, 1), None)])
def test_center_crop_pad_on_the_device(xs, shape, axes):
    """CenterCropPad: crops and zero pads around each axis' center (the odd element after it),
    SLICE1 then PADDING1, as onnxruntime's."""
    x = np.random.default_rng(4).standard_normal(xs).astype(np.float32)
    kw = {} if axes is None else {"axes": axes}
    inits = [numpy_helper.from_array(np.array(shape, np.int64), "s")]
    model = model_of([helper.make_node("CenterCropPad", ["x", "s"], ["y"], **kw)], [("x", T.FLOAT, xs)], T.FLOAT, None,
                     inits, opset=18)
    run_both(model, {"x": x})
