"""DirectML's ROI_POOLING (DML_ROI_POOLING_OPERATOR_DESC, feature level 1_0): the maximum of the
input (N, C, H, W) over each bin of a PooledSize grid laid over each region of interest, giving
(NumROIs, C, PooledSize.Height, PooledSize.Width). ONNX MaxRoiPool runs on it
(onnx_backend/handlers_detection.py).

shaders/roi_pooling.comp, per output element (r, c, Y, X), the page's equations: x1 =
round(RoiX1 * SpatialScale) (a float32 product, rounded half away from zero as onnxruntime's
std::round), RegionWidth = x2 - x1 + 1, StartX = (X * RegionWidth) / PooledSize.Width + x1, EndX =
((X + 1) * RegionWidth + PooledSize.Width - 1) / PooledSize.Width + x1 (exact integer arithmetic),
both clamped to [0, InputWidth]; the bin is [StartX, EndX) x [StartY, EndY). The maximum is exact:
the first largest element in row-major order, the first NaN winning (as MAX_POOLING's).

Where the page is silent, kompute_dml's reading (as onnxruntime's MaxRoiPool, docs/roi_pooling.md):
the region sizes are taken as at least 1 (the page asks x2 >= x1, y2 >= y1 of the values); a bin
left empty by the clamping gives 0; the batch index (a float) is truncated toward zero, and one
outside [0, BatchCount) gives 0 for the region. Coordinates beyond +-2^28 after scaling (and NaN, as
-2^28) are clamped there. PooledSize beyond 32,767 per axis is refused (UnsupportedError naming
pooled_size: the exact bin arithmetic keeps 32-bit products). On CPU devices a bin of more than
CPU_WALK_MAX elements could outrun llvmpipe's loop limit: inputs whose H x W exceeds it are refused
there (UnsupportedError naming input_tensor).

Tensor support (the page's table, read in its English version as far as the search showed it, the
rest from DirectML's other ROI operators): InputTensor, ROITensor and OutputTensor 4 dimensions,
FLOAT32 and FLOAT16, one data type; ROITensor {1, 1, NumROIs, 5} ([BatchID, x1, y1, x2, y2]).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..core.dtypes import DataType
from ..core.errors import UnsupportedError, invalid
from ..core.ints import as_int
from ..core.layout import check_no_overlap
from ..core.registry import FL, FLOATS, OperatorSupport, row
from ..core.tensor_desc import TensorDesc
from ..device.memory import Tensor
from ..functional import run_into
from ..functional.elementwise import _operands
from ..runtime import DispatchPlan, grid_for
from ..runtime.llvmpipe import CPU_WALK_MAX
from . import contract
from .base import CompiledOperator, validate_tensors
from .elementwise_plan import check_addressable
from .onnx_types import float_input
from .spec import OnnxOp, OperatorSpec

if TYPE_CHECKING:
    from ..device.device import Device

ROI_POOLING = OperatorSupport("ROI_POOLING", 59, (
    row(FL.FL_1_0, ("input_tensor", "input", (4, 4), FLOATS), ("roi_tensor", "input", (4, 4), FLOATS),
        ("output_tensor", "output", (4, 4), FLOATS)),))
MAX_POOLED = 32767


@dataclass(frozen=True)
class RoiPoolingDesc:
    """DML_ROI_POOLING_OPERATOR_DESC { InputTensor, ROITensor, OutputTensor, SpatialScale,
    PooledSize }; PooledSize is DML_SIZE_2D (Width, Height): here (height, width), as the output's
    last two sizes."""

    input_tensor: TensorDesc
    roi_tensor: TensorDesc
    output_tensor: TensorDesc
    spatial_scale: float
    pooled_size: Sequence[int]


def compile_roi_pooling(device: Device, desc: RoiPoolingDesc) -> CompiledOperator:
    support = ROI_POOLING
    validate_tensors(support, device.feature_level, desc, support.fields, support.outputs)
    x, r, y = desc.input_tensor, desc.roi_tensor, desc.output_tensor
    for name, t in (("roi_tensor", r), ("output_tensor", y)):
        if t.data_type != x.data_type:
            raise invalid(f"{name}.data_type", f"must equal input_tensor's ({x.data_type.name}), got {t.data_type.name}")
    size = tuple(desc.pooled_size) if isinstance(desc.pooled_size, (tuple, list)) else None
    if size is None or len(size) != 2:
        raise invalid("pooled_size", f"must hold (height, width), got {desc.pooled_size!r}")
    ph, pw = (as_int(v, "pooled_size") for v in size)
    if min(ph, pw) < 1:
        raise invalid("pooled_size", f"must be >= 1, got {(ph, pw)}")
    if max(ph, pw) > MAX_POOLED:
        raise UnsupportedError(f"pooled_size: kompute_dml's ROI_POOLING takes at most {MAX_POOLED} per axis, got {(ph, pw)}")
    v = desc.spatial_scale
    if isinstance(v, bool) or not isinstance(v, (int, float, np.floating, np.integer)):
        raise invalid("spatial_scale", f"must be a float, got {v!r}")
    rois = r.sizes[2]
    if r.sizes[:2] != (1, 1) or r.sizes[3] != 5:
        raise invalid("roi_tensor.sizes", f"must be (1, 1, NumROIs, 5), got {r.sizes}")
    want = (rois, x.sizes[1], ph, pw)
    if y.sizes != want:
        raise invalid("output_tensor.sizes", f"must be (NumROIs, ChannelCount, PooledSize.Height, PooledSize.Width) = "
                                             f"{want}, got {y.sizes}")
    if device.device_type == "cpu" and x.sizes[2] * x.sizes[3] > CPU_WALK_MAX:
        raise UnsupportedError(f"input_tensor: a bin may cover H x W = {x.sizes[2] * x.sizes[3]} elements, beyond the "
                               f"{CPU_WALK_MAX} one invocation of a CPU device walks (runtime/llvmpipe.py)")
    check_no_overlap(y.sizes, y.effective_strides, "output_tensor")
    check_addressable(support.fields, (x, r, y))
    fam = contract.detection.ROI_POOL
    unit = x.data_type.size
    total = y.element_count
    push = fam.pack(x_off=0, r_off=0, y_off=0, total=total, c=x.sizes[1], n=x.sizes[0], ih=x.sizes[2], iw=x.sizes[3],
                    ph=ph, pw=pw, xs=list(x.effective_strides), rs=list(r.effective_strides[2:]),
                    ys=list(y.effective_strides), scale=float(np.float32(v)))
    plan = DispatchPlan(variant=fam.name(t="f16" if x.data_type == DataType.FLOAT16 else "f32"), bindings=(0, 1, 2),
                        push=push, writes=(2,), groups=grid_for(total, 256, device.limits["max_compute_work_group_count"][0]),
                        offset_slots=fam.slots(x_off=(0, unit), r_off=(1, unit), y_off=(2, unit)))
    return CompiledOperator(device, desc, support, support.inputs, support.outputs, [plan])


# ---- functional helper (exported as kdml.<name>) -----------------------------------------
def roi_pool(x: Any, rois: Any, pooled_size: Sequence[int], *, spatial_scale: float = 1.0, out: Tensor | None = None,
             device: Device | None = None) -> Tensor:
    """DML_ROI_POOLING (ONNX MaxRoiPool): x (N, C, H, W), rois (R, 5) [batch, x1, y1, x2, y2] (or
    (1, 1, R, 5)) -> (R, C, *pooled_size)."""
    dev, (tx, tr) = _operands((x, rois), ("x", "rois"), device)
    rd = tr.desc
    if rd.dimension_count == 2:
        rd = TensorDesc(rd.data_type, (1, 1, *rd.sizes), (0, 0, *rd.effective_strides))
        tr = Tensor.trusted(tr.buffer, rd, tr.offset)
    ph, pw = (as_int(v, "pooled_size") for v in pooled_size)
    shape = (rd.sizes[-2], tx.desc.sizes[1], ph, pw)
    dt = tx.desc.data_type
    return run_into(dev, lambda od: RoiPoolingDesc(tx.desc, rd, od, float(spatial_scale), (ph, pw)), [tx, tr], shape, dt,
                    out)


def _example() -> RoiPoolingDesc:
    f32 = DataType.FLOAT32
    return RoiPoolingDesc(TensorDesc(f32, (1, 2, 6, 6)), TensorDesc(f32, (1, 1, 3, 5)), TensorDesc(f32, (3, 2, 2, 2)), 1.0,
                          (2, 2))


SPECS = (OperatorSpec(RoiPoolingDesc, ROI_POOLING, compile_roi_pooling, (contract.detection.ROI_POOL,), helpers=("roi_pool",),
                      onnx=(OnnxOp("MaxRoiPool", "", "roi_pool", check=float_input),), example=_example),)
