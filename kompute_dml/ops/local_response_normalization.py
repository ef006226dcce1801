"""DirectML's LOCAL_RESPONSE_NORMALIZATION (DML_LOCAL_RESPONSE_NORMALIZATION_OPERATOR_DESC):
Output = Input / (Bias + (Alpha / LocalSize) * S)^Beta, S the sum of Input^2 over the local region:
with CrossChannel the channels max(0, c - floor((LocalSize - 1) / 2)) .. min(C - 1, c +
ceil((LocalSize - 1) / 2)) at the element's position (the page's remarks, ONNX LRN), else the
LocalSize x LocalSize window of the element's own channel with the same reach along height and
width, clipped to the tensor (the page: "the number of elements to sum over per dimension: Width,
Height, and optionally Channel"); Alpha / LocalSize as the page writes it in both cases.

shaders/lrn.comp: an output element per invocation; S a float32 sum in index order, Alpha /
LocalSize rounded to float32 on the host, each step of the formula rounded once, the power as
exp(Beta log(base)) and the division correctly rounded with unary_math.glsl's functions (the same
bits on every device). Relative error (tests/test_local_response_normalization.py enforces it
against float64): <= u (|Beta| (K + 4) + 3 |Beta log(base)| + 6), K the region's size, u =
2^-24, for Bias >= 0; FLOAT16 decoded exactly, one more rounding. ONNX LRN runs on it
(onnx_backend/handlers_vision.py); helper kdml.local_response_normalization (alias kdml.lrn).

Tensor support as the page gives it: 4 dimensions, FLOAT32 and FLOAT16, from 1_0. Validation, in
order: the table (InvalidArgumentError / UnsupportedError naming the field), the page's rules
(InvalidArgumentError whose message starts with the field): the output's type and sizes are the
input's, LocalSize >= 1, Alpha, Beta and Bias finite float32 values; then a non-overlapping
output and 32-bit addressing.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..core.dtypes import DataType
from ..core.errors import invalid
from ..core.ints import as_int
from ..core.layout import check_no_overlap
from ..core.registry import FL, FLOATS, OperatorSupport, row
from ..core.tensor_desc import TensorDesc
from ..device.memory import Tensor
from ..functional import _packed, check_out, compile_cached, pooled_empty
from ..functional.elementwise import _operands
from ..runtime import DispatchPlan, grid_for
from . import contract
from .base import CompiledOperator, check_like, validate_tensors
from .elementwise_plan import check_addressable
from .onnx_types import float_input
from .spec import OnnxOp, OperatorSpec

if TYPE_CHECKING:
    from ..device.device import Device

LOCAL_RESPONSE_NORMALIZATION = OperatorSupport("LOCAL_RESPONSE_NORMALIZATION", 74, (
    row(FL.FL_1_0, ("input_tensor", "input", (4, 4), FLOATS), ("output_tensor", "output", (4, 4), FLOATS)),))


@dataclass(frozen=True)
class LocalResponseNormalizationDesc:
    """DML_LOCAL_RESPONSE_NORMALIZATION_OPERATOR_DESC { InputTensor, OutputTensor, CrossChannel,
    LocalSize, Alpha, Beta, Bias }."""

    input_tensor: TensorDesc
    output_tensor: TensorDesc
    cross_channel: bool
    local_size: int
    alpha: float = 0.0001
    beta: float = 0.75
    bias: float = 1.0


def _f32(desc: Any, name: str) -> float:
    v = getattr(desc, name)
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise invalid(name, f"must be a FLOAT, got {type(v).__name__} {v!r}")
    with np.errstate(over="ignore"):
        f = float(np.float32(v))
    if not math.isfinite(f):
        raise invalid(name, f"must be a finite float32 value, got {v!r}")
    return f


def compile_local_response_normalization(device: Device, desc: LocalResponseNormalizationDesc) -> CompiledOperator:
    support = LOCAL_RESPONSE_NORMALIZATION
    validate_tensors(support, device.feature_level, desc, support.fields, support.outputs)
    x, y = desc.input_tensor, desc.output_tensor
    check_like(x, y)
    if y.sizes != x.sizes:
        raise invalid("output_tensor.sizes", f"must equal input_tensor's {x.sizes}, got {y.sizes}")
    if not isinstance(desc.cross_channel, (bool, np.bool_)):
        raise invalid("cross_channel", f"must be a BOOL, got {desc.cross_channel!r}")
    size = as_int(desc.local_size, "local_size")
    if size < 1:
        raise invalid("local_size", f"must be >= 1, got {size}")
    alpha, beta, bias = (_f32(desc, f) for f in ("alpha", "beta", "bias"))
    check_no_overlap(y.sizes, y.effective_strides, "output_tensor")
    check_addressable(support.fields, (x, y))
    fam = contract.LRN
    unit = x.data_type.size
    total = x.element_count
    alpha_n = struct.unpack("<f", struct.pack("<f", np.float32(alpha) / np.float32(size)))[0]  # float32 division
    push = fam.pack(x_off=0, y_off=0, total=total, cross=int(bool(desc.cross_channel)), lo=(size - 1) // 2,
                    hi=size // 2, size=list(x.sizes), xs=list(x.effective_strides), ys=list(y.effective_strides),
                    alpha=alpha_n, beta=beta, bias=bias)
    plan = DispatchPlan(variant=fam.name(t="f16" if x.data_type == DataType.FLOAT16 else "f32"), bindings=(0, 1),
                        push=push, writes=(1,), offset_slots=fam.slots(x_off=(0, unit), y_off=(1, unit)),
                        groups=grid_for(total, 256, device.limits["max_compute_work_group_count"][0]))
    return CompiledOperator(device, desc, support, support.inputs, support.outputs, [plan])


def local_response_normalization(x: Any, size: int, *, alpha: float = 0.0001, beta: float = 0.75, bias: float = 1.0,
                                 cross_channel: bool = True, out: Tensor | None = None,
                                 device: Device | None = None) -> Tensor:
    """ONNX LRN (cross_channel) on LOCAL_RESPONSE_NORMALIZATION: x / (bias + alpha / size *
    sum(x^2 over the region))^beta. x of 3 to 4 dimensions (N, C[, H], W), FLOAT32 / FLOAT16; a
    3-D x runs as (N, C, 1, W)."""
    if device is None and isinstance(out, Tensor):
        device = out.device
    dev, (t,) = _operands((x,), ("x",), device)
    r = t.desc.dimension_count
    if r not in (3, 4):
        raise invalid("x", f"must have 3 or 4 dimensions (N, C, [H,] W), got {t.desc.sizes}")
    shape = t.desc.sizes
    dt = t.desc.data_type
    if out is not None:
        check_out(out, dev, shape, dt)
    y = out if out is not None else pooled_empty(dev, _packed(dt, shape))
    tv, yv = t, y
    if r == 3:  # (N, C, W) as (N, C, 1, W): the same elements
        tv, yv = (Tensor.trusted(v.buffer, TensorDesc(dt, (shape[0], shape[1], 1, shape[2]),
                                                      (*v.desc.effective_strides[:2], 0, v.desc.effective_strides[2])),
                                 v.offset) for v in (t, y))
    desc = LocalResponseNormalizationDesc(tv.desc, yv.desc, bool(cross_channel), size, alpha, beta, bias)
    compile_cached(dev, desc).execute([tv], [yv])
    return y


lrn = local_response_normalization
_T = TensorDesc(DataType.FLOAT32, (1, 5, 3, 4))
SPECS = (OperatorSpec(LocalResponseNormalizationDesc, LOCAL_RESPONSE_NORMALIZATION, compile_local_response_normalization,
                      (contract.LRN,), helpers=("local_response_normalization", "lrn"),
                      onnx=(OnnxOp("LRN", "", "lrn", check=float_input),),
                      example=lambda: LocalResponseNormalizationDesc(_T, _T, True, 3)),)
