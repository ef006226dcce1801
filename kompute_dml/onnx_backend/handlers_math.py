"""Device handlers of element-wise ONNX nodes (Add, Sub, Mul, Div, Where, Equal, And,
GreaterOrEqual, IsNaN, IsInf, Cast), Gather, GatherElements and DequantizeLinear, on the operators of
ops/elementwise.py, ops/cast.py, ops/gather.py and ops/dequantize.py.

ONNX booleans live on the device as UINT8 0 / 1 (DirectML's boolean outputs). What a
DirectML operator does not take (a type outside its table, a shape it cannot broadcast)
raises FallbackNeeded or kdml.UnsupportedError: the node runs on the CPU instead."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

import kompute_dml as kdml

from .graph import _attr, _np_dtype_of_onnx
from .handlers_values import BOOL, device_tensor, dml_numpy
from .values import _DML_NUMPY, DeviceValue, FallbackNeeded, RunStats, _value_dtype, _value_shape

if TYPE_CHECKING:
    from .context import NodeContext


def _operands(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats,
              names: list[str] | None = None) -> list[kdml.Tensor]:
    """The values' device tensors; `names`: their input names where `ins` are not node.input's first
    inputs in order (a constant is uploaded once under its name: a wrong name uploads another's)."""
    for v in ins:
        dt = _value_dtype(v)
        if dt != BOOL and dt not in _DML_NUMPY:
            raise FallbackNeeded(f"type {dt} is not a DirectML type")
        if 0 in _value_shape(v):
            raise FallbackNeeded("an empty tensor")
    return [device_tensor(ctx, v, stats, n) for v, n in zip(ins, node.input if names is None else names, strict=names is not None)]


def _out(ctx: NodeContext, ins: list[Any], dt: np.dtype) -> tuple[tuple[int, ...], kdml.Tensor]:
    try:
        shape = tuple(np.broadcast_shapes(*(_value_shape(v) for v in ins)))
    except ValueError as e:
        raise ValueError(f"operand shapes do not broadcast: {e}") from None
    return shape, ctx.out_tensor(shape, dml_numpy(dt))


def _binary(fn: Any, bool_out: bool = False) -> Any:
    def handler(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
        dt = BOOL if bool_out else _value_dtype(ins[0])
        if _value_dtype(ins[0]) != _value_dtype(ins[1]):
            raise ValueError(f"{node.op_type} {node.name!r}: operand types differ")
        tensors = _operands(ctx, node, ins, stats)
        shape, out = _out(ctx, ins, dt)
        return [DeviceValue(fn(*tensors, out=out, device=ctx.device), shape, dt)]
    return handler


def _h_where(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    dt = _value_dtype(ins[1])
    if _value_dtype(ins[0]) != BOOL:
        raise ValueError(f"Where {node.name!r}: the condition must be boolean")
    tensors = _operands(ctx, node, ins, stats)
    shape, out = _out(ctx, ins, dt)
    return [DeviceValue(kdml.where(*tensors, out=out, device=ctx.device), shape, dt)]


def _h_and(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    tensors = _operands(ctx, node, ins, stats)
    shape, out = _out(ctx, ins, BOOL)
    return [DeviceValue(kdml.logical_and(*tensors, out=out, device=ctx.device), shape, BOOL)]


def _h_isnan(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    (t,) = _operands(ctx, node, ins[:1], stats)
    shape, out = _out(ctx, ins[:1], BOOL)
    return [DeviceValue(kdml.isnan(t, out=out, device=ctx.device), shape, BOOL)]


def _h_isinf(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    """IsInf: its detect_negative / detect_positive attributes (default 1 each) as
    ELEMENT_WISE_IS_INFINITY's InfinityMode; with both 0 (every output false) the node runs on
    the CPU. A type the operator lacks (float64) is refused by it: also the CPU."""
    neg, pos = int(_attr(node, "detect_negative", 1)), int(_attr(node, "detect_positive", 1))
    if not neg and not pos:
        raise FallbackNeeded("IsInf with detect_negative = detect_positive = 0")
    mode = kdml.IsInfinityMode.EITHER if neg and pos else (
        kdml.IsInfinityMode.NEGATIVE if neg else kdml.IsInfinityMode.POSITIVE)
    (t,) = _operands(ctx, node, ins[:1], stats)
    shape, out = _out(ctx, ins[:1], BOOL)
    return [DeviceValue(kdml.isinf(t, infinity_mode=mode, out=out, device=ctx.device), shape, BOOL)]


def _h_cast(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    return _cast_to(ctx, node, ins, stats, _np_dtype_of_onnx(int(_attr(node, "to"))))


def _h_cast_like(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    """CastLike: Cast to input 1's type (its values unread: ONNX's `saturate` concerns float8 only)."""
    return _cast_to(ctx, node, ins, stats, np.dtype(_value_dtype(ins[1])))


def _cast_to(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats, to: Any) -> list[Any]:
    src = _value_dtype(ins[0])
    if to is None or (to != BOOL and to not in _DML_NUMPY):
        raise FallbackNeeded(f"Cast to {to}")
    if to == src and isinstance(ins[0], DeviceValue):  # the same bits: a view, no dispatch (a reshape's kind)
        return [ins[0]]
    (t,) = _operands(ctx, node, ins[:1], stats)
    shape, out = _out(ctx, ins[:1], to)
    if to == BOOL:  # ONNX: nonzero is true; DirectML's CAST would truncate (0.5 -> 0)
        if src == BOOL:
            return [DeviceValue(kdml.copy(t, out=out, device=ctx.device), shape, BOOL)]
        zero = ctx.to_device(np.zeros(1, dml_numpy(src)), stats, None)
        is_zero = kdml.equal(t, zero, out=ctx.out_tensor(shape, np.uint8), device=ctx.device)
        one, nil = (ctx.to_device(np.array([v], np.uint8), stats, None) for v in (1, 0))
        return [DeviceValue(kdml.where(is_zero, nil, one, out=out, device=ctx.device), shape, BOOL)]
    return [DeviceValue(kdml.cast(t, kdml.DataType.from_numpy(dml_numpy(to)), out=out, device=ctx.device), shape, to)]


def _h_gather(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    x, idx = ins[0], ins[1]
    axis = int(_attr(node, "axis", 0))
    xs, qs = _value_shape(x), _value_shape(idx)
    axis = axis + len(xs) if axis < 0 else axis
    shape = xs[:axis] + qs + xs[axis + 1:]
    if 0 in shape or 0 in xs:
        raise FallbackNeeded("an empty tensor")
    tx, ti = _operands(ctx, node, [x, idx], stats)
    dt = _value_dtype(x)
    out = ctx.out_tensor(shape, dml_numpy(dt))
    if qs:
        t = kdml.gather(tx, ti, axis, out=out, device=ctx.device)
    else:  # rank-0 indices: gather with one index, the axis dropped by the out shape
        view = kdml.Tensor.trusted(out.buffer, kdml.TensorDesc(out.desc.data_type, (*xs[:axis], 1, *xs[axis + 1:])),
                                   out.offset)
        kdml.gather(tx, ti, axis, out=view, device=ctx.device)
        t = out
    return [DeviceValue(t, shape, dt)]


def _h_gather_elements(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    axis = int(_attr(node, "axis", 0))
    tx, ti = _operands(ctx, node, ins[:2], stats)
    shape = _value_shape(ins[1])
    dt = _value_dtype(ins[0])
    out = ctx.out_tensor(shape, dml_numpy(dt))
    return [DeviceValue(kdml.gather_elements(tx, ti, axis, out=out, device=ctx.device), shape, dt)]


def _h_dequantize(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    """DequantizeLinear on DEQUANTIZE_LINEAR: a per-tensor scale and zero point, or per-axis ones
    (1-D, along `axis`) seen as stride-0 views, as QuantizeLinear's; blocked ones (block_size) on the CPU."""
    x, scale = ins[0], ins[1]
    zp = ins[2] if len(ins) > 2 else None
    if int(_attr(node, "block_size", 0)):
        raise FallbackNeeded("blocked DequantizeLinear (block_size)")
    if zp is not None and _value_dtype(zp) != _value_dtype(x):
        raise ValueError(f"DequantizeLinear {node.name!r}: x_zero_point's type differs from x's")
    present = [v for v in (x, scale, zp) if v is not None]
    tensors = _operands(ctx, node, present, stats)
    dt = _value_dtype(scale)
    shape, out = _out(ctx, [x], dt)
    tx, ts, *tz = tensors
    if math.prod(_value_shape(scale)) != 1 or (zp is not None and math.prod(_value_shape(zp)) != 1):
        axis = int(_attr(node, "axis", 1)) % max(len(shape), 1)  # per axis: stride-0 elsewhere
        ts, *tz = (_along(t, tuple(shape), axis) for t in (ts, *tz))
    return [DeviceValue(kdml.dequantize_linear(tx, ts, tz[0] if tz else None, out=out, device=ctx.device), shape, dt)]


def _along(t: kdml.Tensor, shape: tuple[int, ...], axis: int) -> kdml.Tensor:
    """A tensor of shape[axis] values (one dimension of them) seen with x's rank, along `axis`."""
    d = t.desc
    long = [i for i, v in enumerate(d.sizes) if v != 1]
    if d.element_count != shape[axis] or len(long) > 1:
        raise ValueError(f"a per-axis scale or zero point must hold {shape[axis]} values, got {d.sizes}")
    strides = [0] * len(shape)
    strides[axis] = d.effective_strides[long[0]] if long else 0
    sizes = [1] * len(shape)
    sizes[axis] = shape[axis]
    return kdml.Tensor.trusted(t.buffer, kdml.TensorDesc(d.data_type, tuple(sizes), tuple(strides)), t.offset)


def _h_quantize(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    """QuantizeLinear on ELEMENT_WISE_QUANTIZE_LINEAR: a per-tensor scale and zero point, or
    per-axis ones (1-D, along `axis`) seen as stride-0 views; no zero point: a UINT8 0."""
    x, scale = ins[0], ins[1]
    zp = ins[2] if len(ins) > 2 and len(node.input) > 2 and node.input[2] else None
    shape = tuple(_value_shape(x))
    if _value_dtype(x) not in (np.float32, np.int32) or _value_dtype(scale) != np.float32:
        raise FallbackNeeded("QuantizeLinear of other than float32 / int32 by a float32 scale")
    out_dt = _value_dtype(zp) if zp is not None else np.dtype(np.uint8)
    if out_dt not in (np.int8, np.uint8) or int(_attr(node, "block_size", 0)):
        raise FallbackNeeded(f"QuantizeLinear to {out_dt} (block_size {_attr(node, 'block_size', 0)})")
    if 0 in shape:
        return [np.zeros(shape, out_dt)]
    tx, ts, *tz = _operands(ctx, node, [v for v in (x, scale, zp) if v is not None], stats)
    per = math.prod(_value_shape(scale)) != 1
    if per:  # per axis: the 1-D scale (and zero point) along `axis`, stride-0 elsewhere
        axis = int(_attr(node, "axis", 1)) % max(len(shape), 1)
        ts, *tz = (_along(t, shape, axis) for t in (ts, *tz))
    out = ctx.out_tensor(shape, out_dt)
    y = kdml.quantize_linear(tx, ts, tz[0] if tz else None, out=out, device=ctx.device)
    return [DeviceValue(y, shape, out_dt)]


def binary(helper: str) -> Any:
    """The handler of an OnnxOp of kind "binary": kdml.<helper> on two operands of one type."""
    return _binary(getattr(kdml, helper))


def compare(helper: str) -> Any:
    """The handler of an OnnxOp of kind "compare": kdml.<helper>, a boolean output."""
    return _binary(getattr(kdml, helper), bool_out=True)


MATH_HANDLERS = {
    "And": _h_and,
    "Where": _h_where,
    "IsNaN": _h_isnan,
    "IsInf": _h_isinf,
    "Cast": _h_cast,
    "CastLike": _h_cast_like,
    "Gather": _h_gather,
    "GatherElements": _h_gather_elements,
    "DequantizeLinear": _h_dequantize,
    "QuantizeLinear": _h_quantize,
}
