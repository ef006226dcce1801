"""DML_DIAGONAL_MATRIX (seeds 000/001) and DML_DIAGONAL_MATRIX1 (seed 002).

Both run shaders/diagonal.comp: DIAGONAL_MATRIX is DIAGONAL_MATRIX1 without input and with
Begin = Offset, End = Offset + 1 (seed 002's remark). The host turns Begin/End into an
overflow-free unsigned form (see the shader's header), converts Value to the output type's
bit pattern, and orders the output's dimensions by memory so that whole 32-bit words are
written wherever a word holds only output elements.

Value conversion (documented in docs/diagonal.md):
- DIAGONAL_MATRIX.value is a FLOAT: first rounded to float32 (round to nearest even; a finite
  value beyond float32's range is an InvalidArgumentError). FLOAT32 outputs get it as is,
  FLOAT16 rounded to nearest even (IEEE: beyond 65504 after rounding is +-inf), FLOAT64 its
  exact widening. Integer outputs get it truncated toward zero and saturated to the type's
  range; NaN becomes 0, +-inf the type's max/min (Direct3D's float-to-integer rules).
- DIAGONAL_MATRIX1.value is read as value_data_type (which must equal the output's type):
  integers must be integral and in range (exact for 64-bit integers); floats are rounded to
  nearest even to the type and must not overflow it (NaN and +-inf are accepted).
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..core.dtypes import DataType
from ..core.errors import invalid
from ..core.ints import cdiv
from ..core.layout import check_no_overlap, merge_dims
from ..core.registry import ALL_TYPES, FL, FLOATS, INTS_8_32, OperatorSupport, row
from ..core.tensor_desc import TensorDesc
from ..runtime import DispatchPlan, TransferPlan, grid_for
from . import contract
from .base import CompiledOperator, validate_tensors
from .diagonal_constant import plan_constant
from .diagonal_transfer import plan_diagonal_transfer
from .gpu_flat import plan_diagonal_flat
from .gpu_memory import plan_diagonal_gpu
from .onnx_types import dml_input, dml_output_dtype
from .spec import OnnxOp, OperatorSpec

if TYPE_CHECKING:
    from ..device.device import Device
    from ..device.memory import Tensor

DIAGONAL_MATRIX = OperatorSupport(
    "DIAGONAL_MATRIX", 93,
    (
        row(FL.FL_2_0, ("output_tensor", "output", (4, 4), FLOATS)),
        row(FL.FL_2_1, ("output_tensor", "output", (4, 4), FLOATS | INTS_8_32)),
        row(FL.FL_4_0, ("output_tensor", "output", (2, 4), FLOATS | INTS_8_32)),
        row(FL.FL_5_1, ("output_tensor", "output", (2, 4), ALL_TYPES)),
    ),
)

DIAGONAL_MATRIX1 = OperatorSupport(
    "DIAGONAL_MATRIX1", 163,
    (
        row(
            FL.FL_5_1,
            ("input_tensor", "optional input", (2, 4), ALL_TYPES),
            ("output_tensor", "output", (2, 4), ALL_TYPES),
        ),
    ),
)


INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1
LOCAL_SIZE = 256
MAX_RANK = 4
_ABSENT = MAX_RANK  # ypos/xpos value for a dimension of size 1 (coordinate always 0)
_MANTISSA_BITS = {DataType.FLOAT16: 11, DataType.FLOAT32: 24, DataType.FLOAT64: 53}


@dataclass(frozen=True)
class DiagonalMatrixDesc:
    """DML_DIAGONAL_MATRIX_OPERATOR_DESC: Output[.., y, x] = value if y + offset == x else 0.

    `offset` is an INT (int32); `value` a FLOAT (float32), converted to the output's type."""

    output_tensor: TensorDesc
    offset: int = 0
    value: float = 1.0


@dataclass(frozen=True)
class DiagonalMatrix1Desc:
    """DML_DIAGONAL_MATRIX1_OPERATOR_DESC.

    topX = x - y; useValue = (End >= Begin) ^ (topX >= Begin) ^ (topX < End);
    Output = value where useValue, else the input element (0 without input).
    `value` is a Python number read as `value_data_type` (== the output's type)."""

    input_tensor: TensorDesc | None
    output_tensor: TensorDesc
    value_data_type: DataType
    value: Any
    diagonal_fill_begin: int
    diagonal_fill_end: int


# ---- scalars -----------------------------------------------------------------------
def _int32(value: object, field: str) -> int:
    if isinstance(value, (bool, np.bool_)):
        raise invalid(field, f"must be an INT (int32), got {value!r}")
    try:
        v = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise invalid(field, f"must be an INT (int32), got {value!r}") from None
    if not INT32_MIN <= v <= INT32_MAX:
        raise invalid(field, f"must be an INT in [{INT32_MIN}, {INT32_MAX}], got {v}")
    return v


def _real(value: object, field: str) -> int | float:
    """A Python int (exact) or float (exact for float16/32/64 scalars) of a real number."""
    if isinstance(value, (bool, np.bool_)):
        return int(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value)
    raise invalid(field, f"must be a real number (int or float), got {type(value).__name__}")


def _round_int_bits(n: int, mantissa_bits: int) -> int:
    """n rounded to `mantissa_bits` significant bits, ties to even (exact integer result)."""
    a = abs(n)
    length = a.bit_length()
    if length <= mantissa_bits:
        return n
    shift = length - mantissa_bits
    q, r = divmod(a, 1 << shift)
    half = 1 << (shift - 1)
    if r > half or (r == half and q & 1):
        q += 1
    return (q << shift) if n >= 0 else -(q << shift)


def _to_float(v: int | float, dt: DataType, field: str) -> np.floating:
    """v rounded to nearest even in float type dt; InvalidArgumentError if a finite v overflows."""
    npd = dt.numpy_dtype
    if isinstance(v, int):
        rounded = _round_int_bits(v, _MANTISSA_BITS[dt])
        try:
            f = float(rounded)  # exact: at most 53 significant bits
        except OverflowError:
            raise invalid(field, f"{v} is out of {dt.name}'s range") from None
    else:
        f = v
    with np.errstate(over="ignore"):
        out = npd.type(f)  # one IEEE rounding from float64 (numpy converts double -> half directly)
    if math.isfinite(f) and not np.isfinite(out):
        raise invalid(field, f"{v!r} is out of {dt.name}'s range")
    return out


def _bits(x: np.generic) -> int:
    return int(np.asarray(x).reshape(1).view(f"u{x.dtype.itemsize}")[0])


def value1_bits(value: object, dt: DataType, field: str = "value") -> int:
    """DIAGONAL_MATRIX1: `value` read as `dt`, as an unsigned bit pattern of dt.size bytes."""
    v = _real(value, field)
    if dt.is_float:
        return _bits(_to_float(v, dt, field))
    if isinstance(v, float):
        if not math.isfinite(v):
            raise invalid(field, f"{v!r} is not a {dt.name} value (integers have no NaN or infinity)")
        if v != math.floor(v):
            raise invalid(field, f"{v!r} is not a {dt.name} value (not an integer)")
        v = int(v)
    info = np.iinfo(dt.numpy_dtype)
    if not int(info.min) <= v <= int(info.max):
        raise invalid(field, f"{v} is out of {dt.name}'s range [{info.min}, {info.max}]")
    return v & ((1 << (8 * dt.size)) - 1)


def diagonal_value_bits(value: object, dt: DataType, field: str = "value") -> int:
    """DIAGONAL_MATRIX: the FLOAT `value` converted to `dt` (see the module docstring)."""
    v32 = _to_float(_real(value, field), DataType.FLOAT32, field)
    if dt == DataType.FLOAT32:
        return _bits(v32)
    if dt == DataType.FLOAT16:
        with np.errstate(over="ignore"):
            return _bits(np.float16(v32))  # one RNE rounding from float32
    if dt == DataType.FLOAT64:
        return _bits(np.float64(v32))  # exact widening
    info = np.iinfo(dt.numpy_dtype)
    f = float(v32)
    if math.isnan(f):
        n = 0
    elif math.isinf(f):
        n = int(info.max) if f > 0 else int(info.min)
    else:
        n = min(max(math.trunc(f), int(info.min)), int(info.max))
    return n & ((1 << (8 * dt.size)) - 1)


# ---- plans -------------------------------------------------------------------------
def div_magic(d: int) -> tuple[int, int]:
    """(magic, shifts) for the shader's fast_div: n // d exact for every uint32 n
    (Granlund & Montgomery 1994, fig. 4.1); shifts = (l - 1) << 1 | min(l, 1), l = ceil(log2 d)."""
    assert 1 <= d < 2**32
    ell = (d - 1).bit_length()
    magic = (2**32 * (2**ell - d)) // d + 1
    return magic & 0xFFFFFFFF, (max(ell - 1, 0) << 1) | min(ell, 1)


def _variant(width: int, has_input: bool) -> str:
    return (contract.DIAG_IN if has_input else contract.DIAG).name(bits=8 * width)


def plan_diagonal(
    out: TensorDesc,
    inp: TensorDesc | None,
    begin: int,
    end: int,
    value_bits: int,
    out_index: int,
    max_groups: int = 65535,
) -> list[DispatchPlan]:
    """The one dispatch computing DIAGONAL_MATRIX1 (Begin/End exact Python ints)."""
    width = out.data_type.size
    e = max(1, 4 // width)  # elements per 32-bit word
    sizes = list(out.sizes)
    ostr = list(out.effective_strides)
    istr = list(inp.effective_strides) if inp is not None else [0] * len(sizes)
    rows, cols = sizes[-2], sizes[-1]

    # Dimensions: the batch dimensions merged where both layouts allow, then y and x.
    dims: list[tuple[int, int, int, str]] = []  # (size, out stride, in stride, role)
    if len(sizes) > 2:
        bs, (bo, bi) = merge_dims(sizes[:-2], ostr[:-2], istr[:-2])
        dims += [(s, o, i, "b") for s, o, i in zip(bs, bo, bi) if s > 1]
    dims.append((rows, ostr[-2], istr[-2], "y"))
    dims.append((cols, ostr[-1], istr[-1], "x"))
    dims = [d for d in dims if d[0] > 1]
    if not dims:
        dims = [(1, 1, 0, "b")]
    # Memory order: decreasing output stride (stable, so ties keep logical order).
    dims.sort(key=lambda d: -d[1])
    rank = len(dims)
    # The innermost contiguous dimensions form the runs.
    split = rank
    run_len = 1
    while split > 0 and dims[split - 1][1] == run_len:
        split -= 1
        run_len *= dims[split][0]
    runs = math.prod(d[0] for d in dims[:split])
    if width >= 4 or all(d[1] % e == 0 for d in dims[:split]):
        units = cdiv(run_len, e)  # every run starts on a word boundary
    else:
        units = cdiv(run_len + e - 1, e)  # words a run of run_len elements can touch
    chunks = cdiv(units, 2 if width == 8 else 4)  # 16 bytes per invocation
    total = runs * chunks
    roles = [d[3] for d in dims]
    ypos = roles.index("y") if "y" in roles else _ABSENT
    xpos = roles.index("x") if "x" in roles else _ABSENT

    span = rows + cols - 1  # t = x + rows - 1 - y lies in [0, span - 1]
    ub = min(max(begin + rows - 1, 0), span)
    ue = min(max(end + rows - 1, 0), span)
    pad = [0] * (MAX_RANK - rank)
    magics = [div_magic(max(1, chunks))] + [div_magic(d[0]) for d in dims]
    shifts = sum(sh << (6 * i) for i, (_, sh) in enumerate(magics))
    push = contract.DIAG_PUSH.pack(
        out_off=0, in_off=0, total=total, chunks=chunks, run_len=run_len,
        dims=rank | split << 4 | ypos << 8 | xpos << 12, rows_m1=rows - 1, ub=ub, ue=ue, normal=int(end >= begin),
        val_lo=value_bits & 0xFFFFFFFF, val_hi=(value_bits >> 32) & 0xFFFFFFFF, div_shifts=shifts,
        chunks_magic=magics[0][0], size=[d[0] for d in dims] + pad, out_stride=[d[1] for d in dims] + pad,
        in_stride=[d[2] for d in dims] + pad, size_magic=[m for m, _ in magics[1:]] + pad,
    )
    slots = contract.DIAG_PUSH.slots(out_off=(out_index, width))
    if inp is not None:
        slots += contract.DIAG_PUSH.slots(in_off=(0, width))
    return [
        DispatchPlan(
            variant=_variant(width, inp is not None),
            bindings=(0, out_index) if inp is not None else (out_index,),
            push=push,
            groups=grid_for(total, LOCAL_SIZE, max_groups),
            writes=(out_index,),
            offset_slots=slots,
        )
    ]


def _max_groups(device: Device) -> int:
    return int(device.limits["max_compute_work_group_count"][0])


def _plan(
    device: Device, out: TensorDesc, inp: TensorDesc | None, begin: int, end: int, bits: int, out_index: int
) -> tuple[list[DispatchPlan | TransferPlan], list[Tensor]]:
    """The plans the device's policy picks, and the constants they read (docs/diagonal.md: a
    small descriptor-only output's copy, else transfer-assisted, GPU or portable kernels)."""
    const = plan_constant(device, out, inp, begin, end, bits, out_index)
    if const is not None:
        return const
    if device.transfer_commands:
        plans = plan_diagonal_transfer(out, inp, begin, end, bits, out_index, _max_groups(device))
        if plans is not None:
            return plans, []
    if device.policy.memory_kernel == "gpu":
        # Packed rows off the 16-byte grid: one range of whole chunks (flat) instead of rows
        # with partial chunks at both ends; rows on the grid and strided layouts: rows_diag.
        gpu = plan_diagonal_flat(out, inp, begin, end, bits, out_index, _max_groups(device))
        if gpu is None:
            gpu = plan_diagonal_gpu(out, inp, begin, end, bits, out_index, _max_groups(device))
        if gpu is not None:
            return list(gpu), []
    return list(plan_diagonal(out, inp, begin, end, bits, out_index, _max_groups(device))), []


def compile_diagonal_matrix(device: Device, desc: DiagonalMatrixDesc) -> CompiledOperator:
    validate_tensors(DIAGONAL_MATRIX, device.feature_level, desc, ("output_tensor",), ("output_tensor",))
    o = desc.output_tensor
    offset = _int32(desc.offset, "offset")
    bits = diagonal_value_bits(desc.value, o.data_type, "value")
    check_no_overlap(o.sizes, o.effective_strides, "output_tensor")
    plans, constants = _plan(device, o, None, offset, offset + 1, bits, 0)
    return CompiledOperator(device, desc, DIAGONAL_MATRIX, (), ("output_tensor",), plans, constants)


def compile_diagonal_matrix1(device: Device, desc: DiagonalMatrix1Desc) -> CompiledOperator:
    fields = ("input_tensor", "output_tensor")
    validate_tensors(DIAGONAL_MATRIX1, device.feature_level, desc, fields, ("output_tensor",))
    i, o = desc.input_tensor, desc.output_tensor
    if i is not None:
        if i.data_type != o.data_type:
            raise invalid(
                "output_tensor.data_type", f"must equal input_tensor's ({i.data_type.name}), got {o.data_type.name}"
            )
        if i.dimension_count != o.dimension_count:
            raise invalid(
                "output_tensor.sizes",
                f"dimension count must equal input_tensor's ({i.dimension_count}), got {o.dimension_count}",
            )
        if i.sizes != o.sizes:
            raise invalid("output_tensor.sizes", f"must equal input_tensor's {i.sizes}, got {o.sizes}")
    vdt = desc.value_data_type
    if not isinstance(vdt, DataType):
        if isinstance(vdt, (bool, np.bool_)) or not isinstance(vdt, (int, np.integer)):
            raise invalid("value_data_type", f"must be a DML_TENSOR_DATA_TYPE, got {vdt!r}")
        try:
            vdt = DataType(int(vdt))
        except ValueError:
            raise invalid("value_data_type", f"{vdt} is not a DML_TENSOR_DATA_TYPE (1..11)") from None
    if vdt != o.data_type:
        raise invalid("value_data_type", f"must equal output_tensor's data type ({o.data_type.name}), got {vdt.name}")
    bits = value1_bits(desc.value, vdt, "value")
    begin = _int32(desc.diagonal_fill_begin, "diagonal_fill_begin")
    end = _int32(desc.diagonal_fill_end, "diagonal_fill_end")
    check_no_overlap(o.sizes, o.effective_strides, "output_tensor")
    out_index = 1
    plans, constants = _plan(device, o, i, begin, end, bits, out_index)
    return CompiledOperator(device, desc, DIAGONAL_MATRIX1, ("input_tensor",), ("output_tensor",), plans, constants)


__all__ = [
    "DiagonalMatrix1Desc",
    "DiagonalMatrixDesc",
    "compile_diagonal_matrix",
    "compile_diagonal_matrix1",
    "diagonal_value_bits",
    "value1_bits",
]

# ---- specs (kompute_dml/ops/spec.py) ------------------------------------------------------
_C = contract
SPECS = (
    OperatorSpec(DiagonalMatrixDesc, DIAGONAL_MATRIX, compile_diagonal_matrix,
                 (_C.DIAG, _C.DIAG_BAND, _C.ROWS_DIAG, _C.FLAT_DIAG),
                 helpers=("diagonal_matrix", "eye_like"), onnx=(OnnxOp("EyeLike", "", "eye_like", check=dml_output_dtype("dtype")),)),
    OperatorSpec(DiagonalMatrix1Desc, DIAGONAL_MATRIX1, compile_diagonal_matrix1,
                 (_C.DIAG, _C.DIAG_IN, _C.DIAG_BAND, _C.ROWS_DIAG, _C.ROWS_DIAG_IN, _C.FLAT_DIAG, _C.FLAT_DIAG_IN),
                 helpers=("diagonal_matrix1", "triu", "tril"), onnx=(OnnxOp("Trilu", "", "triu", check=dml_input),)),
)
