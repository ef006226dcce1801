"""DirectML's UPSAMPLE_2D (DML_UPSAMPLE_2D_OPERATOR_DESC { InputTensor, OutputTensor, ScaleSize,
InterpolationMode }): the last two dimensions (height, width) of an NCHW or NCDHW tensor upsampled by
the whole factors ScaleSize { Width, Height }; output sizes { N, C, [D,] H * Height, W * Width }.

The page calls RESAMPLE "a more flexible version" of this operator, and gives it the same words:
NEAREST_NEIGHBOR "chooses the input element nearest to the corresponding pixel center", LINEAR is
"the weighted average of the 2 nearest neighboring input elements in the height dimension, and the 2
... in the width dimension ... even if the input/output DimensionCount is 5" (never along N, C or D).
So it runs as RESAMPLE with Scales { 1, 1, [1,] Height, Width } and pixel centres (InputPixelOffsets
0.5, OutputPixelOffsets -0.5), on RESAMPLE's plans (ops/resample.plan_resample, shaders/resample.comp):
- NEAREST_NEIGHBOR: output (h, w) takes input (floor(h / Height), floor(w / Width)), each element
  repeated; with whole scales c + 1/2 = (o + 1/2) / Scale is never integral, so RESAMPLE1's
  floor(c + 1/2) and any rule for halves agree. Bits copied (exact).
- LINEAR: c = (o + 1/2) / Scale - 1/2 clamped into [0, size - 1], the two neighbours weighed 1 - f
  and f per axis (four elements): |error| <= (2n + K + 1) u sum |w x| as RESAMPLE's (n = 4 axes of
  the 4-D form, K = 4 taps, u = 2^-24; FLOAT16 one more rounding).
The page does not say how LINEAR maps coordinates; pixel centres are RESAMPLE's (the page's
"equivalent" operator) and what the offsets default to in every DirectML resampler since.

5-D tensors: the shader works on 4 axes, so two neighbouring axes of N, C, D (which never resample)
merge where both tensors' strides allow; otherwise one dispatch per N index, at its element offset.

Validation, in order: the table (4 or 5 dimensions, FLOAT32 / FLOAT16, feature level 1_0), the
output's data type and dimension count equal the input's, InterpolationMode NEAREST_NEIGHBOR or
LINEAR, 0 < ScaleSize.Height <= UINT_MAX / InputHeight and 0 < ScaleSize.Width <= UINT_MAX /
InputWidth, the output's sizes the page's; then a non-overlapping output and 32-bit addressing.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from ..core.dtypes import DataType
from ..core.errors import invalid
from ..core.ints import as_int
from ..core.layout import check_no_overlap
from ..core.registry import FL, FLOATS, OperatorSupport, row
from ..core.tensor_desc import TensorDesc
from . import contract
from .base import CompiledOperator, check_like, validate_tensors
from .elementwise_plan import check_addressable
from .resample import InterpolationMode, plan_resample, resample1_nearest_offsets
from .resample import _mode as resample_mode
from .spec import OperatorSpec

if TYPE_CHECKING:
    from ..device.device import Device

UPSAMPLE_2D = OperatorSupport("UPSAMPLE_2D", 66, (
    row(FL.FL_1_0, ("input_tensor", "input", (4, 5), FLOATS), ("output_tensor", "output", (4, 5), FLOATS)),))

UINT_MAX = 2 ** 32 - 1


@dataclass(frozen=True)
class Size2D:
    """DML_SIZE_2D { Width, Height } (exported as kdml.Size2D)."""

    width: int
    height: int


@dataclass(frozen=True)
class Upsample2DDesc:
    """DML_UPSAMPLE_2D_OPERATOR_DESC { InputTensor, OutputTensor, ScaleSize, InterpolationMode }:
    `scale_size` a Size2D (or a (width, height) pair)."""

    input_tensor: TensorDesc
    output_tensor: TensorDesc
    scale_size: Size2D | tuple[int, int]
    interpolation_mode: InterpolationMode = InterpolationMode.NEAREST_NEIGHBOR


def _scale_size(value: Any, height: int, width: int) -> tuple[int, int]:
    """(Height, Width) of ScaleSize, with the page's bounds."""
    if isinstance(value, Size2D):
        pair = (value.width, value.height)
    elif isinstance(value, (tuple, list)) and len(value) == 2:
        pair = tuple(value)
    else:
        raise invalid("scale_size", f"must be a Size2D (Width, Height), got {value!r}")
    ws, hs = as_int(pair[0], "scale_size.width"), as_int(pair[1], "scale_size.height")
    for name, s, n in (("height", hs, height), ("width", ws, width)):
        if not 0 < s <= UINT_MAX // n:
            raise invalid(f"scale_size.{name}", f"must be in [1, UINT_MAX / input {name} ({UINT_MAX // n})], got {s}")
    return hs, ws


def _views(x: TensorDesc, y: TensorDesc) -> tuple[TensorDesc, TensorDesc, tuple[tuple[int, int], ...]]:
    """4-D views of x and y with the dispatches' (x, y) element starts: a 5-D pair's two neighbouring
    leading axes merged where both layouts allow, else one dispatch per N index."""
    if x.dimension_count == 4:
        return x, y, ((0, 0),)
    n, xs, ys = list(x.sizes), list(x.effective_strides), list(y.effective_strides)
    for i in (1, 0):  # C and D first: the larger merged axis
        if xs[i] == xs[i + 1] * n[i + 1] and ys[i] == ys[i + 1] * n[i + 1]:
            sizes = [*n[:i], n[i] * n[i + 1], *n[i + 2:]]
            ysz = sizes[:2] + list(y.sizes[3:])
            return (TensorDesc(x.data_type, tuple(sizes), tuple(xs[:i] + xs[i + 1:])),
                    TensorDesc(y.data_type, tuple(ysz), tuple(ys[:i] + ys[i + 1:])), ((0, 0),))
    starts = tuple((b * xs[0], b * ys[0]) for b in range(n[0]))
    return (TensorDesc(x.data_type, tuple(n[1:]), tuple(xs[1:])),
            TensorDesc(y.data_type, tuple(y.sizes[1:]), tuple(ys[1:])), starts)


def compile_upsample_2d(device: Device, desc: Upsample2DDesc) -> CompiledOperator:
    support = UPSAMPLE_2D
    validate_tensors(support, device.feature_level, desc, support.fields, support.outputs)
    x, y = desc.input_tensor, desc.output_tensor
    check_like(x, y)
    mode = resample_mode(desc.interpolation_mode, False)
    hs, ws = _scale_size(desc.scale_size, x.sizes[-2], x.sizes[-1])
    want = (*x.sizes[:-2], x.sizes[-2] * hs, x.sizes[-1] * ws)
    if tuple(y.sizes) != want:
        raise invalid("output_tensor.sizes", f"must be {{N, C, [D,] InputHeight * Height, InputWidth * Width}} = {want}, "
                                             f"got {tuple(y.sizes)}")
    check_no_overlap(y.sizes, y.effective_strides, "output_tensor")
    check_addressable(support.fields, (x, y))
    xv, yv, starts = _views(x, y)
    one, half = Fraction(1), Fraction(1, 2)
    scales = [one, one, Fraction(hs), Fraction(ws)]
    ips = [half] * 4
    if mode == InterpolationMode.NEAREST_NEIGHBOR:
        ips = resample1_nearest_offsets(ips)  # RESAMPLE's nearest (no halves arise at whole scales)
    params = [(s, i, -half) for s, i in zip(scales, ips)]
    plans, words = plan_resample(device, xv, yv, mode, False, params, starts=starts)
    return CompiledOperator(device, desc, support, support.inputs, support.outputs, plans, constants=[device.tensor(words)])


EXPORTS = {"Size2D": Size2D}
SPECS = (
    OperatorSpec(Upsample2DDesc, UPSAMPLE_2D, compile_upsample_2d, (contract.RESAMPLE,),
                 example=lambda: Upsample2DDesc(TensorDesc(DataType.FLOAT32, (1, 2, 3, 4)),
                                                TensorDesc(DataType.FLOAT32, (1, 2, 6, 12)), Size2D(3, 2),
                                                InterpolationMode.LINEAR)),
)
