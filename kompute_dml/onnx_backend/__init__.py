"""ONNX backend: runs ONNX models with DirectML operator semantics on a Vulkan device.

`Backend` is an `onnx.backend.base.Backend`, so ONNX's own test runner
(`onnx.backend.test.BackendTest`) can drive it. Device "CPU" means the default Vulkan
device (`kdml.default_device()`, which KDML_DEVICE picks); "VULKAN", "VULKAN:<index>",
"VULKAN:<uuid>" and "GPU-<uuid>" are accepted too (docs/serving.md).

Each ONNX node type a kompute_dml operator serves is declared by its operator module
(`OperatorSpec.onnx`, kompute_dml/ops/); `kompute-dml info` and docs/onnx.md list them. A node
whose types, rank or feature level the device operator cannot take runs on the CPU: the graph is
cut into maximal sub-graphs of consecutive fallback nodes, each run by an onnxruntime CPU session
(the first choice) or by `onnx.reference.ReferenceEvaluator` (when onnxruntime refuses the
sub-graph: reported in `rep.placement` and every run's `last_run.events`; with
fallback="onnxruntime", `FallbackError` instead). Sub-models are written with the IR version and
opset onnxruntime loads (ort_compat.py).
Values produced on the device stay there (`kdml.Tensor`) while only device nodes read
them; a value is downloaded once, when a fallback sub-graph or a graph output needs it.

The modules of this package, one concern each:

- file_weights.py: a model read from bytes or a binary file keeps them; its initializers' raw_data
  are views of them (transfers.constant_array), not protobuf's copies
- fold.py: `prepare`'s first pass, constant folding (Constant nodes and what reads only constants);
  nbits.py: the next, com.microsoft MatMulNBits as a MatMul of its weights dequantized once;
  cse.py: then repeated nodes read through their first occurrence
- values.py: constants, `DeviceValue`, `NodePlacement`, `RunStats`, `FallbackNeeded`
- graph.py: graph helpers (the names a node reads, attributes, types of runtime values)
- fallback.py: `CpuSegment`, the CPU fallback runner (onnxruntime, then onnx.reference)
- quantize.py: `dynamic_quantize_uint8` (the host quantization of empty tensors)
- analysis.py, transfers.py: `BackendRep`'s static analysis and host/device value methods
- rep.py: `BackendRep` (placement, the node-by-node run loop, whole-graph plans per input
  signature); analysis.py also partitions the graph into device steps and CPU sub-graphs
- device_graph.py: `GraphPlan`, a whole model as one recorded device program (siblings.py: the
  pipelines other input shapes take, made with it); plan_context.py:
  `PlanContext`, what handlers call while a plan is built (its buffers and their reuse)
- node_traces.py: a device node's recorded work replayed by later plans whose inputs at that node
  look the same (a decoder's next past length), and host nodes' results of the last plan;
  step_reuse.py: a plan's steps that read the very values the previous plan's read (of the same
  input names) take that plan's recorded executions as they are
- host_eval.py: nodes that read no input data, resolved on the host per input shape
- handlers.py: the device node handlers of the seeds' operators (EyeLike, Trilu, Identity,
  Dropout) and the `HANDLERS` map, every handlers_*.py / fusion_*.py module's *_HANDLERS tables
  found at import (a new module's table needs no edit here); handlers_integer.py (MatMulIntegerToFloat, DynamicQuantizeMatMul,
  DynamicQuantizeLinear, QLinearMatMul, MatMulInteger); handlers_math.py (element-wise, Cast,
  Gather, DequantizeLinear), handlers_nn.py (LayerNorm, SkipLayerNorm, Softmax, Gelu, MatMul,
  FusedMatMul), handlers_values.py (layout views), handlers_rnn.py (LSTM, GRU, RNN, step by step)
- half_precision.py: `allow_half_precision` (DML_EXECUTION_FLAG_ALLOW_HALF_PRECISION_COMPUTATION):
  float32 MatMul / Gemm / FusedMatMul / Conv in float16, CASTs around them
- fusions.py: node chains run as one dispatch (one declaration per pattern; the chains' own modules
  fusion_*.py) and `Fusions.step`, the device step both executors take; fusion_match.py: where the
  chains are (`find_fusions`, at prepare); product_groups.py: integer and float products sharing one input
- feeds.py: inputs (the input rule, declared types and shapes); ort_compat.py: the IR version and
  opset of sub-models
- backend.py: `Backend`, device strings, model loading
- generation.py: `greedy`, a decoder step model's greedy loop with its key/value cache on the
  device (a static cache: one plan for every step after the prompt)
- run_state.py: `RunState` (`rep.state`), everything a run changes; context.py: `NodeContext`, the
  typed context handlers receive from either executor
"""

from __future__ import annotations

from .backend import Backend, prepare, run_model, run_node, supports_device
from .fallback import CpuSegment as CpuSegment
from .quantize import dynamic_quantize_uint8
from .rep import BackendRep
from .values import CPU as CPU
from .values import MS_DOMAIN as MS_DOMAIN
from .values import VULKAN as VULKAN
from .values import DeviceValue, FallbackError, NodePlacement, RunStats
from .values import FallbackNeeded as FallbackNeeded

__all__ = ["Backend", "BackendRep", "DeviceValue", "FallbackError", "NodePlacement", "RunStats", "dynamic_quantize_uint8",
           "prepare", "run_model", "run_node", "supports_device"]
