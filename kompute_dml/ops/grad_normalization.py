"""DirectML's normalization gradients: BATCH_NORMALIZATION_GRAD (DML_BATCH_NORMALIZATION_GRAD_OPERATOR_DESC,
3_1), BATCH_NORMALIZATION_TRAINING_GRAD (DML_BATCH_NORMALIZATION_TRAINING_GRAD_OPERATOR_DESC, 4_1) and
LOCAL_RESPONSE_NORMALIZATION_GRAD (DML_LOCAL_RESPONSE_NORMALIZATION_GRAD_OPERATOR_DESC, 3_1).

Batch normalization (shaders/bn_training.comp, the plans of ops/batch_normalization_training.py): a
`stats` dispatch, an invocation per channel (an element of the Mean / Variance / Scale shape), its n
reduced elements (the dimensions where those tensors have size 1) in row-major order, sequential
float32 sums: OutputBiasGradient = sum(dY); OutputScaleGradient = sum(dY (X - Mean)) / sd, sd =
sqrt(Variance + Epsilon) (the page's sum(dY (X - Mean) / sd) with the one division taken out of the
sum); then an `apply` dispatch, an invocation per element:
- GRAD: OutputGradient = dY * (Scale / sd), as the page writes it.
- TRAINING_GRAD, the page's formula: Coef0 = 1 / sd, OutputGradient = (Scale * Coef0) * ((dY -
  mean(dY)) - ((X - Mean) * mean(dY (X - Mean))) / (Variance + Epsilon)), the two means (float32
  sums / n, from the stats dispatch, in the operator's scratch) over the channel's reduced elements.
  The page writes "mean(Input)" and "InputCentered = InputCentered - mean(InputCentered)" (a typo
  for Input - mean(Input)); kompute_dml reads mean(Input) as MeanTensor (the forward pass's
  OutputMean, which is what the page says MeanTensor typically holds), so the result is torch's
  batch_norm training backward when Mean / Variance are the batch's (population variance).
Each step a float32 operation rounded once in the order written, divisions and square roots
correctly rounded in integer code: deterministic, the same bits on every device that keeps float32
subnormals (tests/test_grad_normalization.py checks the bits against numpy float32 and float64 /
torch within the bound stated there). FLOAT16 decoded exactly, each output rounded once.

LRN_GRAD (shaders/lrn_grad.comp): the gradient of LOCAL_RESPONSE_NORMALIZATION as kompute_dml
computes it (ops/local_response_normalization.py: CrossChannel sums channels [c - floor((L-1)/2),
c + ceil((L-1)/2)], else the L x L window of height and width, clipped), with D = Bias +
(Alpha / L) S: dX_j = dY_j / D_j^Beta - c2 X_j sum_{i: j in R(i)} dY_i X_i / (D_i^Beta D_i), c2 =
float32(2 float32(Alpha / L) Beta). Two dispatches: `terms` (P_i = D_i^Beta = exp(Beta log D_i) and T_i
= ((dY_i X_i) / P_i) / D_i into the scratch, two float32 words per element) then `sum` (T summed over
the regions holding j in index order). The page's LocalSize text swaps the two cases ("If
CrossChannel is TRUE, then this is the width and height of the local region"); kompute_dml follows
the forward operator's page and code (LocalSize channels across, L x L spatially). Bound (enforced
by the tests against float64): |error| <= 2^-24 (E |dY_j / P_j| + (E + K + 8) |c2 X_j| sum |T_i|),
E = |Beta| (K + 4) + 3 |Beta log D| + 12, K the region's size; FLOAT16 one more rounding.

Tables as the pages give them: BATCH_NORMALIZATION_GRAD and _TRAINING_GRAD 1 to 8 dimensions,
LRN_GRAD 4, FLOAT32 / FLOAT16. Validation, in order: the table (InvalidArgumentError /
UnsupportedError naming the field), the pages' DataType / DimensionCount / Sizes constraints
(InvalidArgumentError naming the field: Mean, Variance, Scale and the two per-channel outputs of
MeanTensor's Sizes, each 1 or InputTensor's; InputGradient and OutputGradient of InputTensor's), the
scalar fields (finite float32; LocalSize >= 1), non-overlapping outputs, 32-bit addressing.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..core.dtypes import DataType
from ..core.errors import invalid
from ..core.ints import as_int
from ..core.layout import check_no_overlap
from ..core.registry import FL, FLOATS, OperatorSupport, row
from ..core.tensor_desc import TensorDesc
from ..device.memory import Tensor
from ..runtime import DispatchPlan, grid_for
from . import contract
from .base import CompiledOperator, check_like, validate_tensors
from .batch_normalization_training import SLOTS, bn_plans, check_shapes, epsilon_of, float32_field, geometry
from .elementwise_plan import check_addressable
from .spec import OperatorSpec

if TYPE_CHECKING:
    from ..device.device import Device

_BN = (("input_tensor", "input", "in"), ("input_gradient_tensor", "input", "in"), ("mean_tensor", "input", "ch"),
       ("variance_tensor", "input", "ch"), ("scale_tensor", "input", "ch"), ("output_gradient_tensor", "output", "in"),
       ("output_scale_gradient_tensor", "output", "ch"), ("output_bias_gradient_tensor", "output", "ch"))


def _bn_table(name: str, op_type: int, level: FL) -> OperatorSupport:
    return OperatorSupport(name, op_type, (row(level, *((f, kind, (1, 8), FLOATS) for f, kind, _ in _BN)),))


BATCH_NORMALIZATION_GRAD = _bn_table("BATCH_NORMALIZATION_GRAD", 146, FL.FL_3_1)
BATCH_NORMALIZATION_TRAINING_GRAD = _bn_table("BATCH_NORMALIZATION_TRAINING_GRAD", 152, FL.FL_4_1)
LOCAL_RESPONSE_NORMALIZATION_GRAD = OperatorSupport("LOCAL_RESPONSE_NORMALIZATION_GRAD", 144, (
    row(FL.FL_3_1, ("input_tensor", "input", (4, 4), FLOATS), ("input_gradient_tensor", "input", (4, 4), FLOATS),
        ("output_gradient_tensor", "output", (4, 4), FLOATS)),))


@dataclass(frozen=True)
class BatchNormalizationGradDesc:
    """DML_BATCH_NORMALIZATION_GRAD_OPERATOR_DESC { InputTensor, InputGradientTensor, MeanTensor,
    VarianceTensor, ScaleTensor, OutputGradientTensor, OutputScaleGradientTensor,
    OutputBiasGradientTensor, Epsilon }."""

    input_tensor: TensorDesc
    input_gradient_tensor: TensorDesc
    mean_tensor: TensorDesc
    variance_tensor: TensorDesc
    scale_tensor: TensorDesc
    output_gradient_tensor: TensorDesc
    output_scale_gradient_tensor: TensorDesc
    output_bias_gradient_tensor: TensorDesc
    epsilon: float = 0.0


@dataclass(frozen=True)
class BatchNormalizationTrainingGradDesc:
    """DML_BATCH_NORMALIZATION_TRAINING_GRAD_OPERATOR_DESC: BATCH_NORMALIZATION_GRAD's fields, the
    gradient of BATCH_NORMALIZATION_TRAINING (Mean and Variance the batch's)."""

    input_tensor: TensorDesc
    input_gradient_tensor: TensorDesc
    mean_tensor: TensorDesc
    variance_tensor: TensorDesc
    scale_tensor: TensorDesc
    output_gradient_tensor: TensorDesc
    output_scale_gradient_tensor: TensorDesc
    output_bias_gradient_tensor: TensorDesc
    epsilon: float = 0.0


@dataclass(frozen=True)
class LocalResponseNormalizationGradDesc:
    """DML_LOCAL_RESPONSE_NORMALIZATION_GRAD_OPERATOR_DESC { InputTensor, InputGradientTensor,
    OutputGradientTensor, CrossChannel, LocalSize, Alpha, Beta, Bias }."""

    input_tensor: TensorDesc
    input_gradient_tensor: TensorDesc
    output_gradient_tensor: TensorDesc
    cross_channel: bool
    local_size: int
    alpha: float = 0.0001
    beta: float = 0.75
    bias: float = 1.0


def _compile_bn(device: Device, desc: BatchNormalizationGradDesc | BatchNormalizationTrainingGradDesc,
                support: OperatorSupport, op: str) -> CompiledOperator:
    validate_tensors(support, device.feature_level, desc, support.fields, support.outputs)
    check_shapes(device, desc, _BN, "mean_tensor")
    eps = epsilon_of(desc)
    x, ch = desc.input_tensor, desc.mean_tensor
    names = ("x", "g", "m", "v", "s", "y", "o1", "o2")
    slots = {s: getattr(desc, f) for s, (f, _, _) in zip(names, _BN)}
    where = {s: names.index(s) if s in names else None for s in SLOTS}
    geo_index = len(support.fields)
    consts = [device.tensor(geometry(x, ch, slots, eps))]
    scratch_index = None
    if op == "tgrad":  # mean(dY) and mean(dY (X - Mean)) per channel
        scratch_index = geo_index + 1
        consts.append(Tensor.scratch(device, TensorDesc(DataType.FLOAT32, (2 * ch.element_count,))))
    plans = bn_plans(device, op, x, ch, where, geo_index, scratch_index)
    return CompiledOperator(device, desc, support, support.inputs, support.outputs, plans, constants=consts)


def compile_batch_normalization_grad(device: Device, desc: BatchNormalizationGradDesc) -> CompiledOperator:
    return _compile_bn(device, desc, BATCH_NORMALIZATION_GRAD, "grad")


def compile_batch_normalization_training_grad(device: Device, desc: BatchNormalizationTrainingGradDesc
                                              ) -> CompiledOperator:
    return _compile_bn(device, desc, BATCH_NORMALIZATION_TRAINING_GRAD, "tgrad")


def compile_local_response_normalization_grad(device: Device, desc: LocalResponseNormalizationGradDesc
                                              ) -> CompiledOperator:
    support = LOCAL_RESPONSE_NORMALIZATION_GRAD
    validate_tensors(support, device.feature_level, desc, support.fields, support.outputs)
    x, g, y = desc.input_tensor, desc.input_gradient_tensor, desc.output_gradient_tensor
    for f, t in (("input_gradient_tensor", g), ("output_gradient_tensor", y)):
        check_like(x, t, f)
        if t.sizes != x.sizes:
            raise invalid(f"{f}.sizes", f"must equal input_tensor's {x.sizes}, got {t.sizes}")
    if not isinstance(desc.cross_channel, (bool, np.bool_)):
        raise invalid("cross_channel", f"must be a BOOL, got {desc.cross_channel!r}")
    size = as_int(desc.local_size, "local_size")
    if size < 1:
        raise invalid("local_size", f"must be >= 1, got {size}")
    alpha, beta, bias = (float32_field(desc, f) for f in ("alpha", "beta", "bias"))
    check_no_overlap(y.sizes, y.effective_strides, "output_gradient_tensor")
    check_addressable(support.fields, (x, g, y))
    fam = contract.grad_norm.LRN_GRAD
    unit = x.data_type.size
    total = x.element_count
    f32 = np.float32
    alpha_n = f32(alpha) / f32(size)  # float32 division, as the forward operator
    c2 = f32(f32(2) * alpha_n) * f32(beta)  # 2 alpha_n exact, one rounding of the product
    push = fam.pack(x_off=0, g_off=0, o_off=0, total=total, cross=int(bool(desc.cross_channel)), lo=(size - 1) // 2,
                    hi=size // 2, size=list(x.sizes), xs=list(x.effective_strides), gs=list(g.effective_strides),
                    os=list(y.effective_strides), alpha=struct.unpack("<f", struct.pack("<f", alpha_n))[0], beta=beta,
                    bias=bias, c2=float(c2))
    t = "f16" if x.data_type == DataType.FLOAT16 else "f32"
    groups = grid_for(total, 256, device.limits["max_compute_work_group_count"][0])
    scratch = len(support.fields)
    plans = [DispatchPlan(variant=fam.name(stage="terms", t=t), bindings=(0, 1, None, scratch), push=push, groups=groups,
                          writes=(scratch,), offset_slots=fam.slots(x_off=(0, unit), g_off=(1, unit))),
             DispatchPlan(variant=fam.name(stage="sum", t=t), bindings=(0, 1, 2, scratch), push=push, groups=groups,
                          writes=(2,), offset_slots=fam.slots(x_off=(0, unit), g_off=(1, unit), o_off=(2, unit)))]
    consts = [Tensor.scratch(device, TensorDesc(DataType.FLOAT32, (2 * total,)))]
    return CompiledOperator(device, desc, support, support.inputs, support.outputs, plans, constants=consts)


_F = DataType.FLOAT32
_X, _C = TensorDesc(_F, (2, 3, 4, 5)), TensorDesc(_F, (1, 3, 1, 1))
_L = TensorDesc(_F, (1, 5, 3, 4))
SPECS = (
    OperatorSpec(BatchNormalizationGradDesc, BATCH_NORMALIZATION_GRAD, compile_batch_normalization_grad,
                 (contract.grad_norm.BN_TRAIN,),
                 example=lambda: BatchNormalizationGradDesc(_X, _X, _C, _C, _C, _X, _C, _C, 1e-5)),
    OperatorSpec(BatchNormalizationTrainingGradDesc, BATCH_NORMALIZATION_TRAINING_GRAD,
                 compile_batch_normalization_training_grad, (contract.grad_norm.BN_TRAIN,),
                 example=lambda: BatchNormalizationTrainingGradDesc(_X, _X, _C, _C, _C, _X, _C, _C, 1e-5)),
    OperatorSpec(LocalResponseNormalizationGradDesc, LOCAL_RESPONSE_NORMALIZATION_GRAD,
                 compile_local_response_normalization_grad, (contract.grad_norm.LRN_GRAD,),
                 example=lambda: LocalResponseNormalizationGradDesc(_L, _L, _L, True, 3)),
)
