"""The plugin EP's graph description (native/ort_ep/ep_graph.cc's format) as an onnx.ModelProto."""

from __future__ import annotations

from typing import Any

import onnx
from onnx import helper

from ..onnx_backend.file_weights import FileWeights

_LIST_TYPES = {"ints": onnx.AttributeProto.INTS, "floats": onnx.AttributeProto.FLOATS,
               "strings": onnx.AttributeProto.STRINGS}


def _value_info(vi: tuple[str, int, Any]) -> onnx.ValueInfoProto:
    name, elem_type, dims = vi
    if elem_type < 0:
        return onnx.ValueInfoProto(name=name)
    if dims is None:  # the element type alone
        return helper.make_tensor_value_info(name, elem_type, None)
    return helper.make_tensor_value_info(name, elem_type, [d if d != "" else None for d in dims])


def _attribute(name: str, value: Any) -> onnx.AttributeProto:
    if isinstance(value, tuple) and value and value[0] == "tensor":
        _, elem_type, dims, data = value
        tensor = helper.make_tensor(name, elem_type, list(dims), bytes(data or b""), raw=True)
        return helper.make_attribute(name, tensor)
    if isinstance(value, tuple):
        kind, items = value
        return helper.make_attribute(name, items, attr_type=_LIST_TYPES[kind])
    return helper.make_attribute(name, value)


def tensor_elem_types(desc: dict[str, Any]) -> dict[str, int]:
    """Every described value's ONNX element type (-1 where it is not a tensor)."""
    types = {vi[0]: vi[1] for vi in desc["inputs"] + desc["outputs"]}
    types.update({t[0]: t[1] for t in desc["initializers"]})
    for node in desc["nodes"]:
        types.update({vi[0]: vi[1] for vi in node[6]})
    return types


def to_model(desc: dict[str, Any], input_shapes: bool = True) -> onnx.ModelProto:
    """The described graph as a model; graph attributes (desc value None) are left out, so a node
    carrying one must not be run from it (plugin.Ep never claims such nodes). `input_shapes`
    False: the graph inputs declare their element types only (a sub-graph compiled to run: its
    inputs are values onnxruntime computed, whose shapes may differ from the ones its inference
    declared, e.g. (1,) for a value declared rank 0)."""
    return to_model_and_weights(desc, input_shapes)[0]


def to_model_and_weights(desc: dict[str, Any], input_shapes: bool = True) -> tuple[onnx.ModelProto, FileWeights]:
    """to_model's model, and its initializers' raw_data as views of the bytes they were set from
    (onnx_backend/file_weights.py: the model's first run reads them without protobuf's copy)."""
    initializers, raw = [], {}
    for name, elem_type, dims, data in desc["initializers"]:
        t = onnx.TensorProto(name=name, data_type=elem_type, dims=list(dims))
        if data is not None:
            t.raw_data = raw[name] = bytes(data)  # (onnxruntime may free its copy after compile)
        initializers.append(t)
    nodes: list[onnx.NodeProto] = []
    value_info: list[onnx.ValueInfoProto] = []
    for op_type, domain, name, inputs, outputs, attrs, out_vis in desc["nodes"]:
        node = helper.make_node(op_type, list(inputs), list(outputs), name=name or None, domain=domain or None)
        node.attribute.extend(_attribute(k, v) for k, v in attrs.items() if v is not None and not k.startswith("__"))
        nodes.append(node)
        value_info.extend(_value_info(vi) for vi in out_vis if vi[0])
    inputs = [_value_info(vi if input_shapes or vi[1] < 0 else (vi[0], vi[1], None)) for vi in desc["inputs"]]
    graph = helper.make_graph(nodes, desc["name"] or "kdml_ep", inputs,
                              [_value_info(vi) for vi in desc["outputs"]], initializer=initializers,
                              value_info=[v for v in value_info if v.name not in
                                          {vi[0] for vi in desc["inputs"] + desc["outputs"]}])
    opsets = [helper.make_opsetid(domain, int(version)) for domain, version in desc["opsets"]]
    model = helper.make_model(graph, opset_imports=opsets, ir_version=onnx.IR_VERSION)
    return model, FileWeights.of(model, raw)
