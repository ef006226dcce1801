"""ONNX Concat and Slice of data on the device (JOIN, SLICE1: onnx_backend/handlers_values.py
MOVE_HANDLERS) inside a whole-graph plan, against numpy; shape arithmetic stays on the host."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

from kompute_dml.onnx_backend import Backend  # noqa: E402
from kompute_dml.onnx_backend.values import HOST, VULKAN  # noqa: E402

OPSETS = [helper.make_opsetid("", 17)]


def _model(nodes, inputs, outputs, inits=()):
    g = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    return helper.make_model(g, opset_imports=OPSETS, ir_version=10)


def _i64(name, values):
    return numpy_helper.from_array(np.array(values, np.int64), name)


def _join_slice_model(elem=T.FLOAT):
    """a, b: (B, S, 4) and (B, S, 3). Concat on the last axis (data), Slice of the result with
    negative steps and ends beyond the sizes, Concat of that with a Slice of b along axis 1, a
    Concat of shape values (host) feeding a Reshape, and an Add of data so Concat / Slice sit
    between device nodes."""
    n = helper.make_node
    inits = [
        _i64("s_starts", [-1, 100]), _i64("s_ends", [-1000, 0]), _i64("s_axes", [1, 2]), _i64("s_steps", [-1, -2]),
        _i64("b_starts", [1]), _i64("b_ends", [1 << 40]), _i64("b_axes", [-2]),
        _i64("minus1", [-1]), _i64("zero", [0]),
    ]
    nodes = [
        n("Add", ["a", "a"], ["a2"]),
        n("Concat", ["a2", "b"], ["ab"], axis=-1),                                  # (B, S, 7)
        n("Slice", ["ab", "s_starts", "s_ends", "s_axes", "s_steps"], ["rev"]),   # (B, S, 3): S reversed; 6, 4, 2
        n("Slice", ["b", "b_starts", "b_ends", "b_axes"], ["b_tail"]),            # (B, S - 1, 3)
        n("Concat", ["rev", "ab"], ["both"], axis=2),                             # (B, S, 10)
        n("Shape", ["both"], ["shape"]),
        n("Slice", ["shape", "zero", "minus1"], ["lead"]),                        # host: (B, S)
        n("Concat", ["lead", "minus1"], ["target"], axis=0),                      # host
        n("Reshape", ["both", "target"], ["flat"]),
        n("Add", ["flat", "flat"], ["y"]),
    ]
    inputs = [helper.make_tensor_value_info("a", elem, ["B", "S", 4]),
              helper.make_tensor_value_info("b", elem, ["B", "S", 3])]
    outputs = [helper.make_tensor_value_info("y", elem, None), helper.make_tensor_value_info("b_tail", elem, None)]
    return _model(nodes, inputs, outputs, inits)


def _expected(a, b):
    ab = np.concatenate([a + a, b], axis=-1)
    rev = ab[:, ::-1, 6:0:-2]  # ends clamp: axis 1 to -1 (all of it), axis 2 start 100 -> 6
    both = np.concatenate([rev, ab], axis=2)
    return both + both, b[:, 1:, :]


def test_placement():
    rep = Backend.prepare(_join_slice_model(), "CPU")
    where = {(p.index, p.op_type): (p.target, p.operator) for p in rep.placement}
    assert where[(1, "Concat")] == (VULKAN, "JOIN")
    assert where[(2, "Slice")] == (VULKAN, "SLICE1")
    assert where[(3, "Slice")] == (VULKAN, "SLICE1")
    assert where[(4, "Concat")] == (VULKAN, "JOIN")
    assert where[(6, "Slice")][0] == HOST and where[(7, "Concat")][0] == HOST
    assert rep.graph_mode


@pytest.mark.parametrize(("elem", "dtype"), [(T.FLOAT, np.float32), (T.FLOAT16, np.float16), (T.INT32, np.int32),
                                             (T.INT64, np.int64)])
def test_concat_and_slice_run_in_one_submission(rng, elem, dtype):
    rep = Backend.prepare(_join_slice_model(elem), "CPU")
    for bsz, s in ((2, 5), (1, 2), (3, 9), (2, 5)):
        if np.dtype(dtype).kind == "f":
            a = rng.standard_normal((bsz, s, 4)).astype(dtype)
            b = rng.standard_normal((bsz, s, 3)).astype(dtype)
            a[0, 0, 0], b[0, -1, 1] = np.nan, -0.0
        else:
            a = rng.integers(-1000, 1000, (bsz, s, 4)).astype(dtype)
            b = rng.integers(-1000, 1000, (bsz, s, 3)).astype(dtype)
            b[0, 0, 0] = np.iinfo(dtype).min
        y, b_tail = rep.run({"a": a, "b": b})
        st = rep.last_run
        assert st.submissions == 1 and st.runtime_fallbacks == 0 and st.cpu_segments == 0
        want_y, want_tail = _expected(a, b)
        assert y.dtype == np.dtype(dtype) and y.shape == want_y.shape and b_tail.shape == want_tail.shape
        # y: bit copies (-0 kept) of sums; a sum's NaN payload is the device's (the H100 gives
        # 0x7fffffff where numpy keeps the operand's 0x7fc00000), so NaNs compare as NaNs
        nan = np.isnan(want_y) if np.dtype(dtype).kind == "f" else np.zeros(want_y.shape, bool)
        np.testing.assert_array_equal(np.isnan(y) if nan.any() else nan, nan)
        np.testing.assert_array_equal(y[~nan].view(np.uint8), want_y[~nan].view(np.uint8))
        np.testing.assert_array_equal(b_tail.view(np.uint8), want_tail.view(np.uint8))


def test_concat_of_an_empty_input_and_an_empty_slice():
    """An input empty along the axis is left out of JOIN; a Slice whose result is empty is an empty
    host value (kompute_dml tensors are never empty): no fallback, the graph still one program."""
    n = helper.make_node
    nodes = [n("Add", ["a", "a"], ["a2"]),
             n("Concat", ["a2", "e"], ["c"], axis=1),
             n("Slice", ["a2", "st", "en"], ["empty"])]
    inits = [_i64("st", [0, 5]), _i64("en", [2, 5])]
    model = _model(nodes, [helper.make_tensor_value_info("a", T.FLOAT, [2, 3]),
                           helper.make_tensor_value_info("e", T.FLOAT, [2, 0])],
                   [helper.make_tensor_value_info("c", T.FLOAT, None),
                    helper.make_tensor_value_info("empty", T.FLOAT, None)], inits)
    rep = Backend.prepare(model, "CPU")
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    c, empty = rep.run({"a": a, "e": np.zeros((2, 0), np.float32)})
    np.testing.assert_array_equal(c, a + a)
    assert empty.shape == (2, 0) and empty.dtype == np.float32
    assert rep.last_run.runtime_fallbacks == 0 and rep.last_run.cpu_segments == 0


def test_an_empty_slice_joined_to_device_values_keeps_the_program():
    """Phi-3's rotary embedding over the whole head: x[..., 8:] is empty and is concatenated to the rotated
    part; the run stays one recorded program (no node-by-node run, no fallback) and equals onnxruntime."""
    n = helper.make_node
    nodes = [n("Mul", ["x", "x"], ["r"]), n("Slice", ["x", "st", "en", "ax"], ["tail"]),
             n("Concat", ["r", "tail"], ["y"], axis=-1), n("Shape", ["tail"], ["ts"])]
    inits = [_i64("st", [8]), _i64("en", [2 ** 62]), _i64("ax", [-1])]
    model = _model(nodes, [helper.make_tensor_value_info("x", T.FLOAT, ["b", "s", 8])],
                   [helper.make_tensor_value_info("y", T.FLOAT, None), helper.make_tensor_value_info("ts", T.INT64, None)],
                   inits)
    rep = Backend.prepare(model, "CPU")
    for b, s in ((1, 7), (3, 5), (1, 7)):
        x = np.random.default_rng(b).standard_normal((b, s, 8)).astype(np.float32)
        y, ts = rep.run({"x": x})
        np.testing.assert_array_equal(y, x * x)
        np.testing.assert_array_equal(ts, [b, s, 0])
        st = rep.last_run
        assert st.runtime_fallbacks == 0 and st.cpu_segments == 0 and not st.events, st.events
        assert st.uploads == 1 and st.downloads == 1


def test_slice_with_starts_computed_on_the_device_falls_back():
    """Starts from device data: the plan refuses (FallbackNeeded) and the run is still right."""
    n = helper.make_node
    nodes = [n("Add", ["k", "k"], ["k2"]), n("Slice", ["x", "k2", "en"], ["y"])]
    model = _model(nodes, [helper.make_tensor_value_info("x", T.FLOAT, [6]),
                           helper.make_tensor_value_info("k", T.INT64, [1])],
                   [helper.make_tensor_value_info("y", T.FLOAT, None)], [_i64("en", [100])])
    rep = Backend.prepare(model, "CPU")
    x = np.arange(6, dtype=np.float32)
    (y,) = rep.run({"x": x, "k": np.array([1], np.int64)})
    np.testing.assert_array_equal(y, x[2:])


@pytest.mark.parametrize("start,step,axis,transposed", [
    (0, 1, -1, False), (4, 1, -1, False), (8, 2, -1, False), (1, 1, -1, False), (3, 2, -1, False),
    (0, 1, 1, True), (2, 3, 1, True), (1, 1, 0, False), (-5, 1, -1, False)])
def test_slice_of_positive_steps_is_a_view_where_its_start_is_aligned(rng, start, step, axis, transposed):
    """A Slice of positive steps whose first element lies on a 16-byte boundary is a view of its
    input's bytes (no dispatch; of a transposed view too); any other runs SLICE1. Both read and
    write exactly numpy's window, as a graph output and read by a later node."""
    n = helper.make_node
    x = rng.standard_normal((3, 6, 16)).astype(np.float32)
    perm = [0, 2, 1] if transposed else [0, 1, 2]
    nodes = [n("Add", ["x", "x"], ["x2"]), n("Transpose", ["x2"], ["t"], perm=perm),
             n("Slice", ["t", "st", "en", "ax", "sp"], ["s"]), n("Mul", ["s", "s"], ["y"])]
    inits = [_i64("st", [start]), _i64("en", [1 << 40]), _i64("ax", [axis]), _i64("sp", [step])]
    vi = helper.make_tensor_value_info
    model = _model(nodes, [vi("x", T.FLOAT, [3, 6, 16])], [vi("y", T.FLOAT, None), vi("s", T.FLOAT, None)], inits)
    rep = Backend.prepare(model, "CPU")
    y, s = rep.run({"x": x})
    window = [slice(None)] * 3
    window[axis] = slice(start, None, step)
    want = (x + x).transpose(perm)[tuple(window)]
    np.testing.assert_array_equal(s, want)
    np.testing.assert_array_equal(y, want * want)
    # the window's first element, in elements of x2 (row-major 3 x 6 x 16: strides 96, 16, 1)
    a = axis % 3
    length = x.shape[perm[a]]
    first = (start if start >= 0 else start + length) * (96, 16, 1)[perm[a]]
    with rep.device.profile() as p:
        rep.run({"x": x})
    sliced = [r.scope for r in p.rows if r.scope.split()[1:2] == ["Slice"]]
    assert bool(sliced) == (first * 4 % 16 != 0), (first, [r.scope for r in p.rows])
