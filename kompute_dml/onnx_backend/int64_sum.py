"""ONNX ReduceSum over INT64 / UINT64 values on the device, exactly, with 32-bit operators only (DirectML's REDUCE
takes no 64-bit integers; a decoder's or a mixture of experts' mask sums are int64).

A value's four 16-bit parts (a UINT16 view of its bytes, a trailing axis of 4, low part first) are cast to UINT32
(CAST) and summed over the reduced axes by one REDUCE: exact while at most MAX_TERMS values meet in one sum
(65537 x 65535 < 2^32). The sum modulo 2^64 (numpy's two's-complement wrap; ONNX leaves overflow undefined and
onnxruntime's CPU kernel saturates) is then put together from the
four part sums 16 bits at a time with their carries (SLICE1 of each part sum, ELEMENT_WISE_BIT_AND,
BIT_SHIFT_RIGHT / LEFT, ADD and BIT_OR on the reduced values, no intermediate above 2^18), and its two 32-bit words
are joined along the trailing axis (JOIN), whose bytes are the INT64 / UINT64 result. Sums of more terms raise
FallbackNeeded (the CPU's)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

import kompute_dml as kdml

from .values import DeviceValue, FallbackNeeded, RunStats

if TYPE_CHECKING:
    from .context import NodeContext

MAX_TERMS = 65537
_U16, _U32 = kdml.DataType.UINT16, kdml.DataType.UINT32


def sum_int64(ctx: NodeContext, t: kdml.Tensor, shape: tuple[int, ...], reduced: set[int], out_shape: tuple[int, ...],
              dtype: np.dtype, stats: RunStats) -> DeviceValue:
    """ReduceSum of int64 / uint64 Tensor `t` (ONNX shape `shape`) over the axes `reduced`, as `out_shape`."""
    terms = math.prod(shape[a] for a in reduced)
    if terms > MAX_TERMS:
        raise FallbackNeeded(f"an int64 sum of {terms} terms (at most {MAX_TERMS} on the device)")
    dev, rank = ctx.device, len(shape)
    strides = t.desc.effective_strides
    parts = kdml.Tensor.trusted(t.buffer, kdml.TensorDesc(_U16, (*t.desc.sizes, 4), (*(4 * s for s in strides), 1)),
                                t.offset)
    wide = kdml.cast(parts, _U32, out=ctx.out_tensor((*t.desc.sizes, 4), np.uint32), device=dev)
    kept = tuple(1 if a in reduced else s for a, s in enumerate(shape))
    sums = kdml.reduce_sum(wide, sorted(reduced), True, out=ctx.out_tensor((*kept, 4), np.uint32), device=dev)
    one = (1,) * (rank + 1)

    def const(v: int) -> kdml.Tensor:
        return ctx.to_device(np.full(one, v, np.uint32), stats)

    def part(k: int) -> kdml.Tensor:
        return kdml.slice1(sums, [0] * rank + [k], [*kept, 1], [1] * (rank + 1), out=new(), device=dev)

    def new() -> kdml.Tensor:
        return ctx.out_tensor((*kept, 1), np.uint32)

    def op(f: Any, a: kdml.Tensor, b: kdml.Tensor) -> kdml.Tensor:
        return f(a, b, out=new(), device=dev)

    low16, sixteen = const(0xFFFF), const(16)
    s0, s1, s2, s3 = (part(k) for k in range(4))
    lo, hi = (lambda x: op(kdml.bitwise_and, x, low16)), (lambda x: op(kdml.right_shift, x, sixteen))
    t1 = op(kdml.add, hi(s0), lo(s1))  # bits 16-31 and their carry (< 2^17)
    t2 = op(kdml.add, op(kdml.add, hi(t1), hi(s1)), lo(s2))  # bits 32-47 (< 2^17 + 2)
    t3 = op(kdml.add, op(kdml.add, hi(t2), hi(s2)), lo(s3))  # bits 48-63, wrapped to 16
    word0 = op(kdml.bitwise_or, lo(s0), op(kdml.left_shift, lo(t1), sixteen))
    word1 = op(kdml.bitwise_or, lo(t2), op(kdml.left_shift, lo(t3), sixteen))
    out = ctx.out_tensor(out_shape or (1,), dtype)
    words = kdml.Tensor.trusted(out.buffer, kdml.TensorDesc(_U32, (*kept, 2)), out.offset)  # the same bytes
    kdml.join([word0, word1], rank, out=words, device=dev)
    return DeviceValue(out, out_shape, dtype)
