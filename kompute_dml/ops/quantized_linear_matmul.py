"""DirectML's QUANTIZED_LINEAR_MATRIX_MULTIPLY (DML_QUANTIZED_LINEAR_MATRIX_MULTIPLY_OPERATOR_DESC):
"mathematically equivalent to dequantizing the inputs, then performing matrix multiply, and then
quantizing the output" (dequantize: (Input - ZeroPoint) * Scale; quantize: clamp(round(Input /
Scale) + ZeroPoint, Min, Max)). kompute_dml evaluates it as exact integer sums and one
requantization by a float32 multiplier, as QUANTIZED_LINEAR_CONVOLUTION (ops/quantized_convolution.py)
and onnxruntime's QLinearMatMul do:

    acc[b, c, m, n] = sum_k (A - AZP[m]) * (B - BZP[n])                             (int32, exact)
    mult[m, n]      = float32(float32(AScale[m] * BScale[n]) / OutputScale[m])       (each step rounded once)
    Output          = clamp(roundEven(float32(float32(acc) * mult)) + OutputZP[m], Min, Max)

float32(acc) is exact below 2^24 (beyond: nearest even); the division and products correctly
rounded. The page's real-number value acc * AScale * BScale / OutputScale is rounded once; this
evaluation rounds the multiplier twice and the product once before the final roundEven, so an
output whose exact value lies within a few float32 ulps of a half-way point may land one step away
from the exact quotient's rounding (tests/test_quantized_linear_matmul.py checks what is computed,
bit for bit, against a numpy float32 reference of these steps, and the exact quotient within one
step). A NaN (a 0 / 0 multiplier: the page calls a scale of 0 undefined) gives Min.

The dispatches, all existing plans on the operator's scratch: MATRIX_MULTIPLY_INTEGER's 1 x 1
CONVOLUTION_INTEGER plans (matrix_multiply_integer.plan_matrix_multiply_integer) into INT32,
ELEMENT_WISE_MULTIPLY (AScale x BScale) and ELEMENT_WISE_DIVIDE (by OutputScale) into the {M, N}
multiplier, ELEMENT_WISE_DEQUANTIZE_LINEAR (the INT32 sums times the multiplier, no zero point), then
ELEMENT_WISE_QUANTIZE_LINEAR with a scale of 1 (exact: the rounding, the zero point, saturation).
Docs: docs/quantized_linear_matmul.md; helper kdml.quantized_linear_matmul.

Tensor support as the page gives it: 2_1: every tensor 4-D; 4_0: A, B and Output 2 to 4 dimensions,
the scales and zero points 1 to 4; A / B / Output and their zero points INT8 or UINT8, the scales
FLOAT32. Validation, in order: DML_BUFFER_TENSOR_DESC rules and the table, then the page's
constraints (each zero point of its tensor's type; A, B and Output of one DimensionCount, the six
scales and zero points of one; the sizes {.., M, K} x {.., K, N} = {.., M, N}, equal batch sizes),
the scales and zero points per tensor (all sizes 1) or per row ({.., M, 1}: AScale, AZeroPoint,
OutputScale, OutputZeroPoint; 1-D: {M}) / per column ({.., 1, N}: BScale, BZeroPoint), as
MATRIX_MULTIPLY_INTEGER_TO_FLOAT reads them (matmul_common.quant_stride); a non-overlapping output,
32-bit addressing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..core.dtypes import DataType
from ..core.errors import invalid
from ..core.layout import check_no_overlap
from ..core.registry import F32, FL, D, OperatorSupport, row
from ..core.tensor_desc import TensorDesc
from ..device.memory import Tensor
from ..functional import as_tensor, device_of, run_into
from ..runtime import DispatchPlan
from . import contract
from .base import CompiledOperator, validate_tensors
from .elementwise_plan import check_addressable, device_limits, plan_elementwise
from .matmul_common import pad4, quant_stride
from .matrix_multiply_integer import plan_matrix_multiply_integer
from .plan_chain import rebind
from .spec import OperatorSpec

if TYPE_CHECKING:
    from ..device.device import Device

_Q8 = frozenset({D.INT8, D.UINT8})
_FIELDS = (("a_tensor", "input", _Q8, 2), ("a_scale_tensor", "input", F32, 1), ("a_zero_point_tensor", "optional input", _Q8, 1),
           ("b_tensor", "input", _Q8, 2), ("b_scale_tensor", "input", F32, 1), ("b_zero_point_tensor", "optional input", _Q8, 1),
           ("output_scale_tensor", "input", F32, 1), ("output_zero_point_tensor", "optional input", _Q8, 1),
           ("output_tensor", "output", _Q8, 2))
QUANTIZED_LINEAR_MATRIX_MULTIPLY = OperatorSupport("QUANTIZED_LINEAR_MATRIX_MULTIPLY", 118, (
    row(FL.FL_2_1, *((f, kind, (4, 4), types) for f, kind, types, _ in _FIELDS)),
    row(FL.FL_4_0, *((f, kind, (lo, 4), types) for f, kind, types, lo in _FIELDS)),
))
# the binding list: the nine fields, then the constants (the integer product's, then _SCRATCH's)
AT, AS, AZ, BT, BS, BZ, YS, YZ, YT = range(9)
_SCRATCH = ("product", "mult", "value", "one", "zero")  # after the INT32 sums and the product's constants


@dataclass(frozen=True)
class QuantizedLinearMatrixMultiplyDesc:
    """DML_QUANTIZED_LINEAR_MATRIX_MULTIPLY_OPERATOR_DESC { ATensor, AScaleTensor, AZeroPointTensor,
    BTensor, BScaleTensor, BZeroPointTensor, OutputScaleTensor, OutputZeroPointTensor, OutputTensor }:
    A {.., M, K}, B {.., K, N}, Output {.., M, N}; absent zero points are 0."""

    a_tensor: TensorDesc
    a_scale_tensor: TensorDesc
    a_zero_point_tensor: TensorDesc | None
    b_tensor: TensorDesc
    b_scale_tensor: TensorDesc
    b_zero_point_tensor: TensorDesc | None
    output_scale_tensor: TensorDesc
    output_zero_point_tensor: TensorDesc | None
    output_tensor: TensorDesc


def _validate(device: Device, desc: QuantizedLinearMatrixMultiplyDesc) -> dict[str, int]:
    """The table, then the page's rules; each scale's and zero point's stride along its axis (0 per tensor)."""
    support = QUANTIZED_LINEAR_MATRIX_MULTIPLY
    validate_tensors(support, device.feature_level, desc, support.fields, support.outputs)
    a, b, y = desc.a_tensor, desc.b_tensor, desc.output_tensor
    for zp, t in (("a_zero_point_tensor", "a_tensor"), ("b_zero_point_tensor", "b_tensor"),
                  ("output_zero_point_tensor", "output_tensor")):
        z, dt = getattr(desc, zp), getattr(desc, t).data_type
        if z is not None and z.data_type != dt:
            raise invalid(f"{zp}.data_type", f"must equal {t}'s ({dt.name}), got {z.data_type.name}")
    for f, t in (("b_tensor", b), ("output_tensor", y)):
        if t.dimension_count != a.dimension_count:
            raise invalid(f"{f}.sizes", f"dimension count must equal a_tensor's ({a.dimension_count}), got {t.dimension_count}")
    quant = [f for f in support.inputs if "scale" in f or "zero_point" in f]
    rank = desc.a_scale_tensor.dimension_count
    for f in quant:
        t = getattr(desc, f)
        if t is not None and t.dimension_count != rank:
            raise invalid(f"{f}.sizes", f"dimension count must equal a_scale_tensor's ({rank}), got {t.dimension_count}")
    *batch, m, k = a.sizes
    if tuple(b.sizes) != (*batch, k, b.sizes[-1]):
        raise invalid("b_tensor.sizes", f"must be {(*batch, k, 'N')} (a_tensor's batch sizes, K = {k}), got {b.sizes}")
    n = b.sizes[-1]
    if tuple(y.sizes) != (*batch, m, n):
        raise invalid("output_tensor.sizes", f"must be {(*batch, m, n)}, got {y.sizes}")
    strides = {f: quant_stride(getattr(desc, f), f, n if f.startswith("b_") else m, "col" if f.startswith("b_") else "row")
               for f in quant}
    check_no_overlap(y.sizes, y.effective_strides, "output_tensor")
    present = [(f, getattr(desc, f)) for f in support.fields if getattr(desc, f) is not None]
    check_addressable([f for f, _ in present], [t for _, t in present])
    return strides


def _view(t: TensorDesc | None, sizes: tuple[int, ...], strides: tuple[int, ...]) -> TensorDesc | None:
    return None if t is None else TensorDesc(t.data_type, sizes, strides)


def compile_quantized_linear_matrix_multiply(device: Device, desc: QuantizedLinearMatrixMultiplyDesc) -> CompiledOperator:
    support = QUANTIZED_LINEAR_MATRIX_MULTIPLY
    st = _validate(device, desc)
    a4, b4, y4 = (TensorDesc(t.data_type, *map(tuple, pad4(t)))  # type: ignore[arg-type]
                  for t in (desc.a_tensor, desc.b_tensor, desc.output_tensor))
    m, n = y4.sizes[2:]
    row_zp = _view(desc.a_zero_point_tensor, (1, 1, m, 1), (0, 0, st["a_zero_point_tensor"], 0))
    col_zp = _view(desc.b_zero_point_tensor, (1, 1, 1, n), (0, 0, 0, st["b_zero_point_tensor"]))
    first = len(support.fields)
    acc = TensorDesc(DataType.INT32, y4.sizes)
    mn = TensorDesc(DataType.FLOAT32, (1, 1, m, n))
    # the integer product's constants come first; the scratch (and the constants 1 and 0) after them
    plans, consts = plan_matrix_multiply_integer(device, a4, row_zp, b4, col_zp, acc, (AT, AZ, BT, BZ, first), first + 1)
    idx = {"acc": first, **{k: first + 1 + len(consts) + i for i, k in enumerate(_SCRATCH)}}
    limits = device_limits(device)

    def chain(fam: contract.ShaderFamily, variant: str, descs: tuple[TensorDesc, ...], where: tuple[int | None, ...]
              ) -> list[DispatchPlan]:
        return [rebind(p, dict(enumerate(where))) for p in plan_elementwise(fam, variant, descs, **limits)]

    def per(f: str, axis: int) -> TensorDesc:
        s = [0, 0, 0, 0]
        s[axis] = st[f]
        return TensorDesc(DataType.FLOAT32, mn.sizes, tuple(s))

    plans += chain(contract.EW_MUL, contract.EW_MUL.name(t="f32"), (per("a_scale_tensor", 2), per("b_scale_tensor", 3), mn),
                   (AS, BS, idx["product"]))
    plans += chain(contract.EW_DIV, contract.EW_DIV.name(t="f32"), (mn, per("output_scale_tensor", 2), mn),
                   (idx["product"], YS, idx["mult"]))
    value = TensorDesc(DataType.FLOAT32, y4.sizes)
    mult = TensorDesc(DataType.FLOAT32, y4.sizes, (0, 0, n, 1))
    # (the zero point absent: a stand-in for the planner, bound as the dummy buffer)
    plans += chain(contract.DEQUANT, contract.DEQUANT.name(i="i32", o="f32", z="nozp"),
                   (acc, mult, TensorDesc(DataType.INT32, y4.sizes, (0, 0, 0, 0)), value), (idx["acc"], idx["mult"], None, idx["value"]))
    yt = y4.data_type
    one = TensorDesc(DataType.FLOAT32, y4.sizes, (0, 0, 0, 0))
    yz = TensorDesc(yt, y4.sizes, (0, 0, st["output_zero_point_tensor"], 0))
    has_yz = desc.output_zero_point_tensor is not None
    plans += chain(contract.QUANT, contract.QUANT.name(i="f32", o="i8" if yt == D.INT8 else "u8"), (value, one, yz, y4),
                   (idx["value"], idx["one"], YZ if has_yz else idx["zero"], YT))
    scratch = [Tensor.scratch(device, acc), *consts, Tensor.scratch(device, mn), Tensor.scratch(device, mn),
               Tensor.scratch(device, value), device.tensor(np.ones(1, np.float32)), device.tensor(np.zeros(4, yt.numpy_dtype))]
    return CompiledOperator(device, desc, support, support.inputs, support.outputs, plans, constants=scratch)


def _param(v: Any, dev: Device, name: str, dt: DataType | None, count: int, per_row: bool, rank: int) -> Tensor | None:
    """A scale / zero point of 1 or `count` values as a packed tensor of `rank` dimensions: per tensor
    all ones, per row {.., count, 1} ({count} at rank 1), per column {.., 1, count}."""
    if v is None:
        return None
    host = np.asarray(v.numpy() if isinstance(v, Tensor) else v, dtype=dt.numpy_dtype if dt is not None else None).ravel()
    if host.size not in (1, count):
        raise invalid(name, f"must hold 1 or {count} values, got {host.size}")
    sizes = [1] * rank
    if host.size > 1:
        sizes[rank - 2 if per_row and rank > 1 else rank - 1] = host.size
    return as_tensor(host.reshape(sizes), dev, name)


def quantized_linear_matmul(a: Any, a_scale: Any, b: Any, b_scale: Any, y_scale: Any, a_zero_point: Any = None,
                            b_zero_point: Any = None, y_zero_point: Any = None, *, out: Tensor | None = None,
                            device: Device | None = None) -> Tensor:
    """DML_QUANTIZED_LINEAR_MATRIX_MULTIPLY of 8-bit a (.., M, K) and b (.., K, N) (2 to 4 dimensions,
    equal batch sizes): the 8-bit (.., M, N) of the zero points' type (y_zero_point None: UINT8).
    Scales and zero points: scalars, or a's and y's one per row (M values), b's one per column (N)."""
    dev = device_of(a, b, out, device=device)
    ta, tb = as_tensor(a, dev, "a"), as_tensor(b, dev, "b")
    m, n, rank = ta.desc.sizes[-2], tb.desc.sizes[-1], ta.desc.dimension_count
    f32 = DataType.FLOAT32
    zy = _param(y_zero_point, dev, "y_zero_point", None, m, True, 1)
    yt = zy.desc.data_type if zy is not None else (out.desc.data_type if out is not None else DataType.UINT8)
    zrank = max(2, rank) if any(np.size(v.numpy() if isinstance(v, Tensor) else v) > 1
                                for v in (a_scale, a_zero_point, y_scale, y_zero_point) if v is not None) else 1
    at, bt = ta.desc.data_type, tb.desc.data_type
    ps = [_param(v, dev, name, dt, count, per_row, zrank) for v, name, dt, count, per_row in (
        (a_scale, "a_scale", f32, m, True), (a_zero_point, "a_zero_point", at, m, True), (b_scale, "b_scale", f32, n, False),
        (b_zero_point, "b_zero_point", bt, n, False), (y_scale, "y_scale", f32, m, True), (y_zero_point, "y_zero_point", yt, m, True))]
    shape = (*ta.desc.sizes[:-1], n)
    ts = [ta, ps[0], ps[1], tb, ps[2], ps[3], ps[4], ps[5]]
    descs = [t.desc if t is not None else None for t in ts]
    return run_into(dev, lambda od: QuantizedLinearMatrixMultiplyDesc(*descs, od), ts, shape, yt, out)  # type: ignore[arg-type]


_S = TensorDesc(DataType.FLOAT32, (1, 1, 1, 1))
_U = TensorDesc(DataType.UINT8, (1, 1, 1, 1))
SPECS = (OperatorSpec(
    QuantizedLinearMatrixMultiplyDesc, QUANTIZED_LINEAR_MATRIX_MULTIPLY, compile_quantized_linear_matrix_multiply,
    (contract.CONV_INT, contract.EW_SUB, contract.EW_MUL, contract.EW_DIV, contract.DEQUANT, contract.QUANT),
    helpers=("quantized_linear_matmul",),
    example=lambda: QuantizedLinearMatrixMultiplyDesc(
        TensorDesc(DataType.UINT8, (1, 2, 3, 4)), TensorDesc(DataType.FLOAT32, (1, 1, 3, 1)), TensorDesc(DataType.UINT8, (1, 1, 3, 1)),
        TensorDesc(DataType.INT8, (1, 2, 4, 5)), TensorDesc(DataType.FLOAT32, (1, 1, 1, 5)), TensorDesc(DataType.INT8, (1, 1, 1, 5)),
        _S, _U, TensorDesc(DataType.UINT8, (1, 2, 3, 5)))),)
