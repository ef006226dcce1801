"""Common sub-expressions, a `prepare` pass after constant folding: a node of the default or com.microsoft
domain whose op type, attributes and inputs equal an earlier node's computes the same values, so its
readers read the earlier node's outputs and it is dropped (onnxruntime's optimizer has the same pass).

What it finds in the exports: torch's scaled_dot_product_attention writes each layer's additive mask
anew from the one boolean mask (Where(mask, 0, -inf) per layer), so the attention fusion's test of
the mask's rows (fusion_attention._rows_with_keys) and the mask itself are made once, not per layer.
Small constant inputs compare by value (each layer's own Constant nodes hold the same numbers).
Not merged: random draws (a new draw each, Dropout's included), nodes with sub-graphs (and no node of a graph that has
one: a sub-graph may read a value by name), nodes without outputs or with an output the graph returns.
The graph is returned as it is where nothing merges; the model itself is never changed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import onnx
from onnx import AttributeProto, helper, numpy_helper

from .fold import KEEP

_DOMAINS = ("", "ai.onnx", "com.microsoft")
# draws: each node its own (Dropout's mask too, where its training_mode input is true)
_RANDOM = frozenset({*(op for op in KEEP if op.startswith(("Random", "Multinomial", "Bernoulli"))),
                     "Dropout", "BiasDropout", "BitmaskDropout", "BitmaskBiasDropout"})


def _has_subgraph(node: onnx.NodeProto) -> bool:
    return any(a.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS) for a in node.attribute)


SMALL = 64  # constants of at most this many elements compare by value (each layer's own Constant nodes)


def _by_value(constants: Mapping[str, onnx.TensorProto], feeds: set[str]) -> Callable[[str], object]:
    """A value's identity for comparing inputs: a small constant's type, shape and bytes (not a graph
    input's overridable default), else its name."""
    memo: dict[str, object] = {}

    def ident(name: str) -> object:
        if name not in memo:
            t = None if name in feeds else constants.get(name)
            small = (t is not None and t.data_location != onnx.TensorProto.EXTERNAL
                     and math.prod(t.dims) <= SMALL and t.data_type != onnx.TensorProto.STRING)
            memo[name] = (t.data_type, tuple(t.dims), numpy_helper.to_array(t).tobytes()) if small else name
        return memo[name]
    return ident


def merge_common(graph: onnx.GraphProto, outputs: set[str], constants: Mapping[str, onnx.TensorProto],
                 feeds: set[str]) -> tuple[onnx.GraphProto, int]:
    """(the graph with each repeated node's readers reading its first occurrence, how many nodes merged);
    `feeds`: the graph's inputs (overridable initializers included: never compared by value)."""
    if any(_has_subgraph(n) for n in graph.node):
        return graph, 0
    ident = _by_value(constants, feeds)
    first: dict[tuple[object, ...], onnx.NodeProto] = {}
    rename: dict[str, str] = {}
    nodes: list[onnx.NodeProto] = []
    for node in graph.node:
        inputs = [rename.get(i, i) for i in node.input]
        key = None
        if node.domain in _DOMAINS and node.op_type not in _RANDOM and node.output and all(node.output):
            attrs = tuple(a.SerializeToString() for a in sorted(node.attribute, key=lambda a: a.name))
            key = (node.domain or "", node.op_type, tuple(map(ident, inputs)), len(node.output), attrs)
        earlier = first.get(key) if key is not None else None
        if earlier is not None and not outputs.intersection(node.output):
            rename.update(zip(node.output, earlier.output))
            continue
        if inputs != list(node.input):
            copy = onnx.NodeProto()
            copy.CopyFrom(node)
            copy.input[:] = inputs
            node = copy
        nodes.append(node)
        if key is not None:
            first.setdefault(key, node)
    if not rename:
        return graph, 0
    merged = helper.make_graph(nodes, graph.name, graph.input, graph.output, value_info=graph.value_info)
    return merged, len(graph.node) - len(nodes)
