"""DML_MATRIX_MULTIPLY_INTEGER_TO_FLOAT (seed 003).

Output[b,c,m,n] = sum_k ((A[b,c,m,k] - AZP[m]) * AScale[m]) * ((B[b,c,k,n] - BZP[n]) * BScale[n])
                  + Bias[b,c,m,n]

One dispatch of shaders/matmul_int.comp. Two kernel families: register-blocked (no shared
memory, no barrier) for CPU Vulkan devices such as lavapipe, shared-memory tiles for GPUs;
which family plans a descriptor is the device policy's table (DevicePolicy.matmul_table, with
the planners of PLANNERS); `compile_matmul_integer(..., kernel=...)`, or KDML_MATMUL_KERNEL when
the device is made, forces one. Within the CPU family, 8-bit inputs with 16-byte-aligned rows (K and N multiples of 16)
take the texel variant, which reads A and B through uniform texel buffers (`cpu-ssbo` turns it
off); otherwise a packed variant reads whole words when A's and B's rows are word-aligned with
unit inner stride, and any other layout takes the generic (element-load) variant. See
docs/matmul.md.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..core.dtypes import DataType
from ..core.errors import DMLError
from ..core.ints import cdiv
from ..core.tensor_desc import TensorDesc
from ..runtime import DispatchPlan
from ..runtime.policy import MATMUL_KERNEL_ENV, MATMUL_KERNELS
from . import contract
from .base import CompiledOperator, validate_tensors
from .matmul_common import (
    F_A_PACKED,
    F_B_PACKED,
    FIELDS,
    INPUT_FIELDS,
    MATRIX_MULTIPLY_INTEGER_TO_FLOAT,
    OUTPUT_FIELDS,
    MatrixMultiplyIntegerToFloatDesc,
    matmul_plan,
    matmul_push,
    operands,
    packed_rows,
)
from .matmul_common import check_desc as _check
from .matmul_coop import plan_coop
from .matmul_gemv import plan_gemv
from .matmul_wide import plan_wide
from .onnx_types import FLOAT32_NUMPY, FLOAT_NUMPY, quantized_product
from .spec import OnnxOp, OperatorSpec

if TYPE_CHECKING:
    from ..device.device import Device

D = DataType
KERNEL_ENV = MATMUL_KERNEL_ENV  # read once, by the device's policy

# CPU family: rows x columns of outputs per invocation and invocations per work group (must
# match the MMI_* families of kompute_dml/ops/contract). Packed rows: 6x8 (1x8 when M is
# tiny); any other layout: 4x4 with element loads.
CPU_TEXEL_BLOCK = (8, 16)
CPU_TEXEL_ALIGN = 16  # bytes: one R32G32B32A32_UINT texel
CPU_PACKED_BLOCK = (6, 8)
CPU_SMALL_M_BLOCK = (1, 8)
CPU_SMALL_M = 3  # M at or below this takes the 1x8 block
CPU_GENERIC_BLOCK = (4, 4)
CPU_LOCAL = 8
GPU_TILE = (64, 64)
GPU_LOCAL = 256



KERNELS = MATMUL_KERNELS


def kernel_family(device: Device, kernel: str | None = None) -> str:
    """The forced family (`kernel`, else the policy's KDML_MATMUL_KERNEL override, read when the
    device was made), else the device policy's family: 'cpu', 'cpu-ssbo' (the CPU family without
    the texel variant), 'gpu', 'coopmat' (tensor cores, ops/matmul_coop.py), 'dot' (its kernel on
    integer dot products) or 'coopmat-emulated' (on plain integer code, for tests), 'gemv' (few
    rows of A, ops/matmul_gemv.py), 'wide' (exact 16/32-bit, ops/matmul_wide.py)."""
    choice = device.policy.matmul_kernel_for(kernel)
    if choice == "auto":
        return device.policy.matmul_family if device.policy.matmul_family in KERNELS else "gpu"
    return choice


def texel_eligible(device: Device, width: int, m: int, k: int, n: int, a_st: list[int], b_st: list[int]) -> bool:
    """The texel variant's conditions: 8-bit inputs, more than CPU_SMALL_M rows, A and B rows
    with unit inner stride starting on 16-byte texels (K, N and the outer strides multiples
    of 16; binding offsets always are), and a texel-element limit that covers any buffer."""
    limits = device.limits
    texels = limits.get("max_texel_buffer_elements", 0)
    return (
        width == 1 and m > CPU_SMALL_M and k % CPU_TEXEL_ALIGN == 0 and n % CPU_TEXEL_ALIGN == 0
        and a_st[3] == 1 and b_st[3] == 1
        and all(s % CPU_TEXEL_ALIGN == 0 for s in (*a_st[:3], *b_st[:3]))
        and texels * CPU_TEXEL_ALIGN >= limits["max_storage_buffer_range"]
    )


def compile_matmul_integer(
    device: Device, desc: MatrixMultiplyIntegerToFloatDesc, kernel: str | None = None
) -> CompiledOperator:
    """The first family of the device policy's table (DevicePolicy.matmul_table: forced by `kernel`
    or KDML_MATMUL_KERNEL, else the device's) that applies and plans the descriptor."""
    validate_tensors(MATRIX_MULTIPLY_INTEGER_TO_FLOAT, device.feature_level, desc, FIELDS, OUTPUT_FIELDS)
    _check(desc)
    for candidate in device.policy.matmul_table(kernel):
        if candidate.applies(device, desc):
            plan = PLANNERS[candidate.family](device, desc)
            if plan is not None:
                break
    else:  # the tables end in a family that always plans
        raise AssertionError(f"no matrix-product family planned {desc}")
    return CompiledOperator(
        device, desc, MATRIX_MULTIPLY_INTEGER_TO_FLOAT, INPUT_FIELDS, OUTPUT_FIELDS, [plan]
    )


# Rows of A at which the automatic families change pipelines: gemv's rows per work group (1 to 16),
# its tiled and tiny configurations, the tensor-core tiles (matmul_coop.candidate_configs: by work
# groups, for N of 64 and more).
AHEAD_ROWS = (1, 2, 4, 8, 16, 32, 64, 512, 1024, 4096, 16384)


def plans_ahead(device: Device, op: CompiledOperator, done: set[Any]) -> list[DispatchPlan]:
    """The dispatch plans `op`'s operands take with AHEAD_ROWS rows of A (one batch), as
    compile_matmul_integer picks them, a weight B (2-D, or broadcast over the batches) laid out as the
    policy stores one for that many rows (DevicePolicy.weight_layout: the ONNX backend binds the
    transposed upload for tall products where its weights are "columns"). OperatorSpec.ahead: the
    ONNX backend creates their pipelines at a model's first plan, so a longer sequence or a larger
    batch finds its product's tiles made. Once per operands whatever their rows, batches and B's
    layout (`done`)."""
    desc = op.desc
    b = desc.b_tensor
    weight = min(b.sizes[-2:]) > 1 and all(n == 1 or s == 0 for n, s in zip(b.sizes[:-2], b.effective_strides))
    key = ("matmul-ahead", _at_rows(desc, 1, False if weight else None))
    if key in done:
        return []
    done.add(key)
    plans = []
    for m in AHEAD_ROWS:
        other = _at_rows(desc, m, device.policy.weight_layout(m) == "columns" if weight else None)
        for candidate in device.policy.matmul_table():
            if candidate.applies(device, other):
                try:
                    plan = PLANNERS[candidate.family](device, other)
                except DMLError:
                    break  # a forced family or a grid that cannot run here: compiling would refuse it too
                if plan is not None:
                    plans.append(plan)
                    break
    return plans


def _at_rows(desc: MatrixMultiplyIntegerToFloatDesc, m: int, columns: bool | None) -> MatrixMultiplyIntegerToFloatDesc:
    """`desc` with one batch of m rows: A and the output packed where their rows are (else their inner
    strides kept); B packed, k-contiguous where `columns` (a weight transposed), n-contiguous where
    False (a weight as stored), its inner strides kept where None (not a weight); the scales', zero
    points' and bias's dimensions of the output's sizes (other than 1) follow it."""
    def rows(t: TensorDesc) -> TensorDesc:
        lead = (1,) * (len(t.sizes) - 2)
        inner = None if t.strides is None or t.strides[-1] == 1 else (*(0,) * len(lead), *t.strides[-2:])
        return TensorDesc(t.data_type, (*lead, m, t.sizes[-1]), inner)
    b, out = desc.b_tensor, rows(desc.output_tensor)
    lead, (k, n) = (1,) * (len(b.sizes) - 2), b.sizes[-2:]
    b_inner = (1, k) if columns else None if columns is not None or b.strides is None else b.strides[-2:]
    b_st = None if b_inner is None else (*(0,) * len(lead), *b_inner)
    changes: dict[str, Any] = {"a_tensor": rows(desc.a_tensor), "output_tensor": out,
                               "b_tensor": TensorDesc(b.data_type, (*lead, k, n), b_st)}
    was = desc.output_tensor.sizes
    for f in dataclasses.fields(desc):
        t = getattr(desc, f.name)
        if f.name not in changes and isinstance(t, TensorDesc):
            r = len(t.sizes)
            sizes = tuple(new if size == old != 1 else size for size, old, new in zip(t.sizes, was[-r:], out.sizes[-r:]))
            changes[f.name] = TensorDesc(t.data_type, sizes, t.strides)
    return dataclasses.replace(desc, **changes)


def _plan(desc: MatrixMultiplyIntegerToFloatDesc, family: str, device: Device) -> DispatchPlan:
    a, out = desc.a_tensor, desc.output_tensor
    width = a.data_type.size
    epw = 4 // width
    ops = operands(desc)
    m, k, n, t = ops.m, ops.k, ops.n, ops.t
    a_st, b_st, o_st, bias_st = ops.a_st, ops.b_st, ops.o_st, ops.bias_st
    packed = packed_rows(ops, width)
    a_packed, b_packed = bool(packed & F_A_PACKED), bool(packed & F_B_PACKED)
    words = matmul_push(desc, ops, packed)

    wbits = 8 * width
    if family == "gpu":
        tm, tn = GPU_TILE
        variant = contract.MMI_GPU.name(bits=wbits)
        groups = cdiv(n, tn) * cdiv(m, tm) * t
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
        groups = cdiv(cdiv(n, bc), CPU_LOCAL) * cdiv(m, br) * t
    return matmul_plan(desc, device, variant, words, groups)


# The planners of the families the policy's tables name (kompute_dml/runtime/policy.py, MATMUL_KERNELS):
# each returns a plan, or None where its family does not take the descriptor.
PLANNERS: dict[str, Callable[[Device, MatrixMultiplyIntegerToFloatDesc], DispatchPlan | None]] = {
    "cpu": lambda device, desc: _plan(desc, "cpu", device),
    "cpu-ssbo": lambda device, desc: _plan(desc, "cpu-ssbo", device),
    "gpu": lambda device, desc: _plan(desc, "gpu", device),
    "coopmat": functools.partial(plan_coop, family="coopmat"),
    "dot": functools.partial(plan_coop, family="dot"),
    "coopmat-emulated": functools.partial(plan_coop, family="coopmat-emulated"),
    "gemv": plan_gemv,
    "wide": plan_wide,
}
assert set(PLANNERS) == set(KERNELS)


# ---- spec (kompute_dml/ops/spec.py) -------------------------------------------------------
_MS = "com.microsoft"
SPECS = (
    OperatorSpec(
        MatrixMultiplyIntegerToFloatDesc, MATRIX_MULTIPLY_INTEGER_TO_FLOAT, compile_matmul_integer,
        (contract.MMI_TEXEL, contract.MMI_PACKED, contract.MMI_GENERIC, contract.MMI_GPU, contract.MMC,
         contract.MMG, contract.MMW),
        helpers=("matmul_integer_to_float",),
        ahead=plans_ahead,
        onnx=(OnnxOp("MatMulIntegerToFloat", _MS, "matmul_integer_to_float", check=quantized_product((0, 1), 2, FLOAT_NUMPY)),
              OnnxOp("DynamicQuantizeMatMul", _MS, "matmul_integer_to_float",
                     check=quantized_product((1,), 0, FLOAT32_NUMPY)),
              # requantized by ELEMENT_WISE_QUANTIZE_LINEAR after it (onnx_backend/handlers.py)
              OnnxOp("QLinearMatMul", "", "matmul_integer_to_float", check=quantized_product((0, 3), 1, FLOAT32_NUMPY))),
    ),
)
