"""DirectML's QUANTIZE and DEQUANTIZE (DML_QUANTIZE_OPERATOR_DESC / DML_DEQUANTIZE_OPERATOR_DESC,
feature level 6_3): ELEMENT_WISE_QUANTIZE_LINEAR / ELEMENT_WISE_DEQUANTIZE_LINEAR with the
quantization parameters as a tensor list chosen by QuantizationType (SCALE: {Scale}; SCALE_ZERO_POINT:
{Scale, ZeroPoint}; an absent zero point is 0):

    QUANTIZE:   Output = clamp(roundEven(Input / Scale) + ZeroPoint, Min, Max)
    DEQUANTIZE: Output = (Input - ZeroPoint) * Scale

The pages say little beyond the fields and the table ("TBD"); what kompute_dml reads into them, from
DirectML's own users (onnxruntime's DirectML MatMulNBits: a scale of sizes {.., N, K / block} for an
input {.., N, K}): a quantization tensor has the input's DimensionCount and, per dimension, a size
dividing the input's: that dimension is cut into blocks of input / size elements, each block sharing
one parameter (a size equal to the input's: per element, or per axis through 0 strides; a size of 1:
the whole dimension). The zero point has the scale's sizes. The arithmetic is the element-wise
operators' (docs/quantize.md, docs/dequantize.md): the division correctly rounded, the quotient
rounded half to even, NaN to Min; the difference exact, one float32 multiplication, FLOAT16 outputs
rounded once from it. QUANTIZE of FLOAT16 (input or scale) widens them exactly to float32 first
(CAST into the operator's scratch) and divides in float32.

The plans: each blocked dimension split in two (blocks, within a block: the parameters' stride 0
inside), then ELEMENT_WISE_QUANTIZE_LINEAR's / DEQUANTIZE_LINEAR's element-wise plans (merged
dimensions, host-enumerated ones beyond the shader's rank). Tensor support as the pages give it: 1 to 8
dimensions; QUANTIZE: Input FLOAT32 / FLOAT16, QuantizationTensors FLOAT32 / FLOAT16 / INT8 / UINT8,
Output INT8 / UINT8; DEQUANTIZE: Input INT8 / UINT8, Output FLOAT32 / FLOAT16 (INT4 / UINT4, also on
the pages, are not kompute_dml data types). Validation, in order: DML_BUFFER_TENSOR_DESC rules and the
table, QuantizationType and the list's count, then the constraints (the same DimensionCount; Output
of the input's sizes; the scale a float type (DEQUANTIZE: the output's), the zero point the quantized
tensor's type and the scale's sizes; each size dividing the input's), a non-overlapping output,
32-bit addressing. Docs: docs/quantize_dequantize.md; helpers kdml.quantize, kdml.dequantize.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..core.dtypes import DataType
from ..core.errors import invalid
from ..core.layout import check_no_overlap
from ..core.registry import FL, FLOATS, D, OperatorSupport, row
from ..core.tensor_desc import TensorDesc
from ..device.memory import Tensor
from ..functional import as_tensor, check_out, compile_cached, device_of, pooled_empty
from ..runtime import DispatchPlan
from . import contract
from .base import CompiledOperator, array_fields, validate_tensors
from .elementwise import type_code
from .elementwise_plan import check_addressable, device_limits, plan_elementwise
from .plan_chain import rebind
from .spec import OperatorSpec

if TYPE_CHECKING:
    from ..device.device import Device

_Q8 = frozenset({D.INT8, D.UINT8})
QUANTIZE = OperatorSupport("QUANTIZE", 173, (
    row(FL.FL_6_3, ("input_tensor", "input", (1, 8), FLOATS), ("quantization_tensors", "input", (1, 8), FLOATS | _Q8),
        ("output_tensor", "output", (1, 8), _Q8)),))
DEQUANTIZE = OperatorSupport("DEQUANTIZE", 174, (
    row(FL.FL_6_3, ("input_tensor", "input", (1, 8), _Q8), ("quantization_tensors", "input", (1, 8), FLOATS | _Q8),
        ("output_tensor", "output", (1, 8), FLOATS)),))


class QuantizationType(enum.IntEnum):
    """DML_QUANTIZATION_TYPE."""

    NONE = 0
    SCALE = 1
    SCALE_ZERO_POINT = 2


@dataclass(frozen=True)
class QuantizeDesc:
    """DML_QUANTIZE_OPERATOR_DESC { InputTensor, QuantizationType, QuantizationTensorCount,
    QuantizationTensors, OutputTensor }: the count is len(quantization_tensors)."""

    input_tensor: TensorDesc
    quantization_type: QuantizationType
    quantization_tensors: tuple[TensorDesc, ...]
    output_tensor: TensorDesc


@dataclass(frozen=True)
class DequantizeDesc:
    """DML_DEQUANTIZE_OPERATOR_DESC { InputTensor, QuantizationType, QuantizationTensorCount,
    QuantizationTensors, OutputTensor }: the count is len(quantization_tensors)."""

    input_tensor: TensorDesc
    quantization_type: QuantizationType
    quantization_tensors: tuple[TensorDesc, ...]
    output_tensor: TensorDesc


def _validate(device: Device, desc: Any, support: OperatorSupport) -> tuple[TensorDesc, TensorDesc | None]:
    """The table and the rules above; the scale and the zero point (or None)."""
    qs = desc.quantization_tensors
    if qs is not None and not isinstance(qs, tuple):
        raise invalid("quantization_tensors", f"must be a tuple of TensorDesc, got {type(qs).__name__}")
    validate_tensors(support, device.feature_level, desc, support.fields, support.outputs)
    try:
        kind = QuantizationType(desc.quantization_type)
    except ValueError:
        raise invalid("quantization_type", f"must be a DML_QUANTIZATION_TYPE, got {desc.quantization_type!r}") from None
    if kind == QuantizationType.NONE:
        raise invalid("quantization_type", "must be SCALE or SCALE_ZERO_POINT, got NONE")
    want = 1 if kind == QuantizationType.SCALE else 2
    if len(qs) != want:
        raise invalid("quantization_tensors", f"must hold {want} tensor(s) for {kind.name} (the count), got {len(qs)}")
    x, y = desc.input_tensor, desc.output_tensor
    quantized = y if support is QUANTIZE else x
    for i, t in enumerate(qs):
        if t.dimension_count != x.dimension_count:
            raise invalid(f"quantization_tensors[{i}].sizes", f"dimension count must equal input_tensor's "
                                                              f"({x.dimension_count}), got {t.dimension_count}")
        bad = [d for d, (n, q) in enumerate(zip(x.sizes, t.sizes)) if n % q]
        if bad:
            raise invalid(f"quantization_tensors[{i}].sizes", f"each must divide input_tensor's {x.sizes} (blocks of "
                                                              f"input / size elements), got {t.sizes}")
    scale, zp = qs[0], (qs[1] if want == 2 else None)
    if scale.data_type not in FLOATS:
        raise invalid("quantization_tensors[0].data_type", f"the scale must be FLOAT32 or FLOAT16, got {scale.data_type.name}")
    if support is DEQUANTIZE and y.data_type != scale.data_type:
        raise invalid("output_tensor.data_type", f"must equal the scale's ({scale.data_type.name}), got {y.data_type.name}")
    if zp is not None:
        if zp.data_type != quantized.data_type:
            which = "output_tensor" if support is QUANTIZE else "input_tensor"
            raise invalid("quantization_tensors[1].data_type", f"the zero point must be {which}'s type "
                                                               f"({quantized.data_type.name}), got {zp.data_type.name}")
        if zp.sizes != scale.sizes:
            raise invalid("quantization_tensors[1].sizes", f"must equal the scale's {scale.sizes}, got {zp.sizes}")
    if y.sizes != x.sizes:
        raise invalid("output_tensor.sizes", f"must equal input_tensor's {x.sizes}, got {y.sizes}")
    check_no_overlap(y.sizes, y.effective_strides, "output_tensor")
    check_addressable(array_fields(desc, support.fields), (x, *qs, y))
    return scale, zp


def blocked_views(x: TensorDesc, params: tuple[TensorDesc, ...], y: TensorDesc) -> tuple[TensorDesc, ...]:
    """x, the parameters and y as tensors of one shape (each blocked dimension split into (blocks,
    block), the parameters' stride 0 within a block; a parameter of size 1 stride 0 throughout)."""
    sizes: list[int] = []
    xs: list[int] = []
    ys: list[int] = []
    ps: list[list[int]] = [[] for _ in params]
    q = params[0].sizes
    for d, (n, blocks) in enumerate(zip(x.sizes, q)):
        inner = n // blocks
        split = blocks > 1 and inner > 1
        sizes += [blocks, inner] if split else [n]
        for out, st in ((xs, x.effective_strides[d]), (ys, y.effective_strides[d])):
            out += [st * inner, st] if split else [st]
        for p, t in zip(ps, params):
            st = t.effective_strides[d] if blocks > 1 else 0
            p += [st, 0] if split else [st]
    return (TensorDesc(x.data_type, tuple(sizes), tuple(xs)),
            *(TensorDesc(t.data_type, tuple(sizes), tuple(p)) for t, p in zip(params, ps)),
            TensorDesc(y.data_type, tuple(sizes), tuple(ys)))


def _plans(device: Device, fam: contract.ShaderFamily, variant: str, views: tuple[TensorDesc, ...],
           where: tuple[int | None, ...]) -> list[DispatchPlan]:
    return [rebind(p, dict(enumerate(where))) for p in plan_elementwise(fam, variant, views, **device_limits(device))]


def compile_quantize(device: Device, desc: QuantizeDesc) -> CompiledOperator:
    scale, zp = _validate(device, desc, QUANTIZE)
    x, y = desc.input_tensor, desc.output_tensor
    fields = array_fields(desc, QUANTIZE.fields)
    out, first = len(fields) - 1, len(fields)
    plans: list[DispatchPlan] = []
    consts: list[Tensor] = []
    ix, isc = 0, 1
    if x.data_type == DataType.FLOAT16:  # widened exactly into the operator's scratch (packed)
        x32 = TensorDesc(DataType.FLOAT32, x.sizes)
        plans += _plans(device, contract.CAST, contract.CAST.name(i="f16", o="f32"), (x, x32), (0, first + len(consts)))
        ix, x = first + len(consts), x32
        consts.append(Tensor.scratch(device, x32))
    if scale.data_type == DataType.FLOAT16:
        s32 = TensorDesc(DataType.FLOAT32, scale.sizes)
        plans += _plans(device, contract.CAST, contract.CAST.name(i="f16", o="f32"), (scale, s32), (1, first + len(consts)))
        isc, scale = first + len(consts), s32
        consts.append(Tensor.scratch(device, s32))
    if zp is None:  # a 0 of the output's type, the operator's constant
        zp = TensorDesc(y.data_type, scale.sizes, (0,) * scale.dimension_count)
        izp = first + len(consts)
        consts.append(device.tensor(np.zeros(4, y.data_type.numpy_dtype)))
    else:
        izp = 2
    variant = contract.QUANT.name(i="f32", o="i8" if y.data_type == D.INT8 else "u8")
    plans += _plans(device, contract.QUANT, variant, blocked_views(x, (scale, zp), y), (ix, isc, izp, out))
    return CompiledOperator(device, desc, QUANTIZE, fields[:-1], fields[-1:], plans, constants=consts)


def compile_dequantize(device: Device, desc: DequantizeDesc) -> CompiledOperator:
    scale, zp = _validate(device, desc, DEQUANTIZE)
    x, y = desc.input_tensor, desc.output_tensor
    fields = array_fields(desc, DEQUANTIZE.fields)
    stand_in = zp if zp is not None else TensorDesc(x.data_type, scale.sizes, (0,) * scale.dimension_count)
    variant = contract.DEQUANT.name(i=type_code(x.data_type, True), o=type_code(scale.data_type, True),
                                    z="zp" if zp is not None else "nozp")
    plans = _plans(device, contract.DEQUANT, variant, blocked_views(x, (scale, stand_in), y),
                   (0, 1, 2 if zp is not None else None, len(fields) - 1))
    return CompiledOperator(device, desc, DEQUANTIZE, fields[:-1], fields[-1:], plans)


def _params(x: Tensor, scale: Any, zero_point: Any, dev: Device, zp_type: DataType) -> list[Tensor]:
    """The scale (FLOAT32 unless a FLOAT16 array or Tensor) and zero point as tensors of x's
    dimension count (numpy's leading 1s)."""
    ts = []
    for name, v, dt in (("scale", scale, None), ("zero_point", zero_point, zp_type)):
        if v is None:
            continue
        if not isinstance(v, Tensor):
            arr = np.asarray(v)
            arr = arr.astype(dt.numpy_dtype if dt is not None else (np.float16 if arr.dtype == np.float16 else np.float32))
            v = as_tensor(arr.reshape((1,) * (x.desc.dimension_count - arr.ndim) + arr.shape), dev, name)
        ts.append(v)
    return ts


def quantize(x: Any, scale: Any, zero_point: Any = None, *, out: Tensor | None = None, device: Device | None = None) -> Tensor:
    """DML_QUANTIZE of FLOAT32 / FLOAT16 x: clamp(roundEven(x / scale) + zero_point) as the zero point's
    type (None: SCALE only, UINT8 output unless `out` says INT8). scale / zero_point of x's rank (or
    fewer dimensions: leading 1s), each size dividing x's (blocks)."""
    dev = device_of(x, scale, zero_point, out, device=device)
    tx = as_tensor(x, dev, "x")
    zt = (zero_point.desc.data_type if isinstance(zero_point, Tensor) else DataType.from_numpy(np.asarray(zero_point).dtype)
          if zero_point is not None else out.desc.data_type if out is not None else DataType.UINT8)
    ps = _params(tx, scale, zero_point, dev, zt)
    if out is not None:
        check_out(out, dev, tx.desc.sizes, zt)
    od = out.desc if out is not None else TensorDesc(zt, tx.desc.sizes)
    kind = QuantizationType.SCALE_ZERO_POINT if len(ps) == 2 else QuantizationType.SCALE
    op = compile_cached(dev, QuantizeDesc(tx.desc, kind, tuple(t.desc for t in ps), od))
    out = out if out is not None else pooled_empty(dev, od)
    op.execute([tx, *ps], [out])
    return out


def dequantize(x: Any, scale: Any, zero_point: Any = None, *, out: Tensor | None = None, device: Device | None = None) -> Tensor:
    """DML_DEQUANTIZE of 8-bit x: (x - zero_point) * scale, of the scale's type (FLOAT32 / FLOAT16);
    scale / zero_point of x's rank (or fewer: leading 1s), each size dividing x's (blocks)."""
    dev = device_of(x, scale, zero_point, out, device=device)
    tx = as_tensor(x, dev, "x")
    ps = _params(tx, scale, zero_point, dev, tx.desc.data_type)
    st = ps[0].desc.data_type
    if out is not None:
        check_out(out, dev, tx.desc.sizes, st)
    od = out.desc if out is not None else TensorDesc(st, tx.desc.sizes)
    kind = QuantizationType.SCALE_ZERO_POINT if len(ps) == 2 else QuantizationType.SCALE
    op = compile_cached(dev, DequantizeDesc(tx.desc, kind, tuple(t.desc for t in ps), od))
    out = out if out is not None else pooled_empty(dev, od)
    op.execute([tx, *ps], [out])
    return out


_X = TensorDesc(DataType.FLOAT32, (2, 4, 6))
_S = TensorDesc(DataType.FLOAT32, (2, 1, 3))
_Z = TensorDesc(DataType.UINT8, (2, 1, 3))
_Q = TensorDesc(DataType.UINT8, (2, 4, 6))
SPECS = (
    OperatorSpec(QuantizeDesc, QUANTIZE, compile_quantize, (contract.QUANT, contract.CAST), helpers=("quantize",),
                 example=lambda: QuantizeDesc(_X, QuantizationType.SCALE_ZERO_POINT, (_S, _Z), _Q)),
    OperatorSpec(DequantizeDesc, DEQUANTIZE, compile_dequantize, (contract.DEQUANT,), helpers=("dequantize",),
                 example=lambda: DequantizeDesc(_Q, QuantizationType.SCALE_ZERO_POINT, (_S, _Z), _X)),
)
