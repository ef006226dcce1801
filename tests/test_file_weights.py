"""A model read from bytes or a binary file keeps those bytes, and its initializers are views of
them (onnx_backend/file_weights.py): the ranges found by walking the wire format are exactly
protobuf's raw_data, the views serve only the parsed model's own TensorProtos, and every way of
giving a model (bytes, path, ModelProto, text, external data, nodes out of order) runs the same."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from kompute_dml.onnx_backend import Backend
from kompute_dml.onnx_backend.file_weights import FileWeights, load, raw_data_ranges
from kompute_dml.onnx_backend.transfers import constant_array


def _model(rng: np.random.Generator, reversed_nodes: bool = False) -> onnx.ModelProto:
    """y = (x @ w + b) * s + c, with initializers of several kinds: raw float32 and float16, a
    float_data one (no raw_data), an int64 shape, a unicode name, an empty tensor."""
    w = rng.standard_normal((6, 5)).astype(np.float32)
    b = numpy_helper.from_array(rng.standard_normal(5).astype(np.float16), "bias é")
    s = helper.make_tensor("s", TensorProto.FLOAT, [5], rng.standard_normal(5).astype(np.float32).tolist())  # float_data
    c = numpy_helper.from_array(rng.standard_normal((1, 5)).astype(np.float32), "c")
    shape = numpy_helper.from_array(np.array([-1, 5], np.int64), "shape")
    empty = numpy_helper.from_array(np.zeros((0,), np.float32), "empty")
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["xw"]),
        helper.make_node("Cast", ["bias é"], ["b32"], to=TensorProto.FLOAT),
        helper.make_node("Add", ["xw", "b32"], ["t"]),
        helper.make_node("Mul", ["t", "s"], ["u"]),
        helper.make_node("Add", ["u", "c"], ["v"]),
        helper.make_node("Reshape", ["v", "shape"], ["y"]),
    ]
    graph = helper.make_graph(nodes[::-1] if reversed_nodes else nodes, "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 5])],
                              [numpy_helper.from_array(w, "w"), b, s, c, shape, empty])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _copy(model: onnx.ModelProto) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(model)
    return out


def _expected(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    init = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    y = (x.astype(np.float64) @ init["w"] + init["bias é"].astype(np.float64)) * init["s"] + init["c"]
    return y.astype(np.float32)


def test_ranges_are_protobufs_raw_data(rng):
    model = _model(rng)
    data = model.SerializeToString()
    ranges = raw_data_ranges(data)
    parsed = onnx.load_from_string(data)
    with_raw = {t.name for t in parsed.graph.initializer if t.HasField("raw_data")}
    assert set(ranges) == with_raw and "s" not in ranges and "bias é" in ranges
    for t in parsed.graph.initializer:
        if t.name in ranges:
            s, e = ranges[t.name]
            assert data[s:e] == t.raw_data


def test_views_serve_the_parsed_tensors_alone(rng):
    model = _model(rng)
    data = model.SerializeToString()
    proto = onnx.load_from_string(data)
    weights = FileWeights(data, proto)
    w = next(t for t in proto.graph.initializer if t.name == "w")
    view = weights.raw(w)
    assert view is not None and bytes(view) == w.raw_data
    arr = constant_array(w, weights)
    assert not arr.flags.writeable and not arr.flags.owndata
    np.testing.assert_array_equal(arr, numpy_helper.to_array(w))
    other = onnx.load_from_string(data)  # an equal tensor of another parse: its own raw_data
    assert weights.raw(next(t for t in other.graph.initializer if t.name == "w")) is None


def test_a_field_past_its_message_is_refused():
    with pytest.raises(ValueError):
        raw_data_ranges(b"\x3a\x05\x2a\x09")  # graph (7) of 5 bytes holding an initializer (5) of 9


@pytest.mark.parametrize("how", ["path", "bytes", "proto", "text", "external", "reordered"])
def test_every_way_of_giving_the_model_runs_the_same(rng, tmp_path, how):
    model = _model(rng, reversed_nodes=how == "reordered")
    x = rng.standard_normal((3, 6)).astype(np.float32)
    path = tmp_path / "m.onnx"
    if how == "text":
        path = tmp_path / "m.textproto"
        onnx.save(model, str(path), format="textproto")
    elif how == "external":  # (save_as_external_data rewrites the model it saves: a copy)
        onnx.save(_copy(model), str(path), save_as_external_data=True, all_tensors_to_one_file=True, location="m.data",
                  size_threshold=16)
    else:
        onnx.save(model, str(path))
    source = {"bytes": path.read_bytes(), "proto": model}.get(how, str(path))
    rep = Backend.prepare(source, "CPU")
    viewed = rep.file_weights is not None
    assert viewed == (how in ("path", "bytes", "reordered"))  # (external: every tensor here is)
    np.testing.assert_allclose(rep.run({"x": x})[0], _expected(model, x), rtol=1e-5, atol=1e-5)
    if how in ("path", "bytes"):
        assert rep.constant_host("w").base is not None and not rep.constant_host("w").flags.owndata


def test_load_reads_external_data(tmp_path, rng):
    model = _model(rng)
    path = tmp_path / "m.onnx"
    onnx.save(_copy(model), str(path), save_as_external_data=True, all_tensors_to_one_file=True, location="m.data",
              size_threshold=16)
    proto, weights = load(str(path))
    w = next(t for t in proto.graph.initializer if t.name == "w")
    np.testing.assert_array_equal(constant_array(w, weights), numpy_helper.to_array(next(
        t for t in model.graph.initializer if t.name == "w")))
