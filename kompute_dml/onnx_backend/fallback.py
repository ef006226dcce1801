"""CPU fallback: runs of fallback nodes executed as sub-models by onnxruntime or onnx.reference."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx
from onnx import helper

from .graph import _node_inputs, _signature, _type_proto_of_value
from .ort_compat import clamp_versions, needed_opset, ort_limits
from .values import FallbackError

if TYPE_CHECKING:
    from .rep import BackendRep


# ---------------------------------------------------------------------------------
# CPU fallback sub-graphs
# ---------------------------------------------------------------------------------
def _first_line(e: BaseException) -> str:
    """An error's first line, its middle cut where long (onnxruntime puts a source path and a
    C++ signature before the reason, which comes last)."""
    text = str(e).strip()
    line = text.splitlines()[0] if text else type(e).__name__
    return line if len(line) <= 300 else f"{line[:60]} ... {line[-200:]}"


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
        self.refused = ""  # why onnxruntime refused this sub-graph (auto), for the run's events

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
        # versions the installed onnxruntime loads, with the same operator schemas (ort_compat.py)
        opsets, ir = clamp_versions(rep.model.opset_import, max(rep.model.ir_version, 4),
                                    nodes + [n for f in rep.model.functions for n in f.node])
        model = helper.make_model(graph, opset_imports=opsets, ir_version=ir)
        model.functions.extend(rep.model.functions)
        return model

    def expected_engine(self) -> str:
        """The engine this sub-graph should run on, known before any input arrives: the
        reference evaluator where asked for, or (auto) where onnxruntime is missing or has no
        schema as new as the model's nodes need; else onnxruntime."""
        if self.rep.fallback == "reference":
            return "reference"
        return "reference" if self.ort_obstacle() and self.rep.fallback == "auto" else "onnxruntime"

    def ort_obstacle(self) -> str:
        """Why onnxruntime cannot run this sub-graph, as far as is known before the run ('' if
        nothing is known against it)."""
        limits = ort_limits()
        if limits is None:
            return "onnxruntime is not installed"
        nodes = [self.rep.graph.node[i] for i in self.node_indices]
        opsets, _ = clamp_versions(self.rep.model.opset_import, self.rep.model.ir_version, nodes)
        need = next((o.version for o in opsets if o.domain in ("", "ai.onnx") and o.version > limits[1]), None)
        if need is None:
            return ""
        return (f"its nodes {self._ops()} need ai.onnx opset {needed_opset(nodes, need) or need}; the installed "
                f"onnxruntime loads up to opset {limits[1]}")

    def _ops(self) -> list[str]:
        return sorted({self.rep.graph.node[i].op_type for i in self.node_indices})

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
                errors.append(f"onnxruntime: {_first_line(e)}")
                if self.rep.fallback == "onnxruntime":  # asked for onnxruntime: no silent switch
                    raise FallbackError(
                        f"fallback='onnxruntime': onnxruntime cannot run CPU sub-graph {self.index} of {self._ops()}: "
                        f"{errors[-1][len('onnxruntime: '):]}; fallback='auto' lets onnx's reference evaluator run "
                        "what onnxruntime refuses") from e
        try:
            from onnx.reference import ReferenceEvaluator

            ref = ReferenceEvaluator(model)
        except Exception as e:
            errors.append(f"reference: {_first_line(e)}")
            raise RuntimeError(f"no CPU fallback could run the sub-graph of {self._ops()}: " + "; ".join(errors)) from e
        if errors:  # auto, and onnxruntime refused: say so in every run's events (run)
            self.refused = errors[0]
        return "reference", ref

    def run(self, values: list[Any]) -> list[Any]:
        key = tuple(_signature(v) for v in values)
        runner = self._runners.get(key)
        if runner is None:
            runner = self._build(values)
            self._runners[key] = runner
        engine, impl = runner
        self.engine = engine
        if engine == "reference" and self.refused:
            self.rep._note(f"CPU sub-graph {self.index} of {self._ops()} ran on onnx's reference evaluator: "
                           f"{self.refused}")
        # (a numpy scalar from host arithmetic as the 0-d array onnxruntime takes)
        feeds = {n: np.asarray(v) if isinstance(v, np.generic) else v for n, v in zip(self.inputs, values)}
        if engine == "onnxruntime":
            try:
                return list(impl.run(self.outputs, feeds))
            except Exception as e:
                if self.rep.fallback == "onnxruntime":
                    raise
                first = f"onnxruntime: {_first_line(e)}"
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
            self.refused = f"{first} (at run time)"
            self.rep._note(f"CPU sub-graph {self.index}: onnxruntime failed at run time ({first}); "
                           "the reference evaluator ran it")
            return outs
        return list(impl.run(self.outputs, feeds))
