"""Device handlers: one per ONNX node kind that runs on the Vulkan device."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

import kompute_dml as kdml
from kompute_dml.ops import SPECS

from .fusion_qconv import QCONV_HANDLERS
from .graph import _attr, _np_dtype_of_onnx
from .handlers_activation import ACT_HANDLERS
from .handlers_arith import ARITH_HANDLERS
from .handlers_attention import ATTENTION_HANDLERS
from .handlers_conv import CONV_HANDLERS
from .handlers_conv_integer import CONV_INTEGER_HANDLERS
from .handlers_dft import DFT_HANDLERS
from .handlers_einsum import EINSUM_HANDLERS
from .handlers_fill import FILL_HANDLERS
from .handlers_indexing import INDEXING_HANDLERS
from .handlers_integer import INTEGER_HANDLERS, _reshaped
from .handlers_logic import LOGIC_HANDLERS
from .handlers_math import MATH_HANDLERS, binary, compare
from .handlers_nn import NN_HANDLERS, float_unary
from .handlers_onnx_attention import ONNX_ATTENTION_HANDLERS
from .handlers_pool import POOL_HANDLERS
from .handlers_reduce import REDUCE_HANDLERS
from .handlers_rnn import RNN_HANDLERS
from .handlers_transformer import TRANSFORMER_HANDLERS
from .handlers_values import MOVE_HANDLERS, VALUE_HANDLERS
from .handlers_vision import VISION_HANDLERS
from .values import (
    _DML_NUMPY,
    DeviceValue,
    FallbackNeeded,
    RunStats,
    _is_tensor_value,
    _value_dtype,
    _value_shape,
)

if TYPE_CHECKING:
    from .context import NodeContext


# ---------------------------------------------------------------------------------
# device handlers: (ctx, node, input values, stats) -> output values
# ---------------------------------------------------------------------------------
def _dml_type(dt: np.dtype, what: str) -> kdml.DataType:
    if dt not in _DML_NUMPY:
        raise FallbackNeeded(f"{what} type {dt} is not a DirectML type")
    return kdml.DataType.from_numpy(dt)


def _scalar_int(ctx: NodeContext, v: Any, stats: RunStats) -> int:
    arr = np.asarray(ctx.host(v, stats))
    if arr.size != 1:
        raise ValueError(f"expected a single value, got shape {arr.shape}")
    return int(arr.reshape(-1)[0])


def _h_eyelike(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    x = ins[0]
    shape = _value_shape(x)
    if len(shape) != 2:
        raise ValueError(f"EyeLike {node.name!r} takes a 2-D input, got shape {shape}")
    dt_attr = _attr(node, "dtype")
    dt = _np_dtype_of_onnx(dt_attr) if dt_attr is not None else _value_dtype(x)
    if dt is None:
        raise ValueError(f"EyeLike {node.name!r}: dtype {dt_attr} is not an ONNX tensor element type")
    data_type = _dml_type(dt, "output")
    k = int(_attr(node, "k", 0))
    if 0 in shape:
        return [np.zeros(shape, dtype=dt)]
    t = kdml.eye_like(shape, k, data_type=data_type, out=ctx.out_tensor(shape, dt), device=ctx.device)
    return [DeviceValue(t, shape, dt)]


def _h_trilu(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    x = ins[0]
    shape = _value_shape(x)
    dt = _value_dtype(x)
    _dml_type(dt, "input")
    k = _scalar_int(ctx, ins[1], stats) if len(ins) > 1 and ins[1] is not None else 0
    upper = int(_attr(node, "upper", 1))
    if len(shape) < 2:
        raise ValueError(f"Trilu {node.name!r} takes an input of rank >= 2, got shape {shape}")
    if 0 in shape:
        return [np.zeros(shape, dtype=dt)]
    work_shape = shape
    if len(shape) > 4:  # DIAGONAL_MATRIX1 takes 2-4 dimensions: fold the batch dimensions
        work_shape = (math.prod(shape[:-2]), *shape[-2:])
        x = _reshaped(ctx, x, work_shape, stats)
    xt = ctx.to_device(x, stats, node.input[0])
    fn = kdml.triu if upper else kdml.tril
    t = fn(xt, k, out=ctx.out_tensor(work_shape, dt), device=ctx.device)
    out = DeviceValue(t, work_shape, dt)
    if work_shape != shape:
        out = _reshaped(ctx, out, shape, stats)
    return [out]


def _copy_value(ctx: NodeContext, v: Any, stats: RunStats, name: str | None) -> Any:
    shape = _value_shape(v)
    dt = _value_dtype(v)
    if 0 in shape:
        return np.array(ctx.host(v, stats), copy=True)
    xt = ctx.to_device(v, stats, name)
    return DeviceValue(kdml.copy(xt, out=ctx.out_tensor(xt.desc.sizes, dt), device=ctx.device), shape, dt)


def _h_identity(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    v = ins[0]
    if v is None:
        return [None]
    if isinstance(v, list):
        for e in v:
            if not _is_tensor_value(e):
                raise FallbackNeeded("nested sequence")
            _dml_type(_value_dtype(e), "element")
        return [[_copy_value(ctx, e, stats, None) for e in v]]
    if not _is_tensor_value(v):
        raise FallbackNeeded(f"value of type {type(v).__name__}")
    _dml_type(_value_dtype(v), "input")
    return [_copy_value(ctx, v, stats, node.input[0])]


def _h_dropout(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    """Dropout in inference (no training_mode input, or a false one): the output a copy of the
    input (as Identity's), the optional mask all true. Training mode draws random numbers: the
    CPU's."""
    mode = ins[2] if len(ins) > 2 else None
    if mode is not None and (isinstance(mode, DeviceValue) or bool(np.asarray(mode).reshape(-1)[0])):
        raise FallbackNeeded("Dropout in training mode draws random numbers")
    v = ins[0]
    if not _is_tensor_value(v):
        raise FallbackNeeded(f"value of type {type(v).__name__}")
    _dml_type(_value_dtype(v), "input")
    outs = [_copy_value(ctx, v, stats, node.input[0])]
    if len(node.output) > 1 and node.output[1]:
        shape = _value_shape(v)
        if 0 in shape:
            outs.append(np.ones(shape, np.bool_))
        else:
            mask = kdml.fill(shape, 1, kdml.DataType.UINT8, out=ctx.out_tensor(shape, np.uint8), device=ctx.device)
            outs.append(DeviceValue(mask, shape, np.dtype(np.bool_)))  # (a bool's bytes)
    return outs


_SEED_HANDLERS = {
    "EyeLike": _h_eyelike,
    "Trilu": _h_trilu,
    "Identity": _h_identity,
    "Dropout": _h_dropout,
}


# every ONNX node type a device handler takes (the placement's VULKAN nodes)
# node types of a generic kind (OnnxOp.kind): one handler per kind, made for each operator's declaration
KINDS = {"float_unary": float_unary, "binary": binary, "compare": compare}


def _kind_handler(spec_name: str, op: Any) -> Any:
    if op.kind not in KINDS:
        raise TypeError(f"{spec_name}: ONNX {op.op_type} declares kind {op.kind!r}; the kinds are {sorted(KINDS)}")
    return KINDS[op.kind](op.helper)


_KIND_HANDLERS = {op.op_type: _kind_handler(s.name, op) for s in SPECS for op in s.onnx if op.kind}
HANDLERS = {**_SEED_HANDLERS, **INTEGER_HANDLERS, **MATH_HANDLERS, **VALUE_HANDLERS, **NN_HANDLERS, **REDUCE_HANDLERS,
            **CONV_HANDLERS, **CONV_INTEGER_HANDLERS, **EINSUM_HANDLERS, **POOL_HANDLERS, **MOVE_HANDLERS,
            **ACT_HANDLERS, **LOGIC_HANDLERS, **FILL_HANDLERS, **VISION_HANDLERS, **QCONV_HANDLERS, **ATTENTION_HANDLERS,
            **TRANSFORMER_HANDLERS, **RNN_HANDLERS, **DFT_HANDLERS, **ARITH_HANDLERS, **INDEXING_HANDLERS, **_KIND_HANDLERS}
# (op type, domain) -> handler where one node type name means different ops in two domains (ai.onnx
# Attention and RotaryEmbedding, com.microsoft's contrib ops of the same names in HANDLERS)
DOMAIN_HANDLERS = {**ONNX_ATTENTION_HANDLERS}


def handler_for(node: onnx.NodeProto) -> Any:
    """The device handler of a node: its (type, domain)'s, else its type's."""
    domain = "" if node.domain == "ai.onnx" else node.domain
    return DOMAIN_HANDLERS.get((node.op_type, domain)) or HANDLERS[node.op_type]
