"""ONNX backend: runs ONNX models with DirectML operator semantics on a Vulkan device.

`Backend` is an `onnx.backend.base.Backend`, so ONNX's own test runner
(`onnx.backend.test.BackendTest`) can drive it. Device "CPU" means the default Vulkan
device (`kdml.default_device()`); "VULKAN" and "VULKAN:<index>" are accepted too.

Nodes that map onto a kompute_dml operator run on the device, the way ONNX Runtime's
DirectML execution provider maps them:

| ONNX node | DirectML operator | helper |
| --- | --- | --- |
| EyeLike | DIAGONAL_MATRIX | `kdml.eye_like` |
| Trilu | DIAGONAL_MATRIX1 | `kdml.triu` / `kdml.tril` |
| Identity (tensor, sequence, optional) | element-wise copy | `kdml.copy` |
| com.microsoft MatMulIntegerToFloat | MATRIX_MULTIPLY_INTEGER_TO_FLOAT | `kdml.matmul_integer_to_float` |
| com.microsoft DynamicQuantizeMatMul | host uint8 quantization + MATRIX_MULTIPLY_INTEGER_TO_FLOAT | same |

Every other node (and a mapped node whose types, rank or feature level the device
operator cannot take) runs on the CPU: the graph is cut into maximal sub-graphs of
consecutive fallback nodes, each run by an onnxruntime CPU session (the first choice)
or by `onnx.reference.ReferenceEvaluator` (when onnxruntime refuses the sub-graph).
Values produced on the device stay there (`kdml.Tensor`) while only device nodes read
them; a value is downloaded once, when a fallback sub-graph or a graph output needs it.
"""

from __future__ import annotations

import collections
import dataclasses
import heapq
import math
import os
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnx.backend.base import Backend as _OnnxBackend
from onnx.backend.base import BackendRep as _OnnxBackendRep
from onnx.backend.base import namedtupledict

import kompute_dml as kdml
from kompute_dml.memory import packed_desc_for

MS_DOMAIN = "com.microsoft"
VULKAN = "vulkan"
CPU = "cpu"

# The numpy types a DirectML tensor can hold (DataType.from_numpy accepts exactly these).
_DML_NUMPY = {np.dtype(t) for t in (np.float32, np.float16, np.uint32, np.uint16, np.uint8, np.int32, np.int16,
                                     np.int8, np.float64, np.uint64, np.int64)}
_QUANT_TYPES = {np.dtype(np.int8), np.dtype(np.uint8)}
_FLOAT_OUT = {np.dtype(np.float32), np.dtype(np.float16)}

# (op_type, domain) -> (DirectML operator, kdml helper, lowest feature level it needs)
_DEVICE_OPS: dict[tuple[str, str], tuple[str, str, int]] = {
    ("EyeLike", ""): ("DIAGONAL_MATRIX", "eye_like", 0x2000),
    ("Trilu", ""): ("DIAGONAL_MATRIX1", "triu", 0x5100),
    ("Identity", ""): ("COPY", "copy", 0x1000),
    ("MatMulIntegerToFloat", MS_DOMAIN): ("MATRIX_MULTIPLY_INTEGER_TO_FLOAT", "matmul_integer_to_float", 0x6200),
    ("DynamicQuantizeMatMul", MS_DOMAIN): ("MATRIX_MULTIPLY_INTEGER_TO_FLOAT", "matmul_integer_to_float", 0x6200),
}


class FallbackNeeded(Exception):
    """Raised by a device handler when this node, with these runtime values, must run on the CPU."""


@dataclasses.dataclass(frozen=True)
class NodePlacement:
    """Where one node runs: target "vulkan" (operator = the DirectML operator) or "cpu"
    (operator = the fallback engine; segment = the index of its CPU sub-graph)."""

    index: int
    name: str
    op_type: str
    domain: str
    target: str
    operator: str
    segment: int | None = None
    reason: str = ""


# ---------------------------------------------------------------------------------
# values
# ---------------------------------------------------------------------------------
class DeviceValue:
    """A tensor that lives on the device: the kdml.Tensor plus its ONNX shape and dtype
    (a rank-0 ONNX tensor is a 1-element DirectML tensor). The host copy is cached."""

    __slots__ = ("_host", "dtype", "shape", "tensor")

    def __init__(self, tensor: kdml.Tensor, shape: Sequence[int], dtype: Any) -> None:
        self.tensor = tensor
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)
        self._host: np.ndarray | None = None

    def __repr__(self) -> str:
        return f"DeviceValue({self.dtype}, shape={self.shape})"


def _value_shape(v: Any) -> tuple[int, ...]:
    return v.shape if isinstance(v, DeviceValue) else tuple(np.shape(v))


def _value_dtype(v: Any) -> np.dtype:
    return v.dtype if isinstance(v, DeviceValue) else np.asarray(v).dtype


def _is_tensor_value(v: Any) -> bool:
    return isinstance(v, (DeviceValue, np.ndarray, np.generic))


@dataclasses.dataclass
class RunStats:
    """What one `rep.run` did: transfers between host and device, and where time went."""

    uploads: int = 0
    constant_uploads: int = 0
    downloads: int = 0
    vulkan_nodes: int = 0
    cpu_segments: int = 0
    runtime_fallbacks: int = 0
    vulkan_seconds: float = 0.0
    cpu_seconds: float = 0.0
    total_seconds: float = 0.0
    events: list[str] = dataclasses.field(default_factory=list)


# ---------------------------------------------------------------------------------
# graph helpers
# ---------------------------------------------------------------------------------
def _subgraph_free_names(graph: onnx.GraphProto) -> set[str]:
    """Names a (sub)graph reads from an enclosing scope."""
    defined = {i.name for i in graph.input} | {i.name for i in graph.initializer}
    defined |= {i.values.name for i in graph.sparse_initializer}
    used: set[str] = set()
    for node in graph.node:
        for name in _node_inputs(node):
            if name not in defined:
                used.add(name)
        defined.update(o for o in node.output if o)
    used.update(o.name for o in graph.output if o.name not in defined)
    return used


def _node_inputs(node: onnx.NodeProto) -> list[str]:
    """Explicit inputs (non-empty) plus the outer-scope names its graph attributes read."""
    names = [i for i in node.input if i]
    for attr in node.attribute:
        graphs = list(attr.graphs)
        if attr.HasField("g"):
            graphs.append(attr.g)
        for g in graphs:
            for name in sorted(_subgraph_free_names(g)):
                if name not in names:
                    names.append(name)
    return names


def _attr(node: onnx.NodeProto, name: str, default: Any = None) -> Any:
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _np_dtype_of_onnx(elem_type: int) -> np.dtype | None:
    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))
    except Exception:
        return None


def _type_proto_of_value(value: Any, declared: onnx.TypeProto | None) -> onnx.TypeProto:
    """A TypeProto for a runtime value: element type and rank, every dimension unknown."""
    if _is_tensor_value(value):
        dt = _value_dtype(value)
        if dt.kind == "O":
            elem = TensorProto.STRING
        else:
            elem = helper.np_dtype_to_tensor_dtype(dt)
        return helper.make_tensor_type_proto(elem, [None] * len(_value_shape(value)))
    if isinstance(value, list) and value:
        return helper.make_sequence_type_proto(_type_proto_of_value(value[0], None))
    if declared is not None:
        return declared
    if isinstance(value, list):
        raise ValueError("cannot type an empty sequence without a declared type")
    raise ValueError("cannot type an absent optional value without a declared type")


def _signature(value: Any) -> Any:
    if _is_tensor_value(value):
        return ("t", str(_value_dtype(value)), len(_value_shape(value)))
    if isinstance(value, list):
        return ("s", _signature(value[0]) if value else None)
    if value is None:
        return ("none",)
    return ("?", type(value).__name__)


# ---------------------------------------------------------------------------------
# CPU fallback sub-graphs
# ---------------------------------------------------------------------------------
class CpuSegment:
    """A run of fallback nodes, executed as one sub-model by onnxruntime (first choice)
    or onnx.reference.ReferenceEvaluator (when onnxruntime refuses it)."""

    def __init__(self, rep: BackendRep, index: int, node_indices: list[int]) -> None:
        self.rep = rep
        self.index = index
        self.node_indices = node_indices
        nodes = [rep.graph.node[i] for i in node_indices]
        produced: set[str] = set()
        inputs: list[str] = []
        for node in nodes:
            for name in _node_inputs(node):
                if name not in produced and name not in inputs:
                    inputs.append(name)
            produced.update(o for o in node.output if o)
        # Constant initializers travel inside the sub-model; everything else (including graph
        # inputs whose initializer is only a default) is fed.
        fixed = [n for n in inputs if n in rep.constants and n not in rep.input_names]
        self.constant_inputs = fixed
        self.inputs = [n for n in inputs if n not in fixed]
        self.produced = produced
        self.outputs: list[str] = []  # set by the rep once every segment is known
        self.engine: str | None = None
        self._runners: dict[Any, tuple[str, Any]] = {}

    def _sub_model(self, values: list[Any]) -> onnx.ModelProto:
        rep = self.rep
        nodes = [rep.graph.node[i] for i in self.node_indices]
        g_inputs = [
            helper.make_value_info(n, _type_proto_of_value(v, rep.declared_types.get(n)))
            for n, v in zip(self.inputs, values)
        ]
        g_outputs = [onnx.ValueInfoProto(name=n) for n in self.outputs]
        inits = [rep.constants[n] for n in self.constant_inputs]
        graph = helper.make_graph(nodes, f"kdml_cpu_segment_{self.index}", g_inputs, g_outputs, initializer=inits)
        model = helper.make_model(graph, opset_imports=list(rep.model.opset_import), ir_version=max(rep.model.ir_version, 4))
        model.functions.extend(rep.model.functions)
        return model

    def _build(self, values: list[Any]) -> tuple[str, Any]:
        model = self._sub_model(values)
        errors = []
        if self.rep.fallback in ("onnxruntime", "auto"):
            try:
                import onnxruntime as ort

                so = ort.SessionOptions()
                so.log_severity_level = 3
                if os.environ.get("KDML_ORT_SPIN") != "1":
                    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
                if self.rep.cpu_threads:
                    so.intra_op_num_threads = self.rep.cpu_threads
                sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
                return "onnxruntime", sess
            except Exception as e:
                errors.append(f"onnxruntime: {str(e).strip().splitlines()[0][:300]}")
        try:
            from onnx.reference import ReferenceEvaluator

            return "reference", ReferenceEvaluator(model)
        except Exception as e:
            errors.append(f"reference: {str(e).strip().splitlines()[0][:300]}")
        ops = sorted({self.rep.graph.node[i].op_type for i in self.node_indices})
        raise RuntimeError(f"no CPU fallback could run the sub-graph of {ops}: " + "; ".join(errors))

    def run(self, values: list[Any]) -> list[Any]:
        key = tuple(_signature(v) for v in values)
        runner = self._runners.get(key)
        if runner is None:
            runner = self._build(values)
            self._runners[key] = runner
        engine, impl = runner
        self.engine = engine
        feeds = dict(zip(self.inputs, values))
        if engine == "onnxruntime":
            try:
                return list(impl.run(self.outputs, feeds))
            except Exception as e:
                if self.rep.fallback == "onnxruntime":
                    raise
                first = f"onnxruntime: {str(e).strip().splitlines()[0][:300]}"
            # Second choice: the reference evaluator (kept for this signature if it succeeds).
            try:
                from onnx.reference import ReferenceEvaluator

                ref = ReferenceEvaluator(self._sub_model(values))
                outs = list(ref.run(self.outputs, feeds))
            except Exception as e2:
                ops = sorted({self.rep.graph.node[i].op_type for i in self.node_indices})
                raise RuntimeError(f"no CPU fallback could run the sub-graph of {ops}: {first}; "
                                   f"reference: {str(e2).strip().splitlines()[0][:300]}") from e2
            self._runners[key] = ("reference", ref)
            self.engine = "reference"
            self.rep._note(f"CPU sub-graph {self.index}: onnxruntime failed at run time ({first}); "
                           "the reference evaluator ran it")
            return outs
        return list(impl.run(self.outputs, feeds))


# ---------------------------------------------------------------------------------
# dynamic quantization (host)
# ---------------------------------------------------------------------------------
def dynamic_quantize_uint8(a: Any) -> tuple[np.ndarray, np.float32, np.uint8]:
    """uint8 dynamic quantization exactly as ONNX Runtime's CPU DynamicQuantizeMatMul does it.

    Range widened to include 0; scale = (max - min) / 255 (1 when max == min);
    zero point = round-half-to-even(clamp(0 - min / scale, 0, 255));
    q = clamp(round-half-to-even(a / scale) + zero point, 0, 255). float32 arithmetic.
    """
    x = np.asarray(a, dtype=np.float32)
    if x.size:
        lo = min(np.float32(np.nanmin(x)), np.float32(0.0))
        hi = max(np.float32(np.nanmax(x)), np.float32(0.0))
    else:
        lo = hi = np.float32(0.0)
    scale = np.float32(1.0) if hi == lo else np.float32((np.float32(hi) - np.float32(lo)) / np.float32(255.0))
    zp_f = np.float32(np.float32(0.0) - np.float32(lo) / scale)
    zp = np.uint8(np.rint(np.clip(zp_f, np.float32(0.0), np.float32(255.0))))
    with np.errstate(invalid="ignore"):
        q = np.clip(np.rint(x / scale) + np.float32(zp), 0.0, 255.0).astype(np.uint8)
    return q, scale, zp


# ---------------------------------------------------------------------------------
# the prepared model
# ---------------------------------------------------------------------------------
class BackendRep(_OnnxBackendRep):
    """A prepared model. `placement` lists where every node runs; `summary()` says it in
    one paragraph; `run(inputs)` returns the outputs (numpy arrays, lists for sequences,
    None for absent optionals); `last_run` holds the RunStats of the latest run."""

    def __init__(self, model: onnx.ModelProto, device: kdml.Device, *, fallback: str = "auto",
                 exclude_ops: Iterable[str] = (), cpu_threads: int | None = None) -> None:
        if fallback not in ("auto", "onnxruntime", "reference"):
            raise ValueError(f"fallback must be 'auto', 'onnxruntime' or 'reference', got {fallback!r}")
        self.model = model
        self.graph = model.graph
        self.device = device
        self.fallback = fallback
        self.cpu_threads = cpu_threads
        self.exclude_ops = set(exclude_ops)
        self.last_run = RunStats()
        g = model.graph
        self.constants: dict[str, TensorProto] = {t.name: t for t in g.initializer}
        for sp in g.sparse_initializer:  # rare: densified once
            self.constants[sp.values.name] = numpy_helper.from_array(_densify(sp), sp.values.name)
        # Graph inputs that have an initializer are overridable defaults, not constants.
        self.input_names = [i.name for i in g.input]
        self.feed_names = [i.name for i in g.input if i.name not in self.constants]
        self.output_names = [o.name for o in g.output]
        self._host_constants: dict[str, np.ndarray] = {}
        self._feeds_now: set[str] = set()
        # Device buffers each node reuses from run to run (keyed by node, role, slot, layout):
        # the device's pipeline cache is keyed by the bound buffers, so fresh buffers on
        # every run would rebuild every pipeline on every run.
        self._arena: collections.OrderedDict[tuple[Any, ...], Any] = collections.OrderedDict()
        self.arena_capacity = 4096
        self._cur_node = -1
        self._slot = 0
        self._run_lock = threading.Lock()
        self._run_uploads: dict[tuple[Any, ...], list[kdml.Tensor]] = {}
        self._device_constants: dict[str, DeviceValue] = {}
        self.declared_types = self._infer_types(model)

        self._validate_graph()
        self._placement_static: list[tuple[str, str, str]] = [self._static_target(n) for n in g.node]
        self._steps = self._partition()
        self.placement = self._make_placement()
        self._single_node_segments: dict[int, CpuSegment] = {}

    # ---- analysis -------------------------------------------------------------
    @staticmethod
    def _infer_types(model: onnx.ModelProto) -> dict[str, onnx.TypeProto]:
        types: dict[str, onnx.TypeProto] = {}
        inferred = model
        try:
            if model.ByteSize() < 1_800_000_000:
                inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
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

    def _static_target(self, node: onnx.NodeProto) -> tuple[str, str, str]:
        """(target, operator, reason) from what is known before any input arrives."""
        domain = node.domain if node.domain != "ai.onnx" else ""
        key = (node.op_type, domain)
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
        t = node.op_type
        if t == "EyeLike":
            dt_attr = _attr(node, "dtype")
            dt = _np_dtype_of_onnx(dt_attr) if dt_attr is not None else self._elem_dtype(node.input[0])
            if dt is not None and dt not in _DML_NUMPY:
                return f"output type {dt} is not a DirectML type"
        elif t == "Trilu":
            dt = self._elem_dtype(node.input[0])
            if dt is not None and dt not in _DML_NUMPY:
                return f"type {dt} is not a DirectML type"
        elif t == "Identity":
            tp = self.declared_types.get(node.input[0])
            while tp is not None and tp.WhichOneof("value") in ("sequence_type", "optional_type"):
                tp = tp.sequence_type.elem_type if tp.WhichOneof("value") == "sequence_type" else tp.optional_type.elem_type
            if tp is not None and tp.WhichOneof("value") == "tensor_type" and tp.tensor_type.elem_type:
                dt = _np_dtype_of_onnx(tp.tensor_type.elem_type)
                if dt is None or dt not in _DML_NUMPY:
                    return f"type {dt or tp.tensor_type.elem_type} is not a DirectML type"
            elif tp is not None and tp.WhichOneof("value") not in (None, "tensor_type"):
                return f"{tp.WhichOneof('value')} values stay on the CPU"
        elif t in ("MatMulIntegerToFloat", "DynamicQuantizeMatMul"):
            qi = [0, 1] if t == "MatMulIntegerToFloat" else [1]
            for i in qi:
                dt = self._elem_dtype(node.input[i]) if len(node.input) > i else None
                if dt is not None and dt not in _QUANT_TYPES:
                    return f"input {i} type {dt} is not int8/uint8"
            si = 2 if t == "MatMulIntegerToFloat" else 0
            dt = self._elem_dtype(node.input[si]) if len(node.input) > si else None
            if dt is not None and dt not in (_FLOAT_OUT if t == "MatMulIntegerToFloat" else {np.dtype(np.float32)}):
                return f"output type {dt} is not supported"
        return ""

    def _partition(self) -> list[tuple[str, Any]]:
        """Order the nodes into steps, each all-Vulkan or all-CPU, greedily making CPU
        sub-graphs maximal: while a kind has ready nodes, they are all taken."""
        g = self.graph
        n = len(g.node)
        producer: dict[str, int] = {}
        for i, node in enumerate(g.node):
            for o in node.output:
                if o:
                    producer[o] = i
        users: list[list[int]] = [[] for _ in range(n)]
        indeg = [0] * n
        for i, node in enumerate(g.node):
            deps = {producer[name] for name in _node_inputs(node) if name in producer and producer[name] != i}
            indeg[i] = len(deps)
            for d in deps:
                users[d].append(i)
        kinds = [t[0] for t in self._placement_static]
        ready: dict[str, list[int]] = {VULKAN: [], CPU: []}
        for i in range(n):
            if indeg[i] == 0:
                heapq.heappush(ready[kinds[i]], i)
        steps: list[tuple[str, list[int]]] = []
        done = 0
        current = None
        while ready[VULKAN] or ready[CPU]:
            if current is None:
                current = min((ready[k][0], k) for k in (VULKAN, CPU) if ready[k])[1]
            elif not ready[current]:
                current = CPU if current == VULKAN else VULKAN
            batch: list[int] = []
            while ready[current]:
                i = heapq.heappop(ready[current])
                batch.append(i)
                for u in users[i]:
                    indeg[u] -= 1
                    if indeg[u] == 0:
                        heapq.heappush(ready[kinds[u]], u)
            done += len(batch)
            if current == VULKAN:
                steps.extend((VULKAN, [i]) for i in batch)
            else:
                steps.append((CPU, batch))
            current = CPU if current == VULKAN else VULKAN
        if done != n:
            raise ValueError("the graph has a cycle (or reads a value no node, input or initializer provides)")
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
                plan.append((VULKAN, idx[0]))
        for kind, item in reversed(plan):
            if kind == CPU:
                item.outputs = [o for i in item.node_indices for o in g.node[i].output if o and o in later_reads]
                later_reads.update(item.inputs)
            else:
                later_reads.update(_node_inputs(g.node[item]))
        # Last reader of every value, to free it as soon as possible.
        self._last_use: dict[str, int] = {}
        for s, (kind, item) in enumerate(plan):
            names = item.inputs if kind == CPU else _node_inputs(g.node[item])
            for name in names:
                self._last_use[name] = s
        keep = set(self.output_names) | set(self.input_names)
        self._free_after: list[list[str]] = [[] for _ in plan]
        for name, s in self._last_use.items():
            if name not in keep:
                self._free_after[s].append(name)
        return plan

    def _make_placement(self) -> list[NodePlacement]:
        seg_of = {i: s.index for s in self.segments for i in s.node_indices}
        engine = {"auto": "onnxruntime", "onnxruntime": "onnxruntime", "reference": "reference"}[self.fallback]
        out = []
        for i, node in enumerate(self.graph.node):
            target, op, reason = self._placement_static[i]
            domain = node.domain if node.domain != "ai.onnx" else ""
            out.append(NodePlacement(i, node.name, node.op_type, domain, target,
                                     op if target == VULKAN else engine, seg_of.get(i), reason))
        return out

    def _refresh_engines(self) -> None:
        self.placement = [
            dataclasses.replace(p, operator=self.segments[p.segment].engine or p.operator)
            if p.segment is not None else p
            for p in self.placement
        ]

    def summary(self) -> str:
        """Where the nodes run, in a few lines."""
        vk = [p for p in self.placement if p.target == VULKAN]
        cpu = [p for p in self.placement if p.target == CPU]
        lines = [f"{len(vk)} of {len(self.placement)} nodes on Vulkan ({self.device.name}, "
                 f"feature level {self.device.feature_level.name})"]
        counts = collections.Counter((p.op_type, p.operator) for p in vk)
        for (op, dml), c in sorted(counts.items()):
            lines.append(f"  vulkan  {op} x{c} -> {dml}")
        engines = collections.Counter(p.operator for p in cpu)
        eng = ", ".join(f"{e} {c}" for e, c in sorted(engines.items())) or "none"
        lines.append(f"{len(cpu)} nodes fall back to the CPU in {len(self.segments)} sub-graph(s) ({eng})")
        cpu_counts = collections.Counter(p.op_type for p in cpu)
        if cpu_counts:
            lines.append("  cpu     " + ", ".join(f"{op} x{c}" for op, c in sorted(cpu_counts.items())))
        reasons = collections.Counter(f"{p.op_type}: {p.reason}" for p in cpu
                                      if p.reason and p.reason != "no kompute_dml operator")
        for r, c in sorted(reasons.items()):
            lines.append(f"  cpu because {r} (x{c})")
        return "\n".join(lines)

    def _note(self, msg: str) -> None:
        self.last_run.events.append(msg)

    # ---- values ------------------------------------------------------------------
    def _constant_host(self, name: str) -> np.ndarray:
        arr = self._host_constants.get(name)
        if arr is None:
            arr = numpy_helper.to_array(self.constants[name])
            self._host_constants[name] = arr
        return arr

    def host(self, value: Any, stats: RunStats) -> Any:
        """The host form of a value (numpy / list / None), downloading device tensors once."""
        if isinstance(value, DeviceValue):
            if value._host is None:
                value._host = value.tensor.numpy().reshape(value.shape)
                stats.downloads += 1
            return value._host
        if isinstance(value, list):
            return [self.host(v, stats) for v in value]
        return value

    def is_constant(self, name: str | None) -> bool:
        return name is not None and name in self.constants and name not in self._feeds_now

    def to_device(self, value: Any, stats: RunStats, name: str | None = None) -> kdml.Tensor:
        """The kdml.Tensor for a (non-empty) tensor value; constants are uploaded once."""
        if isinstance(value, DeviceValue):
            return value.tensor
        if name is not None and self.is_constant(name):
            dv = self._device_constants.get(name)
            if dv is None:
                arr = self._constant_host(name)
                dv = DeviceValue(self.device.tensor(np.ascontiguousarray(arr)), arr.shape, arr.dtype)
                self._device_constants[name] = dv
                stats.constant_uploads += 1
            return dv.tensor
        return self.upload_group([np.asarray(value)], stats, (name,))[0]

    def _arena_get(self, key: tuple[Any, ...]) -> Any:
        hit = self._arena.get(key)
        if hit is not None:
            self._arena.move_to_end(key)
        return hit

    def _arena_put(self, key: tuple[Any, ...], value: Any) -> None:
        self._arena[key] = value
        while len(self._arena) > self.arena_capacity:
            self._arena.popitem(last=False)

    def out_tensor(self, sizes: Sequence[int], dtype: Any) -> kdml.Tensor:
        """The current node's next output buffer, the same one on every run of this layout."""
        desc = kdml.TensorDesc(kdml.DataType.from_numpy(dtype), tuple(sizes) if len(sizes) else (1,))
        self._slot += 1
        key = (self._cur_node, "out", self._slot, desc)
        t = self._arena_get(key)
        if t is None:
            t = self.device.empty(desc)
            self._arena_put(key, t)
        return t

    def upload_group(self, arrays: list[np.ndarray], stats: RunStats,
                     names: tuple[str | None, ...] | None = None) -> list[kdml.Tensor]:
        """Upload host arrays for the current node in one transfer, into a buffer (16-byte
        aligned parts) that this node reuses on every run with the same layouts. When every
        array is a named graph value, a later node of the same run that needs the same values
        binds the same upload (e.g. the Q, K and V products of one quantized activation)."""
        named = names is not None and all(names)
        if named and names in self._run_uploads:
            return list(self._run_uploads[names])
        arrays = [np.ascontiguousarray(a) for a in arrays]
        descs = [packed_desc_for(a) for a in arrays]
        self._slot += 1
        key = (self._cur_node, "in", self._slot, tuple(descs))
        hit = self._arena_get(key)
        if hit is None:
            offsets, total = [], 0
            for d in descs:
                offsets.append(total)
                total += -(-d.byte_size // 16) * 16
            buf = self.device.buffer(total)
            hit = (buf, offsets, [kdml.Tensor(buf, d, o) for d, o in zip(descs, offsets)], total)
            self._arena_put(key, hit)
        buf, offsets, tensors, total = hit
        if len(arrays) == 1:
            buf.write(arrays[0])
        else:
            raw = np.zeros(total, np.uint8)
            for a, off in zip(arrays, offsets):
                raw[off : off + a.nbytes] = a.reshape(-1).view(np.uint8)
            buf.write(raw)
        stats.uploads += 1
        if named:
            self._run_uploads[names] = tensors  # type: ignore[index]
        return list(tensors)

    def release(self) -> None:
        """Drop the device buffers kept for reuse between runs (and the uploaded constants)."""
        with self._run_lock:
            self._arena.clear()
            self._device_constants.clear()

    # ---- running ----------------------------------------------------------------------
    def _normalize_inputs(self, inputs: Any) -> dict[str, Any]:
        if isinstance(inputs, dict):
            feeds = dict(inputs)
            unknown = [k for k in feeds if k not in self.input_names]
            if unknown:
                raise ValueError(f"unknown input(s) {unknown}; the model's inputs are {self.feed_names}")
        else:
            if _is_tensor_value(inputs) and not isinstance(inputs, DeviceValue):
                inputs = [inputs]
            seq = list(inputs)
            names = self.feed_names if len(seq) <= len(self.feed_names) else self.input_names
            if len(seq) > len(names):
                raise ValueError(f"{len(seq)} inputs given; the model takes {len(self.feed_names)}: {self.feed_names}")
            feeds = dict(zip(names, seq))
        missing = [n for n in self.feed_names if n not in feeds]
        if missing:
            raise ValueError(f"missing input(s) {missing}; the model's inputs are {self.feed_names}")
        for name, v in list(feeds.items()):
            if isinstance(v, (np.generic, int, float, bool)):
                feeds[name] = v = np.asarray(v)
            exp = self._elem_dtype(name)
            if isinstance(v, np.ndarray) and exp is not None and v.dtype != exp and v.dtype.kind != "O":
                raise ValueError(f"input {name!r}: expected {exp}, got {v.dtype}")
        return feeds

    def check_inputs(self, inputs: Any) -> None:
        """Raise ValueError (naming the input) if `inputs` cannot be fed to this model."""
        self._normalize_inputs(inputs)

    def run(self, inputs: Any, **kwargs: Any) -> Any:
        """Run the model (one run at a time per prepared model: device buffers are reused)."""
        with self._run_lock:
            return self._run(inputs)

    def _run(self, inputs: Any) -> Any:
        stats = RunStats()
        self.last_run = stats
        t0 = time.perf_counter()
        feeds = self._normalize_inputs(inputs)
        self._feeds_now = set(feeds)
        self._run_uploads = {}
        env: dict[str, Any] = dict(feeds)
        g = self.graph

        def lookup(name: str) -> Any:
            if name in env:
                return env[name]
            if name in self.constants:
                return self._constant_host(name)
            raise KeyError(f"value {name!r} is not available (missing input?)")

        for s, (kind, item) in enumerate(self._steps):
            ts = time.perf_counter()
            if kind == CPU:
                vals = [self.host(lookup(n), stats) for n in item.inputs]
                outs = item.run(vals)
                env.update(zip(item.outputs, outs))
                stats.cpu_segments += 1
                stats.cpu_seconds += time.perf_counter() - ts
            else:
                node = g.node[item]
                self._run_device_node(item, node, lookup, env, stats)
                stats.vulkan_seconds += time.perf_counter() - ts
            for name in self._free_after[s]:
                env.pop(name, None)
        results = [self.host(lookup(n), stats) for n in self.output_names]
        self._refresh_engines()
        stats.total_seconds = time.perf_counter() - t0
        return namedtupledict("Outputs", self.output_names)(*results)

    def _run_device_node(self, idx: int, node: onnx.NodeProto, lookup: Any, env: dict[str, Any],
                         stats: RunStats) -> None:
        ins = [lookup(n) if n else None for n in node.input]
        handler = _HANDLERS[node.op_type]
        self._cur_node, self._slot = idx, 0
        try:
            outs = handler(self, node, ins, stats)
            stats.vulkan_nodes += 1
        except (FallbackNeeded, kdml.UnsupportedError) as e:
            stats.runtime_fallbacks += 1
            self._note(f"node {idx} ({node.op_type} {node.name!r}) ran on the CPU: {e}")
            seg = self._single_node_segments.get(idx)
            if seg is None:
                seg = CpuSegment(self, -1 - idx, [idx])
                seg.outputs = [o for o in node.output if o]
                self._single_node_segments[idx] = seg
            vals = [self.host(lookup(n), stats) for n in seg.inputs]
            outs = seg.run(vals)
            env.update(zip(seg.outputs, outs))
            return
        for name, v in zip(node.output, outs):
            if name:
                env[name] = v


# ---------------------------------------------------------------------------------
# device handlers: (rep, node, input values, stats) -> output values
# ---------------------------------------------------------------------------------
def _dml_type(dt: np.dtype, what: str) -> kdml.DataType:
    if dt not in _DML_NUMPY:
        raise FallbackNeeded(f"{what} type {dt} is not a DirectML type")
    return kdml.DataType.from_numpy(dt)


def _scalar_int(rep: BackendRep, v: Any, stats: RunStats) -> int:
    arr = np.asarray(rep.host(v, stats))
    if arr.size != 1:
        raise ValueError(f"expected a single value, got shape {arr.shape}")
    return int(arr.reshape(-1)[0])


def _reshaped(rep: BackendRep, v: Any, shape: tuple[int, ...], stats: RunStats) -> Any:
    """A value with another shape of the same size: a host reshape, or a new packed view of
    the same device buffer."""
    if isinstance(v, DeviceValue):
        t = v.tensor
        if t.desc.strides is not None:
            raise FallbackNeeded("strided device tensor")
        desc = kdml.TensorDesc(t.desc.data_type, shape if shape else (1,))
        return DeviceValue(kdml.Tensor(t.buffer, desc, t.offset), shape, v.dtype)
    return np.asarray(rep.host(v, stats)).reshape(shape)


def _h_eyelike(rep: BackendRep, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    x = ins[0]
    shape = _value_shape(x)
    if len(shape) != 2:
        raise ValueError(f"EyeLike {node.name!r} takes a 2-D input, got shape {shape}")
    dt_attr = _attr(node, "dtype")
    dt = _np_dtype_of_onnx(dt_attr) if dt_attr is not None else _value_dtype(x)
    if dt is None:
        raise ValueError(f"EyeLike {node.name!r}: dtype {dt_attr} is not an ONNX tensor element type")
    data_type = _dml_type(dt, "output")
    k = int(_attr(node, "k", 0))
    if 0 in shape:
        return [np.zeros(shape, dtype=dt)]
    t = kdml.eye_like(shape, k, data_type=data_type, out=rep.out_tensor(shape, dt), device=rep.device)
    return [DeviceValue(t, shape, dt)]


def _h_trilu(rep: BackendRep, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    x = ins[0]
    shape = _value_shape(x)
    dt = _value_dtype(x)
    _dml_type(dt, "input")
    k = _scalar_int(rep, ins[1], stats) if len(ins) > 1 and ins[1] is not None else 0
    upper = int(_attr(node, "upper", 1))
    if len(shape) < 2:
        raise ValueError(f"Trilu {node.name!r} takes an input of rank >= 2, got shape {shape}")
    if 0 in shape:
        return [np.zeros(shape, dtype=dt)]
    work_shape = shape
    if len(shape) > 4:  # DIAGONAL_MATRIX1 takes 2-4 dimensions: fold the batch dimensions
        work_shape = (math.prod(shape[:-2]), *shape[-2:])
        x = _reshaped(rep, x, work_shape, stats)
    xt = rep.to_device(x, stats, node.input[0])
    fn = kdml.triu if upper else kdml.tril
    t = fn(xt, k, out=rep.out_tensor(work_shape, dt), device=rep.device)
    out = DeviceValue(t, work_shape, dt)
    if work_shape != shape:
        out = _reshaped(rep, out, shape, stats)
    return [out]


def _copy_value(rep: BackendRep, v: Any, stats: RunStats, name: str | None) -> Any:
    shape = _value_shape(v)
    dt = _value_dtype(v)
    if 0 in shape:
        return np.array(rep.host(v, stats), copy=True)
    xt = rep.to_device(v, stats, name)
    return DeviceValue(kdml.copy(xt, out=rep.out_tensor(xt.desc.sizes, dt), device=rep.device), shape, dt)


def _h_identity(rep: BackendRep, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    v = ins[0]
    if v is None:
        return [None]
    if isinstance(v, list):
        for e in v:
            if not _is_tensor_value(e):
                raise FallbackNeeded("nested sequence")
            _dml_type(_value_dtype(e), "element")
        return [[_copy_value(rep, e, stats, None) for e in v]]
    if not _is_tensor_value(v):
        raise FallbackNeeded(f"value of type {type(v).__name__}")
    _dml_type(_value_dtype(v), "input")
    return [_copy_value(rep, v, stats, node.input[0])]


def _matmul_out_shape(a_shape: tuple[int, ...], b_shape: tuple[int, ...]) -> tuple[int, ...]:
    batch = np.broadcast_shapes(a_shape[:-2], b_shape[:-2])
    return (*batch, a_shape[-2], b_shape[-1])


def _mm_integer_to_float(rep: BackendRep, node: onnx.NodeProto, a: Any, a_name: str | None, b: Any, b_name: str | None,
                         a_scale: Any, a_scale_name: str | None, b_scale: Any, b_scale_name: str,
                         a_zp: Any, a_zp_name: str | None, b_zp: Any, b_zp_name: str | None,
                         bias: Any, bias_name: str | None, stats: RunStats) -> Any:
    a_shape, b_shape = _value_shape(a), _value_shape(b)
    for what, v in (("A", a), ("B", b)):
        if _value_dtype(v) not in _QUANT_TYPES:
            raise FallbackNeeded(f"{what} type {_value_dtype(v)} is not int8/uint8")
        if len(_value_shape(v)) < 1:
            raise FallbackNeeded(f"{what} is a scalar")
    out_dt = _value_dtype(a_scale)
    if out_dt not in _FLOAT_OUT:
        raise FallbackNeeded(f"scale type {out_dt} is not float32/float16")
    squeeze = []
    if len(a_shape) == 1:
        a_shape = (1, a_shape[0])
        a = _reshaped(rep, a, a_shape, stats)
        a_name = None
        squeeze.append(-2)
    if len(b_shape) == 1:
        b_shape = (b_shape[0], 1)
        b = _reshaped(rep, b, b_shape, stats)
        b_name = None
        squeeze.append(-1)
    if a_shape[-1] != b_shape[-2]:
        raise ValueError(f"{node.op_type} {node.name!r}: A {a_shape} and B {b_shape} do not multiply")
    try:
        out_shape = _matmul_out_shape(a_shape, b_shape)
    except ValueError as e:
        raise ValueError(f"{node.op_type} {node.name!r}: batch shapes do not broadcast: {e}") from None
    n = b_shape[-1]
    a_batch, b_batch = a_shape[:-2], b_shape[:-2]
    if len(out_shape) > 4:  # the operator takes at most two batch dimensions: fold them into one
        if a_batch and b_batch and a_batch != b_batch:
            raise FallbackNeeded(f"{len(out_shape) - 2} broadcast batch dimensions")
        if a_batch:
            a = _reshaped(rep, a, (math.prod(a_batch), *a_shape[-2:]), stats)
            a_name = None
        if b_batch:
            b = _reshaped(rep, b, (math.prod(b_batch), *b_shape[-2:]), stats)
            b_name = None
        folded = out_shape
        out_shape = (math.prod(out_shape[:-2]), *out_shape[-2:])
    else:
        folded = None
    if int(np.prod(_value_shape(a_scale))) != 1:
        raise FallbackNeeded("a_scale is not a scalar")
    if a_zp is not None and int(np.prod(_value_shape(a_zp))) != 1:
        raise FallbackNeeded("a_zero_point is not a scalar")
    for what, v in (("b_scale", b_scale), ("b_zero_point", b_zp), ("bias", bias)):
        if v is None:
            continue
        vs = _value_shape(v)
        allowed = (n,) if what == "bias" else (1, n)
        if len(vs) == 1 and vs[0] not in allowed:
            # No engine takes this: ONNX wants a scalar or one value per column of B.
            raise ValueError(f"{node.op_type} {node.name!r}: {what} has {vs[0]} elements; B has {n} columns")
        if what == "bias" and vs != (n,):
            raise FallbackNeeded(f"bias of shape {vs} is not ({n},)")
        if what != "bias" and math.prod(vs) != 1 and vs != (n,):
            raise FallbackNeeded(f"{what} of shape {vs} is neither a scalar nor ({n},)")
    if a_zp is not None and _value_dtype(a_zp) != _value_dtype(a):
        raise FallbackNeeded("a_zero_point type differs from A")
    if b_zp is not None and _value_dtype(b_zp) != _value_dtype(b):
        raise FallbackNeeded("b_zero_point type differs from B")

    def final(v: Any) -> Any:
        full = folded or out_shape
        shape = tuple(s for i, s in enumerate(full) if i - len(full) not in squeeze)
        return v if shape == _value_shape(v) else _reshaped(rep, v, shape, stats)

    if math.prod(out_shape) == 0:
        return final(np.zeros(out_shape, dtype=out_dt))
    if a_shape[-1] == 0:  # K = 0: the sum is empty, only the bias remains
        base = np.zeros(out_shape, dtype=out_dt)
        if bias is not None:
            base = base + np.asarray(rep.host(bias, stats), dtype=out_dt)
        return final(base.astype(out_dt))

    # Device values and constants are bound as they are; the other host values (typically
    # A and its scale and zero point, fresh from a CPU sub-graph) go up in one transfer.
    args = [(a, a_name), (b, b_name), (a_scale, a_scale_name), (b_scale, b_scale_name), (a_zp, a_zp_name),
            (b_zp, b_zp_name), (bias, bias_name)]
    bound: list[Any] = [None] * len(args)
    pending = []
    for i, (v, name) in enumerate(args):
        if v is None:
            continue
        if isinstance(v, DeviceValue) or rep.is_constant(name):
            bound[i] = rep.to_device(v, stats, name)
        else:
            pending.append(i)
    if pending:
        group = rep.upload_group([np.asarray(args[i][0]) for i in pending], stats, tuple(args[i][1] for i in pending))
        for i, t in zip(pending, group):
            bound[i] = t
    mmitf = kdml.matmul_integer_to_float  # type: ignore[attr-defined]
    t = mmitf(*bound, out_data_type=kdml.DataType.from_numpy(out_dt), out=rep.out_tensor(out_shape, out_dt),
              device=rep.device)
    return final(DeviceValue(t, out_shape, out_dt))


def _in(ins: list[Any], node: onnx.NodeProto, i: int) -> tuple[Any, str | None]:
    if i < len(ins) and node.input[i]:
        return ins[i], node.input[i]
    return None, None


def _h_mmitf(rep: BackendRep, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    a, an = _in(ins, node, 0)
    b, bn = _in(ins, node, 1)
    a_s, a_sn = _in(ins, node, 2)
    b_s, b_sn = _in(ins, node, 3)
    a_zp, a_zpn = _in(ins, node, 4)
    b_zp, b_zpn = _in(ins, node, 5)
    bias, bias_n = _in(ins, node, 6)
    return [_mm_integer_to_float(rep, node, a, an, b, bn or "", a_s, a_sn, b_s, b_sn or "", a_zp, a_zpn,
                                 b_zp, b_zpn, bias, bias_n, stats)]


def _h_dqmm(rep: BackendRep, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    a, _ = _in(ins, node, 0)
    b, bn = _in(ins, node, 1)
    b_s, b_sn = _in(ins, node, 2)
    b_zp, b_zpn = _in(ins, node, 3)
    bias, bias_n = _in(ins, node, 4)
    if _value_dtype(a) != np.float32:
        raise FallbackNeeded(f"A type {_value_dtype(a)} is not float32")
    if _value_dtype(b_s) != np.float32:
        raise FallbackNeeded(f"b_scale type {_value_dtype(b_s)} is not float32")
    # Quantize A on the host, with ONNX Runtime's CPU kernel's parameters.
    q, scale, zp = dynamic_quantize_uint8(rep.host(a, stats))
    return [_mm_integer_to_float(rep, node, q, None, b, bn or "", np.array(scale, np.float32), None, b_s,
                                 b_sn or "", np.array(zp, np.uint8), None, b_zp, b_zpn, bias, bias_n, stats)]


_HANDLERS = {
    "EyeLike": _h_eyelike,
    "Trilu": _h_trilu,
    "Identity": _h_identity,
    "MatMulIntegerToFloat": _h_mmitf,
    "DynamicQuantizeMatMul": _h_dqmm,
}


def _densify(sp: onnx.SparseTensorProto) -> np.ndarray:
    vals = numpy_helper.to_array(sp.values).reshape(-1)
    idx = numpy_helper.to_array(sp.indices)
    dense = np.zeros(int(np.prod(sp.dims)), dtype=vals.dtype)
    flat = idx.reshape(-1) if idx.ndim == 1 else np.ravel_multi_index(idx.T, tuple(sp.dims))
    dense[flat] = vals
    return dense.reshape(tuple(sp.dims))


# ---------------------------------------------------------------------------------
# the backend
# ---------------------------------------------------------------------------------
_devices: dict[tuple[int, str], kdml.Device] = {}


def _parse_device(device: str) -> int | None:
    """Vulkan device index for an ONNX device string, or None if not ours."""
    text = str(device).strip().upper()
    kind, _, idx = text.partition(":")
    if kind not in ("CPU", "VULKAN"):
        return None
    if kind == "CPU":
        return -1 if not idx or idx == "0" else None
    try:
        return int(idx) if idx else -1
    except ValueError:
        return None


def _kdml_device(device: str, feature_level: Any = None) -> kdml.Device:
    index = _parse_device(device)
    if index is None:
        raise ValueError(f"device {device!r} is not supported; use 'CPU' (the default Vulkan device) or 'VULKAN:<n>'")
    if feature_level is None and index == -1:
        return kdml.default_device()
    key = (max(index, 0), str(feature_level))
    dev = _devices.get(key)
    if dev is None or dev._closed:
        dev = kdml.Device(max(index, 0), feature_level)
        _devices[key] = dev
    return dev


def _load_model(model: Any) -> onnx.ModelProto:
    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, (bytes, bytearray)):
        return onnx.load_from_string(bytes(model))
    if isinstance(model, (str, os.PathLike)):
        return onnx.load(str(Path(model)))
    raise TypeError(f"model must be a ModelProto, bytes or a path, got {type(model).__name__}")


class Backend(_OnnxBackend):
    """kompute_dml as an ONNX backend (see the module docstring)."""

    @classmethod
    def is_compatible(cls, model: Any, device: str = "CPU", **kwargs: Any) -> bool:
        return _parse_device(device) is not None

    @classmethod
    def supports_device(cls, device: str) -> bool:
        return _parse_device(device) is not None

    @classmethod
    def prepare(cls, model: Any, device: str = "CPU", **kwargs: Any) -> BackendRep:
        """Options: feature_level (a kdml.FeatureLevel or its name), fallback ("auto":
        onnxruntime then the reference evaluator; "onnxruntime"; "reference"), exclude_ops
        (op types to keep on the CPU), cpu_threads (onnxruntime intra-op threads), kdml_device."""
        proto = _load_model(model)
        dev = kwargs.pop("kdml_device", None) or _kdml_device(device, kwargs.pop("feature_level", None))
        kwargs.pop("feature_level", None)
        allowed = {"fallback", "exclude_ops", "cpu_threads"}
        return BackendRep(proto, dev, **{k: v for k, v in kwargs.items() if k in allowed})

    @classmethod
    def run_model(cls, model: Any, inputs: Any, device: str = "CPU", **kwargs: Any) -> Any:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node: onnx.NodeProto, inputs: Any, device: str = "CPU",
                 outputs_info: Sequence[tuple[Any, tuple[int, ...]]] | None = None, **kwargs: Any) -> Any:
        """Run one node on inputs given in its input order (None for an absent optional input)."""
        if isinstance(inputs, dict):
            inputs = [inputs.get(n) for n in node.input]
        inputs = list(inputs)
        g_inputs, feeds = [], {}
        for name, v in zip(node.input, inputs):
            if not name or v is None:
                continue
            g_inputs.append(helper.make_value_info(name, _type_proto_of_value(np.asarray(v) if not isinstance(
                v, list) else v, None)))
            feeds[name] = v
        g_outputs = [onnx.ValueInfoProto(name=o) for o in node.output if o]
        graph = helper.make_graph([node], "kdml_run_node", g_inputs, g_outputs)
        opsets = [helper.make_opsetid("", kwargs.pop("opset_version", onnx.defs.onnx_opset_version()))]
        if node.domain and node.domain != "ai.onnx":
            opsets.append(helper.make_opsetid(node.domain, 1))
        model = helper.make_model(graph, opset_imports=opsets, ir_version=10)
        return cls.prepare(model, device, **kwargs).run(feeds)


prepare = Backend.prepare
run_model = Backend.run_model
run_node = Backend.run_node
supports_device = Backend.supports_device

__all__ = ["Backend", "BackendRep", "DeviceValue", "NodePlacement", "RunStats", "dynamic_quantize_uint8",
           "prepare", "run_model", "run_node", "supports_device"]
