"""DirectML's BATCH_NORMALIZATION (DML_BATCH_NORMALIZATION_OPERATOR_DESC), inference:
Output = FusedActivation(Scale * ((Input - Mean) / sqrt(Variance + Epsilon)) + Bias), Mean,
Variance, Scale and Bias each of Input's dimension count with every size 1 (broadcast) or
Input's. ONNX BatchNormalization (inference: training_mode = 0, one output) runs on it
(onnx_backend/handlers_pool.py).

shaders/batch_normalization.comp: an output element per invocation, each step of the formula a
float32 operation rounded once in the order written (no contraction; sqrt and division as the
device rounds them), then ReLU (ACTIVATION_RELU's: negatives and -0 to +0, NaN kept); FLOAT16
decoded exactly and the result rounded once (two elements per invocation and a whole-word store
where the output's rows pack whole words, else STORE_FIELD). Bound (tests/test_batch_normalization.py enforces it
against float64): |error| <= 8 u (|Scale * n| + |Bias|), u = 2^-24, n the normalized value;
FLOAT16 outputs one more rounding (2^-11 relative).

Tensor support as the page gives it: FLOAT32 / FLOAT16, 4 or 5 dimensions from 1_0, 1 to 8
from 3_1. Spatial = FALSE before 4_0 requires Mean and Variance not broadcast on the last two
(height and width) dimensions; from 4_0 it has no effect. FusedActivation: None or an
ActivationReluDesc (others: UnsupportedError naming `fused_activation`).
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..core.dtypes import DataType
from ..core.errors import UnsupportedError, invalid
from ..core.layout import check_no_overlap
from ..core.registry import FL, FLOATS, OperatorSupport, row
from ..core.tensor_desc import TensorDesc
from ..device.memory import Tensor
from ..functional import _packed, check_out, compile_cached, pooled_empty
from ..functional.elementwise import _operands
from ..runtime import DispatchPlan, grid_for
from . import contract
from .activation_relu import ActivationReluDesc
from .base import CompiledOperator, validate_tensors
from .elementwise_plan import check_addressable
from .onnx_types import float_input
from .spec import OnnxOp, OperatorSpec

if TYPE_CHECKING:
    from ..device.device import Device

_T = ("input_tensor", "mean_tensor", "variance_tensor", "scale_tensor", "bias_tensor", "output_tensor")
BATCH_NORMALIZATION = OperatorSupport("BATCH_NORMALIZATION", 72, tuple(
    row(level, *((f, "output" if f == "output_tensor" else "input", dims, FLOATS) for f in _T))
    for level, dims in ((FL.FL_1_0, (4, 5)), (FL.FL_3_1, (1, 8)))))


@dataclass(frozen=True)
class BatchNormalizationDesc:
    """DML_BATCH_NORMALIZATION_OPERATOR_DESC { InputTensor, MeanTensor, VarianceTensor,
    ScaleTensor, BiasTensor, OutputTensor, Spatial, Epsilon, FusedActivation }."""

    input_tensor: TensorDesc
    mean_tensor: TensorDesc
    variance_tensor: TensorDesc
    scale_tensor: TensorDesc
    bias_tensor: TensorDesc
    output_tensor: TensorDesc
    spatial: bool = True
    epsilon: float = 0.0
    fused_activation: Any = None


def _validate(device: Device, desc: BatchNormalizationDesc) -> bool:
    support = BATCH_NORMALIZATION
    validate_tensors(support, device.feature_level, desc, support.fields, support.outputs)
    x, y = desc.input_tensor, desc.output_tensor
    r = x.dimension_count
    for f in _T[1:]:
        t = getattr(desc, f)
        if t.dimension_count != r:
            raise invalid(f"{f}.sizes", f"dimension count must equal input_tensor's ({r}), got {t.dimension_count}")
        if t.data_type != x.data_type:
            raise invalid(f"{f}.data_type", f"must equal input_tensor's ({x.data_type.name}), got {t.data_type.name}")
        if f != "output_tensor" and any(s not in (1, xs) for s, xs in zip(t.sizes, x.sizes)):
            raise invalid(f"{f}.sizes", f"each size must be 1 or input_tensor's {x.sizes}, got {t.sizes}")
    if y.sizes != x.sizes:
        raise invalid("output_tensor.sizes", f"must equal input_tensor's {x.sizes}, got {y.sizes}")
    if not isinstance(desc.spatial, (bool, np.bool_, int)):
        raise invalid("spatial", f"must be a bool, got {desc.spatial!r}")
    if not desc.spatial and device.feature_level < FL.FL_4_0 and r >= 2:
        for f in ("mean_tensor", "variance_tensor"):
            if getattr(desc, f).sizes[-2:] != x.sizes[-2:]:
                raise invalid(f"{f}.sizes", "Spatial = FALSE requires the height and width not broadcast")
    try:
        eps = float(desc.epsilon)
    except (TypeError, ValueError):
        raise invalid("epsilon", f"must be a float, got {desc.epsilon!r}") from None
    if not math.isfinite(eps):
        raise invalid("epsilon", f"must be finite, got {eps}")
    act = desc.fused_activation
    if act is not None:
        if not isinstance(act, ActivationReluDesc):
            raise UnsupportedError(f"fused_activation: BATCH_NORMALIZATION fuses ACTIVATION_RELU only in kompute_dml, "
                                   f"got {type(act).__name__}")
        if act.input_tensor is not None or act.output_tensor is not None:
            raise invalid("fused_activation", "a fused activation's tensors must be None")
    check_no_overlap(y.sizes, y.effective_strides, "output_tensor")
    check_addressable(_T, tuple(getattr(desc, f) for f in _T))
    return act is not None


def writes_words(y: TensorDesc) -> bool:
    """FLOAT16 outputs whose words each hold two adjacent elements of a row (the last dimension of
    even size and stride 1, every other stride even; offsets are multiples of 16 bytes): written a
    word at a time, two elements per invocation."""
    s = y.effective_strides
    return (y.data_type == DataType.FLOAT16 and y.sizes[-1] % 2 == 0 and s[-1] == 1
            and all(st % 2 == 0 for n, st in zip(y.sizes[:-1], s[:-1]) if n > 1))


def _params(desc: BatchNormalizationDesc, relu: bool) -> np.ndarray:
    x = desc.input_tensor
    r = x.dimension_count
    flags = int(relu) | (2 if writes_words(desc.output_tensor) else 0)
    words = [math.prod(x.sizes), r, struct.unpack("<I", struct.pack("<f", float(desc.epsilon)))[0], flags]
    words += list(x.sizes) + [1] * (8 - r)
    for f in _T:
        t = getattr(desc, f)
        words += [0 if s == 1 else st for s, st in zip(t.sizes, t.effective_strides)] + [0] * (8 - r)
    return np.array(words, dtype=np.uint32)


def compile_batch_normalization(device: Device, desc: BatchNormalizationDesc) -> CompiledOperator:
    relu = _validate(device, desc)
    unit = desc.input_tensor.data_type.size
    fam = contract.BN
    n = math.prod(desc.input_tensor.sizes)
    groups = grid_for(n // 2 if writes_words(desc.output_tensor) else n, 64, device.limits["max_compute_work_group_count"][0])
    plan = DispatchPlan(
        variant=fam.name(t="f16" if desc.input_tensor.data_type == DataType.FLOAT16 else "f32"),
        bindings=(0, 1, 2, 3, 4, 5, 6), push=fam.pack(x_off=0, m_off=0, v_off=0, s_off=0, b_off=0, y_off=0),
        groups=groups, writes=(5,),
        offset_slots=fam.slots(**{k: (i, unit) for i, k in enumerate(("x_off", "m_off", "v_off", "s_off", "b_off",
                                                                        "y_off"))}))
    S = BATCH_NORMALIZATION
    return CompiledOperator(device, desc, S, S.inputs, S.outputs, [plan], constants=[device.tensor(_params(desc, relu))])


def _per_channel(t: Tensor, name: str, sizes: tuple[int, ...]) -> Tensor:
    """A per-channel operand (C values along one axis, or already of x's dimension count)
    viewed as (1, C, 1, ...)."""
    d = t.desc
    if d.dimension_count == len(sizes) and all(s in (1, xs) for s, xs in zip(d.sizes, sizes)):
        return t
    c = sizes[1] if len(sizes) > 1 else sizes[0]
    long = [i for i, v in enumerate(d.sizes) if v != 1]
    if d.element_count != c or len(long) > 1:
        raise invalid(name, f"must hold one value per channel ({c}) along one axis, got {d.sizes}")
    step = d.effective_strides[long[0]] if long else 0
    if len(sizes) == 1:
        return Tensor.trusted(t.buffer, TensorDesc(d.data_type, (c,), (step,)), t.offset)
    return Tensor.trusted(t.buffer, TensorDesc(d.data_type, (1, c) + (1,) * (len(sizes) - 2),
                                               (0, step) + (0,) * (len(sizes) - 2)), t.offset)


def batch_norm(x: Any, mean: Any, var: Any, scale: Any, bias: Any, *, epsilon: float = 1e-5, relu: bool = False,
               out: Tensor | None = None, device: Device | None = None) -> Tensor:
    """Inference batch normalization on DML BATCH_NORMALIZATION.

    Parameters
    ----------
    x : Tensor or array_like
        (N, C, ...) of FLOAT32 or FLOAT16 (1 to 8 dimensions; a 1-D x is its channels), any strides.
    mean, var, scale, bias : Tensor or array_like
        Per-channel values (C of them along one axis), or tensors of x's dimension count whose
        every size is 1 or x's; x's type.
    epsilon : float
        Added to the variance before the square root.
    relu : bool
        Apply ReLU to the result (the fused activation).
    out : Tensor, optional
        The output, x's sizes and type; else a new packed Tensor from the buffer pool.

    Returns
    -------
    Tensor
        ``scale * (x - mean) / sqrt(var + epsilon) + bias`` (then ReLU), float32 arithmetic.
    """
    if device is None and isinstance(out, Tensor):
        device = out.device
    dev, ts = _operands((x, mean, var, scale, bias), ("x", "mean", "var", "scale", "bias"), device)
    tx = ts[0]
    sizes = tx.desc.sizes
    params = [_per_channel(t, n, sizes) for t, n in zip(ts[1:], ("mean", "var", "scale", "bias"))]
    dt = tx.desc.data_type
    if out is not None:
        check_out(out, dev, sizes, dt)
    else:
        out = pooled_empty(dev, _packed(dt, sizes))
    desc = BatchNormalizationDesc(tx.desc, params[0].desc, params[1].desc, params[2].desc, params[3].desc, out.desc,
                                  True, float(epsilon),
                                  ActivationReluDesc(None, None) if relu else None)  # type: ignore[arg-type]
    compile_cached(dev, desc).execute([tx, *params], [out])
    return out


def _bn_rule(t: Any) -> str:
    """Float inputs; the running mean / variance outputs only in training mode (the backend
    computes the batch's statistics before BATCH_NORMALIZATION: onnx_backend/handlers_pool.py)."""
    if int(t.attr("training_mode", 0) or 0) == 0 and getattr(t, "outputs", 1) > 1:
        return "the running mean / variance outputs outside training mode stay on the CPU"
    return float_input(t)


_F32 = DataType.FLOAT32
_C = TensorDesc(_F32, (1, 3, 1, 1))
SPECS = (OperatorSpec(
    BatchNormalizationDesc, BATCH_NORMALIZATION, compile_batch_normalization, (contract.BN,), helpers=("batch_norm",),
    onnx=(OnnxOp("BatchNormalization", "", "batch_norm", check=_bn_rule),),
    example=lambda: BatchNormalizationDesc(TensorDesc(_F32, (2, 3, 4, 5)), _C, _C, _C, _C,
                                           TensorDesc(_F32, (2, 3, 4, 5)), True, 1e-5)),)
