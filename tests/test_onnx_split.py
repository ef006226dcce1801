"""ONNX Split on the device (SPLIT through kdml.split: onnx_backend/handlers_values.py
MOVE_HANDLERS) inside a whole-graph plan, bit for bit against onnxruntime: the opset 11-12
`split` attribute, the opset 13+ `split` input, opset 18's `num_outputs` (the last part
smaller), equal parts without either, negative axes, empty parts, and a GPT-2 attention's
Split of the fused QKV projection."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

from kompute_dml.onnx_backend import Backend  # noqa: E402
from kompute_dml.onnx_backend.values import VULKAN  # noqa: E402

n = helper.make_node


def _model(opset, split_node, shape, elem=T.FLOAT, inits=(), extra=(), finals=None):
    """x -> a device copy -> the Split node -> `extra` nodes; the graph's outputs
    `finals` (the Split's outputs by default); the data a device value."""
    # a device copy first (booleans: Identity is not placed for them, a one-input Concat is)
    first = n("Concat", ["x"], ["x2"], axis=0) if elem == T.BOOL else n("Identity", ["x"], ["x2"])
    outs = [o for o in split_node.output]
    nodes = [first, split_node, *extra]
    finals = finals or outs
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", elem, list(shape))],
                          [helper.make_tensor_value_info(o, elem, None) for o in finals], initializer=list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def _values(rng, shape, dtype):
    if dtype == np.bool_:
        return rng.integers(0, 2, shape).astype(bool)
    if np.dtype(dtype).kind == "f":
        x = rng.standard_normal(shape).astype(dtype)
        x.reshape(-1)[:2] = [-0.0, np.inf]
        return x
    return rng.integers(-1000, 1000, shape).astype(dtype)


def _check(model, x, *, empty_parts=0):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, {"x": x})
    rep = Backend.prepare(model, "CPU")
    assert "vulkan  Split x1 -> SPLIT" in rep.summary()
    assert [p.target for p in rep.placement if p.op_type == "Split"] == [VULKAN]
    for _ in range(2):  # the plan's first run and its replay
        got = rep.run({"x": x})
        st = rep.last_run
        assert st.submissions == 1 and st.runtime_fallbacks == 0 and st.cpu_segments == 0
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and g.shape == w.shape
            np.testing.assert_array_equal(np.ascontiguousarray(g).view(np.uint8), np.ascontiguousarray(w).view(np.uint8))
    assert sum(0 in w.shape for w in want) == empty_parts


@pytest.mark.parametrize(("elem", "dtype"), [(T.FLOAT, np.float32), (T.FLOAT16, np.float16), (T.INT64, np.int64),
                                             (T.INT8, np.int8), (T.DOUBLE, np.float64), (T.BOOL, np.bool_)])
def test_split_input_opset13(rng, elem, dtype):
    node = n("Split", ["x2", "s"], ["a", "b", "c"], axis=-1)
    model = _model(13, node, (2, 3, 9), elem, [numpy_helper.from_array(np.array([2, 3, 4], np.int64), "s")])
    _check(model, _values(rng, (2, 3, 9), dtype))


def test_split_attribute_opset11(rng):
    node = n("Split", ["x2"], ["a", "b"], axis=1, split=[4, 1])
    _check(_model(11, node, (3, 5)), _values(rng, (3, 5), np.float32))


@pytest.mark.parametrize(("length", "parts"), [(7, 3), (7, 4), (8, 4), (5, 1)])
def test_num_outputs_opset18(rng, length, parts):
    """num_outputs parts of ceil(length / parts), the last one what is left."""
    node = n("Split", ["x2"], [f"o{i}" for i in range(parts)], axis=-2, num_outputs=parts)
    _check(_model(18, node, (2, length, 3), T.INT32), _values(rng, (2, length, 3), np.int32))


def test_equal_parts_without_sizes(rng):
    node = n("Split", ["x2"], ["a", "b", "c"], axis=0)
    _check(_model(13, node, (6, 2, 2), T.UINT16), _values(rng, (6, 2, 2), np.uint16))


def test_empty_parts(rng):
    """A part of size 0 is an empty host array; the others run on the device."""
    node = n("Split", ["x2", "s"], ["a", "b", "c", "d"], axis=1)
    model = _model(13, node, (2, 5), inits=[numpy_helper.from_array(np.array([0, 3, 0, 2], np.int64), "s")])
    _check(model, _values(rng, (2, 5), np.float32), empty_parts=2)


def test_gpt2_qkv_split(rng):
    """GPT-2's attention: the fused QKV projection (B, S, 3H) split on its last axis, each part
    reshaped into heads and transposed, as an export of transformers' GPT2Attention does."""
    b, s, heads, dh = 2, 5, 4, 8
    h = heads * dh
    node = n("Split", ["x2", "s"], ["q", "k", "v"], axis=2)
    extra = [e for name in ("q", "k", "v") for e in (
        n("Reshape", [name, "heads"], [f"{name}4"]),
        n("Transpose", [f"{name}4"], [f"{name}t"], perm=[0, 2, 1, 3]),
        n("Add", [f"{name}t", f"{name}t"], [f"{name}_out"]))]
    inits = [numpy_helper.from_array(np.array([h, h, h], np.int64), "s"),
             numpy_helper.from_array(np.array([b, s, heads, dh], np.int64), "heads")]
    model = _model(13, node, (b, s, 3 * h), inits=inits, extra=extra, finals=["q_out", "k_out", "v_out"])
    _check(model, _values(rng, (b, s, 3 * h), np.float32))


def test_num_outputs_that_leave_no_last_part_are_refused_as_onnxruntime_does():
    """5 into num_outputs=4: parts of ceil(5 / 4) = 2 leave -1 for the last; both refuse."""
    node = n("Split", ["x2"], ["a", "b", "c", "d"], axis=0, num_outputs=4)
    model = _model(18, node, (5,))
    x = np.arange(5, dtype=np.float32)
    with pytest.raises(Exception, match="Split size 2 exceeds the remaining size"):
        ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    with pytest.raises(ValueError, match="num_outputs 4 does not split 5 into 4 parts"):
        Backend.prepare(model, "CPU").run({"x": x})


def test_split_sizes_computed_on_the_device_fall_back():
    """A `split` input from device data: the plan refuses (FallbackNeeded), the run is still right."""
    g = helper.make_graph(
        [n("Add", ["k", "k"], ["k2"]), n("Split", ["x", "k2"], ["a", "b"], axis=0)], "g",
        [helper.make_tensor_value_info("x", T.FLOAT, [6]), helper.make_tensor_value_info("k", T.INT64, [2])],
        [helper.make_tensor_value_info(o, T.FLOAT, None) for o in "ab"])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    x = np.arange(6, dtype=np.float32)
    a, b = Backend.prepare(model, "CPU").run({"x": x, "k": np.array([1, 2], np.int64)})
    np.testing.assert_array_equal(a, x[:2])
    np.testing.assert_array_equal(b, x[2:])


@pytest.mark.parametrize("sizes,viewed", [([4, 4], True), ([8, 4, 4], True), ([3, 5], False), ([4, 3, 1], False)])
def test_parts_starting_aligned_are_views(rng, sizes, viewed):
    """Where every part starts on a 16-byte boundary the parts are views of the input (no SPLIT
    dispatch in the program's profile); otherwise SPLIT copies them. Both give onnxruntime's bytes."""
    width = sum(sizes)
    node = n("Split", ["x2", "s"], [f"p{i}" for i in range(len(sizes))], axis=1)
    model = _model(13, node, (3, width), inits=[numpy_helper.from_array(np.array(sizes, np.int64), "s")])
    x = _values(rng, (3, width), np.float32)
    _check(model, x)
    rep = Backend.prepare(model, "CPU")
    rep.run({"x": x})
    with rep.device.profile() as p:
        rep.run({"x": x})
    assert any(r.scope.split()[1:2] == ["Split"] for r in p.rows) != viewed, [r.scope for r in p.rows]
