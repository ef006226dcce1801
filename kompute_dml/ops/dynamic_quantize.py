"""DirectML's DYNAMIC_QUANTIZE_LINEAR operator (DML_DYNAMIC_QUANTIZE_LINEAR_OPERATOR_DESC): the
scale and zero point that quantize the whole input to 8 bits, and that quantization.

Semantics (docs/dynamic_quantize.md): ONNX DynamicQuantizeLinear as ONNX Runtime's CPU kernel
computes it, bit for bit, for UINT8 (qmin 0, qmax 255) and, as DirectML's page gives it, INT8
(qmin -128, qmax 127, asymmetric): the range [min(x), max(x)] widened to include 0 (NaN elements
left out), scale = (max - min) / (qmax - qmin) in float32 (1 where max == min), zero point =
round-half-even(clamp(qmin - min / scale, qmin, qmax)), y = clamp(round-half-even(x / scale) + zero
point, qmin, qmax), every division correctly rounded (shaders/f32_exact.glsl). FLOAT16 inputs are
converted exactly to float32 first.

Two dispatches of shaders/dynamic_quantize.comp, with a barrier between them: `dql_minmax` (at
most MAX_PARTS work groups reduce their share of the input to min / max order keys in the
operator's own scratch buffer), `dql_quant` (every work group reduces those keys and computes the
scale and zero point itself, group 0 writes them to their outputs; then the element-wise
quantization). The scratch is the compiled operator's constant (CompiledOperator.constants, bound
after the outputs): each execution's `dql_minmax` writes every scratch word its `dql_quant`
reads, and no byte outside the three outputs changes.

Validation, in order: DML_BUFFER_TENSOR_DESC rules and the feature level's table
(InvalidArgumentError / UnsupportedError naming the field), then the page's constraints (the four
tensors share a DimensionCount; OutputTensor and OutputZeroPointTensor a DataType; the scale and
zero point hold one element; the output has the input's sizes), then a non-overlapping output and
32-bit element addressing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..dtypes import DataType
from ..errors import invalid
from ..ints import cdiv
from ..layout import check_no_overlap, merge_dims
from ..memory import Buffer, Tensor
from ..registry import F32, FL, FLOATS, D, OperatorSupport, row
from ..runtime import DispatchPlan, grid_for
from ..tensor_desc import TensorDesc
from . import contract
from .base import CompiledOperator, validate_tensors
from .elementwise_plan import check_addressable
from .spec import OnnxOp, OperatorSpec

if TYPE_CHECKING:
    from ..device import Device

# ---- DYNAMIC_QUANTIZE_LINEAR from
# DML_DYNAMIC_QUANTIZE_LINEAR_OPERATOR_DESC's page: one row, from 4_0; the four tensors share a
# DimensionCount (1 to 8), OutputTensor and OutputZeroPointTensor a DataType.
_Q8 = frozenset({D.INT8, D.UINT8})
DYNAMIC_QUANTIZE_LINEAR = OperatorSupport("DYNAMIC_QUANTIZE_LINEAR", 148, (
    row(FL.FL_4_0, ("input_tensor", "input", (1, 8), FLOATS), ("output_tensor", "output", (1, 8), _Q8),
         ("output_scale_tensor", "output", (1, 8), F32), ("output_zero_point_tensor", "output", (1, 8), _Q8)),
))


LOCAL_SIZE = 256
# dql_minmax's work groups: at least ELEMENTS_PER_GROUP elements each (16 per invocation), at most
# MAX_PARTS, each looping over more elements beyond that. Every dql_quant work group reduces all
# their keys before it quantizes, one key pair per invocation: the cap keeps that prologue to one
# 8-byte load per invocation (2 KiB per group, against its 16 KiB of FLOAT32 input) and one
# shared-memory pass (reduce_keys); dql_minmax keeps QUANT_UNITS loads in flight per invocation
# to make up for the fewer groups.
MAX_PARTS = LOCAL_SIZE
ELEMENTS_PER_GROUP = 16 * LOCAL_SIZE
SCRATCH_WORDS = 2 * MAX_PARTS  # group g's (lo, hi) keys at words 2g, 2g + 1
QUANT_UNITS = 4  # the _v variants: 16-byte input loads per invocation (shaders/dynamic_quantize.comp, UNITS)
_MAX_RANK = 8
# the binding list: input, output, scale, zero point, then the operator's scratch
_X, _Y, _SCALE, _ZP, _SCRATCH = range(5)
_TYPE = {DataType.FLOAT32: "f32", DataType.FLOAT16: "f16", DataType.UINT8: "u8", DataType.INT8: "i8"}


@dataclass(frozen=True)
class DynamicQuantizeLinearDesc:
    """DML_DYNAMIC_QUANTIZE_LINEAR_OPERATOR_DESC { InputTensor, OutputTensor, OutputScaleTensor,
    OutputZeroPointTensor }: InputMin / InputMax over the whole input, OutputScale = (InputMax -
    InputMin) / (Max - Min), OutputZeroPoint = Min - InputMin / OutputScale, OutputTensor =
    clamp(round(InputValue / OutputScale) + OutputZeroPoint, Min, Max), with Min, Max = 0, 255
    (UINT8) or -128, 127 (INT8). The page's constraints: the four tensors share a DimensionCount,
    OutputTensor and OutputZeroPointTensor a DataType; the scale and zero point hold one element.
    The arithmetic is ONNX Runtime's (docs/dynamic_quantize.md): the range includes 0 and leaves
    NaNs out, scale 1 where it is empty, correctly rounded float32 operations, ties to even."""

    input_tensor: TensorDesc
    output_tensor: TensorDesc
    output_scale_tensor: TensorDesc
    output_zero_point_tensor: TensorDesc


def _check(desc: DynamicQuantizeLinearDesc) -> None:
    x, y, s, z = desc.input_tensor, desc.output_tensor, desc.output_scale_tensor, desc.output_zero_point_tensor
    for field, t in (("output_tensor", y), ("output_scale_tensor", s), ("output_zero_point_tensor", z)):
        if t.dimension_count != x.dimension_count:
            raise invalid(f"{field}.sizes", f"dimension count must equal input_tensor's ({x.dimension_count}), "
                                            f"got {t.dimension_count}")
    if y.sizes != x.sizes:
        raise invalid("output_tensor.sizes", f"must equal input_tensor's {x.sizes}, got {y.sizes}")
    for field, t in (("output_scale_tensor", s), ("output_zero_point_tensor", z)):
        if t.element_count != 1:
            raise invalid(f"{field}.sizes", f"must hold one element (every size 1), got {t.sizes}")
    if z.data_type != y.data_type:
        raise invalid("output_zero_point_tensor.data_type", f"must equal output_tensor's ({y.data_type.name}), "
                                                            f"got {z.data_type.name}")
    check_no_overlap(y.sizes, y.effective_strides, "output_tensor")
    check_addressable(("input_tensor", "output_tensor"), (x, y))


def _dims(sizes: list[int], *strides: list[int]) -> dict[str, object]:
    pad = _MAX_RANK - len(sizes)
    return {"rank": len(sizes), "size": [*sizes, *([1] * pad)],
            **{name: [*st, *([0] * pad)] for name, st in zip(("x_str", "y_str"), strides)}}


def plan_dynamic_quantize(desc: DynamicQuantizeLinearDesc, max_groups: int) -> list[DispatchPlan]:
    """The two dispatches (min / max keys; parameters and quantization) of a checked descriptor."""
    x, y = desc.input_tensor, desc.output_tensor
    n = x.element_count
    t, o = _TYPE[x.data_type], _TYPE[y.data_type]
    xs, ys = x.data_type.size, y.data_type.size
    parts = min(MAX_PARTS, max(1, cdiv(n, ELEMENTS_PER_GROUP)))
    sizes, (x_str,) = merge_dims(x.sizes, x.effective_strides)
    f = contract.DQL_MINMAX
    v = "_v" if x_str == [1] else ""  # one dimension of stride 1: 16-byte loads
    minmax = DispatchPlan(variant=f.name(t=t, v=v), bindings=(_X, _SCRATCH), groups=(parts, 1, 1), writes=(_SCRATCH,),
                          push=f.pack(x_off=0, count=n, **_dims(sizes, x_str)), offset_slots=f.slots(x_off=(_X, xs)))
    sizes, (x_str, y_str) = merge_dims(x.sizes, x.effective_strides, y.effective_strides)
    f = contract.DQL_QUANT
    v = "_v" if x_str == y_str == [1] else ""  # both of stride 1: QUANT_UNITS 16-byte loads per invocation
    per_inv = QUANT_UNITS * 16 // xs if v else 4
    quant = DispatchPlan(variant=f.name(t=t, o=o, v=v), bindings=(_X, _SCRATCH, _Y, _SCALE, _ZP),
                         writes=(_Y, _SCALE, _ZP), groups=grid_for(cdiv(n, per_inv), LOCAL_SIZE, max_groups),
                         push=f.pack(x_off=0, y_off=0, scale_off=0, zp_off=0, parts=parts, count=n,
                                     **_dims(sizes, x_str, y_str)),
                         offset_slots=f.slots(x_off=(_X, xs), y_off=(_Y, ys), scale_off=(_SCALE, 4), zp_off=(_ZP, 1)))
    return [minmax, quant]


def compile_dynamic_quantize_linear(device: Device, desc: DynamicQuantizeLinearDesc) -> CompiledOperator:
    support = DYNAMIC_QUANTIZE_LINEAR
    validate_tensors(support, device.feature_level, desc, support.fields, support.outputs)
    _check(desc)
    plans = plan_dynamic_quantize(desc, device.limits["max_compute_work_group_count"][0])
    # not zeroed (no fill submission per compile): dql_minmax writes every key dql_quant reads;
    # made on kp's thread (a synchronous allocation waits while a plan's large ones are made)
    scratch_desc = TensorDesc(DataType.UINT32, (SCRATCH_WORDS,))
    scratch = Tensor.whole(Buffer(device, scratch_desc.byte_size, zeroed=False, later=True), scratch_desc)
    return CompiledOperator(device, desc, support, support.inputs, support.outputs, list(plans), constants=[scratch])


# ---- spec (kompute_dml/ops/spec.py) --------------------------------------------------------
SPECS = (OperatorSpec(DynamicQuantizeLinearDesc, DYNAMIC_QUANTIZE_LINEAR, compile_dynamic_quantize_linear,
                      (contract.DQL_MINMAX, contract.DQL_QUANT), helpers=("dynamic_quantize_linear",),
                      onnx=(OnnxOp("DynamicQuantizeLinear", "", "dynamic_quantize_linear"),)),)
