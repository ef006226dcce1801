"""DirectML's ROI_ALIGN_GRAD (DML_ROI_ALIGN_GRAD_OPERATOR_DESC, DML_OPERATOR_TYPE 150, feature level
4_1): the backward pass of ROI_ALIGN / ROI_ALIGN1 (ops/roi_align.py). OutputGradientTensor, the
gradient with respect to InputTensor, is the exact adjoint of kompute_dml's ROI_ALIGN1: the same
samples (counts, steps, coordinates, validity, bilinear weights) recomputed bit for bit from the ROIs
on the device by shaders/roi_align_common.glsl, which shaders/roi_align.comp includes too.

shaders/grad_roi_align.comp (contract.grad_roi.GRAD_ROI), an invocation per OutputGradient element
(n, c, y, x) gathering (no scatter, no atomics: deterministic): for each region r with
BatchIndices[r] == n, ascending, the samples of each axis that read column x (row y): one contiguous
range, since a sample's coordinate, clamped cell and nearest cell are monotone in its index (every
step rounded monotonically), found by binary search on the exact coordinates; then for each sample
(X index ascending, then Y ascending) and each of its corners 00, 01, 10, 11 that is (y, x), in that
order, acc += w * gs, each product and sum rounded once from +0 (w = the forward's rounded weight
hy hx, hy lx, ly hx, ly lx; NEAREST_NEIGHBOR: one corner, weight 1, acc += gs):
- AVERAGE: gs = InputGradient[r, c, oy, ox] / (nX nY), correctly rounded (f32_exact.glsl): the
  forward divides its sum once by the sample count.
- MAX: gs = InputGradient[r, c, oy, ox] for the sample the forward's maximum took, nothing for the
  others: the first largest sample in the forward's order (X outer, Y inner), the first NaN winning,
  as ROI_ALIGN1's MAX. A first dispatch (`win`, MAX only) stores that sample per InputGradient
  element in the operator's scratch, reading InputTensor. The maximum's gradient flows through the
  winning sample's bilinear weights into its (up to) four input elements; a winner outside the
  image (OutOfBoundsInputValue) passes nothing on.
Regions whose batch index is outside [0, BatchCount) (undefined on the page; ROI_ALIGN1 gives
OutOfBoundsInputValue there) pass nothing on. An element no sample reads gets +0. FLOAT16 is decoded
exactly, summed in float32 and rounded once. The device's float32 + and * (correctly rounded
everywhere; a GPU may flush subnormals) make the bits of that order: tests/test_grad_roi_align.py's
numpy reference follows it; against float64 the error of an element is at most m u sum |w gs| for m
terms (u = 2^-24), FLOAT16 adding its one rounding.

Loop limit: a CPU device's invocation stops after 65,535 loop iterations (runtime/llvmpipe.py). The
host refuses (UnsupportedError) a descriptor whose regions' loop and binary searches alone could pass
CPU_WALK_MAX; the samples an element sums depend on the ROIs' values, so the shader counts them and
an element whose walk would pass the budget is written NaN, never a partial sum (regions a small
fraction of a pixel upsampled to large outputs with many samples per output; GPUs have no budget).

Where the page is silent or slips, kompute_dml's reading:
- OutputROIGradientTensor is refused (UnsupportedError naming output_roi_gradient_tensor): the page
  gives it only as pseudo-code "assuming MinimumSamplesPerOutput == 1 and MaximumSamplesPerOutput ==
  1", without the spatial scales, pixel offsets, sample steps, clamping or out-of-bounds rule, and
  weighs the image gradient by (inputWidth - inputGradientCoordinate.x), a mix of input sizes and
  output coordinates that is not the derivative of ROI_ALIGN1 with respect to x1 / x2: no exact
  reading of it exists to test against. OutputGradientTensor must therefore be given.
- InputTensor is required for MAX (the page: "must be supplied ... when ReductionFunction ==
  DML_REDUCE_FUNCTION_MAX"), InvalidArgumentError naming input_tensor; AVERAGE never reads it.
- Sizes, "typically" the forward's on the page, are required exactly: InputGradientTensor (NumROIs,
  C, OutputHeight, OutputWidth), OutputGradientTensor (BatchCount, C, Height, Width), InputTensor's
  sizes equal to OutputGradientTensor's; ROITensor {NumROIs, 4} after leading 1s, BatchIndicesTensor
  {NumROIs} after leading 1s, as ROI_ALIGN1's.
- OutOfBoundsInputValue is not a field: the forward's value only matters to MAX's winner (a sample
  outside the image reads it): 0, as the DirectML execution provider passes for ONNX.
- The page's example uses nearest-neighbour sampling with scaling factors it does not give in
  fields: tests/test_grad_roi_align.py reproduces its numbers with the forward parameters that yield
  its forward output.
Everything else (sample counts, Minimum / MaximumSamplesPerOutput bounds and kompute_dml's cap of
240 per axis, offsets, AlignRegionsToCorners) is ROI_ALIGN1's (docs/roi_align.md). Validation, in
order: the table, one data type, the outputs, the shapes, the enums and sample bounds (ROI_ALIGN1's
rules), a non-overlapping output, 32-bit addressing, the CPU loop bound.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..core.dtypes import DataType
from ..core.errors import UnsupportedError, invalid
from ..core.layout import check_no_overlap
from ..core.registry import FL, FLOATS, OperatorSupport, row
from ..core.tensor_desc import TensorDesc
from ..device.memory import Tensor
from ..runtime import DispatchPlan, grid_for
from ..runtime.llvmpipe import CPU_WALK_MAX
from . import contract
from .base import CompiledOperator, validate_tensors
from .elementwise_plan import check_addressable
from .reduce import ReduceFunction
from .resample import InterpolationMode
from .roi_align import UINT_MAX, check_sampling, check_trailing, float_field
from .spec import OperatorSpec

if TYPE_CHECKING:
    from ..device.device import Device

ROI_ALIGN_GRAD = OperatorSupport("ROI_ALIGN_GRAD", 150, (
    row(FL.FL_4_1, ("input_tensor", "optional input", (4, 4), FLOATS), ("input_gradient_tensor", "input", (4, 4), FLOATS),
        ("roi_tensor", "input", (2, 4), FLOATS), ("batch_indices_tensor", "input", (1, 4), frozenset({DataType.UINT32})),
        ("output_gradient_tensor", "optional output", (4, 4), FLOATS),
        ("output_roi_gradient_tensor", "optional output", (2, 4), FLOATS)),))


@dataclass(frozen=True)
class RoiAlignGradDesc:
    """DML_ROI_ALIGN_GRAD_OPERATOR_DESC { InputTensor, InputGradientTensor, ROITensor, BatchIndicesTensor,
    OutputGradientTensor, OutputROIGradientTensor, ReductionFunction, InterpolationMode, SpatialScaleX,
    SpatialScaleY, InputPixelOffset, OutputPixelOffset, MinimumSamplesPerOutput, MaximumSamplesPerOutput,
    AlignRegionsToCorners }."""

    input_tensor: TensorDesc | None
    input_gradient_tensor: TensorDesc
    roi_tensor: TensorDesc
    batch_indices_tensor: TensorDesc
    output_gradient_tensor: TensorDesc | None
    output_roi_gradient_tensor: TensorDesc | None = None
    reduction_function: ReduceFunction = ReduceFunction.AVERAGE
    interpolation_mode: InterpolationMode = InterpolationMode.LINEAR
    spatial_scale_x: float = 1.0
    spatial_scale_y: float = 1.0
    input_pixel_offset: float = 0.5
    output_pixel_offset: float = -0.5
    minimum_samples_per_output: int = 1
    maximum_samples_per_output: int = UINT_MAX
    align_regions_to_corners: bool = False


def search_iterations(rois: int, oh: int, ow: int, hi: int) -> int:
    """An invocation's loop iterations before any sample: the region loop and, per region and axis,
    two binary searches over at most size x hi samples."""
    steps = 2 * math.ceil(math.log2(ow * hi + 1)) + 2 * math.ceil(math.log2(oh * hi + 1))
    return rois * (1 + steps)


def compile_roi_align_grad(device: Device, desc: RoiAlignGradDesc) -> CompiledOperator:
    support = ROI_ALIGN_GRAD
    validate_tensors(support, device.feature_level, desc, support.fields, support.outputs)
    x, g, r, b = desc.input_tensor, desc.input_gradient_tensor, desc.roi_tensor, desc.batch_indices_tensor
    y, yr = desc.output_gradient_tensor, desc.output_roi_gradient_tensor
    for name, t in (("input_tensor", x), ("roi_tensor", r), ("output_gradient_tensor", y), ("output_roi_gradient_tensor", yr)):
        if t is not None and t.data_type != g.data_type:
            raise invalid(f"{name}.data_type", f"must equal input_gradient_tensor's ({g.data_type.name}), got {t.data_type.name}")
    if y is None and yr is None:
        raise invalid("output_gradient_tensor", "is required when output_roi_gradient_tensor is absent (at least one output)")
    if yr is not None:
        raise UnsupportedError("output_roi_gradient_tensor: ROI_ALIGN_GRAD's gradient with respect to the ROIs is not "
                               "supported (the page defines it only as approximate pseudo-code: ops/grad_roi_align.py)")
    assert y is not None
    rois, c, oh, ow = g.sizes
    if y.sizes[1] != c:
        raise invalid("output_gradient_tensor.sizes", f"must be (BatchCount, ChannelCount {c}, H, W), got {y.sizes}")
    if x is not None and x.sizes != y.sizes:
        raise invalid("input_tensor.sizes", f"must equal output_gradient_tensor's {y.sizes}, got {x.sizes}")
    check_trailing(r, 2, "roi_tensor", (rois, 4))
    check_trailing(b, 1, "batch_indices_tensor", (rois,))
    fn, mode, lo, hi = check_sampling(desc)
    if fn == ReduceFunction.MAX and x is None:
        raise invalid("input_tensor", "is required when reduction_function is MAX")
    floats = {f: float_field(desc, f) for f in ("spatial_scale_x", "spatial_scale_y", "input_pixel_offset", "output_pixel_offset")}
    align = bool(desc.align_regions_to_corners)
    check_no_overlap(y.sizes, y.effective_strides, "output_gradient_tensor")
    present = [(f, t) for f, t in zip(support.fields, (x, g, r, b, y)) if t is not None]
    check_addressable([f for f, _ in present], [t for _, t in present])
    cpu = device.device_type == "cpu"
    if cpu and search_iterations(rois, oh, ow, hi) > CPU_WALK_MAX:
        raise UnsupportedError(f"input_gradient_tensor: {rois} regions of {oh} x {ow} outputs take more loop iterations per "
                               f"element than a CPU device's loop limit allows ({CPU_WALK_MAX}: runtime/llvmpipe.py)")
    is_max = fn == ReduceFunction.MAX
    n, _, ih, iw = y.sizes
    f32bits = np.array([floats["spatial_scale_x"], floats["spatial_scale_y"]], np.float32).view(np.uint32)
    words = np.array([y.element_count, g.element_count, c, n, oh, ow, rois, *g.effective_strides, *r.effective_strides[-2:],
                      b.effective_strides[-1], *y.effective_strides, *f32bits, CPU_WALK_MAX if cpu else UINT_MAX], np.uint32)
    fam = contract.grad_roi.GRAD_ROI
    unit = g.data_type.size
    xs = x.effective_strides if x is not None else (0, 0, 0, 0)
    push = fam.pack(x_off=0, g_off=0, r_off=0, b_off=0, y_off=0, ih=ih, iw=iw, xs=list(xs), in_off=floats["input_pixel_offset"],
                    out_off=floats["output_pixel_offset"], oob=0.0, min_s=lo, max_s=hi,
                    flags=int(is_max) | 2 * int(mode == InterpolationMode.NEAREST_NEIGHBOR) | 4 * int(align))
    t = "f16" if g.data_type == DataType.FLOAT16 else "f32"
    k = len(support.fields)  # constants: the geometry (k), MAX's winners (k + 1)
    xi = 0 if x is not None else None
    slots = fam.slots(g_off=(1, unit), r_off=(2, unit), b_off=(3, 4), y_off=(4, unit), **({"x_off": (0, unit)} if xi == 0 else {}))
    maxg = device.limits["max_compute_work_group_count"][0]
    consts: list[Tensor] = [device.tensor(words)]
    plans = []
    if is_max:
        consts.append(Tensor.scratch(device, TensorDesc(DataType.UINT32, (g.element_count,))))
        plans.append(DispatchPlan(variant=fam.name(k="win", t=t), bindings=(xi, 1, 2, 3, None, k + 1, k), push=push,
                                  writes=(k + 1,), groups=grid_for(g.element_count, 256, maxg), offset_slots=slots))
    plans.append(DispatchPlan(variant=fam.name(k="gather", t=t), bindings=(None, 1, 2, 3, 4, k + 1 if is_max else None, k),
                              push=push, writes=(4,), groups=grid_for(y.element_count, 256, maxg), offset_slots=slots))
    return CompiledOperator(device, desc, support, support.inputs, support.outputs, plans, constants=consts)


def _example(field: str | None = None) -> RoiAlignGradDesc:
    """Every supported tensor present; `output_roi_gradient_tensor`: that output alone (refused)."""
    f32 = DataType.FLOAT32
    x = TensorDesc(f32, (1, 2, 5, 5))
    desc = RoiAlignGradDesc(x, TensorDesc(f32, (3, 2, 2, 2)), TensorDesc(f32, (3, 4)), TensorDesc(DataType.UINT32, (3,)), x)
    if field == "output_roi_gradient_tensor":
        return RoiAlignGradDesc(x, desc.input_gradient_tensor, desc.roi_tensor, desc.batch_indices_tensor, None,
                                TensorDesc(f32, (3, 4)))
    return desc


SPECS = (OperatorSpec(RoiAlignGradDesc, ROI_ALIGN_GRAD, compile_roi_align_grad, (contract.grad_roi.GRAD_ROI,),
                      example=_example, field_example=_example,
                      tied_fields=("output_gradient_tensor", "output_roi_gradient_tensor")),)
