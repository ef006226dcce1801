"""DirectML's CONVOLUTION_INTEGER (DML_CONVOLUTION_INTEGER_OPERATOR_DESC): the forward
cross-correlation of 8-bit integer data, zero points subtracted, summed exactly into INT32:

    Output[n, m, oh, ow] = sum over (ci, kh, kw) of (Input[n, g*CinG + ci, ih, iw] - InputZeroPoint)
                           * (Filter[m, ci, kh, kw] - FilterZeroPoint[m])

with g = m / (M / GroupCount), ih = oh * stride - start + kh * dilation (likewise iw); a position
in the padding is the zero point (it adds nothing). The page's DimensionCount is 2 (four-dimensional
tensors). The products are exact; their sum is taken modulo 2^32 (ONNX ConvInteger: the
accumulation may overflow only in 32 bits). ONNX ConvInteger runs on it
(onnx_backend/handlers_conv_integer.py); `quantize_dynamic` writes one per float Conv.

Tensor support (from the page; kompute_dml's reading of it, 2_1 on): Input, Filter and their zero
points INT8 or UINT8 (a zero point of its tensor's type), Output INT32, four dimensions; the input
zero point of sizes {1, 1, 1, 1}, the filter's {1, 1, 1, 1} (per tensor) or {1, M, 1, 1} (per
output channel). shaders/conv_integer.comp: an output element per invocation over the tensors'
own strides. Validation, in order: DML_BUFFER_TENSOR_DESC rules and the table, the zero points'
types and sizes, group_count, the filter's sizes, the arrays, the output sizes the formula gives,
a non-overlapping output, 32-bit element addressing (InvalidArgumentError / UnsupportedError
whose message starts with the field).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..core.dtypes import DataType
from ..core.errors import invalid
from ..core.ints import as_int
from ..core.layout import check_no_overlap
from ..core.registry import FL, OperatorSupport, row
from ..core.tensor_desc import TensorDesc
from ..device.memory import Tensor
from ..functional import as_tensor, check_out, compile_cached, device_of, pooled_empty
from ..runtime import DispatchPlan, grid_for
from . import contract
from .base import CompiledOperator, validate_tensors
from .elementwise_plan import check_addressable
from .onnx_types import NodeTypes
from .spatial import output_sizes, spatial_array
from .spec import OnnxOp, OperatorSpec

if TYPE_CHECKING:
    from ..device.device import Device

_Q8 = frozenset({DataType.INT8, DataType.UINT8})
CONVOLUTION_INTEGER = OperatorSupport("CONVOLUTION_INTEGER", 119, (
    row(FL.FL_2_1, ("input_tensor", "input", (4, 4), _Q8), ("input_zero_point_tensor", "optional input", (4, 4), _Q8),
        ("filter_tensor", "input", (4, 4), _Q8), ("filter_zero_point_tensor", "optional input", (4, 4), _Q8),
        ("output_tensor", "output", (4, 4), frozenset({DataType.INT32}))),))


@dataclass(frozen=True)
class ConvolutionIntegerDesc:
    """DML_CONVOLUTION_INTEGER_OPERATOR_DESC { InputTensor, InputZeroPointTensor, FilterTensor,
    FilterZeroPointTensor, OutputTensor, DimensionCount, Strides, Dilations, StartPadding,
    EndPadding, GroupCount }: DimensionCount = 2 (implied by the four-dimensional tensors), each
    array of two values (empty: strides and dilations 1, padding 0). Input (N, C, H, W), filter
    (M, C / GroupCount, KH, KW), output (N, M, OH, OW) INT32."""

    input_tensor: TensorDesc
    input_zero_point_tensor: TensorDesc | None
    filter_tensor: TensorDesc
    filter_zero_point_tensor: TensorDesc | None
    output_tensor: TensorDesc
    strides: tuple[int, ...] = ()
    dilations: tuple[int, ...] = ()
    start_padding: tuple[int, ...] = ()
    end_padding: tuple[int, ...] = ()
    group_count: int = 1

    def __post_init__(self) -> None:
        for name in ("strides", "dilations", "start_padding", "end_padding"):
            v = getattr(self, name)
            if isinstance(v, (list, range)) or (isinstance(v, np.ndarray) and v.ndim == 1):
                object.__setattr__(self, name, tuple(v))


def _validate(device: Device, desc: ConvolutionIntegerDesc) -> dict[str, Any]:
    support = CONVOLUTION_INTEGER
    validate_tensors(support, device.feature_level, desc, support.fields, support.outputs)
    x, xz, w, wz, y = (getattr(desc, f) for f in support.fields)
    for name, zp, t in (("input_zero_point_tensor", xz, x), ("filter_zero_point_tensor", wz, w)):
        if zp is not None and zp.data_type != t.data_type:
            raise invalid(f"{name}.data_type", f"must equal its tensor's ({t.data_type.name}), got {zp.data_type.name}")
    groups = as_int(desc.group_count, "group_count")
    if groups < 1:
        raise invalid("group_count", f"must be >= 1, got {groups}")
    (batch, cin), m = x.sizes[:2], w.sizes[0]
    if cin % groups or m % groups:
        raise invalid("group_count", f"must divide the input channels {cin} and the filter's batch count {m}, got {groups}")
    if w.sizes[1] != cin // groups:
        raise invalid("filter_tensor.sizes", f"channel count must be input channels / group_count = {cin // groups}, "
                                             f"got {w.sizes[1]}")
    if xz is not None and xz.sizes != (1, 1, 1, 1):
        raise invalid("input_zero_point_tensor.sizes", f"must be (1, 1, 1, 1), got {xz.sizes}")
    if wz is not None and wz.sizes not in ((1, 1, 1, 1), (1, m, 1, 1)):
        raise invalid("filter_zero_point_tensor.sizes", f"must be (1, 1, 1, 1) or (1, {m}, 1, 1), got {wz.sizes}")
    strides = spatial_array(desc, "strides", 2, 1, 1)
    dilations = spatial_array(desc, "dilations", 2, 1, 1)
    start = spatial_array(desc, "start_padding", 2, 0, 0)
    end = spatial_array(desc, "end_padding", 2, 0, 0)
    spatial = output_sizes(x.sizes[2:], w.sizes[2:], strides, dilations, start, end)
    if any(s < 1 for s in spatial):
        raise invalid("output_tensor.sizes", f"the window ({w.sizes[2:]}, dilations {dilations}) is larger than the "
                                             f"padded input {tuple(i + s + e for i, s, e in zip(x.sizes[2:], start, end))}")
    want = (batch, m, *spatial)
    if y.sizes != want:
        raise invalid("output_tensor.sizes", f"must be {want} (batch, filter batch count, the formula's sizes), got {y.sizes}")
    check_no_overlap(y.sizes, y.effective_strides, "output_tensor")
    present = tuple((f, t) for f, t in zip(support.fields, (x, xz, w, wz, y)) if t is not None)
    check_addressable(tuple(f for f, _ in present), tuple(t for _, t in present))
    return {"groups": groups, "strides": strides, "dilations": dilations, "start": start}


def plan_convolution_integer(device: Device, desc: ConvolutionIntegerDesc) -> tuple[DispatchPlan, np.ndarray]:
    """The descriptor validated; its one dispatch (bindings: the five fields, then the geometry
    constant at 5) and that constant's words. MATRIX_MULTIPLY_INTEGER plans its 1 x 1 forms with it
    (ops/matrix_multiply_integer.py)."""
    v = _validate(device, desc)
    x, xz, w, wz, y = (getattr(desc, f) for f in CONVOLUTION_INTEGER.fields)
    flags = ((1 if x.data_type == DataType.INT8 else 0) | (2 if w.data_type == DataType.INT8 else 0)
             | (4 if xz is not None else 0) | (8 if wz is not None else 0)
             | (16 if wz is not None and wz.sizes[1] > 1 else 0))
    geometry = [x.sizes[1] // v["groups"], w.sizes[0] // v["groups"], *x.sizes[2:], *y.sizes[2:], *w.sizes[2:],
                *v["strides"], *v["dilations"], *v["start"], *x.effective_strides, *w.effective_strides,
                *y.effective_strides, y.element_count, w.sizes[0], flags,
                wz.effective_strides[1] if wz is not None else 0]
    fam = contract.CONV_INT
    plan = DispatchPlan(
        variant=fam.name(), bindings=(0, 1, 2, 3, 4, 5), push=fam.pack(x_off=0, xz_off=0, w_off=0, wz_off=0, y_off=0),
        groups=grid_for(y.element_count, 256, device.limits["max_compute_work_group_count"][0]), writes=(4,),
        offset_slots=fam.slots(x_off=(0, 1), xz_off=(1, 1), w_off=(2, 1), wz_off=(3, 1), y_off=(4, 4)))
    return plan, np.array(geometry, dtype=np.uint32)


def compile_convolution_integer(device: Device, desc: ConvolutionIntegerDesc) -> CompiledOperator:
    plan, geometry = plan_convolution_integer(device, desc)
    constant = device.tensor(geometry)
    return CompiledOperator(device, desc, CONVOLUTION_INTEGER, CONVOLUTION_INTEGER.inputs, CONVOLUTION_INTEGER.outputs,
                            [plan], constants=[constant])


def conv_integer(x: Any, w: Any, x_zero_point: Any = None, w_zero_point: Any = None, *, strides: Any = (),
                 dilations: Any = (), start_padding: Any = (), end_padding: Any = (), group_count: int = 1,
                 out: Tensor | None = None, device: Device | None = None) -> Tensor:
    """DML_CONVOLUTION_INTEGER of 8-bit x (N, C, H, W) and w (M, C / group_count, KH, KW): INT32
    (N, M, OH, OW), exact (sums modulo 2^32). Zero points: x's a scalar, w's a scalar or one per
    output channel (any shape of 1 or M elements); numpy arrays or Tensors."""
    dev = device_of(x, w, out, device=device)
    tx, tw = as_tensor(x, dev, "x"), as_tensor(w, dev, "w")
    zps = []
    for name, zp, count in (("x_zero_point", x_zero_point, 1), ("w_zero_point", w_zero_point, tw.shape[0])):
        if zp is None:
            zps.append(None)
            continue
        tz = as_tensor(zp, dev, name)
        if tz.desc.element_count not in {1, count}:
            raise invalid(name, f"must hold 1 or {count} values, got {tz.desc.element_count}")
        sizes = (1, tz.desc.element_count, 1, 1)
        zps.append(Tensor(tz.buffer, TensorDesc(tz.desc.data_type, sizes), tz.offset) if tz.desc.strides is None
                   else as_tensor(np.ascontiguousarray(tz.numpy()).reshape(sizes), dev, name))
    spatial = output_sizes(tuple(tx.shape[2:]), tuple(tw.shape[2:]), tuple(strides) or (1, 1),
                           tuple(dilations) or (1, 1), tuple(start_padding) or (0, 0), tuple(end_padding) or (0, 0))
    sizes = (tx.shape[0], tw.shape[0], *spatial)
    if out is not None:
        check_out(out, dev, sizes, DataType.INT32)
    od = out.desc if out is not None else TensorDesc(DataType.INT32, tuple(max(1, s) for s in sizes))
    desc = ConvolutionIntegerDesc(tx.desc, zps[0].desc if zps[0] is not None else None, tw.desc,
                                  zps[1].desc if zps[1] is not None else None, od, tuple(strides), tuple(dilations),
                                  tuple(start_padding), tuple(end_padding), group_count)
    op = compile_cached(dev, desc)
    if out is None:
        out = pooled_empty(dev, od)
    op.execute([tx, zps[0], tw, zps[1]], [out])
    return out


def _q8_inputs(t: NodeTypes) -> str:
    """ONNX ConvInteger (and MatMulInteger): the data and the weights INT8 / UINT8."""
    bad = [dt for dt in (t.elem(0), t.elem(1)) if dt is not None and dt not in (np.dtype(np.int8), np.dtype(np.uint8))]
    return f"type {bad[0]} is not int8 / uint8" if bad else ""


_X = TensorDesc(DataType.UINT8, (1, 2, 5, 5))
SPECS = (OperatorSpec(
    ConvolutionIntegerDesc, CONVOLUTION_INTEGER, compile_convolution_integer, (contract.CONV_INT,),
    helpers=("conv_integer",), onnx=(OnnxOp("ConvInteger", "", "conv_integer", check=_q8_inputs),
                                     # alone, as a 1 x 1 convolution (onnx_backend/handlers_conv_integer.matmul_integer)
                                     OnnxOp("MatMulInteger", "", "conv_integer", check=_q8_inputs)),
    example=lambda: ConvolutionIntegerDesc(_X, TensorDesc(DataType.UINT8, (1, 1, 1, 1)), TensorDesc(DataType.INT8, (3, 2, 3, 3)),
                                           TensorDesc(DataType.INT8, (1, 3, 1, 1)), TensorDesc(DataType.INT32, (1, 3, 3, 3)))),)
