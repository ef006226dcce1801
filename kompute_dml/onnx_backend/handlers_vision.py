"""Device handlers of the convolutional networks' ONNX nodes beyond Conv and pooling: Resize and
Upsample (RESAMPLE2 through kdml.resize, ops/resample.py), DepthToSpace and SpaceToDepth
(DEPTH_TO_SPACE1 / SPACE_TO_DEPTH1, ops/depth_space.py: bit copies, booleans as UINT8), LRN
(LOCAL_RESPONSE_NORMALIZATION, ops/local_response_normalization.py) and Col2Im (FOLD, ops/fold.py:
image_shape and block_shape read on the host; float32 / float16 of at most 3 spatial dimensions).

Resize's roi, scales and sizes inputs (and Upsample's scales) are read on the host: constants and
host values as they are, a device-computed one makes the node run on the CPU (FallbackNeeded while
planning). Resize-10 and Upsample map their output coordinates asymmetrically (x_original =
x_resized / scale) and round nearest as onnxruntime's "simple" mode does (floor when upsampling,
ceil when downsampling; an axis of each kind stays on the CPU). Nearest with tf_crop_and_resize
and anything outside RESAMPLE2's float types raise FallbackNeeded (ops/resample.resize_rule refuses
them at placement where the model declares them)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

import kompute_dml as kdml
from kompute_dml.functional.resample import resize_target

from .graph import _attr, attr_text
from .handlers_nn import _opset
from .handlers_values import as_device, device_tensor, dml_numpy, packed
from .values import DeviceValue, FallbackNeeded, RunStats, _value_dtype, _value_shape

if TYPE_CHECKING:
    from .context import NodeContext




def _optional(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], i: int, stats: RunStats) -> np.ndarray | None:
    """Input i on the host, None where absent or empty (opset 13's unused scales)."""
    if i >= len(ins) or ins[i] is None or i >= len(node.input) or not node.input[i]:
        return None
    v = np.asarray(ctx.host(ins[i], stats)).reshape(-1)
    return v if v.size else None


def _legacy(scales: np.ndarray) -> str:
    """Resize-10's and Upsample's nearest rounding (onnxruntime's "simple") as a nearest_mode."""
    up = {s > 1 for s in scales.tolist() if s != 1}
    if len(up) > 1:
        raise FallbackNeeded("a legacy nearest Resize / Upsample that upsamples some axes and downsamples others")
    return "ceil" if up == {False} else "floor"


def _h_resize(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    dt = _value_dtype(ins[0])
    shape = tuple(_value_shape(ins[0]))
    if dt not in (np.float32, np.float16):
        raise FallbackNeeded(f"{node.op_type} of {dt} (RESAMPLE2 takes float32 / float16)")
    mode = attr_text(node, "mode", "nearest").lower()
    opset = _opset(ctx.prepared.model)
    kw: dict[str, Any] = {}
    if node.op_type == "Upsample" or opset < 11:  # Upsample 7-9, Resize 10: (X, scales) or a scales attribute
        scales = _optional(ctx, node, ins, 1, stats)
        if scales is None:
            scales = np.asarray(_attr(node, "scales", []), np.float32)
        kw.update(scales=scales, coordinate_transformation_mode="asymmetric")
        if mode == "nearest":
            kw["nearest_mode"] = _legacy(scales)
    else:
        ctm = attr_text(node, "coordinate_transformation_mode", "half_pixel")
        if ctm == "tf_crop_and_resize" and mode == "nearest":
            raise FallbackNeeded("nearest tf_crop_and_resize (kompute_dml extrapolates linear and cubic)")
        axes = _attr(node, "axes", None)
        kw.update(roi=_optional(ctx, node, ins, 1, stats), scales=_optional(ctx, node, ins, 2, stats),
                  sizes=_optional(ctx, node, ins, 3, stats), coordinate_transformation_mode=ctm,
                  nearest_mode=attr_text(node, "nearest_mode", "round_prefer_floor"),
                  cubic_coeff_a=float(_attr(node, "cubic_coeff_a", -0.75)),
                  exclude_outside=bool(int(_attr(node, "exclude_outside", 0))),
                  extrapolation_value=float(_attr(node, "extrapolation_value", 0.0)),
                  axes=None if axes is None else [int(a) for a in axes], antialias=bool(int(_attr(node, "antialias", 0))),
                  keep_aspect_ratio_policy=attr_text(node, "keep_aspect_ratio_policy", "stretch"))
        if kw["scales"] is not None and kw["sizes"] is not None:
            raise ValueError(f"Resize {node.name!r}: only one of scales and sizes may be given")
    if mode not in ("nearest", "linear", "cubic"):
        raise FallbackNeeded(f"{node.op_type} mode {mode!r}")
    r = len(shape)
    axes = [a % r for a in kw.get("axes") or range(r)] if r else []
    out_shape = tuple(resize_target(shape, kw.get("sizes"), kw.get("scales"), axes,
                                    kw.get("keep_aspect_ratio_policy", "stretch"))[0])
    if 0 in out_shape or 0 in shape:
        return [np.zeros(out_shape, dt)]
    x = as_device(ctx, ins[0], stats, node.input[0])
    out = ctx.out_tensor(out_shape, dt)
    try:
        y = kdml.resize(x.tensor, mode=mode, out=out, device=ctx.device, **kw)
    except kdml.UnsupportedError as e:  # more than 4 axes resample
        raise FallbackNeeded(str(e)) from None
    return [DeviceValue(y, out_shape, dt)]


def _h_depth_space(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    """DepthToSpace / SpaceToDepth (DCR or CRD) on DEPTH_TO_SPACE1 / SPACE_TO_DEPTH1: a bit copy."""
    dt, shape = _value_dtype(ins[0]), tuple(_value_shape(ins[0]))
    b = int(_attr(node, "blocksize", 0))
    if len(shape) != 4 or b < 1:
        raise ValueError(f"{node.op_type} {node.name!r}: a 4-D input and blocksize >= 1, got {shape} and {b}")
    n, c, h, w = shape
    to_space = node.op_type == "DepthToSpace"
    out_shape = (n, c // (b * b), h * b, w * b) if to_space else (n, c * b * b, h // b, w // b)
    if 0 in shape:
        return [np.zeros(out_shape, dt)]
    x = device_tensor(ctx, ins[0], stats, node.input[0])
    out = ctx.out_tensor(out_shape, dml_numpy(dt))
    fn = kdml.depth_to_space if to_space else kdml.space_to_depth
    return [DeviceValue(fn(x, b, attr_text(node, "mode", "DCR"), out=out, device=ctx.device), out_shape, dt)]


def _h_lrn(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    """LRN on LOCAL_RESPONSE_NORMALIZATION (CrossChannel): (N, C, D1, ..., Dk) with the spatial
    dimensions seen as one where k > 2 (a packed copy first where they do not merge)."""
    dt, shape = _value_dtype(ins[0]), tuple(_value_shape(ins[0]))
    if dt not in (np.float32, np.float16) or len(shape) < 3:
        raise FallbackNeeded(f"LRN of {dt} with {len(shape)} dimensions")
    if 0 in shape:
        return [np.zeros(shape, dt)]
    x = as_device(ctx, ins[0], stats, node.input[0])
    out = ctx.out_tensor(shape, dt)
    t, y = x.tensor, out
    if len(shape) > 4:
        x = packed(ctx, x, stats)
        flat = (shape[0], shape[1], 1, math.prod(shape[2:]))
        t, y = (kdml.Tensor.trusted(v.buffer, kdml.TensorDesc(kdml.DataType.from_numpy(dt), flat), v.offset)
                for v in (x.tensor, out))
    kdml.lrn(t, int(_attr(node, "size", 1)), alpha=float(_attr(node, "alpha", 0.0001)),
             beta=float(_attr(node, "beta", 0.75)), bias=float(_attr(node, "bias", 1.0)), out=y, device=ctx.device)
    return [DeviceValue(out, shape, dt)]


def _h_col2im(ctx: NodeContext, node: onnx.NodeProto, ins: list[Any], stats: RunStats) -> list[Any]:
    """Col2Im on FOLD: input (N, C x prod(block_shape), L), pads [begin..., end...]."""
    dt, shape = _value_dtype(ins[0]), tuple(_value_shape(ins[0]))
    image, block = (tuple(int(v) for v in np.asarray(ctx.host(v, stats)).reshape(-1)) for v in ins[1:3])
    d = len(block)
    if dt not in (np.float32, np.float16) or len(shape) != 3 or len(image) != d or not 1 <= d <= 3 or 0 in shape:
        raise FallbackNeeded(f"Col2Im of {dt} {shape}, image_shape {image}, block_shape {block}")
    pads = [int(p) for p in _attr(node, "pads", [0] * (2 * d))]
    strides = [int(v) for v in _attr(node, "strides", [1] * d)]
    dilations = [int(v) for v in _attr(node, "dilations", [1] * d)]
    if len(pads) != 2 * d:
        raise ValueError(f"Col2Im {node.name!r}: pads must hold {2 * d} values, got {pads}")
    k = math.prod(block)
    if k < 1 or shape[1] % k:
        raise ValueError(f"Col2Im {node.name!r}: input dimension 1 ({shape[1]}) is no multiple of prod(block_shape) {k}")
    out_shape = (shape[0], shape[1] // k, *image)
    out = ctx.out_tensor(out_shape, dt)
    kdml.fold(as_device(ctx, ins[0], stats, node.input[0]).tensor, image, block, strides=strides, dilations=dilations,
              start_padding=pads[:d], end_padding=pads[d:], out=out, device=ctx.device)
    return [DeviceValue(out, out_shape, np.dtype(dt))]


VISION_HANDLERS = {"LRN": _h_lrn, "Resize": _h_resize, "Upsample": _h_resize, "DepthToSpace": _h_depth_space,
                   "SpaceToDepth": _h_depth_space, "Col2Im": _h_col2im}
