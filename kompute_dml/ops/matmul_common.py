"""What the MATRIX_MULTIPLY_INTEGER_TO_FLOAT planners share (ops/matmul_integer.py: the portable
families; matmul_coop.py, matmul_gemv.py, matmul_wide.py: the GPU ones): the operator's
descriptor, its validation beyond the support table, the 4-D view of its tensors, and the one
push-constant block and binding list every matrix-product shader takes. Kept apart so that no
planner imports another for them (matmul_integer imports the others to dispatch to them)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..core.dtypes import DataType
from ..core.errors import UnsupportedError, invalid
from ..core.layout import check_no_overlap
from ..core.registry import FL, FLOATS, INTS_8_32, OperatorSupport, row
from ..core.tensor_desc import TensorDesc
from ..runtime import DispatchPlan, grid_for
from . import contract

if TYPE_CHECKING:
    from ..device.device import Device

MATRIX_MULTIPLY_INTEGER_TO_FLOAT = OperatorSupport(
    "MATRIX_MULTIPLY_INTEGER_TO_FLOAT", 170,
    (
        row(
            FL.FL_6_2,
            ("a_tensor", "input", (2, 4), INTS_8_32),
            ("a_scale_tensor", "input", (1, 4), FLOATS),
            ("a_zero_point_tensor", "optional input", (1, 4), INTS_8_32),
            ("b_tensor", "input", (2, 4), INTS_8_32),
            ("b_scale_tensor", "input", (1, 4), FLOATS),
            ("b_zero_point_tensor", "optional input", (1, 4), INTS_8_32),
            ("bias_tensor", "optional input", (2, 4), FLOATS),
            ("output_tensor", "output", (2, 4), FLOATS),
        ),
    ),
)


D = DataType
FIELDS = MATRIX_MULTIPLY_INTEGER_TO_FLOAT.fields  # binding order, from the support table
INPUT_FIELDS = MATRIX_MULTIPLY_INTEGER_TO_FLOAT.inputs
OUTPUT_FIELDS = MATRIX_MULTIPLY_INTEGER_TO_FLOAT.outputs
SIGNED = {D.INT8, D.INT16, D.INT32}
LIMIT28 = 1 << 28  # sizes and strides travel in 28-bit push-constant fields
PUSH = contract.MATMUL_PUSH  # every matrix-product shader's push-constant block
# members whose top nibbles carry the number of matrices T (shaders/matmul_push.glsl), lowest first
T_NIBBLES = ("m", "n", "k", "a_sb", "a_sc", "a_sm", "a_sk")
# the binding offsets' members, in binding (field) order
OFFSET_MEMBERS = ("a_off", "as_off", "azp_off", "b_off", "bs_off", "bzp_off", "bias_off", "out_off")
# Bits of c_flags (above the channel count) that every matrix-product shader reads the same
# way; bits 29-31 are each family's own (packed rows; row / column sums; word staging).
F_A_SIGNED = 1 << 26
F_B_SIGNED = 1 << 27
F_F16 = 1 << 28
FLAG_BITS = 0xFFFFFFFF & ~(F_A_SIGNED - 1)  # c_flags without the channel count below the flags
# matmul_coop.comp and matmul_gemv.comp: the row sums of A (RA) are needed where B's shifted
# zero point can be nonzero, the column sums of B (CB) where A's can
F_SUM_A = 1 << 29
F_SUM_B = 1 << 30
# matmul_int.comp and matmul_wide.comp: A / B rows read as whole words
F_A_PACKED = 1 << 29
F_B_PACKED = 1 << 30


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


@dataclass
class Operands:
    """The 4-D view every planner starts from: strides of A, B, the output and the bias
    (zeros without one), and the sizes; `t` matrices of M x K by K x N."""

    a_st: list[int]
    b_st: list[int]
    o_st: list[int]
    bias_st: list[int]
    nb: int
    nc: int
    m: int
    k: int
    n: int

    @property
    def t(self) -> int:
        return self.nb * self.nc


def operands(desc: MatrixMultiplyIntegerToFloatDesc) -> Operands:
    a_sz, a_st = pad4(desc.a_tensor)
    b_sz, b_st = pad4(desc.b_tensor)
    o_st = pad4(desc.output_tensor)[1]
    bias_st = pad4(desc.bias_tensor)[1] if desc.bias_tensor is not None else [0, 0, 0, 0]
    nb, nc, m, k = a_sz
    return Operands(a_st, b_st, o_st, bias_st, nb, nc, m, k, b_sz[3])


def packed_rows(ops: Operands, width: int) -> int:
    """F_A_PACKED / F_B_PACKED (matmul_int.comp, matmul_wide.comp): A rows with unit k stride and
    B rows with unit n stride, word-aligned (binding offsets are multiples of 16 bytes, so element
    0 is). A single column's inner stride is set to 1 so that the shader's word reads stay inside."""
    epw = 4 // width
    a_st, b_st = ops.a_st, ops.b_st
    flags = F_A_PACKED if (ops.k == 1 or a_st[3] == 1) and all(s % epw == 0 for s in a_st[:3]) else 0
    flags |= F_B_PACKED if (ops.n == 1 or b_st[3] == 1) and all(s % epw == 0 for s in b_st[:3]) else 0
    if ops.k == 1:
        a_st[3] = 1
    if ops.n == 1:
        b_st[3] = 1
    return flags


def sum_flags(desc: MatrixMultiplyIntegerToFloatDesc) -> int:
    """F_SUM_A / F_SUM_B (matmul_coop.comp, matmul_gemv.comp: bytes made signed, zero points
    corrected through sums): RA where B's shifted zero point can be nonzero, CB where A's can."""
    flags = F_SUM_A if desc.b_zero_point_tensor is not None or desc.b_tensor.data_type not in SIGNED else 0
    return flags | (F_SUM_B if desc.a_zero_point_tensor is not None or desc.a_tensor.data_type not in SIGNED else 0)


def matmul_push(desc: MatrixMultiplyIntegerToFloatDesc, ops: Operands, family_flags: int) -> tuple[int, ...]:
    """The push words of every matrix-product shader (MATMUL_PUSH, push_values): the quantization
    strides, the shared flag bits (signedness, FLOAT16 output) with `family_flags`, and the number
    of matrices in the top nibbles of T_NIBBLES. UnsupportedError past the counts."""
    a, b, out = desc.a_tensor, desc.b_tensor, desc.output_tensor
    t, nc, m, n = ops.t, ops.nc, ops.m, ops.n
    if t >= LIMIT28 or nc >= 1 << 26:
        raise UnsupportedError(f"a_tensor.sizes: at most 2^28-1 matrices (batch x channel) and 2^26-1 channels, "
                               f"got {ops.nb} x {nc}")
    quant = [quant_stride(desc.a_scale_tensor, "a_scale_tensor", m, "row"),
             quant_stride(desc.a_zero_point_tensor, "a_zero_point_tensor", m, "row"),
             quant_stride(desc.b_scale_tensor, "b_scale_tensor", n, "col"),
             quant_stride(desc.b_zero_point_tensor, "b_zero_point_tensor", n, "col")]
    flags = (F_A_SIGNED if a.data_type in SIGNED else 0) | (F_B_SIGNED if b.data_type in SIGNED else 0)
    flags |= (F_F16 if out.data_type == D.FLOAT16 else 0) | family_flags
    values = push_values(m, n, ops.k, nc | flags, ops.a_st, ops.b_st, ops.o_st, ops.bias_st, quant)
    for i, name in enumerate(T_NIBBLES):
        values[name] |= ((t >> (4 * i)) & 0xF) << 28
    return PUSH.pack(**values)


def push_flags(words: tuple[int, ...]) -> int:
    """The flag bits of packed push words (c_flags without the channel count)."""
    return words[PUSH.offset("c_flags")] & FLAG_BITS


def matmul_plan(desc: MatrixMultiplyIntegerToFloatDesc, device: Device, variant: str, words: tuple[int, ...],
                groups: int, spec: tuple[int, ...] = ()) -> DispatchPlan:
    """The dispatch: the eight bindings in field order (inputs, then the output), each binding's
    offset / element size into its OFFSET_MEMBERS member, `groups` work groups folded to the
    device's limit."""
    fields = (desc.a_tensor, desc.a_scale_tensor, desc.a_tensor, desc.b_tensor, desc.b_scale_tensor, desc.b_tensor,
              desc.output_tensor, desc.output_tensor)  # zero points take their matrix's type, bias the output's
    return DispatchPlan(
        variant=variant,
        bindings=tuple(range(8)),
        push=words,
        groups=grid_for(groups, 1, device.limits["max_compute_work_group_count"][0]),
        writes=(7,),
        offset_slots=PUSH.slots(**{name: (i, f.data_type.size) for i, (name, f) in enumerate(zip(OFFSET_MEMBERS, fields))}),
        spec=spec,
    )


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


def push_values(m: int, n: int, k: int, nc_flags: int, a_st: list[int], b_st: list[int], o_st: list[int],
                bias_st: list[int], quant: list[int]) -> dict[str, int]:
    """MATMUL_PUSH's members by name: M, N, K; channels | flags; the strides (batch, channel,
    row, column) of A, B, the output and the bias; the four quantization strides; the binding
    offsets 0 (the runtime's, through offset_slots). UnsupportedError for a size or stride beyond
    the 28-bit fields."""
    values = dict(zip(OFFSET_MEMBERS, [0] * 8))
    values.update(m=m, n=n, k=k, c_flags=nc_flags)
    for names, st in ((("a_sb", "a_sc", "a_sm", "a_sk"), a_st), (("b_sb", "b_sc", "b_sk", "b_sn"), b_st),
                      (("o_sb", "o_sc", "o_sm", "o_sn"), o_st), (("bi_sb", "bi_sc", "bi_sm", "bi_sn"), bias_st)):
        values.update(zip(names, st, strict=True))
    values.update(zip(("as_s", "azp_s", "bs_s", "bzp_s"), quant, strict=True))
    for name, v in values.items():
        if name != "c_flags" and v >= LIMIT28:
            raise UnsupportedError(f"a size or stride of {v} elements is beyond the shader's 28-bit range")
    return values

