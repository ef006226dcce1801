"""DirectML's ADAM_OPTIMIZER (DML_ADAM_OPTIMIZER_OPERATOR_DESC, feature level 3_0): one Adam step of
the parameters and their first and second moment estimates, in the page's formula:

    M' = Beta1 M + (1 - Beta1) G
    V' = Beta2 V + (1 - Beta2) G G
    Alpha = sqrt(1 - Beta2^T) / (1 - Beta1^T)
    X' = X - LearningRate Alpha M' / (sqrt(V') + Epsilon)

shaders/adam_optimizer.comp (contract.grad_sample.ADAM): an invocation per element, float32, each
operation rounded once in that order (no contraction), so M' and V' are the bits of the float32
formula (on devices that keep subnormals); Beta^T of an integer step by squaring in float32 pairs,
the two divisions correctly rounded, the square roots the device's (Vulkan: within a few ulps), so X'
lies within about 2^-20 |X - X'| of the exact formula of the float32 inputs (docs/adam_optimizer.md).
FLOAT16: decoded exactly, float32 throughout, each output rounded once.

Where the page is silent or contradicts itself (kompute_dml's reading):
- TrainingStepTensor: its field says UINT32, while the table lists FLOAT32 / FLOAT16 and the
  constraints give it the parameters' DataType. Both are taken: the parameters' type or UINT32.
  It must be a scalar (4 dimensions, all sizes 1, as the table's { 1, 1, 1, 1 }).
- The page says the step "typically starts at 0", but at T = 0 its Alpha is 0 / 0: the formula is
  computed as written, so T = 0 gives NaN parameters (torch.optim.Adam's first step is T = 1, which
  this matches: its update is this one with Epsilon scaled by sqrt(1 - Beta2^T)).
- A fractional, negative or non-finite step (float types) takes the device's pow (approximate).
- The hyperparameters must be finite floats (the page: betas "should be" in [0, 1]; not enforced).
- In place: each output may alias an input exactly (same offset and layout; the page's remarks);
  any other overlap is refused when bound.
Validation, in order: the table (InvalidArgumentError / UnsupportedError naming the field), the
constraints (one DataType, one Sizes for all but the step; the step a scalar of the parameters' type
or UINT32), the hyperparameters, non-overlapping outputs, 32-bit element addressing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..core.dtypes import DataType
from ..core.errors import invalid
from ..core.layout import check_no_overlap
from ..core.registry import FL, FLOATS, OperatorSupport, row
from ..core.tensor_desc import TensorDesc
from ..runtime import DispatchPlan, grid_for
from . import contract
from .base import CompiledOperator, validate_tensors
from .elementwise_plan import check_addressable
from .spec import OperatorSpec

if TYPE_CHECKING:
    from ..device.device import Device

_D4 = (4, 4)
_STEP_TYPES = FLOATS | {DataType.UINT32}
ADAM_OPTIMIZER = OperatorSupport("ADAM_OPTIMIZER", 136, (
    row(FL.FL_3_0, ("input_parameters_tensor", "input", _D4, FLOATS), ("input_first_moment_tensor", "input", _D4, FLOATS),
        ("input_second_moment_tensor", "input", _D4, FLOATS), ("gradient_tensor", "input", _D4, FLOATS),
        ("training_step_tensor", "input", _D4, _STEP_TYPES), ("output_parameters_tensor", "output", _D4, FLOATS),
        ("output_first_moment_tensor", "output", _D4, FLOATS), ("output_second_moment_tensor", "output", _D4, FLOATS)),))


@dataclass(frozen=True)
class AdamOptimizerDesc:
    """DML_ADAM_OPTIMIZER_OPERATOR_DESC { InputParametersTensor, InputFirstMomentTensor,
    InputSecondMomentTensor, GradientTensor, TrainingStepTensor, OutputParametersTensor,
    OutputFirstMomentTensor, OutputSecondMomentTensor, LearningRate, Beta1, Beta2, Epsilon }."""

    input_parameters_tensor: TensorDesc
    input_first_moment_tensor: TensorDesc
    input_second_moment_tensor: TensorDesc
    gradient_tensor: TensorDesc
    training_step_tensor: TensorDesc
    output_parameters_tensor: TensorDesc
    output_first_moment_tensor: TensorDesc
    output_second_moment_tensor: TensorDesc
    learning_rate: float
    beta1: float
    beta2: float
    epsilon: float


_SAME = ("input_first_moment_tensor", "input_second_moment_tensor", "gradient_tensor", "output_parameters_tensor",
         "output_first_moment_tensor", "output_second_moment_tensor")
_OUTS = ("output_parameters_tensor", "output_first_moment_tensor", "output_second_moment_tensor")
_STEP_KIND = {DataType.FLOAT32: 0, DataType.FLOAT16: 1, DataType.UINT32: 2}


class CompiledAdam(CompiledOperator):
    """Outputs may alias inputs exactly (the page's in-place update), and then the step still runs."""

    allows_inplace = True

    def is_inplace_noop(self, bound: list[Any]) -> bool:
        return False


def _f32_bits(desc: Any, name: str) -> int:
    v = getattr(desc, name)
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)) or not math.isfinite(v):
        raise invalid(name, f"must be a finite float, got {v!r}")
    return int(np.array([v], np.float32).view(np.uint32)[0])


def compile_adam_optimizer(device: Device, desc: AdamOptimizerDesc) -> CompiledOperator:
    s = ADAM_OPTIMIZER
    validate_tensors(s, device.feature_level, desc, s.fields, s.outputs)
    x = desc.input_parameters_tensor
    for f in _SAME:
        t: TensorDesc = getattr(desc, f)
        if t.data_type != x.data_type:
            raise invalid(f"{f}.data_type", f"must equal input_parameters_tensor's ({x.data_type.name}), got {t.data_type.name}")
        if t.sizes != x.sizes:
            raise invalid(f"{f}.sizes", f"must equal input_parameters_tensor's {x.sizes}, got {t.sizes}")
    step = desc.training_step_tensor
    if step.data_type not in (x.data_type, DataType.UINT32):
        raise invalid("training_step_tensor.data_type", f"must be input_parameters_tensor's ({x.data_type.name}) or UINT32, "
                                                        f"got {step.data_type.name}")
    if any(n != 1 for n in step.sizes):
        raise invalid("training_step_tensor.sizes", f"must be a scalar (every size 1), got {step.sizes}")
    prm = [_f32_bits(desc, f) for f in ("learning_rate", "beta1", "beta2", "epsilon")]
    for f in _OUTS:
        t = getattr(desc, f)
        check_no_overlap(t.sizes, t.effective_strides, f)
    tensors = [getattr(desc, f) for f in s.fields]
    check_addressable(s.fields, tensors)
    strides = [w for f in ("input_parameters_tensor", "input_first_moment_tensor", "input_second_moment_tensor",
                           "gradient_tensor", *_OUTS) for w in getattr(desc, f).effective_strides]
    total = x.element_count
    words = np.array([total, *x.sizes, *strides, *prm, _STEP_KIND[step.data_type]], np.uint32)
    fam = contract.grad_sample.ADAM
    unit = x.data_type.size
    names = ("x_off", "m_off", "v_off", "g_off", "t_off", "xo_off", "mo_off", "vo_off")
    slots = {n: (i, step.data_type.size if n == "t_off" else unit) for i, n in enumerate(names)}
    plan = DispatchPlan(variant=fam.name(t="f16" if x.data_type == DataType.FLOAT16 else "f32"),
                        bindings=(0, 1, 2, 3, 4, 5, 6, 7, 8), push=fam.pack(**{n: 0 for n in names}), writes=(5, 6, 7),
                        groups=grid_for(total, 256, device.limits["max_compute_work_group_count"][0]),
                        offset_slots=fam.slots(**slots))
    return CompiledAdam(device, desc, s, s.inputs, s.outputs, [plan], constants=[device.tensor(words)])


_P = TensorDesc(DataType.FLOAT32, (1, 2, 3, 4))
_T = TensorDesc(DataType.FLOAT32, (1, 1, 1, 1))
SPECS = (
    OperatorSpec(AdamOptimizerDesc, ADAM_OPTIMIZER, compile_adam_optimizer, (contract.grad_sample.ADAM,),
                 example=lambda: AdamOptimizerDesc(_P, _P, _P, _P, _T, _P, _P, _P, 0.001, 0.9, 0.999, 1e-8)),
)
