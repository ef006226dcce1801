"""DirectML's MATRIX_MULTIPLY_INTEGER (DML_MATRIX_MULTIPLY_INTEGER_OPERATOR_DESC): BatchCount x
ChannelCount independent products of 8-bit integer matrices, zero points subtracted, into INT32:

    Output[b, c, m, n] = sum over k of (A[b, c, m, k] - AZeroPoint[m]) * (B[b, c, k, n] - BZeroPoint[n])

exact products, the sum taken modulo 2^32 (as CONVOLUTION_INTEGER's and ONNX MatMulInteger's).
Built on CONVOLUTION_INTEGER's plan (convolution_integer.plan_convolution_integer, shaders/
conv_integer.comp) in its 1 x 1 form, as the ONNX backend runs MatMulInteger: one operand is the
filter (M' output channels x K), the other the input (a batch of K channels x H = the other matrix
dimension, W = 1), all through strides. The filter's zero point may be per output channel, the
input's only per tensor, so the planner picks the roles by the zero points: a per-row A zero point
makes A the filter (Output^T = B^T A^T), a per-column B zero point makes B the filter; where both
are per row / column, Output = conv(A filter, B) - conv(A filter, BZeroPoint broadcast over K)
(the second term sum_k (A - AZP[m]) BZP[n]) in the operator's scratch, then ELEMENT_WISE_SUBTRACT
(INT32, wrapping) into the output. A batch dimension along which the filter operand varies takes
a dispatch per index (its offsets packed into the dispatch's push words); the others are the
convolution's batch (merged into one stride where they can be). Docs: docs/matrix_multiply_integer.md.

Tensor support as the page gives it (the stored page: 2_1, 4 dimensions, A / B and their zero
points INT8 or UINT8, Output INT32; the newer pages' 2 to 4 dimensions of the sibling products are
not on this one, so kompute_dml keeps 4). Validation, in order: DML_BUFFER_TENSOR_DESC rules and the
table, then the page's constraints (a zero point of its tensor's type; AZeroPoint {1, 1, 1, 1} or
{1, 1, M, 1}; BZeroPoint {1, 1, 1, 1} or {1, 1, 1, N}), the sizes ({Batch, Channel, M, K} x {Batch,
Channel, K, N} = {Batch, Channel, M, N}; the page is silent on broadcasting: equal batch sizes, a
broadcast operand through 0 strides), a non-overlapping output, 32-bit addressing.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..core.dtypes import DataType
from ..core.errors import invalid
from ..core.layout import check_no_overlap
from ..core.registry import FL, OperatorSupport, row
from ..core.tensor_desc import TensorDesc
from ..device.memory import Tensor
from ..functional import as_tensor, check_out, compile_cached, device_of, pooled_empty
from ..runtime import DispatchPlan
from . import contract
from .base import CompiledOperator, validate_tensors
from .convolution_integer import ConvolutionIntegerDesc, plan_convolution_integer
from .elementwise_plan import check_addressable, device_limits, plan_elementwise
from .plan_chain import rebind
from .spec import OperatorSpec

if TYPE_CHECKING:
    from ..device.device import Device

_Q8 = frozenset({DataType.INT8, DataType.UINT8})
MATRIX_MULTIPLY_INTEGER = OperatorSupport("MATRIX_MULTIPLY_INTEGER", 117, (
    row(FL.FL_2_1, ("a_tensor", "input", (4, 4), _Q8), ("a_zero_point_tensor", "optional input", (4, 4), _Q8),
        ("b_tensor", "input", (4, 4), _Q8), ("b_zero_point_tensor", "optional input", (4, 4), _Q8),
        ("output_tensor", "output", (4, 4), frozenset({DataType.INT32}))),))
A, AZP, B, BZP, Y = range(5)  # the binding list: the fields, then the geometry constants (and scratch)


@dataclass(frozen=True)
class MatrixMultiplyIntegerDesc:
    """DML_MATRIX_MULTIPLY_INTEGER_OPERATOR_DESC { ATensor, AZeroPointTensor, BTensor,
    BZeroPointTensor, OutputTensor }: A {B, C, M, K}, B {B, C, K, N}, Output {B, C, M, N} INT32;
    absent zero points are 0."""

    a_tensor: TensorDesc
    a_zero_point_tensor: TensorDesc | None
    b_tensor: TensorDesc
    b_zero_point_tensor: TensorDesc | None
    output_tensor: TensorDesc


def _validate(device: Device, desc: MatrixMultiplyIntegerDesc) -> None:
    """The table, then the page's rules."""
    support = MATRIX_MULTIPLY_INTEGER
    validate_tensors(support, device.feature_level, desc, support.fields, support.outputs)
    a, az, b, bz, y = (getattr(desc, f) for f in support.fields)
    for name, zp, t, tname in (("a_zero_point_tensor", az, a, "a_tensor"), ("b_zero_point_tensor", bz, b, "b_tensor")):
        if zp is not None and zp.data_type != t.data_type:
            raise invalid(f"{name}.data_type", f"must equal {tname}'s ({t.data_type.name}), got {zp.data_type.name}")
    nb, nc, m, k = a.sizes
    if b.sizes[:3] != (nb, nc, k):
        raise invalid("b_tensor.sizes", f"must be ({nb}, {nc}, {k}, N) (A's batch and channel counts, K = {k}), got {b.sizes}")
    n = b.sizes[3]
    if y.sizes != (nb, nc, m, n):
        raise invalid("output_tensor.sizes", f"must be {(nb, nc, m, n)} (batch, channel, M, N), got {y.sizes}")
    if az is not None and az.sizes not in ((1, 1, 1, 1), (1, 1, m, 1)):
        raise invalid("a_zero_point_tensor.sizes", f"must be (1, 1, 1, 1) (per tensor) or (1, 1, {m}, 1) (per row), got {az.sizes}")
    if bz is not None and bz.sizes not in ((1, 1, 1, 1), (1, 1, 1, n)):
        raise invalid("b_zero_point_tensor.sizes", f"must be (1, 1, 1, 1) (per tensor) or (1, 1, 1, {n}) (per column), "
                                                   f"got {bz.sizes}")
    check_no_overlap(y.sizes, y.effective_strides, "output_tensor")
    present = [(f, t) for f, t in zip(support.fields, (a, az, b, bz, y)) if t is not None]
    check_addressable([f for f, _ in present], [t for _, t in present])


def _batches(sizes: tuple[int, int], fil: tuple[int, ...], inp: tuple[int, ...], out: tuple[int, ...]
             ) -> tuple[list[int], tuple[int, int, int]]:
    """The batch dimensions (of two) a dispatch each (those along which the filter operand varies,
    and the outer one where the rest do not merge into one stride), and the convolution's batch:
    (count, the input's stride, the output's)."""
    each = [d for d in (0, 1) if sizes[d] > 1 and fil[d] != 0]
    free = [d for d in (0, 1) if sizes[d] > 1 and d not in each]
    if len(free) == 2 and not (inp[0] == inp[1] * sizes[1] and out[0] == out[1] * sizes[1]):
        each, free = [0], [1]
    if not free:
        return each, (1, 0, 0)
    d = free[-1]
    return each, (sizes[0] * sizes[1] if len(free) == 2 else sizes[d], inp[d], out[d])


def _products(device: Device, x: TensorDesc, xz: TensorDesc | None, w: TensorDesc, wz: TensorDesc | None,
              y: TensorDesc, fil_is_a: bool, roles: tuple[int | None, ...], first_const: int
              ) -> tuple[list[DispatchPlan], list[np.ndarray]]:
    """The 1 x 1 convolutions of one product (filter = A where `fil_is_a`, else B) into `y` ({B, C,
    M, N}); `roles`: the binding-list indices of the convolution's input, its zero point, the filter,
    its zero point and the output; the geometry constants from index `first_const` on."""
    (nb, nc), (m, n) = y.sizes[:2], y.sizes[2:]
    ys = y.effective_strides
    xs, ws = x.effective_strides, w.effective_strides
    if fil_is_a:  # Output^T = B^T A^T: B's columns are the input's positions, A's rows the channels
        rows, xin, win, yout = n, (xs[2], xs[3]), (ws[2], ws[3]), (ys[2], ys[3])
    else:
        rows, xin, win, yout = m, (xs[3], xs[2]), (ws[3], ws[2]), (ys[3], ys[2])
    chans, k = (m if fil_is_a else n), x.sizes[2] if fil_is_a else x.sizes[3]
    each, (count, xn, yn) = _batches((nb, nc), ws[:2], xs[:2], ys[:2])
    xv = TensorDesc(x.data_type, (count, k, rows, 1), (xn, xin[0], xin[1], 0))
    wv = TensorDesc(w.data_type, (chans, k, 1, 1), (win[0], win[1], 0, 0))
    yv = TensorDesc(DataType.INT32, (count, chans, rows, 1), (yn, yout[0], yout[1], 0))
    plan, words = plan_convolution_integer(device, ConvolutionIntegerDesc(xv, xz, wv, wz, yv))
    fam = contract.CONV_INT
    where = dict(enumerate((*roles, first_const)))
    plans = []
    for idx in itertools.product(*(range((nb, nc)[d]) for d in each)):
        dx, dw, dy = (sum(i * st[d] for i, d in zip(idx, each)) for st in (xs, ws, ys))
        push = fam.pack(x_off=dx, xz_off=0, w_off=dw, wz_off=0, y_off=dy)
        plans.append(rebind(dataclasses.replace(plan, push=push), where))
    return plans, [words]


def _per_channel(zp: TensorDesc | None, axis: int) -> TensorDesc | None:
    """A per-row / per-column zero point as the filter's per-output-channel one ({1, M', 1, 1})."""
    if zp is None or zp.sizes == (1, 1, 1, 1):
        return zp
    return TensorDesc(zp.data_type, (1, zp.sizes[axis], 1, 1), (0, zp.effective_strides[axis], 0, 0))


def plan_matrix_multiply_integer(device: Device, a: TensorDesc, az: TensorDesc | None, b: TensorDesc, bz: TensorDesc | None,
                                 y: TensorDesc, where: tuple[int, int, int, int, int], first: int
                                 ) -> tuple[list[DispatchPlan], list[Tensor]]:
    """The dispatches of a validated 4-D product (zero points {1, 1, 1, 1}, {1, 1, M, 1} / {1, 1, 1, N})
    into the INT32 `y`, for a binding list where `where` are the indices of A, AZP, B, BZP and the
    output, and the constants they need (to be bound from index `first` on, in order).
    QUANTIZED_LINEAR_MATRIX_MULTIPLY plans its integer sums with it."""
    m, n = y.sizes[2:]
    ia, iaz, ib, ibz, iy = where
    row_zp = az is not None and m > 1 and az.sizes[2] == m
    col_zp = bz is not None and n > 1 and bz.sizes[3] == n
    if row_zp and col_zp:
        assert bz is not None
        return _both(device, a, az, b, bz, y, where, first)
    # the filter operand: where a zero point decides it, that one; else the one a batch shares
    # (fewer dispatches), B on a tie
    varies = [sum(s > 1 and st != 0 for s, st in zip(t.sizes[:2], t.effective_strides[:2])) for t in (a, b)]
    if row_zp or (not col_zp and varies[0] < varies[1]):
        plans, consts = _products(device, b, bz, a, _per_channel(az, 2), y, True, (ib, ibz, ia, iaz, iy), first)
    else:
        plans, consts = _products(device, a, az, b, _per_channel(bz, 3), y, False, (ia, iaz, ib, ibz, iy), first)
    return plans, [device.tensor(c) for c in consts]


def _both(device: Device, a: TensorDesc, az: TensorDesc | None, b: TensorDesc, bz: TensorDesc, y: TensorDesc,
          where: tuple[int, int, int, int, int], first: int) -> tuple[list[DispatchPlan], list[Tensor]]:
    """Per-row A and per-column B zero points: sum_k (A - AZP[m]) B[k, n] and sum_k (A - AZP[m]) BZP[n]
    into two INT32 scratch tensors ({B, C, M, N} packed), then their difference into the output."""
    ia, iaz, ib, ibz, iy = where
    packed = TensorDesc(DataType.INT32, y.sizes)
    s1, s2 = first + 2, first + 3  # after the two geometry constants
    wz = _per_channel(az, 2)
    p1, c1 = _products(device, b, None, a, wz, packed, True, (ib, None, ia, iaz, s1), first)
    zb = TensorDesc(bz.data_type, b.sizes, (0, 0, 0, bz.effective_strides[3]))  # BZP[n] at every (b, c, k)
    p2, c2 = _products(device, zb, None, a, wz, packed, True, (ibz, None, ia, iaz, s2), first + 1)
    fam = contract.EW_SUB
    sub = plan_elementwise(fam, fam.name(t="b32"), (packed, packed, y), **device_limits(device))
    plans = [*p1, *p2, *(rebind(p, {0: s1, 1: s2, 2: iy}) for p in sub)]
    return plans, [device.tensor(c1[0]), device.tensor(c2[0]), Tensor.scratch(device, packed), Tensor.scratch(device, packed)]


def compile_matrix_multiply_integer(device: Device, desc: MatrixMultiplyIntegerDesc) -> CompiledOperator:
    _validate(device, desc)
    support = MATRIX_MULTIPLY_INTEGER
    plans, consts = plan_matrix_multiply_integer(device, *(getattr(desc, f) for f in support.fields), (A, AZP, B, BZP, Y),
                                                 len(support.fields))
    return CompiledOperator(device, desc, support, support.inputs, support.outputs, list(plans), constants=consts)


def _as4(t: Tensor) -> Tensor:
    """`t` with leading dimensions of 1 up to four (a view)."""
    pad = 4 - t.desc.dimension_count
    d = TensorDesc(t.desc.data_type, (1,) * pad + tuple(t.desc.sizes), (0,) * pad + tuple(t.desc.effective_strides))
    return Tensor(t.buffer, d, t.offset)


def _zero_point(zp: Any, dev: Device, name: str, count: int, axis: int) -> Tensor | None:
    if zp is None:
        return None
    t = as_tensor(zp, dev, name)
    if t.desc.element_count not in {1, count}:
        raise invalid(name, f"must hold 1 or {count} values, got {t.desc.element_count}")
    sizes = [1, 1, 1, 1]
    sizes[axis] = t.desc.element_count
    flat = t if t.desc.strides is None else as_tensor(np.ascontiguousarray(t.numpy()), dev, name)
    return Tensor(flat.buffer, TensorDesc(t.desc.data_type, tuple(sizes)), flat.offset)


def matrix_multiply_integer(a: Any, b: Any, a_zero_point: Any = None, b_zero_point: Any = None, *,
                            out: Tensor | None = None, device: Device | None = None) -> Tensor:
    """DML_MATRIX_MULTIPLY_INTEGER of 8-bit a (.., M, K) and b (.., K, N), 2 to 4 dimensions (viewed
    with leading 1s as 4-D; the batch sizes equal): INT32 (.., M, N), exact (sums modulo 2^32). Zero
    points: a's a scalar or one per row (M values), b's a scalar or one per column (N values)."""
    dev = device_of(a, b, out, device=device)
    ta, tb = _as4(as_tensor(a, dev, "a")), _as4(as_tensor(b, dev, "b"))
    m, n = ta.desc.sizes[2], tb.desc.sizes[3]
    za, zb = _zero_point(a_zero_point, dev, "a_zero_point", m, 2), _zero_point(b_zero_point, dev, "b_zero_point", n, 3)
    sizes = (*ta.desc.sizes[:3], n)
    rank = max(len(np.shape(a)) if not isinstance(a, Tensor) else a.desc.dimension_count,
               len(np.shape(b)) if not isinstance(b, Tensor) else b.desc.dimension_count)
    shape = sizes[4 - rank:]
    if out is not None:
        check_out(out, dev, shape, DataType.INT32)
        view = _as4(out)
    else:
        view = pooled_empty(dev, TensorDesc(DataType.INT32, sizes))
    desc = MatrixMultiplyIntegerDesc(ta.desc, za.desc if za is not None else None, tb.desc,
                                     zb.desc if zb is not None else None, view.desc)
    compile_cached(dev, desc).execute([ta, za, tb, zb], [view])
    if out is not None:
        return out
    return Tensor(view.buffer, TensorDesc(DataType.INT32, shape), view.offset)


_Z = TensorDesc(DataType.UINT8, (1, 1, 1, 1))
SPECS = (OperatorSpec(
    MatrixMultiplyIntegerDesc, MATRIX_MULTIPLY_INTEGER, compile_matrix_multiply_integer, (contract.CONV_INT, contract.EW_SUB),
    helpers=("matrix_multiply_integer",),
    example=lambda: MatrixMultiplyIntegerDesc(TensorDesc(DataType.UINT8, (1, 2, 3, 4)), _Z, TensorDesc(DataType.INT8, (1, 2, 4, 5)),
                                              TensorDesc(DataType.INT8, (1, 1, 1, 5)), TensorDesc(DataType.INT32, (1, 2, 3, 5)))),)
