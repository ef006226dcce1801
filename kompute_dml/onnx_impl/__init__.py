"""The ONNX backend's implementation, one concern per module; the public entry point is
`kompute_dml.onnx_backend` (its docstring describes how a model is run).

- values.py: constants, `DeviceValue`, `NodePlacement`, `RunStats`, `FallbackNeeded`
- graph.py: graph helpers (the names a node reads, attributes, types of runtime values)
- fallback.py: `CpuSegment`, the CPU fallback runner (onnxruntime, then onnx.reference)
- quantize.py: `dynamic_quantize_uint8` (the host quantization of empty tensors)
- analysis.py, transfers.py: `BackendRep`'s static analysis and host/device value methods
- rep.py: `BackendRep` (partition and the run loop)
- handlers.py: the device node handlers (EyeLike, Trilu, Identity, MatMulIntegerToFloat,
  DynamicQuantizeMatMul, DynamicQuantizeLinear)
- backend.py: `Backend`, device strings, model loading
"""
