"""The exact GPU kernel of MATRIX_MULTIPLY_INTEGER_TO_FLOAT for 16- and 32-bit A and B
(shaders/matmul_wide.comp, contract family `mmw`, kernel name "wide").

The integer sum S = sum_k (A - AZP)(B - BZP) is computed exactly in multi-word integers
(core GLSL 450, 32-bit words only) and rounded once to float; the epilogue is the portable
families' (float(S) * (AScale * BScale) + Bias). No tensor-core or integer-dot-product path
exists for 16/32-bit inputs, so GPUs take this family for them (ops/matmul_integer.py); the
`gpu` family (float products, compensated block sums) stays available as kernel="gpu".
The caller has validated the descriptor (matmul_common.check_desc). See docs/matmul.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..core.dtypes import DataType
from ..core.errors import UnsupportedError
from ..core.ints import cdiv
from ..runtime import DispatchPlan
from . import contract
from .base import CompiledOperator, validate_tensors
from .matmul_common import (
    FIELDS,
    INPUT_FIELDS,
    MATRIX_MULTIPLY_INTEGER_TO_FLOAT,
    OUTPUT_FIELDS,
    MatrixMultiplyIntegerToFloatDesc,
    check_desc,
    matmul_plan,
    matmul_push,
    operands,
    packed_rows,
)

if TYPE_CHECKING:
    from ..device.device import Device

D = DataType
LOCAL = (16, 16)  # work-group size of every variant
# outputs per invocation (rows, columns), by input width: the work-group tile is 16x that.
# Both widths have the 4x4 and 8x4 variants; benchmarks/bench_wide.py --sweep times them. On
# the H100 (`bench_wide.py --sweep --rounds 3`) 4x4 won or tied everywhere: 32-bit 8x4 spills
# its 96-bit accumulators (4096^3: 4x4 3991 GOPS, 8x4 663), 16-bit within 1% at 2048^3 and
# 4096^3 (12.2-12.5 TOPS) and 4x4 ahead at 1024^3 (10.2 vs 9.5) and 512x384x1536 (6.8 vs 6.3).
DEFAULT_BLOCK = {2: (4, 4), 4: (4, 4)}
BLOCKS = ((4, 4), (8, 4))
SMALL_BLOCK = (4, 4)  # where DEFAULT_BLOCK's tiles give fewer than MIN_GROUPS work groups
MIN_GROUPS = 96  # (moot while DEFAULT_BLOCK is SMALL_BLOCK)
# The "l" variants (64-bit integer multiply-adds) need this capability (the build records it
# from their OpCapability Int64; the runtime refuses them on a device that did not enable it).
# 32-bit inputs: two uint64 sums of (16-bit limb of A) * B, each < 2^48 per term, so K <= 2^16.
INT64_CAPABILITY = "shader_int64"
INT64_KMAX_32 = 1 << 16
# the portable variants: on the H100 the "l" ones ran 0.08x (16-bit) and 0.77x (32-bit) of them
# (bench_wide.py: 4096^3 int16 978-1025 vs 12410 GOPS; int32 511 vs 663 at 8x4, 4x4 3991)
DEFAULT_INT64 = False


def variant_for(width: int, block: tuple[int, int], int64: bool = False) -> str:
    return contract.MMW.name(bits=8 * width, ext="l" if int64 else "", tr=block[0], tc=block[1])


def plan_wide(
    device: Device, desc: MatrixMultiplyIntegerToFloatDesc, block: tuple[int, int] | None = None,
    int64: bool | None = None,
) -> DispatchPlan | None:
    """One dispatch of the exact kernel, or None for 8-bit inputs (not this family's).
    `block`: outputs per invocation (one of BLOCKS; default DEFAULT_BLOCK[width], SMALL_BLOCK where
    that leaves fewer than MIN_GROUPS work groups); `int64`: the
    "l" variant (None: DEFAULT_INT64 where the device and K allow it; True: UnsupportedError
    where they do not)."""
    a = desc.a_tensor
    width = a.data_type.size
    if width == 1:
        return None
    has64 = INT64_CAPABILITY in device.capabilities
    k_ok = width == 2 or a.sizes[-1] <= INT64_KMAX_32
    if int64 is None:
        int64 = DEFAULT_INT64 and has64 and k_ok
    elif int64 and not has64:
        raise UnsupportedError(f"kernel: the 64-bit 'wide' variants need the device capability {INT64_CAPABILITY}")
    elif int64 and not k_ok:
        raise UnsupportedError(f"a_tensor.sizes: the 64-bit 'wide' variant for 32-bit inputs takes K <= {INT64_KMAX_32}, "
                               f"got {a.sizes[-1]}")
    # Packed rows: the kernel then reads whole words, two 16-bit values per word.
    ops = operands(desc)
    m, n, t = ops.m, ops.n, ops.t
    words = matmul_push(desc, ops, packed_rows(ops, width))
    if block is None:
        block = DEFAULT_BLOCK[width]
        if cdiv(n, LOCAL[0] * block[1]) * cdiv(m, LOCAL[1] * block[0]) * t < MIN_GROUPS:
            block = SMALL_BLOCK
    variant = variant_for(width, block, int64)  # ValueError for a block the family lacks
    groups = cdiv(n, LOCAL[0] * block[1]) * cdiv(m, LOCAL[1] * block[0]) * t
    return matmul_plan(desc, device, variant, words, groups)


def compile_wide(device: Device, desc: MatrixMultiplyIntegerToFloatDesc, block: tuple[int, int] | None = None,
                 int64: bool | None = None) -> CompiledOperator:
    """The operator on this family with a chosen `block` (benchmarks/bench_wide.py --sweep and the
    tests; the dispatcher takes the default through plan_wide)."""
    validate_tensors(MATRIX_MULTIPLY_INTEGER_TO_FLOAT, device.feature_level, desc, FIELDS, OUTPUT_FIELDS)
    check_desc(desc)
    plan = plan_wide(device, desc, block, int64)
    if plan is None:
        raise UnsupportedError(f"a_tensor.data_type: the 'wide' kernel takes 16- or 32-bit inputs, got "
                               f"{desc.a_tensor.data_type.name}")
    return CompiledOperator(device, desc, MATRIX_MULTIPLY_INTEGER_TO_FLOAT, INPUT_FIELDS, OUTPUT_FIELDS, [plan])
