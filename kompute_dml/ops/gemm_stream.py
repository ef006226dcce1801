"""GEMM's streaming kernel (shaders/gemm_stream.comp): FLOAT32 products of few terms over long
contiguous rows, the pointwise convolutions of MobileNet and EfficientNet at many pixels
(ops/conv_pointwise.py runs them as GEMM: A the filter, B the image, columns the pixels).

The tiled kernel stages 16 x 16 tiles of A and B per step; with a K of 16 to 192 a work group does
one to twelve steps and spends its time staging and writing 64 x 64 outputs, at a fraction of the
memory's rate. Here each invocation keeps 8 output rows of 4 consecutive columns in registers, A's
rows (K <= contract.gemm_stream.STREAM_MAX_K) in shared memory, and reads B's rows and writes the
output 16 bytes per invocation. The arithmetic is the tiled kernel's (the same bits where K is a
multiple of its 16-term stage: each output's terms by fma in ascending k, alpha, beta * C, the
FusedActivation), so the choice between them is speed alone: the device policy's
`gemm_stream` (runtime/coop_policy.GEMM_STREAM: products without a fused activation, at most K terms,
at least N columns per matrix),
or forced with GEMM's kernel "stream" (KDML_GEMM_KERNEL=stream), where the layout allows it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..core.dtypes import DataType
from ..core.ints import cdiv
from . import contract
from .conv_fused import ACT_NONE

if TYPE_CHECKING:
    from ..device.device import Device

LOCAL = 256  # invocations per work group (4 columns each)


def stream_fits(dt: DataType, sh: Any, limits: dict[str, Any]) -> bool:
    """Whether the kernel takes this product: FLOAT32; B's and the output's columns contiguous, N a
    multiple of 4 and their other strides multiples of 4 elements (16-byte loads and stores; binding
    offsets are multiples of 16 bytes); K within the shared rows; the grid within the device's."""
    fam = contract.gemm_stream
    gx, gy, gz = limits["max_compute_work_group_count"]
    return (dt == DataType.FLOAT32 and 1 <= sh.k <= fam.STREAM_MAX_K and sh.n % 4 == 0
            and sh.b_st[3] == 1 and sh.o_st[3] == 1 and all(s % 4 == 0 for s in (*sh.b_st[:3], *sh.o_st[:3]))
            and cdiv(sh.n // 4, LOCAL) <= gx and cdiv(sh.m, fam.STREAM_ROWS) <= gy and sh.nb * sh.nc <= gz)


def stream_dispatch(device: Device, dt: DataType, sh: Any, act: tuple[int, ...],
                    forced: bool = False) -> tuple[str, tuple[int, int, int]] | None:
    """The kernel's (variant, grid) where it fits and the policy's rule (or `forced`) takes the product, else
    None. The rule (runtime/coop_policy.GEMM_STREAM): no fused activation, at most K terms, at least N columns
    per matrix (a work group's 1024)."""
    max_k, min_n = device.policy.gemm_stream
    if not stream_fits(dt, sh, device.limits):
        return None
    if not forced and not (act[0] == ACT_NONE and sh.k <= max_k and sh.n >= min_n):
        return None
    grid = (cdiv(sh.n // 4, LOCAL), cdiv(sh.m, contract.gemm_stream.STREAM_ROWS), sh.nb * sh.nc)
    return contract.gemm_stream.GEMM_STREAM.name(act="" if act[0] == ACT_NONE else "a"), grid
