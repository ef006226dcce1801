"""The model onnx's shape inference sees at prepare (onnx_backend/analysis.shape_model): the large
initializers as typed inputs without their data. The types inferred for every value equal those of
the whole model's inference, with initializers declared as inputs (IR 3) or not, with small
initializers whose values set shapes (Reshape, Expand, Slice) kept."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper

from kompute_dml.onnx_backend.analysis import SHAPE_MODEL_ELEMENTS, GraphAnalysis, shape_model


def _model(rng, ir_version: int, as_inputs: bool) -> onnx.ModelProto:
    big = SHAPE_MODEL_ELEMENTS + 2  # just past the limit (even: Reshape halves it)
    w = numpy_helper.from_array(rng.standard_normal((64, big)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(big).astype(np.float16), "b")
    shape = numpy_helper.from_array(np.array([-1, 2, big // 2], np.int64), "shape")
    expand = numpy_helper.from_array(np.array([3, 1, 1, 1], np.int64), "expand")
    starts, ends = (numpy_helper.from_array(np.array([v], np.int64), n) for v, n in ((1, "starts"), (5, "ends")))
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["y"]),
        helper.make_node("Cast", ["y"], ["yh"], to=T.FLOAT16),
        helper.make_node("Add", ["yh", "b"], ["z"]),
        helper.make_node("Reshape", ["z", "shape"], ["r"]),
        helper.make_node("Expand", ["r", "expand"], ["e"]),
        helper.make_node("Slice", ["e", "starts", "ends"], ["s"]),
        helper.make_node("Shape", ["s"], ["sh"]),
    ]
    inits = [w, b, shape, expand, starts, ends]
    inputs = [helper.make_tensor_value_info("x", T.FLOAT, ["N", 64])]
    if as_inputs:
        inputs += [helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in inits]
    outputs = [helper.make_tensor_value_info(n, T.UNDEFINED, None) for n in ("s", "sh")]
    graph = helper.make_graph(nodes, "g", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=ir_version)


def _whole_model_types(model):
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False).graph
    types = {vi.name: vi.type for vi in [*inferred.value_info, *inferred.input, *inferred.output]
             if vi.type.WhichOneof("value") is not None}
    for t in model.graph.initializer:
        types.setdefault(t.name, helper.make_tensor_type_proto(t.data_type, list(t.dims)))
    return types


@pytest.mark.parametrize("ir_version,as_inputs", [(8, False), (3, True), (8, True)])
def test_types_equal_the_whole_models(rng, ir_version, as_inputs):
    model = _model(rng, ir_version, as_inputs)
    light = shape_model(model)
    assert light is not model
    assert {t.name for t in light.graph.initializer} == {"shape", "expand", "starts", "ends"}
    assert [vi.name for vi in light.graph.input].count("w") == 1  # declared once, also where IR 3 declares it
    want = _whole_model_types(model)
    got = GraphAnalysis._infer_types(model)
    assert set(got) == set(want)
    for name, tp in want.items():
        assert got[name] == tp, name
    dims = [d.dim_value for d in got["s"].tensor_type.shape.dim]  # the small initializers' values read
    assert dims[0] == 2 and dims[2:] == [2, (SHAPE_MODEL_ELEMENTS + 2) // 2] and got["s"].tensor_type.elem_type == T.FLOAT16


def test_a_model_of_small_initializers_is_itself(rng):
    x = helper.make_tensor_value_info("x", T.FLOAT, [4])
    c = numpy_helper.from_array(np.ones(SHAPE_MODEL_ELEMENTS, np.float32).reshape(-1)[:4], "c")
    model = helper.make_model(helper.make_graph([helper.make_node("Add", ["x", "c"], ["y"])], "g", [x],
                                                [helper.make_tensor_value_info("y", T.FLOAT, [4])], [c]))
    assert shape_model(model) is model
