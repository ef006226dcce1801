"""onnxruntime CPU peers for `kompute-dml bench` (numpy peers are one-line lambdas in cases.py)."""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np


class OrtPeer:
    """One single-node model run through IOBinding into pre-allocated outputs; `constants`
    become initializers (as weights are in a model, so onnxruntime may pre-pack them)."""

    def __init__(self, node: Any, inputs: dict[str, np.ndarray], out_name: str, out_shape: tuple[int, ...],
                 out_dtype: Any, opset: int = 21, ms_domain: bool = False,
                 constants: dict[str, np.ndarray] | None = None) -> None:
        import onnxruntime as ort
        from onnx import helper, numpy_helper

        def vi(name: str, arr_dtype: Any, shape: tuple[int, ...]) -> Any:
            return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(np.dtype(arr_dtype)), list(shape))

        graph = helper.make_graph(
            [node], "bench",
            [vi(k, v.dtype, v.shape) for k, v in inputs.items()],
            [vi(out_name, out_dtype, out_shape)],
            initializer=[numpy_helper.from_array(v, k) for k, v in (constants or {}).items()],
        )
        opsets = [helper.make_opsetid("", opset)]
        if ms_domain:
            opsets.append(helper.make_opsetid("com.microsoft", 1))
        model = helper.make_model(graph, opset_imports=opsets, ir_version=10)
        so = ort.SessionOptions()
        so.log_severity_level = 3
        self.sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        self.binding = self.sess.io_binding()
        self._keep = []
        for k, v in inputs.items():
            ov = ort.OrtValue.ortvalue_from_numpy(v)
            self._keep.append(ov)
            self.binding.bind_ortvalue_input(k, ov)
        self.out = np.empty(out_shape, dtype=out_dtype)
        ovo = ort.OrtValue.ortvalue_from_numpy(self.out)
        self._keep.append(ovo)
        self.binding.bind_ortvalue_output(out_name, ovo)

    def __call__(self) -> None:
        self.sess.run_with_iobinding(self.binding)


def ort_available() -> bool:
    try:
        importlib.import_module("onnxruntime")
        importlib.import_module("onnx")
        return True
    except ImportError:
        return False


def ort_node(op: str, inputs: dict[str, np.ndarray], shape: tuple[int, ...], dtype: Any, **attrs: Any) -> OrtPeer:
    from onnx import helper

    return OrtPeer(helper.make_node(op, list(inputs), ["y"], **attrs), inputs, "y", shape, dtype)


def ort_mmitf(a: np.ndarray, b: np.ndarray, a_scale: float, b_scale: float) -> OrtPeer:
    from onnx import helper

    m, n = a.shape[0], b.shape[1]
    node = helper.make_node("MatMulIntegerToFloat", ["A", "B", "a_scale", "b_scale"], ["Y"], domain="com.microsoft")
    # B and the scales are initializers, as a quantized model's weights are: onnxruntime
    # pre-packs B once (as a graph input it would re-pack B on every call, about 2x slower).
    consts = {"B": b, "a_scale": np.array([a_scale], np.float32), "b_scale": np.array([b_scale], np.float32)}
    return OrtPeer(node, {"A": a}, "Y", (m, n), np.float32, ms_domain=True, constants=consts)
