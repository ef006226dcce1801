"""`kompute-dml run --compare-onnxruntime`: the outputs against onnxruntime's CPU provider, with
a verdict against a stated tolerance, and the reason where onnxruntime is the inexact side.

Floating outputs agree where every element satisfies |ours - ort| <= ATOL + RTOL * |ort| (NaN
where both are NaN); integer and bool outputs must be equal. onnxruntime's CPU uint8 x int8
integer product saturates 16-bit pair sums on processors without VNNI (AVX2's vpmaddubsw), so a
quantized model may differ there by more than the tolerance while kompute_dml's products are exact
(docs/onnx.md "Exactness"): the probe below says which case this machine is.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

RTOL, ATOL = 1e-3, 1e-5
QUANTIZED_PRODUCTS = frozenset({"MatMulInteger", "MatMulIntegerToFloat", "DynamicQuantizeMatMul", "QLinearMatMul",
                                "ConvInteger", "QLinearConv", "QAttention"})


@functools.cache
def ort_u8s8_exact() -> bool:
    """Whether onnxruntime's CPU MatMulInteger gives 255 * 127 * 2 for uint8 [255, 255] x int8
    [127, 127] (AVX2 without VNNI saturates the pair sum at 32767)."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    b = numpy_helper.from_array(np.array([[127], [127]], np.int8), "b")
    g = helper.make_graph([helper.make_node("MatMulInteger", ["a", "b"], ["y"])], "probe",
                          [helper.make_tensor_value_info("a", TensorProto.UINT8, [1, 2])],
                          [helper.make_tensor_value_info("y", TensorProto.INT32, [1, 1])], initializer=[b])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=7)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (y,) = sess.run(None, {"a": np.array([[255, 255]], np.uint8)})
    return int(y.reshape(-1)[0]) == 255 * 127 * 2


def compare_lines(names: Sequence[str], ours: Sequence[Any], ref: Sequence[Any], op_types: set[str],
                  half: bool = False) -> list[str]:
    """One line per output (max absolute and relative difference, verdict), then the reason where
    a difference beyond the tolerance may be onnxruntime's; `half` (--allow-half-precision): the
    smallest per-row cosine similarity of each float output too, the measure that flag is held to."""
    lines, failed = [], False
    cosines: list[str] = []
    for name, a, b in zip(names, ours, ref):
        if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)):
            lines.append(f"  {name}: not a tensor on both sides: not compared")
            continue
        if a.shape != b.shape or a.dtype != b.dtype:
            lines.append(f"  {name}: DIFFERS: ours {a.dtype} {list(a.shape)}, onnxruntime {b.dtype} {list(b.shape)}")
            failed = True
            continue
        if a.dtype.kind not in "fc":
            same = bool(np.array_equal(a, b))
            failed |= not same
            lines.append(f"  {name}: {'equal' if same else 'DIFFERS'} ({a.dtype}, compared exactly; "
                         f"{int(np.count_nonzero(a != b))} of {a.size} elements differ)")
            continue
        x, y = a.astype(np.float64), b.astype(np.float64)
        both_nan = np.isnan(x) & np.isnan(y)
        d = np.where(both_nan, 0.0, np.abs(x - y))
        rel = np.where(both_nan, 0.0, d / np.maximum(np.abs(y), np.finfo(np.float64).tiny))
        ok = bool(np.all(d <= ATOL + RTOL * np.abs(np.where(both_nan, 0.0, y))))
        failed |= not ok
        abs_max = float(np.nanmax(d)) if d.size else 0.0
        rel_max = float(np.nanmax(rel)) if rel.size else 0.0
        lines.append(f"  {name}: max |kompute_dml - onnxruntime| = {abs_max:.3g}, max relative {rel_max:.3g}: "
                     f"{'agree' if ok else 'DIFFER'} (tolerance |d| <= {ATOL:g} + {RTOL:g} |onnxruntime|)")
        if half and x.ndim:
            xr, yr = x.reshape(-1, x.shape[-1]), y.reshape(-1, y.shape[-1])
            with np.errstate(invalid="ignore", divide="ignore"):
                cos = (xr * yr).sum(1) / (np.linalg.norm(xr, axis=1) * np.linalg.norm(yr, axis=1))
            cosines.append(f"{name} {float(np.nanmin(cos)) if cos.size else 1.0:.6f}")
    if half and cosines:
        lines.append("  note: --allow-half-precision rounds the products' operands and results to float16 (11 "
                     "significant bits), so float32's tolerance is not expected to hold; smallest per-row cosine "
                     f"similarity: {', '.join(cosines)} (docs/onnx.md, 'Half precision')")
    quantized = sorted(op_types & QUANTIZED_PRODUCTS)
    if failed and quantized and not ort_u8s8_exact():
        lines.append(f"  note: the model has {', '.join(quantized)}; onnxruntime's uint8 x int8 product is inexact on "
                     "this processor (no VNNI: pair sums saturate), kompute_dml's is exact: the difference is "
                     "expected to be onnxruntime's (docs/onnx.md, 'Exactness')")
    return lines
