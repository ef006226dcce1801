"""DirectML's DEPTH_TO_SPACE and SPACE_TO_DEPTH, the first versions of DEPTH_TO_SPACE1 and
SPACE_TO_DEPTH1 (DML_DEPTH_TO_SPACE_OPERATOR_DESC, DML_SPACE_TO_DEPTH_OPERATOR_DESC,
DML_OPERATOR_TYPE 69 and 68, from feature level 1_0): data movement, exact (bit copies).

They have no Order field: their blocks are the 1 versions' DEPTH_COLUMN_ROW (ONNX's DCR; the
DEPTH_TO_SPACE page's example: output[0, 0, 0, 1] = input channel 2 = (i * b + j) * C_out + c with
j = 1), so each runs on the 1 versions' plans (ops/depth_space.compile_depth_space: one strided copy
of six dimensions by ops/identity.plan_region_copy on COPY's shaders, or a transfer copy). The
helpers kdml.depth_to_space / kdml.space_to_depth (the 1 versions) serve both.

Tensor support as the pages give it: 4 dimensions; FLOAT32, FLOAT16 from 1_0; the 8- to 32-bit
integers from 2_1; FLOAT64, INT64, UINT64 from 5_0 (moved as word pairs). Validation, in order: the
tables (InvalidArgumentError / UnsupportedError naming the field), the pages' rules
(InvalidArgumentError whose message starts with the field): the output's data type (and dimension
count) equal the input's, BlockSize >= 1, the input's channels (DEPTH_TO_SPACE) a multiple of
BlockSize^2 or its height and width (SPACE_TO_DEPTH) multiples of BlockSize, the output's sizes as
the pages compute them; then a non-overlapping output and 32-bit element addressing.

The SPACE_TO_DEPTH page's slip: its OutputTensor member gives DEPTH_TO_SPACE's sizes
({ Batch, Channels / (BlockSize * BlockSize), Height * BlockSize, Width * BlockSize }); its example
(1, 2, 4, 6) -> (1, 8, 2, 3), its description ("the inverse transformation") and the 1 version give
{ N, C * BlockSize^2, H / BlockSize, W / BlockSize }, which kompute_dml takes.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core.dtypes import DataType
from ..core.registry import FL, FLOATS, INTS_8_32, INTS_64, D, OperatorSupport, row
from ..core.tensor_desc import TensorDesc
from ..device.device import Device
from .base import CompiledOperator
from .depth_space import compile_depth_space
from .identity import _COPY_SHADERS
from .spec import OperatorSpec


def _table(name: str, op_type: int) -> OperatorSupport:
    return OperatorSupport(name, op_type, tuple(
        row(level, ("input_tensor", "input", (4, 4), types), ("output_tensor", "output", (4, 4), types))
        for level, types in ((FL.FL_1_0, FLOATS), (FL.FL_2_1, FLOATS | INTS_8_32),
                             (FL.FL_5_0, FLOATS | INTS_8_32 | INTS_64 | frozenset({D.FLOAT64})))))


DEPTH_TO_SPACE = _table("DEPTH_TO_SPACE", 69)
SPACE_TO_DEPTH = _table("SPACE_TO_DEPTH", 68)


@dataclass(frozen=True)
class DepthToSpaceDesc:
    """DML_DEPTH_TO_SPACE_OPERATOR_DESC { InputTensor, OutputTensor, BlockSize }: input
    { N, C, H, W } -> output { N, C / (b * b), H * b, W * b }, blocks in DEPTH_COLUMN_ROW order:
    output[n, c, h * b + i, w * b + j] = input[n, (i * b + j) * C / (b * b) + c, h, w]."""

    input_tensor: TensorDesc
    output_tensor: TensorDesc
    block_size: int


@dataclass(frozen=True)
class SpaceToDepthDesc:
    """DML_SPACE_TO_DEPTH_OPERATOR_DESC { InputTensor, OutputTensor, BlockSize }: input
    { N, C, H, W } -> output { N, C * b * b, H / b, W / b }, DepthToSpaceDesc's inverse."""

    input_tensor: TensorDesc
    output_tensor: TensorDesc
    block_size: int


def compile_depth_to_space(device: Device, desc: DepthToSpaceDesc) -> CompiledOperator:
    return compile_depth_space(device, desc, True, DEPTH_TO_SPACE)


def compile_space_to_depth(device: Device, desc: SpaceToDepthDesc) -> CompiledOperator:
    return compile_depth_space(device, desc, False, SPACE_TO_DEPTH)


_DEEP = TensorDesc(DataType.FLOAT32, (1, 8, 2, 3))
_SPACE = TensorDesc(DataType.FLOAT32, (1, 2, 4, 6))
SPECS = (
    OperatorSpec(DepthToSpaceDesc, DEPTH_TO_SPACE, compile_depth_to_space, _COPY_SHADERS,
                 example=lambda: DepthToSpaceDesc(_DEEP, _SPACE, 2)),
    OperatorSpec(SpaceToDepthDesc, SPACE_TO_DEPTH, compile_space_to_depth, _COPY_SHADERS,
                 example=lambda: SpaceToDepthDesc(_SPACE, _DEEP, 2)),
)
