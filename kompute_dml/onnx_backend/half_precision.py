"""DirectML's DML_EXECUTION_FLAG_ALLOW_HALF_PRECISION_COMPUTATION in the ONNX backend
(`Backend.prepare(..., allow_half_precision=True)`; off by default).

With it, a float32 MatMul, Gemm, com.microsoft FusedMatMul or Conv computes in float16: its
constant operands (weights, biases) are converted to float16 once, when they are uploaded
(`NodeContext.constant_as`), a value computed on the device is cast to float16 by CAST where it
enters (once per value: every product that reads it binds the same cast), the product runs on
FLOAT16 GEMM / CONVOLUTION, which accumulate in float32 (the tensor cores' GEMM where the device
has cooperative matrices: DevicePolicy.gemm_family_for), and its float16 result is cast back to
float32 by CAST. Every other node computes in float32 as before, but for attention on GPUs with
cooperative matrices (half_weights: the tensor-core kernel's float16 weights and, for float32,
its float16 loads). Float16 holds 11 significant bits and magnitudes up to
65504: each operand and the result are rounded to that (a larger one becomes infinite), so a
product's relative error is about 2^-11 per operand instead of float32's 2^-24 (docs/onnx.md,
"Half precision", measures it on the model families).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

import kompute_dml as kdml

from .values import DeviceValue, RunStats, _value_shape

if TYPE_CHECKING:
    from .context import NodeContext

F16 = np.dtype(np.float16)


def allow_half(ctx: NodeContext) -> bool:
    """The prepared model's allow_half_precision flag (False where it has none)."""
    return bool(getattr(ctx.prepared, "allow_half_precision", False))


def half_weights(ctx: NodeContext, graph_rounds: bool = False) -> bool:
    """Whether a float16 attention may keep its softmax weights as float16 (MULTIHEAD_ATTENTION's
    allow_half_precision: docs/attention.md): the flag is on, or the graph itself rounds them to
    float16 (`graph_rounds`: a float16 Softmax before its MatMul, ONNX Attention's softmax_precision
    of the inputs' type), so that the weights' one rounding is the graph's own."""
    return graph_rounds or allow_half(ctx)


def use_half(ctx: NodeContext, dt: np.dtype) -> bool:
    """Does a product of element type `dt` run in float16 (the flag is on and dt is float32)."""
    return dt == np.float32 and ctx.prepared.allow_half_precision


def half_operand(ctx: NodeContext, v: Any, name: str | None, stats: RunStats) -> DeviceValue:
    """A float32 operand as a float16 DeviceValue of the same shape: a constant converted once per
    model, a device value cast by CAST once per value (shared through the run's memo and held as
    long as the value), another host value converted on the host and uploaded."""
    if isinstance(v, DeviceValue):
        key = ("half", id(v))
        hit = ctx.memo.get(key)
        if hit is not None and hit[0] is v:
            return hit[1]
        t = v.tensor
        out = ctx.out_tensor(t.desc.sizes, F16)
        half = DeviceValue(kdml.cast(t, kdml.DataType.FLOAT16, out=out, device=ctx.device), v.shape, F16)
        ctx.memo[key] = (v, half)
        ctx.attach(v, half)  # a whole-graph plan: the cast lives as long as the value
        return half
    if name and ctx.is_constant(name):
        return DeviceValue(ctx.constant_as(name, F16, stats), _value_shape(v), F16)
    arr = np.asarray(v).astype(F16)
    return DeviceValue(ctx.to_device(arr, stats, None), arr.shape, F16)


def as_float32(ctx: NodeContext, y: kdml.Tensor, shape: tuple[int, ...]) -> DeviceValue:
    """A float16 product's result cast back to float32 (exact: every float16 is a float32)."""
    out = ctx.out_tensor(shape, np.float32)
    return DeviceValue(kdml.cast(y, kdml.DataType.FLOAT32, out=out, device=ctx.device), shape, np.dtype(np.float32))
