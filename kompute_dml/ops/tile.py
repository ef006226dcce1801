"""DirectML's TILE operator (DML_TILE_OPERATOR_DESC): the output is the input repeated
Repeats[i] times along each dimension i (OutputTensor.Sizes[i] = InputTensor.Sizes[i] *
Repeats[i]). Planned as PADDING's wrap mode with no start padding (ops/padding.plan_pad,
shaders/pad.comp): output coordinate c reads the input at c modulo its size. Validation, in
order: DML_BUFFER_TENSOR_DESC rules and the table (InvalidArgumentError / UnsupportedError
naming the field), the page's constraints (the same DataType and DimensionCount, repeats > 0,
RepeatsCount = DimensionCount, the output's sizes), a non-overlapping output.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..core.dtypes import DataType
from ..core.errors import invalid
from ..core.ints import as_int_tuple
from ..core.registry import FL, FLOATS, INTS_8_32, INTS_64, OperatorSupport, row
from ..core.tensor_desc import TensorDesc
from ..device.device import Device
from ..device.memory import Tensor
from ..functional import _packed, check_out, compile_cached, pooled_empty
from ..functional.elementwise import _operands
from . import contract
from .base import CompiledOperator, validate_tensors
from .elementwise import CompiledElementWise
from .padding import PaddingMode, plan_pad
from .spec import OnnxOp, OperatorSpec

_D21 = FLOATS | INTS_8_32
# ---- TILE from DML_TILE_OPERATOR_DESC's page (rows 1_0, 2_1, 3_1, 4_1) ----------------------
TILE = OperatorSupport("TILE", 70, tuple(
    row(level, ("input_tensor", "input", dims, types), ("output_tensor", "output", dims, types))
    for level, dims, types in ((FL.FL_1_0, (4, 4), FLOATS), (FL.FL_2_1, (4, 4), _D21), (FL.FL_3_1, (1, 8), _D21),
                               (FL.FL_4_1, (1, 8), _D21 | INTS_64))))


@dataclass(frozen=True)
class TileDesc:
    """DML_TILE_OPERATOR_DESC { InputTensor, OutputTensor, RepeatsCount, Repeats }."""

    input_tensor: TensorDesc
    output_tensor: TensorDesc
    repeats: tuple[int, ...]


def compile_tile(device: Device, desc: TileDesc) -> CompiledOperator:
    support = TILE
    validate_tensors(support, device.feature_level, desc, support.fields, support.outputs)
    x, y = desc.input_tensor, desc.output_tensor
    n = x.dimension_count
    if y.data_type != x.data_type:
        raise invalid("output_tensor.data_type", f"must equal input_tensor's ({x.data_type.name}), got {y.data_type.name}")
    if y.dimension_count != n:
        raise invalid("output_tensor.sizes", f"dimension count must equal input_tensor's ({n}), got {y.dimension_count}")
    reps = as_int_tuple(desc.repeats, "repeats")
    if len(reps) != n:
        raise invalid("repeats", f"must hold {n} values (input_tensor's dimension count), got {len(reps)}")
    if any(r < 1 for r in reps):
        raise invalid("repeats", f"values must be larger than 0, got {reps}")
    want = tuple(s * r for s, r in zip(x.sizes, reps))
    if y.sizes != want:
        raise invalid("output_tensor.sizes", f"must be {want} (input_tensor's sizes * repeats), got {y.sizes}")
    plans = plan_pad(device, x, y, (0,) * n, PaddingMode.WRAP, 0)
    return CompiledElementWise(device, desc, support, support.inputs, support.outputs, list(plans))


# ---- functional helper (exported as kdml.<name>) -----------------------------------------
# `tile(x, repeats)` (ONNX Tile): a new packed Tensor (or `out=`, any strides).
def tile(x: Any, repeats: Any, *, out: Tensor | None = None, device: Device | None = None) -> Tensor:
    """DML_TILE: x repeated repeats[i] times along dimension i."""
    dev, (t,) = _operands((x,), ("x",), device)
    reps = as_int_tuple(repeats, "repeats")
    dt = t.desc.data_type
    shape = tuple(s * r for s, r in zip(t.desc.sizes, reps))
    if out is not None:
        check_out(out, dev, shape, dt)
    od = out.desc if out is not None else _packed(dt, shape)
    op = compile_cached(dev, TileDesc(t.desc, od, reps))
    if out is None:
        out = pooled_empty(dev, od)
    op.execute([t], [out])
    return out


# ---- spec (kompute_dml/ops/spec.py) --------------------------------------------------------
SPECS = (OperatorSpec(TileDesc, TILE, compile_tile, (contract.PAD,), helpers=("tile",), onnx=(OnnxOp("Tile", "", "tile"),),
                      example=lambda: TileDesc(TensorDesc(DataType.FLOAT32, (1, 1, 2, 3)),
                                               TensorDesc(DataType.FLOAT32, (1, 1, 6, 9)), (1, 1, 3, 3))),)
