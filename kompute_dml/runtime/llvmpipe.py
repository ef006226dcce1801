"""llvmpipe's (lavapipe's) loop limiter, which the CPU devices' kernels must stay within: gallivm stops
every loop of an invocation, silently, once the invocation's loops together have iterated 65,535
times (LP_MAX_TGSI_LOOP_ITERATIONS), so a kernel that walks a long sum in one invocation returns a
partial result. Measured on lavapipe (Mesa, LLVM 15): MATRIX_MULTIPLY_INTEGER_TO_FLOAT's generic CPU
variant (mmi_cpu_g8) exact at K = 60,001, wrong from 65,520; MULTIHEAD_ATTENTION's rows kernel at
keys x (dqk + min(dv, 64) + 8) from 65,280 (ops/attention_layout.ROWS_MAX_ITERATIONS); SCATTER with a
reduction (its duplicates linked by one invocation a tuple walking the tuple's line) exact at 60,000
tuples along the line, wrong at 70,000; TOP_K1 of 100,000 elements exact at K = 500 (49,000 candidates),
wrong at K = 1,000 (98,000)."""

from __future__ import annotations

from typing import Any

LOOP_LIMIT = 65_535
# The CPU family of the integer products (ops/matmul_integer.py) takes K up to this (its generic
# variant iterates once per k; the texel and packed ones less); past it, the "gpu" family's tiles
CPU_MATMUL_MAX_K = 60_000


# What one invocation of a CPU device's kernel may walk: SCATTER / SCATTER_ND's index tuples along a line
# (the duplicates' candidates: ops/index_geometry.py), TOP_K1's candidates of a long sequence (tiles x
# min(K, 1024), each ranked against all: ops/top_k.py); more are refused (UnsupportedError)
CPU_WALK_MAX = 60_000


def cpu_matmul_fits(device: Any, desc: Any) -> bool:
    """Whether the CPU matrix-product family's invocations stay within the loop limit (K of A)."""
    return int(desc.a_tensor.sizes[-1]) <= CPU_MATMUL_MAX_K
