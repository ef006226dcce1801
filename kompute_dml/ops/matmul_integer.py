"""DML_MATRIX_MULTIPLY_INTEGER_TO_FLOAT (seed 003).

Output[b,c,m,n] = sum_k ((A[b,c,m,k] - AZP[m]) * AScale[m]) * ((B[b,c,k,n] - BZP[n]) * BScale[n])
                  + Bias[b,c,m,n]

One dispatch of shaders/matmul_int.comp. Two kernel families: register-blocked (no shared
memory, no barrier) for CPU Vulkan devices such as lavapipe, shared-memory tiles for GPUs;
`KDML_MATMUL_KERNEL=cpu|cpu-ssbo|gpu` (or `compile_matmul_integer(..., kernel=...)`) forces
one. Within the CPU family, 8-bit inputs with 16-byte-aligned rows (K and N multiples of 16)
take the texel variant, which reads A and B through uniform texel buffers (`cpu-ssbo` turns it
off); otherwise a packed variant reads whole words when A's and B's rows are word-aligned with
unit inner stride, and any other layout takes the generic (element-load) variant. See
docs/matmul.md.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..dtypes import DataType
from ..errors import UnsupportedError, invalid
from ..layout import check_no_overlap
from ..registry import MATRIX_MULTIPLY_INTEGER_TO_FLOAT
from ..runtime import KP_PATCH_LEVEL, DispatchPlan, grid_for
from ..tensor_desc import TensorDesc
from . import contract
from .base import CompiledOperator, validate_tensors
from .spec import OnnxOp, OperatorSpec

if TYPE_CHECKING:
    from ..device import Device

D = DataType
FIELDS = MATRIX_MULTIPLY_INTEGER_TO_FLOAT.fields  # binding order, from the support table
INPUT_FIELDS = MATRIX_MULTIPLY_INTEGER_TO_FLOAT.inputs
OUTPUT_FIELDS = MATRIX_MULTIPLY_INTEGER_TO_FLOAT.outputs
SIGNED = {D.INT8, D.INT16, D.INT32}
KERNEL_ENV = "KDML_MATMUL_KERNEL"

# CPU family: rows x columns of outputs per invocation and invocations per work group (must
# match the @variant lines of shaders/matmul_int.comp). Packed rows: 6x8 (1x8 when M is
# tiny); any other layout: 4x4 with element loads.
CPU_TEXEL_BLOCK = (8, 16)
CPU_TEXEL_ALIGN = 16  # bytes: one R32G32B32A32_UINT texel
KP_TEXEL_PATCH_LEVEL = 3  # kp builds from scripts/setup.sh bind usamplerBuffer as texel buffers
CPU_PACKED_BLOCK = (6, 8)
CPU_SMALL_M_BLOCK = (1, 8)
CPU_SMALL_M = 3  # M at or below this takes the 1x8 block
CPU_GENERIC_BLOCK = (4, 4)
CPU_LOCAL = 8
GPU_TILE = (64, 64)
GPU_LOCAL = 256

_F_A_SIGNED = 1 << 26
_F_B_SIGNED = 1 << 27
_F_F16 = 1 << 28
_F_A_PACKED = 1 << 29
_F_B_PACKED = 1 << 30
_LIMIT28 = 1 << 28


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


def _pad4(desc: TensorDesc) -> tuple[list[int], list[int]]:
    """Sizes and strides left-padded to 4 dimensions; strides of size-1 dimensions are 0."""
    sizes = [1] * (4 - desc.dimension_count) + list(desc.sizes)
    strides = [0] * (4 - desc.dimension_count) + list(desc.effective_strides)
    strides = [0 if s == 1 else st for s, st in zip(sizes, strides)]
    return sizes, strides


def _quant_stride(desc: TensorDesc | None, field: str, count: int, per: str) -> int:
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


KERNELS = ("cpu", "cpu-ssbo", "gpu", "coopmat", "dot", "coopmat-emulated")


def kernel_family(device: Device, kernel: str | None = None) -> str:
    """'cpu', 'cpu-ssbo' (the CPU family without the texel variant), 'gpu', 'coopmat' (tensor
    cores, ops/matmul_coop.py), 'dot' (its kernel on integer dot products) or 'coopmat-emulated'
    (on plain integer code, for tests): the explicit choice, else KDML_MATMUL_KERNEL, else the
    device policy's."""
    choice = kernel if kernel is not None else os.environ.get(KERNEL_ENV, "auto")
    choice = (choice or "auto").strip().lower()
    if choice == "auto":
        family = device.policy.matmul_family
        return family if family in KERNELS else "gpu"
    if choice not in KERNELS:
        raise invalid("kernel", f"must be one of {', '.join(map(repr, KERNELS))} or 'auto' (also via {KERNEL_ENV}), "
                      f"got {choice!r}")
    return choice


def texel_eligible(device: Device, width: int, m: int, k: int, n: int, a_st: list[int], b_st: list[int]) -> bool:
    """The texel variant's conditions: 8-bit inputs, more than CPU_SMALL_M rows, A and B rows
    with unit inner stride starting on 16-byte texels (K, N and the outer strides multiples
    of 16; binding offsets always are), and a texel-element limit that covers any buffer."""
    limits = device.limits
    texels = limits.get("max_texel_buffer_elements", 0)
    return (
        KP_PATCH_LEVEL >= KP_TEXEL_PATCH_LEVEL
        and width == 1 and m > CPU_SMALL_M and k % CPU_TEXEL_ALIGN == 0 and n % CPU_TEXEL_ALIGN == 0
        and a_st[3] == 1 and b_st[3] == 1
        and all(s % CPU_TEXEL_ALIGN == 0 for s in (*a_st[:3], *b_st[:3]))
        and texels * CPU_TEXEL_ALIGN >= limits["max_storage_buffer_range"]
    )


def _check(desc: MatrixMultiplyIntegerToFloatDesc) -> None:
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


def compile_matmul_integer(
    device: Device, desc: MatrixMultiplyIntegerToFloatDesc, kernel: str | None = None
) -> CompiledOperator:
    validate_tensors(MATRIX_MULTIPLY_INTEGER_TO_FLOAT, device.feature_level, desc, FIELDS, OUTPUT_FIELDS)
    _check(desc)
    family = kernel_family(device, kernel)
    plan = None
    if family in ("coopmat", "dot", "coopmat-emulated"):  # 8-bit, K within int32 exactness; else GPU family
        from .matmul_coop import plan_coop  # late: matmul_coop imports this module

        plan = plan_coop(device, desc, family=family)
        family = "gpu"
    if plan is None:
        plan = _plan(desc, family, device)
    return CompiledOperator(
        device, desc, MATRIX_MULTIPLY_INTEGER_TO_FLOAT, INPUT_FIELDS, OUTPUT_FIELDS, [plan]
    )


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _plan(desc: MatrixMultiplyIntegerToFloatDesc, family: str, device: Device) -> DispatchPlan:
    max_groups = device.limits["max_compute_work_group_count"][0]
    a, b, out = desc.a_tensor, desc.b_tensor, desc.output_tensor
    width = a.data_type.size
    epw = 4 // width
    a_sz, a_st = _pad4(a)
    b_sz, b_st = _pad4(b)
    _, o_st = _pad4(out)
    if desc.bias_tensor is not None:
        _, bias_st = _pad4(desc.bias_tensor)
    else:
        bias_st = [0, 0, 0, 0]
    nb, nc, m, k = a_sz
    n = b_sz[3]
    t = nb * nc
    if t >= _LIMIT28:
        raise UnsupportedError(f"a_tensor.sizes: at most 2^28-1 matrices (batch x channel), got {t}")
    as_s = _quant_stride(desc.a_scale_tensor, "a_scale_tensor", m, "row")
    az_s = _quant_stride(desc.a_zero_point_tensor, "a_zero_point_tensor", m, "row")
    bs_s = _quant_stride(desc.b_scale_tensor, "b_scale_tensor", n, "col")
    bz_s = _quant_stride(desc.b_zero_point_tensor, "b_zero_point_tensor", n, "col")

    # A rows word-aligned with unit k stride; B rows word-aligned with unit n stride
    # (binding offsets are multiples of 16 bytes, so element 0 is word-aligned).
    a_packed = (k == 1 or a_st[3] == 1) and all(s % epw == 0 for s in (a_st[0], a_st[1], a_st[2]))
    b_packed = (n == 1 or b_st[3] == 1) and all(s % epw == 0 for s in (b_st[0], b_st[1], b_st[2]))
    if k == 1:
        a_st[3] = 1
    if n == 1:
        b_st[3] = 1

    flags = 0
    if a.data_type in SIGNED:
        flags |= _F_A_SIGNED
    if b.data_type in SIGNED:
        flags |= _F_B_SIGNED
    if out.data_type == D.FLOAT16:
        flags |= _F_F16
    if a_packed:
        flags |= _F_A_PACKED
    if b_packed:
        flags |= _F_B_PACKED
    words = [0] * 32
    words[8], words[9], words[10] = m, n, k
    words[11] = nc | flags
    words[12:16] = a_st
    words[16:20] = b_st
    words[20:24] = o_st
    words[24:28] = bias_st
    words[28:32] = [as_s, az_s, bs_s, bz_s]
    if nc >= 1 << 26:
        raise UnsupportedError(f"a_tensor.sizes: at most 2^26-1 channels, got {nc}")
    for w in words[8:11] + words[12:32]:
        if w >= _LIMIT28:
            raise UnsupportedError(f"a size or stride of {w} elements is beyond the shader's 28-bit range")
    # T = batch * channel in the top nibbles of words 8, 9, 10, 12, 13, 14, 15
    for i, wi in enumerate((8, 9, 10, 12, 13, 14, 15)):
        words[wi] |= ((t >> (4 * i)) & 0xF) << 28

    wbits = 8 * width
    if family == "gpu":
        tm, tn = GPU_TILE
        variant = contract.MMI_GPU.name(bits=wbits)
        groups = _cdiv(n, tn) * _cdiv(m, tm) * t
    else:  # the CPU family ('cpu', or 'cpu-ssbo' without the texel variant)
        if family == "cpu" and texel_eligible(device, width, m, k, n, a_st, b_st):
            br, bc = CPU_TEXEL_BLOCK
            # output store and bias mode are compile-time in the texel variants. Store: FLOAT16 (h),
            # FLOAT32 rows as uvec4 when they have unit N stride and start on 16 bytes (binding
            # offsets always do), else FLOAT32 per element (s). Bias: none (_nb), one value per
            # column (_bn: stride 0 along M, the ONNX (N,) bias) or any strides.
            if out.data_type == D.FLOAT16:
                store = "h"
            elif o_st[3] == 1 and all(s % 4 == 0 for s in o_st[:3]):
                store = ""
            else:
                store = "s"
            if desc.bias_tensor is None:
                bias_mode = "_nb"
            elif bias_st[2] == 0:
                bias_mode = "_bn"
            else:
                bias_mode = ""
            variant = contract.MMI_TEXEL.name(bits=wbits, store=store, bias=bias_mode)
        elif a_packed and b_packed:
            # uvec2 loads of B need N % 8 == 0 and rows starting on even words
            vec = n % 8 == 0 and all(s % (2 * epw) == 0 for s in (b_st[0], b_st[1], b_st[2]))
            small = m <= CPU_SMALL_M
            br, bc = CPU_SMALL_M_BLOCK if small else CPU_PACKED_BLOCK
            variant = contract.MMI_PACKED.name(bits=wbits, vec="v" if vec else "", rows="_r1" if small else "")
        else:
            br, bc = CPU_GENERIC_BLOCK
            variant = contract.MMI_GENERIC.name(bits=wbits)
        groups = _cdiv(_cdiv(n, bc), CPU_LOCAL) * _cdiv(m, br) * t
    # offset slots: push word <- binding offset / element size (bindings: inputs then output)
    sizes = [a.data_type.size, desc.a_scale_tensor.data_type.size,
             a.data_type.size, b.data_type.size, desc.b_scale_tensor.data_type.size,
             b.data_type.size, out.data_type.size, out.data_type.size]
    slots = tuple((i, i, sizes[i]) for i in range(8))
    return DispatchPlan(
        variant=variant,
        bindings=tuple(range(8)),
        push=tuple(words),
        groups=grid_for(groups, 1, max_groups),
        writes=(7,),
        offset_slots=slots,
    )


# ---- spec (kompute_dml/ops/spec.py) -------------------------------------------------------
_MS = "com.microsoft"
SPECS = (
    OperatorSpec(
        MatrixMultiplyIntegerToFloatDesc, MATRIX_MULTIPLY_INTEGER_TO_FLOAT, compile_matmul_integer,
        (contract.MMI_TEXEL, contract.MMI_PACKED, contract.MMI_GENERIC, contract.MMI_GPU, contract.MMC),
        helpers=("matmul_integer_to_float",),
        onnx=(OnnxOp("MatMulIntegerToFloat", _MS, "matmul_integer_to_float"),
              OnnxOp("DynamicQuantizeMatMul", _MS, "matmul_integer_to_float")),
    ),
)
