"""Device handlers of the integer products: com.microsoft MatMulIntegerToFloat, DynamicQuantizeMatMul
and DynamicQuantizeLinear, ONNX QLinearMatMul (MATRIX_MULTIPLY_INTEGER_TO_FLOAT, requantized by
ELEMENT_WISE_QUANTIZE_LINEAR) and MatMulInteger's Cast -> Mul chain (fusion_quant.py; MatMulInteger
alone: handlers_conv_integer.py), with the shape rules they share (numpy-matmul broadcasting, 1-D operands)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

import kompute_dml as kdml

from . import product_groups
from .quantize import dynamic_quantize_uint8
from .values import _FLOAT_OUT, _QUANT_TYPES, DeviceValue, FallbackNeeded, RunStats, _value_dtype, _value_shape

if TYPE_CHECKING:
    from .context import NodeContext


def _reshaped(ctx: NodeContext, v: Any, shape: tuple[int, ...], stats: RunStats) -> Any:
    """A value with another shape of the same size: a host reshape, or a new packed view of
    the same device buffer."""
    if isinstance(v, DeviceValue):
        t = v.tensor
        if t.desc.strides is not None:
            raise FallbackNeeded("strided device tensor")
        desc = kdml.TensorDesc(t.desc.data_type, shape if shape else (1,))
        return DeviceValue(kdml.Tensor(t.buffer, desc, t.offset), shape, v.dtype)
    return np.asarray(ctx.host(v, stats)).reshape(shape)


def _matmul_out_shape(a_shape: tuple[int, ...], b_shape: tuple[int, ...]) -> tuple[int, ...]:
    batch = np.broadcast_shapes(a_shape[:-2], b_shape[:-2])
    return (*batch, a_shape[-2], b_shape[-1])


def _mm_integer_to_float(ctx: NodeContext, node: onnx.NodeProto, a: Any, a_name: str | None, b: Any, b_name: str | None,
                         a_scale: Any, a_scale_name: str | None, b_scale: Any, b_scale_name: str,
                         a_zp: Any, a_zp_name: str | None, b_zp: Any, b_zp_name: str | None,
                         bias: Any, bias_name: str | None, stats: RunStats) -> Any:
    a_shape, b_shape = _value_shape(a), _value_shape(b)
    for what, v in (("A", a), ("B", b)):
        if _value_dtype(v) not in _QUANT_TYPES:
            raise FallbackNeeded(f"{what} type {_value_dtype(v)} is not int8/uint8")
        if len(_value_shape(v)) < 1:
            raise FallbackNeeded(f"{what} is a scalar")
    out_dt = _value_dtype(a_scale)
    if out_dt not in _FLOAT_OUT:
        raise FallbackNeeded(f"scale type {out_dt} is not float32/float16")
    squeeze = []
    if len(a_shape) == 1:
        a_shape = (1, a_shape[0])
        a = _reshaped(ctx, a, a_shape, stats)
        a_name = None
        squeeze.append(-2)
    if len(b_shape) == 1:
        b_shape = (b_shape[0], 1)
        b = _reshaped(ctx, b, b_shape, stats)
        b_name = None
        squeeze.append(-1)
    if a_shape[-1] != b_shape[-2]:
        raise ValueError(f"{node.op_type} {node.name!r}: A {a_shape} and B {b_shape} do not multiply")
    try:
        out_shape = _matmul_out_shape(a_shape, b_shape)
    except ValueError as e:
        raise ValueError(f"{node.op_type} {node.name!r}: batch shapes do not broadcast: {e}") from None
    n = b_shape[-1]
    a_batch, b_batch = a_shape[:-2], b_shape[:-2]
    if len(out_shape) > 4:  # the operator takes at most two batch dimensions: fold them into one
        if a_batch and b_batch and a_batch != b_batch:
            # Batch dimensions that broadcast against each other do not fold: broadcast both on
            # the host. (Not a CPU fallback: onnxruntime's u8 x s8 product is exact only on
            # processors with VNNI; see docs/onnx.md.)
            batch = out_shape[:-2]
            a = np.ascontiguousarray(np.broadcast_to(ctx.host(a, stats), (*batch, *a_shape[-2:])))
            b = np.ascontiguousarray(np.broadcast_to(ctx.host(b, stats), (*batch, *b_shape[-2:])))
            a_shape, b_shape, a_batch, b_batch, a_name, b_name = a.shape, b.shape, batch, batch, None, None
        if a_batch:
            a = _reshaped(ctx, a, (math.prod(a_batch), *a_shape[-2:]), stats)
            a_name = None
        if b_batch:
            b = _reshaped(ctx, b, (math.prod(b_batch), *b_shape[-2:]), stats)
            b_name = None
        folded = out_shape
        out_shape = (math.prod(out_shape[:-2]), *out_shape[-2:])
    elif a_batch and not b_batch and (not isinstance(a, DeviceValue) or a.tensor.desc.strides is None):
        # a weight shared by every matrix: one product of batch x M rows (a Linear over ConvNeXt's
        # [batch, H, W, C] is 7-row matrices otherwise); the same integer sums
        a = _reshaped(ctx, a, (math.prod(a_shape[:-1]), a_shape[-1]), stats)
        a_name = None
        folded, out_shape = out_shape, (math.prod(out_shape[:-1]), n)
    else:
        folded = None
    if math.prod(_value_shape(a_scale)) != 1:
        raise FallbackNeeded("a_scale is not a scalar")
    if a_zp is not None and math.prod(_value_shape(a_zp)) != 1:
        raise FallbackNeeded("a_zero_point is not a scalar")
    for what, v in (("b_scale", b_scale), ("b_zero_point", b_zp), ("bias", bias)):
        if v is None:
            continue
        vs = _value_shape(v)
        allowed = (n,) if what == "bias" else (1, n)
        if len(vs) == 1 and vs[0] not in allowed:
            # No engine takes this: ONNX wants a scalar or one value per column of B.
            raise ValueError(f"{node.op_type} {node.name!r}: {what} has {vs[0]} elements; B has {n} columns")
        if what == "bias" and vs != (n,):
            raise FallbackNeeded(f"bias of shape {vs} is not ({n},)")
        if what != "bias" and math.prod(vs) != 1 and vs != (n,):
            raise FallbackNeeded(f"{what} of shape {vs} is neither a scalar nor ({n},)")
    if a_zp is not None and _value_dtype(a_zp) != _value_dtype(a):
        raise FallbackNeeded("a_zero_point type differs from A")
    if b_zp is not None and _value_dtype(b_zp) != _value_dtype(b):
        raise FallbackNeeded("b_zero_point type differs from B")

    def final(v: Any) -> Any:
        full = folded or out_shape
        shape = tuple(s for i, s in enumerate(full) if i - len(full) not in squeeze)
        return v if shape == _value_shape(v) else _reshaped(ctx, v, shape, stats)

    if math.prod(out_shape) == 0:
        return final(np.zeros(out_shape, dtype=out_dt))
    if a_shape[-1] == 0:  # K = 0: the sum is empty, only the bias remains
        base = np.zeros(out_shape, dtype=out_dt)
        if bias is not None:
            base = base + np.asarray(ctx.host(bias, stats), dtype=out_dt)
        return final(base.astype(out_dt))

    # Device values and constants are bound as they are; the other host values (typically
    # A and its scale and zero point, fresh from a CPU sub-graph) go up in one transfer.
    args = [(a, a_name), (b, b_name), (a_scale, a_scale_name), (b_scale, b_scale_name), (a_zp, a_zp_name),
            (b_zp, b_zp_name), (bias, bias_name)]
    bound: list[Any] = [None] * len(args)
    pending = []
    for i, (v, name) in enumerate(args):
        if v is None:
            continue
        if i == 1 and name is not None and not isinstance(v, DeviceValue) and ctx.is_constant(name):
            bound[i] = ctx.weight_to_device(name, a_shape[-2], stats)  # the policy's layout
        elif isinstance(v, DeviceValue) or ctx.is_constant(name):
            bound[i] = ctx.to_device(v, stats, name)
        else:
            pending.append(i)
    if pending:
        group = ctx.upload_group([np.asarray(args[i][0]) for i in pending], stats, tuple(args[i][1] for i in pending))
        for i, t in zip(pending, group):
            bound[i] = t
    mmitf = kdml.matmul_integer_to_float  # type: ignore[attr-defined]
    t = mmitf(*bound, out_data_type=kdml.DataType.from_numpy(out_dt), out=ctx.out_tensor(out_shape, out_dt),
              device=ctx.device)
    return final(DeviceValue(t, out_shape, out_dt))


def _h_qlinear_matmul(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    """QLinearMatMul(a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp) with onnxruntime's
    arithmetic: y = saturate(round_half_even(float(S) * m) + y_zp), S the exact integer sum of
    (a - a_zp)(b - b_zp) and m = a_scale * b_scale / y_scale in float32 (per column where b_scale
    is): MATRIX_MULTIPLY_INTEGER_TO_FLOAT with AScale 1 and BScale m, then
    ELEMENT_WISE_QUANTIZE_LINEAR with scale 1 (x / 1 exact) and y_zp."""
    (a, an), (a_s, _), (a_zp, a_zpn), (b, bn), (b_s, _), (b_zp, b_zpn), (y_s, _), (y_zp, _) = \
        (_in(ins, node, i) for i in range(8))
    if any(isinstance(v, DeviceValue) for v in (a_s, b_s, y_s)):
        raise FallbackNeeded("QLinearMatMul scales computed on the device")
    f32 = np.float32
    a_s32, y_s32 = (np.asarray(ctx.host(v, stats), f32).reshape(-1) for v in (a_s, y_s))
    b_s32 = np.asarray(ctx.host(b_s, stats), f32)
    if a_s32.size != 1 or y_s32.size != 1:
        raise FallbackNeeded("a_scale or y_scale is not a scalar")
    m = ((a_s32[0] * b_s32) / y_s32[0]).astype(f32)  # float32 at each step, as onnxruntime's
    x = _mm_integer_to_float(ctx, node, a, an, b, bn, np.ones((), f32), None, m, "", a_zp, a_zpn, b_zp, b_zpn,
                             None, None, stats)
    if y_zp is None:
        y_zp = np.zeros((), np.uint8)
    ydt = _value_dtype(y_zp)
    if ydt not in _QUANT_TYPES or math.prod(_value_shape(y_zp)) != 1:
        raise FallbackNeeded("y_zero_point is not an int8 / uint8 scalar")
    shape = _value_shape(x)
    if not isinstance(x, DeviceValue):  # an empty product: on the host
        return [np.clip(np.rint(np.asarray(x, f32)) + np.asarray(ctx.host(y_zp, stats)).astype(f32).reshape(()),
                        *((0, 255) if ydt == np.uint8 else (-128, 127))).astype(ydt)]
    one = ctx.to_device(np.ones((1,) * len(shape), f32), stats)
    zp = ctx.to_device(np.asarray(ctx.host(y_zp, stats)).reshape((1,) * len(shape)), stats, None)
    y = kdml.quantize_linear(x.tensor, one, zp, out=ctx.out_tensor(shape, ydt), device=ctx.device)
    return [DeviceValue(y, shape, ydt)]


def _in(ins: list[Any], node: onnx.NodeProto, i: int) -> tuple[Any, str | None]:
    if i < len(ins) and node.input[i]:
        return ins[i], node.input[i]
    return None, None


def _h_mmitf(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    (a, an), (b, bn), (a_s, a_sn), (b_s, b_sn), (a_zp, a_zpn), (b_zp, b_zpn), (bias, bias_n) = (
        _in(ins, node, i) for i in range(7))
    group = product_groups.group_of(ctx, node)
    if group is not None and isinstance(a, DeviceValue):  # Q, K and V as one product
        return [product_groups.run(ctx, group, node, a, lambda b, bn, bs, bsn, bz, bzn, c, cn: _mm_integer_to_float(
            ctx, node, a, an, b, bn, a_s, a_sn, bs, bsn, a_zp, a_zpn, bz, bzn, c, cn, stats))]
    return [_mm_integer_to_float(ctx, node, a, an, b, bn or "", a_s, a_sn, b_s, b_sn or "", a_zp, a_zpn,
                                 b_zp, b_zpn, bias, bias_n, stats)]


def _quantize(ctx: NodeContext, x: Any, name: str | None, stats: RunStats) -> tuple[Any, Any, Any]:
    """uint8 dynamic quantization of a float32 value with ONNX Runtime's CPU kernel's arithmetic:
    (y, scale, zero point) of ONNX shapes (x's, (), ()). On the device (DYNAMIC_QUANTIZE_LINEAR,
    kdml.dynamic_quantize_linear: nothing read back); an empty x on the host (no dispatch)."""
    if _value_dtype(x) != np.float32:
        raise FallbackNeeded(f"input type {_value_dtype(x)} is not float32")
    shape = _value_shape(x)
    if math.prod(shape) == 0:
        q, scale, zp = dynamic_quantize_uint8(ctx.host(x, stats))
        return q, np.array(scale, np.float32), np.array(zp, np.uint8)
    if len(shape) > 8:
        raise FallbackNeeded(f"rank {len(shape)} exceeds DirectML's 8 dimensions")
    if isinstance(x, DeviceValue) or ctx.is_constant(name):
        xt = ctx.to_device(x, stats, name)
    else:
        xt = ctx.upload_group([np.asarray(x).reshape(shape or (1,))], stats, (name,) if shape else None)[0]
    # the keys x's producer wrote beside it (handlers_nn.keys_for): one dispatch instead of two
    keys = x.keys if isinstance(x, DeviceValue) and xt is x.tensor else None
    y, s, z = kdml.dynamic_quantize_linear(  # type: ignore[attr-defined]
        xt, out=ctx.out_tensor(xt.desc.sizes, np.uint8), scale_out=ctx.out_tensor((), np.float32),
        zero_point_out=ctx.out_tensor((), np.uint8), keys=keys, device=ctx.device)
    return DeviceValue(y, shape, np.uint8), DeviceValue(s, (), np.float32), DeviceValue(z, (), np.uint8)


def _h_dql(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    return list(_quantize(ctx, ins[0], node.input[0], stats))


def _h_dqmm(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    (a, an), (b, bn), (b_s, b_sn), (b_zp, b_zpn), (bias, bias_n) = (_in(ins, node, i) for i in range(5))
    if _value_dtype(a) != np.float32:
        raise FallbackNeeded(f"A type {_value_dtype(a)} is not float32")
    if _value_dtype(b_s) != np.float32:
        raise FallbackNeeded(f"b_scale type {_value_dtype(b_s)} is not float32")
    if _value_dtype(b) not in _QUANT_TYPES:
        raise FallbackNeeded(f"B type {_value_dtype(b)} is not int8/uint8")
    # A quantized with ONNX Runtime's CPU kernel's parameters, on the device where A is not empty;
    # once per value (a transformer's Q, K and V products share their A)
    memo = ctx.memo
    hit = memo.get(id(a)) if isinstance(a, DeviceValue) else None
    if hit is not None and hit[0] is a:
        q, scale, zp = hit[1]
    else:
        q, scale, zp = _quantize(ctx, a, an, stats)
        if isinstance(a, DeviceValue):
            memo[id(a)] = (a, (q, scale, zp))
            ctx.attach(a, q, scale, zp)  # a whole-graph plan: q lives as long as a
    return [_mm_integer_to_float(ctx, node, q, None, b, bn or "", scale, None, b_s, b_sn or "", zp, None, b_zp,
                                 b_zpn, bias, bias_n, stats)]


INTEGER_HANDLERS = {
    "MatMulIntegerToFloat": _h_mmitf,
    "QLinearMatMul": _h_qlinear_matmul,
    "DynamicQuantizeMatMul": _h_dqmm,
    "DynamicQuantizeLinear": _h_dql,
}
