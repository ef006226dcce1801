"""BackendRep: a prepared model (partition into Vulkan nodes and CPU sub-graphs, and the run loop)."""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import time
from collections.abc import Iterable
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnx.backend.base import BackendRep as _OnnxBackendRep
from onnx.backend.base import namedtupledict

import kompute_dml as kdml

from .analysis import GraphAnalysis, in_topological_order
from .context import EagerContext
from .cse import merge_common
from .device_graph import GraphPlan
from .feeds import normalize_inputs
from .file_weights import FileWeights
from .fold import fold_constants, fold_summary
from .fusion_match import find_fusions
from .fusion_qdq import dedicate_dequantize, product_inputs
from .fusions import Fusion, Fusions
from .gc_pause import gc_paused
from .graph import _densify
from .handlers import handler_for
from .handlers_values import OutputArrays, into
from .nbits import expand_matmul_nbits
from .product_groups import find_float_groups, find_groups
from .run_state import RunState
from .transfers import ValueTransfers, device_results
from .values import CPU, HOST, VULKAN, FallbackError, FallbackNeeded, NodePlacement, RunStats, at_node, signature


# ---------------------------------------------------------------------------------
# the prepared model
# ---------------------------------------------------------------------------------
class BackendRep(GraphAnalysis, ValueTransfers, _OnnxBackendRep):
    """A prepared model. `placement` lists where every node runs; `summary()` says it in
    one paragraph; `run(inputs)` returns the outputs (numpy arrays, lists for sequences,
    None for absent optionals); `last_run` holds the RunStats of the latest run. `fuse`:
    run the node chains of fusions.PATTERNS as one dispatch each (`fusions`); `group_products`:
    integer and float products that share their A run as one (product_groups.py); `allow_half_precision`:
    float32 matrix products and convolutions computed in float16 (half_precision.py)."""

    def __init__(self, model: onnx.ModelProto, device: kdml.Device, *, fallback: str = "auto",
                 exclude_ops: Iterable[str] = (), cpu_threads: int | None = None, fuse: bool = True,
                 group_products: bool = True, allow_half_precision: bool = False,
                 file_weights: FileWeights | None = None) -> None:
        if fallback not in ("auto", "onnxruntime", "reference"):
            raise ValueError(f"fallback must be 'auto', 'onnxruntime' or 'reference', got {fallback!r}")
        model = in_topological_order(model)  # a copy, reordered, only where the nodes are out of order
        if not isinstance(allow_half_precision, (bool, np.bool_)):
            raise TypeError(f"allow_half_precision must be a bool, got {type(allow_half_precision).__name__}")
        self.allow_half_precision = bool(allow_half_precision)
        self.model = model
        self.device = device
        if device.policy.prepare_siblings:  # earlier processes' pipelines, made while prepare goes on
            device.engine.programs.warm(device.policy.pipeline_threads)
        self.fallback = fallback
        self.cpu_threads = cpu_threads
        self.exclude_ops = set(exclude_ops)
        self.state = RunState()  # what runs change (run_state.py); the rest is frozen after these passes
        self.file_weights = file_weights  # the initializers' bytes as read, where prepare read them (file_weights.py)
        g = model.graph
        constants: dict[str, TensorProto] = {t.name: t for t in g.initializer}
        for sp in g.sparse_initializer:  # rare: densified once
            constants[sp.values.name] = numpy_helper.from_array(_densify(sp), sp.values.name)
        # Graph inputs that have an initializer are overridable defaults, not constants.
        self.input_names = [i.name for i in g.input]
        self.feed_names = [i.name for i in g.input if i.name not in constants]
        self.output_names = [o.name for o in g.output]
        self.declared_types = self._infer_types(model)
        # Constant nodes and what reads only constants, folded once (fold.py): the graph of the nodes left
        folded = fold_constants(model, constants, set(self.input_names))
        self.graph, self.constants, self.folded, self.fold_note = folded.graph, folded.constants, folded.folded, folded.note
        # com.microsoft MatMulNBits of constant weights: a MatMul of the dequantized weights (nbits.py)
        self.constants = dict(self.constants)
        self.graph, self.nbits_expanded = expand_matmul_nbits(self.graph, self.constants, self.declared_types)
        for name in set(self.constants) - set(constants):
            t = self.constants[name]
            self.declared_types.setdefault(name, helper.make_tensor_type_proto(t.data_type, list(t.dims)))
        self.qdq_product_inputs: frozenset[str] = frozenset()  # the values QDQ products read (fusion_qdq.py)
        self.merged = 0  # repeated nodes read through their first occurrence (cse.py)
        if fuse:  # then a DequantizeLinear per quantized product reading a shared one (fusion_qdq.py)
            self.graph, self.merged = merge_common(self.graph, set(self.output_names), self.constants, set(self.input_names))
            self.graph, copies = dedicate_dequantize(self.graph, set(self.output_names), self.constants.__contains__)
            for name, of in copies.items():
                if of in self.declared_types:
                    self.declared_types[name] = self.declared_types[of]
            self.qdq_product_inputs = product_inputs(self.graph, self.constants.__contains__)
        # the values a dynamic quantization reads (DynamicQuantizeLinear, DynamicQuantizeMatMul's A): their
        # normalizations write the partial keys it needs beside them (handlers_nn.keys_for)
        self.dynamic_quantized = frozenset(n.input[0] for n in self.graph.node if n.input and (n.op_type, n.domain) in (
            ("DynamicQuantizeLinear", ""), ("DynamicQuantizeLinear", "ai.onnx"), ("DynamicQuantizeMatMul", "com.microsoft")))
        self.feed_rules: dict[str, Any] = {}  # feeds.py: each input's declared type and shape, read once

        self._validate_graph()
        self._placement_static: list[tuple[str, str, str]] = self._static_targets()
        self.fusions = find_fusions(self) if fuse else Fusions()
        self._steps = self._partition()
        self._placement = self._make_placement()
        if fallback == "onnxruntime":  # refuse now what onnxruntime is known to refuse at the run
            for seg in self.segments:
                why = seg.ort_obstacle()
                if why:
                    raise FallbackError(f"fallback='onnxruntime': CPU sub-graph {seg.index}: {why}; fallback='auto' "
                                        "lets onnx's reference evaluator run it")
        self.graph_mode = all(t[0] != CPU for t in self._placement_static)
        # integer products sharing their A (product_groups.py): their merged weights join the constants now
        self.product_groups: dict[str, Any] = {**find_groups(self), **find_float_groups(self)} if group_products else {}
        self._ctx = EagerContext(self)  # what handlers run against node by node (context.py)
        self._outputs_type = namedtupledict("Outputs", self.output_names)  # made once: a class per call costs ~40 us
        # outputs declared with a type numpy knows only through ml_dtypes (bfloat16, float8, int4, ...),
        # whose bits a run returns in a storage type of their size: viewed as the declared type
        self._output_views = {k: dt for k, n in enumerate(self.output_names)
                              if (dt := self._elem_dtype(n)) is not None and dt.kind == "V"}
        # per node: (node, target, input names, output names, profile scope), read from the protobuf
        # once: every plan walks every node, and each protobuf field read costs a wrapper
        self.node_table = tuple((node, self._placement_static[i][0], tuple(node.input), tuple(node.output),
                                 f"{i} {node.op_type} {node.name}") for i, node in enumerate(self.graph.node))
        self._frozen = True

    def __setattr__(self, name: str, value: Any) -> None:
        if getattr(self, "_frozen", False):
            raise AttributeError(f"a prepared model is not changed after prepare: {name!r} cannot be set "
                                 "(what runs change lives in rep.state, run_state.RunState)")
        object.__setattr__(self, name, value)

    @property
    def last_run(self) -> RunStats:
        """The RunStats of the latest run."""
        return self.state.last_run

    # ---- placement ------------------------------------------------------------
    def _make_placement(self) -> list[NodePlacement]:
        seg_of = {i: s.index for s in self.segments for i in s.node_indices}
        # the engine each sub-graph is expected to run on; the first run settles it (placement)
        engines = [s.expected_engine() for s in self.segments]
        out = []
        for i, node in enumerate(self.graph.node):
            target, op, reason = self._placement_static[i]
            domain = node.domain if node.domain != "ai.onnx" else ""
            seg = seg_of.get(i)
            op, into = self.fusions.placement(i, op)
            out.append(NodePlacement(i, node.name, node.op_type, domain, target,
                                     op if target != CPU else engines[seg] if seg is not None else "", seg, reason,
                                     into))
        return out

    @property
    def placement(self) -> list[NodePlacement]:
        """Where every node runs; a CPU sub-graph's engine as its first run settled it."""
        return [dataclasses.replace(p, operator=self.segments[p.segment].engine or p.operator)
                if p.segment is not None else p for p in self._placement]

    def summary(self) -> str:
        """Where the nodes run, in a few lines."""
        vk = [p for p in self.placement if p.target == VULKAN]
        cpu = [p for p in self.placement if p.target == CPU]
        host = [p for p in self.placement if p.target == HOST]
        lines = [f"{len(vk)} of {len(self.placement)} nodes on Vulkan ({self.device.name}, "
                 f"feature level {self.device.feature_level.name})"]
        if self.folded:
            lines.append(f"{len(self.folded)} nodes read only constants and were folded at prepare: "
                         + fold_summary(self.folded))
        if self.fold_note:
            lines.append(f"  constant nodes {self.fold_note}")
        if self.merged:
            lines.append(f"{self.merged} nodes repeated an earlier one's inputs and work: merged at prepare (cse.py)")
        if self.nbits_expanded:
            lines.append(f"{self.nbits_expanded} com.microsoft MatMulNBits became MatMul of weights dequantized at "
                         "prepare (nbits.py: their results, not a 4-bit product's speed)")
        if host:
            hc = collections.Counter(p.op_type for p in host)
            lines.append(f"{len(host)} nodes read no input data and are resolved on the host per input shape: "
                         + ", ".join(f"{op} x{c}" for op, c in sorted(hc.items())))
        if self.graph_mode:
            lines.append("no node needs the CPU: each input signature runs as one device submission"
                         + (f" (except: {self.state.plan_refusal})" if self.state.plan_refusal else ""))
        counts = collections.Counter((p.op_type, p.operator) for p in vk
                                     if p.fused_into is None and p.index not in self.fusions.by_carrier)
        for (op, dml), c in sorted(counts.items()):
            lines.append(f"  vulkan  {op} x{c} -> {dml}")
        lines += self.fusions.summary()
        engines = collections.Counter(p.operator for p in cpu)
        eng = ", ".join(f"{e} {c}" for e, c in sorted(engines.items())) or "none"
        lines.append(f"{len(cpu)} nodes fall back to the CPU in {len(self.segments)} sub-graph(s) ({eng})")
        if cpu and self.fallback == "auto" and not any(s.engine for s in self.segments):
            lines.append("  (engines as expected before the first run; a sub-graph that onnxruntime refuses runs on "
                         "onnx's reference evaluator, and each run's last_run.events says so)")
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
    # ---- running ----------------------------------------------------------------------
    def warmup(self, shapes: dict[str, Any]) -> None:
        """Run once on zero-filled inputs of these shapes (every feed named; zeros are valid
        token ids and masks for the encoders this backend targets), so a first real run of
        those shapes builds nothing, and wait for the pipelines other shapes may take (the
        siblings a plan makes in the background); the run's statistics are not kept as last_run."""
        missing = [n for n in self.feed_names if n not in shapes]
        if missing:
            raise ValueError(f"warmup: give a shape for every input: {missing} missing (inputs: {self.feed_names})")
        feeds = {n: np.zeros(tuple(int(v) for v in shapes[n]), dtype=self._elem_dtype(n) or np.float32)
                 for n in self.feed_names}
        last = self.last_run
        self.run(feeds)
        self.device.engine.programs.wait()
        self.state.last_run = last

    def _normalize_inputs(self, inputs: Any, cast: bool = False) -> dict[str, Any]:
        return normalize_inputs(self, inputs, cast)  # feeds.py: the one input rule, types, declared shapes

    def check_inputs(self, inputs: Any) -> None:
        """Raise ValueError (naming the input) if `inputs` cannot be fed to this model."""
        self._normalize_inputs(inputs)

    def run(self, inputs: Any, *, cast: bool = False, device_outputs: bool = False,  # type: ignore[override]
            out: OutputArrays | None = None) -> Any:
        """Run the model (one run at a time per prepared model: device buffers are reused).
        Inputs may be kompute_dml Tensors on the model's device: fed without a host round trip.
        `cast=True`: host inputs of another element type are converted to the declared one
        (numpy's astype) instead of refused where the conversion would change values.
        `device_outputs=True`: tensor outputs stay on the device, as new kdml.Tensors that no later run
        changes (IO binding; a padded cache's presents are views: cache_padding.py); bool ones host arrays.
        `out(k, shape, dtype)`: where host output k goes, an array of that shape and type the
        caller provides (an execution provider's output buffer): read into it directly where
        the device result allows, copied into it otherwise; what it returns is the output."""
        with self.state.lock:
            return self._run(inputs, cast, device_outputs, out)

    def run_normalized(self, feeds: dict[str, np.ndarray], out: OutputArrays | None = None) -> Any:
        """run(feeds, out=out) without the input checks (feeds.normalize_inputs), for a caller
        that guarantees what they would establish: every feed_name given once and nothing else,
        each a host numpy array of its declared element type, and no input declaring a shape
        (the plugin EP's sub-graphs: onnxruntime types their inputs; a small model's run spent
        about 4 us of host time in those checks)."""
        with self.state.lock:
            return self._run(feeds, out=out, normalized=True)

    def _run(self, inputs: Any, cast: bool = False, device_outputs: bool = False,
             out: OutputArrays | None = None, normalized: bool = False) -> Any:
        stats = RunStats()
        self.state.last_run = stats
        t0 = time.perf_counter()
        feeds = inputs if normalized else self._normalize_inputs(inputs, cast)
        if (padded := self.state.cache_padding.run(self, feeds, device_outputs, out)) is not None:
            return padded  # a growing cache's step, left-padded to its bucket's plan (cache_padding.py)
        self.state.feeds_now = set(feeds)
        self.state.uploads = {}
        self.state.memo = {}  # results handlers share within this run (handlers.py)
        plan = self._plan_for(feeds, stats) if self.graph_mode and not self.state.node_by_node else None
        if plan is not None:
            tv = time.perf_counter()
            results = plan.run(feeds, stats, device_outputs, out)
            stats.vulkan_seconds += time.perf_counter() - tv
            stats.total_seconds = time.perf_counter() - t0
            return self._outputs_type(*self._declared_views(results))
        env: dict[str, Any] = dict(feeds)
        g = self.graph

        def lookup(name: str) -> Any:
            if name in env:
                return env[name]
            if name in self.constants:
                return self.constant_host(name)
            raise KeyError(f"value {name!r} is not available (missing input?)")

        steps = _EagerSteps(self, lookup, env, stats)
        for s, (kind, item) in enumerate(self._steps):
            ts = time.perf_counter()
            if kind == CPU:
                vals = [self.host(lookup(n), stats) for n in item.inputs]
                outs = item.run(vals)
                env.update(zip(item.outputs, outs))
                stats.cpu_segments += 1
                stats.cpu_seconds += time.perf_counter() - ts
            elif kind == HOST:
                node = g.node[item]
                try:
                    outs = self._host_node(item, node, [lookup(n) if n else None for n in node.input], stats)
                except ValueError as e:  # a shape rule broken at run time: say where
                    err = at_node(e, item, node)
                    if err is e:
                        raise
                    raise err from e
                env.update((o, v) for o, v in zip(node.output, outs) if o)
                stats.host_seconds += time.perf_counter() - ts
            else:  # a device node, a fused chain's carrier, or a node absorbed into a chain
                self.fusions.step(item, steps, self._ctx, g, lookup, stats)
                stats.vulkan_seconds += time.perf_counter() - ts
            for name in self._free_after[s]:
                env.pop(name, None)
        if device_outputs:
            results = device_results([lookup(n) for n in self.output_names], self.device)
        else:
            results = [self.host(lookup(n), stats) for n in self.output_names]
            if out is not None:
                results = [into(out, k, r) for k, r in enumerate(results)]
        stats.total_seconds = time.perf_counter() - t0
        return self._outputs_type(*self._declared_views(results))

    def _declared_views(self, results: list[Any]) -> list[Any]:
        """Host results of _output_views' outputs as their declared type (the same bits)."""
        for k, dt in self._output_views.items():
            r = results[k]
            if isinstance(r, np.ndarray) and r.dtype != dt and r.dtype.itemsize == dt.itemsize:
                results[k] = r.view(dt)
        return results

    def _run_device_node(self, idx: int, node: onnx.NodeProto, lookup: Any, env: dict[str, Any],
                         stats: RunStats) -> None:
        ins = [lookup(n) if n else None for n in node.input]
        handler = self.handler_for(node)
        self.state.cur_node, self.state.slot = idx, 0
        prof = self.device.active_profile  # Device.profile(): rows named by node
        try:
            with prof.scope(f"{idx} {node.op_type} {node.name}") if prof else contextlib.nullcontext():
                outs = handler(self._ctx, node, ins, stats)
            stats.vulkan_nodes += 1
        except (FallbackNeeded, kdml.UnsupportedError) as e:
            stats.runtime_fallbacks += 1
            self._note(f"node {idx} ({node.op_type} {node.name!r}) ran on the CPU: {e}")
            seg = self._single_node_segment(idx)
            outs = seg.run([self.host(lookup(n), stats) for n in seg.inputs])
            env.update(zip(seg.outputs, outs))
            return
        for name, v in zip(node.output, outs):
            if name:
                env[name] = v

    # ---- host nodes, whole-graph plans ------------------------------------------------
    def handler_for(self, node: onnx.NodeProto) -> Any:
        return handler_for(node)

    def _plan_for(self, feeds: dict[str, Any], stats: RunStats) -> GraphPlan | None:
        """The whole-graph program of these inputs' signature, planned at its first run;
        None where it cannot be planned (the run goes node by node, and events say why)."""
        key = signature(feeds)
        if key in self.state.plans:
            self.state.plans.move_to_end(key)
            return self.state.plans[key]
        try:
            with gc_paused():
                plan: GraphPlan | None = GraphPlan(self, feeds, stats)
            stats.planned = True
            stats.plan_seconds = plan.plan_seconds
        except (FallbackNeeded, kdml.UnsupportedError) as e:
            plan = None
            self.state.plan_refusal = str(e)
            self._note(f"the graph runs node by node for this input signature: {e}")
        plans = self.state.plans
        plans[key] = plan
        while len(plans) > 1 and (len(plans) > self.state.plan_capacity or sum(
                p.dispatches for p in plans.values() if p is not None) > self.state.plan_dispatch_capacity):
            plans.popitem(last=False)
        return plan


class _EagerSteps:
    """The node-by-node executor's part of a device step (fusions.StepExecutor)."""

    def __init__(self, rep: BackendRep, lookup: Any, env: dict[str, Any], stats: RunStats) -> None:
        self.rep, self.lookup, self.env, self.stats = rep, lookup, env, stats

    def node(self, i: int) -> None:
        self.rep._run_device_node(i, self.rep.graph.node[i], self.lookup, self.env, self.stats)

    def scoped(self, fusion: Fusion) -> Any:
        rep = self.rep
        rep.state.cur_node, rep.state.slot = fusion.carrier, 0
        prof = rep.device.active_profile
        return prof.scope(fusion.scope(rep.graph)) if prof else contextlib.nullcontext()

    def run_chain(self, fusion: Fusion, run: Any) -> list[Any]:
        return run(self.rep._ctx)

    def chain_done(self, fusion: Fusion, outs: list[Any]) -> None:
        self.stats.vulkan_nodes += len(fusion.nodes)
        for name, v in zip([*self.rep.graph.node[fusion.carrier].output, *fusion.shared], outs):
            if name:
                self.env[name] = v

    def drop(self, name: str) -> None:
        self.env.pop(name, None)
