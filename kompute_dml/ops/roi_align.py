"""DirectML's ROI_ALIGN1 (DML_ROI_ALIGN1_OPERATOR_DESC, feature level 4_0) and ROI_ALIGN
(DML_ROI_ALIGN_OPERATOR_DESC, 3_0: ROI_ALIGN1 with InputPixelOffset 0.5, OutputPixelOffset -0.5 and
AlignRegionsToCorners FALSE, as its page says): crops of the input (N, C, H, W), one per region
[x1, y1, x2, y2] of ROITensor taken from batch BatchIndicesTensor[r], resampled to the output's
(NumROIs, C, OutputHeight, OutputWidth), each output element reducing (AVERAGE or MAX) its samples.
ONNX RoiAlign (opsets 10 and 16) runs on ROI_ALIGN1 (onnx_backend/handlers_detection.py).

shaders/roi_align.comp, per output element (x = OutputTensor.Sizes[3], y = Sizes[2]): the region
scaled by SpatialScaleX / Y (float32 products), size = x2 - x1; n = clamp(ceil(|size| / outputSize),
Minimum, Maximum) samples per output along the axis; step = size / (outputSize n); sample s (s = o n
+ i, i < n) at (s - OutputPixelOffset) step + x1 - InputPixelOffset (AlignRegionsToCorners: step =
size / (outputSize n - 1), 0 where that is 0, and no OutputPixelOffset: the first and last samples
on the region's corners). A sample outside [-1, W] x [-1, H] reads OutOfBoundsInputValue, else its
coordinates are clamped to [0, W - 1] x [0, H - 1] and interpolated bilinearly as onnxruntime does
(hy hx v00 + hy lx v01 + ly hx v10 + ly lx v11, products and sums rounded once each, left to right)
or rounded half up (NEAREST_NEIGHBOR). AVERAGE: the float32 sum of the samples, X outer and Y inner
(the page's loops), each addition rounded once, then one division by the sample count: the bits of
that order (tests/test_roi_align.py's reference follows it); MAX: the largest sample, the first NaN
winning. FLOAT16 decoded exactly, computed in float32, rounded once.

Where the page is silent or slips, kompute_dml's reading (docs/roi_align.md):
- its pseudo-code clamps scaledRegionSize / outputSize to the sample bounds without rounding: samples
  are counted, so the quotient's ceiling (onnxruntime's adaptive grid, which the DirectML execution
  provider maps onto MinimumSamplesPerOutput 1 / MaximumSamplesPerOutput UINT_MAX); of |size|, as
  the page calls inverted regions mirrors;
- its loops run `to <=` outputTensorSample + count (count + 1 samples): read as `<`, count samples;
- outputSampleToInputScaleY = scaledRegionSizeX / outputSampleSizeX: read as Y over Y;
- OutOfBoundsInputValue applies to samples outside [-1, W] x [-1, H] (onnxruntime's rule), samples
  within are clamped to the edge (the execution provider passes 0, onnxruntime's value);
- a batch index outside [0, BatchCount) (undefined behaviour on the page) gives
  OutOfBoundsInputValue for the region's every element;
- MinimumSamplesPerOutput must be >= 1 and <= MaximumSamplesPerOutput (InvalidArgumentError
  naming minimum_samples_per_output); kompute_dml caps both at MAX_SAMPLES (240) per axis, so an
  invocation's loops stay within llvmpipe's loop limit (runtime/llvmpipe.py): regions wider than
  240 output widths take 240 samples per output there.
Tensor support as the pages give it: input, ROIs and output FLOAT32 / FLOAT16 (one type), ROIs 2 to 4
dimensions ({NumROIs, 4} after leading 1s), batch indices UINT32 of 1 to 4 dimensions ({NumROIs}
after leading 1s). Validation, in order: the table, one data type, the shapes, the enums, the sample
bounds, non-overlapping output, 32-bit addressing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..core.dtypes import DataType
from ..core.errors import invalid
from ..core.ints import as_int
from ..core.layout import check_no_overlap
from ..core.registry import FL, FLOATS, OperatorSupport, row
from ..core.tensor_desc import TensorDesc
from ..device.memory import Tensor
from ..functional import _packed, check_out, compile_cached, pooled_empty
from ..functional.elementwise import _operands
from ..runtime import DispatchPlan, grid_for
from . import contract
from .base import CompiledOperator, validate_tensors
from .elementwise_plan import check_addressable
from .onnx_types import float_input
from .reduce import ReduceFunction
from .resample import InterpolationMode
from .spec import OnnxOp, OperatorSpec

if TYPE_CHECKING:
    from ..device.device import Device

_U32 = frozenset({DataType.UINT32})
UINT_MAX = 0xFFFFFFFF
MAX_SAMPLES = 240  # samples per output and axis kompute_dml takes (240^2 + 240 loop iterations < 65,535)


def _table(level: FL) -> Any:
    return row(level, ("input_tensor", "input", (4, 4), FLOATS), ("roi_tensor", "input", (2, 4), FLOATS),
               ("batch_indices_tensor", "input", (1, 4), _U32), ("output_tensor", "output", (4, 4), FLOATS))


ROI_ALIGN = OperatorSupport("ROI_ALIGN", 139, (_table(FL.FL_3_0),))
ROI_ALIGN1 = OperatorSupport("ROI_ALIGN1", 149, (_table(FL.FL_4_0),))


@dataclass(frozen=True)
class RoiAlign1Desc:
    """DML_ROI_ALIGN1_OPERATOR_DESC { InputTensor, ROITensor, BatchIndicesTensor, OutputTensor,
    ReductionFunction, InterpolationMode, SpatialScaleX, SpatialScaleY, InputPixelOffset,
    OutputPixelOffset, OutOfBoundsInputValue, MinimumSamplesPerOutput, MaximumSamplesPerOutput,
    AlignRegionsToCorners }, and kompute_dml's extension `min_region_one`: a region narrower or shorter than
    one pixel (after the spatial scale) is taken as one pixel wide / high from its start, as onnxruntime's
    RoiAlign does in its output_half_pixel mode (torchvision's aligned=False export)."""

    input_tensor: TensorDesc
    roi_tensor: TensorDesc
    batch_indices_tensor: TensorDesc
    output_tensor: TensorDesc
    reduction_function: ReduceFunction = ReduceFunction.AVERAGE
    interpolation_mode: InterpolationMode = InterpolationMode.LINEAR
    spatial_scale_x: float = 1.0
    spatial_scale_y: float = 1.0
    input_pixel_offset: float = 0.5
    output_pixel_offset: float = -0.5
    out_of_bounds_input_value: float = 0.0
    minimum_samples_per_output: int = 1
    maximum_samples_per_output: int = UINT_MAX
    align_regions_to_corners: bool = False
    min_region_one: bool = False


@dataclass(frozen=True)
class RoiAlignDesc:
    """DML_ROI_ALIGN_OPERATOR_DESC { InputTensor, ROITensor, BatchIndicesTensor, OutputTensor,
    ReductionFunction, InterpolationMode, SpatialScaleX, SpatialScaleY, OutOfBoundsInputValue,
    MinimumSamplesPerOutput, MaximumSamplesPerOutput }."""

    input_tensor: TensorDesc
    roi_tensor: TensorDesc
    batch_indices_tensor: TensorDesc
    output_tensor: TensorDesc
    reduction_function: ReduceFunction = ReduceFunction.AVERAGE
    interpolation_mode: InterpolationMode = InterpolationMode.LINEAR
    spatial_scale_x: float = 1.0
    spatial_scale_y: float = 1.0
    out_of_bounds_input_value: float = 0.0
    minimum_samples_per_output: int = 1
    maximum_samples_per_output: int = UINT_MAX


def check_trailing(t: TensorDesc, keep: int, field: str, want: tuple[int, ...]) -> None:
    """t's sizes must be `want` after leading 1s."""
    lead = t.sizes[:t.dimension_count - keep]
    if t.dimension_count < keep or any(s != 1 for s in lead) or t.sizes[t.dimension_count - keep:] != want:
        raise invalid(f"{field}.sizes", f"must be {want} after leading 1s, got {t.sizes}")


def float_field(desc: Any, field: str) -> float:
    v = getattr(desc, field)
    if isinstance(v, bool) or not isinstance(v, (int, float, np.floating, np.integer)):
        raise invalid(field, f"must be a float, got {v!r}")
    return float(np.float32(v))


def _compile(device: Device, desc: Any, support: OperatorSupport) -> CompiledOperator:
    validate_tensors(support, device.feature_level, desc, support.fields, support.outputs)
    x, r, b, y = desc.input_tensor, desc.roi_tensor, desc.batch_indices_tensor, desc.output_tensor
    for name, t in (("roi_tensor", r), ("output_tensor", y)):
        if t.data_type != x.data_type:
            raise invalid(f"{name}.data_type", f"must equal input_tensor's ({x.data_type.name}), got {t.data_type.name}")
    rois, c, oh, ow = y.sizes
    if c != x.sizes[1]:
        raise invalid("output_tensor.sizes", f"must be (NumROIs, ChannelCount {x.sizes[1]}, H, W), got {y.sizes}")
    check_trailing(r, 2, "roi_tensor", (rois, 4))
    check_trailing(b, 1, "batch_indices_tensor", (rois,))
    fn, mode, lo, hi = check_sampling(desc)
    floats = {f: float_field(desc, f) for f in ("spatial_scale_x", "spatial_scale_y", "input_pixel_offset",
                                           "output_pixel_offset", "out_of_bounds_input_value") if hasattr(desc, f)}
    align = bool(getattr(desc, "align_regions_to_corners", False))
    one = bool(getattr(desc, "min_region_one", False))
    check_no_overlap(y.sizes, y.effective_strides, "output_tensor")
    check_addressable(support.fields, (x, r, b, y))
    fam = contract.detection.ROI_ALIGN
    unit = x.data_type.size
    total = y.element_count
    rs, bs = r.effective_strides[-2:], b.effective_strides[-1]
    push = fam.pack(x_off=0, r_off=0, b_off=0, y_off=0, total=total, c=c, ih=x.sizes[2], iw=x.sizes[3], oh=oh, ow=ow,
                    n=x.sizes[0], xs=list(x.effective_strides), rs=list(rs), bs=bs, ys=list(y.effective_strides),
                    scale_x=floats["spatial_scale_x"], scale_y=floats["spatial_scale_y"],
                    in_off=floats.get("input_pixel_offset", 0.5), out_off=floats.get("output_pixel_offset", -0.5),
                    oob=floats["out_of_bounds_input_value"], min_s=lo, max_s=hi,
                    flags=int(fn == ReduceFunction.MAX) | 2 * int(mode == InterpolationMode.NEAREST_NEIGHBOR) | 4 * int(align)
                    | 8 * int(one))
    plan = DispatchPlan(variant=fam.name(t="f16" if x.data_type == DataType.FLOAT16 else "f32"), bindings=(0, 1, 2, 3),
                        push=push, writes=(3,), groups=grid_for(total, 256, device.limits["max_compute_work_group_count"][0]),
                        offset_slots=fam.slots(x_off=(0, unit), r_off=(1, unit), b_off=(2, 4), y_off=(3, unit)))
    return CompiledOperator(device, desc, support, support.inputs, support.outputs, [plan])


def check_sampling(desc: Any) -> tuple[ReduceFunction, InterpolationMode, int, int]:
    """ROI_ALIGN1's rules for the enums and the sample bounds (InvalidArgumentErrors naming the field), shared
    with ROI_ALIGN_GRAD: (function, mode, the bounds clamped to MAX_SAMPLES)."""
    try:
        fn = ReduceFunction(desc.reduction_function)
    except ValueError as e:
        raise invalid("reduction_function", str(e)) from None
    try:
        mode = InterpolationMode(desc.interpolation_mode)
    except ValueError as e:
        raise invalid("interpolation_mode", str(e)) from None
    if fn not in (ReduceFunction.AVERAGE, ReduceFunction.MAX):
        raise invalid("reduction_function", f"must be AVERAGE or MAX, got {fn.name}")
    if mode not in (InterpolationMode.NEAREST_NEIGHBOR, InterpolationMode.LINEAR):
        raise invalid("interpolation_mode", f"must be NEAREST_NEIGHBOR or LINEAR, got {mode.name}")
    lo = as_int(desc.minimum_samples_per_output, "minimum_samples_per_output")
    hi = as_int(desc.maximum_samples_per_output, "maximum_samples_per_output")
    if not 0 <= hi <= UINT_MAX:
        raise invalid("maximum_samples_per_output", f"must be a UINT, got {hi}")
    if not 1 <= lo <= hi:
        raise invalid("minimum_samples_per_output", f"must be >= 1 and <= maximum_samples_per_output ({hi}), got {lo}")
    return fn, mode, min(lo, MAX_SAMPLES), min(hi, MAX_SAMPLES)


def compile_roi_align1(device: Device, desc: RoiAlign1Desc) -> CompiledOperator:
    return _compile(device, desc, ROI_ALIGN1)


def compile_roi_align(device: Device, desc: RoiAlignDesc) -> CompiledOperator:
    return _compile(device, desc, ROI_ALIGN)


# ---- functional helper (exported as kdml.<name>) -----------------------------------------
def batch_indices_view(t: Tensor) -> Tensor:
    """Batch indices as UINT32 (the operator's type): UINT32 as they are, INT32 as their bits (a
    negative index is then out of range), INT64 / UINT64 as their low words (indices below 2^32:
    a view with doubled strides, no copy; ONNX RoiAlign's int64 batch_indices)."""
    d = t.desc
    if d.data_type == DataType.UINT32:
        return t
    if d.data_type == DataType.INT32:
        return Tensor.trusted(t.buffer, TensorDesc(DataType.UINT32, d.sizes, d.effective_strides), t.offset)
    if d.data_type in (DataType.INT64, DataType.UINT64):
        return Tensor.trusted(t.buffer, TensorDesc(DataType.UINT32, d.sizes, tuple(2 * s for s in d.effective_strides)),
                              t.offset)
    raise invalid("batch_indices", f"must hold integers (UINT32, INT32, INT64 or UINT64), got {d.data_type.name}")


def roi_align(x: Any, rois: Any, batch_indices: Any, output_size: Sequence[int], *, mode: str = "avg",
              interpolation: str = "linear", spatial_scale: float | Sequence[float] = 1.0, input_pixel_offset: float = 0.5,
              output_pixel_offset: float = -0.5, out_of_bounds_value: float = 0.0, min_samples: int = 1,
              max_samples: int = UINT_MAX, align_corners: bool = False, min_region_one: bool = False,
              out: Tensor | None = None, device: Device | None = None) -> Tensor:
    """DML_ROI_ALIGN1: x (N, C, H, W), rois (R, 4) [x1, y1, x2, y2], batch_indices (R,) integers ->
    (R, C, *output_size); mode "avg" / "max", interpolation "linear" / "nearest"; spatial_scale one
    value or (x, y). ONNX RoiAlign's sampling_ratio s: min_samples = max_samples = s (0: 1 and UINT_MAX);
    `min_region_one`: regions below one pixel taken as one (its output_half_pixel mode)."""
    if mode not in ("avg", "max") or interpolation not in ("linear", "nearest"):
        raise invalid("mode", f"mode must be 'avg' or 'max' and interpolation 'linear' or 'nearest', got {mode!r}, "
                              f"{interpolation!r}")
    if isinstance(batch_indices, (np.ndarray, list, tuple)):
        bi = np.asarray(batch_indices)
        if bi.dtype.kind not in "iu" or (bi.size and (bi.min() < 0 or bi.max() > UINT_MAX)):
            raise invalid("batch_indices", "must hold integers in [0, 2^32)")
        batch_indices = bi.astype(np.uint32)
    dev, (tx, tr) = _operands((x, rois), ("x", "rois"), device)
    (tb,) = _operands((batch_indices,), ("batch_indices",), dev)[1]
    tb = batch_indices_view(tb)
    oh, ow = (as_int(v, "output_size") for v in output_size)
    sx, sy = (spatial_scale, spatial_scale) if isinstance(spatial_scale, (int, float)) else tuple(spatial_scale)
    shape = (tr.desc.sizes[0], tx.desc.sizes[1], oh, ow)
    dt = tx.desc.data_type
    if out is not None:
        check_out(out, dev, shape, dt)
    od = out.desc if out is not None else _packed(dt, shape)
    desc = RoiAlign1Desc(tx.desc, tr.desc, tb.desc, od, ReduceFunction.MAX if mode == "max" else ReduceFunction.AVERAGE,
                         InterpolationMode.NEAREST_NEIGHBOR if interpolation == "nearest" else InterpolationMode.LINEAR,
                         float(sx), float(sy), float(input_pixel_offset), float(output_pixel_offset),
                         float(out_of_bounds_value), int(min_samples), int(max_samples), bool(align_corners),
                         bool(min_region_one))
    op = compile_cached(dev, desc)
    if out is None:
        out = pooled_empty(dev, od)
    op.execute([tx, tr, tb], [out])
    return out


def _tensors() -> tuple[TensorDesc, ...]:
    f32 = DataType.FLOAT32
    return (TensorDesc(f32, (1, 2, 5, 5)), TensorDesc(f32, (3, 4)), TensorDesc(DataType.UINT32, (3,)),
            TensorDesc(f32, (3, 2, 2, 2)))


def _roi_rule(t: Any) -> str:
    """ONNX RoiAlign on ROI_ALIGN1: float32 / float16 data; mode "max" stays on the CPU (ONNX's
    reference takes, per sample, the largest of the four weighted corner terms; ROI_ALIGN1's MAX
    the largest interpolated sample, as its page says)."""
    why = float_input(t)
    mode = t.attr("mode", b"avg")
    mode = mode.decode() if isinstance(mode, bytes) else str(mode)
    return why or (f"mode {mode!r}: ONNX's max is not ROI_ALIGN1's MAX" if mode != "avg" else "")


SPECS = (OperatorSpec(RoiAlign1Desc, ROI_ALIGN1, compile_roi_align1, (contract.detection.ROI_ALIGN,), helpers=("roi_align",),
                      onnx=(OnnxOp("RoiAlign", "", "roi_align", check=_roi_rule),), example=lambda: RoiAlign1Desc(*_tensors())),
         OperatorSpec(RoiAlignDesc, ROI_ALIGN, compile_roi_align, (contract.detection.ROI_ALIGN,),
                      example=lambda: RoiAlignDesc(*_tensors())))
