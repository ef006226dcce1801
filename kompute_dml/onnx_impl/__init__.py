"""The ONNX backend's implementation, one concern per module; the public entry point is
`kompute_dml.onnx_backend` (its docstring describes how a model is run).

- values.py: constants, `DeviceValue`, `NodePlacement`, `RunStats`, `FallbackNeeded`
- graph.py: graph helpers (the names a node reads, attributes, types of runtime values)
- fallback.py: `CpuSegment`, the CPU fallback runner (onnxruntime, then onnx.reference)
- quantize.py: `dynamic_quantize_uint8` (the host quantization of empty tensors)
- analysis.py, transfers.py: `BackendRep`'s static analysis and host/device value methods
- rep.py: `BackendRep` (placement, partition, the node-by-node run loop, whole-graph plans per
  input signature)
- device_graph.py: `GraphPlan`, a whole model as one recorded device program; plan_context.py:
  `PlanContext`, what handlers call while a plan is built (its buffers and their reuse)
- host_eval.py: nodes that read no input data, resolved on the host per input shape
- handlers.py: the device node handlers of the seeds' operators (EyeLike, Trilu, Identity,
  MatMulIntegerToFloat, DynamicQuantizeMatMul, DynamicQuantizeLinear) and the `HANDLERS` map;
  handlers_math.py (element-wise, Cast, Gather, DequantizeLinear), handlers_nn.py (LayerNorm,
  SkipLayerNorm, Softmax, Gelu, MatMul, FusedMatMul), handlers_values.py (layout views)
- backend.py: `Backend`, device strings, model loading
"""
