"""Device handlers of ONNX Tile, Pad, ConstantOfShape and Range, on TILE (ops/tile.py), PADDING1
(ops/padding.py), FILL_VALUE_CONSTANT and FILL_VALUE_SEQUENCE (ops/fill.py).

Their shape-like inputs (repeats, pads, constant_value, axes; the shape; start / limit / delta)
are read on the host: constants and host values (shape arithmetic, fed inputs) as they are; a
device-computed one raises FallbackNeeded while planning (the node runs on the CPU). What a
DirectML operator does not take (negative pads, a type outside its table) raises
FallbackNeeded too. Empty outputs need no device work: they are host arrays."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx
from onnx import numpy_helper

import kompute_dml as kdml

from .graph import _attr, attr_text
from .handlers_values import BOOL, device_tensor, dml_numpy
from .values import _DML_NUMPY, DeviceValue, FallbackNeeded, RunStats, _value_dtype, _value_shape

if TYPE_CHECKING:
    from .context import NodeContext

_PAD_MODES = {"constant": kdml.PaddingMode.CONSTANT, "edge": kdml.PaddingMode.EDGE,
              "reflect": kdml.PaddingMode.REFLECTION, "wrap": kdml.PaddingMode.WRAP}


def _dml_type(dt: np.dtype) -> kdml.DataType:
    if dt != BOOL and dt not in _DML_NUMPY:
        raise FallbackNeeded(f"type {dt} is not a DirectML type")
    return kdml.DataType.from_numpy(dml_numpy(dt))


def _ints(ctx: NodeContext, v: Any, stats: RunStats) -> list[int]:
    return [int(a) for a in np.asarray(ctx.host(v, stats)).reshape(-1)]


def _h_tile(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    x, dt = ins[0], _value_dtype(ins[0])
    shape = _value_shape(x)
    reps = _ints(ctx, ins[1], stats)
    if len(reps) != len(shape) or not shape:
        raise ValueError(f"Tile {node.name!r}: repeats {reps} must hold one value per dimension of {shape}")
    out_shape = tuple(s * r for s, r in zip(shape, reps))
    _dml_type(dt)
    if 0 in out_shape:
        return [np.zeros(out_shape, dt)]
    t = device_tensor(ctx, x, stats, node.input[0])
    out = ctx.out_tensor(out_shape, dml_numpy(dt))
    return [DeviceValue(kdml.tile(t, reps, out=out, device=ctx.device), out_shape, dt)]


def _pads(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats, r: int) -> list[int]:
    """ONNX's pads as [begin..., end...] over every dimension (opset 18's axes applied)."""
    if len(ins) < 2:  # opset 1-10: attributes
        return [int(p) for p in _attr(node, "pads", _attr(node, "paddings", []))]
    pads = _ints(ctx, ins[1], stats)
    if len(ins) > 3 and ins[3] is not None:
        axes = [a % r for a in _ints(ctx, ins[3], stats)]
        full = [0] * (2 * r)
        for i, a in enumerate(axes):
            full[a], full[a + r] = pads[i], pads[i + len(axes)]
        return full
    return pads


def _h_pad(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    x, dt = ins[0], _value_dtype(ins[0])
    shape = _value_shape(x)
    r = len(shape)
    mode_name = attr_text(node, "mode", "constant")
    if mode_name not in _PAD_MODES:
        raise FallbackNeeded(f"Pad mode {mode_name!r}")
    pads = _pads(ctx, node, ins, stats, r)
    if len(pads) != 2 * r or r == 0:
        raise ValueError(f"Pad {node.name!r}: pads {pads} must hold 2 x {r} values")
    if min(pads) < 0 and mode_name != "constant":
        raise FallbackNeeded(f"negative pads (cropping) with mode {mode_name!r}")
    value: Any = _attr(node, "value", 0.0)
    if len(ins) > 2 and ins[2] is not None:
        value = np.asarray(ctx.host(ins[2], stats)).reshape(-1)
        value = value[0].item() if value.size else 0
    if dt.kind in "biu":
        value = int(value)
    elif dt.kind == "f":
        value = float(np.asarray(value).astype(dt))  # ONNX's value is of x's type
    _dml_type(dt)
    starts, ends = pads[:r], pads[r:]
    out_shape = tuple(s + a + b for s, a, b in zip(shape, starts, ends))
    if 0 in out_shape:
        return [np.zeros(out_shape, dt)]
    if 0 in shape and mode_name != "constant":
        raise FallbackNeeded(f"{mode_name} padding of an empty tensor")
    if 0 in shape:
        return [DeviceValue(kdml.fill(out_shape, value, _dml_type(dt), out=ctx.out_tensor(out_shape, dml_numpy(dt)),
                                      device=ctx.device), out_shape, dt)]
    t = device_tensor(ctx, x, stats, node.input[0])
    return [crop_pad(ctx, t, shape, starts, ends, dt, _PAD_MODES[mode_name], value)]


def crop_pad(ctx: NodeContext, t: kdml.Tensor, shape: tuple[int, ...], starts: Any, ends: Any, dt: np.dtype,
             mode: Any = kdml.PaddingMode.CONSTANT, value: Any = 0) -> DeviceValue:
    """`t` (of ONNX shape `shape`) with starts[i] / ends[i] elements added before / after axis i,
    or removed where negative: SLICE1 for the removed ones, then PADDING1 (`mode`, `value`) for
    the added ones (mode CONSTANT where any are removed: the caller's rule)."""
    r, dev = len(shape), ctx.device
    out_shape = tuple(s + a + b for s, a, b in zip(shape, starts, ends))
    cut0, cut1 = [max(-a, 0) for a in starts], [max(-b, 0) for b in ends]
    kept = tuple(s - a - b for s, a, b in zip(shape, cut0, cut1))
    if min(kept) <= 0:  # every input element removed: the output is all padding
        out = ctx.out_tensor(out_shape, dml_numpy(dt))
        return DeviceValue(kdml.fill(out_shape, value, _dml_type(dt), out=out, device=dev), out_shape, dt)
    if any(cut0) or any(cut1):
        t = kdml.slice1(t, cut0, kept, [1] * r, out=ctx.out_tensor(kept, dml_numpy(dt)), device=dev)
    add0, add1 = [max(a, 0) for a in starts], [max(b, 0) for b in ends]
    if not any(add0) and not any(add1):
        return DeviceValue(t, out_shape, dt)
    y = kdml.pad(t, add0, add1, mode, value, out=ctx.out_tensor(out_shape, dml_numpy(dt)), device=dev)
    return DeviceValue(y, out_shape, dt)


def _h_center_crop_pad(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    """CenterCropPad (opset 18): each of `axes` (default every one) cropped or padded with zeros to
    the `shape` input's size around its center (the extra element after it, as ONNX's reference)."""
    x, dt = ins[0], _value_dtype(ins[0])
    shape = _value_shape(x)
    r = len(shape)
    target = _ints(ctx, ins[1], stats)
    axes = [int(a) % r for a in _attr(node, "axes", list(range(r)))]
    if len(target) != len(axes):
        raise ValueError(f"CenterCropPad {node.name!r}: shape {target} must hold one size per axis {axes}")
    starts, ends = [0] * r, [0] * r
    for a, want in zip(axes, target):
        total = want - shape[a]  # > 0: padding; < 0: cropping
        before = total // 2 if total >= 0 else -((-total) // 2)
        starts[a], ends[a] = before, total - before
    _dml_type(dt)
    if 0 in shape or 0 in target:
        raise FallbackNeeded("an empty tensor")
    t = device_tensor(ctx, x, stats, node.input[0])
    return [crop_pad(ctx, t, shape, starts, ends, dt)]


def _h_constant_of_shape(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    shape = tuple(_ints(ctx, ins[0], stats))
    attr = _attr(node, "value")
    v = numpy_helper.to_array(attr).reshape(-1) if attr is not None else np.zeros(1, np.float32)
    dt = v.dtype
    if 0 in shape:
        return [np.zeros(shape, dt)]
    if not shape:
        raise FallbackNeeded("a rank-0 output")
    value = v[0].item()
    out = ctx.out_tensor(shape, dml_numpy(dt))
    return [DeviceValue(kdml.fill(shape, int(value) if dt == BOOL else value, _dml_type(dt), out=out,
                                  device=ctx.device), shape, dt)]


def _h_range(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    start, limit, delta = (np.asarray(ctx.host(v, stats)).reshape(()) for v in ins[:3])
    dt = start.dtype
    ddt = _dml_type(dt)
    if dt.kind == "f":
        with np.errstate(all="ignore"):
            n = math.ceil(float(limit - start) / float(delta)) if float(delta) != 0 else 0
    else:
        if int(delta) == 0:
            raise ValueError(f"Range {node.name!r}: delta is 0")
        n = -((int(start) - int(limit)) // int(delta))  # ceil((limit - start) / delta) exactly
    n = max(int(n), 0)
    if n == 0:
        return [np.zeros((0,), dt)]
    s, d = start.item(), delta.item()
    out = ctx.out_tensor((n,), dt)
    return [DeviceValue(kdml.fill_sequence((n,), s, d, ddt, out=out, device=ctx.device), (n,), dt)]


FILL_HANDLERS = {
    "Tile": _h_tile,
    "Pad": _h_pad,
    "CenterCropPad": _h_center_crop_pad,
    "ConstantOfShape": _h_constant_of_shape,
    "Range": _h_range,
}
