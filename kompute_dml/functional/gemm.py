"""The functional helpers of GEMM (ops/gemm.py, docs/gemm.md): `gemm` (ONNX Gemm, com.microsoft
FusedMatMul's transA / transB / alpha) and `matmul` (numpy.matmul / ONNX MatMul), both on
DML_GEMM_OPERATOR_DESC.

Operands are kompute_dml Tensors or anything kompute_dml/core/inputs.py takes (numpy arrays, Python
numbers and lists, CPU `__array__` / `__dlpack__` objects); Python data take the other operand's
data type. A and B share one type, FLOAT32 or FLOAT16 (no promotion; other types are refused by
the operator's table with UnsupportedError). Shapes follow numpy.matmul: the last two dimensions
are the matrices (of op(A) and op(B) for gemm's transpositions), the leading ones broadcast
against each other; a 1-D `a` is a row vector (1, K) and a 1-D `b` a column vector (K, 1), whose
dimension is dropped from the result (both 1-D: the result has shape (1,), since kompute_dml
tensors have at least one dimension); a transposition of a 1-D operand changes nothing. gemm's
`c` broadcasts to the result's shape (numpy's rules, one way: the result's shape is that of the
product).

Every operand is bound where it lies, with the strides that express the broadcasting (0) and
any layout it has: nothing is copied. The descriptor is 4-D (every feature level takes it): the
result's leading dimensions are folded into DirectML's two (batch, channel) where every tensor's
strides allow it (numpy's broadcasting and packed layouts always do up to two leading
dimensions, and packed operands with any number); where they do not, UnsupportedError names the
operand (`kdml.copy` it into a packed tensor first). Where B is shared by every matrix and the
batch continues the rows of op(A), C and the result in their strides, the descriptor is one
matrix of batch x M rows instead (the same sums; row tiles filled where M is small). The result is a new packed Tensor from the
device's buffer pool, or `out=` (the result's shape and data type, any non-overlapping strides).
A repeated call with the same operand layouts, flags and scalars reuses its compiled operator.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Hashable
from typing import Any

import numpy as np

from ..core.dtypes import DataType
from ..core.errors import UnsupportedError, invalid
from ..core.layout import merge_dims
from ..core.tensor_desc import TensorDesc
from ..device.device import Device
from ..device.memory import Tensor
from ..ops.gemm import GemmDesc, MatrixTransform, as_float32
from . import _packed, check_out, pooled_empty
from .elementwise import _operands
from .matmul_integer import _mm_broadcast_strides

PREPARED_CAPACITY = 512
# per device (Device.caches["gemm"]): (descs, flags, scalar bits, out desc) -> (compiled operator, the 4-D descs)


def _bits(x: float) -> int:
    return int(struct.unpack("<I", struct.pack("<f", x))[0])


def _fold(batch: tuple[int, ...], strides: list[list[int]], fields: tuple[str, ...]) -> tuple[list[int], list[list[int]]]:
    """The batch dimensions as DirectML's two (batch, channel): merged where contiguous in every
    tensor (layout.merge_dims), padded with leading 1s; UnsupportedError naming the first operand
    that keeps more than two."""
    sizes, merged = merge_dims(batch, *strides)
    if len(sizes) <= 2:
        pad = 2 - len(sizes)
        return [1] * pad + sizes, [[0] * pad + st for st in merged]
    out = strides[-1]
    culprit = next((f for f, st in zip(fields, strides) if len(merge_dims(batch, st, out)[0]) > 2), fields[0])
    raise UnsupportedError(f"{culprit}: the batch dimensions {batch} do not fold into DirectML GEMM's two (batch, "
                           f"channel) with this operand's strides (broadcast or strided across more than two of them); "
                           f"kdml.copy it into a packed tensor first")


def _batch_as_rows(batch: tuple[int, ...], m: int, a_full: Any, b_full: Any, c_full: Any, o_full: Any,
                   trans_a: bool) -> tuple[int, tuple[int, int, int]] | None:
    """(batch x M, the row strides of op(A), C and the output) where B is shared by every matrix
    and the batch dimensions continue the rows of op(A), C and the output in their strides
    (layout.merge_dims): one product of batch x M rows instead of a batch of M-row products, which
    fills a kernel's row tiles where M is small (a ConvNeXt Linear over [batch, H, W, C]: 7-row
    matrices); None otherwise. Every output element is the same sum of the same terms either way."""
    nb = len(batch)
    if not nb or any(b_full[:nb]):
        return None
    lists = [[*a_full[:nb], a_full[nb + (1 if trans_a else 0)]], [*(c_full or o_full)[:nb + 1]], [*o_full[:nb + 1]]]
    sizes, merged = merge_dims((*batch, m), *lists)
    if len(sizes) != 1 or sizes[0] == m:
        return None
    return sizes[0], (merged[0][0], merged[1][0], merged[2][0])


def gemm(a: Any, b: Any, c: Any = None, *, trans_a: bool = False, trans_b: bool = False, alpha: float = 1.0,
         beta: float = 1.0, fused_activation: Any = None, out: Tensor | None = None, device: Device | None = None) -> Tensor:
    """alpha * op(a) @ op(b) + beta * c on DML_GEMM (op: the transposition of the last two
    dimensions where trans_a / trans_b); numpy.matmul's shapes and broadcasting, `c` (optional)
    broadcast to the result. float32 accumulation; see docs/gemm.md for the order and bound.
    `fused_activation`: GemmDesc's FusedActivation, an activation descriptor whose tensors are None
    (kdml.ActivationGeluDesc(None, None), kdml.ActivationReluDesc(None, None), ...), applied to
    every output: the bits of the product then that activation."""
    ta_flag = _flag(trans_a, "trans_a")
    tb_flag = _flag(trans_b, "trans_b")
    alpha_f, beta_f = as_float32(alpha, "alpha"), as_float32(beta, "beta")
    values = (a, b) if c is None else (a, b, c)
    names = ("a", "b", "c")[:len(values)]
    dev, ts = _operands(values, names, device, typed=slice(0, 2))
    ta, tb = ts[0], ts[1]
    tc = ts[2] if c is not None else None
    if out is not None and not isinstance(out, Tensor):
        raise invalid("out", f"must be a kompute_dml Tensor, got {type(out).__name__}")
    prepared = dev.caches.setdefault("gemm", {})
    try:
        key: Hashable = (ta.desc, tb.desc, None if tc is None else tc.desc, ta_flag, tb_flag, _bits(alpha_f),
                         _bits(beta_f), fused_activation, None if out is None else out.desc)
        hit = prepared.get(key)
    except TypeError:  # an unhashable activation: the descriptor's validation names it
        key, hit = None, None
    if hit is None:
        hit = _prepare(dev, ta, tb, tc, ta_flag, tb_flag, alpha_f, beta_f, out, fused_activation)
        if len(prepared) >= PREPARED_CAPACITY:
            prepared.clear()
        if key is not None:
            prepared[key] = hit
    op, descs, res_desc = hit
    bound = [Tensor.trusted(t.buffer, d, t.offset) if t is not None and d is not None else None
             for t, d in zip((ta, tb, tc), descs[:3])]
    if out is None:
        out = pooled_empty(dev, res_desc)
    elif out.device is not dev:
        raise invalid("out", "belongs to another Device")
    op.execute(bound, [Tensor.trusted(out.buffer, descs[3], out.offset)])  # type: ignore[arg-type]
    return out


def matmul(a: Any, b: Any, *, out: Tensor | None = None, device: Device | None = None) -> Tensor:
    """numpy.matmul (ONNX MatMul) on DML_GEMM: a @ b with numpy's broadcasting and 1-D rules
    (FLOAT32 or FLOAT16; float32 accumulation, docs/gemm.md)."""
    return gemm(a, b, out=out, device=device)


def _flag(v: Any, field: str) -> bool:
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, (int, np.integer)) and int(v) in (0, 1):
        return bool(v)
    raise invalid(field, f"must be a bool (or DML_MATRIX_TRANSFORM 0 / 1), got {v!r}")


def _prepare(dev: Device, ta: Tensor, tb: Tensor, tc: Tensor | None, trans_a: bool, trans_b: bool, alpha: float,
             beta: float, out: Tensor | None, act: Any = None) -> tuple[Any, tuple[TensorDesc | None, ...], TensorDesc]:
    def check(res: tuple[int, ...], dt: DataType) -> None:
        if out is not None:
            check_out(out, dev, res, dt)

    desc, descs, res_desc = gemm_desc(ta.desc, tb.desc, None if tc is None else tc.desc, trans_a, trans_b, alpha, beta,
                                      None if out is None else out.desc, act, check)
    return dev.compile(desc), descs, res_desc


def planned_product(a: TensorDesc, b: TensorDesc, c: TensorDesc | None = None, out: TensorDesc | None = None) -> tuple[int, int, int, int]:
    """(M, N, K, matrices) of the GEMM that `gemm` runs for operands of these descriptors (no
    transposition): a batch whose B is shared runs as one product of batch x M rows where the
    strides allow (_batch_as_rows), so its kernel choice is that product's (the fusions ask it)."""
    desc = gemm_desc(a, b, c, False, False, 1.0, 1.0, out)[0]
    o = desc.output_tensor.sizes
    return o[2], o[3], desc.a_tensor.sizes[3], o[0] * o[1]


def gemm_desc(da: TensorDesc, db: TensorDesc, dc: TensorDesc | None, trans_a: bool, trans_b: bool, alpha: float,
              beta: float, out: TensorDesc | None, act: Any = None,
              check: Callable[[tuple[int, ...], DataType], None] | None = None
              ) -> tuple[GemmDesc, tuple[TensorDesc | None, ...], TensorDesc]:
    """The GemmDesc (4-D operand views), those views and the packed result's descriptor of `gemm`;
    `check` sees the result's sizes and type before `out`'s strides are read (gemm's `out` checks)."""
    dt = da.data_type
    if db.data_type != dt:
        raise invalid("b", f"data type must be a's ({dt.name}; GEMM's operands share one), got {db.data_type.name}")
    sa, sta = da.sizes, da.effective_strides
    sb, stb = db.sizes, db.effective_strides
    a_vec, b_vec = len(sa) == 1, len(sb) == 1
    if a_vec:  # a row vector (1, K): trans_a changes nothing
        sa, sta, trans_a = (1, sa[0]), (0, sta[0]), False
    if b_vec:  # a column vector (K, 1)
        sb, stb, trans_b = (sb[0], 1), (stb[0], 0), False
    m, k = (sa[-1], sa[-2]) if trans_a else (sa[-2], sa[-1])
    kb, n = (sb[-1], sb[-2]) if trans_b else (sb[-2], sb[-1])
    if kb != k:
        raise invalid("b", f"shape {db.sizes}{' (transposed)' if trans_b else ''} does not multiply a's {da.sizes}"
                           f"{' (transposed)' if trans_a else ''}: K {kb} != {k}")
    try:
        batch = tuple(int(x) for x in np.broadcast_shapes(sa[:-2], sb[:-2]))
    except ValueError:
        raise invalid("b", f"batch dimensions of {db.sizes} do not broadcast with a's {da.sizes}") from None
    res = (*batch, *(() if a_vec else (m,)), *(() if b_vec else (n,))) or (1,)
    res_desc = _packed(dt, res)
    if check is not None:
        check(res, dt)
    keep = [True] * len(batch) + [not a_vec, not b_vec]

    def full(res_strides: list[int]) -> list[int]:
        """Strides over (*batch, M, N) from strides over the result's shape (dropped dims: 0)."""
        it = iter(res_strides)
        return [next(it) if kp else 0 for kp in keep]

    o_full = full(list((out if out is not None else res_desc).effective_strides))
    a_full = _mm_broadcast_strides(sa, sta, (*batch, *sa[-2:]), "a")
    b_full = _mm_broadcast_strides(sb, stb, (*batch, *sb[-2:]), "b")
    c_full = None
    if dc is not None:
        if dc.data_type != dt:
            raise invalid("c", f"data type must be a's ({dt.name}), got {dc.data_type.name}")
        c_full = full(_mm_broadcast_strides(dc.sizes, dc.effective_strides, res, "c"))
    nb = len(batch)
    rows = _batch_as_rows(batch, m, a_full, b_full, c_full, o_full, trans_a) if not a_vec else None
    if rows is not None:  # one matrix of batch x M rows
        mm, (ar, cr, orow) = rows
        a4 = TensorDesc(dt, (1, 1, sa[-2], mm) if trans_a else (1, 1, mm, sa[-1]),
                        (0, 0, a_full[nb], ar) if trans_a else (0, 0, ar, a_full[nb + 1]))
        b4 = TensorDesc(dt, (1, 1, *sb[-2:]), (0, 0, *b_full[nb:]))
        c4 = TensorDesc(dt, (1, 1, mm, n), (0, 0, cr, c_full[nb + 1])) if c_full is not None else None
        o4 = TensorDesc(dt, (1, 1, mm, n), (0, 0, orow, o_full[nb + 1]))
        desc = GemmDesc(a4, b4, c4, o4, MatrixTransform(int(trans_a)), MatrixTransform(int(trans_b)), alpha, beta, act)
        return desc, (a4, b4, c4, o4), res_desc
    strides = [a_full[:nb], b_full[:nb]] + ([c_full[:nb]] if c_full is not None else []) + [o_full[:nb]]
    fields = ("a", "b", "c", "out") if c_full is not None else ("a", "b", "out")
    bsz, bst = _fold(batch, strides, fields)
    if c_full is None:
        bst.insert(2, [0, 0])
    a4 = TensorDesc(dt, (*bsz, *sa[-2:]), (*bst[0], *a_full[nb:]))
    b4 = TensorDesc(dt, (*bsz, *sb[-2:]), (*bst[1], *b_full[nb:]))
    c4 = TensorDesc(dt, (*bsz, m, n), (*bst[2], *c_full[nb:])) if c_full is not None else None
    o4 = TensorDesc(dt, (*bsz, m, n), (*bst[3], *o_full[nb:]))
    desc = GemmDesc(a4, b4, c4, o4, MatrixTransform(int(trans_a)), MatrixTransform(int(trans_b)), alpha, beta, act)
    return desc, (a4, b4, c4, o4), res_desc


__all__ = ["gemm", "matmul"]
