"""DirectML's MEAN_VARIANCE_NORMALIZATION1 operator (DML_MEAN_VARIANCE_NORMALIZATION1_OPERATOR_DESC):
Output = Scale * ((Input - Mean) / sqrt(Variance + Epsilon)) + Bias, Mean and Variance taken over
the reduced axes (ONNX LayerNormalization, MeanVarianceNormalization, InstanceNormalization).

A row is the set of elements that share every coordinate outside `axes`. The reduced dimensions
and the outer ones are merged separately (layout.merge_dims, over the strides of the input, the
scale and bias as broadcast to the input's sizes, and the output): where the reduced elements
form one strided dimension and the rows at most three, the "row" variants take the whole
geometry as push constants; anything else takes the "gen" variants, which read the merged
sizes and strides of both (up to 8 each) from a 82-word constant the operator uploads when it
compiles (`geometry_words`). shaders/mvn.comp has the arithmetic; docs/mean_variance_normalization.md
the semantics and the error bound.
Validation, in order: DML_BUFFER_TENSOR_DESC rules and the feature level's table
(InvalidArgumentError / UnsupportedError naming the field), FusedActivation (None only:
UnsupportedError naming fused_activation), then the page's constraints (InvalidArgumentError
whose message starts with the field), then a non-overlapping output and 32-bit addressing.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import registry as reg
from ..constants import device_constant
from ..dtypes import DataType, FeatureLevel
from ..errors import UnsupportedError, invalid
from ..ints import as_int_tuple, cdiv
from ..layout import check_no_overlap, merge_dims
from ..runtime import DispatchPlan, grid_for
from ..tensor_desc import TensorDesc
from . import contract
from .base import CompiledOperator, validate_tensors
from .elementwise_plan import check_addressable
from .spec import OperatorSpec

if TYPE_CHECKING:
    from ..device import Device

WG = 256  # shaders/mvn.comp's work-group size
ROW_OUTER = 3  # outer dimensions the "row" variants take
GEO_DIMS = 8
_FIELDS = ("input_tensor", "scale_tensor", "bias_tensor", "output_tensor")
_CONST = 4  # the geometry constant's index in the binding list (after the four tensors)


@dataclass(frozen=True)
class MeanVarianceNormalization1Desc:
    """DML_MEAN_VARIANCE_NORMALIZATION1_OPERATOR_DESC { InputTensor, ScaleTensor, BiasTensor,
    OutputTensor, AxisCount, Axes, NormalizeVariance, Epsilon, FusedActivation }:
    Output = Scale * ((Input - Mean) / sqrt(Variance + Epsilon)) + Bias over `axes`
    (AxisCount = len(axes)); without `normalize_variance`, Output = Scale * (Input - Mean) + Bias.
    The page's constraints: the four tensors share DataType and DimensionCount; the output has the
    input's sizes; each scale / bias size is 1 (broadcast) or the input's (below feature level 4_0
    the ChannelCount, dimension 1, must be the input's); below 5_2 scale and bias are present
    together. kompute_dml's rules where the page is silent: axes are distinct and in
    [0, DimensionCount), at least one; FusedActivation must be None (UnsupportedError otherwise);
    Mean and Variance (the population variance) are float32 (docs/mean_variance_normalization.md)."""

    input_tensor: TensorDesc
    scale_tensor: TensorDesc | None
    bias_tensor: TensorDesc | None
    output_tensor: TensorDesc
    axes: tuple[int, ...]
    normalize_variance: bool
    epsilon: float
    fused_activation: Any = None

    def __post_init__(self) -> None:
        # a list of axes is kept as a tuple (the descriptor is hashable); values are checked at compile
        if isinstance(self.axes, (list, range)) or (isinstance(self.axes, np.ndarray) and self.axes.ndim == 1):
            object.__setattr__(self, "axes", tuple(self.axes))

    @property
    def axis_count(self) -> int:
        return len(self.axes)


# The row layout (row_layout): the fewest invocations per row (a power of two, at most the group's
# 256) that leave each at most CACHE units (FLOAT32: 8 elements, FLOAT16: 4 pairs), the registers
# shaders/mvn.comp keeps between its passes: fewer invocations, fewer barrier levels. H100,
# benchmarks/bench_mvn.py, median us with 8 units per invocation / with more invocations per row
# until the dispatch has 2^17 / with the most (up to 256) per row: 16 x 384 FLOAT32 3.3 / 6.7 /
# 6.6; 1024 x 384 4.6 / 8.4 / 11.3; 16384 x 384 27.2 / 30.3 / 97.8; 32768 x 1024 99.0 / 105.0 /
# 190.9; FLOAT16 32768 x 1024 189.6 / 195.5 / 409.6.
CACHE = {DataType.FLOAT32: 8, DataType.FLOAT16: 4}


def row_layout(rlen: int, data_type: DataType) -> tuple[int, int]:
    """(tpr_log2, EPU): a row's invocations are 2^tpr_log2, each taking at most CACHE units of EPU
    consecutive elements (FLOAT16: 2, FLOAT32: 1) where 256 invocations allow it."""
    epu = 2 if data_type == DataType.FLOAT16 else 1
    units = cdiv(rlen, epu)
    return min(WG.bit_length() - 1, (cdiv(units, CACHE[data_type]) - 1).bit_length()), epu


def summation_depth(rlen: int, data_type: DataType) -> int:
    """The float32 additions on any path of the shader's row sums: an invocation's own elements
    in order, then the pairwise tree (docs/mean_variance_normalization.md's N)."""
    tl, epu = row_layout(rlen, data_type)
    return cdiv(cdiv(rlen, epu), 1 << tl) * epu + tl


def _epsilon(value: Any) -> float:
    """Epsilon as the float32 the shader adds (InvalidArgumentError where it is none)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise invalid("epsilon", f"must be a FLOAT, got {type(value).__name__} {value!r}")
    try:
        return float(struct.unpack("<f", struct.pack("<f", float(value)))[0])
    except (OverflowError, ValueError):
        raise invalid("epsilon", f"{value!r} is outside the float32 range") from None


def _flag(value: Any) -> bool:
    if isinstance(value, (bool, np.bool_)) or (isinstance(value, (int, np.integer)) and int(value) in (0, 1)):
        return bool(value)
    raise invalid("normalize_variance", f"must be a BOOL (True / False, 1 / 0), got {type(value).__name__} {value!r}")


def _validate(device: Device, desc: MeanVarianceNormalization1Desc) -> tuple[tuple[int, ...], bool, float]:
    support = reg.MEAN_VARIANCE_NORMALIZATION1
    level = device.feature_level
    validate_tensors(support, level, desc, support.fields, support.outputs)
    if desc.fused_activation is not None:
        raise UnsupportedError(f"fused_activation: {support.name} with a fused activation is not supported by "
                               f"kompute_dml (FusedActivation must be None), got {type(desc.fused_activation).__name__}")
    x, s, b, y = (getattr(desc, f) for f in _FIELDS)
    n = x.dimension_count
    for f, t in (("scale_tensor", s), ("bias_tensor", b), ("output_tensor", y)):
        if t is None:
            continue
        if t.data_type != x.data_type:
            raise invalid(f"{f}.data_type", f"must equal input_tensor's ({x.data_type.name}), got {t.data_type.name}")
        if t.dimension_count != n:
            raise invalid(f"{f}.sizes", f"dimension count must equal input_tensor's ({n}), got {t.dimension_count}")
    if y.sizes != x.sizes:
        raise invalid("output_tensor.sizes", f"must equal input_tensor's {x.sizes}, got {y.sizes}")
    for f, t in (("scale_tensor", s), ("bias_tensor", b)):
        if t is None:
            continue
        bad = [d for d in range(n) if t.sizes[d] not in (1, x.sizes[d])]
        if bad:
            raise invalid(f"{f}.sizes", f"each size must be 1 or input_tensor's {x.sizes}, got {t.sizes} "
                                        f"(dimension {bad[0]})")
        if level < FeatureLevel.FL_4_0 and n >= 2 and t.sizes[1] != x.sizes[1]:
            raise invalid(f"{f}.sizes", f"below feature level 4_0 dimension 1 (ChannelCount) must equal "
                                        f"input_tensor's ({x.sizes[1]}), got {t.sizes}")
    if level < FeatureLevel.FL_5_2 and (s is None) != (b is None):
        missing = "scale_tensor" if s is None else "bias_tensor"
        other = "bias_tensor" if s is None else "scale_tensor"
        raise invalid(missing, f"is required when {other} is present below feature level 5_2 (got None)")
    axes = as_int_tuple(desc.axes, "axes")
    if not axes:
        raise invalid("axes", "AxisCount must be at least 1, got no axes")
    for i, a in enumerate(axes):
        if not 0 <= a < n:
            raise invalid(f"axes[{i}]", f"must be in [0, {n}) (input_tensor's dimension count), got {a}")
    if len(set(axes)) != len(axes):
        raise invalid("axes", f"must be distinct, got {axes}")
    nv = _flag(desc.normalize_variance)
    eps = _epsilon(desc.epsilon)
    check_no_overlap(y.sizes, y.effective_strides, "output_tensor")
    present = [(f, t) for f, t in zip(_FIELDS, (x, s, b, y)) if t is not None]
    check_addressable([f for f, _ in present], [t for _, t in present])
    return axes, nv, eps


def _strides(t: TensorDesc | None, x: TensorDesc) -> list[int]:
    """t's strides over the input's sizes: 0 where t is absent or broadcasts (size 1)."""
    if t is None:
        return [0] * x.dimension_count
    return [st if sz != 1 else 0 for sz, st in zip(t.sizes, t.effective_strides)]


def _merged(dims: list[int], x: TensorDesc, per_tensor: list[list[int]]) -> tuple[list[int], list[list[int]]]:
    return merge_dims([x.sizes[d] for d in dims], *([st[d] for d in dims] for st in per_tensor))


def geometry_words(rows: tuple[list[int], list[list[int]]], outer: tuple[list[int], list[list[int]]]) -> list[int]:
    """The "gen" variants' constant: ranks, then sizes and per-tensor strides, 8 words each."""
    words = [len(rows[0]), len(outer[0])]
    for sizes, strides in (rows, outer):
        for part in (sizes, *strides):
            words += list(part) + [0] * (GEO_DIMS - len(part))
    return words


def compile_mean_variance_normalization1(device: Device, desc: MeanVarianceNormalization1Desc) -> CompiledOperator:
    support = reg.MEAN_VARIANCE_NORMALIZATION1
    axes, nv, eps = _validate(device, desc)
    x, s, b, y = (getattr(desc, f) for f in _FIELDS)
    strides = [list(x.effective_strides), _strides(s, x), _strides(b, x), list(y.effective_strides)]
    red = sorted(axes)
    rows = _merged(red, x, strides)
    outer = _merged([d for d in range(x.dimension_count) if d not in red], x, strides)
    rlen, nrows = math.prod(rows[0]), math.prod(outer[0])
    tl, _ = row_layout(rlen, x.data_type)
    general = len(rows[0]) > 1 or len(outer[0]) > ROW_OUTER
    flags = (1 if s is not None else 0) | (2 if b is not None else 0) | (4 if nv else 0)
    fam = contract.MVN
    pad = ROW_OUTER - len(outer[0])
    ksz = [1] * pad + outer[0] if not general else [1] * ROW_OUTER
    kst = [[0] * pad + st if not general else [0] * ROW_OUTER for st in outer[1]]
    rst = [st[0] if not general else 0 for st in rows[1]]
    push = fam.pack(x_off=0, s_off=0, b_off=0, y_off=0, eps=eps, flags=flags, rlen=rlen, tpr_log2=tl, nrows=nrows,
                    x_rs=rst[0], s_rs=rst[1], b_rs=rst[2], y_rs=rst[3], ksize=ksz[1:], x_ks=kst[0], s_ks=kst[1],
                    b_ks=kst[2], y_ks=kst[3])
    size = x.data_type.size
    present = [i for i, t in enumerate((x, s, b, y)) if t is not None]
    slots = fam.slots(**{m: (i, size) for i, m in zip(range(4), ("x_off", "s_off", "b_off", "y_off")) if i in present})
    groups = grid_for(cdiv(nrows, WG >> tl) * WG, WG, device.limits["max_compute_work_group_count"][0])
    bindings: tuple[int | None, ...] = tuple(i if i in present else None for i in range(4))
    constants = []
    if general:
        words = np.array(geometry_words(rows, outer), np.uint32)
        constants = [device_constant(device, words, ("mvn-geometry", words.tobytes()))]
        bindings += (_CONST,)
    variant = fam.name(t="f32" if x.data_type == DataType.FLOAT32 else "f16", layout="gen" if general else "row")
    plan = DispatchPlan(variant=variant, bindings=bindings, push=push, groups=groups, writes=(3,), offset_slots=slots)
    return CompiledOperator(device, desc, support, support.inputs, support.outputs, [plan], constants)


# ---- spec (kompute_dml/ops/spec.py) --------------------------------------------------------
SPECS = (OperatorSpec(MeanVarianceNormalization1Desc, reg.MEAN_VARIANCE_NORMALIZATION1,
                      compile_mean_variance_normalization1, (contract.MVN,),
                      helpers=("mean_variance_normalization", "layer_norm", "skip_layer_norm")),)
