"""Device handlers of ONNX Pow, Mod and BitShift, on ops/elementwise_pow.py's ELEMENT_WISE_POW (and
ELEMENT_WISE_MULTIPLY for onnxruntime's own float32 cube) and ops/elementwise_integer.py's
MODULUS_TRUNCATE / _FLOOR and BIT_SHIFT_LEFT / _RIGHT. The node types' rules
(ops/elementwise_pow.pow_rule, ops/elementwise_integer.mod_rule / bitshift_rule) keep the types
the operators do not take on the CPU."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

import kompute_dml as kdml

from .graph import _attr, attr_text
from .handlers_values import device_tensor
from .values import DeviceValue, FallbackNeeded, RunStats, _value_dtype, _value_shape

if TYPE_CHECKING:
    from .context import NodeContext

_I32 = (-(2**31 - 2), 2**31 - 2)  # even bounds: a clipped exponent keeps its parity below
_U32 = (0, 2**32 - 2)


def _clip_parity(e: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """A 64-bit integer exponent within [lo, hi + 1] with its parity: beyond 2^31 every base but
    +-1 over- or underflows alike, and +-1 needs only the parity."""
    c = np.clip(e, lo, hi)
    return np.where(c != e, c + e % 2, c)


def _pow_operands(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> tuple[Any, Any]:
    x, e = ins[0], ins[1]
    for v in (x, e):
        if 0 in _value_shape(v):
            raise FallbackNeeded("an empty tensor")
    tx = device_tensor(ctx, x, stats, node.input[0])
    edt = _value_dtype(e)
    if ctx.is_constant(node.input[1]):
        arr = np.asarray(ctx.host(e, stats))
        if edt == np.float64:
            if not np.array_equal(arr.astype(np.float32).astype(np.float64), arr, equal_nan=True):
                raise FallbackNeeded("a float64 exponent a float32 does not hold")
            arr = arr.astype(np.float32)
        elif edt == np.int64:
            arr = _clip_parity(arr, *_I32).astype(np.int32)
        elif edt == np.uint64:
            arr = _clip_parity(arr.astype(np.int64), *_U32).astype(np.uint32)
        return tx, ctx.to_device(arr.reshape(arr.shape or (1,)), stats, None)
    te = device_tensor(ctx, e, stats, node.input[1])
    if edt in (np.int64, np.uint64):  # a fed 64-bit exponent: converted on the device (exact below 2^24)
        te = kdml.cast(te, kdml.DataType.FLOAT32, device=ctx.device)
    return tx, te


def _h_pow(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    """Pow: ELEMENT_WISE_POW, numpy-broadcast; a float32 base cubed by a constant scalar 3 as
    (x * x) * x on ELEMENT_WISE_MULTIPLY, onnxruntime's own arithmetic for that exponent."""
    dt = _value_dtype(ins[0])
    shape = tuple(np.broadcast_shapes(_value_shape(ins[0]), _value_shape(ins[1])))
    out = ctx.out_tensor(shape, dt)
    if dt == np.float32 and ctx.is_constant(node.input[1]):
        e = np.asarray(ctx.host(ins[1], stats))
        if e.size == 1 and float(e.reshape(-1)[0]) == 3.0 and shape == _value_shape(ins[0]):
            tx = device_tensor(ctx, ins[0], stats, node.input[0])
            square = kdml.mul(tx, tx, out=ctx.out_tensor(shape, dt), device=ctx.device)
            return [DeviceValue(kdml.mul(square, tx, out=out, device=ctx.device), shape, dt)]
    tx, te = _pow_operands(ctx, node, ins, stats)
    return [DeviceValue(kdml.pow(tx, te, out=out, device=ctx.device), shape, dt)]


def _binary_int(fn: Any, what: str) -> Any:
    def handler(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
        dt = _value_dtype(ins[0])
        if _value_dtype(ins[1]) != dt:
            raise ValueError(f"{node.op_type} {node.name!r}: operand types differ")
        shapes = [_value_shape(v) for v in ins[:2]]
        if any(0 in s for s in shapes):
            raise FallbackNeeded("an empty tensor")
        shape = tuple(np.broadcast_shapes(*shapes))
        ta, tb = (device_tensor(ctx, v, stats, n) for v, n in zip(ins[:2], node.input))
        out = ctx.out_tensor(shape, dt)
        return [DeviceValue(fn(node, ta, tb, out, ctx, stats), shape, dt)]
    handler.__doc__ = what
    return handler


def _mod(node: onnx.NodeProto, a: kdml.Tensor, b: kdml.Tensor, out: kdml.Tensor, ctx: NodeContext,
         stats: RunStats) -> kdml.Tensor:
    helper = kdml.fmod if int(_attr(node, "fmod", 0)) else kdml.mod
    return helper(a, b, out=out, device=ctx.device)


def _as_unsigned(t: kdml.Tensor) -> kdml.Tensor:
    """The same bytes as the unsigned type of t's width (BIT_SHIFT takes unsigned types only)."""
    unsigned = {1: kdml.DataType.UINT8, 2: kdml.DataType.UINT16, 4: kdml.DataType.UINT32, 8: kdml.DataType.UINT64}
    d = t.desc
    return kdml.Tensor.trusted(t.buffer, kdml.TensorDesc(unsigned[d.data_type.size], d.sizes, d.strides), t.offset)


def _bitshift(node: onnx.NodeProto, a: kdml.Tensor, b: kdml.Tensor, out: kdml.Tensor, ctx: NodeContext,
              stats: RunStats) -> kdml.Tensor:
    """Logical shifts on the unsigned views (a shift of the width or more, or a negative one read
    as unsigned, gives 0); a signed right shift (opset 28's int types) is arithmetic:
    ~(~a >> b) where a < 0, so those give -1."""
    dev = ctx.device
    direction = attr_text(node, "direction", "")
    ua, ub, uo = _as_unsigned(a), _as_unsigned(b), _as_unsigned(out)
    if direction == "LEFT":
        kdml.left_shift(ua, ub, out=uo, device=dev)
    elif not a.desc.data_type.is_signed:
        kdml.right_shift(ua, ub, out=uo, device=dev)
    else:
        shape, udt = out.desc.sizes, uo.desc.data_type.numpy_dtype
        pos = kdml.right_shift(ua, ub, out=ctx.out_tensor(shape, udt), device=dev)
        inv = kdml.bitwise_not(ua, out=ctx.out_tensor(a.desc.sizes, udt), device=dev)
        shifted = kdml.right_shift(inv, ub, out=ctx.out_tensor(shape, udt), device=dev)
        neg = kdml.bitwise_not(shifted, out=ctx.out_tensor(shape, udt), device=dev)
        zero = ctx.to_device(np.zeros(1, a.desc.data_type.numpy_dtype), stats, None)
        is_neg = kdml.less(a, zero, out=ctx.out_tensor(a.desc.sizes, np.uint8), device=dev)
        kdml.where(is_neg, neg, pos, out=uo, device=dev)
    return out


ARITH_HANDLERS = {
    "Pow": _h_pow,
    "Mod": _binary_int(_mod, "Mod: fmod 0 as MODULUS_FLOOR (Python's %), fmod 1 as MODULUS_TRUNCATE (C's %, fmod)."),
    "BitShift": _binary_int(_bitshift, "BitShift: BIT_SHIFT_LEFT / _RIGHT on the operands' unsigned views."),
}
