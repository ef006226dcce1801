"""DirectML's CUMULATIVE_SUMMATION (DML_CUMULATIVE_SUMMATION_OPERATOR_DESC) and CUMULATIVE_PRODUCT
(DML_CUMULATIVE_PRODUCT_OPERATOR_DESC): the running sum / product of the input along `axis`,
visited by ascending index (AxisDirection INCREASING) or descending (DECREASING); with
HasExclusiveSum / HasExclusiveProduct the tally is written before the element is taken in (the
first output is 0 / 1 and the last element is in no output). Output and input share DataType,
DimensionCount and Sizes; the output may alias the input (in place).

shaders/cumulative.comp: axes of fewer than WG_MIN_AXIS (65) elements take one invocation per line
(the other dimensions merged), the line's elements in the axis direction; longer axes a work group
of 256 per line: chunks of 256 in traversal order, each scanned in shared memory (a tree of depth
<= 8 per partial sum), offset by the running total of the earlier chunks. Arithmetic
(docs/cumulative.md; measured by tests/test_cumulative.py against float64 and enforced there):

- INT32 / UINT32 / INT64 / UINT64 (64-bit as word pairs): exact modulo 2^32 / 2^64 (two's
  complement wrap-around), as numpy's and onnxruntime's.
- FLOAT32 (`precise`, no contraction; an output that took in k elements, u = 2^-24, S_k the sum
  of their |x|, h the most roundings any of them went through: k - 1 for an invocation per line,
  8 + c + 1 in chunk c (0-based) of a work group's line): |error| <= gamma_h S_k (sum),
  gamma_h |P_k| relative to the product (while no overflow or underflow), gamma_h = h u / (1 - h u).
- FLOAT16: decoded exactly into float32, the same float32 tally, each output rounded once to
  float16 (nearest even): the float32 bound plus 2^-11 relative.

Validation, in order: DML_BUFFER_TENSOR_DESC rules and the feature level's table
(InvalidArgumentError / UnsupportedError naming the field), the tensor constraints, `axis` in
[0, DimensionCount), `axis_direction` a DML_AXIS_DIRECTION value, non-overlapping output and
32-bit element addressing.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..core.dtypes import DataType
from ..core.errors import invalid
from ..core.ints import as_int
from ..core.layout import check_no_overlap, merge_dims
from ..core.registry import FL, FLOATS, INTS_32, INTS_64, OperatorSupport, row
from ..core.tensor_desc import TensorDesc
from ..runtime import DispatchPlan, grid_for
from . import contract
from .base import CompiledOperator, validate_tensors
from .contract.elementwise import CUM_RANK
from .elementwise import check_same
from .elementwise_plan import check_addressable
from .spec import OnnxOp, OperatorSpec

if TYPE_CHECKING:
    from ..device.device import Device


WG_MIN_AXIS = 65  # axes of this many elements or more: a work group of 256 per line (contract.CUM_WG)


class AxisDirection(enum.IntEnum):
    """DML_AXIS_DIRECTION (exported as kdml.AxisDirection)."""

    INCREASING = 0
    DECREASING = 1


def _table(name: str, op_type: int, first: FL) -> OperatorSupport:
    types32 = FLOATS | INTS_32
    rows = ((first, (4, 4), types32), (FL.FL_4_0, (1, 8), types32), (FL.FL_5_0, (1, 8), types32 | INTS_64))
    return OperatorSupport(name, op_type, tuple(
        row(level, ("input_tensor", "input", dims, types), ("output_tensor", "output", dims, types))
        for level, dims, types in rows))


CUMULATIVE_SUMMATION = _table("CUMULATIVE_SUMMATION", 105, FL.FL_2_1)
CUMULATIVE_PRODUCT = _table("CUMULATIVE_PRODUCT", 145, FL.FL_3_1)


@dataclass(frozen=True)
class CumulativeSummationDesc:
    """DML_CUMULATIVE_SUMMATION_OPERATOR_DESC { InputTensor, OutputTensor, Axis, AxisDirection,
    HasExclusiveSum }. In place allowed."""

    input_tensor: TensorDesc
    output_tensor: TensorDesc
    axis: int
    axis_direction: AxisDirection = AxisDirection.INCREASING
    has_exclusive_sum: bool = False


@dataclass(frozen=True)
class CumulativeProductDesc:
    """DML_CUMULATIVE_PRODUCT_OPERATOR_DESC { InputTensor, OutputTensor, Axis, AxisDirection,
    HasExclusiveProduct }. In place allowed."""

    input_tensor: TensorDesc
    output_tensor: TensorDesc
    axis: int
    axis_direction: AxisDirection = AxisDirection.INCREASING
    has_exclusive_product: bool = False


class CompiledCumulative(CompiledOperator):
    allows_inplace = True  # the pages: "OutputTensor is permitted to alias InputTensor"

    def is_inplace_noop(self, bound: list[Any]) -> bool:
        return False


def _flag(value: Any, field: str) -> bool:
    if not isinstance(value, (bool, int)) or value not in (0, 1):
        raise invalid(field, f"must be a BOOL (True / False, 1 / 0), got {value!r}")
    return bool(value)


def _direction(value: Any) -> AxisDirection:
    v = as_int(value, "axis_direction")
    try:
        return AxisDirection(v)
    except ValueError:
        raise invalid("axis_direction", f"{v} is not a DML_AXIS_DIRECTION value (0 INCREASING, 1 DECREASING)") \
            from None


_TYPE = {DataType.FLOAT32: "f32", DataType.FLOAT16: "f16", DataType.INT32: "b32", DataType.UINT32: "b32",
         DataType.INT64: "b64", DataType.UINT64: "b64"}


def _compile(device: Device, desc: Any, support: OperatorSupport, op: str, exclusive: Any,
             exclusive_field: str) -> CompiledOperator:
    validate_tensors(support, device.feature_level, desc, support.fields, support.outputs)
    check_same(desc, "input_tensor", ("output_tensor",), data_type=True)
    x, y = desc.input_tensor, desc.output_tensor
    rank = x.dimension_count
    axis = as_int(desc.axis, "axis")
    if not 0 <= axis < rank:
        raise invalid("axis", f"must be less than input_tensor's DimensionCount ({rank}), got {axis}")
    direction = _direction(desc.axis_direction)
    excl = _flag(exclusive, exclusive_field)
    check_no_overlap(y.sizes, y.effective_strides, "output_tensor")
    check_addressable(support.fields, (x, y))
    xs, ys = x.effective_strides, y.effective_strides
    others = [d for d in range(rank) if d != axis]
    osz, (oxs, oys) = merge_dims([x.sizes[d] for d in others], [xs[d] for d in others], [ys[d] for d in others])
    n = x.sizes[axis]
    down = direction == AxisDirection.DECREASING
    x_first, y_first = ((n - 1) * xs[axis], (n - 1) * ys[axis]) if down else (0, 0)
    sign = -1 if down else 1
    pad = CUM_RANK - len(osz)  # at most 7 dimensions besides the axis
    lines = math.prod(osz)
    wg = n >= WG_MIN_AXIS
    fam = contract.CUM_WG if wg else contract.CUM
    push = fam.pack(x_off=0, y_off=0, lines=lines, n=n, x_first=x_first, y_first=y_first,
                    x_step=sign * xs[axis], y_step=sign * ys[axis], excl=int(excl), size=[1] * pad + osz,
                    x_str=[0] * pad + oxs, y_str=[0] * pad + oys)
    max_groups = device.limits["max_compute_work_group_count"][0]
    plan = DispatchPlan(variant=fam.name(op=op, t=_TYPE[x.data_type]), bindings=(0, 1), push=push,
                        groups=grid_for(lines * 256, 256, max_groups) if wg else grid_for(lines, 64, max_groups),
                        writes=(1,), offset_slots=fam.slots(x_off=(0, x.data_type.size), y_off=(1, y.data_type.size)))
    return CompiledCumulative(device, desc, support, support.inputs, support.outputs, [plan])


def plans_ahead(device: Device, op: CompiledOperator, done: set[Any]) -> list[DispatchPlan]:
    """The plan of the other family (OperatorSpec.ahead): another axis length of the same tensors
    may take a work group per line (WG_MIN_AXIS elements or more) or an invocation per line."""
    out = []
    for plan in op.plans:
        assert isinstance(plan, DispatchPlan)
        wg = plan.variant.startswith("cum_wg_")
        other = plan.variant.replace("cum_wg_", "cum_") if wg else plan.variant.replace("cum_", "cum_wg_", 1)
        out.append(dataclasses.replace(plan, variant=other))
    return out


def compile_cumulative_summation(device: Device, desc: CumulativeSummationDesc) -> CompiledOperator:
    return _compile(device, desc, CUMULATIVE_SUMMATION, "sum", desc.has_exclusive_sum, "has_exclusive_sum")


def compile_cumulative_product(device: Device, desc: CumulativeProductDesc) -> CompiledOperator:
    return _compile(device, desc, CUMULATIVE_PRODUCT, "prod", desc.has_exclusive_product, "has_exclusive_product")


def _scan(desc_type: Any, x: Any, axis: Any, exclusive: bool, reverse: bool, out: Any, device: Any) -> Any:
    from ..functional import _packed, check_out, compile_cached, pooled_empty
    from ..functional.elementwise import _operands

    dev, (t,) = _operands((x,), ("x",), device)
    d = t.desc
    rank = d.dimension_count
    a = as_int(axis, "axis")
    if not -rank <= a < rank:
        raise invalid("axis", f"must be in [{-rank}, {rank}) for x of rank {rank}, got {a}")
    if out is not None:
        check_out(out, dev, d.sizes, d.data_type)
    else:
        out = pooled_empty(dev, _packed(d.data_type, d.sizes))
    direction = AxisDirection.DECREASING if reverse else AxisDirection.INCREASING
    op = compile_cached(dev, desc_type(d, out.desc, a % rank, direction, bool(exclusive)))
    op.execute([t], [out])
    return out


def cumsum(x: Any, axis: Any = 0, *, exclusive: bool = False, reverse: bool = False, out: Any = None,
           device: Any = None) -> Any:
    """The running sum of x along `axis` (negative counts from the end), numpy.cumsum's for
    exclusive = reverse = False; `exclusive`: the sum of the elements before each one; `reverse`:
    from the last element back (ONNX CumSum's attributes). CUMULATIVE_SUMMATION; the output has
    x's type (integers wrap)."""
    return _scan(CumulativeSummationDesc, x, axis, exclusive, reverse, out, device)


def cumprod(x: Any, axis: Any = 0, *, exclusive: bool = False, reverse: bool = False, out: Any = None,
            device: Any = None) -> Any:
    """The running product of x along `axis` (numpy.cumprod's for exclusive = reverse = False;
    `exclusive`, `reverse` as kdml.cumsum's). CUMULATIVE_PRODUCT; integers keep the low bits."""
    return _scan(CumulativeProductDesc, x, axis, exclusive, reverse, out, device)


EXPORTS = {"AxisDirection": AxisDirection}


def _scan_rule(t: Any) -> str:
    """ONNX CumSum / CumProd: x of a type CUMULATIVE_SUMMATION / _PRODUCT takes at 5_0 (the axis is
    read on the host: a fed axis runs the model node by node, as TopK's fed k)."""
    allowed = frozenset(dt.numpy_dtype for dt in FLOATS | INTS_32 | INTS_64)
    dt = t.elem(0) if t.inputs else None
    if dt is not None and dt not in allowed:
        return f"type {dt} is not one the cumulative operators take"
    return ""


_F32_4D = TensorDesc(DataType.FLOAT32, (2, 3, 4, 5))
SPECS = (
    OperatorSpec(CumulativeSummationDesc, CUMULATIVE_SUMMATION, compile_cumulative_summation, (contract.CUM, contract.CUM_WG),
                 helpers=("cumsum",), ahead=plans_ahead, onnx=(OnnxOp("CumSum", "", "cumsum", check=_scan_rule),),
                 example=lambda: CumulativeSummationDesc(_F32_4D, _F32_4D, 3)),
    OperatorSpec(CumulativeProductDesc, CUMULATIVE_PRODUCT, compile_cumulative_product, (contract.CUM, contract.CUM_WG),
                 helpers=("cumprod",), ahead=plans_ahead, onnx=(OnnxOp("CumProd", "", "cumprod", check=_scan_rule),),
                 example=lambda: CumulativeProductDesc(_F32_4D, _F32_4D, 3)),
)
