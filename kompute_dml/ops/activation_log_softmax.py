"""DirectML's ACTIVATION_LOG_SOFTMAX1 and ACTIVATION_HARDMAX1 (DML_ACTIVATION_LOG_SOFTMAX1_OPERATOR_DESC,
DML_ACTIVATION_HARDMAX1_OPERATOR_DESC: from feature level 5_1, 1 to 8 dimensions, FLOAT32 and
FLOAT16, over the dimensions in Axes) and their first versions ACTIVATION_LOG_SOFTMAX and
ACTIVATION_HARDMAX (from 1_0: 4 dimensions, 4 to 5 from 2_0, 1 to 8 from 3_0; an input of
effective rank at most 2, the function over its last dimension).

Each runs on ACTIVATION_SOFTMAX1's plans (ops/activation.py `plan_rows`: a row per 8, 32 or 256
invocations, strided and broadcast inputs, offsets, values beyond one binding) with
shaders/softmax.comp's MODE 1 (log-softmax: y = (x - max) - log(sum(exp(x - max))) in float32)
and MODE 2 (hardmax: 1 at the row's first maximum, 0 elsewhere); HARDMAX keeps the reduced
dimensions in their logical order so that "first" is the first in the row's row-major order.
Validation, in order: DML_BUFFER_TENSOR_DESC rules and the feature level's table
(InvalidArgumentError / UnsupportedError naming the field), the pages' tensor constraint (the
same DataType, DimensionCount and Sizes: output_tensor.data_type / output_tensor.sizes), the
axes (the 1 versions: each in [0, DimensionCount), not empty, not repeated) or the effective
rank (the first versions: input_tensor.sizes), a non-overlapping output, 32-bit element
addressing. No output may alias the input (the pages do not allow it). Semantics of NaN and
infinities, the error bound: docs/log_softmax.md.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..core.dtypes import DataType
from ..core.errors import invalid
from ..core.layout import check_no_overlap
from ..core.registry import FL, FLOATS, OperatorSupport, row
from ..core.tensor_desc import TensorDesc
from ..device.device import Device
from ..device.memory import Tensor
from ..functional.elementwise import _operands
from . import contract
from .activation import _axes, _unary, plan_rows, softmax_axes
from .base import CompiledOperator, validate_tensors
from .elementwise import check_same
from .elementwise_plan import check_addressable
from .onnx_types import float_input
from .spec import OnnxOp, OperatorSpec


def _table(name: str, code: int, first: bool) -> OperatorSupport:
    """The pages' tables: the 1 versions 1 to 8 dimensions from 5_1; the first versions 4 at 1_0,
    4 to 5 at 2_0, 1 to 8 from 3_0; FLOAT32 and FLOAT16 throughout."""
    levels = ((FL.FL_1_0, (4, 4)), (FL.FL_2_0, (4, 5)), (FL.FL_3_0, (1, 8))) if first else ((FL.FL_5_1, (1, 8)),)
    return OperatorSupport(name, code, tuple(
        row(level, ("input_tensor", "input", dims, FLOATS), ("output_tensor", "output", dims, FLOATS))
        for level, dims in levels))


ACTIVATION_LOG_SOFTMAX1 = _table("ACTIVATION_LOG_SOFTMAX1", 159, False)
ACTIVATION_HARDMAX1 = _table("ACTIVATION_HARDMAX1", 160, False)
ACTIVATION_LOG_SOFTMAX = _table("ACTIVATION_LOG_SOFTMAX", 41, True)
ACTIVATION_HARDMAX = _table("ACTIVATION_HARDMAX", 36, True)


class _Axes:
    """The 1 versions' `axes`: a list or an array made hashable (anything else is refused at
    compile)."""

    axes: Any

    def __post_init__(self) -> None:
        axes = self.axes
        if not isinstance(axes, tuple) and isinstance(axes, Iterable) and not isinstance(axes, (str, bytes)):
            with contextlib.suppress(TypeError):
                object.__setattr__(self, "axes", tuple(axes))


@dataclass(frozen=True)
class ActivationLogSoftmax1Desc(_Axes):
    """DML_ACTIVATION_LOG_SOFTMAX1_OPERATOR_DESC { InputTensor, OutputTensor, AxisCount, Axes }:
    f(x) = ln(exp(x) / sum(exp(x))) over the elements of the dimensions in `axes` (AxisCount is
    len(axes)), computed as (x - max) - log(sum(exp(x - max))) in float32. Each axis in
    [0, DimensionCount); kompute_dml also refuses an empty or repeated axis list (the page says
    neither). Error bound and the rows of NaN / infinities: docs/log_softmax.md."""

    input_tensor: TensorDesc
    output_tensor: TensorDesc
    axes: tuple[int, ...] = ()


@dataclass(frozen=True)
class ActivationHardmax1Desc(_Axes):
    """DML_ACTIVATION_HARDMAX1_OPERATOR_DESC { InputTensor, OutputTensor, AxisCount, Axes }: 1 at
    the first maximum of the elements of the dimensions in `axes` (first in their row-major
    order: ReduceArgMax with DML_AXIS_DIRECTION_INCREASING), 0 elsewhere; a NaN counts as the
    maximum (docs/log_softmax.md). Axes as ActivationLogSoftmax1Desc's."""

    input_tensor: TensorDesc
    output_tensor: TensorDesc
    axes: tuple[int, ...] = ()


@dataclass(frozen=True)
class ActivationLogSoftmaxDesc:
    """DML_ACTIVATION_LOG_SOFTMAX_OPERATOR_DESC { InputTensor, OutputTensor }: the input has an
    effective rank (DimensionCount without its leading sizes of 1) of at most 2; the log-softmax
    of each row of the last dimension (ACTIVATION_LOG_SOFTMAX1 with Axes {DimensionCount - 1})."""

    input_tensor: TensorDesc
    output_tensor: TensorDesc


@dataclass(frozen=True)
class ActivationHardmaxDesc:
    """DML_ACTIVATION_HARDMAX_OPERATOR_DESC { InputTensor, OutputTensor }: effective rank at most 2
    as ActivationLogSoftmaxDesc's; the hardmax of each row of the last dimension."""

    input_tensor: TensorDesc
    output_tensor: TensorDesc


def last_axis(x: TensorDesc) -> tuple[int, ...]:
    """The first versions' axis, after their rule: an effective rank (the dimension count without
    the leading sizes of 1) of at most 2."""
    lead = next((i for i, s in enumerate(x.sizes) if s != 1), x.dimension_count)
    if x.dimension_count - lead > 2:
        raise invalid("input_tensor.sizes", f"must have an effective rank of at most 2 (the dimension count without "
                                            f"the leading sizes of 1), got {x.sizes}")
    return (x.dimension_count - 1,)


def _compile(device: Device, desc: Any, support: OperatorSupport, hard: bool) -> CompiledOperator:
    validate_tensors(support, device.feature_level, desc, support.fields, support.outputs)
    check_same(desc, "input_tensor", ("output_tensor",), data_type=True)
    x, y = desc.input_tensor, desc.output_tensor
    axes = softmax_axes(desc.axes, x.dimension_count) if hasattr(desc, "axes") else last_axis(x)
    check_no_overlap(y.sizes, y.effective_strides, "output_tensor")
    check_addressable(support.fields, (x, y))
    families = (contract.HMX_FAST, contract.HMX_GEN) if hard else (contract.LSM_FAST, contract.LSM_GEN)
    plans = plan_rows(device, x, y, axes, families=families, logical=hard)
    return CompiledOperator(device, desc, support, support.inputs, support.outputs, plans)


def compile_log_softmax1(device: Device, desc: ActivationLogSoftmax1Desc) -> CompiledOperator:
    return _compile(device, desc, ACTIVATION_LOG_SOFTMAX1, False)


def compile_hardmax1(device: Device, desc: ActivationHardmax1Desc) -> CompiledOperator:
    return _compile(device, desc, ACTIVATION_HARDMAX1, True)


def compile_log_softmax(device: Device, desc: ActivationLogSoftmaxDesc) -> CompiledOperator:
    return _compile(device, desc, ACTIVATION_LOG_SOFTMAX, False)


def compile_hardmax(device: Device, desc: ActivationHardmaxDesc) -> CompiledOperator:
    return _compile(device, desc, ACTIVATION_HARDMAX, True)


# ---- functional helpers (exported as kdml.<name>): x a Tensor (any strides and offset) or host
# data of FLOAT32 / FLOAT16; axes an integer or a sequence of them in [-rank, rank); a new packed
# Tensor from the device's buffer pool, or `out=` (x's shape and type, any strides).
def log_softmax(x: Any, *, axes: Any = (-1,), out: Tensor | None = None, device: Device | None = None) -> Tensor:
    """(x - max) - log(sum(exp(x - max))) over `axes` (DML_ACTIVATION_LOG_SOFTMAX1; default the
    last axis, ONNX LogSoftmax's), in float32 within docs/log_softmax.md's bound."""
    dev, (t,) = _operands((x,), ("x",), device)
    return _unary(ActivationLogSoftmax1Desc, t, out, dev, axes=_axes(axes, t.desc.dimension_count))


def hardmax(x: Any, *, axes: Any = (-1,), out: Tensor | None = None, device: Device | None = None) -> Tensor:
    """1 at the first maximum over `axes` (first in their row-major order; a NaN counts as the
    maximum), 0 elsewhere (DML_ACTIVATION_HARDMAX1; default the last axis, ONNX Hardmax's)."""
    dev, (t,) = _operands((x,), ("x",), device)
    return _unary(ActivationHardmax1Desc, t, out, dev, axes=_axes(axes, t.desc.dimension_count))


# ---- specs (kompute_dml/ops/spec.py) --------------------------------------------------------
_F2 = TensorDesc(DataType.FLOAT32, (2, 3, 4, 5))
_F4 = TensorDesc(DataType.FLOAT32, (1, 1, 3, 4))  # the first versions: effective rank 2, 4-D at 1_0
SPECS = (
    OperatorSpec(ActivationLogSoftmax1Desc, ACTIVATION_LOG_SOFTMAX1, compile_log_softmax1,
                 (contract.LSM_FAST, contract.LSM_GEN), helpers=("log_softmax",),
                 onnx=(OnnxOp("LogSoftmax", "", "log_softmax", check=float_input),),
                 example=lambda: ActivationLogSoftmax1Desc(_F2, _F2, (1, 3))),
    OperatorSpec(ActivationHardmax1Desc, ACTIVATION_HARDMAX1, compile_hardmax1, (contract.HMX_FAST, contract.HMX_GEN),
                 helpers=("hardmax",), onnx=(OnnxOp("Hardmax", "", "hardmax", check=float_input),),
                 example=lambda: ActivationHardmax1Desc(_F2, _F2, (3,))),
    OperatorSpec(ActivationLogSoftmaxDesc, ACTIVATION_LOG_SOFTMAX, compile_log_softmax,
                 (contract.LSM_FAST, contract.LSM_GEN), example=lambda: ActivationLogSoftmaxDesc(_F4, _F4)),
    OperatorSpec(ActivationHardmaxDesc, ACTIVATION_HARDMAX, compile_hardmax, (contract.HMX_FAST, contract.HMX_GEN),
                 example=lambda: ActivationHardmaxDesc(_F4, _F4)),
)
