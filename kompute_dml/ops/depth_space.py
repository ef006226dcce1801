"""DirectML's DEPTH_TO_SPACE1 and SPACE_TO_DEPTH1 (DML_DEPTH_TO_SPACE1_OPERATOR_DESC,
DML_SPACE_TO_DEPTH1_OPERATOR_DESC): data movement, exact (elements copied as bit patterns).

DEPTH_TO_SPACE1 moves blocks of BlockSize x BlockSize channels into the height and width:
output[n, c, h * b + i, w * b + j] = input[n, k, h, w] with k = (i * b + j) * C_out + c
(Order DEPTH_COLUMN_ROW, ONNX's DCR) or k = c * b * b + i * b + j (COLUMN_ROW_DEPTH, ONNX's
CRD); SPACE_TO_DEPTH1 is its inverse. Both are one strided copy of six dimensions (n, c, h, i, w,
j) planned by ops/identity.plan_region_copy on COPY's shaders (or a transfer copy), with no shader
of their own. ONNX DepthToSpace and SpaceToDepth (both modes) run on them
(onnx_backend/handlers_vision.py); helpers kdml.depth_to_space, kdml.space_to_depth.

Tensor support as the pages give it: 4 dimensions, FLOAT32, FLOAT16, INT32, INT16, INT8, UINT32,
UINT16, UINT8, from 2_1. Validation, in order: the tables (InvalidArgumentError / UnsupportedError
naming the field), the pages' rules (InvalidArgumentError whose message starts with the field):
the output's data type and dimension count equal the input's, BlockSize >= 1, the input's channels
(DEPTH_TO_SPACE1) a multiple of BlockSize^2, the input's height and width (SPACE_TO_DEPTH1)
multiples of BlockSize, the output's sizes as the pages compute them; then a non-overlapping
output and 32-bit element addressing.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..core.dtypes import DataType
from ..core.errors import invalid
from ..core.ints import as_int
from ..core.layout import check_no_overlap
from ..core.registry import FL, FLOATS, INTS_8_32, OperatorSupport, row
from ..core.tensor_desc import TensorDesc
from ..device.memory import Tensor
from ..functional import _packed, check_out, compile_cached, pooled_empty
from ..functional.elementwise import _operands
from .base import CompiledOperator, check_like, validate_tensors
from .elementwise_plan import check_addressable
from .identity import _COPY_SHADERS, plan_region_copy
from .spec import OnnxOp, OperatorSpec

if TYPE_CHECKING:
    from ..device.device import Device


class DepthSpaceOrder(enum.IntEnum):
    """DML_DEPTH_SPACE_ORDER (exported as kdml.DepthSpaceOrder): ONNX's DCR and CRD."""

    DEPTH_COLUMN_ROW = 0
    COLUMN_ROW_DEPTH = 1


def _table(name: str, op_type: int) -> OperatorSupport:
    types = FLOATS | INTS_8_32
    return OperatorSupport(name, op_type, (
        row(FL.FL_2_1, ("input_tensor", "input", (4, 4), types), ("output_tensor", "output", (4, 4), types)),))


DEPTH_TO_SPACE1 = _table("DEPTH_TO_SPACE1", 113)
SPACE_TO_DEPTH1 = _table("SPACE_TO_DEPTH1", 114)


@dataclass(frozen=True)
class DepthToSpace1Desc:
    """DML_DEPTH_TO_SPACE1_OPERATOR_DESC { InputTensor, OutputTensor, BlockSize, Order }: input
    { N, C, H, W } -> output { N, C / (b * b), H * b, W * b }."""

    input_tensor: TensorDesc
    output_tensor: TensorDesc
    block_size: int
    order: DepthSpaceOrder = DepthSpaceOrder.DEPTH_COLUMN_ROW


@dataclass(frozen=True)
class SpaceToDepth1Desc:
    """DML_SPACE_TO_DEPTH1_OPERATOR_DESC { InputTensor, OutputTensor, BlockSize, Order }: input
    { N, C, H, W } -> output { N, C * b * b, H / b, W / b }."""

    input_tensor: TensorDesc
    output_tensor: TensorDesc
    block_size: int
    order: DepthSpaceOrder = DepthSpaceOrder.DEPTH_COLUMN_ROW


def _block_strides(deep: TensorDesc, b: int, c: int, order: DepthSpaceOrder) -> list[int]:
    """The deep tensor's (channels in blocks) strides over (n, c, h, i, w, j)."""
    s0, s1, s2, s3 = deep.effective_strides
    if order == DepthSpaceOrder.DEPTH_COLUMN_ROW:
        return [s0, s1, s2, b * c * s1, s3, c * s1]
    return [s0, b * b * s1, s2, b * s1, s3, s1]


def _compile(device: Device, desc: Any, to_space: bool) -> CompiledOperator:
    return compile_depth_space(device, desc, to_space, DEPTH_TO_SPACE1 if to_space else SPACE_TO_DEPTH1)


def compile_depth_space(device: Device, desc: Any, to_space: bool, support: OperatorSupport) -> CompiledOperator:
    """Either direction of either version (the first versions, ops/depth_space_first.py, have no
    `order` field: DEPTH_COLUMN_ROW) against `support`, the version's table."""
    validate_tensors(support, device.feature_level, desc, support.fields, support.outputs)
    x, y = desc.input_tensor, desc.output_tensor
    check_like(x, y)
    b = as_int(desc.block_size, "block_size")
    if b < 1:
        raise invalid("block_size", f"must be >= 1, got {b}")
    try:
        order = DepthSpaceOrder(getattr(desc, "order", DepthSpaceOrder.DEPTH_COLUMN_ROW))
    except ValueError:
        raise invalid("order", f"must be a DML_DEPTH_SPACE_ORDER, got {desc.order!r}") from None
    n, c, h, w = x.sizes
    if to_space:
        if c % (b * b):
            raise invalid("input_tensor.sizes", f"the channel count {c} must be a multiple of block_size^2 ({b * b})")
        want = (n, c // (b * b), h * b, w * b)
    else:
        if h % b or w % b:
            raise invalid("input_tensor.sizes", f"height {h} and width {w} must be multiples of block_size ({b})")
        want = (n, c * b * b, h // b, w // b)
    if y.sizes != want:
        raise invalid("output_tensor.sizes", f"must be {want} (the page's sizes for block_size {b}), got {y.sizes}")
    check_no_overlap(y.sizes, y.effective_strides, "output_tensor")
    check_addressable(support.fields, (x, y))
    space, deep = (y, x) if to_space else (x, y)
    small_c = space.sizes[1]
    s0, s1, s2, s3 = space.effective_strides
    flat = [s0, s1, b * s2, s2, b * s3, s3]
    blocks = _block_strides(deep, b, small_c, order)
    src, dst = (blocks, flat) if to_space else (flat, blocks)
    sizes = (n, small_c, space.sizes[2] // b, b, space.sizes[3] // b, b)
    policy = device.policy
    plans = plan_region_copy(y.data_type, sizes, src, dst, 0, 0, 0, 1, device.limits["max_compute_work_group_count"][0],
                             lambda regions: policy.copies_by_transfer(y.byte_size, regions), policy.memory_kernel)
    return CompiledOperator(device, desc, support, support.inputs, support.outputs, plans)


def compile_depth_to_space1(device: Device, desc: DepthToSpace1Desc) -> CompiledOperator:
    return _compile(device, desc, True)


def compile_space_to_depth1(device: Device, desc: SpaceToDepth1Desc) -> CompiledOperator:
    return _compile(device, desc, False)


_ORDERS = {"DCR": DepthSpaceOrder.DEPTH_COLUMN_ROW, "CRD": DepthSpaceOrder.COLUMN_ROW_DEPTH}


def _helper(x: Any, blocksize: Any, mode: Any, out: Tensor | None, device: Device | None, to_space: bool) -> Tensor:
    if device is None and isinstance(out, Tensor):
        device = out.device
    dev, (t,) = _operands((x,), ("x",), device)
    if isinstance(mode, str):
        if mode.upper() not in _ORDERS:
            raise invalid("mode", f"must be 'DCR' or 'CRD', got {mode!r}")
        order = _ORDERS[mode.upper()]
    else:
        order = DepthSpaceOrder(mode)
    b = as_int(blocksize, "blocksize")
    if t.desc.dimension_count != 4:
        raise invalid("x", f"must have 4 dimensions (N, C, H, W), got {t.desc.sizes}")
    if b < 1:
        raise invalid("blocksize", f"must be >= 1, got {b}")
    n, c, h, w = t.desc.sizes
    shape = (n, c // (b * b), h * b, w * b) if to_space else (n, c * b * b, h // b, w // b)
    dt = t.desc.data_type
    if out is not None:
        check_out(out, dev, shape, dt)
    y = out if out is not None else pooled_empty(dev, _packed(dt, tuple(max(1, s) for s in shape)))
    cls = DepthToSpace1Desc if to_space else SpaceToDepth1Desc
    compile_cached(dev, cls(t.desc, y.desc if y.desc.sizes == shape else TensorDesc(dt, shape), b, order)).execute([t], [y])
    return y


def depth_to_space(x: Any, blocksize: int, mode: Any = "DCR", *, out: Tensor | None = None,
                   device: Device | None = None) -> Tensor:
    """ONNX DepthToSpace on DEPTH_TO_SPACE1: (N, C, H, W) -> (N, C / b^2, H b, W b); mode "DCR"
    (depth-column-row, the default) or "CRD" (or a DepthSpaceOrder). A bit copy."""
    return _helper(x, blocksize, mode, out, device, True)


def space_to_depth(x: Any, blocksize: int, mode: Any = "DCR", *, out: Tensor | None = None,
                   device: Device | None = None) -> Tensor:
    """ONNX SpaceToDepth on SPACE_TO_DEPTH1: (N, C, H, W) -> (N, C b^2, H / b, W / b); mode "DCR"
    or "CRD" (opset 28's attribute). A bit copy."""
    return _helper(x, blocksize, mode, out, device, False)


_MOVED = frozenset(np.dtype(t) for t in (np.float32, np.float16, np.int32, np.int16, np.int8, np.uint32, np.uint16,
                                         np.uint8, np.bool_))


def depth_space_rule(t: Any) -> str:
    """The pages' 8- to 32-bit types (booleans move as UINT8); 64-bit ones stay on the CPU."""
    dt = t.elem(0) if t.inputs else None
    return f"type {dt} is not an 8- to 32-bit type of the page's table" if dt is not None and dt not in _MOVED else ""


EXPORTS = {"DepthSpaceOrder": DepthSpaceOrder}
_DEEP = TensorDesc(DataType.FLOAT32, (1, 8, 2, 3))
_SPACE = TensorDesc(DataType.FLOAT32, (1, 2, 4, 6))
SPECS = (
    OperatorSpec(DepthToSpace1Desc, DEPTH_TO_SPACE1, compile_depth_to_space1, _COPY_SHADERS, helpers=("depth_to_space",),
                 onnx=(OnnxOp("DepthToSpace", "", "depth_to_space", check=depth_space_rule),),
                 example=lambda: DepthToSpace1Desc(_DEEP, _SPACE, 2, DepthSpaceOrder.COLUMN_ROW_DEPTH)),
    OperatorSpec(SpaceToDepth1Desc, SPACE_TO_DEPTH1, compile_space_to_depth1, _COPY_SHADERS, helpers=("space_to_depth",),
                 onnx=(OnnxOp("SpaceToDepth", "", "space_to_depth", check=depth_space_rule),),
                 example=lambda: SpaceToDepth1Desc(_SPACE, _DEEP, 2)),
)
