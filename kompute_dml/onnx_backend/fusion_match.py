"""Where fusions.PATTERNS' chains are in a prepared model (`find_fusions`, at prepare): a pattern
matches where every intermediate value (the first output of every node but the last) is read only
by its edges (no other node, no second use, no subgraph) and is not a graph output, the nodes have
no other outputs in use and all run on the device, and its check
passes. Patterns are tried in PATTERNS' order at each head, heads in graph order; a node joins at
most one chain. Inside a matched chain, the shorter chains of PATTERNS among its nodes are matched
too (Fusion.within): they run where the chain runs unfused (fusions._chain), so an attention past
DevicePolicy.attention_fused_max_flops still runs its MatMul -> Mul as one GEMM (fusion_scale.py) and
its context -> Transpose as one GEMM (fusion_transpose.py)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import onnx

from .fusions import PATTERNS, Fusion, Fusions, Pattern
from .graph import _node_inputs
from .values import MS_DOMAIN, VULKAN

if TYPE_CHECKING:
    from .rep import BackendRep


def _uses(graph: onnx.GraphProto) -> dict[str, list[tuple[int, int]]]:
    """Every read of every value: (node, input index; -1 for a read inside a subgraph)."""
    uses: dict[str, list[tuple[int, int]]] = {}
    for i, node in enumerate(graph.node):
        for k, name in enumerate(node.input):
            if name:
                uses.setdefault(name, []).append((i, k))
        for name in _node_inputs(node)[len([n for n in node.input if n]):]:
            uses.setdefault(name, []).append((i, -1))
    return uses


def _producers(graph: onnx.GraphProto) -> dict[str, int]:
    return {name: i for i, node in enumerate(graph.node) for name in node.output if name}


def _resolve(rep: BackendRep, pattern: Pattern, head: int, uses: dict[str, list[tuple[int, int]]],
             producers: dict[str, int]) -> list[int] | None:
    """The chain's nodes by position: each the one reader (edge: input k) of an earlier position's
    output, or, where no edge comes from one found so far, the producer of input k of a found later
    position (a chain whose first node is not the head's reader: GELU's x 0.5 beside its Pow)."""
    g, n = rep.graph, len(pattern.ops)
    chain: dict[int, int] = {0: head}
    while len(chain) < n:
        for pos in range(1, n):
            if pos in chain:
                continue
            fwd = [e for e in pattern.edges if e[1] == pos and e[0] in chain]
            bwd = [e for e in pattern.edges if e[0] == pos and e[1] in chain]
            if fwd:
                src, _, k = fwd[0]
                found = [i for i, kk in uses.get(g.node[chain[src]].output[0], [])
                         if kk == k and g.node[i].op_type == pattern.ops[pos]]
            elif bwd:
                _, dst, k = bwd[0]
                inputs = g.node[chain[dst]].input
                i = producers.get(inputs[k]) if k < len(inputs) else None
                found = [i] if i is not None and g.node[i].op_type == pattern.ops[pos] else []
            else:
                continue
            if len(found) != 1:
                return None
            chain[pos] = found[0]
            break
        else:
            return None  # no position reachable from the ones found
    return [chain[pos] for pos in range(n)]


def _match(rep: BackendRep, pattern: Pattern, head: int, uses: dict[str, list[tuple[int, int]]],
           taken: set[int], producers: dict[str, int]) -> Fusion | None:
    chain = _resolve(rep, pattern, head, uses, producers)
    if chain is None or len(set(chain)) != len(chain) or taken & set(chain) or chain[-1] != max(chain):
        return None
    g = rep.graph
    outputs = set(rep.output_names)
    for pos, i in enumerate(chain):
        node = g.node[i]
        default = node.domain in ("", "ai.onnx") and node.op_type not in pattern.ms_ops
        if not (default or (node.domain == MS_DOMAIN and node.op_type in pattern.ms_ops)) or \
                rep._placement_static[i][0] != VULKAN:
            return None
        if any(o for o in node.output[1:]):  # optional outputs in use (LayerNormalization's mean)
            return None
        if pos < len(chain) - 1:  # an intermediate: read exactly by the pattern's edges
            want = sorted((chain[c], k) for p, c, k in pattern.edges if p == pos)
            reads = sorted(uses.get(node.output[0], []))
            if pos in pattern.shared:  # and by nodes after the carrier (graph outputs too)
                if [r for r in reads if r[0] not in chain] != [r for r in reads if r[0] > chain[-1]] or \
                        not set(want) <= set(reads):
                    return None
            elif node.output[0] in outputs or reads != want:
                return None
    nodes = [g.node[i] for i in chain]
    if pattern.check(rep, nodes):
        return None
    shared = tuple(g.node[chain[p]].output[0] for p in pattern.shared)
    inner = tuple(g.node[i].output[0] for i in chain[:-1] if g.node[i].output[0] not in shared)
    inputs: list[str] = []
    for i in chain:
        inputs += [n for n in _node_inputs(g.node[i]) if n not in inner and n not in shared and n not in inputs]
    return Fusion(pattern, tuple(chain), tuple(inputs), inner, shared)


def _by_head() -> dict[str, list[Pattern]]:
    """PATTERNS by their first node type, in PATTERNS' order (read at each call: benchmarks and tests
    replace PATTERNS)."""
    heads: dict[str, list[Pattern]] = {}
    for pattern in PATTERNS:
        heads.setdefault(pattern.ops[0], []).append(pattern)
    return heads


def _within(rep: BackendRep, outer: Fusion, uses: dict[str, list[tuple[int, int]]], producers: dict[str, int],
            heads: dict[str, list[Pattern]]) -> Fusion:
    """The chain with the shorter chains of PATTERNS among its nodes."""
    taken = set(range(len(rep.graph.node))) - set(outer.nodes)
    found = []
    for head in outer.nodes:
        for pattern in heads.get(rep.graph.node[head].op_type, ()):
            f = None if not pattern.nested or len(pattern.ops) >= len(outer.nodes) or head in taken \
                else _match(rep, pattern, head, uses, taken, producers)
            if f is not None:
                # its own shorter chains too (MatMul -> Add -> GELU holds MatMul -> Add and the GELU chain)
                found.append(_within(rep, f, uses, producers, heads))
                taken.update(f.nodes)
    return dataclasses.replace(outer, within=tuple(found)) if found else outer


def find_fusions(rep: BackendRep) -> Fusions:
    """Every chain of PATTERNS in the model (a node joins at most one chain; Fusion.within)."""
    uses, producers, heads = _uses(rep.graph), _producers(rep.graph), _by_head()
    found = Fusions()
    taken: set[int] = set()
    for head, node in enumerate(rep.graph.node):
        for pattern in heads.get(node.op_type, ()):
            if head in taken:
                continue
            f = _match(rep, pattern, head, uses, taken, producers)
            if f is not None:
                f = _within(rep, f, uses, producers, heads)
                found.by_carrier[f.carrier] = f
                found.absorbed.update((i, f.carrier) for i in f.nodes[:-1])
                taken.update(f.nodes)
    return found
