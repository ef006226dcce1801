"""DirectML's CAST operator (DML_CAST_OPERATOR_DESC): each element of the input converted to
the output's data type.

The dispatch plans are the element-wise operators' (ops/elementwise_plan.py: merged
dimensions, per-tensor strides, stride-0 broadcast, offsets, host-enumerated dimensions beyond
the shader's rank); the shader is shaders/cast.comp; the conversion rules are in docs/cast.md.
Validation, in order: DML_BUFFER_TENSOR_DESC rules and the feature level's table
(InvalidArgumentError / UnsupportedError naming the field), then the page's tensor constraint
(the same DimensionCount and Sizes: InvalidArgumentError naming output_tensor.sizes), then a
non-overlapping output and 32-bit element addressing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.dtypes import DataType
from ..core.layout import check_no_overlap
from ..core.registry import FL, FLOATS, INTS_8_32, INTS_64, OperatorSupport, row
from ..core.tensor_desc import TensorDesc
from ..device.device import Device
from ..device.memory import Tensor
from ..functional import _packed, check_out, compile_cached, pooled_empty
from ..functional.elementwise import _operands
from . import contract, onnx_types
from .base import CompiledOperator, validate_tensors
from .elementwise import CompiledElementWise, check_same, type_code
from .elementwise_plan import check_addressable, device_limits, plan_elementwise
from .spec import OnnxOp, OperatorSpec

# ---- CAST from DML_CAST_OPERATOR_DESC's page -----------------------
# kompute_dml implements the 8- to 64-bit integer types (INT64 / UINT64 from 3_0, as the page's
# rows; word pairs in the shader) and FLOAT32 / FLOAT16: the page's FLOAT64 (from 4_1) is left
# out. At 1_0 the page's type list is kept to FLOAT32 and FLOAT16: the rest
# of that row could not be read in the copies of the page consulted (docs/cast.md).
CAST = OperatorSupport("CAST", 61, tuple(
    row(level, ("input_tensor", "input", dims, types), ("output_tensor", "output", dims, types))
    for level, dims, types in ((FL.FL_1_0, (4, 4), FLOATS), (FL.FL_3_0, (4, 4), FLOATS | INTS_8_32 | INTS_64),
                               (FL.FL_3_1, (1, 8), FLOATS | INTS_8_32 | INTS_64))))


@dataclass(frozen=True)
class CastDesc:
    """DML_CAST_OPERATOR_DESC { InputTensor, OutputTensor }: Output = Input converted to the
    output's data type. Integers to integers wrap (the low bits of the sign- or zero-extended
    value); floats to integers truncate toward zero and saturate, NaN gives 0; integers and
    FLOAT32 to FLOAT16 round to nearest even (overflow: infinity); FLOAT16 to FLOAT32 is exact.
    DirectML's page states none of these rules: they are kompute_dml's (docs/cast.md)."""

    input_tensor: TensorDesc
    output_tensor: TensorDesc


def compile_cast(device: Device, desc: CastDesc) -> CompiledOperator:
    support = CAST
    validate_tensors(support, device.feature_level, desc, support.fields, support.outputs)
    x, y = desc.input_tensor, desc.output_tensor
    check_same(desc, "input_tensor", ("output_tensor",), data_type=False)
    check_no_overlap(y.sizes, y.effective_strides, "output_tensor")
    check_addressable(support.fields, (x, y))
    variant = contract.CAST.name(i=type_code(x.data_type, True), o=type_code(y.data_type, True))
    plans = plan_elementwise(contract.CAST, variant, (x, y), **device_limits(device))
    return CompiledElementWise(device, desc, support, support.inputs, support.outputs, list(plans))


# ---- functional helpers (exported as kdml.<name>) ----------------------------------------
# The functional helper of CAST (ops/cast.py, docs/cast.md).
#
# `cast(x, data_type)` takes a kompute_dml Tensor or anything kompute_dml/core/inputs.py takes (numpy
# arrays, Python numbers and lists, CPU `__array__` / `__dlpack__` objects; boolean arrays are
# uploaded as UINT8) and returns a new packed Tensor of x's shape and `data_type` from the
# device's buffer pool, or writes `out=` (a Tensor of that shape and type, any strides). x may
# have any strides (stride 0 included).
def cast(x: Any, data_type: Any, *, out: Tensor | None = None, device: Device | None = None) -> Tensor:
    """x converted to `data_type` (DML_CAST): integers wrap, floats to integers truncate toward
    zero and saturate (NaN -> 0), conversions to floats round to nearest even."""
    dt = DataType.coerce(data_type, "data_type")
    dev, (t,) = _operands((x,), ("x",), device)
    shape = t.desc.sizes
    if out is not None:
        check_out(out, dev, shape, dt)
    out_desc = out.desc if out is not None else _packed(dt, shape)
    op = compile_cached(dev, CastDesc(t.desc, out_desc))
    if out is None:
        out = pooled_empty(dev, out_desc)
    op.execute([t], [out])
    return out


# ---- spec (kompute_dml/ops/spec.py) --------------------------------------------------------
def _cast_like_rule(t: Any) -> str:
    """ONNX CastLike: both inputs of DirectML types (or bool), input 1 giving the output's."""
    for i in range(min(t.inputs, 2)):
        dt = t.elem(i)
        if dt is not None and dt != np.bool_ and dt not in onnx_types.DML_NUMPY:
            return f"input {i} type {dt} is not a DirectML type"
    return ""


SPECS = (OperatorSpec(CastDesc, CAST, compile_cast, (contract.CAST,), helpers=("cast",),
                      onnx=(OnnxOp("Cast", "", "cast"),
                            OnnxOp("CastLike", "", "cast", check=_cast_like_rule))),)
