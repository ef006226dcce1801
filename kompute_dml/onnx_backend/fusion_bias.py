"""A product and its bias in one GEMM dispatch (fusions.py's patterns): MatMul(a, w) -> Add(., bias)
as torch.onnx.export writes every Linear layer of rank-3 activations (BERT, ViT, Whisper, Llama's
biases where it has them), on DML_GEMM with the bias as C (beta 1) broadcast to the product:

- the bias is a constant (an initializer that is no graph input: never a computed mask, so an
  attention's scores + mask stay the attention pattern's) of the product's type whose dimensions
  before the last are all 1, and the sum has the product's shape (checked at run: otherwise the
  two nodes run one by one);
- float32 or float16; with allow_half_precision the nodes run unfused (their float16 product path).

GEMM adds C to the float32 accumulator once, as the unfused Add adds it to the rounded product, so
float32 results are the unfused bits wherever the product's own summation order is the same
(`tests/test_fusion_bias.py` compares them); a float16 product is rounded once instead of twice.

MatMul -> Add(bias) -> Mul(., c), Whisper's query projection times head_size^-1/2 (c = 1/8 at 64):
the same GEMM with Alpha = Beta = c, where c is a constant of one float element that is a power of
two with a normal reciprocal (graph.exact_reciprocal): c S and c bias are exact, so the one
rounding of c S + c bias is c times the rounding of S + bias, the unfused bits (but where the
scaled result is subnormal or overflows, which no encoder's projection reaches). Other scales
leave the Mul to run by itself after the fused MatMul -> Add."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

import kompute_dml as kdml
from kompute_dml.functional.gemm import planned_product
from kompute_dml.ops.gemm import keeps_speed_with_activation

from . import product_groups
from .graph import constant_float, exact_reciprocal, float_product, other_input
from .half_precision import use_half
from .handlers_values import as_device, gemm_foldable
from .values import _FLOAT_OUT, DeviceValue, FallbackNeeded, RunStats, _value_dtype, _value_shape

if TYPE_CHECKING:
    from .context import NodeContext
    from .rep import BackendRep


def check_matmul_bias(rep: BackendRep, nodes: list[onnx.NodeProto]) -> str:
    """Why the chain is not a product and its bias ("" where it is)."""
    mm = nodes[0]
    why = float_product(rep, mm)
    if why:
        return why
    bias = other_input(nodes[1], mm.output[0])
    if bias not in rep.constants or bias in rep.input_names:
        return f"Add's operand {bias!r} is not a constant"
    c = rep.constant_host(bias)
    if c.dtype not in _FLOAT_OUT or c.ndim == 0 or any(s != 1 for s in c.shape[:-1]):
        return f"a bias of {c.dtype} {c.shape} (not along the last axis)"
    return ""


def check_matmul_bias_scale(rep: BackendRep, nodes: list[onnx.NodeProto]) -> str:
    """Why the chain is not a product, its bias and an exact scale ("" where it is)."""
    why = check_matmul_bias(rep, nodes[:2])
    if why:
        return why
    name = other_input(nodes[2], nodes[1].output[0])
    c = constant_float(rep, name)
    if c is None or rep.constant_host(name).dtype not in _FLOAT_OUT:
        return f"Mul's operand {name!r} is not a constant float32 / float16 of one element"
    if exact_reciprocal(c) is None:
        return f"a scale of {c!r} (no power of two with a normal reciprocal: the fused rounding would differ)"
    return ""


def run_matmul_bias_scale(ctx: NodeContext, nodes: list[onnx.NodeProto], lookup: Callable[[str], Any],
                          stats: RunStats) -> list[Any]:
    c_v = lookup(other_input(nodes[2], nodes[1].output[0]))
    if _value_dtype(c_v) not in _FLOAT_OUT or len(_value_shape(c_v)) > len(_value_shape(lookup(nodes[0].input[0]))):
        raise FallbackNeeded(f"a scale of {_value_dtype(c_v)} {_value_shape(c_v)}")
    c = float(np.asarray(ctx.host(c_v, stats)).reshape(-1)[0])
    return run_matmul_bias(ctx, nodes[:2], lookup, stats, scale=c, member=nodes[2])


class SlowerFused(FallbackNeeded):
    """The product's kernel is slower with the fused activation than the two dispatches (keeps_speed_with_activation)."""


def run_matmul_bias(ctx: NodeContext, nodes: list[onnx.NodeProto], lookup: Callable[[str], Any],
                    stats: RunStats, scale: float = 1.0, member: onnx.NodeProto | None = None,
                    activation: Any = None) -> list[Any]:
    """The GEMM (`scale`: Alpha = Beta; `activation`: its FusedActivation, fusion_bias_gelu.py, only where
    the product's kernel keeps its speed with it: FallbackNeeded elsewhere, the pieces run)."""
    mm = nodes[0]
    a_v, b_v = lookup(mm.input[0]), lookup(mm.input[1])
    bias_name = other_input(nodes[1], mm.output[0])
    c_v = lookup(bias_name)
    dt = _value_dtype(a_v)
    if dt not in _FLOAT_OUT or _value_dtype(b_v) != dt or _value_dtype(c_v) != dt or use_half(ctx, dt):
        raise FallbackNeeded(f"operands of {dt}, {_value_dtype(b_v)}, {_value_dtype(c_v)} (or half precision)")
    sa, sb, sc = _value_shape(a_v), _value_shape(b_v), _value_shape(c_v)
    if len(sa) < 2 or len(sb) < 2 or 0 in sa or 0 in sb or sa[-1] != sb[-2]:
        raise FallbackNeeded(f"a product of {sa} and {sb}")
    shape = (*np.broadcast_shapes(sa[:-2], sb[:-2]), sa[-2], sb[-1])
    if tuple(np.broadcast_shapes(shape, sc)) != shape:
        raise FallbackNeeded(f"a bias {sc} that broadcasts the product {shape}")
    if activation is not None:
        # the product the kernel runs: a batch over a shared B is one product of batch x M rows (functional gemm)
        m, n, k, nmat = planned_product(*(_desc(v, sh, dt) for v, sh in ((a_v, sa), (b_v, sb), (c_v, sc))))
        if not keeps_speed_with_activation(ctx.device, dt == np.float16, m, n, k, nmat):
            raise SlowerFused("the product's kernel is slower with a fused activation (DevicePolicy.gemm_act_blocks)")
    # the projections on one input as one GEMM (a scaled member's weights and bias carry its scale)
    member = member or nodes[1]
    group = product_groups.group_of(ctx, member) if activation is None else None
    if group is not None and isinstance(a_v, DeviceValue):
        return [product_groups.run(ctx, group, member, a_v, lambda w, wn, bias, bn: product_groups.grouped_gemm(
            ctx, a_v, (w, wn), (bias, bn), stats))]
    a, b = gemm_foldable(ctx, as_device(ctx, a_v, stats, mm.input[0]), as_device(ctx, b_v, stats, mm.input[1]), stats)
    y = kdml.gemm(a.tensor, b.tensor, as_device(ctx, c_v, stats, bias_name).tensor, alpha=scale, beta=scale,
                  fused_activation=activation, out=ctx.out_tensor(shape, dt), device=ctx.device)
    return [DeviceValue(y, shape, dt)]


def _desc(v: Any, shape: tuple[int, ...], dt: np.dtype) -> kdml.TensorDesc:
    """A product operand's descriptor: a device value's own, a host value's packed (as its upload)."""
    if isinstance(v, DeviceValue):
        return v.tensor.desc
    return kdml.TensorDesc(kdml.DataType.from_numpy(dt), tuple(int(x) for x in shape) or (1,))


def matmul_bias_patterns(pattern: Callable[..., Any]) -> list[Any]:
    """The product on either side of the Add, then (first) the sum on either side of a Mul."""
    return [*(pattern("MatMul+Add+Mul", ("MatMul", "Add", "Mul"), ((0, 1, k), (1, 2, j)), "GEMM", check_matmul_bias_scale,
                      run_matmul_bias_scale) for k in (0, 1) for j in (0, 1)),
            *(pattern("MatMul+Add", ("MatMul", "Add"), ((0, 1, k),), "GEMM", check_matmul_bias, run_matmul_bias)
              for k in (0, 1))]
