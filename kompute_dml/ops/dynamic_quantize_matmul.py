"""kompute_dml's DYNAMIC_QUANTIZE_MATRIX_MULTIPLY (an extension: DirectML has no such operator): ONNX
Runtime's com.microsoft DynamicQuantizeMatMul,

    (Q, Scale, ZeroPoint) = DYNAMIC_QUANTIZE_LINEAR(A)                         (UINT8)
    Output = MATRIX_MULTIPLY_INTEGER_TO_FLOAT(Q, Scale, ZeroPoint, B, BScale, BZeroPoint, Bias)

with the very bits of those two operators run one after the other (ops/dynamic_quantize.py: ONNX
Runtime's CPU arithmetic; ops/matmul_integer.py), and nothing but the output written.

Two dispatches where the device's policy takes the product on tensor cores (the `coopmat` family, or
`coopmat-emulated` where forced), A's rows are k-contiguous (its other strides multiples of 16
elements) and K is a multiple of 16: dql_minmax (A's partial order keys into the operator's
scratch) and `mmcq8*` (shaders/matmul_coop.comp with QA=1), whose every work group reduces the keys
to the scale and zero point and quantizes A as it stages it into shared memory. The transformer
encoders' products are small (a 1024 x 256 A), so the dispatch this saves, dql_quant's, cost as much as
the quantization it moves (benchmarks/RESULTS.md). Elsewhere: DYNAMIC_QUANTIZE_LINEAR's two dispatches
into the operator's own Q, Scale and ZeroPoint, then the product as compile_matmul_integer plans it.

Tensors: A FLOAT32 (2 to 4 dimensions: batch and channel, M, K), B UINT8 or INT8 of A's dimension count
(batch sizes A's, broadcast with stride 0), BScale FLOAT32 and the optional BZeroPoint (B's type) of
sizes {1,1} (per tensor) or {1,N} (per column), the optional Bias and the Output FLOAT32 (.., M, N).
Validation, in order: DML_BUFFER_TENSOR_DESC rules and the table (InvalidArgumentError /
UnsupportedError naming the field), then MATRIX_MULTIPLY_INTEGER_TO_FLOAT's rules and
DYNAMIC_QUANTIZE_LINEAR's on the descriptors they would see.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ..core.dtypes import DataType
from ..core.registry import F32, FL, D, OperatorSupport, row
from ..core.tensor_desc import TensorDesc
from ..device.device import Device
from ..device.memory import Tensor
from ..functional import as_tensor, check_out, compile_cached, device_of, pooled_empty
from ..runtime import DispatchPlan
from . import contract
from .base import CompiledOperator, validate_tensors
from .dynamic_quantize import SCRATCH_WORDS, DynamicQuantizeLinearDesc, plan_dynamic_quantize
from .dynamic_quantize import _check as check_dql
from .matmul_common import PUSH, MatrixMultiplyIntegerToFloatDesc, check_desc
from .matmul_integer import PLANNERS
from .spec import OperatorSpec

_Q8 = frozenset({D.INT8, D.UINT8})
DYNAMIC_QUANTIZE_MATRIX_MULTIPLY = OperatorSupport("DYNAMIC_QUANTIZE_MATRIX_MULTIPLY", None, (
    row(FL.FL_6_2, ("a_tensor", "input", (2, 4), F32), ("b_tensor", "input", (2, 4), _Q8),
        ("b_scale_tensor", "input", (1, 4), F32), ("b_zero_point_tensor", "optional input", (1, 4), _Q8),
        ("bias_tensor", "optional input", (2, 4), F32), ("output_tensor", "output", (2, 4), F32)),
))
_FIELDS = DYNAMIC_QUANTIZE_MATRIX_MULTIPLY.fields
# the binding list: inputs, the output, then the operator's constants (keys; the composed plans'
# Q, Scale and ZeroPoint after them)
_A, _B, _BS, _BZ, _BIAS, _OUT, _KEYS, _Q, _S, _Z = range(10)
FUSED_FAMILIES = ("coopmat", "coopmat-emulated")  # the product families with a QA variant (contract.dynamic_matmul)
QA_ALIGN = 16  # K and A's outer strides: whole 16-element chunks per staging register


@dataclass(frozen=True)
class DynamicQuantizeMatMulDesc:
    """DYNAMIC_QUANTIZE_MATRIX_MULTIPLY { ATensor, BTensor, BScaleTensor, BZeroPointTensor, BiasTensor,
    OutputTensor } (module docstring); optional tensors may be None."""

    a_tensor: TensorDesc
    b_tensor: TensorDesc
    b_scale_tensor: TensorDesc
    b_zero_point_tensor: TensorDesc | None
    bias_tensor: TensorDesc | None
    output_tensor: TensorDesc


def _parts(desc: DynamicQuantizeMatMulDesc) -> tuple[DynamicQuantizeLinearDesc, MatrixMultiplyIntegerToFloatDesc]:
    """The descriptors DYNAMIC_QUANTIZE_LINEAR and MATRIX_MULTIPLY_INTEGER_TO_FLOAT would see."""
    a = desc.a_tensor
    q = TensorDesc(DataType.UINT8, a.sizes)
    ones = (1,) * a.dimension_count
    dql = DynamicQuantizeLinearDesc(a, q, TensorDesc(DataType.FLOAT32, ones), TensorDesc(DataType.UINT8, ones))
    quant = len(desc.b_scale_tensor.sizes) * (1,)
    mm = MatrixMultiplyIntegerToFloatDesc(
        TensorDesc(DataType.UINT8, a.sizes, a.strides), TensorDesc(DataType.FLOAT32, quant),
        TensorDesc(DataType.UINT8, quant), desc.b_tensor, desc.b_scale_tensor, desc.b_zero_point_tensor,
        desc.bias_tensor, desc.output_tensor)
    return dql, mm


def _remap(plan: DispatchPlan, to: dict[int | None, int | None], units: dict[int, int] | None = None) -> DispatchPlan:
    """`plan` over another binding list: index i becomes to[i] (offset units replaced by `units`)."""
    units = units or {}
    return dataclasses.replace(
        plan, bindings=tuple(to[i] for i in plan.bindings), writes=tuple(to[i] for i in plan.writes),  # type: ignore[misc]
        offset_slots=tuple((w, to[i], units.get(to[i], u)) for w, i, u in plan.offset_slots  # type: ignore[misc]
                           if to[i] is not None),
        windows=tuple((to[i], d, s) for i, d, s in plan.windows))  # type: ignore[misc]


def product_plan(device: Device, mm: MatrixMultiplyIntegerToFloatDesc, kernel: str | None = None) -> tuple[str, DispatchPlan]:
    """(family, plan) of the product as compile_matmul_integer picks it: the policy's table."""
    for candidate in device.policy.matmul_table(kernel):
        if candidate.applies(device, mm):
            plan = PLANNERS[candidate.family](device, mm)
            if plan is not None:
                return candidate.family, plan
    raise AssertionError(f"no matrix-product family planned {mm}")  # (the tables end in one that always plans)


def fused_plan(family: str, plan: DispatchPlan, mm: MatrixMultiplyIntegerToFloatDesc, parts: int) -> DispatchPlan | None:
    """The product's plan as its QA variant (A FLOAT32 at binding 0, dql_minmax's `parts` key pairs
    at binding 1), or None where it has none: another family, A not k-contiguous, K or A's outer
    strides not multiples of QA_ALIGN."""
    a = mm.a_tensor
    if family not in FUSED_FAMILIES or a.sizes[-1] % QA_ALIGN or any(s % QA_ALIGN for s in a.effective_strides[:-1]):
        return None
    prefix, _, modes = plan.variant.partition("_")
    if not prefix.startswith("mmc8") or not modes.startswith("r"):
        return None
    words = list(plan.push)
    words[PUSH.offset("as_s")] = parts  # (the scale's stride, 0 per tensor: the keys' count here)
    to = {0: _A, 1: _KEYS, 2: None, 3: _B, 4: _BS, 5: _BZ, 6: _BIAS, 7: _OUT}
    fused = _remap(plan, to, {_A: 4})
    return dataclasses.replace(fused, variant=f"mmcq8{prefix[4:]}_{modes}", push=tuple(words))


def plans(device: Device, desc: DynamicQuantizeMatMulDesc, kernel: str | None = None) -> tuple[list[DispatchPlan], list[Tensor]]:
    """The dispatches of a checked descriptor and the constants they bind after the output."""
    dql, mm = _parts(desc)
    minmax, quant = plan_dynamic_quantize(dql, device.limits["max_compute_work_group_count"][0], device.policy.dql_geometry)
    minmax = _remap(minmax, {0: _A, 4: _KEYS})
    keys = Tensor.scratch(device, TensorDesc(DataType.UINT32, (SCRATCH_WORDS,)))
    family, product = product_plan(device, mm, kernel)
    fused = fused_plan(family, product, mm, minmax.groups[0])
    if fused is not None:
        return [minmax, fused], [keys]
    if mm.a_tensor.strides is not None:  # the product reads the packed Q, not A's layout
        family, product = product_plan(device, dataclasses.replace(mm, a_tensor=dql.output_tensor), kernel)
    quant = _remap(quant, {0: _A, 4: _KEYS, 1: _Q, 2: _S, 3: _Z})
    product = _remap(product, {0: _Q, 1: _S, 2: _Z, 3: _B, 4: _BS, 5: _BZ, 6: _BIAS, 7: _OUT})
    made = [Tensor.scratch(device, d) for d in (dql.output_tensor, TensorDesc(DataType.FLOAT32, (1,)),
                                                 TensorDesc(DataType.UINT8, (1,)))]
    return [minmax, quant, product], [keys, *made]


def compile_dynamic_quantize_matmul(device: Device, desc: DynamicQuantizeMatMulDesc, kernel: str | None = None) -> CompiledOperator:
    """The operator for one device; `kernel` forces the product's family (compile_matmul_integer's)."""
    support = DYNAMIC_QUANTIZE_MATRIX_MULTIPLY
    validate_tensors(support, device.feature_level, desc, _FIELDS, support.outputs)
    dql, mm = _parts(desc)
    check_desc(mm)
    check_dql(dql)
    dispatches, constants = plans(device, desc, kernel)
    return CompiledOperator(device, desc, support, support.inputs, support.outputs, dispatches, constants=constants)


# ---- functional helper (exported as kdml.dynamic_quantize_matmul) -------------------------------
def _quant_view(t: Tensor, rank: int, n: int, field: str) -> Tensor:
    """BScale / BZeroPoint as {1,..,1} or {1,..,1,N} of `rank` dimensions."""
    from ..functional.matmul_integer import _mm_quant_view

    v = _mm_quant_view(t, n, False, field)
    lead = (1,) * (rank - 2)
    return Tensor(v.buffer, TensorDesc(v.desc.data_type, (*lead, *v.desc.sizes), (*(0,) * len(lead), *v.desc.strides)), v.offset)


def dynamic_quantize_matmul(a: Any, b: Any, b_scale: Any, b_zero_point: Any = None, bias: Any = None, *,
                            out: Tensor | None = None, kernel: str | None = None, device: Device | None = None) -> Tensor:
    """ONNX Runtime's com.microsoft DynamicQuantizeMatMul on the device: A (FLOAT32, (.., M, K), at most
    two batch dimensions) quantized to UINT8 as DYNAMIC_QUANTIZE_LINEAR does, times B (UINT8 / INT8,
    (K, N) or A's batch dimensions and (K, N)) with BScale / BZeroPoint (1 or N elements) and Bias (N
    elements), as MATRIX_MULTIPLY_INTEGER_TO_FLOAT does: the same bits as those two helpers one after
    the other. Returns `out` (FLOAT32, (.., M, N)) or a new packed tensor. `kernel` forces the product's
    family (kdml.compile_matmul_integer's)."""
    dev = device_of(a, b, b_scale, b_zero_point, bias, out, device=device)
    ta, tb, ts = as_tensor(a, dev, "a"), as_tensor(b, dev, "b"), as_tensor(b_scale, dev, "b_scale")
    tz = None if b_zero_point is None else as_tensor(b_zero_point, dev, "b_zero_point")
    tc = None if bias is None else as_tensor(bias, dev, "bias")
    *batch, m, _k = ta.desc.sizes
    n = tb.desc.sizes[-1]
    rank = len(ta.desc.sizes)
    if len(tb.desc.sizes) == 2 and batch:  # one B for every matrix: stride 0 over the batches
        bd = tb.desc
        tb = Tensor(tb.buffer, TensorDesc(bd.data_type, (*batch, *bd.sizes), (*(0,) * len(batch), *bd.effective_strides)),
                    tb.offset)
    ts = _quant_view(ts, rank, n, "b_scale")
    tz = None if tz is None else _quant_view(tz, rank, n, "b_zero_point")
    res = (*batch, m, n)
    if tc is not None:
        cd = tc.desc
        if cd.element_count != n:
            from ..core.errors import invalid

            raise invalid("bias", f"must hold N = {n} elements, got sizes {cd.sizes}")
        tc = Tensor(tc.buffer, TensorDesc(cd.data_type, res, (*(0,) * (rank - 1), cd.effective_strides[-1])), tc.offset)
    if out is not None:
        check_out(out, dev, res, DataType.FLOAT32)
    y = out if out is not None else pooled_empty(dev, TensorDesc(DataType.FLOAT32, res))
    desc = DynamicQuantizeMatMulDesc(ta.desc, tb.desc, ts.desc, None if tz is None else tz.desc,
                                     None if tc is None else tc.desc, y.desc)
    op = compile_cached(dev, desc) if kernel is None else compile_dynamic_quantize_matmul(dev, desc, kernel)
    op.execute([ta, tb, ts, tz, tc], [y])
    return y


def _example() -> DynamicQuantizeMatMulDesc:
    f = DataType.FLOAT32
    return DynamicQuantizeMatMulDesc(TensorDesc(f, (1, 1, 4, 32)), TensorDesc(DataType.INT8, (1, 1, 32, 8)),
                                     TensorDesc(f, (1, 1, 1, 8)), TensorDesc(DataType.INT8, (1, 1, 1, 8)),
                                     TensorDesc(f, (1, 1, 4, 8)), TensorDesc(f, (1, 1, 4, 8)))


# ---- spec (kompute_dml/ops/spec.py) --------------------------------------------------------
SPECS = (OperatorSpec(DynamicQuantizeMatMulDesc, DYNAMIC_QUANTIZE_MATRIX_MULTIPLY, compile_dynamic_quantize_matmul,
                      (contract.DQL_MINMAX, contract.DQL_QUANT, contract.MMC, contract.dynamic_matmul.MMCQ,
                       contract.MMI_TEXEL, contract.MMI_PACKED, contract.MMI_GENERIC, contract.MMI_GPU, contract.MMG,
                       contract.MMW),
                      helpers=("dynamic_quantize_matmul",), example=_example),)
