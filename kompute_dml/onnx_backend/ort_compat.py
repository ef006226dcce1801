"""Models that the installed onnxruntime accepts: IR version and default-domain opset clamped.

onnx 1.23's `helper.make_model` writes IR version 14 and opset 28, which onnxruntime 1.31
refuses ("max supported IR version: 13", "official support for domain ai.onnx is till opset
26"): every CPU sub-graph then fell to onnx's reference evaluator. Lowering the opset import
changes nothing when every node resolves to the same operator schema at the lower version:
a node of opset V runs the schema with the largest since_version <= V, so any version from
the largest since_version among the graph's nodes up to V gives the same semantics. Where
the nodes need a newer schema than onnxruntime has, the model is left as it is (onnxruntime
refuses it and says why). The limits are probed once per process with a one-node model.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator

import onnx
from onnx import TensorProto, helper


@functools.cache
def ort_limits() -> tuple[int, int] | None:
    """(highest IR version, highest ai.onnx opset) the installed onnxruntime loads; None
    without onnxruntime."""
    try:
        import onnxruntime as ort
    except ImportError:
        return None

    def loads(ir: int, opset: int) -> bool:
        g = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "probe",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=ir)
        so = ort.SessionOptions()
        so.log_severity_level = 4
        try:
            ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
            return True
        except Exception:
            return False

    ir = next((v for v in range(onnx.IR_VERSION, 6, -1) if loads(v, 13)), 7)
    opset = next((v for v in range(onnx.defs.onnx_opset_version(), 12, -1) if loads(ir, v)), 13)
    return ir, opset


def _nodes(nodes: Iterable[onnx.NodeProto]) -> Iterator[onnx.NodeProto]:
    for node in nodes:
        yield node
        for attr in node.attribute:
            graphs = list(attr.graphs) + ([attr.g] if attr.HasField("g") else [])
            for g in graphs:
                yield from _nodes(g.node)


def needed_opset(nodes: Iterable[onnx.NodeProto], opset: int) -> int | None:
    """The lowest ai.onnx opset at which every node (sub-graphs included) resolves to the
    schema it has at `opset`; None if a node has no known schema."""
    need = 1
    for node in _nodes(nodes):
        if node.domain not in ("", "ai.onnx"):
            continue
        try:
            need = max(need, onnx.defs.get_schema(node.op_type, opset, "").since_version)
        except Exception:  # onnx.defs.SchemaError: not an ONNX operator (a local function?)
            return None
    return need


def clamp_versions(opsets: Iterable[onnx.OperatorSetIdProto], ir_version: int,
                   nodes: Iterable[onnx.NodeProto]) -> tuple[list[onnx.OperatorSetIdProto], int]:
    """(opset imports, IR version) for a model of `nodes` that the installed onnxruntime
    loads, with the same meaning (module docstring); unchanged where that is impossible."""
    out = [helper.make_opsetid(o.domain, o.version) for o in opsets]
    limits = ort_limits()
    if limits is None:
        return out, ir_version
    max_ir, max_opset = limits
    for o in out:
        if o.domain in ("", "ai.onnx") and o.version > max_opset:
            need = needed_opset(nodes, o.version)
            if need is not None and need <= max_opset:
                o.version = max_opset
    if ir_version > max_ir:
        try:
            floor = helper.find_min_ir_version_for(out, ignore_unknown=True)
        except Exception:
            floor = max_ir
        ir_version = max(max_ir, floor)
    return out, ir_version


def for_onnxruntime(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model`, or a copy with the versions of `clamp_versions` (onnxruntime's InferenceSession
    for `kompute-dml run --compare-onnxruntime`)."""
    opsets, ir = clamp_versions(model.opset_import, model.ir_version,
                                list(model.graph.node) + [n for f in model.functions for n in f.node])
    if ir == model.ir_version and [(o.domain, o.version) for o in opsets] == \
            [(o.domain, o.version) for o in model.opset_import]:
        return model
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    copy.ir_version = ir
    del copy.opset_import[:]
    copy.opset_import.extend(opsets)
    return copy
