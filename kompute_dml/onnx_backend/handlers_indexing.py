"""Device handlers of ONNX GatherND, ScatterND, ScatterElements (and the deprecated Scatter) and
OneHot, on GATHER_ND1, SCATTER_ND, SCATTER and ONE_HOT (ops/gather_nd.py, ops/scatter.py,
ops/one_hot.py).

ScatterND / ScatterElements of host values (shape arithmetic: Swin's shifted-window mask) are
evaluated on the host before these run (host_eval.py); these take device values. `reduction`
(opsets 16 / 18) runs as kompute_dml's SCATTER / SCATTER_ND extension on float32 / int32 / uint32
data (the spec's rule keeps the others on the CPU). OneHot: `depth` is read on the host (it sets
the output's shape: a fed or device-computed depth runs the model node by node); indices that are
not 32/64-bit integers are cast to INT32 on the device first (CAST truncates toward zero, as ONNX
casts them); an empty input runs on the CPU."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

import kompute_dml as kdml

from .graph import _attr, attr_text
from .handlers_math import _operands
from .handlers_values import dml_numpy
from .values import DeviceValue, FallbackNeeded, RunStats, _value_dtype, _value_shape

if TYPE_CHECKING:
    from .context import NodeContext

_INDEX_TYPES = frozenset(np.dtype(t) for t in (np.int32, np.uint32, np.int64, np.uint64))


def _nonempty(ins: list[Any]) -> None:
    for v in ins:
        if 0 in _value_shape(v):
            raise FallbackNeeded("an empty tensor")


def _reduction(node: onnx.NodeProto) -> str:
    return attr_text(node, "reduction", "none")


def _h_gather_nd(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    x, idx = ins[0], ins[1]
    _nonempty(ins[:2])
    b = int(_attr(node, "batch_dims", 0))
    xs, qs = _value_shape(x), _value_shape(idx)
    shape = tuple(qs[:-1]) + tuple(xs[b + qs[-1]:])
    if not shape:
        raise FallbackNeeded("a 0-dimensional result")
    tx, ti = _operands(ctx, node, [x, idx], stats)
    dt = _value_dtype(x)
    out = ctx.out_tensor(shape, dml_numpy(dt))
    return [DeviceValue(kdml.gather_nd(tx, ti, b, out=out, device=ctx.device), shape, dt)]


def _h_scatter_nd(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    _nonempty(ins[:3])
    tx, ti, tu = _operands(ctx, node, ins[:3], stats)
    shape, dt = tuple(_value_shape(ins[0])), _value_dtype(ins[0])
    out = ctx.out_tensor(shape, dml_numpy(dt))
    return [DeviceValue(kdml.scatter_nd(tx, ti, tu, _reduction(node), out=out, device=ctx.device), shape, dt)]


def _h_scatter_elements(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    _nonempty(ins[:3])
    tx, ti, tu = _operands(ctx, node, ins[:3], stats)
    shape, dt = tuple(_value_shape(ins[0])), _value_dtype(ins[0])
    out = ctx.out_tensor(shape, dml_numpy(dt))
    axis = int(_attr(node, "axis", 0))
    y = kdml.scatter_elements(tx, ti, tu, axis, _reduction(node), out=out, device=ctx.device)
    return [DeviceValue(y, shape, dt)]


def _h_one_hot(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    idx, values = ins[0], ins[2]
    _nonempty([idx, values])
    depth = np.asarray(ctx.host(ins[1], stats)).reshape(-1)
    if depth.size != 1:
        raise ValueError(f"OneHot {node.name!r}: depth must hold one value, got {depth.size}")
    d = int(depth[0])
    if d < 1:
        raise ValueError(f"OneHot {node.name!r}: depth must be positive, got {d}")
    qs = tuple(_value_shape(idx))
    axis = int(_attr(node, "axis", -1))
    if not -len(qs) - 1 <= axis <= len(qs):
        raise ValueError(f"OneHot {node.name!r}: axis {axis} is out of range for indices of rank {len(qs)}")
    a = axis % (len(qs) + 1)
    ti, tv = _operands(ctx, node, [idx, values], stats, [node.input[0], node.input[2]])
    if _value_dtype(idx) not in _INDEX_TYPES:
        ti = kdml.cast(ti, kdml.DataType.INT32, out=ctx.out_tensor(qs or (1,), np.int32), device=ctx.device)
    shape = (*qs[:a], d, *qs[a:])
    dt = _value_dtype(values)
    out = ctx.out_tensor(shape, dml_numpy(dt))
    return [DeviceValue(kdml.one_hot(ti, d, tv, a, out=out, device=ctx.device), shape, dt)]


INDEXING_HANDLERS = {
    "GatherND": _h_gather_nd,
    "ScatterND": _h_scatter_nd,
    "ScatterElements": _h_scatter_elements,
    "Scatter": _h_scatter_elements,
    "OneHot": _h_one_hot,
}
