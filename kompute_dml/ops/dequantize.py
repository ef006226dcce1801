"""DirectML's ELEMENT_WISE_DEQUANTIZE_LINEAR operator
(DML_ELEMENT_WISE_DEQUANTIZE_LINEAR_OPERATOR_DESC): Output = (Input - ZeroPoint) * Scale.

The dispatch plans are the element-wise operators' (ops/elementwise_plan.py: merged dimensions,
per-tensor strides, stride-0 broadcast of the scale and zero point, offsets, host-enumerated
dimensions beyond the shader's rank); the shader is shaders/dequantize.comp; the arithmetic
rules are in docs/dequantize.md. Validation, in order: DML_BUFFER_TENSOR_DESC rules and the
feature level's table (InvalidArgumentError / UnsupportedError naming the field; an absent
zero point below 6_2: "is required"), then the page's tensor constraints (InvalidArgumentError
naming the field), then a non-overlapping output and 32-bit element addressing.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.dtypes import DataType, FeatureLevel
from ..core.errors import invalid
from ..core.inputs import as_host_array, conform, is_python_data
from ..core.layout import check_no_overlap
from ..core.registry import F32, FL, FLOATS, INTS_8_32, D, LevelSupport, OperatorSupport, row
from ..core.tensor_desc import TensorDesc
from ..device.device import Device
from ..device.memory import Tensor
from ..functional import _packed, check_out, compile_cached, pooled_empty
from ..functional.elementwise import _operands, _run, broadcast_view
from . import contract
from .base import CompiledOperator, validate_tensors
from .elementwise import CompiledElementWise, check_same, type_code
from .elementwise_plan import check_addressable, device_limits, plan_elementwise
from .spec import OnnxOp, OperatorSpec

# ---- ELEMENT_WISE_DEQUANTIZE_LINEAR from
# DML_ELEMENT_WISE_DEQUANTIZE_LINEAR_OPERATOR_DESC's page: ZeroPointTensor is a required input
# up to 6_0 and an optional one from 6_2; ScaleTensor / OutputTensor gain FLOAT16 at 6_0.


def _dq_row(level: FeatureLevel, dims: tuple[int, int], ints: frozenset[DataType], floats: frozenset[DataType],
            zp_kind: str) -> LevelSupport:
    return row(level, ("input_tensor", "input", dims, ints), ("scale_tensor", "input", dims, floats),
                ("zero_point_tensor", zp_kind, dims, ints), ("output_tensor", "output", dims, floats))


ELEMENT_WISE_DEQUANTIZE_LINEAR = OperatorSupport("ELEMENT_WISE_DEQUANTIZE_LINEAR", 34, (
    _dq_row(FL.FL_1_0, (4, 4), frozenset({D.UINT8}), F32, "input"),
    _dq_row(FL.FL_2_1, (4, 4), INTS_8_32, F32, "input"),
    _dq_row(FL.FL_3_0, (1, 8), INTS_8_32, F32, "input"),
    _dq_row(FL.FL_6_0, (1, 8), INTS_8_32, FLOATS, "input"),
    _dq_row(FL.FL_6_2, (1, 8), INTS_8_32, FLOATS, "optional input"),
))


_ZP = 2  # the zero point's index in the binding list (input, scale, zero point, output)


@dataclass(frozen=True)
class ElementWiseDequantizeLinearDesc:
    """DML_ELEMENT_WISE_DEQUANTIZE_LINEAR_OPERATOR_DESC { InputTensor, ScaleTensor,
    ZeroPointTensor, OutputTensor }: f(input, scale, zero_point) = (input - zero_point) * scale.
    The page's constraints: the four tensors share DimensionCount and Sizes (broadcast through
    0 strides), Input and ZeroPoint share a DataType, Output and Scale share a DataType.
    ZeroPointTensor is required up to feature level 6_0 and optional from 6_2 (absent: 0).
    kompute_dml's rules where the page is silent (docs/dequantize.md): the difference is exact,
    converted to float32 exactly below 2^24 (32-bit inputs beyond: nearest even), multiplied by
    the scale once in float32; FLOAT16 outputs round that float32 once to nearest even; a NaN
    result is the quiet NaN 0x7FC00000 (FLOAT16: 0x7E00); a scale of 0 (undefined on the page)
    gives the signed zero (or NaN) the product gives."""

    input_tensor: TensorDesc
    scale_tensor: TensorDesc
    zero_point_tensor: TensorDesc | None
    output_tensor: TensorDesc


def compile_dequantize_linear(device: Device, desc: ElementWiseDequantizeLinearDesc) -> CompiledOperator:
    support = ELEMENT_WISE_DEQUANTIZE_LINEAR
    validate_tensors(support, device.feature_level, desc, support.fields, support.outputs)
    x, s, z, y = desc.input_tensor, desc.scale_tensor, desc.zero_point_tensor, desc.output_tensor
    present = tuple(f for f in ("scale_tensor", "zero_point_tensor", "output_tensor") if getattr(desc, f) is not None)
    check_same(desc, "input_tensor", present, data_type=False)
    if z is not None:
        check_same(desc, "input_tensor", ("zero_point_tensor",), data_type=True)
    if y.data_type != s.data_type:
        raise invalid("output_tensor.data_type", f"must equal scale_tensor's ({s.data_type.name}), "
                                                 f"got {y.data_type.name}")
    check_no_overlap(y.sizes, y.effective_strides, "output_tensor")
    present = [(f, t) for f, t in zip(support.fields, (x, s, z, y)) if t is not None]
    check_addressable([f for f, _ in present], [t for _, t in present])
    variant = contract.DEQUANT.name(i=type_code(x.data_type, True), o=type_code(s.data_type, True),
                                    z="zp" if z is not None else "nozp")
    # an absent zero point: a stand-in of stride 0 for the planner, then the device's dummy buffer
    zd = z if z is not None else TensorDesc(x.data_type, x.sizes, (0,) * x.dimension_count)
    plans = plan_elementwise(contract.DEQUANT, variant, (x, s, zd, y), **device_limits(device))
    if z is None:
        plans = [dataclasses.replace(p, bindings=tuple(None if b == _ZP else b for b in p.bindings),
                                     offset_slots=tuple(sl for sl in p.offset_slots if sl[1] != _ZP))
                 for p in plans]
    return CompiledElementWise(device, desc, support, support.inputs, support.outputs, list(plans))


# ---- functional helpers (exported as kdml.<name>) ----------------------------------------
# The functional helper of ELEMENT_WISE_DEQUANTIZE_LINEAR (ops/dequantize.py, docs/dequantize.md).
#
# `dequantize_linear(x, scale, zero_point)` takes kompute_dml Tensors or anything
# kompute_dml/core/inputs.py takes, broadcasts the three with numpy's rules (stride-0 views: scales and
# zero points per tensor, per axis or per block) and returns a new packed Tensor of the broadcast
# shape and the scale's data type (FLOAT32 / FLOAT16) from the device's buffer pool, or writes
# `out=`. Python numbers and lists given as the scale become FLOAT32, as the zero point x's data
# type (when x is a Tensor or array; InvalidArgumentError where a value does not survive). A
# zero point of None leaves the operator's ZeroPointTensor absent (feature level 6_2 and above).
def dequantize_linear(x: Any, scale: Any, zero_point: Any = None, *, out: Tensor | None = None,
                      device: Device | None = None) -> Tensor:
    """(x - zero_point) * scale (DML_ELEMENT_WISE_DEQUANTIZE_LINEAR): the difference exact, one
    float32 multiplication, FLOAT16 results rounded once from it (docs/dequantize.md)."""
    if is_python_data(scale):
        scale = conform(as_host_array(scale, "scale", dml=False), np.dtype(np.float32), "scale", python=True)
    if zero_point is None:  # ZeroPointTensor absent: bound as None
        dev, (tx, ts) = _operands((x, scale), ("x", "scale"), device, slice(0, 1))
        try:
            shape = tuple(np.broadcast_shapes(tx.desc.sizes, ts.desc.sizes)) or (1,)
        except ValueError:
            raise invalid("scale", f"sizes {ts.desc.sizes} and x's {tx.desc.sizes} do not broadcast together") from None
        vx, vs = broadcast_view(tx, shape, "x"), broadcast_view(ts, shape, "scale")
        dt = vs.desc.data_type
        if out is not None:
            check_out(out, dev, shape, dt)
        out_desc = out.desc if out is not None else _packed(dt, shape)
        op = compile_cached(dev, ElementWiseDequantizeLinearDesc(vx.desc, vs.desc, None, out_desc))
        if out is None:
            out = pooled_empty(dev, out_desc)
        op.execute([vx, vs, None], [out])
        return out
    fields = ("x", "scale", "zero_point")
    dev, tensors = _operands((x, scale, zero_point), fields, device, slice(0, 1))
    return _run(ElementWiseDequantizeLinearDesc, tensors, fields, tensors[1].desc.data_type, out, dev)


# ---- spec (kompute_dml/ops/spec.py) --------------------------------------------------------
SPECS = (OperatorSpec(ElementWiseDequantizeLinearDesc, ELEMENT_WISE_DEQUANTIZE_LINEAR, compile_dequantize_linear,
                      (contract.DEQUANT,), helpers=("dequantize_linear",),
                      onnx=(OnnxOp("DequantizeLinear", "", "dequantize_linear"),)),)
