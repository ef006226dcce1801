"""DirectML's MEAN_VARIANCE_NORMALIZATION (the first version, DML_OPERATOR_TYPE 73, from feature level
1_0) and MEAN_VARIANCE_NORMALIZATION2 (171, from 6_3) on MEAN_VARIANCE_NORMALIZATION1's plan
(ops/mean_variance_normalization.compile_normalization: one dispatch of shaders/mvn.comp; the
arithmetic, NaN / infinity semantics and the error bound in docs/mean_variance_normalization.md):

- MEAN_VARIANCE_NORMALIZATION { ..., CrossChannel, NormalizeVariance, Epsilon, FusedActivation }: a
  4-D { N, C, H, W } input normalized over Axes { 1, 2, 3 } with CrossChannel, else { 2, 3 } (each
  channel on its own). Its page lets any scale / bias dimension be 1 (broadcast) at every level:
  MEAN_VARIANCE_NORMALIZATION1's rule that the ChannelCount match below 4_0 is not this page's.
- MEAN_VARIANCE_NORMALIZATION2 { ..., AxisCount, Axes, UseMean, UseVariance, Epsilon, FusedActivation }:
  Output = Scale * ((Input - Mean) / sqrt(Variance + Epsilon)) + Bias with Mean 0 where UseMean is
  FALSE (RMS normalization: Variance is then mean(Input^2), onnxruntime's SimplifiedLayerNormalization
  and DirectML's own use of the operator for it) and no division where UseVariance is FALSE
  (MEAN_VARIANCE_NORMALIZATION1's NormalizeVariance). Both FALSE: Output = Scale * Input + Bias.

The pages' rules, checked by the 1 version's validation against these tables (InvalidArgumentError
whose message starts with the field): one DataType and DimensionCount, the output of the input's
sizes, scale / bias sizes 1 or the input's, below 5_2 scale and bias present together, axes distinct
and in [0, DimensionCount) (at least one); FusedActivation None only (UnsupportedError naming
fused_activation); CrossChannel / UseMean / UseVariance BOOLs (True / False, 1 / 0).

Tables: MEAN_VARIANCE_NORMALIZATION's page has one, 4 dimensions FLOAT32 / FLOAT16 (no level rows).
MEAN_VARIANCE_NORMALIZATION2's page as stored here ("TBD") gives its syntax and members but no
tensor-support table: kompute_dml takes the 1 version's latest row, 1 to 8 dimensions FLOAT32 /
FLOAT16, from 6_3 (DirectML.h places the operator in DML_TARGET_VERSION 0x6300).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..core.dtypes import DataType
from ..core.registry import FL, FLOATS, OperatorSupport, row
from ..core.tensor_desc import TensorDesc
from ..device.device import Device
from . import contract
from .base import CompiledOperator
from .mean_variance_normalization import MeanVarianceNormalization1Desc, _flag, compile_normalization, plans_ahead
from .spec import OperatorSpec


def _table(name: str, op_type: int, level: FL, dims: tuple[int, int]) -> OperatorSupport:
    return OperatorSupport(name, op_type, (row(
        level, ("input_tensor", "input", dims, FLOATS), ("scale_tensor", "optional input", dims, FLOATS),
        ("bias_tensor", "optional input", dims, FLOATS), ("output_tensor", "output", dims, FLOATS)),))


MEAN_VARIANCE_NORMALIZATION = _table("MEAN_VARIANCE_NORMALIZATION", 73, FL.FL_1_0, (4, 4))
MEAN_VARIANCE_NORMALIZATION2 = _table("MEAN_VARIANCE_NORMALIZATION2", 171, FL.FL_6_3, (1, 8))


@dataclass(frozen=True)
class MeanVarianceNormalizationDesc:
    """DML_MEAN_VARIANCE_NORMALIZATION_OPERATOR_DESC { InputTensor, ScaleTensor, BiasTensor,
    OutputTensor, CrossChannel, NormalizeVariance, Epsilon, FusedActivation }: the 4-D input
    normalized over { C, H, W } (`cross_channel`) or { H, W }."""

    input_tensor: TensorDesc
    scale_tensor: TensorDesc | None
    bias_tensor: TensorDesc | None
    output_tensor: TensorDesc
    cross_channel: bool
    normalize_variance: bool
    epsilon: float
    fused_activation: Any = None


@dataclass(frozen=True)
class MeanVarianceNormalization2Desc:
    """DML_MEAN_VARIANCE_NORMALIZATION2_OPERATOR_DESC { InputTensor, ScaleTensor, BiasTensor,
    OutputTensor, AxisCount, Axes, UseMean, UseVariance, Epsilon, FusedActivation }: normalized over
    `axes` (AxisCount = len(axes)); Mean 0 without `use_mean`, no division without `use_variance`."""

    input_tensor: TensorDesc
    scale_tensor: TensorDesc | None
    bias_tensor: TensorDesc | None
    output_tensor: TensorDesc
    axes: tuple[int, ...]
    use_mean: bool
    use_variance: bool
    epsilon: float
    fused_activation: Any = None

    def __post_init__(self) -> None:
        if isinstance(self.axes, (list, range)):  # kept hashable; values are checked at compile
            object.__setattr__(self, "axes", tuple(self.axes))


def compile_mean_variance_normalization(device: Device, desc: MeanVarianceNormalizationDesc) -> CompiledOperator:
    axes = (1, 2, 3) if _flag(desc.cross_channel, "cross_channel") else (2, 3)
    newer = MeanVarianceNormalization1Desc(desc.input_tensor, desc.scale_tensor, desc.bias_tensor, desc.output_tensor,
                                           axes, desc.normalize_variance, desc.epsilon, desc.fused_activation)
    return compile_normalization(device, newer, MEAN_VARIANCE_NORMALIZATION, as_desc=desc, channel_rule=False)


def compile_mean_variance_normalization2(device: Device, desc: MeanVarianceNormalization2Desc) -> CompiledOperator:
    use_mean, use_variance = _flag(desc.use_mean, "use_mean"), _flag(desc.use_variance, "use_variance")
    newer = MeanVarianceNormalization1Desc(desc.input_tensor, desc.scale_tensor, desc.bias_tensor, desc.output_tensor,
                                           desc.axes, use_variance, desc.epsilon, desc.fused_activation,
                                           use_mean=use_mean)
    return compile_normalization(device, newer, MEAN_VARIANCE_NORMALIZATION2, as_desc=desc)


_X = TensorDesc(DataType.FLOAT32, (2, 3, 4, 5))
_S = TensorDesc(DataType.FLOAT32, (1, 3, 1, 1))
SPECS = (
    OperatorSpec(MeanVarianceNormalizationDesc, MEAN_VARIANCE_NORMALIZATION, compile_mean_variance_normalization,
                 (contract.MVN,), ahead=plans_ahead,
                 example=lambda: MeanVarianceNormalizationDesc(_X, _S, _S, _X, False, True, 1e-5)),
    OperatorSpec(MeanVarianceNormalization2Desc, MEAN_VARIANCE_NORMALIZATION2, compile_mean_variance_normalization2,
                 (contract.MVN,), ahead=plans_ahead,
                 example=lambda: MeanVarianceNormalization2Desc(_X, _S, _S, _X, (2, 3), True, True, 1e-5)),
)
