"""DirectML's BATCH_NORMALIZATION_TRAINING (DML_BATCH_NORMALIZATION_TRAINING_OPERATOR_DESC, 4_1):
Mean and Variance computed from Input over the dimensions where ScaleTensor / BiasTensor have size 1,
written to OutputMean / OutputVariance, and Output = FusedActivation(Scale * ((Input - Mean) /
sqrt(Variance + Epsilon)) + Bias + FusedAdd). Also the batch-normalization plans the gradients share
(ops/grad_normalization.py: BATCH_NORMALIZATION_GRAD, BATCH_NORMALIZATION_TRAINING_GRAD).

shaders/bn_training.comp, two dispatches: `stats`, an invocation per channel (an element of the
per-channel shape), its n reduced elements walked in row-major order of the reduced dimensions:
Mean = (sequential float32 sum of X) / n, Variance = (sequential float32 sum of (X - Mean)^2) / n,
both float32 (n rounded to float32; the two-pass form, no cancellation of E[X^2] - Mean^2); they go
to the outputs (rounded once to FLOAT16 there) and, as float32, to the operator's scratch (two words
per channel), which `apply` (an invocation per element) reads: each step of the formula a float32
operation rounded once in the order written ((Scale * norm + Bias) + FusedAdd), the division and the
square root correctly rounded in integer code (unary_math.glsl): deterministic, the same bits on every
device that keeps float32 subnormals (tests/test_batch_normalization_training.py checks them bit for
bit against a numpy float32 reference of these steps, and against float64 and torch's batch_norm in
training mode within 64 n u relative to the terms' magnitudes).

Where the page is silent, kompute_dml's choices: the variance is the population (biased) one, sum /
n, as the normalization itself uses it (torch's batch_norm in training mode; ONNX's
BatchNormalization training output `current_var`); with FLOAT16 tensors the normalization uses the
float32 Mean / Variance, not their FLOAT16 outputs. FusedActivation: as CONVOLUTION's
(ops/conv_fused.py: None, IDENTITY, RELU, LEAKY_RELU, CLIP, SIGMOID, HARD_SIGMOID, HARD_SWISH, TANH,
ELU, SWISH), applied to the value the output type holds (so the unfused chain's bits); others
UnsupportedError naming `fused_activation`.

Tensor support as the page gives it: 1 to 8 dimensions, FLOAT32 / FLOAT16, from 4_1. Validation, in
order: the table (InvalidArgumentError / UnsupportedError naming the field), every tensor of
InputTensor's DataType and DimensionCount; Bias, OutputMean, OutputVariance of ScaleTensor's Sizes,
each 1 or InputTensor's; FusedAdd and Output of InputTensor's Sizes (InvalidArgumentError naming the
field), Epsilon a finite float32, the fused activation, non-overlapping outputs, 32-bit addressing.
A channel's reduced elements run 16 per loop iteration, so lavapipe's loop limit (runtime/llvmpipe.py)
holds up to about 500,000 per channel (more: UnsupportedError on CPU devices).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..core.dtypes import DataType
from ..core.errors import UnsupportedError, invalid
from ..core.layout import check_no_overlap
from ..core.registry import FL, FLOATS, OperatorSupport, row
from ..core.tensor_desc import TensorDesc
from ..device.memory import Tensor
from ..runtime import DispatchPlan, grid_for
from ..runtime.llvmpipe import LOOP_LIMIT
from . import contract
from .base import CompiledOperator, check_like, validate_tensors
from .conv_fused import fused_words
from .elementwise_plan import check_addressable
from .spec import OperatorSpec

if TYPE_CHECKING:
    from ..device.device import Device

_T = (("input_tensor", "input", "in"), ("scale_tensor", "input", "ch"), ("bias_tensor", "input", "ch"),
      ("fused_add_tensor", "optional input", "in"), ("output_tensor", "output", "in"),
      ("output_mean_tensor", "output", "ch"), ("output_variance_tensor", "output", "ch"))
BATCH_NORMALIZATION_TRAINING = OperatorSupport("BATCH_NORMALIZATION_TRAINING", 151, (
    row(FL.FL_4_1, *((f, kind, (1, 8), FLOATS) for f, kind, _ in _T)),))

# shader slots of bn_training.comp (bindings 0..9), then the scratch (10) and the geometry (11)
SLOTS = ("x", "g", "m", "v", "s", "b", "a", "y", "o1", "o2")
_UNR = 16  # the stats loop's elements per iteration (bn_training.comp UNR)


@dataclass(frozen=True)
class BatchNormalizationTrainingDesc:
    """DML_BATCH_NORMALIZATION_TRAINING_OPERATOR_DESC { InputTensor, ScaleTensor, BiasTensor,
    FusedAddTensor, OutputTensor, OutputMeanTensor, OutputVarianceTensor, Epsilon, FusedActivation }."""

    input_tensor: TensorDesc
    scale_tensor: TensorDesc
    bias_tensor: TensorDesc
    fused_add_tensor: TensorDesc | None
    output_tensor: TensorDesc
    output_mean_tensor: TensorDesc
    output_variance_tensor: TensorDesc
    epsilon: float = 0.0
    fused_activation: Any = None


def float32_field(desc: Any, name: str) -> float:
    """A FLOAT field: a real number whose float32 rounding is finite (InvalidArgumentError naming it)."""
    v = getattr(desc, name)
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise invalid(name, f"must be a FLOAT, got {type(v).__name__} {v!r}")
    with np.errstate(over="ignore"):
        f = float(np.float32(v))
    if not math.isfinite(f):
        raise invalid(name, f"must be a finite float32 value, got {v!r}")
    return f


def epsilon_of(desc: Any) -> float:
    """Epsilon: a finite float32 (InvalidArgumentError naming `epsilon`)."""
    return float32_field(desc, "epsilon")


def check_shapes(device: Device, desc: Any, table: tuple[tuple[str, str, str], ...], channel_ref: str) -> None:
    """The pages' tensor constraints: every present tensor of InputTensor's DataType and DimensionCount;
    the per-channel ones ("ch") of `channel_ref`'s Sizes, each 1 or InputTensor's; the others ("in") of
    InputTensor's Sizes; outputs non-overlapping; 32-bit addressing."""
    x = desc.input_tensor
    ref = getattr(desc, channel_ref)
    present = [(f, kind, role, getattr(desc, f)) for f, kind, role in table if getattr(desc, f) is not None]
    for f, _, _, t in present[1:]:
        check_like(x, t, f)
    if any(s not in (1, xs) for s, xs in zip(ref.sizes, x.sizes)):
        raise invalid(f"{channel_ref}.sizes", f"each size must be 1 or input_tensor's {x.sizes}, got {ref.sizes}")
    for f, _, role, t in present[1:]:
        want = ref.sizes if role == "ch" else x.sizes
        if t.sizes != want:
            other = channel_ref if role == "ch" else "input_tensor"
            raise invalid(f"{f}.sizes", f"must equal {other}'s {want}, got {t.sizes}")
    for f, kind, _, t in present:
        if kind == "output":
            check_no_overlap(t.sizes, t.effective_strides, f)
    check_addressable([f for f, *_ in present], [t for *_, t in present])
    n = x.element_count // max(1, ref.element_count)
    if device.device_type == "cpu" and _cpu_iterations(n) >= LOOP_LIMIT:
        raise UnsupportedError(f"{channel_ref}.sizes: {n} reduced elements per channel exceed the CPU device's loop "
                               f"limit (at most {(LOOP_LIMIT // 2 - 1) * _UNR})")


def _cpu_iterations(n: int) -> int:
    return 2 * -(-n // _UNR) + 64  # two passes (TRAINING's mean then variance), the dimension loops


def _strides8(t: TensorDesc | None, pad: int) -> list[int]:
    if t is None:
        return [0] * 8
    return [0] * pad + [0 if s == 1 else st for s, st in zip(t.sizes, t.effective_strides)]


def geometry(x: TensorDesc, ch: TensorDesc, slots: dict[str, TensorDesc | None], eps: float,
             act: list[int] | None = None, fused_add: bool = False) -> np.ndarray:
    """bn_training.comp's constant (its P_* words): counts, epsilon, the fused activation's words,
    the input's, the per-channel and the reduced sizes (8 each, leading 1s), the channel index's
    strides and each slot's element strides (0 on size-1 dimensions)."""
    r = x.dimension_count
    pad = 8 - r
    size = [1] * pad + list(x.sizes)
    ksize = [1] * pad + list(ch.sizes)
    rsize = [s if k == 1 else 1 for s, k in zip(size, ksize)]
    kstr, acc = [0] * 8, 1
    for d in range(7, -1, -1):
        kstr[d] = acc if ksize[d] > 1 else 0
        acc *= ksize[d]
    nch = math.prod(ksize)
    n = x.element_count // nch
    f32 = np.float32
    words = [x.element_count, nch, n, int(np.array([eps], f32).view(np.uint32)[0]), *(act or [0, 0, 0]),
             int(fused_add), int(np.array([n], f32).view(np.uint32)[0])] + [0] * 7
    words += size + ksize + rsize + kstr
    for s in SLOTS:
        words += _strides8(slots.get(s), pad)
    return np.array(words, dtype=np.uint32)


def bn_plans(device: Device, op: str, x: TensorDesc, ch: TensorDesc, where: dict[str, int | None], geo: int,
             scratch: int | None) -> list[DispatchPlan]:
    """The two dispatches of bn_training.comp's `op` (train / grad / tgrad): `where` maps each slot to
    its binding-list entry (absent: None), `geo` / `scratch` the constants' entries. The stats pass
    binds the slots it reads or writes (x, g, m, v, o1, o2), the apply pass the rest."""
    fam = contract.grad_norm.BN_TRAIN
    t = "f16" if x.data_type == DataType.FLOAT16 else "f32"
    unit = x.data_type.size
    maxg = device.limits["max_compute_work_group_count"][0]
    push = fam.pack(**{f"{s}_off": 0 for s in SLOTS})
    plans = []
    for stage, used, writes, count in (("stats", ("x", "g", "m", "v", "o1", "o2"), ("o1", "o2"), ch.element_count),
                                       ("apply", ("x", "g", "m", "v", "s", "b", "a", "y"), ("y",), x.element_count)):
        slots = {s: where.get(s) if s in used else None for s in SLOTS}
        w = [slots[s] for s in writes]
        if stage == "stats" and op != "grad":
            w.append(scratch)  # type: ignore[arg-type]
        plans.append(DispatchPlan(
            variant=fam.name(op=op, stage=stage, t=t), bindings=(*slots.values(), scratch, geo), push=push,
            groups=grid_for(count, 64, maxg), writes=tuple(w),  # type: ignore[arg-type]
            offset_slots=fam.slots(**{f"{s}_off": (i, unit) for s, i in slots.items() if i is not None})))
    return plans


def compile_batch_normalization_training(device: Device, desc: BatchNormalizationTrainingDesc) -> CompiledOperator:
    support = BATCH_NORMALIZATION_TRAINING
    validate_tensors(support, device.feature_level, desc, support.fields, support.outputs)
    check_shapes(device, desc, _T, "scale_tensor")
    eps = epsilon_of(desc)
    act = fused_words(device, desc.fused_activation, support.name)
    x, ch = desc.input_tensor, desc.scale_tensor
    has_add = desc.fused_add_tensor is not None
    slots = {"x": x, "s": ch, "b": desc.bias_tensor, "a": desc.fused_add_tensor, "y": desc.output_tensor,
             "o1": desc.output_mean_tensor, "o2": desc.output_variance_tensor}
    names = dict(zip(("x", "s", "b", "a", "y", "o1", "o2"), range(7)))
    where: dict[str, int | None] = {s: (names[s] if s in names and slots[s] is not None else None) for s in SLOTS}
    geo_index, scratch_index = len(support.fields), len(support.fields) + 1
    plans = bn_plans(device, "train", x, ch, where, geo_index, scratch_index)
    consts = [device.tensor(geometry(x, ch, slots, eps, act, has_add)),
              Tensor.scratch(device, TensorDesc(DataType.FLOAT32, (2 * ch.element_count,)))]
    return CompiledOperator(device, desc, support, support.inputs, support.outputs, plans, constants=consts)


_F = DataType.FLOAT32
_X, _C = TensorDesc(_F, (2, 3, 4, 5)), TensorDesc(_F, (1, 3, 1, 1))
SPECS = (OperatorSpec(
    BatchNormalizationTrainingDesc, BATCH_NORMALIZATION_TRAINING, compile_batch_normalization_training,
    (contract.grad_norm.BN_TRAIN,),
    example=lambda: BatchNormalizationTrainingDesc(_X, _C, _C, _X, _X, _C, _C, 1e-5)),)
