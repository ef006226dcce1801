"""What the MATRIX_MULTIPLY_INTEGER_TO_FLOAT dispatchers share (ops/matmul_integer.py: the
portable families; ops/matmul_coop.py: the cooperative-matrix one): the operator's descriptor,
its validation beyond the support table, and the 4-D view of its tensors' sizes and strides.
Kept apart so that neither dispatcher imports the other for them (matmul_integer imports
matmul_coop to dispatch to it)."""

from __future__ import annotations

from dataclasses import dataclass

from ..dtypes import DataType
from ..errors import UnsupportedError, invalid
from ..layout import check_no_overlap
from ..registry import MATRIX_MULTIPLY_INTEGER_TO_FLOAT
from ..tensor_desc import TensorDesc

D = DataType
FIELDS = MATRIX_MULTIPLY_INTEGER_TO_FLOAT.fields  # binding order, from the support table
INPUT_FIELDS = MATRIX_MULTIPLY_INTEGER_TO_FLOAT.inputs
OUTPUT_FIELDS = MATRIX_MULTIPLY_INTEGER_TO_FLOAT.outputs
SIGNED = {D.INT8, D.INT16, D.INT32}
LIMIT28 = 1 << 28  # sizes and strides travel in 28-bit push-constant fields


@dataclass(frozen=True)
class MatrixMultiplyIntegerToFloatDesc:
    """DML_MATRIX_MULTIPLY_INTEGER_TO_FLOAT_OPERATOR_DESC (optional tensors may be None)."""

    a_tensor: TensorDesc
    a_scale_tensor: TensorDesc
    a_zero_point_tensor: TensorDesc | None
    b_tensor: TensorDesc
    b_scale_tensor: TensorDesc
    b_zero_point_tensor: TensorDesc | None
    bias_tensor: TensorDesc | None
    output_tensor: TensorDesc


def pad4(desc: TensorDesc) -> tuple[list[int], list[int]]:
    """Sizes and strides left-padded to 4 dimensions; strides of size-1 dimensions are 0."""
    sizes = [1] * (4 - desc.dimension_count) + list(desc.sizes)
    strides = [0] * (4 - desc.dimension_count) + list(desc.effective_strides)
    strides = [0 if s == 1 else st for s, st in zip(sizes, strides)]
    return sizes, strides


def quant_stride(desc: TensorDesc | None, field: str, count: int, per: str) -> int:
    """Stride along the per-row (per='row', sizes {..,M,1}) or per-column (per='col',
    sizes {..,1,N}) axis of a scale / zero-point tensor; 0 for per-tensor."""
    if desc is None:
        return 0
    sizes = tuple(desc.sizes)
    strides = desc.effective_strides
    d = len(sizes)
    if all(s == 1 for s in sizes):
        return 0
    if per == "row":
        want = (1, 1, count, 1)[4 - d:] if d > 1 else (count,)
        axis = d - 2 if d > 1 else 0
        shape = "{1,1,1,1} (per tensor) or {1,1,M,1} (per row)"
    else:
        want = (1, 1, 1, count)[4 - d:]
        axis = d - 1
        shape = "{1,1,1,1} (per tensor) or {1,1,1,N} (per column)"
    if sizes != want:
        n = "M" if per == "row" else "N"
        raise invalid(f"{field}.sizes", f"must be {shape} with {n} = {count} (fewer leading ones for fewer dimensions), "
                      f"got {sizes}")
    return strides[axis]


def check_desc(desc: MatrixMultiplyIntegerToFloatDesc) -> None:
    a, b, out = desc.a_tensor, desc.b_tensor, desc.output_tensor
    az, bz, bias = desc.a_zero_point_tensor, desc.b_zero_point_tensor, desc.bias_tensor
    as_, bs = desc.a_scale_tensor, desc.b_scale_tensor
    # dimension counts
    for f, t in (("b_tensor", b), ("output_tensor", out), ("bias_tensor", bias)):
        if t is not None and t.dimension_count != a.dimension_count:
            raise invalid(f"{f}.sizes", f"dimension count must equal a_tensor's ({a.dimension_count}), "
                          f"got {t.dimension_count}")
    for f, t in (("a_zero_point_tensor", az), ("b_scale_tensor", bs), ("b_zero_point_tensor", bz)):
        if t is not None and t.dimension_count != as_.dimension_count:
            raise invalid(f"{f}.sizes", f"dimension count must equal a_scale_tensor's ({as_.dimension_count}), "
                          f"got {t.dimension_count}")
    # data types
    if b.data_type.size != a.data_type.size:
        raise invalid("b_tensor.data_type", f"must have a_tensor's width ({a.data_type.name}, "
                      f"{8 * a.data_type.size} bits), got {b.data_type.name}")
    if az is not None and az.data_type != a.data_type:
        raise invalid("a_zero_point_tensor.data_type", f"must equal a_tensor's ({a.data_type.name}), got {az.data_type.name}")
    if bz is not None and bz.data_type != b.data_type:
        raise invalid("b_zero_point_tensor.data_type", f"must equal b_tensor's ({b.data_type.name}), got {bz.data_type.name}")
    for f, t in (("a_scale_tensor", as_), ("b_scale_tensor", bs), ("bias_tensor", bias)):
        if t is not None and t.data_type != out.data_type:
            raise invalid(f"{f}.data_type", f"must equal output_tensor's ({out.data_type.name}), got {t.data_type.name}")
    # sizes
    *batch_a, m, k = a.sizes
    *batch_b, kb, n = b.sizes
    if kb != k:
        raise invalid("b_tensor.sizes", f"K (size {len(b.sizes) - 2}) must equal a_tensor's K ({k}), got {kb}")
    if tuple(batch_b) != tuple(batch_a):
        raise invalid("b_tensor.sizes", f"batch and channel sizes must equal a_tensor's {tuple(batch_a)} "
                      f"(broadcast with stride 0), got {tuple(batch_b)}")
    want = (*batch_a, m, n)
    if tuple(out.sizes) != want:
        raise invalid("output_tensor.sizes", f"must be {want} ({{batch, channel, M, N}}), got {out.sizes}")
    if bias is not None and tuple(bias.sizes) != tuple(out.sizes):
        raise invalid("bias_tensor.sizes", f"must equal output_tensor's {out.sizes}, got {bias.sizes}")
    check_no_overlap(out.sizes, out.effective_strides, "output_tensor")


def push_words(m: int, n: int, k: int, nc_flags: int, a_st: list[int], b_st: list[int], o_st: list[int],
               bias_st: list[int], quant: list[int]) -> list[int]:
    """The 32 push-constant words both matrix-product shaders share (matmul_int.comp and
    matmul_coop.comp): words 8-10 M, N, K; 11 channels | flags; 12-31 the strides of A, B, the
    output and the bias, then the four quantization strides. UnsupportedError for a size or
    stride beyond the 28-bit fields. Words 0-7 (offsets) are the caller's."""
    words = [0] * 32
    words[8], words[9], words[10] = m, n, k
    words[11] = nc_flags
    words[12:16] = a_st
    words[16:20] = b_st
    words[20:24] = o_st
    words[24:28] = bias_st
    words[28:32] = quant
    for w in words[8:11] + words[12:32]:
        if w >= LIMIT28:
            raise UnsupportedError(f"a size or stride of {w} elements is beyond the shader's 28-bit range")
    return words

