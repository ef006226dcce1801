"""Device handlers: one per ONNX node kind that runs on the Vulkan device."""

from __future__ import annotations

import importlib
import math
import pkgutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

import kompute_dml as kdml
from kompute_dml.ops import SPECS

from .graph import _attr, _np_dtype_of_onnx
from .handlers_integer import _reshaped
from .handlers_math import binary, compare
from .handlers_nn import float_unary, unary
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


# node types of a generic kind (OnnxOp.kind): one handler per kind, made for each operator's declaration
KINDS = {"float_unary": float_unary, "unary": unary, "binary": binary, "compare": compare}


def _kind_handler(spec_name: str, op: Any) -> Any:
    if op.kind not in KINDS:
        raise TypeError(f"{spec_name}: ONNX {op.op_type} declares kind {op.kind!r}; the kinds are {sorted(KINDS)}")
    return KINDS[op.kind](op.helper)


def _module_tables() -> tuple[dict[str, Any], dict[tuple[str, str], Any]]:
    """Every table of the handler modules (handlers_*.py and fusion_*.py), discovered: a module adds
    its node types by defining a *_HANDLERS dict of them. Op type -> handler; (op type, domain) ->
    handler where one name means two ops in two domains (ai.onnx Attention and RotaryEmbedding,
    com.microsoft's contrib ops of the same names). No key in two tables (TypeError naming both)."""
    tables: dict[int, tuple[str, dict[Any, Any]]] = {}  # (a table imported elsewhere is still one table)
    for info in sorted(pkgutil.iter_modules([str(Path(__file__).parent)]), key=lambda i: i.name):
        if info.name.startswith(("handlers_", "fusion_")):
            module = importlib.import_module(f"{__package__}.{info.name}")
            for name, table in vars(module).items():
                if name.endswith("_HANDLERS") and isinstance(table, dict):
                    tables.setdefault(id(table), (f"{info.name}.{name}", table))
    by_type: dict[str, Any] = {}
    by_domain: dict[tuple[str, str], Any] = {}
    owner: dict[Any, str] = {}
    for where, table in [("handlers._SEED_HANDLERS", _SEED_HANDLERS), ("handlers._KIND_HANDLERS", _KIND_HANDLERS),
                         *tables.values()]:
        for key, handler in table.items():
            if key in owner:
                raise TypeError(f"ONNX {key!r} has a handler in {owner[key]} and in {where}")
            owner[key] = where
            (by_domain if isinstance(key, tuple) else by_type)[key] = handler
    return by_type, by_domain


_KIND_HANDLERS = {op.op_type: _kind_handler(s.name, op) for s in SPECS for op in s.onnx if op.kind}
# every ONNX node type a device handler takes (the placement's VULKAN nodes), and the node types
# whose handler depends on the domain
HANDLERS, DOMAIN_HANDLERS = _module_tables()


def handler_for(node: onnx.NodeProto) -> Any:
    """The device handler of a node: its (type, domain)'s, else its type's."""
    domain = "" if node.domain == "ai.onnx" else node.domain
    return DOMAIN_HANDLERS.get((node.op_type, domain)) or HANDLERS[node.op_type]
