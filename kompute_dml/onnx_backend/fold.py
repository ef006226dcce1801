"""Constant folding, `prepare`'s first pass: what reads no input data becomes a constant once.

`Constant` nodes turn into constants directly from their attribute, and the readers of an
`Identity` of a constant read the constant itself (no copy of a tied weight). Every other node whose
inputs are all constants (initializers no feed overrides, or earlier folded values) is evaluated
once, all of them together in one onnxruntime session (onnx's reference evaluator where
onnxruntime refuses), and only the values a remaining node or a graph output reads are kept. Not
folded: nodes with no input, random draws, nodes with sub-graphs, or of a domain other than
ai.onnx; quantize / dequantize nodes, which keep a quantized weight quantized for the products
that read it (onnx_backend/fusions.py, product_groups.py), as onnxruntime's own folding does, but
for those of one element (a QDQ model's Pad value or Clip bound, quantized and dequantized: the host
needs it while planning, and a value computed on the device there sends the run node by node).

The result is a new graph of the nodes left (no initializers: those stay in `constants`) or, when
nothing folds, the model's own graph; the model itself is never changed.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .graph import _densify, _node_inputs
from .ort_compat import clamp_versions

KEEP = frozenset({"DequantizeLinear", "QuantizeLinear", "DynamicQuantizeLinear",
                  # a new draw each run
                  "RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial", "Bernoulli"})
_SCALARS = {"value_float": TensorProto.FLOAT, "value_int": TensorProto.INT64, "value_string": TensorProto.STRING}
_LISTS = {"value_floats": TensorProto.FLOAT, "value_ints": TensorProto.INT64, "value_strings": TensorProto.STRING}


@dataclass(frozen=True)
class Folded:
    graph: onnx.GraphProto  # the nodes left, in their order
    constants: dict[str, TensorProto]  # initializers and folded values
    folded: tuple[str, ...]  # op types of the folded nodes, one entry per node
    note: str  # why foldable nodes were left, if any were


def constant_value(node: onnx.NodeProto) -> TensorProto:
    """The tensor a `Constant` node holds, named after its output."""
    (attr,) = node.attribute  # the schema allows exactly one
    if attr.name == "value":
        t = TensorProto()
        t.CopyFrom(attr.t)
    elif attr.name == "sparse_value":
        t = numpy_helper.from_array(_densify(attr.sparse_tensor))
    elif attr.name in _SCALARS:
        v = helper.get_attribute_value(attr)
        t = helper.make_tensor("", _SCALARS[attr.name], [], [v])
    elif attr.name in _LISTS:
        v = list(helper.get_attribute_value(attr))
        t = helper.make_tensor("", _LISTS[attr.name], [len(v)], v)
    else:
        raise ValueError(f"Constant {node.name!r}: unknown attribute {attr.name!r}")
    t.name = node.output[0]
    return t


def _foldable(node: onnx.NodeProto, known: set[str]) -> bool:
    if node.domain not in ("", "ai.onnx") or node.op_type in KEEP:
        return False
    if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
        return False
    names = _node_inputs(node)
    return bool(names) and all(n in known for n in names)


def _scalar_quantization(node: onnx.NodeProto, known: set[str], values: dict[str, TensorProto], alias: dict[str, str],
                         small: set[str]) -> bool:
    """A QuantizeLinear / DequantizeLinear of constants whose first input holds one element (`small`:
    such values folded before, not evaluated yet)."""
    if node.op_type not in ("QuantizeLinear", "DequantizeLinear") or node.domain not in ("", "ai.onnx"):
        return False
    names = _node_inputs(node)
    src = alias.get(node.input[0], node.input[0])
    t = values.get(src)
    one = src in small or (t is not None and int(np.prod(t.dims)) <= 1)
    return bool(names) and all(n in known for n in names) and one


def _evaluate(model: onnx.ModelProto, nodes: list[onnx.NodeProto], constants: dict[str, TensorProto],
              wanted: list[str]) -> dict[str, TensorProto]:
    """The wanted outputs of `nodes`, run once with their constant inputs as initializers."""
    reads = {n for node in nodes for n in _node_inputs(node)}
    inits = [constants[n] for n in sorted(reads) if n in constants]
    graph = helper.make_graph(nodes, "kdml_fold", [], [onnx.ValueInfoProto(name=n) for n in wanted],
                              initializer=inits)
    opsets, ir = clamp_versions(model.opset_import, max(model.ir_version, 4), nodes)
    sub = helper.make_model(graph, opset_imports=opsets, ir_version=ir)
    try:
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.log_severity_level = 4  # a failure is reported by the summary
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        outs = ort.InferenceSession(sub.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(wanted, {})
    except Exception:
        from onnx.reference import ReferenceEvaluator

        outs = ReferenceEvaluator(sub).run(wanted, {})
    return {n: numpy_helper.from_array(np.asarray(v), n) for n, v in zip(wanted, outs)}


def fold_constants(model: onnx.ModelProto, constants: dict[str, TensorProto], feeds: set[str]) -> Folded:
    """Fold model.graph over `constants` (initializers; `feeds` are graph inputs, overridable
    initializers included, that are never constant)."""
    g = model.graph
    known = {n for n in constants if n not in feeds}
    values = dict(constants)
    folded: list[int] = []
    evaluated: list[int] = []
    alias: dict[str, str] = {}  # an Identity of a constant: its readers read the source (no copy)
    small: set[str] = set()  # one-element quantization results folded (a QDQ model's scalars)
    for i, node in enumerate(g.node):
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx") and len(node.output) == 1:
            values[node.output[0]] = constant_value(node)
        elif node.op_type == "Identity" and node.domain in ("", "ai.onnx") and node.input[0] in known:
            alias[node.output[0]] = alias.get(node.input[0], node.input[0])
        elif _foldable(node, known):
            evaluated.append(i)
        elif _scalar_quantization(node, known, values, alias, small):
            evaluated.append(i)
            small.update(o for o in node.output if o)
        else:
            continue
        folded.append(i)
        known.update(o for o in node.output if o)
    if not folded:
        return Folded(g, constants, (), "")
    gone = set(folded)
    left = _renamed([node for i, node in enumerate(g.node) if i not in gone], alias)
    read_later = {n for node in left for n in _node_inputs(node)} | {o.name for o in g.output}
    # an alias read other than as a direct input (a graph output, a sub-graph's outer name) is a copy
    copies = {a: src for a, src in alias.items() if a in read_later}
    read_later |= set(copies.values())
    wanted = [o for i in evaluated for o in g.node[i].output if o and o in read_later]
    note = ""
    if wanted:
        try:
            # (through the aliases: an Identity of a constant is no value of its own)
            values.update(_evaluate(model, _renamed([g.node[i] for i in evaluated], alias), values, wanted))
        except Exception as e:  # node by node: those neither engine runs stay nodes, with their readers
            note = f"not folded ({str(e).strip().splitlines()[0][:200]})"
            gone -= {i for i in evaluated if not _one(model, _renamed([g.node[i]], alias)[0], values)}
            left = _renamed([node for i, node in enumerate(g.node) if i not in gone], alias)
            folded = [i for i in folded if i in gone]
            read_later = {n for node in left for n in _node_inputs(node)} | {o.name for o in g.output}
    kept = {n: values[n] for n in values if n in constants or n in read_later}
    for a, src in copies.items():
        if src in values:
            kept[a] = TensorProto()
            kept[a].CopyFrom(values[src])
            kept[a].name = a
    graph = helper.make_graph(left, g.name, list(g.input), list(g.output), value_info=list(g.value_info),
                              doc_string=g.doc_string)
    ops = tuple(g.node[i].op_type for i in folded)
    return Folded(graph, kept, ops, note)


def _one(model: onnx.ModelProto, node: onnx.NodeProto, values: dict[str, TensorProto]) -> bool:
    """Evaluate one node into `values` where its inputs are there and an engine runs it."""
    outs = [o for o in node.output if o]
    if not all(n in values for n in _node_inputs(node)):
        return False
    try:
        values.update(_evaluate(model, [node], values, outs))
    except Exception:
        return False
    return True


def _renamed(nodes: list[onnx.NodeProto], alias: dict[str, str]) -> list[onnx.NodeProto]:
    out = []
    for node in nodes:
        if any(n in alias for n in node.input):
            node = onnx.NodeProto.FromString(node.SerializeToString())
            node.input[:] = [alias.get(n, n) for n in node.input]
        out.append(node)
    return out


def fold_summary(ops: tuple[str, ...]) -> str:
    counts = collections.Counter(ops)
    return ", ".join(f"{op} x{c}" for op, c in sorted(counts.items()))

