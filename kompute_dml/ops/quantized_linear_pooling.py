"""DirectML's QUANTIZED_LINEAR_AVERAGE_POOLING (DML_QUANTIZED_LINEAR_AVERAGE_POOLING_OPERATOR_DESC,
feature level 6_2): "mathematically equivalent to dequantizing the inputs, then performing average
pooling, and then quantizing the output" (dequantize: (Input - ZeroPoint) * Scale; quantize:
clamp(round(Input / Scale) + ZeroPoint, Min, Max)), per tensor or per channel.

shaders/quantized_linear_pooling.comp, an output element per invocation: the window's elements inside
the input summed exactly as integers, S = sum (X - XZeroPoint) (the sum of the dequantized values is
exactly S * XScale), n the divisor (the window's size with IncludePadding, else the elements summed),
then the page's three steps in float32, each correctly rounded in integer code (the same bits on every
device, subnormals included), and one rounding to the integer:

    Output = clamp(roundEven(((float(S) * XScale) / n) / YScale) + YZeroPoint, Min, Max)

No intermediate is quantized (the requantized result is rounded once); the real-valued S XScale / (n
YScale) is not (three float32 roundings before roundEven): an output within a few float32 ulps of a
half-way point may land one step from the exactly rounded value (tests/test_quantized_linear_pooling.py
checks these steps bit for bit against numpy and the exact value within one step). A composition
(ELEMENT_WISE_DEQUANTIZE_LINEAR, AVERAGE_POOLING1, ELEMENT_WISE_QUANTIZE_LINEAR, as
onnx_backend/handlers_qlinear.py runs com.microsoft QLinearAveragePool) rounds every dequantized element
and every partial sum in float32, and AVERAGE_POOLING's division is the device's (Vulkan allows 2.5
ulp): its bits differ by device, hence this shader. A NaN quotient (no element counted without
IncludePadding: 0 / 0; a scale of 0, which the page calls undefined) gives Min, as
ELEMENT_WISE_QUANTIZE_LINEAR. kompute_dml bounds the window's loop (w0 + w0 w1 + w0 w1 w2 <= 60,000
iterations: llvmpipe's loop limit, runtime/llvmpipe.py; |S| < 2^24, so float(S) is exact), else
UnsupportedError naming window_size.

Where the page is silent or slips (docs/quantized_linear_pooling.md): its OutputTensor formula leaves
Dilations out, kompute_dml dilates the window (AVERAGE_POOLING1's formula; equal for dilations of 1);
the scales and zero points are per tensor (every size 1, any of the table's 1 to 5 dimensions) or per
channel ({1, C} followed by 1s, 2 to 5 dimensions: the page's {1, ChannelCount, 1, 1}); Input and Output
may differ in type (INT8 / UINT8 each, their zero points alike). Tensor support as the page's table:
Input and Output 4 to 5 dimensions, INT8 / UINT8; scales FLOAT32, zero points INT8 / UINT8, 1 to 5.
Validation, in order: the table, the page's constraints (InvalidArgumentError naming the field), the
arrays, the output's sizes, the scales' and zero points' sizes, the window's bound, a non-overlapping
output, 32-bit addressing. Helper kdml.quantized_linear_avg_pool.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..core.dtypes import DataType
from ..core.errors import UnsupportedError, invalid
from ..core.layout import check_no_overlap
from ..core.registry import F32, FL, D, OperatorSupport, row
from ..core.tensor_desc import TensorDesc
from ..device.memory import Tensor
from ..functional import as_tensor, device_of, run_into
from ..runtime import DispatchPlan, grid_for
from ..runtime.llvmpipe import CPU_WALK_MAX
from . import contract
from .base import CompiledOperator, validate_tensors
from .elementwise_plan import check_addressable
from .spatial import output_sizes, spatial_array, strides5, three
from .spec import OperatorSpec

if TYPE_CHECKING:
    from ..device.device import Device

_Q8 = frozenset({D.INT8, D.UINT8})
QUANTIZED_LINEAR_AVERAGE_POOLING = OperatorSupport("QUANTIZED_LINEAR_AVERAGE_POOLING", 169, (
    row(FL.FL_6_2, ("input_tensor", "input", (4, 5), _Q8), ("input_scale_tensor", "input", (1, 5), F32),
        ("input_zero_point_tensor", "optional input", (1, 5), _Q8), ("output_scale_tensor", "input", (1, 5), F32),
        ("output_zero_point_tensor", "optional input", (1, 5), _Q8), ("output_tensor", "output", (4, 5), _Q8)),))
_QUANT = ("input_scale_tensor", "input_zero_point_tensor", "output_scale_tensor", "output_zero_point_tensor")


@dataclass(frozen=True)
class QuantizedLinearAveragePoolingDesc:
    """DML_QUANTIZED_LINEAR_AVERAGE_POOLING_OPERATOR_DESC { InputTensor, InputScaleTensor,
    InputZeroPointTensor, OutputScaleTensor, OutputZeroPointTensor, OutputTensor, DimensionCount,
    Strides, WindowSize, StartPadding, EndPadding, Dilations, IncludePadding }; DimensionCount is the
    arrays' length (the input's dimensions past N and C); absent zero points are 0."""

    input_tensor: TensorDesc
    input_scale_tensor: TensorDesc
    input_zero_point_tensor: TensorDesc | None
    output_scale_tensor: TensorDesc
    output_zero_point_tensor: TensorDesc | None
    output_tensor: TensorDesc
    strides: Sequence[int]
    window_size: Sequence[int]
    start_padding: Sequence[int]
    end_padding: Sequence[int]
    dilations: Sequence[int]
    include_padding: bool = False


def _channel_stride(t: TensorDesc | None, field: str, c: int) -> int:
    """0 for a per-tensor value (every size 1), the channel stride for {1, C, 1, ...}."""
    if t is None or t.element_count == 1:
        return 0
    if t.dimension_count >= 2 and t.sizes[0] == 1 and t.sizes[1] == c and all(s == 1 for s in t.sizes[2:]):
        return t.effective_strides[1]
    raise invalid(f"{field}.sizes", f"must be all 1 (per tensor) or {{1, {c}, 1, ...}} (per channel), got {t.sizes}")


def compile_quantized_linear_average_pooling(device: Device, desc: QuantizedLinearAveragePoolingDesc) -> CompiledOperator:
    support = QUANTIZED_LINEAR_AVERAGE_POOLING
    validate_tensors(support, device.feature_level, desc, support.fields, support.outputs)
    x, y = desc.input_tensor, desc.output_tensor
    for zp, t in (("input_zero_point_tensor", x), ("output_zero_point_tensor", y)):
        z = getattr(desc, zp)
        if z is not None and z.data_type != t.data_type:
            raise invalid(f"{zp}.data_type", f"must equal its tensor's ({t.data_type.name}), got {z.data_type.name}")
    if y.dimension_count != x.dimension_count:
        raise invalid("output_tensor.sizes", f"dimension count must equal input_tensor's ({x.dimension_count}), "
                                             f"got {y.dimension_count}")
    n = x.dimension_count - 2
    window = spatial_array(desc, "window_size", n, -1, 1)
    strides = spatial_array(desc, "strides", n, 1, 1)
    start = spatial_array(desc, "start_padding", n, 0, 0)
    end = spatial_array(desc, "end_padding", n, 0, 0)
    dil = spatial_array(desc, "dilations", n, 1, 1)
    spatial = output_sizes(x.sizes[2:], window, strides, dil, start, end)
    want = (*x.sizes[:2], *spatial)
    if any(s < 1 for s in spatial) or y.sizes != want:
        raise invalid("output_tensor.sizes", f"must be {want} (the page's formula with the dilated window), got {y.sizes}")
    c = x.sizes[1]
    qstr = [_channel_stride(getattr(desc, f), f, c) for f in _QUANT]
    w3 = three(window, 1)
    if w3[0] + w3[0] * w3[1] + math.prod(w3) > CPU_WALK_MAX:
        raise UnsupportedError(f"window_size: {window} takes more than kompute_dml's {CPU_WALK_MAX} loop iterations "
                               f"per output (llvmpipe's loop limit)")
    check_no_overlap(y.sizes, y.effective_strides, "output_tensor")
    present = [(f, getattr(desc, f)) for f in support.fields if getattr(desc, f) is not None]
    check_addressable([f for f, _ in present], [t for _, t in present])
    flags = (1 if desc.include_padding else 0) | (2 if desc.input_zero_point_tensor is not None else 0) \
        | (4 if desc.output_zero_point_tensor is not None else 0)
    words = np.array([c, flags, *three(spatial, 1), *three(x.sizes[2:], 1), *strides5(x), *strides5(y), *w3,
                      *three(strides, 1), *three(dil, 1), *three(start, 0), *qstr], dtype=np.uint32)
    fam = contract.quantized.QL_AVG_POOL
    q8 = {D.INT8: "i8", D.UINT8: "u8"}
    total = y.element_count
    xz, yz = (i if getattr(desc, support.fields[i]) is not None else None for i in (2, 4))
    plan = DispatchPlan(
        variant=fam.name(i=q8[x.data_type], o=q8[y.data_type]), bindings=(0, 1, xz, 3, yz, 5, len(support.fields)),
        push=fam.pack(x_off=0, xs_off=0, xz_off=0, ys_off=0, yz_off=0, y_off=0, total=total), writes=(5,),
        offset_slots=fam.slots(x_off=(0, 1), xs_off=(1, 4), **({"xz_off": (2, 1)} if xz is not None else {}),
                               ys_off=(3, 4), **({"yz_off": (4, 1)} if yz is not None else {}), y_off=(5, 1)),
        groups=grid_for(total, 256, device.limits["max_compute_work_group_count"][0]))
    return CompiledOperator(device, desc, support, support.inputs, support.outputs, [plan],
                            constants=[device.tensor(words)])


def _param(v: Any, dev: Device, name: str, dt: DataType, c: int, rank: int) -> Tensor | None:
    """A scale / zero point of 1 value (all sizes 1) or C values ({1, C, 1, ...}) of `rank` dimensions."""
    if v is None:
        return None
    host = np.asarray(v.numpy() if isinstance(v, Tensor) else v, dtype=dt.numpy_dtype).ravel()
    if host.size not in (1, c):
        raise invalid(name, f"must hold 1 or C = {c} values, got {host.size}")
    sizes = [1] * rank
    sizes[1] = host.size
    return as_tensor(host.reshape(sizes), dev, name)


def quantized_linear_avg_pool(x: Any, x_scale: Any, y_scale: Any, x_zero_point: Any = None, y_zero_point: Any = None, *,
                              window_size: Sequence[int], strides: Sequence[int] | None = None,
                              start_padding: Sequence[int] | None = None, end_padding: Sequence[int] | None = None,
                              dilations: Sequence[int] | None = None, include_padding: bool = False,
                              out: Tensor | None = None, device: Device | None = None) -> Tensor:
    """DML_QUANTIZED_LINEAR_AVERAGE_POOLING (ONNX com.microsoft QLinearAveragePool, channels first) of an
    8-bit x (N, C, [D,] H, W): scales and zero points scalars or C values each (per channel); the output
    takes y_zero_point's type (out's, else x's where it is None); strides and dilations default to 1, the
    paddings to 0."""
    dev = device_of(x, out, device=device)
    tx = as_tensor(x, dev, "x")
    rank, c = tx.desc.dimension_count, tx.desc.sizes[1] if tx.desc.dimension_count > 1 else 1
    xt = tx.desc.data_type
    yt = (y_zero_point.desc.data_type if isinstance(y_zero_point, Tensor) else
          DataType.from_numpy(y_zero_point.dtype) if isinstance(y_zero_point, (np.ndarray, np.generic)) else
          out.desc.data_type if out is not None else xt)
    f32 = DataType.FLOAT32
    ps = [_param(v, dev, name, dt, c, rank) for v, name, dt in (
        (x_scale, "x_scale", f32), (x_zero_point, "x_zero_point", xt), (y_scale, "y_scale", f32),
        (y_zero_point, "y_zero_point", yt))]
    d = rank - 2
    win = tuple(window_size)
    st, sp, ep, dl = (tuple(v) if v is not None else (dflt,) * d for v, dflt in
                      ((strides, 1), (start_padding, 0), (end_padding, 0), (dilations, 1)))
    shape = (*tx.desc.sizes[:2], *output_sizes(tx.desc.sizes[2:], win, st, dl, sp, ep))
    descs = [t.desc if t is not None else None for t in (tx, *ps)]
    return run_into(dev, lambda od: QuantizedLinearAveragePoolingDesc(*descs, od, st, win, sp, ep, dl,  # type: ignore[arg-type]
                                                                      bool(include_padding)), [tx, *ps], shape, yt, out)


def _example() -> QuantizedLinearAveragePoolingDesc:
    s, u = TensorDesc(DataType.FLOAT32, (1, 1, 1, 1)), TensorDesc(DataType.UINT8, (1, 1, 1, 1))
    return QuantizedLinearAveragePoolingDesc(TensorDesc(DataType.UINT8, (1, 2, 5, 5)), s, u, s, u,
                                             TensorDesc(DataType.UINT8, (1, 2, 4, 4)), (1, 1), (2, 2), (0, 0), (0, 0), (1, 1))


SPECS = (OperatorSpec(QuantizedLinearAveragePoolingDesc, QUANTIZED_LINEAR_AVERAGE_POOLING,
                      compile_quantized_linear_average_pooling, (contract.quantized.QL_AVG_POOL,),
                      helpers=("quantized_linear_avg_pool",), example=_example),)
