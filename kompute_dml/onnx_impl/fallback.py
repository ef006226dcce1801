"""CPU fallback: runs of fallback nodes executed as sub-models by onnxruntime or onnx.reference."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import onnx
from onnx import helper

from .graph import _node_inputs, _signature, _type_proto_of_value

if TYPE_CHECKING:
    from .rep import BackendRep


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
