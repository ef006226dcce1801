"""Device handlers of ONNX Not (ELEMENT_WISE_LOGICAL_NOT, ops/elementwise_logic.py), BitwiseNot
(ELEMENT_WISE_BIT_NOT, ops/elementwise_bit.py), CumSum and CumProd (CUMULATIVE_SUMMATION / _PRODUCT,
ops/cumulative.py).
Or, Xor, BitwiseAnd / Or / Xor, Greater, Less and LessOrEqual run through the generic "binary" /
"compare" handlers (their OnnxOp kinds).

CumSum, CumProd: the axis input is read on the host (a fed or device-computed axis makes a plan raise
FallbackNeeded, and the model runs node by node, the axis read at each run); `exclusive` and `reverse` are HasExclusiveSum and
AxisDirection DECREASING. Its types are CUMULATIVE_SUMMATION's (float32, float16, int32, uint32,
int64, uint64: 64-bit integers as word pairs, exact with two's complement wrap-around, as
onnxruntime's); an empty input or another type runs on the CPU."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

import kompute_dml as kdml

from .graph import _attr
from .handlers_math import _operands
from .handlers_values import BOOL, dml_numpy
from .values import DeviceValue, FallbackNeeded, RunStats, _value_dtype, _value_shape

if TYPE_CHECKING:
    from .context import NodeContext

_CUMSUM_TYPES = frozenset(np.dtype(t) for t in (np.float32, np.float16, np.int32, np.uint32, np.int64, np.uint64))


def _h_not(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    if _value_dtype(ins[0]) != BOOL:
        raise ValueError(f"Not {node.name!r}: the input must be boolean")
    (t,) = _operands(ctx, node, ins[:1], stats)
    shape = _value_shape(ins[0])
    out = ctx.out_tensor(shape, dml_numpy(BOOL))
    return [DeviceValue(kdml.logical_not(t, out=out, device=ctx.device), shape, BOOL)]


def _h_bitwise_not(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    dt = _value_dtype(ins[0])
    (t,) = _operands(ctx, node, ins[:1], stats)
    shape = _value_shape(ins[0])
    return [DeviceValue(kdml.bitwise_not(t, out=ctx.out_tensor(shape, dml_numpy(dt)), device=ctx.device), shape, dt)]


def _scan(helper: str) -> Any:
    """CumSum / CumProd on CUMULATIVE_SUMMATION / _PRODUCT: the axis read on the host."""
    fn = getattr(kdml, helper)

    def handler(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
        x = ins[0]
        shape, dt = tuple(_value_shape(x)), _value_dtype(x)
        if not shape or 0 in shape:
            raise FallbackNeeded("an empty or 0-dimensional input")
        if dt not in _CUMSUM_TYPES:
            raise FallbackNeeded(f"type {dt} is not one {node.op_type} takes on the device")
        axis = int(np.asarray(ctx.host(ins[1], stats)).reshape(-1)[0])
        if not -len(shape) <= axis < len(shape):
            raise ValueError(f"{node.op_type} {node.name!r}: axis {axis} is out of range for rank {len(shape)}")
        (t,) = _operands(ctx, node, ins[:1], stats)
        out = ctx.out_tensor(shape, dml_numpy(dt))
        y = fn(t, axis, exclusive=bool(int(_attr(node, "exclusive", 0))), reverse=bool(int(_attr(node, "reverse", 0))),
               out=out, device=ctx.device)
        return [DeviceValue(y, shape, dt)]
    return handler


LOGIC_HANDLERS = {"Not": _h_not, "BitwiseNot": _h_bitwise_not, "CumSum": _scan("cumsum"), "CumProd": _scan("cumprod")}
