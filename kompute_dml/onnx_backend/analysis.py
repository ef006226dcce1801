"""Static analysis of a prepared model: declared types, graph validation, where each node
can run before any input arrives."""

from __future__ import annotations

import heapq
import math
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import kompute_dml as kdml
from kompute_dml.ops import ONNX_OPS
from kompute_dml.ops.onnx_types import KIND_RULES

from .fallback import CpuSegment
from .graph import _attr, _node_inputs, _np_dtype_of_onnx
from .handlers_values import VALUE_HANDLERS
from .host_eval import SHAPE_ONLY, host_evaluable
from .values import _DEVICE_OPS, CPU, HOST, VULKAN

HOST_REASON = "reads no input data: resolved on the host per input shape"
VIEW_OPERATOR = "layout view"  # Reshape / Transpose / ...: a new desc, a copy only where needed


# Initializers of more elements than this reach shape inference as typed inputs, without their data
# (shape_model); the smaller ones keep theirs, which it reads where a value sets a shape (Reshape's).
SHAPE_MODEL_ELEMENTS = 1024


def shape_model(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` for onnx's shape inference: its graph with the large initializers declared as inputs of
    their type and shape instead of holding their data. onnx serializes the model for its C++ pass
    and parses the result back: with the weights in it that was most of `prepare` (a ResNet-50 of
    102 MB on the CI host, `python -m benchmarks.prepare_time [--whole]`: 126.5 ms against 706.8);
    the types it infers are the same (tests/test_onnx_shape_model.py)."""
    g = model.graph
    big = [t for t in g.initializer if math.prod(t.dims) > SHAPE_MODEL_ELEMENTS]
    if not big:
        return model
    light = onnx.ModelProto(ir_version=model.ir_version)
    light.opset_import.extend(model.opset_import)
    light.functions.extend(model.functions)
    lg = light.graph
    lg.name = g.name
    for field in ("node", "input", "output", "value_info", "sparse_initializer"):
        getattr(lg, field).extend(getattr(g, field))
    names = {t.name for t in big}
    lg.initializer.extend(t for t in g.initializer if t.name not in names)
    declared = {vi.name for vi in g.input}  # (IR < 4: initializers are inputs too)
    lg.input.extend(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in big if t.name not in declared)
    return light


class GraphAnalysis:
    """BackendRep's analysis methods (a mixin: the attributes below are set by BackendRep.__init__)."""

    graph: onnx.GraphProto
    device: kdml.Device
    constants: dict[str, TensorProto]
    input_names: list[str]
    exclude_ops: set[str]
    declared_types: dict[str, onnx.TypeProto]

    # ---- analysis -------------------------------------------------------------
    @staticmethod
    def _infer_types(model: onnx.ModelProto) -> dict[str, onnx.TypeProto]:
        types: dict[str, onnx.TypeProto] = {}
        inferred = model
        try:
            light = shape_model(model)
            if light.ByteSize() < 1_800_000_000:  # (protobuf's limit: onnx serializes the model for its C++ pass)
                inferred = onnx.shape_inference.infer_shapes(light, strict_mode=False)
        except Exception:
            inferred = model
        g = inferred.graph
        for vi in list(g.value_info) + list(g.input) + list(g.output):
            if vi.type.WhichOneof("value") is not None:
                types[vi.name] = vi.type
        for t in model.graph.initializer:
            types.setdefault(t.name, helper.make_tensor_type_proto(t.data_type, list(t.dims)))
        return types

    def _elem_dtype(self, name: str) -> np.dtype | None:
        tp = self.declared_types.get(name)
        if tp is None or tp.WhichOneof("value") != "tensor_type" or not tp.tensor_type.elem_type:
            return None
        return _np_dtype_of_onnx(tp.tensor_type.elem_type)

    def _validate_graph(self) -> None:
        """Refuse, with a ValueError naming the node, what no engine could run: a value that
        nothing provides, and mapped nodes whose declared attributes or ranks break ONNX's rules."""
        g = self.graph
        known = set(self.input_names) | set(self.constants)
        produced = {o for node in g.node for o in node.output if o}
        for i, node in enumerate(g.node):
            label = f"node {i} ({node.op_type} {node.name!r})"
            for name in _node_inputs(node):
                if name not in known and name not in produced:
                    raise ValueError(f"{label} reads {name!r}, which no graph input, initializer or node provides")
            domain = node.domain if node.domain != "ai.onnx" else ""
            if domain:
                continue
            rank = self._declared_rank(node.input[0]) if node.input else None
            if node.op_type == "EyeLike":
                dt_attr = _attr(node, "dtype")
                if dt_attr is not None and _np_dtype_of_onnx(dt_attr) is None:
                    raise ValueError(f"{label}: dtype {dt_attr} is not an ONNX tensor element type")
                if rank is not None and rank != 2:
                    raise ValueError(f"{label}: EyeLike takes a 2-D input, declared rank {rank}")
            elif node.op_type == "Trilu" and rank is not None and rank < 2:
                raise ValueError(f"{label}: Trilu takes an input of rank >= 2, declared rank {rank}")

    def _declared_rank(self, name: str) -> int | None:
        tp = self.declared_types.get(name)
        if tp is None or tp.WhichOneof("value") != "tensor_type" or not tp.tensor_type.HasField("shape"):
            return None
        return len(tp.tensor_type.shape.dim)

    def _static_targets(self) -> list[tuple[str, str, str]]:
        """(target, operator, reason) per node. A node reads host-known values when every
        input is a constant or the output of a host-resolved node (a Shape node needs only
        its input's shape): such nodes of the types host_eval.py resolves run on the host,
        once per input shape; the rest go to the device where an operator takes them."""
        known = {n for n in self.constants if n not in self.input_names}
        fixed = set(known)  # the same for every input: constants, and host nodes of them alone
        self.folded_outputs: set[str] = set()
        targets = []
        for node in self.graph.node:
            if host_evaluable(node) and (node.op_type in SHAPE_ONLY or all(n in known for n in _node_inputs(node))):
                targets.append((HOST, "", HOST_REASON))
                known.update(o for o in node.output if o)
                if all(n in fixed for n in _node_inputs(node)):  # evaluated once per model (rep._host_node)
                    fixed.update(o for o in node.output if o)
                    self.folded_outputs.update(o for o in node.output if o)
            else:
                targets.append(self._static_target(node))
        return targets

    def _static_target(self, node: onnx.NodeProto) -> tuple[str, str, str]:
        """(target, operator, reason) from what is known before any input arrives."""
        domain = node.domain if node.domain != "ai.onnx" else ""
        key = (node.op_type, domain)
        if not domain and node.op_type in VALUE_HANDLERS and node.op_type not in self.exclude_ops:
            return VULKAN, VIEW_OPERATOR, ""
        if key not in _DEVICE_OPS:
            return CPU, "", "no kompute_dml operator"
        op_name, helper_name, level = _DEVICE_OPS[key]
        if node.op_type in self.exclude_ops:
            return CPU, "", "excluded by the caller"
        if not hasattr(kdml, helper_name):
            return CPU, "", f"kdml.{helper_name} not available"
        if int(self.device.feature_level) < level:
            return CPU, "", f"{op_name} needs feature level 0x{level:x}"
        reason = self._static_type_check(node)
        if reason:
            return CPU, "", reason
        return VULKAN, op_name, ""

    def _static_type_check(self, node: onnx.NodeProto) -> str:
        """The node's type rule (its OnnxOp's `check`, or its kind's; ops/onnx_types.py) on the
        model's declared types: "" where the operator takes them, else why not."""
        op = ONNX_OPS[(node.op_type, node.domain if node.domain != "ai.onnx" else "")]
        rule = op.check or KIND_RULES.get(op.kind)
        return rule(_NodeTypes(self, node)) if rule is not None else ""


    def _partition(self) -> list[tuple[str, Any]]:
        """Order the nodes into steps, each all-Vulkan or all-CPU, greedily making CPU
        sub-graphs maximal: while a kind has ready nodes, they are all taken."""
        g = self.graph
        targets = [t[0] for t in self._placement_static]
        kinds = [CPU if t == CPU else VULKAN for t in targets]  # host nodes are one-node steps too
        steps: list[tuple[str, list[int]]] = []
        for kind, run in kind_runs([(_node_inputs(node), list(node.output)) for node in g.node], kinds):
            if kind == VULKAN:
                steps.extend((targets[i], [i]) for i in run)
            else:
                steps.append((CPU, run))
        # CPU segments, and which of their values later steps (or the graph outputs) read.
        self.segments: list[CpuSegment] = []
        later_reads: set[str] = set(self.output_names)
        plan: list[tuple[str, Any]] = []
        for kind, idx in steps:
            if kind == CPU:
                seg = CpuSegment(self, len(self.segments), idx)
                self.segments.append(seg)
                plan.append((CPU, seg))
            else:
                plan.append((kind, idx[0]))
        for kind, item in reversed(plan):
            if kind == CPU:
                item.outputs = [o for i in item.node_indices for o in g.node[i].output if o and o in later_reads]
                later_reads.update(item.inputs)
            else:
                later_reads.update(self.fusions.step_inputs(g, item))
        # Last reader of every value, to free it as soon as possible (a fused chain's values are
        # read at its carrier's step).
        self._last_use: dict[str, int] = {}
        for s, (kind, item) in enumerate(plan):
            names = item.inputs if kind == CPU else self.fusions.step_inputs(g, item)
            for name in names:
                self._last_use[name] = s
        keep = set(self.output_names) | set(self.input_names)
        self._free_after: list[list[str]] = [[] for _ in plan]
        for name, s in self._last_use.items():
            if name not in keep:
                self._free_after[s].append(name)
        return plan


def kind_runs(nodes: list[tuple[list[str], list[str]]], kinds: list[str]) -> list[tuple[str, list[int]]]:
    """The nodes ((inputs, outputs) each) in a topological order made of runs of one kind each,
    greedily maximal: while a kind has ready nodes they are all taken, so no value a run reads
    is made by a later run, and no path between two nodes of a run leaves it. ValueError on a cycle."""
    n = len(nodes)
    producer = {o: i for i, (_, outs) in enumerate(nodes) for o in outs if o}
    users: list[list[int]] = [[] for _ in range(n)]
    indeg = [0] * n
    for i, (ins, _) in enumerate(nodes):
        deps = {producer[name] for name in ins if name in producer and producer[name] != i}
        indeg[i] = len(deps)
        for d in deps:
            users[d].append(i)
    ready: dict[str, list[int]] = {k: [] for k in set(kinds)}
    for i in range(n):
        if indeg[i] == 0:
            heapq.heappush(ready[kinds[i]], i)
    runs: list[tuple[str, list[int]]] = []
    current = None
    while any(ready.values()):
        if current is None or not ready[current]:
            current = min((heap[0], k) for k, heap in ready.items() if heap)[1]
        run: list[int] = []
        while ready[current]:
            i = heapq.heappop(ready[current])
            run.append(i)
            for u in users[i]:
                indeg[u] -= 1
                if indeg[u] == 0:
                    heapq.heappush(ready[kinds[u]], u)
        runs.append((current, run))
        others = [k for k, heap in ready.items() if heap and k != current]
        current = others[0] if others else current
    if sum(len(r) for _, r in runs) != n:
        raise ValueError("the graph has a cycle (or reads a value no node, input or initializer provides)")
    return runs


def in_topological_order(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model itself where its nodes are in a topological order (ONNX's rule), else a copy with
    them reordered (stable: the listed order wherever the data flow allows it). onnxruntime sorts
    such graphs too, and tools write them: onnxruntime's float16 converter appends the Casts of the
    graph inputs after their readers. A cycle is left for the partition to refuse."""
    g = model.graph
    nodes = [(_node_inputs(node), list(node.output)) for node in g.node]
    seen = {i.name for i in g.input} | {t.name for t in g.initializer} | {t.values.name for t in g.sparse_initializer}
    produced = {o for _, outs in nodes for o in outs if o}
    for ins, outs in nodes:
        if any(n in produced and n not in seen for n in ins):
            break
        seen.update(o for o in outs if o)
    else:
        return model
    try:
        ((_, order),) = kind_runs(nodes, [VULKAN] * len(nodes))
    except ValueError:
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.node[:]
    out.graph.node.extend(g.node[i] for i in order)
    return out


class _NodeTypes:
    """ops/onnx_types.NodeTypes over a prepared model's declared types."""

    def __init__(self, analysis: GraphAnalysis, node: onnx.NodeProto) -> None:
        self._a, self._node, self.inputs = analysis, node, len(node.input)
        self.outputs = sum(1 for o in node.output if o)

    def elem(self, i: int) -> np.dtype | None:
        return self._a._elem_dtype(self._node.input[i])

    def declared(self, i: int) -> onnx.TypeProto | None:
        return self._a.declared_types.get(self._node.input[i])

    def attr_dtype(self, name: str) -> np.dtype | None:
        v = _attr(self._node, name)
        return _np_dtype_of_onnx(v) if v is not None else None

    def dtype_of(self, elem_type: int) -> np.dtype | None:
        return _np_dtype_of_onnx(elem_type)

    def constant(self, i: int) -> np.ndarray | None:
        name = self._node.input[i]
        if name not in self._a.constants or name in self._a.input_names:
            return None
        return numpy_helper.to_array(self._a.constants[name])

    def attr(self, name: str, default: Any = None) -> Any:
        return _attr(self._node, name, default)

    def given(self, i: int) -> bool:
        return i < len(self._node.input) and bool(self._node.input[i])

    def has_output(self, i: int) -> bool:
        return i < len(self._node.output) and bool(self._node.output[i])
