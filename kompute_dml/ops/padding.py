"""DirectML's PADDING and PADDING1 operators (DML_PADDING_OPERATOR_DESC,
DML_PADDING1_OPERATOR_DESC): the input placed in a larger output at StartPadding, the rest
filled by PaddingMode: CONSTANT (the value), EDGE (the nearest edge element), REFLECTION (folded
on the edges, edges not repeated, periodically for pads beyond the size), SYMMETRIC (edges
repeated; from 3_0). The planner is shared with TILE (ops/tile.py: a wrap of the input).

One element per output element (shaders/pad.comp): merged output dimensions (unpadded ones
that are contiguous in both tensors), up to contract.PAD_RANK in the shader, the rest
enumerated by the host (one dispatch per coordinate, base offsets; a coordinate in a constant
region flags the dispatch all-constant). Elements move as bit patterns. PADDING's FLOAT
PaddingValue converts to the output's type as DIAGONAL_MATRIX's Value does (floats rounded to
nearest even, integers truncated toward zero and saturated, NaN -> 0); PADDING1's
DML_SCALAR_UNION is read as padding_value_data_type (ops/diagonal.value1_bits). Validation, in
order: DML_BUFFER_TENSOR_DESC rules and the table (InvalidArgumentError / UnsupportedError
naming the field), the page's constraints (InvalidArgumentError naming the field), the value,
a non-overlapping output and 32-bit element addressing.
"""

from __future__ import annotations

import enum
import itertools
from dataclasses import dataclass
from typing import Any

from ..core.dtypes import DataType
from ..core.errors import UnsupportedError, invalid
from ..core.ints import as_int, as_int_tuple
from ..core.layout import check_no_overlap
from ..core.registry import ALL_TYPES, FL, FLOATS, INTS_8_32, OperatorSupport, row
from ..core.tensor_desc import TensorDesc
from ..device.device import Device
from ..device.memory import Tensor
from ..functional import _packed, check_out, compile_cached, pooled_empty
from ..functional.elementwise import _operands
from ..runtime import DispatchPlan, grid_for
from . import contract
from .base import CompiledOperator, validate_tensors
from .diagonal import diagonal_value_bits, value1_bits
from .elementwise import CompiledElementWise
from .elementwise_plan import check_addressable
from .spec import OnnxOp, OperatorSpec

_D21 = FLOATS | INTS_8_32
# ---- PADDING from DML_PADDING_OPERATOR_DESC's page (rows 1_0, 2_1, 3_1, 5_0) ----------------
PADDING = OperatorSupport("PADDING", 64, tuple(
    row(level, ("input_tensor", "input", dims, types), ("output_tensor", "output", dims, types))
    for level, dims, types in ((FL.FL_1_0, (4, 5), FLOATS), (FL.FL_2_1, (4, 5), _D21), (FL.FL_3_1, (1, 8), _D21),
                               (FL.FL_5_0, (1, 8), ALL_TYPES))))
# ---- PADDING1 from DML_PADDING1_OPERATOR_DESC's page (introduced in 5_0, one row) -----------
PADDING1 = OperatorSupport("PADDING1", 155, (
    row(FL.FL_5_0, ("input_tensor", "input", (1, 8), ALL_TYPES), ("output_tensor", "output", (1, 8), ALL_TYPES)),))


class PaddingMode(enum.IntEnum):
    """DML_PADDING_MODE (exported as kdml.PaddingMode). WRAP (DirectML 6_4's: p modulo the
    size, TILE's mapping) is accepted by PADDING1 as kompute_dml's extension (ONNX Pad's
    "wrap"), not by PADDING."""

    CONSTANT = 0
    EDGE = 1
    REFLECTION = 2
    SYMMETRIC = 3
    WRAP = 4


@dataclass(frozen=True)
class PaddingDesc:
    """DML_PADDING_OPERATOR_DESC { InputTensor, OutputTensor, PaddingMode, PaddingValue (FLOAT),
    DimensionCount, StartPadding, EndPadding }: OutputTensor.Sizes[i] = InputTensor.Sizes[i] +
    start_padding[i] + end_padding[i]."""

    input_tensor: TensorDesc
    output_tensor: TensorDesc
    padding_mode: PaddingMode
    padding_value: float
    start_padding: tuple[int, ...]
    end_padding: tuple[int, ...]


@dataclass(frozen=True)
class Padding1Desc:
    """DML_PADDING1_OPERATOR_DESC: PaddingDesc with PaddingValue a DML_SCALAR_UNION read as
    padding_value_data_type (which must equal the output's type)."""

    input_tensor: TensorDesc
    output_tensor: TensorDesc
    padding_mode: PaddingMode
    padding_value_data_type: DataType
    padding_value: Any
    start_padding: tuple[int, ...]
    end_padding: tuple[int, ...]


def source(p: int, n: int, mode: int) -> int:
    """The input coordinate of position p (relative to the start padding) along an axis of n;
    -1 for the constant (the rule of shaders/pad.comp)."""
    if 0 <= p < n:
        return p
    if mode == PaddingMode.EDGE:
        return min(max(p, 0), n - 1)
    if mode == PaddingMode.REFLECTION:
        if n == 1:
            return 0
        m = p % (2 * (n - 1))
        return m if m < n else 2 * (n - 1) - m
    if mode == PaddingMode.SYMMETRIC:
        m = p % (2 * n)
        return m if m < n else 2 * n - 1 - m
    if mode == PaddingMode.WRAP:
        return p % n
    return -1


def _merge(x: TensorDesc, y: TensorDesc, starts: tuple[int, ...]) -> list[list[int]]:
    """Per kept output dimension [out size, in size, start, in stride, out stride]: size-1 output
    dimensions dropped, adjacent unpadded dimensions contiguous in both tensors merged."""
    dims: list[list[int]] = []
    for o, i, s, xs, ys in zip(y.sizes, x.sizes, starts, x.effective_strides, y.effective_strides):
        if o == 1:
            continue
        if dims and o == i and s == 0 and dims[-1][0] == dims[-1][1] and dims[-1][2] == 0 \
                and dims[-1][3] == xs * i and dims[-1][4] == ys * o:
            dims[-1] = [dims[-1][0] * o, dims[-1][1] * i, 0, xs, ys]
        else:
            dims.append([o, i, s, xs, ys])
    return dims or [[1, 1, 0, 0, 0]]


def plan_pad(device: Device, x: TensorDesc, y: TensorDesc, starts: tuple[int, ...], mode: int,
             value_bits: int) -> list[DispatchPlan]:
    """The dispatches of PADDING (and TILE: mode WRAP, no starts) from x into y."""
    check_no_overlap(y.sizes, y.effective_strides, "output_tensor")
    check_addressable(("input_tensor", "output_tensor"), (x, y))
    if y.element_count >= 1 << 32:
        raise UnsupportedError(f"output_tensor: {y.element_count} elements exceed the padding shader's 32-bit count")
    dims = _merge(x, y, starts)
    rank = contract.PAD_RANK
    host = sorted(sorted(range(len(dims)), key=lambda d: dims[d][0])[:max(0, len(dims) - rank)])
    inner = [dims[d] for d in range(len(dims)) if d not in host]
    inner = [[1, 1, 0, 0, 0]] * (rank - len(inner)) + inner
    width = x.data_type.size
    count = 1
    for d in inner:
        count *= d[0]
    groups = grid_for(-(-count // max(1, 4 // width)), 256, device.limits["max_compute_work_group_count"][0])
    fam = contract.PAD
    fixed = dict(i_off=0, o_off=0, v_lo=value_bits & 0xFFFFFFFF, v_hi=value_bits >> 32,
                 size=[d[0] for d in inner], in_size=[d[1] for d in inner], start=[d[2] for d in inner],
                 i_str=[d[3] for d in inner], o_str=[d[4] for d in inner])
    plans = []
    for coord in itertools.product(*(range(dims[d][0]) for d in host)):
        srcs = [source(c - dims[d][2], dims[d][1], mode) for c, d in zip(coord, host)]
        const = any(s < 0 for s in srcs)
        plans.append(DispatchPlan(
            variant=fam.name(bits=8 * width), bindings=(0, 1), groups=groups, writes=(1,),
            push=fam.pack(**fixed, mode=int(mode) | (8 if const else 0),
                          i_base=0 if const else sum(s * dims[d][3] for s, d in zip(srcs, host)),
                          o_base=sum(c * dims[d][4] for c, d in zip(coord, host))),
            offset_slots=fam.slots(i_off=(0, width), o_off=(1, width))))
    return plans


def _compile(device: Device, desc: Any, support: OperatorSupport, value_bits: Any) -> CompiledOperator:
    validate_tensors(support, device.feature_level, desc, support.fields, support.outputs)
    x, y = desc.input_tensor, desc.output_tensor
    n = x.dimension_count
    if y.dimension_count != n:
        raise invalid("output_tensor.sizes", f"dimension count must equal input_tensor's ({n}), got {y.dimension_count}")
    if y.data_type != x.data_type:
        raise invalid("output_tensor.data_type", f"must equal input_tensor's ({x.data_type.name}), got {y.data_type.name}")
    try:
        mode = PaddingMode(desc.padding_mode)
    except (ValueError, TypeError):
        raise invalid("padding_mode", f"must be a PaddingMode, got {desc.padding_mode!r}") from None
    if mode == PaddingMode.WRAP and support is PADDING:
        raise invalid("padding_mode", "WRAP is PADDING1's (kompute_dml's extension: DirectML 6_4's mode), not PADDING's")
    if mode == PaddingMode.SYMMETRIC and device.feature_level < FL.FL_3_0:
        raise UnsupportedError(f"padding_mode: SYMMETRIC needs feature level 3_0, the device's is {device.feature_level.label}")
    starts = as_int_tuple(desc.start_padding, "start_padding")
    ends = as_int_tuple(desc.end_padding, "end_padding")
    for f, pads in (("start_padding", starts), ("end_padding", ends)):
        if len(pads) != n:
            raise invalid(f, f"must hold {n} values (the tensors' dimension count), got {len(pads)}")
        if any(not 0 <= p < 1 << 31 for p in pads):
            raise invalid(f, f"values must be in [0, 2^31), got {pads}")
    want = tuple(i + s + e for i, s, e in zip(x.sizes, starts, ends))
    if y.sizes != want:
        raise invalid("output_tensor.sizes", f"must be {want} (input_tensor's sizes + start_padding + end_padding), "
                                             f"got {y.sizes}")
    bits = value_bits(y.data_type) if mode == PaddingMode.CONSTANT else 0
    plans = plan_pad(device, x, y, starts, mode, bits)
    return CompiledElementWise(device, desc, support, support.inputs, support.outputs, list(plans))


def compile_padding(device: Device, desc: PaddingDesc) -> CompiledOperator:
    return _compile(device, desc, PADDING, lambda dt: diagonal_value_bits(desc.padding_value, dt, "padding_value"))


def compile_padding1(device: Device, desc: Padding1Desc) -> CompiledOperator:
    def bits(dt: DataType) -> int:
        vt = DataType.coerce(desc.padding_value_data_type, "padding_value_data_type")
        if vt != dt:
            raise invalid("padding_value_data_type", f"must equal output_tensor's data type ({dt.name}), got {vt.name}")
        return value1_bits(desc.padding_value, dt, "padding_value")
    return _compile(device, desc, PADDING1, bits)


# ---- functional helper (exported as kdml.<name>) -----------------------------------------
# `pad(x, start, end, mode=CONSTANT, value=0)` on PADDING1: a new packed Tensor of x's type (or
# `out=`, any strides); `value` read as x's type. ONNX Pad runs on it (onnx_backend/handlers_fill.py).
def pad(x: Any, start_padding: Any, end_padding: Any, mode: Any = PaddingMode.CONSTANT, value: Any = 0, *,
        out: Tensor | None = None, device: Device | None = None) -> Tensor:
    """DML_PADDING1: x inflated by start_padding / end_padding per dimension, filled by `mode`."""
    dev, (t,) = _operands((x,), ("x",), device)
    starts, ends = as_int_tuple(start_padding, "start_padding"), as_int_tuple(end_padding, "end_padding")
    dt = t.desc.data_type
    shape = tuple(s + a + b for s, a, b in zip(t.desc.sizes, starts, ends))
    if out is not None:
        check_out(out, dev, shape, dt)
    od = out.desc if out is not None else _packed(dt, shape)
    op = compile_cached(dev, Padding1Desc(t.desc, od, PaddingMode(as_int(mode, "mode")), dt, value, starts, ends))
    if out is None:
        out = pooled_empty(dev, od)
    op.execute([t], [out])
    return out


def _example(cls: Any) -> Any:
    x, y = TensorDesc(DataType.FLOAT32, (1, 1, 2, 3)), TensorDesc(DataType.FLOAT32, (1, 1, 5, 4))
    value = (DataType.FLOAT32, 1.5) if cls is Padding1Desc else (1.5,)
    return cls(x, y, PaddingMode.CONSTANT, *value, (0, 0, 1, 0), (0, 0, 2, 1))


# ---- spec (kompute_dml/ops/spec.py) --------------------------------------------------------
EXPORTS = {"PaddingMode": PaddingMode}
SPECS = (
    OperatorSpec(PaddingDesc, PADDING, compile_padding, (contract.PAD,), example=lambda: _example(PaddingDesc)),
    OperatorSpec(Padding1Desc, PADDING1, compile_padding1, (contract.PAD,), helpers=("pad",),
                 onnx=(OnnxOp("Pad", "", "pad"), OnnxOp("CenterCropPad", "", "pad")),  # cropping: SLICE1 first
                 example=lambda: _example(Padding1Desc)),
)
