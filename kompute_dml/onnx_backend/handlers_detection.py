"""Device handlers of the detection networks' ONNX nodes: RoiAlign (opsets 10 and 16) on ROI_ALIGN1
(ops/roi_align.py), MaxRoiPool on ROI_POOLING (ops/roi_pooling.py), MaxUnpool on MAX_UNPOOLING
(ops/max_unpooling.py).

RoiAlign maps as the DirectML execution provider does: SpatialScaleX = SpatialScaleY =
spatial_scale, InputPixelOffset 0.5 for half_pixel (opset 16's default) and 0 for
output_half_pixel (opset 10's only behaviour), OutputPixelOffset -0.5, OutOfBoundsInputValue 0,
sampling_ratio s as Minimum = Maximum = s (0: 1 and UINT_MAX), bilinear. Its int64 batch_indices
are read as their low words (a view, no copy: ops/roi_align.batch_indices_view); mode "max" stays
on the CPU (ops/roi_align._roi_rule). output_half_pixel takes regions below one pixel up to one, as
onnxruntime does (ROI_ALIGN1's `min_region_one` extension: detection exports of torchvision's aligned=False
RoIAlign have small proposals). MaxRoiPool's rois (R, 5) are read as (1, 1, R, 5).
MaxUnpool's int64 indices are taken as UINT64 (a negative one writes nothing); they count the
elements of the inferred shape ((in - 1) stride + kernel - pads per spatial axis); an output_shape
(read on the host) at least as large is filled with zeros (FILL_VALUE_CONSTANT) and the inferred
shape unpooled at its top-left corner, as onnx's reference does; 1-D inputs run as (N, C, 1, L);
more than 2 spatial axes stay on the CPU."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

import kompute_dml as kdml
from kompute_dml.ops.roi_align import UINT_MAX

from .graph import _attr, attr_text
from .handlers_math import _operands
from .handlers_nn import _opset
from .values import DeviceValue, FallbackNeeded, RunStats, _value_dtype, _value_shape

if TYPE_CHECKING:
    from .context import NodeContext


def _view(t: kdml.Tensor, shape: tuple[int, ...], strides: tuple[int, ...]) -> kdml.Tensor:
    return kdml.Tensor.trusted(t.buffer, kdml.TensorDesc(t.desc.data_type, shape, strides), t.offset)


def _h_roi_align(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    dt, shape = _value_dtype(ins[0]), tuple(_value_shape(ins[0]))
    rois = tuple(_value_shape(ins[1]))
    if dt not in (np.float32, np.float16) or len(shape) != 4 or len(rois) != 2 or rois[-1] != 4:
        raise FallbackNeeded(f"RoiAlign of {dt} {shape}, rois {rois}")
    if attr_text(node, "mode", "avg") != "avg":
        raise FallbackNeeded("RoiAlign mode max (ONNX's max is not ROI_ALIGN1's MAX)")
    default = "half_pixel" if _opset(ctx.prepared.model) >= 16 else "output_half_pixel"
    ctm = attr_text(node, "coordinate_transformation_mode", default)
    if ctm not in ("half_pixel", "output_half_pixel"):
        raise ValueError(f"RoiAlign {node.name!r}: coordinate_transformation_mode {ctm!r}")
    ratio = int(_attr(node, "sampling_ratio", 0))
    if ratio < 0:
        raise ValueError(f"RoiAlign {node.name!r}: sampling_ratio must be >= 0, got {ratio}")
    oh, ow = int(_attr(node, "output_height", 1)), int(_attr(node, "output_width", 1))
    out_shape = (rois[0], shape[1], oh, ow)
    if 0 in shape or 0 in out_shape:
        raise FallbackNeeded("an empty tensor")
    tx, tr, tb = _operands(ctx, node, ins[:3], stats)
    out = ctx.out_tensor(out_shape, dt)
    lo, hi = (ratio, ratio) if ratio else (1, UINT_MAX)
    y = kdml.roi_align(tx, tr, tb, (oh, ow), spatial_scale=float(_attr(node, "spatial_scale", 1.0)),
                       input_pixel_offset=0.5 if ctm == "half_pixel" else 0.0, min_samples=lo, max_samples=hi,
                       min_region_one=ctm == "output_half_pixel", out=out, device=ctx.device)
    return [DeviceValue(y, out_shape, dt)]


def _h_max_roi_pool(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    dt, shape = _value_dtype(ins[0]), tuple(_value_shape(ins[0]))
    rois = tuple(_value_shape(ins[1]))
    if dt not in (np.float32, np.float16) or len(shape) != 4 or len(rois) != 2 or rois[-1] != 5:
        raise FallbackNeeded(f"MaxRoiPool of {dt} {shape}, rois {rois}")
    ph, pw = (int(v) for v in _attr(node, "pooled_shape", []))
    out_shape = (rois[0], shape[1], ph, pw)
    tx, tr = _operands(ctx, node, ins[:2], stats)
    out = ctx.out_tensor(out_shape, dt)
    try:
        y = kdml.roi_pool(tx, tr, (ph, pw), spatial_scale=float(_attr(node, "spatial_scale", 1.0)), out=out, device=ctx.device)
    except kdml.UnsupportedError as e:  # a CPU device's loop bound
        raise FallbackNeeded(str(e)) from None
    return [DeviceValue(y, out_shape, dt)]


def _h_max_unpool(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    dt, shape = _value_dtype(ins[0]), tuple(_value_shape(ins[0]))
    d = len(shape) - 2
    if dt not in (np.float32, np.float16) or d not in (1, 2):
        raise FallbackNeeded(f"MaxUnpool of {dt} {shape}")
    kernel = [int(v) for v in _attr(node, "kernel_shape", [])]
    strides = [int(v) for v in _attr(node, "strides", [1] * d)]
    pads = [int(v) for v in _attr(node, "pads", [0] * (2 * d))]
    inferred = (*shape[:2], *((s - 1) * st + k - pads[a] - pads[a + d]
                              for a, (s, st, k) in enumerate(zip(shape[2:], strides, kernel))))
    out_shape = inferred
    if len(ins) > 2 and ins[2] is not None and node.input[2]:
        out_shape = tuple(int(v) for v in np.asarray(ctx.host(ins[2], stats)).reshape(-1))
    if (len(out_shape) != len(shape) or 0 in shape or min(inferred) < 1
            or any(o < i for o, i in zip(out_shape, inferred)) or out_shape[:2] != shape[:2]):
        raise FallbackNeeded(f"MaxUnpool to {out_shape} from {shape}")
    tx, ti = _operands(ctx, node, ins[:2], stats)
    out = ctx.out_tensor(out_shape, dt)
    y = out
    if out_shape != inferred:  # the indices count the inferred shape, unpooled at the output's top-left corner
        kdml.fill(out_shape, 0, kdml.DataType.from_numpy(dt), out=out, device=ctx.device)
        y = _view(out, inferred, out.desc.effective_strides)
    if d == 1:  # (N, C, L) as (N, C, 1, L): the flat indices are the same
        tx, ti, y = (_view(t, (*t.desc.sizes[:2], 1, t.desc.sizes[2]), (*t.desc.effective_strides[:2], 0,
                                                                       t.desc.effective_strides[2])) for t in (tx, ti, y))
    kdml.max_unpool(tx, ti, y.desc.sizes, out=y, device=ctx.device)
    return [DeviceValue(out, out_shape, dt)]


DETECTION_HANDLERS = {
    "RoiAlign": _h_roi_align,
    "MaxRoiPool": _h_max_roi_pool,
    "MaxUnpool": _h_max_unpool,
}
