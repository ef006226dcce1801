"""DirectML's MAX_UNPOOLING (DML_MAX_UNPOOLING_OPERATOR_DESC, feature level 3_0; every type and UINT64
indices from 5_0): the output zeroed, then each input element written at the element its index
names, the index counting the output's elements as one row-major (contiguous) array; the inverse of
MAX_POOLING1 / MAX_POOLING2 with their OutputIndicesTensor. ONNX MaxUnpool runs on it
(onnx_backend/handlers_detection.py).

shaders/max_unpooling.comp, two dispatches: every output element zeroed (an invocation each), then,
after a barrier, each input element (an invocation each) copied bit for bit to its index's element.
The page: "all indices should be unique, and within bounds. The value written for duplicate indices
is not defined; out-of-bounds indices yield no write": an index at or past the output's element
count (UINT64: also one with a nonzero high word) writes nothing; of duplicates one input's value
lands (which is not defined; a 64-bit element's two words may then come from two of them). Exact:
bits are copied, so every type is one of four widths (8, 16, 32, 64 bits).

The page gives InputTensor { Batch, Channel, Height, Width } and an OutputTensor "of the same number
of dimensions" and no constraint on the output's sizes: any 4-D output is taken (ONNX's output_shape
chooses it). IndicesTensor must have InputTensor's sizes, OutputTensor InputTensor's data type.
Validation, in order: the table, the data types, the sizes, non-overlapping output, 32-bit addressing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..core.dtypes import DataType
from ..core.errors import invalid
from ..core.ints import as_int
from ..core.layout import check_no_overlap
from ..core.registry import FL, FLOATS, INTS_8_32, INTS_64, OperatorSupport, row
from ..core.tensor_desc import TensorDesc
from ..device.memory import Tensor
from ..functional import run_into
from ..functional.elementwise import _operands
from ..runtime import DispatchPlan, grid_for
from . import contract
from .base import CompiledOperator, validate_tensors
from .elementwise_plan import check_addressable
from .onnx_types import float_input
from .spec import OnnxOp, OperatorSpec

if TYPE_CHECKING:
    from ..device.device import Device

_ALL = FLOATS | INTS_8_32 | INTS_64
_U32_U64 = frozenset({DataType.UINT32, DataType.UINT64})
MAX_UNPOOLING = OperatorSupport("MAX_UNPOOLING", 92, (
    row(FL.FL_3_0, ("input_tensor", "input", (4, 4), FLOATS), ("indices_tensor", "input", (4, 4), frozenset({DataType.UINT32})),
        ("output_tensor", "output", (4, 4), FLOATS)),
    row(FL.FL_5_0, ("input_tensor", "input", (4, 4), _ALL), ("indices_tensor", "input", (4, 4), _U32_U64),
        ("output_tensor", "output", (4, 4), _ALL)),))


@dataclass(frozen=True)
class MaxUnpoolingDesc:
    """DML_MAX_UNPOOLING_OPERATOR_DESC { InputTensor, IndicesTensor, OutputTensor }."""

    input_tensor: TensorDesc
    indices_tensor: TensorDesc
    output_tensor: TensorDesc


def compile_max_unpooling(device: Device, desc: MaxUnpoolingDesc) -> CompiledOperator:
    support = MAX_UNPOOLING
    validate_tensors(support, device.feature_level, desc, support.fields, support.outputs)
    x, i, y = desc.input_tensor, desc.indices_tensor, desc.output_tensor
    if y.data_type != x.data_type:
        raise invalid("output_tensor.data_type", f"must equal input_tensor's ({x.data_type.name}), got {y.data_type.name}")
    if i.sizes != x.sizes:
        raise invalid("indices_tensor.sizes", f"must equal input_tensor's {x.sizes}, got {i.sizes}")
    check_no_overlap(y.sizes, y.effective_strides, "output_tensor")
    check_addressable(support.fields, (x, i, y))
    fam = contract.detection.UNPOOL
    unit, iunit = x.data_type.size, i.data_type.size
    variant = fam.name(bits=8 * unit, ib=8 * iunit)
    limit = device.limits["max_compute_work_group_count"][0]
    plans = []
    for step, count in ((0, y.element_count), (1, x.element_count)):
        push = fam.pack(x_off=0, i_off=0, y_off=0, **{"pass": step}, n_in=x.element_count, n_out=y.element_count,
                        isz=list(x.sizes), xs=list(x.effective_strides), ids=list(i.effective_strides),
                        ys=list(y.effective_strides), osz=list(y.sizes))
        plans.append(DispatchPlan(variant=variant, bindings=(0, 1, 2), push=push, writes=(2,), groups=grid_for(count, 256, limit),
                                  offset_slots=fam.slots(x_off=(0, unit), i_off=(1, iunit), y_off=(2, unit))))
    return CompiledOperator(device, desc, support, support.inputs, support.outputs, plans)


# ---- functional helper (exported as kdml.<name>) -----------------------------------------
def max_unpool(x: Any, indices: Any, output_size: Sequence[int], *, out: Tensor | None = None,
               device: Device | None = None) -> Tensor:
    """DML_MAX_UNPOOLING (ONNX MaxUnpool): x and indices (N, C, H, W), indices UINT32 / UINT64 (INT64
    taken as UINT64: a negative index writes nothing) flat over the output -> a new Tensor of
    output_size (4 sizes), or `out`."""
    dev, (tx,) = _operands((x,), ("x",), device)
    (ti,) = _operands((indices,), ("indices",), dev)[1]
    if ti.desc.data_type in (DataType.INT64, DataType.INT32):
        u = DataType.UINT64 if ti.desc.data_type == DataType.INT64 else DataType.UINT32
        ti = Tensor.trusted(ti.buffer, TensorDesc(u, ti.desc.sizes, ti.desc.effective_strides), ti.offset)
    shape = tuple(as_int(v, "output_size") for v in output_size)
    dt = tx.desc.data_type
    return run_into(dev, lambda od: MaxUnpoolingDesc(tx.desc, ti.desc, od), [tx, ti], shape, dt, out)


def _example() -> MaxUnpoolingDesc:
    f32 = DataType.FLOAT32
    return MaxUnpoolingDesc(TensorDesc(f32, (1, 2, 2, 2)), TensorDesc(DataType.UINT32, (1, 2, 2, 2)),
                            TensorDesc(f32, (1, 2, 4, 4)))


SPECS = (OperatorSpec(MaxUnpoolingDesc, MAX_UNPOOLING, compile_max_unpooling, (contract.detection.UNPOOL,),
                      helpers=("max_unpool",), onnx=(OnnxOp("MaxUnpool", "", "max_unpool", check=float_input),),
                      example=_example),)
