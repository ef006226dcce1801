"""ONNX Runtime's DynamicQuantizeMatMul (com.microsoft) on the device: DYNAMIC_QUANTIZE_LINEAR of A
(FLOAT32) to UINT8, then MATRIX_MULTIPLY_INTEGER_TO_FLOAT of the result with A's scale and zero
point and B, B's scale and zero point and the bias, as DirectML's ONNX Runtime provider composes
the two operators.

Where the integer product runs on shaders/matmul_coop.comp with A k-contiguous (its `mmc8*_r*`
variants), the quantization moves into the product: `dql_minmax` reduces A to its min / max keys
exactly as DYNAMIC_QUANTIZE_LINEAR does, then one `mmc8*_q*` dispatch derives the scale and zero
point from those keys in every work group and quantizes A as it stages it (AQ in the shader; the
arithmetic is shaders/dql_math.glsl, DYNAMIC_QUANTIZE_LINEAR's own). The UINT8 copy of A is never
written: two dispatches instead of three, with the same output bits (tests/test_matmul_dynamic.py).
The product's tiles, B's layout and everything else are the ones MATRIX_MULTIPLY_INTEGER_TO_FLOAT
picks for the quantized A (the fused dispatch is derived from its plan). Elsewhere (other
families, A not k-contiguous with rows, offset and K multiples of 4 elements) the two operators run
one after the other.

    y = dynamic_quantize_matmul(a, b, b_scale, b_zero_point=None, bias=None)
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Hashable
from typing import Any

import numpy as np

from ..core.dtypes import DataType
from ..core.errors import invalid
from ..core.ints import cdiv
from ..core.tensor_desc import TensorDesc
from ..device.device import Device
from ..device.memory import Tensor
from ..functional import as_tensor, device_of, pooled_empty
from ..runtime import DispatchPlan
from . import contract
from . import dynamic_quantize as dq
from .base import CompiledOperator
from .matmul_common import MATRIX_MULTIPLY_INTEGER_TO_FLOAT, PUSH

# the fused operator's binding list: its inputs, its output, then its scratch (dql_minmax's keys)
_A, _B, _BS, _BZ, _BIAS, _OUT, _SCRATCH = range(7)
_INPUTS = ("a_tensor", "b_tensor", "b_scale_tensor", "b_zero_point_tensor", "bias_tensor")
_RC = re.compile(r"mmc8([sxd]?)_r([rncg])")  # the product plans the fused dispatch can take over


@dataclasses.dataclass(frozen=True)
class DynamicQuantizeMatMulDesc:
    """The fused operator's tensors: A FLOAT32, the rest as MATRIX_MULTIPLY_INTEGER_TO_FLOAT's
    descriptor binds them for the quantized A (its a_tensor's sizes and strides)."""

    a_tensor: TensorDesc
    b_tensor: TensorDesc
    b_scale_tensor: TensorDesc
    b_zero_point_tensor: TensorDesc | None
    bias_tensor: TensorDesc | None
    output_tensor: TensorDesc


def fused_operator(device: Device, product: CompiledOperator) -> CompiledOperator | None:
    """DynamicQuantizeMatMul on `product`'s plan (the integer product of the UINT8 A), or None where
    that plan is not a k-contiguous matmul_coop.comp dispatch or A's layout does not allow FLOAT32
    16-byte loads."""
    plan = product.plans[0]
    match = _RC.fullmatch(plan.variant) if len(product.plans) == 1 and isinstance(plan, DispatchPlan) else None
    d = product.desc
    a8 = d.a_tensor
    strides = a8.effective_strides
    if (match is None or d.a_scale_tensor.element_count != 1 or a8.sizes[-1] % 4
            or any(s % 4 for n, s in zip(a8.sizes[:-1], strides[:-1]) if n > 1) or a8.dimension_count < 2):
        return None
    variant = contract.MMCQ.name(kind=match[1], b=match[2])
    a = TensorDesc(DataType.FLOAT32, a8.sizes, a8.strides)
    desc = DynamicQuantizeMatMulDesc(a, d.b_tensor, d.b_scale_tensor, d.b_zero_point_tensor, d.bias_tensor, d.output_tensor)
    ones = (1,) * a.dimension_count
    dql = dq.DynamicQuantizeLinearDesc(a, TensorDesc(DataType.UINT8, a8.sizes, a8.strides), TensorDesc(DataType.FLOAT32, ones),
                                    TensorDesc(DataType.UINT8, ones))
    minmax = dq.plan_dynamic_quantize(dql, device.limits["max_compute_work_group_count"][0])[0]
    minmax = dataclasses.replace(minmax, bindings=(_A, _SCRATCH), writes=(_SCRATCH,))
    parts = min(dq.MAX_PARTS, max(1, cdiv(a.element_count, dq.ELEMENTS_PER_GROUP)))
    push = list(plan.push)
    push[PUSH.offset("as_s")] = parts  # AQ: the keys' count (a per-tensor A scale's stride is 0)
    b, out = d.b_tensor.data_type.size, d.output_tensor.data_type.size
    slots = PUSH.slots(a_off=(_A, 4), as_off=(_SCRATCH, 4), azp_off=(_SCRATCH, 1), b_off=(_B, b), bs_off=(_BS, out),
                       bzp_off=(_BZ, b), bias_off=(_BIAS, out), out_off=(_OUT, out))
    product_plan = dataclasses.replace(plan, variant=variant, bindings=(_A, _SCRATCH, _SCRATCH, _B, _BS, _BZ, _BIAS, _OUT),
                                       push=tuple(push), writes=(_OUT,), offset_slots=slots)
    # not zeroed: dql_minmax writes every key the product reads (as DYNAMIC_QUANTIZE_LINEAR's scratch)
    scratch = Tensor.scratch(device, TensorDesc(DataType.UINT32, (dq.SCRATCH_WORDS,)))
    return CompiledOperator(device, desc, MATRIX_MULTIPLY_INTEGER_TO_FLOAT, _INPUTS, ("output_tensor",),
                            [minmax, product_plan], constants=[scratch])


# (device, the product operator) -> the fused operator, or None: derived once per compiled product
_fused: dict[Hashable, CompiledOperator | None] = {}


def fused_call(device: Device, a: Tensor, b: Any, b_scale: Any, b_zero_point: Any = None, bias: Any = None,
               out: Tensor | None = None) -> tuple[CompiledOperator, list[Tensor | None], Any] | None:
    """The fused operator for these operands (kdml.matmul_integer_to_float's conventions for the
    rest), its bound inputs and the helper's prepared call (`.res_desc`: the result's packed desc,
    `.out_desc`: the desc the output is bound with), or None where the two operators must run one
    after the other. Nothing is recorded or allocated here (the ONNX backend asks before it
    requests an output)."""
    from ..functional import matmul_integer as mmi  # (the functional package imports the operators)

    if a.desc.data_type != DataType.FLOAT32:
        raise invalid("a", f"must be FLOAT32, got {a.desc.data_type.name}")
    if a.offset % 16:
        return None
    # the product as the UINT8 A takes it: A's sizes and strides over A's bytes (descriptors only:
    # the fused dispatch binds A itself), a scale and zero point of one element each
    a8 = Tensor.trusted(a.buffer, TensorDesc(DataType.UINT8, a.desc.sizes, a.desc.strides), a.offset)
    args = (a8, np.float32(1.0), np.uint8(0), b, b_scale, b_zero_point, bias)
    prep, _ = mmi._prepare(device, args, DataType.FLOAT32, out)
    key = (device, prep.op)
    fused = _fused.get(key, False)
    if fused is False:
        fused = fused_operator(device, prep.op)
        if len(_fused) > 512:
            _fused.clear()
        _fused[key] = fused
    if fused is None:
        return None
    return fused, [Tensor.trusted(a.buffer, fused.desc.a_tensor, a.offset), *prep.bound_inputs(args)[3:]], prep


def dynamic_quantize_matmul(a: Any, b: Any, b_scale: Any, b_zero_point: Any = None, bias: Any = None, *,
                            out: Tensor | None = None, device: Device | None = None) -> Tensor:
    """ONNX com.microsoft DynamicQuantizeMatMul: kdml.dynamic_quantize_linear(a) (UINT8), then
    kdml.matmul_integer_to_float of the result with its scale and zero point and b, b_scale,
    b_zero_point and bias (that helper's shapes and broadcasting), FLOAT32 out; on matmul_coop.comp
    in two dispatches (module docstring), the same bits either way. `a`: FLOAT32."""
    from ..functional import matmul_integer as mmi

    dev = device_of(a, b, b_scale, b_zero_point, bias, out, device=device)
    ta = as_tensor(a, dev, "a")
    call = fused_call(dev, ta, b, b_scale, b_zero_point, bias, out)
    if call is None:
        y, scale, zp = dq.dynamic_quantize_linear(ta)
        return mmi.matmul_integer_to_float(y, b, scale, b_scale, zp, b_zero_point, bias, out_data_type=DataType.FLOAT32,
                                           out=out, device=dev)
    op, inputs, prep = call
    result = out if out is not None else pooled_empty(dev, prep.res_desc)
    bound = result if result.desc is prep.out_desc else Tensor.trusted(result.buffer, prep.out_desc, result.offset)
    op.execute(inputs, [bound])
    return result
