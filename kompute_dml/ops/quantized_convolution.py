"""DirectML's QUANTIZED_LINEAR_CONVOLUTION (DML_QUANTIZED_LINEAR_CONVOLUTION_OPERATOR_DESC): a 2-D
convolution of 8-bit data, "mathematically equivalent to dequantizing the inputs, convolving, and
then quantizing the output", evaluated as integer arithmetic and one requantization
(shaders/qconv.comp, docs/quantized_convolution.md):

    acc = sum over the group's input channels and the window of (x - x_zp) * (w[m] - w_zp[m]),
          plus bias[m]                                    (int32, exact)
    y   = clamp(roundEven(float32(acc) * ((x_scale * w_scale[m]) / y_scale)) + y_zp, Min, Max)

each float32 step rounded once (the division correctly rounded): onnxruntime's QLinearConv
requantization, so its outputs match that kernel's where it computes the same multiplier.
Padding holds x_zp (its taps add nothing). tests/test_quantized_convolution.py checks it bit for
bit against a numpy int64 / float32 reference. ONNX QLinearConv runs on it, and the QDQ pattern
DequantizeLinear -> Conv -> QuantizeLinear with the weights (and bias) dequantized from
initializers is fused into it at prepare (onnx_backend/fusion_qconv.py); helper kdml.quantized_conv.

Tensor support as the page gives it: 4 dimensions; the input, filter, output and zero points INT8
or UINT8; the scales FLOAT32; the bias INT32; from 2_1. Validation, in order: the table
(InvalidArgumentError / UnsupportedError naming the field), then the page's rules
(InvalidArgumentError whose message starts with the field): each zero point of its tensor's type;
the input, output-zero-point and scale tensors of sizes {1, 1, 1, 1}, the filter's scale and zero
point {1, 1, 1, 1} or {1, M, 1, 1}, the bias {1, M, 1, 1}; the filter {M, C / G, KH, KW}; the
output {N, M, OH, OW} by the convolution's formula; GroupCount dividing C and M; the spatial
arrays of two values, strides and dilations >= 1; then a non-overlapping output and 32-bit
addressing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..core.dtypes import DataType
from ..core.errors import invalid
from ..core.ints import as_int, cdiv
from ..core.layout import check_no_overlap
from ..core.registry import F32, FL, D, OperatorSupport, row
from ..core.tensor_desc import TensorDesc
from ..device.memory import Tensor
from ..runtime import DispatchPlan, TransferPlan, grid_for
from . import contract
from .base import CompiledOperator, validate_tensors
from .conv_split import conv_parts
from .elementwise_plan import check_addressable
from .spatial import output_sizes, spatial_array
from .spec import OnnxOp, OperatorSpec

if TYPE_CHECKING:
    from ..device.device import Device

_Q8 = frozenset({D.INT8, D.UINT8})
_FIELDS = (("input_tensor", "input", _Q8), ("input_scale_tensor", "input", F32),
           ("input_zero_point_tensor", "optional input", _Q8), ("filter_tensor", "input", _Q8),
           ("filter_scale_tensor", "input", F32), ("filter_zero_point_tensor", "optional input", _Q8),
           ("bias_tensor", "optional input", frozenset({D.INT32})), ("output_scale_tensor", "input", F32),
           ("output_zero_point_tensor", "optional input", _Q8), ("output_tensor", "output", _Q8))
QUANTIZED_LINEAR_CONVOLUTION = OperatorSupport("QUANTIZED_LINEAR_CONVOLUTION", 120, (
    row(FL.FL_2_1, *((f, kind, (4, 4), types) for f, kind, types in _FIELDS)),))


@dataclass(frozen=True)
class QuantizedLinearConvolutionDesc:
    """DML_QUANTIZED_LINEAR_CONVOLUTION_OPERATOR_DESC { InputTensor, InputScaleTensor,
    InputZeroPointTensor, FilterTensor, FilterScaleTensor, FilterZeroPointTensor, BiasTensor,
    OutputScaleTensor, OutputZeroPointTensor, OutputTensor, DimensionCount, Strides, Dilations,
    StartPadding, EndPadding, GroupCount } (DimensionCount = 2; empty arrays: strides and
    dilations 1, no padding). Absent zero points are 0, an absent bias 0."""

    input_tensor: TensorDesc
    input_scale_tensor: TensorDesc
    input_zero_point_tensor: TensorDesc | None
    filter_tensor: TensorDesc
    filter_scale_tensor: TensorDesc
    filter_zero_point_tensor: TensorDesc | None
    bias_tensor: TensorDesc | None
    output_scale_tensor: TensorDesc
    output_zero_point_tensor: TensorDesc | None
    output_tensor: TensorDesc
    strides: tuple[int, ...] = ()
    dilations: tuple[int, ...] = ()
    start_padding: tuple[int, ...] = ()
    end_padding: tuple[int, ...] = ()
    group_count: int = 1


_PER_TENSOR = ("input_scale_tensor", "input_zero_point_tensor", "output_scale_tensor", "output_zero_point_tensor")
_PER_CHANNEL = ("filter_scale_tensor", "filter_zero_point_tensor", "bias_tensor")
_TYPED = (("input_zero_point_tensor", "input_tensor"), ("filter_zero_point_tensor", "filter_tensor"),
          ("output_zero_point_tensor", "output_tensor"))


def _channel_stride(t: TensorDesc | None, name: str, m: int, bias: bool) -> int:
    """The stride of a per-tensor ({1, 1, 1, 1}) or per-output-channel ({1, M, 1, 1}) tensor
    along the channels (0 per tensor); the bias is per channel only."""
    if t is None:
        return 0
    ok = [(1, m, 1, 1)] if bias else [(1, 1, 1, 1), (1, m, 1, 1)]
    if t.sizes not in ok:
        raise invalid(f"{name}.sizes", f"must be {' or '.join(map(str, ok))}, got {t.sizes}")
    return t.effective_strides[1] if t.sizes[1] > 1 else 0


def writes_quads(y: TensorDesc) -> bool:
    """Outputs whose words each hold four adjacent outputs of a row (the width a multiple of 4 with
    stride 1, every other stride a multiple of 4; offsets are multiples of 16 bytes): four per
    invocation and one plain store."""
    s = y.effective_strides
    return y.sizes[-1] % 4 == 0 and s[-1] == 1 and all(st % 4 == 0 for n, st in zip(y.sizes[:-1], s[:-1]) if n > 1)


def geometry_words(desc: QuantizedLinearConvolutionDesc) -> np.ndarray:
    """Validate the page's rules; shaders/qconv.comp's constant (its P_* words)."""
    x, w, y = desc.input_tensor, desc.filter_tensor, desc.output_tensor
    for zp, t in _TYPED:
        z = getattr(desc, zp)
        if z is not None and z.data_type != getattr(desc, t).data_type:
            raise invalid(f"{zp}.data_type", f"must equal {t}'s ({getattr(desc, t).data_type.name}), "
                                             f"got {z.data_type.name}")
    for f in _PER_TENSOR:
        t = getattr(desc, f)
        if t is not None and t.sizes != (1, 1, 1, 1):
            raise invalid(f"{f}.sizes", f"must be (1, 1, 1, 1), got {t.sizes}")
    n, c, ih, iw = x.sizes
    m = w.sizes[0]
    groups = as_int(desc.group_count, "group_count")
    if groups < 1 or c % groups or m % groups:
        raise invalid("group_count", f"must divide the input's channels ({c}) and the filter's ({m}), got {groups}")
    if w.sizes[1] != c // groups:
        raise invalid("filter_tensor.sizes", f"dimension 1 must be the input's channels per group ({c // groups}), "
                                             f"got {w.sizes}")
    strides = spatial_array(desc, "strides", 2, 1, 1)
    dil = spatial_array(desc, "dilations", 2, 1, 1)
    start = spatial_array(desc, "start_padding", 2, 0, 0)
    end = spatial_array(desc, "end_padding", 2, 0, 0)
    want = (n, m, *output_sizes((ih, iw), w.sizes[2:], strides, dil, start, end))
    if min(want) < 1 or y.sizes != want:
        raise invalid("output_tensor.sizes", f"must be {want} (the convolution's output sizes), got {y.sizes}")
    ch = [_channel_stride(getattr(desc, f), f, m, f == "bias_tensor") for f in _PER_CHANNEL]
    signed = [t.data_type == DataType.INT8 for t in (x, w, y)]
    present = [getattr(desc, f) is not None for f in ("input_zero_point_tensor", "filter_zero_point_tensor",
                                                       "bias_tensor", "output_zero_point_tensor")]
    flags = sum(b << i for i, b in enumerate(signed + present)) | (128 if writes_quads(y) else 0)
    return np.array([y.element_count, flags, m, ih, iw, want[2], want[3], *w.sizes[2:], c // groups, m // groups,
                     *strides, *dil, *start, *x.effective_strides, *w.effective_strides, *y.effective_strides, *ch],
                    np.uint32)


def k_table(desc: QuantizedLinearConvolutionDesc) -> np.ndarray:
    """qconv_tiled.comp's words after the geometry (qconv_common.glsl P_NPIX ..): per term
    k = (c, kh, kw) the input and filter offsets and the window's dilated position."""
    x, w = desc.input_tensor, desc.filter_tensor
    cpg, kh, kw = w.sizes[1:]
    dil = spatial_array(desc, "dilations", 2, 1, 1)
    c, r, q = (a.ravel() for a in np.meshgrid(np.arange(cpg), np.arange(kh), np.arange(kw), indexing="ij"))
    xs, ws = x.effective_strides, w.effective_strides
    dh, dw = r * dil[0], q * dil[1]
    tab = np.stack([c * xs[1] + dh * xs[2] + dw * xs[3], c * ws[1] + r * ws[2] + q * ws[3], dh, dw], axis=1)
    return tab.astype(np.uint32).ravel()


def compile_quantized_linear_convolution(device: Device, desc: QuantizedLinearConvolutionDesc, *,
                                         kernel: str | None = None) -> CompiledOperator:
    """The kernel the device policy chooses (DevicePolicy.conv_family_for, as CONVOLUTION's: "direct",
    qconv.comp's output per invocation, for few channels and terms per group (depthwise); else
    qconv_tiled.comp's tiles, with split-K (conv_split.conv_split) where they are few); `kernel`
    or KDML_CONV_KERNEL ("tiled" / "direct") forces one."""
    support = QUANTIZED_LINEAR_CONVOLUTION
    validate_tensors(support, device.feature_level, desc, support.fields, support.outputs)
    words = geometry_words(desc)
    y = desc.output_tensor
    check_no_overlap(y.sizes, y.effective_strides, "output_tensor")
    tensors = [getattr(desc, f) for f in support.fields]
    check_addressable([f for f, t in zip(support.fields, tensors) if t is not None], [t for t in tensors if t is not None])
    names = ("x_off", "xs_off", "xz_off", "w_off", "ws_off", "wz_off", "b_off", "ys_off", "yz_off", "y_off")
    slots = {k: (i, t.data_type.size) for i, (k, t) in enumerate(zip(names, tensors)) if t is not None}
    present = tuple(i if t is not None else None for i, t in enumerate(tensors))
    limit = device.limits["max_compute_work_group_count"]
    n, m, oh, ow = y.sizes
    mpg, groups, klen = int(words[10]), m // int(words[10]), int(np.prod(desc.filter_tensor.sizes[1:]))
    family = device.policy.conv_family_for(half=False, coutg=mpg, klen=klen, backward=False, kernel=kernel)

    def plan(fam: Any, grid: tuple[int, int, int], writes: tuple[int, ...], extra: tuple[int, ...] = ()) -> DispatchPlan:
        return DispatchPlan(variant=fam.name(), push=fam.pack(**dict.fromkeys(names, 0)), writes=writes,
                            offset_slots=fam.slots(**slots), bindings=(*present, len(support.fields), *extra), groups=grid)

    if family == "direct" or cdiv(mpg, 64) > limit[1]:
        direct = plan(contract.QCONV, grid_for(y.element_count // (4 if writes_quads(y) else 1), 256, limit[0]), (9,))
        return CompiledOperator(device, desc, support, support.inputs, support.outputs, [direct],
                                constants=[device.tensor(words)])
    npix = n * oh * ow
    grid = (min(cdiv(npix, 64), limit[0]), cdiv(mpg, 64), min(groups, limit[2]))
    split, kchunk = conv_parts(device, grid, klen, m * npix)
    consts = [device.tensor(np.concatenate([words, np.array([npix, oh * ow, klen, split, kchunk], np.uint32),
                                            k_table(desc)]))]
    plans: list[DispatchPlan | TransferPlan]
    if split == 1:
        plans = [plan(contract.QCONV_TILED, grid, (9,))]
    else:
        scratch_desc = TensorDesc(DataType.UINT32, (split * m * npix,))
        consts.append(Tensor.scratch(device, scratch_desc))
        scratch = len(support.fields) + 1
        plans = [plan(contract.QCONV_SPLIT, (grid[0], grid[1] * split, grid[2]), (scratch,), (scratch,)),
                 plan(contract.QCONV_REDUCE, grid_for(npix * m, 256, limit[0]), (9,), (scratch,))]
    return CompiledOperator(device, desc, support, support.inputs, support.outputs, plans, constants=consts)


def qlinear_conv_rule(t: Any) -> str:
    """ONNX QLinearConv on the operator: 8-bit x and w, 1-D or 2-D (a 3-D or 4-D x where declared; 1-D as
    2-D of height 1)."""
    for i in (0, 3):
        dt = t.elem(i) if t.inputs > i else None
        if dt is not None and dt not in (np.int8, np.uint8):
            return f"input {i} is {dt}, not int8 / uint8"
    x = t.declared(0) if t.inputs else None
    if x is not None and x.tensor_type.HasField("shape") and len(x.tensor_type.shape.dim) not in (3, 4):
        return "not a 1-D or 2-D convolution (QUANTIZED_LINEAR_CONVOLUTION takes 4-D tensors)"
    return ""


_S = TensorDesc(DataType.FLOAT32, (1, 1, 1, 1))
_Z = TensorDesc(DataType.UINT8, (1, 1, 1, 1))
_W = TensorDesc(DataType.INT8, (4, 2, 3, 3))
SPECS = (OperatorSpec(QuantizedLinearConvolutionDesc, QUANTIZED_LINEAR_CONVOLUTION, compile_quantized_linear_convolution,
                      (contract.QCONV, contract.QCONV_TILED, contract.QCONV_SPLIT, contract.QCONV_REDUCE),
                      helpers=("quantized_conv",),
                      onnx=(OnnxOp("QLinearConv", "", "quantized_conv", check=qlinear_conv_rule),),
                      example=lambda: QuantizedLinearConvolutionDesc(
                          TensorDesc(DataType.UINT8, (1, 2, 5, 5)), _S, _Z, _W, TensorDesc(DataType.FLOAT32, (1, 4, 1, 1)),
                          TensorDesc(DataType.INT8, (1, 4, 1, 1)), TensorDesc(DataType.INT32, (1, 4, 1, 1)), _S, _Z,
                          TensorDesc(DataType.UINT8, (1, 4, 3, 3)))),)
