"""DirectML's FILL_VALUE_CONSTANT and FILL_VALUE_SEQUENCE operators
(DML_FILL_VALUE_CONSTANT_OPERATOR_DESC, DML_FILL_VALUE_SEQUENCE_OPERATOR_DESC): every element of
the output set to one value, or to ValueStart + i * ValueDelta for its row-major index i.

One dispatch over the output's own sizes and strides (shaders/fill.comp, 8 dimensions): values
move as bit patterns computed on the host (`value_data_type` must equal the output's type; the
DML_SCALAR_UNION read as that type by ops/diagonal.value1_bits: integers integral and in range,
floats rounded to nearest even and finite where finite). Sequences: integers wrap modulo 2^bits
(two's complement; an unsigned delta may be given negative, as the page's Example 2 does);
FLOAT32 computes start + float32(i) * delta in float32 (two roundings, no
fused multiply-add); FLOAT16 the same in float32 from the widened start and delta, rounded once
to FLOAT16 (docs/fill.md). Validation, in order: DML_BUFFER_TENSOR_DESC rules and the feature
level's table (InvalidArgumentError / UnsupportedError naming the field), value_data_type
(InvalidArgumentError), the values, a non-overlapping output.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..core.dtypes import DataType
from ..core.errors import UnsupportedError, invalid
from ..core.ints import as_int_tuple
from ..core.layout import check_no_overlap
from ..core.registry import FL, FLOATS, INTS_8_32, INTS_64, OperatorSupport, row
from ..core.tensor_desc import TensorDesc
from ..device.device import Device
from ..device.memory import Tensor
from ..functional import check_out, compile_cached, device_of, pooled_empty
from ..runtime import DispatchPlan, grid_for
from . import contract
from .base import CompiledOperator, validate_tensors
from .diagonal import value1_bits
from .elementwise import CompiledElementWise
from .spec import OnnxOp, OperatorSpec

_D21 = FLOATS | INTS_8_32
# ---- FILL_VALUE_CONSTANT from DML_FILL_VALUE_CONSTANT_OPERATOR_DESC's page (rows 2_1, 4_0, 4_1)
FILL_VALUE_CONSTANT = OperatorSupport("FILL_VALUE_CONSTANT", 103, tuple(
    row(level, ("output_tensor", "output", dims, types))
    for level, dims, types in ((FL.FL_2_1, (4, 4), _D21), (FL.FL_4_0, (1, 8), _D21),
                               (FL.FL_4_1, (1, 8), _D21 | INTS_64 | frozenset({DataType.FLOAT64})))))
# ---- FILL_VALUE_SEQUENCE from DML_FILL_VALUE_SEQUENCE_OPERATOR_DESC's page (rows 2_1, 4_0, 5_0)
FILL_VALUE_SEQUENCE = OperatorSupport("FILL_VALUE_SEQUENCE", 104, tuple(
    row(level, ("output_tensor", "output", dims, types))
    for level, dims, types in ((FL.FL_2_1, (4, 4), _D21), (FL.FL_4_0, (1, 8), _D21),
                               (FL.FL_5_0, (1, 8), _D21 | INTS_64))))


@dataclass(frozen=True)
class FillValueConstantDesc:
    """DML_FILL_VALUE_CONSTANT_OPERATOR_DESC { OutputTensor, ValueDataType, Value }: every output
    element = Value, a DML_SCALAR_UNION given as a Python number read as value_data_type (which
    must equal the output's type)."""

    output_tensor: TensorDesc
    value_data_type: DataType
    value: Any = 0


@dataclass(frozen=True)
class FillValueSequenceDesc:
    """DML_FILL_VALUE_SEQUENCE_OPERATOR_DESC { OutputTensor, ValueDataType, ValueStart,
    ValueDelta }: output element of row-major index i = ValueStart + i * ValueDelta (integers
    wrap; floats as the module says)."""

    output_tensor: TensorDesc
    value_data_type: DataType
    value_start: Any = 0
    value_delta: Any = 1


def _type_of(desc: Any) -> DataType:
    dt = DataType.coerce(desc.value_data_type, "value_data_type")
    if dt != desc.output_tensor.data_type:
        raise invalid("value_data_type", f"must equal output_tensor's data type ({desc.output_tensor.data_type.name}), "
                                         f"got {dt.name}")
    return dt


def _words(bits: int) -> tuple[int, int]:
    return bits & 0xFFFFFFFF, bits >> 32


def plan_fill(device: Device, family: contract.ShaderFamily, variant: str, y: TensorDesc, value: int,
          delta: int = 0) -> DispatchPlan:
    check_no_overlap(y.sizes, y.effective_strides, "output_tensor")
    n = y.element_count
    width = y.data_type.size
    last = sum((s - 1) * st for s, st in zip(y.sizes, y.effective_strides))
    if n >= 1 << 32 or last >= (1 << 31 if width == 8 else 1 << 32):
        raise UnsupportedError(f"output_tensor: {n} elements exceed the fill shader's 32-bit addressing")
    pad = 8 - y.dimension_count
    (v_lo, v_hi), (d_lo, d_hi) = _words(value), _words(delta)
    per_inv = max(1, 4 // width)
    return DispatchPlan(
        variant=variant, bindings=(0,), groups=grid_for(-(-n // per_inv), 256, device.limits["max_compute_work_group_count"][0]),
        push=family.pack(o_off=0, v_lo=v_lo, v_hi=v_hi, d_lo=d_lo, d_hi=d_hi, size=[1] * pad + list(y.sizes),
                         str=[0] * pad + list(y.effective_strides)),
        writes=(0,), offset_slots=family.slots(o_off=(0, width)))


def compile_fill_value_constant(device: Device, desc: FillValueConstantDesc) -> CompiledOperator:
    support = FILL_VALUE_CONSTANT
    validate_tensors(support, device.feature_level, desc, support.fields, support.outputs)
    dt = _type_of(desc)
    bits = value1_bits(desc.value, dt, "value")
    y = desc.output_tensor
    plan = plan_fill(device, contract.FILL, contract.FILL.name(bits=8 * dt.size), y, bits)
    return CompiledElementWise(device, desc, support, support.inputs, support.outputs, [plan])


def sequence_variant(dt: DataType) -> str:
    t = {DataType.FLOAT32: "f32", DataType.FLOAT16: "f16"}.get(dt, f"b{8 * dt.size}")
    return contract.FILL_SEQ.name(t=t)


def _delta_bits(value: Any, dt: DataType) -> int:
    """ValueDelta's bits: an integer type's delta may also be given as its two's complement
    counterpart (the page's Example 2: UINT8 with ValueDelta -2, i.e. 254)."""
    if not dt.is_float and isinstance(value, int) and not isinstance(value, bool):
        bits = 8 * dt.size
        if -(1 << (bits - 1)) <= value < 1 << bits:
            return value & ((1 << bits) - 1)
    return value1_bits(value, dt, "value_delta")


def compile_fill_value_sequence(device: Device, desc: FillValueSequenceDesc) -> CompiledOperator:
    support = FILL_VALUE_SEQUENCE
    validate_tensors(support, device.feature_level, desc, support.fields, support.outputs)
    dt = _type_of(desc)
    start = value1_bits(desc.value_start, dt, "value_start")
    delta = _delta_bits(desc.value_delta, dt)
    plan = plan_fill(device, contract.FILL_SEQ, sequence_variant(dt), desc.output_tensor, start, delta)
    return CompiledElementWise(device, desc, support, support.inputs, support.outputs, [plan])


# ---- functional helpers (exported as kdml.<name>) ----------------------------------------
# `fill(sizes, value, data_type)` and `fill_sequence(sizes, start, delta, data_type)`: a new
# packed Tensor from the device's buffer pool, or `out=` (a Tensor of those sizes and type, any
# strides). ONNX ConstantOfShape and Range run on them (onnx_backend/handlers_fill.py).
def _run(desc_of: Any, sizes: Any, data_type: Any, out: Tensor | None, device: Device | None) -> Tensor:
    dev = device_of(out, device=device)
    dt = DataType.coerce(data_type, "data_type")
    shape = as_int_tuple(sizes, "sizes")
    if out is not None:
        check_out(out, dev, shape, dt)
    od = out.desc if out is not None else TensorDesc(dt, shape)
    op = compile_cached(dev, desc_of(od, dt))
    if out is None:
        out = pooled_empty(dev, od)
    op.execute([], [out])
    return out


def fill(sizes: Any, value: Any = 0, data_type: Any = DataType.FLOAT32, *, out: Tensor | None = None,
         device: Device | None = None) -> Tensor:
    """DML_FILL_VALUE_CONSTANT: a tensor of `sizes` whose every element is `value` (read as
    `data_type`: integers integral and in range, floats rounded to nearest even)."""
    return _run(lambda od, dt: FillValueConstantDesc(od, dt, value), sizes, data_type, out, device)


def fill_sequence(sizes: Any, start: Any = 0, delta: Any = 1, data_type: Any = DataType.FLOAT32, *,
                  out: Tensor | None = None, device: Device | None = None) -> Tensor:
    """DML_FILL_VALUE_SEQUENCE: element i (row-major) = start + i * delta in `data_type`."""
    return _run(lambda od, dt: FillValueSequenceDesc(od, dt, start, delta), sizes, data_type, out, device)


# ---- spec (kompute_dml/ops/spec.py) --------------------------------------------------------
SPECS = (
    OperatorSpec(FillValueConstantDesc, FILL_VALUE_CONSTANT, compile_fill_value_constant, (contract.FILL,),
                 helpers=("fill",), onnx=(OnnxOp("ConstantOfShape", "", "fill"),),
                 example=lambda: FillValueConstantDesc(TensorDesc(DataType.FLOAT32, (1, 2, 3, 4)), DataType.FLOAT32, 1.5)),
    OperatorSpec(FillValueSequenceDesc, FILL_VALUE_SEQUENCE, compile_fill_value_sequence, (contract.FILL_SEQ,),
                 helpers=("fill_sequence",), onnx=(OnnxOp("Range", "", "fill_sequence"),),
                 example=lambda: FillValueSequenceDesc(TensorDesc(DataType.FLOAT32, (1, 2, 3, 4)), DataType.FLOAT32, 3, 2)),
)
