"""The entries of a device policy's matrix-product table (runtime/policy.py's DevicePolicy.matmul_table, which
re-exports these): the gemv family's and the dot family's row limits, the tiny-product rule, and the
candidates that carry them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

# Rows of A up to which the "dot" family (matmul_coop.comp on OpSDot) beats the tiled "gpu" family
# (float FMAs); taller matrices take "gpu" (DevicePolicy.matmul_family_for). H100, cooperative
# matrices unused, `benchmarks/bench_coop.py --rounds 5` (dot_gemm_Brow / gpu_gemm_Brow, TOPS):
# 16x4096x4096 14.1 / 1.8, 128x384x1536 11.7 / 4.4, 512x384x1536 9.2 / 12.0, 4096^3 13.6 / 20.6,
# 8192^3 13.9 / 19.3: the crossover lies between 128 and 512 rows. (At most GEMV_MAX_M rows take gemv.)
DOT_MAX_M = 128
# Rows of A up to which an automatic GPU family tries gemv first (forced: ops/matmul_gemv.MAX_M)
GEMV_MAX_M = 32
# ... on "coopmat" GPUs (gemv_max_m). H100, benchmarks/gemv_crossover.py at 16a7ab2 (s8, quantized; K x N 384 x
# 1536 to 11008 x 4096): tensor cores faster at 8 rows in 13 of 14 cases, at 12-32 in all, at 4 in 10.
# There gemv takes no k-contiguous B (gemv_k_contiguous): matmul_coop.split_k is as fast at 1 row, faster from 2.
GEMV_COOP_MAX_M = 4
# ... and up to GEMV_TINY_MAX_M rows where the product is tiny (ops/matmul_gemv.is_tiny: K <= 512,
# K x N <= 256 KiB, B row-major: its one-row-per-work-group configuration). H100,
# `benchmarks/tiny_matmul.py --repeats 600` (64^3: 1000; eager us, gemm case; gemv / the automatic coopmat):
# 48x64x64 20.71 / 24.22, 64x64x64 23.65 / 28.21, 64x128x128 20.72 / 24.00, 64x256x256 21.80 /
# 25.58, 64x384x384 23.29 / 26.91, 64x512x512 25.86 / 27.71 (the quantized case alike).
GEMV_TINY_MAX_M = 64
# A tiny product (ops/matmul_gemv.py: its one-row-per-work-group configuration on GPUs)
TINY_K, TINY_B_BYTES = 512, 256 * 1024


def is_tiny(k: int, n: int) -> bool:
    return k <= TINY_K and k * n <= TINY_B_BYTES


def _rows(desc: Any) -> int:
    return int(desc.a_tensor.sizes[-2])


def _always(device: Any, desc: Any) -> bool:
    return True


@dataclass(frozen=True)
class KernelCandidate:
    """One entry of a policy's matrix-product table: `family` is tried where `applies(device,
    desc)` holds (its planner may still decline: None); `when` says so in words."""

    family: str
    applies: Callable[[Any, Any], bool] = _always
    when: str = "always"


@cache  # one per limit (matmul_table runs at every compile)
def gemv_candidate(max_m: int, k_contiguous: bool = True) -> KernelCandidate:
    """The gemv entry of a GPU's table: at most `max_m` rows (of a B that is not k-contiguous unless
    `k_contiguous`), or GEMV_TINY_MAX_M for tiny products."""
    def applies(device: Any, desc: Any) -> bool:
        rows, b = _rows(desc), desc.b_tensor
        if rows <= max_m and (k_contiguous or b.effective_strides[-2] != 1):
            return True
        if rows > GEMV_TINY_MAX_M:
            return False
        return b.effective_strides[-1] == 1 and is_tiny(int(b.sizes[-2]), int(b.sizes[-1]))
    which = "" if k_contiguous else " of a B not k-contiguous"
    return KernelCandidate("gemv", applies, f"M <= {max_m}{which}, or M <= {GEMV_TINY_MAX_M} for tiny products")


DOT_CANDIDATE = KernelCandidate("dot", lambda device, desc: _rows(desc) <= DOT_MAX_M, f"M <= {DOT_MAX_M}")
