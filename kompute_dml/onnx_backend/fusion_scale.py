"""A product and its constant scale in one GEMM dispatch (fusions.py's patterns): MatMul(a, b) ->
Mul(., c) (either operand order) or Div(., c), as torch.onnx.export writes an attention's scores
(Whisper's encoder: MatMul(Q, K^T) -> Mul(., 1 / sqrt(sqrt d)) ...) where the attention chain is not
fused or runs unfused (past DevicePolicy.attention_fused_max_flops: Fusion.within), on DML_GEMM
with the scale as Alpha:

- c is a constant (an initializer that is no graph input, or a Constant folded at prepare) of one
  float element, finite and non-zero; a Div only where 1 / c is exact: c a power of two whose
  reciprocal is a normal float32 (then S / c and S * (1 / c) are the same IEEE result);
- float32 or float16, the product's operands as the MatMul handler takes them (ranks 2-4, batch
  dimensions that broadcast, strided views such as K^T); the scale of a rank above the product's
  (a broadcast up), or allow_half_precision, run the two nodes one by one (FallbackNeeded).

GEMM multiplies the float32 accumulator S by alpha once in a `precise` epilogue, as the unfused Mul
multiplies the product it rounded (S itself in float32) by c: float32 results are the unfused bits
(`tests/test_fusion_scale.py`); a float16 product is rounded once instead of twice. (A device whose
float controls flush float32 subnormals may differ from the unfused Div, which is correctly rounded
in integer code, where S / c is subnormal.)"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

from .graph import constant_float, exact_reciprocal, float_product, other_input
from .half_precision import use_half
from .handlers_nn import _matmul
from .values import _FLOAT_OUT, FallbackNeeded, RunStats, _value_dtype, _value_shape

if TYPE_CHECKING:
    from .context import NodeContext
    from .rep import BackendRep

def check_matmul_scale(rep: BackendRep, nodes: list[onnx.NodeProto]) -> str:
    """Why the chain is not a product and its exact scale ("" where it is)."""
    mm, op = nodes
    why = float_product(rep, mm)
    if why:
        return why
    name = other_input(op, mm.output[0])
    c = constant_float(rep, name)
    if c is None or rep.constant_host(name).dtype not in _FLOAT_OUT:
        return f"{op.op_type}'s operand {name!r} is not a constant float32 / float16 of one element"
    if not math.isfinite(c) or c == 0.0:
        return f"a scale of {c}"
    if op.op_type == "Div" and exact_reciprocal(c) is None:
        return f"Div by {c!r}: 1 / c is not exact (c is no power of two with a normal float32 reciprocal)"
    return ""


def run_matmul_scale(ctx: NodeContext, nodes: list[onnx.NodeProto], lookup: Callable[[str], Any],
                     stats: RunStats) -> list[Any]:
    mm, op = nodes
    name = other_input(op, mm.output[0])
    ins, c_v = [lookup(mm.input[0]), lookup(mm.input[1])], lookup(name)
    dt = _value_dtype(ins[0])
    if dt not in _FLOAT_OUT or _value_dtype(ins[1]) != dt or _value_dtype(c_v) != dt or use_half(ctx, dt):
        raise FallbackNeeded(f"operands of {dt}, {_value_dtype(ins[1])}, {_value_dtype(c_v)} (or half precision)")
    sa, sb, sc = _value_shape(ins[0]), _value_shape(ins[1]), _value_shape(c_v)
    if len(sa) < 2 or len(sb) < 2 or len(sc) > max(len(sa), len(sb)):
        raise FallbackNeeded(f"a product of {sa} and {sb} scaled by {sc}")
    c = float(np.asarray(ctx.host(c_v, stats)).reshape(-1)[0])
    alpha = c if op.op_type == "Mul" else exact_reciprocal(c)
    if alpha is None:
        raise FallbackNeeded(f"Div by {c!r}: 1 / c is not exact")
    return _matmul(ctx, mm, ins, stats, False, False, alpha)


def matmul_scale_patterns(pattern: Callable[..., Any]) -> list[Any]:
    """The product on either side of the Mul; the dividend of the Div."""
    return [*(pattern("MatMul+Mul", ("MatMul", "Mul"), ((0, 1, k),), "GEMM", check_matmul_scale, run_matmul_scale)
              for k in (0, 1)),
            pattern("MatMul+Div", ("MatMul", "Div"), ((0, 1, 0),), "GEMM", check_matmul_scale, run_matmul_scale)]
