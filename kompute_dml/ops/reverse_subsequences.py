"""DirectML's REVERSE_SUBSEQUENCES (DML_REVERSE_SUBSEQUENCES_OPERATOR_DESC, feature level 2_1): along
`axis`, each line's first L elements reversed, L its value in SequenceLengthsTensor (the input's
sizes with the axis' size 1) clamped to the axis' length ("as if the value were clamped to the
maximum"); the rest of the line copied unchanged. Lengths 0 and 1 copy the line (the page's
second example). ONNX ReverseSequence (batch_axis, time_axis) is this operator with Axis =
time_axis and the lengths viewed along batch_axis (onnx_backend/handlers_sequence.py).

shaders/reverse_subsequences.comp: an output element per invocation, copied as bits (8, 16 or 32:
FLOAT16 and the sub-word integers as bit patterns, sub-word outputs merged with STORE_FIELD, no
byte outside the output changes). The dimensions besides the axis are merged
(`core.layout.merge_dims`); the shader takes 6 of them, and a view with 7 left (rank 8, strides that
merge none) takes a dispatch per coordinate of the outermost.

Validation, in order: the table (InvalidArgumentError / UnsupportedError naming the field; the
lengths UINT32 at every level), output_tensor's DataType and every tensor's DimensionCount
(the page's constraints), `axis` below DimensionCount, the output's sizes the input's, the
lengths' sizes the input's with 1 at the axis, a non-overlapping output, 32-bit addressing.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..core.dtypes import DataType
from ..core.errors import invalid
from ..core.ints import as_int
from ..core.layout import check_no_overlap, merge_dims
from ..core.registry import FL, FLOATS, INTS_8_32, OperatorSupport, row
from ..core.tensor_desc import TensorDesc
from ..device.memory import Tensor
from ..runtime import DispatchPlan, grid_for
from . import contract
from .base import CompiledOperator, check_like, validate_tensors
from .contract.sequence import SEQ_RANK
from .elementwise_plan import check_addressable
from .spec import OnnxOp, OperatorSpec

if TYPE_CHECKING:
    from ..device.device import Device

_TYPES = FLOATS | INTS_8_32
_U32 = frozenset({DataType.UINT32})


def _row(level: FL, dims: tuple[int, int]) -> Any:
    return row(level, ("input_tensor", "input", dims, _TYPES), ("sequence_lengths_tensor", "input", dims, _U32),
               ("output_tensor", "output", dims, _TYPES))


REVERSE_SUBSEQUENCES = OperatorSupport("REVERSE_SUBSEQUENCES", 106, (
    _row(FL.FL_2_1, (4, 4)), _row(FL.FL_3_0, (4, 5)), _row(FL.FL_4_0, (1, 8))))


@dataclass(frozen=True)
class ReverseSubsequencesDesc:
    """DML_REVERSE_SUBSEQUENCES_OPERATOR_DESC { InputTensor, SequenceLengthsTensor, OutputTensor, Axis }."""

    input_tensor: TensorDesc
    sequence_lengths_tensor: TensorDesc
    output_tensor: TensorDesc
    axis: int


def _dot(c: tuple[int, ...], strides: list[int]) -> int:
    return sum(a * b for a, b in zip(c, strides))


def compile_reverse_subsequences(device: Device, desc: ReverseSubsequencesDesc) -> CompiledOperator:
    support = REVERSE_SUBSEQUENCES
    validate_tensors(support, device.feature_level, desc, support.fields, support.outputs)
    x, lens, y = desc.input_tensor, desc.sequence_lengths_tensor, desc.output_tensor
    check_like(x, y)
    if lens.dimension_count != x.dimension_count:
        raise invalid("sequence_lengths_tensor.sizes", f"dimension count must equal input_tensor's "
                                                       f"({x.dimension_count}), got {lens.dimension_count}")
    rank = x.dimension_count
    axis = as_int(desc.axis, "axis")
    if not 0 <= axis < rank:
        raise invalid("axis", f"must be less than input_tensor's DimensionCount ({rank}), got {axis}")
    if y.sizes != x.sizes:
        raise invalid("output_tensor.sizes", f"must equal input_tensor's {x.sizes}, got {y.sizes}")
    want = tuple(1 if d == axis else s for d, s in enumerate(x.sizes))
    if lens.sizes != want:
        raise invalid("sequence_lengths_tensor.sizes", f"must be input_tensor's sizes with 1 at the axis, {want}, "
                                                       f"got {lens.sizes}")
    check_no_overlap(y.sizes, y.effective_strides, "output_tensor")
    check_addressable(support.fields, (x, lens, y))
    others = [d for d in range(rank) if d != axis]
    xs, ys, ls = x.effective_strides, y.effective_strides, lens.effective_strides
    osz, (oxs, oys, ols) = merge_dims([x.sizes[d] for d in others], [xs[d] for d in others], [ys[d] for d in others],
                                      [ls[d] for d in others])
    # dimensions beyond the shader's SEQ_RANK (a rank-8 view whose others do not merge): a dispatch
    # per coordinate of the outer ones, their offsets packed (the runtime adds the binding's)
    extra = max(0, len(osz) - SEQ_RANK)
    isz = osz[extra:]
    pad = SEQ_RANK - len(isz)
    fam = contract.sequence.REVSEQ
    total = math.prod(isz) * x.sizes[axis]
    groups = grid_for(total, 256, device.limits["max_compute_work_group_count"][0])
    plans = []
    for c in itertools.product(*(range(v) for v in osz[:extra])):
        push = fam.pack(x_off=_dot(c, oxs), l_off=_dot(c, ols), y_off=_dot(c, oys), total=total, n=x.sizes[axis],
                        x_ax=xs[axis], y_ax=ys[axis], size=[1] * pad + isz, xs=[0] * pad + oxs[extra:],
                        ys=[0] * pad + oys[extra:], ls=[0] * pad + ols[extra:])
        plans.append(DispatchPlan(variant=fam.name(bits=8 * x.data_type.size), bindings=(0, 1, 2), push=push, writes=(2,),
                                  offset_slots=fam.slots(x_off=(0, x.data_type.size), l_off=(1, 4),
                                                         y_off=(2, y.data_type.size)), groups=groups))
    return CompiledOperator(device, desc, support, support.inputs, support.outputs, plans)


# ---- functional helper (exported as kdml.<name>) -----------------------------------------
def reverse_subsequences(x: Any, lengths: Any, axis: int, *, out: Any = None, device: Any = None) -> Any:
    """DML_REVERSE_SUBSEQUENCES: along `axis` (negative counts from the end), each line's first
    lengths[...] elements reversed (lengths: x's shape with 1 at the axis, UINT32; host integers are
    converted), into a new packed Tensor or `out`."""
    from ..functional import run_into
    from ..functional.elementwise import _operands

    dev, (t,) = _operands((x,), ("x",), device)
    rank = t.desc.dimension_count
    a = as_int(axis, "axis")
    if not -rank <= a < rank:
        raise invalid("axis", f"must be in [{-rank}, {rank}) for x of rank {rank}, got {a}")
    a %= rank
    if not isinstance(lengths, Tensor):  # host integers: x's shape with 1 at the axis, as UINT32
        arr = np.asarray(lengths)
        if arr.size and (arr.min() < 0 or arr.max() > 0xFFFFFFFF):
            raise invalid("lengths", "values must be within UINT32")
        want = tuple(1 if d == a else s for d, s in enumerate(t.desc.sizes))
        lengths = arr.astype(np.uint32).reshape(want)
    _, (tl,) = _operands((lengths,), ("lengths",), dev)
    return run_into(dev, lambda od: ReverseSubsequencesDesc(t.desc, tl.desc, od, a), [t, tl], t.desc.sizes, t.desc.data_type,
                    out)


def _example() -> ReverseSubsequencesDesc:
    f32 = DataType.FLOAT32
    return ReverseSubsequencesDesc(TensorDesc(f32, (1, 1, 3, 4)), TensorDesc(DataType.UINT32, (1, 1, 3, 1)),
                                   TensorDesc(f32, (1, 1, 3, 4)), 3)


def _onnx_rule(t: Any) -> str:
    """ONNX ReverseSequence (onnx_backend/handlers_sequence.py): x of a type the operator takes (bool
    as UINT8), sequence_lens int64 or int32."""
    allowed = frozenset(dt.numpy_dtype for dt in _TYPES) | {np.dtype(np.bool_)}
    dt = t.elem(0) if t.inputs else None
    if dt is not None and dt not in allowed:
        return f"type {dt} is not one REVERSE_SUBSEQUENCES takes"
    lt = t.elem(1) if t.inputs > 1 else None
    if lt is not None and lt not in (np.dtype(np.int64), np.dtype(np.int32)):
        return f"sequence_lens of type {lt}"
    return ""


SPECS = (OperatorSpec(ReverseSubsequencesDesc, REVERSE_SUBSEQUENCES, compile_reverse_subsequences,
                      (contract.sequence.REVSEQ,), helpers=("reverse_subsequences",),
                      onnx=(OnnxOp("ReverseSequence", "", "reverse_subsequences", check=_onnx_rule),), example=_example),)
