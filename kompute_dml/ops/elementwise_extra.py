"""DirectML's ELEMENT_WISE_IDENTITY, ELEMENT_WISE_MEAN and ELEMENT_WISE_CLIP1: thin forms of operators
kompute_dml has (docs/elementwise_extra.md).

ELEMENT_WISE_IDENTITY (DML_ELEMENT_WISE_IDENTITY_OPERATOR_DESC { InputTensor, OutputTensor, ScaleBias }):
f(x) = x. Without ScaleBias it is COPY's strided copy (ops/identity.plan_copy: bit patterns, NaN
payloads kept; a transfer copy where rows are contiguous). With one (floats) it is ACTIVATION_LINEAR's
function with Alpha = Scale, Beta = Bias (shaders/float_unary.comp FN_LINEAR, act_math.glsl): x * scale
rounded to float32 in integer code (so not flushed on any device), then + bias by the device's float32
add, FLOAT16 widened exactly and rounded once: bit for bit numpy's float32 (x * scale) + bias. The page
does not say how ScaleBias applies to integers: kompute_dml refuses it there (UnsupportedError, as
ELEMENT_WISE_CLIP does) and refuses a NaN scale or bias (InvalidArgumentError). Table: 1_0 4 to 5
dimensions FLOAT32 / FLOAT16; 2_1 the 8- to 32-bit integers too; 3_0 1 to 8 dimensions; 4_1 FLOAT64,
INT64, UINT64 too (the page's newer table; copied as bit patterns). In place allowed.

ELEMENT_WISE_MEAN (DML_ELEMENT_WISE_MEAN_OPERATOR_DESC { ATensor, BTensor, OutputTensor }): (a + b) / 2,
one dispatch of shaders/elementwise.comp's OP_MEAN on the element-wise plans (contract.elementwise_extra
.EW_MEAN; inputs broadcast by 0 strides). Floats: the float32 sum halved, correctly rounded (a sum whose
half is subnormal is exact; a sum that overflows with finite operands takes the halves' sum; float16
rounded once from float32, an innocuous double rounding), on the device's float32 add and multiply as
ELEMENT_WISE_ADD is. INT32 / UINT32: the exact mean (no overflow), truncated toward zero (the page says
nothing of integer rounding; DIVIDE's "truncated" is taken). Table: 1_0 4 dimensions FLOAT32 / FLOAT16;
2_1 INT32 / UINT32 too; 3_0 1 to 8 dimensions. In place allowed.

ELEMENT_WISE_CLIP1 (DML_ELEMENT_WISE_CLIP1_OPERATOR_DESC { InputTensor, OutputTensor, ScaleBias,
MinMaxDataType, Min, Max }, from 5_0, 1 to 8 dimensions, every type but FLOAT64): max(Min, min(x, Max))
with Min and Max DML_SCALAR_UNIONs read as MinMaxDataType, which must equal the output's type (given as
Python numbers, ops/diagonal.value1_bits: floats rounded to the type, integers integral and in range).
Floats run on ELEMENT_WISE_CLIP's FN_CLIP (ScaleBias as CLIP's; the bounds exact in float32, not NaN);
integers on CLIP's integer shader (contract.EW_EXT ew_clip_<t>) with the bounds exact, 64-bit ones too,
and no ScaleBias (UnsupportedError, as CLIP). kompute_dml's defaults: min_max_data_type None = the
output's type, min / max None = no bound (the type's lowest / highest; -inf / +inf for floats). Min > Max
gives Min. In place allowed.

Validation, in order: DML_BUFFER_TENSOR_DESC rules and the feature level's table (InvalidArgumentError /
UnsupportedError naming the field), the same DataType, DimensionCount and Sizes, the scalar fields
(InvalidArgumentError naming them), a non-overlapping output, 32-bit element addressing.
"""

from __future__ import annotations

import types
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.dtypes import DataType
from ..core.errors import UnsupportedError, invalid
from ..core.layout import check_no_overlap
from ..core.registry import ALL_TYPES, FL, FLOATS, INTS_8_32, INTS_32, NUMERIC, OperatorSupport, row
from ..core.tensor_desc import TensorDesc
from ..device.device import Device
from ..device.memory import Tensor
from ..functional.elementwise import _binary as _run_binary
from . import contract
from .activation import _unary
from .activation_params import CLIP, _bound_words
from .activation_params import OPS as ACT_OPS
from .base import CompiledOperator, validate_tensors
from .contract.elementwise_extra import EW_MEAN
from .diagonal import value1_bits
from .elementwise import CompiledElementWiseInPlace, _binary, _compile, _validate, check_same, type_code
from .elementwise_plan import check_addressable, device_limits, plan_elementwise
from .elementwise_unary import ScaleBias, _param_words
from .identity import _COPY_SHADERS, CompiledCopy, plan_copy
from .spec import OperatorSpec
from .split_range import binding_window

LINEAR = next(op for op in ACT_OPS if op.name == "ACTIVATION_LINEAR")


def _unary_table(name: str, op_type: int, rows: Any) -> OperatorSupport:
    return OperatorSupport(name, op_type, tuple(
        row(level, ("input_tensor", "input", dims, ts), ("output_tensor", "output", dims, ts)) for level, dims, ts in rows))


ELEMENT_WISE_IDENTITY = _unary_table("ELEMENT_WISE_IDENTITY", 1, (
    (FL.FL_1_0, (4, 5), FLOATS), (FL.FL_2_1, (4, 5), FLOATS | INTS_8_32), (FL.FL_3_0, (1, 8), FLOATS | INTS_8_32),
    (FL.FL_4_1, (1, 8), ALL_TYPES)))
ELEMENT_WISE_MEAN = _binary("ELEMENT_WISE_MEAN", 22, ((FL.FL_1_0, (4, 4), FLOATS), (FL.FL_2_1, (4, 4), FLOATS | INTS_32),
                                                     (FL.FL_3_0, (1, 8), FLOATS | INTS_32)))
ELEMENT_WISE_CLIP1 = _unary_table("ELEMENT_WISE_CLIP1", 153, ((FL.FL_5_0, (1, 8), NUMERIC),))


@dataclass(frozen=True)
class ElementWiseIdentityDesc:
    """DML_ELEMENT_WISE_IDENTITY_OPERATOR_DESC { InputTensor, OutputTensor, ScaleBias }: f(x) = x, or
    x * scale + bias with a ScaleBias (floats). The same DataType, DimensionCount and Sizes for both."""

    input_tensor: TensorDesc
    output_tensor: TensorDesc
    scale_bias: ScaleBias | None = None


@dataclass(frozen=True)
class ElementWiseMeanDesc:
    """DML_ELEMENT_WISE_MEAN_OPERATOR_DESC { ATensor, BTensor, OutputTensor }: (a + b) / 2 (floats
    correctly rounded; integers exact, truncated toward zero). The same DataType, DimensionCount and
    Sizes for all three. In place allowed."""

    a_tensor: TensorDesc
    b_tensor: TensorDesc
    output_tensor: TensorDesc


@dataclass(frozen=True)
class ElementWiseClip1Desc:
    """DML_ELEMENT_WISE_CLIP1_OPERATOR_DESC { InputTensor, OutputTensor, ScaleBias, MinMaxDataType, Min,
    Max }: max(min, min(x, max)), min and max read as min_max_data_type (None: the output's type; the
    page requires that type); min / max None: no bound."""

    input_tensor: TensorDesc
    output_tensor: TensorDesc
    scale_bias: ScaleBias | None = None
    min_max_data_type: DataType | None = None
    min: Any = None
    max: Any = None


def float_plans(device: Device, fn: str, x: TensorDesc, y: TensorDesc, words: list[int], vector: bool = True) -> list[Any]:
    """The element-wise plans of float_unary.comp's FN_<fn> on x -> y with the block's b_str words."""
    family = contract.FLOAT_UNARY[fn]
    t = type_code(x.data_type, True)
    return plan_elementwise(family, family.name(t=t, vec=""), (x, y), **device_limits(device), unused_b=words,
                            vector=family.name(t=t, vec="_v") if vector else None)


def scale_bias_of(value: Any) -> ScaleBias | None:
    """A ScaleBias (or a (scale, bias) pair) as float32-representable real numbers, not NaN."""
    if value is None:
        return None
    if isinstance(value, tuple) and len(value) == 2:
        value = ScaleBias(*value)
    if not isinstance(value, ScaleBias):
        raise invalid("scale_bias", f"must be a kdml.ScaleBias(scale, bias) or None, got {type(value).__name__}")
    for name in ("scale", "bias"):
        v = getattr(value, name)
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
            raise invalid(f"scale_bias.{name}", f"must be a real number, got {type(v).__name__} {v!r}")
        if np.isnan(np.float32(v)):
            raise invalid(f"scale_bias.{name}", f"must be a number, not NaN, got {v!r}")
    return value


def linear_words(scale: Any, bias: Any) -> list[int]:
    """b_str of FN_LINEAR for alpha * x + beta (ACTIVATION_LINEAR's parameters)."""
    return _param_words(LINEAR, types.SimpleNamespace(alpha=scale, beta=bias))


def _unary_prelude(device: Device, desc: Any, support: OperatorSupport) -> tuple[TensorDesc, TensorDesc]:
    validate_tensors(support, device.feature_level, desc, support.fields, support.outputs)
    check_same(desc, "input_tensor", ("output_tensor",), data_type=True)
    return desc.input_tensor, desc.output_tensor


def _no_integer_scale_bias(sb: Any, dt: DataType, name: str) -> None:
    if sb is not None and dt not in FLOATS:
        raise UnsupportedError(f"scale_bias: kompute_dml's {name} takes a ScaleBias with FLOAT32 / FLOAT16 tensors "
                               f"only, not {dt.name}")


def compile_identity(device: Device, desc: ElementWiseIdentityDesc) -> CompiledOperator:
    support = ELEMENT_WISE_IDENTITY
    x, y = _unary_prelude(device, desc, support)
    sb = scale_bias_of(desc.scale_bias)
    _no_integer_scale_bias(sb, x.data_type, support.name)
    check_no_overlap(y.sizes, y.effective_strides, "output_tensor")
    if sb is None:
        policy = device.policy
        plans: list[Any] = plan_copy(x, y, device.limits["max_compute_work_group_count"][0],
                                     lambda regions: policy.copies_by_transfer(y.byte_size, regions), policy.memory_kernel,
                                     binding_window(device.limits))
        return CompiledCopy(device, desc, support, support.inputs, support.outputs, plans)
    check_addressable(support.fields, (x, y))
    plans = float_plans(device, "linear", x, y, linear_words(sb.scale, sb.bias))
    return CompiledElementWiseInPlace(device, desc, support, support.inputs, support.outputs, plans)


def compile_mean(device: Device, desc: ElementWiseMeanDesc) -> CompiledOperator:
    support = ELEMENT_WISE_MEAN
    _validate(device, desc, support, ("a_tensor", "b_tensor", "output_tensor"))
    fam = EW_MEAN
    return _compile(device, desc, support, fam, fam.name(t=type_code(desc.a_tensor.data_type, True)), in_place=True)


def _bound(value: Any, dt: DataType, field: str, lowest: bool) -> int | float:
    """A Min / Max DML_SCALAR_UNION read as dt: a float (exact in float32) or an exact integer."""
    if value is None:
        if dt in FLOATS:
            return -np.inf if lowest else np.inf
        info = np.iinfo(dt.numpy_dtype)
        return int(info.min if lowest else info.max)
    bits = value1_bits(value, dt, field)
    if dt in FLOATS:
        return float(np.array([bits], f"u{dt.size}").view(dt.numpy_dtype)[0])
    return bits - (1 << (8 * dt.size)) if dt.is_signed and bits >> (8 * dt.size - 1) else bits


def compile_clip1(device: Device, desc: ElementWiseClip1Desc) -> CompiledOperator:
    support = ELEMENT_WISE_CLIP1
    x, y = _unary_prelude(device, desc, support)
    dt = y.data_type
    if desc.min_max_data_type is not None and DataType.coerce(desc.min_max_data_type, "min_max_data_type") != dt:
        raise invalid("min_max_data_type", f"must equal output_tensor's data type ({dt.name}), got "
                                           f"{DataType.coerce(desc.min_max_data_type, 'min_max_data_type').name}")
    lo, hi = _bound(desc.min, dt, "min", True), _bound(desc.max, dt, "max", False)
    sb = scale_bias_of(desc.scale_bias)
    _no_integer_scale_bias(sb, dt, support.name)
    check_no_overlap(y.sizes, y.effective_strides, "output_tensor")
    check_addressable(support.fields, (x, y))
    if dt in FLOATS:
        if np.isnan(lo) or np.isnan(hi):
            raise invalid("min" if np.isnan(lo) else "max", "must be a number, not NaN")
        plans = float_plans(device, "clip", x, y, _param_words(CLIP, types.SimpleNamespace(scale_bias=sb, min=lo, max=hi)))
    else:
        family = contract.EW_EXT
        plans = plan_elementwise(family, family.name(op="clip", t=type_code(dt, True)), (x, y), **device_limits(device),
                                 unused_b=_bound_words(int(lo), int(hi), dt))
    return CompiledElementWiseInPlace(device, desc, support, support.inputs, support.outputs, list(plans))


# ---- functional helpers (exported as kdml.<name>): a new packed Tensor of x's shape and type, or `out`
def elementwise_identity(x: Any, *, scale_bias: Any = None, out: Tensor | None = None,
                         device: Device | None = None) -> Tensor:
    """x (a copy of any of the page's types), or x * scale + bias for FLOAT32 / FLOAT16 with a
    scale_bias (a kdml.ScaleBias or a (scale, bias) pair) (DML_ELEMENT_WISE_IDENTITY)."""
    return _unary(ElementWiseIdentityDesc, x, out, device, scale_bias=scale_bias_of(scale_bias))


def elementwise_mean(a: Any, b: Any, *, out: Tensor | None = None, device: Device | None = None) -> Tensor:
    """(a + b) / 2 element by element, numpy-broadcast (DML_ELEMENT_WISE_MEAN: FLOAT32, FLOAT16 correctly
    rounded; INT32, UINT32 exact, truncated toward zero)."""
    return _run_binary(ElementWiseMeanDesc, a, b, out, device)


def clip1(x: Any, min: Any = None, max: Any = None, *, scale_bias: Any = None,
          out: Tensor | None = None, device: Device | None = None) -> Tensor:
    """max(min, min(x, max)) with min / max read as x's type (DML_ELEMENT_WISE_CLIP1: every type but
    FLOAT64, 64-bit integer bounds exact; None: no bound; scale_bias for floats)."""
    return _unary(ElementWiseClip1Desc, x, out, device, scale_bias=scale_bias_of(scale_bias), min=min, max=max)


_F4 = TensorDesc(DataType.FLOAT32, (1, 2, 3, 4))
SPECS = (
    OperatorSpec(ElementWiseIdentityDesc, ELEMENT_WISE_IDENTITY, compile_identity,
                 (*_COPY_SHADERS, contract.FLOAT_UNARY["linear"]), helpers=("elementwise_identity",),
                 example=lambda: ElementWiseIdentityDesc(_F4, _F4, ScaleBias(0.5, 0.25))),
    OperatorSpec(ElementWiseMeanDesc, ELEMENT_WISE_MEAN, compile_mean, (EW_MEAN,),
                 helpers=("elementwise_mean",), example=lambda: ElementWiseMeanDesc(_F4, _F4, _F4)),
    OperatorSpec(ElementWiseClip1Desc, ELEMENT_WISE_CLIP1, compile_clip1, (contract.FLOAT_UNARY["clip"], contract.EW_EXT),
                 helpers=("clip1",),
                 example=lambda: ElementWiseClip1Desc(_F4, _F4, ScaleBias(2.0, -1.0), DataType.FLOAT32, -1.5, 2.5)),
)
