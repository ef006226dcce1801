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
| DynamicQuantizeLinear | DYNAMIC_QUANTIZE_LINEAR (uint8) | `kdml.dynamic_quantize_linear` |
| com.microsoft DynamicQuantizeMatMul | DYNAMIC_QUANTIZE_LINEAR (uint8) of A + MATRIX_MULTIPLY_INTEGER_TO_FLOAT | both |

Every other node (and a mapped node whose types, rank or feature level the device
operator cannot take) runs on the CPU: the graph is cut into maximal sub-graphs of
consecutive fallback nodes, each run by an onnxruntime CPU session (the first choice)
or by `onnx.reference.ReferenceEvaluator` (when onnxruntime refuses the sub-graph: reported in
`rep.placement` and every run's `last_run.events`; with fallback="onnxruntime", `FallbackError`
instead). Sub-models are written with the IR version and opset onnxruntime loads
(onnx_impl/ort_compat.py).
Values produced on the device stay there (`kdml.Tensor`) while only device nodes read
them; a value is downloaded once, when a fallback sub-graph or a graph output needs it.
"""

from __future__ import annotations

from .onnx_impl.backend import Backend, prepare, run_model, run_node, supports_device
from .onnx_impl.fallback import CpuSegment as CpuSegment
from .onnx_impl.quantize import dynamic_quantize_uint8
from .onnx_impl.rep import BackendRep
from .onnx_impl.values import CPU as CPU
from .onnx_impl.values import MS_DOMAIN as MS_DOMAIN
from .onnx_impl.values import VULKAN as VULKAN
from .onnx_impl.values import DeviceValue, FallbackError, NodePlacement, RunStats
from .onnx_impl.values import FallbackNeeded as FallbackNeeded

__all__ = ["Backend", "BackendRep", "DeviceValue", "FallbackError", "NodePlacement", "RunStats", "dynamic_quantize_uint8",
           "prepare", "run_model", "run_node", "supports_device"]
