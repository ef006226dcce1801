"""onnxruntime's `quantize_dynamic` output as one integer product: MatMulInteger -> Cast(float)
-> Mul(scale) runs as MATRIX_MULTIPLY_INTEGER_TO_FLOAT.

quantize_dynamic writes each float MatMul as DynamicQuantizeLinear(x) -> MatMulInteger(xq, W,
x_zp, [W_zp]) -> Cast(to FLOAT) -> Mul(., x_scale * W_scale), the scale product being its own Mul
node; onnxruntime fuses that into MatMulIntegerToFloat only at some optimization levels and
versions. The chain is one product: the exact int32 sums, converted to float32 and multiplied by
the scale, the same two roundings as Cast then Mul (the scale goes in as one of the operator's two
scales, the other 1.0, which is exact). A run the kernel cannot take (fusions.Unfused) runs the
three nodes one by one, MatMulInteger as a 1 x 1 CONVOLUTION_INTEGER (handlers_conv_integer.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx
from onnx import TensorProto

from .graph import _attr
from .handlers_integer import _mm_integer_to_float
from .values import RunStats, _value_shape

if TYPE_CHECKING:
    from .context import NodeContext
    from .rep import BackendRep

_ONE = np.float32(1.0)


def check_integer_product(rep: BackendRep, nodes: list[onnx.NodeProto]) -> str:
    mmi, cast, _mul = nodes
    if int(_attr(cast, "to", 0)) != TensorProto.FLOAT:
        return "the Cast is not to float32"
    types = [rep._elem_dtype(n) for n in mmi.input[:2]]
    if any(t is not None and t not in (np.int8, np.uint8) for t in types):
        return f"MatMulInteger's operands are {types}, not 8-bit"
    return ""


def run_integer_product(ctx: NodeContext, nodes: list[onnx.NodeProto], lookup: Callable[[str], Any],
                        stats: RunStats) -> list[Any]:
    mmi, _cast, mul = nodes

    def arg(i: int) -> tuple[Any, str | None]:
        name = mmi.input[i] if i < len(mmi.input) and mmi.input[i] else None
        return (lookup(name), name) if name else (None, None)

    (a, an), (b, bn), (a_zp, a_zpn), (b_zp, b_zpn) = (arg(i) for i in range(4))
    scale_name = mul.input[1]
    scale = lookup(scale_name)
    # a scalar scale is A's (the operator's per-tensor scale), one per column B's
    if math.prod(_value_shape(scale)) == 1:
        a_s, a_sn, b_s, b_sn = scale, scale_name, _ONE, None
    else:
        a_s, a_sn, b_s, b_sn = _ONE, None, scale, scale_name
    return [_mm_integer_to_float(ctx, mmi, a, an, b, bn or "", a_s, a_sn, b_s, b_sn or "", a_zp, a_zpn,
                                 b_zp, b_zpn, None, None, stats)]

