"""Which fast geometry of shaders/softmax.comp a row of ACTIVATION_SOFTMAX1 (and LOG_SOFTMAX,
HARDMAX: ops/activation.py plan_softmax) takes: LANES invocations per row, K elements or 16-byte
words per invocation (contract.SMX_GEOMETRIES, contract.SMX_VEC_GEOMETRIES).

Rows of at least VEC_FROM_BYTES take the word geometries: each invocation reads 4 consecutive
FLOAT32 (8 FLOAT16) elements as one 16-byte load where the row is contiguous and its word aligned,
with the fewest lanes that hold the row in at most 4 words each. On the H100 (`python -m
benchmarks.bench_activation --geometries`, docs/softmax.md "Speed") that rule picked the fastest
geometry measured at 1,500, 1,000, 512 and 256 FLOAT32 elements and 1,500 FLOAT16. Rows of 512
bytes (BERT-base's 128 FLOAT32 scores, 256 FLOAT16) also ran faster in words (0.87x, 0.83x) once the
timing was primed; the bound is not lowered to them yet.
KDML_SOFTMAX_GEOMETRY=l{LANES}_k{K}[v] forces a geometry (benchmarks) where it holds the row."""

from __future__ import annotations

import os

from ..core.ints import cdiv
from . import contract

VEC_FROM_BYTES = 1024
FORCE_ENV = "KDML_SOFTMAX_GEOMETRY"
# the longest row (elements of 4 bytes; FLOAT16 rows hold twice as many) a fast geometry holds
FAST_ELEMENTS = max(lanes * ks[-1] for lanes, ks in contract.SMX_GEOMETRIES.items())


def capacity(geometry: str, size: int) -> int:
    """The elements of `size` bytes a row of `geometry` holds."""
    lanes, k = (int(part[1:]) for part in geometry.rstrip("v").split("_"))
    return lanes * k * (16 if geometry.endswith("v") else 4) // size


def fast_geometry(length: int, size: int) -> str | None:
    """The geometry (`l{LANES}_k{K}` or `l{LANES}_k{K}v`) of a row of `length` elements of `size`
    bytes in one reduced dimension; None beyond the fast geometries (the general variants)."""
    forced = os.environ.get(FORCE_ENV, "").strip()
    if forced in contract.SMX_FAST_GEOMETRIES and capacity(forced, size) >= length:
        return forced
    words = cdiv(length * size, 16)
    if length * size >= VEC_FROM_BYTES:
        for lanes, ks in contract.SMX_VEC_GEOMETRIES.items():
            if cdiv(words, lanes) in ks:
                return f"l{lanes}_k{cdiv(words, lanes)}v"
    for lanes, ks in contract.SMX_GEOMETRIES.items():  # the fewest lanes, then the fewest elements per lane
        for k in ks:
            if capacity(f"l{lanes}_k{k}", size) >= length:
                return f"l{lanes}_k{k}"
    return None


def lanes_of(geometry: str) -> int:
    return int(geometry.split("_")[0][1:])
