"""GEMM's streaming family (ops/gemm_stream.py, shaders/gemm_stream.comp): FLOAT32 products of few
terms over long contiguous rows, found by the contract package without a re-export (read as
`contract.gemm_stream.GEMM_STREAM`). Imports nothing from kompute_dml (the build loads the contract
package by path)."""

from __future__ import annotations

from .core import family
from .gemm import GEMM_ACTS, GEMM_PUSH

# Output rows per invocation (RM: 8 vec4 accumulators of 4 columns) and A's rows staged per work group
# at most (KMAX terms each: 16 KiB of shared memory)
STREAM_ROWS, STREAM_MAX_K = 8, 512
# GEMM's push block (the same host packing as gemm.comp's); `a` variants apply the FusedActivation
GEMM_STREAM = family("gemm_stream", "gemm_stream.comp", "gemmn_f32{act}", GEMM_PUSH, (256, 1, 1), act=GEMM_ACTS,
                     defines=lambda act: {"ACT": int(act == "a"), "RM": f"{STREAM_ROWS}u", "KMAX": f"{STREAM_MAX_K}u"})
