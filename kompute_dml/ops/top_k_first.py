"""DirectML's TOP_K, TOP_K1's first version (DML_TOP_K_OPERATOR_DESC, DML_OPERATOR_TYPE 71, from
feature level 2_0): the K largest elements of each sequence along Axis, sorted largest first, with
their indices within the sequence; tied values ordered by ascending index (the page's example 3).

It is TOP_K1 with AxisDirection DECREASING (the field TOP_K1 added; DECREASING selects the largest)
and runs on TOP_K1's plans (ops/top_k.plan_top_k: shaders/topk.comp, one work group per sequence of
at most 1024 elements, tiles and a ranking pass beyond; docs/top_k.md has the order of floats: -0
equals +0, NaN above +inf, values copied bit for bit). kdml.top_k (TOP_K1) remains the helper.

Tensor support as the page gives it: 4 dimensions at 2_0 (FLOAT32, FLOAT16 values), the 8- to 32-bit
integers from 2_1, 1 to 8 dimensions from 3_1, INT64 / UINT64 values and UINT64 indices from 5_0;
indices UINT32 throughout. Validation, in order: DML_BUFFER_TENSOR_DESC rules and the table
(InvalidArgumentError / UnsupportedError naming the field), then TOP_K1's rules, which are this
page's (InvalidArgumentError whose message starts with the field): one DimensionCount, the value
output of the input's DataType, Axis < DimensionCount, the outputs the input's sizes with K along
Axis, non-overlapping outputs, 32-bit element addressing. The page asks K "greater than 0, but less
than" the axis' size; kompute_dml takes K equal to it too (a whole sorted sequence), as it does for
TOP_K1, whose page says the same and whose ONNX TopK allows it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core.dtypes import DataType
from ..core.registry import FL, FLOATS, INTS_8_32, INTS_64, D, OperatorSupport, row
from ..core.tensor_desc import TensorDesc
from ..device.device import Device
from . import contract
from .base import CompiledOperator, validate_tensors
from .cumulative import AxisDirection
from .spec import OperatorSpec
from .top_k import TopK1Desc, plan_top_k

_VALUES = FLOATS | INTS_8_32
_U32 = frozenset({D.UINT32})
TOP_K = OperatorSupport("TOP_K", 71, tuple(
    row(level, ("input_tensor", "input", dims, vals), ("output_value_tensor", "output", dims, vals),
        ("output_index_tensor", "output", dims, idx))
    for level, dims, vals, idx in ((FL.FL_2_0, (4, 4), FLOATS, _U32), (FL.FL_2_1, (4, 4), _VALUES, _U32),
                                   (FL.FL_3_1, (1, 8), _VALUES, _U32),
                                   (FL.FL_5_0, (1, 8), _VALUES | INTS_64, _U32 | {D.UINT64}))))


@dataclass(frozen=True)
class TopKDesc:
    """DML_TOP_K_OPERATOR_DESC { InputTensor, OutputValueTensor, OutputIndexTensor, Axis, K }: per
    sequence along `axis`, the K largest values, largest first, and their indices within the
    sequence (ties by ascending index). The outputs have the input's sizes with K along the axis;
    the values the input's DataType."""

    input_tensor: TensorDesc
    output_value_tensor: TensorDesc
    output_index_tensor: TensorDesc
    axis: int
    k: int


def compile_top_k_first(device: Device, desc: TopKDesc) -> CompiledOperator:
    support = TOP_K
    validate_tensors(support, device.feature_level, desc, support.fields, support.outputs)
    newer = TopK1Desc(desc.input_tensor, desc.output_value_tensor, desc.output_index_tensor, desc.axis, desc.k,
                      AxisDirection.DECREASING)
    plans, constants = plan_top_k(device, newer)
    return CompiledOperator(device, desc, support, support.inputs, support.outputs, plans, constants=constants)


_F4 = TensorDesc(DataType.FLOAT32, (1, 1, 3, 4))
SPECS = (OperatorSpec(TopKDesc, TOP_K, compile_top_k_first, (contract.TOPK,),
                      example=lambda: TopKDesc(_F4, TensorDesc(DataType.FLOAT32, (1, 1, 3, 2)),
                                               TensorDesc(DataType.UINT32, (1, 1, 3, 2)), 3, 2)),)
