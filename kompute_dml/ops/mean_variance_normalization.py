"""DirectML's MEAN_VARIANCE_NORMALIZATION1 operator (DML_MEAN_VARIANCE_NORMALIZATION1_OPERATOR_DESC):
Output = Scale * ((Input - Mean) / sqrt(Variance + Epsilon)) + Bias, Mean and Variance taken over
the reduced axes (ONNX LayerNormalization, MeanVarianceNormalization, InstanceNormalization,
GroupNormalization: onnx_backend/handlers_nn.py; GroupNormalization over the input seen as
(N, G, C / G, ...), its per-channel or per-group scale and bias as stride-0 views).

A row is the set of elements that share every coordinate outside `axes`. The reduced dimensions
and the outer ones are merged separately (layout.merge_dims, over the strides of the input, the
scale and bias as broadcast to the input's sizes, and the output): where the reduced elements
form one strided dimension and the rows at most three, the "row" variants take the whole
geometry as push constants; anything else takes the "gen" variants, which read the merged
sizes and strides of both (up to 8 each) from a 82-word constant the operator uploads when it
compiles (`geometry_words`). shaders/mvn.comp has the arithmetic; docs/mean_variance_normalization.md
the semantics and the error bound.

kompute_dml's skip extension (no DirectML field; the "mvn_skip" variants): with `skip_tensor` the
row normalized is Input + Skip (+ SkipBias), each addition rounded to the data type as
ELEMENT_WISE_ADD rounds it, and `sum_output_tensor` (optional) receives that sum: ONNX
SkipLayerNormalization and Add -> LayerNormalization in one dispatch, bit for bit the
two-dispatch result. Its tensors are bound after DirectML's (inputs: input, scale, bias, skip,
skip bias; outputs: output, sum output); a descriptor without them binds as DirectML's does.
With a skip, `keys_output_tensor` (UINT32, sizes (key_parts(desc), 2), packed; the "_q" variants)
receives per work group the order keys of the least and greatest non-NaN output it wrote and +0:
DYNAMIC_QUANTIZE_LINEAR's partial keys of the output (its input_keys_tensor), so that a dynamic
quantization of the normalized rows (an int8 transformer's next product) needs no pass of its own.
Validation, in order: DML_BUFFER_TENSOR_DESC rules and the feature level's table
(InvalidArgumentError / UnsupportedError naming the field; the extension's tensors against the
input's and output's rows), FusedActivation (None only: UnsupportedError naming
fused_activation), then the page's constraints and the extension's (InvalidArgumentError whose
message starts with the field), then non-overlapping outputs and 32-bit addressing.
"""

from __future__ import annotations

import dataclasses
import math
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..core.dtypes import DataType, FeatureLevel
from ..core.errors import UnsupportedError, invalid
from ..core.ints import as_int_tuple, cdiv
from ..core.layout import check_no_overlap, merge_dims
from ..core.registry import FL, FLOATS, OperatorSupport, row
from ..core.tensor_desc import TensorDesc, validate_desc
from ..functional.constants import device_constant
from ..runtime import DispatchPlan, grid_for
from . import contract
from .base import CompiledOperator, validate_tensors
from .elementwise_plan import check_addressable
from .onnx_types import float_input
from .spec import OnnxOp, OperatorSpec

if TYPE_CHECKING:
    from ..device.device import Device

# ---- MEAN_VARIANCE_NORMALIZATION1 from
# DML_MEAN_VARIANCE_NORMALIZATION1_OPERATOR_DESC's page: introduced at 2_1 (4 dimensions), 1 to 8
# from 3_1, FLOAT32 / FLOAT16 throughout. Scale and bias are optional at every level; below 5_2
# they are present together (a rule of the page's members, checked when the operator compiles).
MEAN_VARIANCE_NORMALIZATION1 = OperatorSupport("MEAN_VARIANCE_NORMALIZATION1", 115, tuple(
    row(level, ("input_tensor", "input", dims, FLOATS), ("scale_tensor", "optional input", dims, FLOATS),
         ("bias_tensor", "optional input", dims, FLOATS), ("output_tensor", "output", dims, FLOATS))
    for level, dims in ((FL.FL_2_1, (4, 4)), (FL.FL_3_1, (1, 8)))))


WG = 256  # shaders/mvn.comp's work-group size
ROW_OUTER = 3  # outer dimensions the "row" variants take
GEO_DIMS = 8
_FIELDS = ("input_tensor", "scale_tensor", "bias_tensor", "output_tensor")
# the skip extension's fields (binding order: the inputs after DirectML's inputs, the output after
# DirectML's output); each is checked against the table row of the DirectML field in SKIP_ROW
SKIP_INPUTS = ("skip_tensor", "skip_bias_tensor")
SKIP_OUTPUTS = ("sum_output_tensor",)
SKIP_ROW = {"skip_tensor": "input_tensor", "skip_bias_tensor": "input_tensor", "sum_output_tensor": "output_tensor"}


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
    Mean and Variance (the population variance) are float32 (docs/mean_variance_normalization.md).

    kompute_dml's skip extension (not DirectML's): `skip_tensor` is added to the input before
    normalizing, then `skip_bias_tensor` where present, each sum rounded to the data type (input
    + skip first: onnxruntime's SkipLayerNormalization order); `sum_output_tensor` receives that
    sum. Each has the input's data type and dimension count; skip and skip bias sizes are 1
    (broadcast) or the input's, the sum output has the input's sizes; skip_bias_tensor and
    sum_output_tensor need skip_tensor. `use_mean` False (kompute_dml's, as DirectML's
    MEAN_VARIANCE_NORMALIZATION2 UseMean): Mean is 0, Output = Scale * Input / sqrt(mean(Input^2) +
    Epsilon) + Bias (RMS normalization). `keys_output_tensor` (with skip_tensor; UINT32, sizes
    (key_parts(self), 2), packed): per work group, the order keys of its outputs' range with +0,
    DynamicQuantizeLinearDesc's input_keys_tensor for the output."""

    input_tensor: TensorDesc
    scale_tensor: TensorDesc | None
    bias_tensor: TensorDesc | None
    output_tensor: TensorDesc
    axes: tuple[int, ...]
    normalize_variance: bool
    epsilon: float
    fused_activation: Any = None
    skip_tensor: TensorDesc | None = None
    skip_bias_tensor: TensorDesc | None = None
    sum_output_tensor: TensorDesc | None = None
    use_mean: bool = True
    keys_output_tensor: TensorDesc | None = None

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


def key_parts(desc: MeanVarianceNormalization1Desc) -> int:
    """The work groups of the normalization, each one pair of keys in keys_output_tensor: the rows
    (the input's elements over those of one row) over the rows a work group takes."""
    x = desc.input_tensor
    rlen = math.prod(x.sizes[a] for a in as_int_tuple(desc.axes, "axes"))
    tl, _ = row_layout(rlen, x.data_type)
    return cdiv(x.element_count // max(rlen, 1), WG >> tl)


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


def _flag(value: Any, name: str = "normalize_variance") -> bool:
    if isinstance(value, (bool, np.bool_)) or (isinstance(value, (int, np.integer)) and int(value) in (0, 1)):
        return bool(value)
    raise invalid(name, f"must be a BOOL (True / False, 1 / 0), got {type(value).__name__} {value!r}")


def _validate_skip(support: OperatorSupport, level: FeatureLevel, desc: MeanVarianceNormalization1Desc) -> None:
    """The skip extension's tensors: the others only with skip_tensor; each a valid buffer tensor
    that the table row of its DirectML counterpart (SKIP_ROW) takes."""
    if desc.skip_tensor is None:
        for f in SKIP_INPUTS[1:] + SKIP_OUTPUTS + ("keys_output_tensor",):
            if getattr(desc, f) is not None:
                raise invalid("skip_tensor", f"is required when {f} is present (kompute_dml's skip extension)")
        return
    for f in SKIP_INPUTS + SKIP_OUTPUTS:
        t = getattr(desc, f)
        if t is not None:
            validate_desc(t, f, output=f in SKIP_OUTPUTS)
            support.check_tensor(level, SKIP_ROW[f], t, name=f)
    q = desc.keys_output_tensor
    if q is not None:
        validate_desc(q, "keys_output_tensor", output=True)
        if q.data_type != DataType.UINT32:
            raise invalid("keys_output_tensor.data_type", f"must be UINT32, got {q.data_type.name}")
        if q.sizes != (key_parts(desc), 2) or q.effective_strides != (2, 1):
            raise invalid("keys_output_tensor.sizes", f"must be packed ({key_parts(desc)}, 2): a pair of keys per "
                                                      f"work group, got sizes {q.sizes} strides {q.effective_strides}")


def _validate(device: Device, desc: MeanVarianceNormalization1Desc, support: OperatorSupport,
              channel_rule: bool) -> tuple[tuple[int, ...], bool, float]:
    level = device.feature_level
    validate_tensors(support, level, desc, support.fields, support.outputs)
    _validate_skip(support, level, desc)
    if desc.fused_activation is not None:
        raise UnsupportedError(f"fused_activation: {support.name} with a fused activation is not supported by "
                               f"kompute_dml (FusedActivation must be None), got {type(desc.fused_activation).__name__}")
    x, s, b, y = (getattr(desc, f) for f in _FIELDS)
    k, r, z = (getattr(desc, f) for f in SKIP_INPUTS + SKIP_OUTPUTS)
    n = x.dimension_count
    for f, t in (("scale_tensor", s), ("bias_tensor", b), ("output_tensor", y), ("skip_tensor", k),
                 ("skip_bias_tensor", r), ("sum_output_tensor", z)):
        if t is None:
            continue
        if t.data_type != x.data_type:
            raise invalid(f"{f}.data_type", f"must equal input_tensor's ({x.data_type.name}), got {t.data_type.name}")
        if t.dimension_count != n:
            raise invalid(f"{f}.sizes", f"dimension count must equal input_tensor's ({n}), got {t.dimension_count}")
    for f, t in (("output_tensor", y), ("sum_output_tensor", z)):
        if t is not None and t.sizes != x.sizes:
            raise invalid(f"{f}.sizes", f"must equal input_tensor's {x.sizes}, got {t.sizes}")
    for f, t in (("scale_tensor", s), ("bias_tensor", b), ("skip_tensor", k), ("skip_bias_tensor", r)):
        if t is None:
            continue
        bad = [d for d in range(n) if t.sizes[d] not in (1, x.sizes[d])]
        if bad:
            raise invalid(f"{f}.sizes", f"each size must be 1 or input_tensor's {x.sizes}, got {t.sizes} "
                                        f"(dimension {bad[0]})")
        if f in _FIELDS and channel_rule and level < FeatureLevel.FL_4_0 and n >= 2 and t.sizes[1] != x.sizes[1]:
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
    _flag(desc.use_mean, "use_mean")
    eps = _epsilon(desc.epsilon)
    for f, t in (("output_tensor", y), ("sum_output_tensor", z)):
        if t is not None:
            check_no_overlap(t.sizes, t.effective_strides, f)
    present = [(f, t) for f, t in zip(_FIELDS + SKIP_INPUTS + SKIP_OUTPUTS, (x, s, b, y, k, r, z)) if t is not None]
    check_addressable([f for f, _ in present], [t for _, t in present])
    return axes, nv, eps


def _strides(t: TensorDesc | None, x: TensorDesc) -> list[int]:
    """t's strides over the input's sizes: 0 where t is absent or broadcasts (size 1)."""
    if t is None:
        return [0] * x.dimension_count
    return [st if sz != 1 else 0 for sz, st in zip(t.sizes, t.effective_strides)]


def _merged(dims: list[int], x: TensorDesc, per_tensor: list[list[int]]) -> tuple[list[int], list[list[int]]]:
    return merge_dims([x.sizes[d] for d in dims], *([st[d] for d in dims] for st in per_tensor))


def _wrapped(outer: tuple[list[int], list[list[int]]]) -> tuple[tuple[list[int], list[list[int]]], int, int]:
    """Two outer dimensions (n0, n1) as one of n0 n1 rows where each tensor either merges them
    (stride n1 s along the first) or repeats its n1 rows over the first (stride 0 there: an input
    broadcast over the batch, such as a skip of position embeddings): (outer, flag bits 64 << t of
    the repeating tensors t, n1); else `outer` as it is, no bits, and its row count."""
    sizes, strides = outer
    if len(sizes) == 2:
        n1 = sizes[1]
        wrap = [st[0] == 0 and st[1] != 0 for st in strides]
        # (the outputs y, z: tensors 3 and 6, never repeat: a repeating output would write a row twice)
        if all(w or st[0] == n1 * st[1] for w, st in zip(wrap, strides)) and not any(wrap[3::3]):
            return ([sizes[0] * n1], [[st[1]] for st in strides]), sum(64 << t for t, w in enumerate(wrap) if w), n1
    return outer, 0, math.prod(sizes)


def geometry_words(rows: tuple[list[int], list[list[int]]], outer: tuple[list[int], list[list[int]]]) -> list[int]:
    """The "gen" variants' constant: ranks, then sizes and per-tensor strides, 8 words each."""
    words = [len(rows[0]), len(outer[0])]
    for sizes, strides in (rows, outer):
        for part in (sizes, *strides):
            words += list(part) + [0] * (GEO_DIMS - len(part))
    return words


def compile_mean_variance_normalization1(device: Device, desc: MeanVarianceNormalization1Desc) -> CompiledOperator:
    return compile_normalization(device, desc, MEAN_VARIANCE_NORMALIZATION1)


def compile_normalization(device: Device, desc: MeanVarianceNormalization1Desc, support: OperatorSupport,
                          as_desc: Any = None, channel_rule: bool = True) -> CompiledOperator:
    """`desc` against `support`, the table of the version compiled (ops/mean_variance_normalization_versions.py
    compiles the first version and MEAN_VARIANCE_NORMALIZATION2 as the 1 version's descriptor, `as_desc`
    being theirs; `channel_rule`: the 1 version's ChannelCount rule below 4_0, which the first
    version's page does not have)."""
    axes, nv, eps = _validate(device, desc, support, channel_rule)
    skip, keys = desc.skip_tensor is not None, desc.keys_output_tensor is not None
    # the binding list: DirectML's fields, the extension's after its inputs and after its output
    inputs = support.inputs + (SKIP_INPUTS if skip else ())
    outputs = support.outputs + (SKIP_OUTPUTS if skip else ()) + (("keys_output_tensor",) if keys else ())
    entry = {f: i for i, f in enumerate(inputs + outputs)}
    # the shader's tensors in its order (x, s, b, y, then the extension's k, r, z): its bindings
    # 0..6 and the push members' letters
    names = _FIELDS + (SKIP_INPUTS + SKIP_OUTPUTS if skip else ())
    letters = "xsbykrz"[:len(names)]
    tensors = [getattr(desc, f) for f in names]
    present = [t is not None for t in tensors]
    x = desc.input_tensor
    writes_to = ("output_tensor", *SKIP_OUTPUTS)
    # the outputs and the input as they are; the other inputs broadcast (stride 0 for size 1), an
    # absent tensor all 0
    strides = [list(t.effective_strides) if t is not None and (f == "input_tensor" or f in writes_to)
               else _strides(t, x) for f, t in zip(names, tensors)]
    red = sorted(axes)
    rows = _merged(red, x, strides)
    outer = _merged([d for d in range(x.dimension_count) if d not in red], x, strides)
    rlen, nrows = math.prod(rows[0]), math.prod(outer[0])
    tl, _ = row_layout(rlen, x.data_type)
    row_outer = 1 if skip else ROW_OUTER  # MVN_SKIP_PUSH holds one outer dimension, MVN_PUSH three
    outer, wrap, kper = _wrapped(outer) if skip and len(rows[0]) == 1 else (outer, 0, nrows)
    general = len(rows[0]) > 1 or len(outer[0]) > row_outer
    flags = ((1 if present[1] else 0) | (2 if present[2] else 0) | (4 if nv else 0) | (0 if desc.use_mean else 32)
             | (wrap if not general else 0))
    rst = [st[0] if not general else 0 for st in rows[1]]
    kst = [[0] * (row_outer - len(st)) + st if not general else [0] * row_outer for st in outer[1]]
    geometry: dict[str, Any] = {f"{c}_rs": v for c, v in zip(letters, rst)}
    if skip:
        fam = contract.MVN_SKIP
        flags |= (8 if present[5] else 0) | (16 if present[6] else 0)
        geometry.update({f"{c}_ks": st[0] for c, st in zip(letters, kst)}, kper=kper if not general else nrows, q_off=0)
    else:
        fam = contract.MVN
        ksz = [1] * (ROW_OUTER - len(outer[0])) + outer[0] if not general else [1] * ROW_OUTER
        geometry.update({f"{c}_ks": st for c, st in zip(letters, kst)}, ksize=ksz[1:])
    push = fam.pack(**{f"{c}_off": 0 for c in letters}, eps=eps, flags=flags, rlen=rlen, tpr_log2=tl, nrows=nrows,
                    **geometry)
    size = x.data_type.size
    slots = fam.slots(**{f"{c}_off": (entry[f], size) for c, f, p in zip(letters, names, present) if p})
    groups = grid_for(cdiv(nrows, WG >> tl) * WG, WG, device.limits["max_compute_work_group_count"][0])
    bindings: tuple[int | None, ...] = tuple(entry[f] if p else None for f, p in zip(names, present))
    constants = []
    if general:
        words = np.array(geometry_words(rows, outer), np.uint32)
        constants = [device_constant(device, words, ("mvn-geometry", words.tobytes()))]
        bindings += (len(entry),)  # the operator's constants follow its inputs and outputs
    t = "f32" if x.data_type == DataType.FLOAT32 else "f16"
    layout = "gen" if general else "row"
    variant = fam.name(t=t, layout=layout, q="_q" if keys else "") if skip else fam.name(t=t, layout=layout)
    writes = tuple(entry[f] for f, p in zip(names, present) if p and f in writes_to)
    if keys:  # (shaders/mvn.comp: the binding after the geometry constant's place)
        bindings += (entry["keys_output_tensor"],)
        writes += (entry["keys_output_tensor"],)
        slots += fam.slots(q_off=(entry["keys_output_tensor"], 4))
    plan = DispatchPlan(variant=variant, bindings=bindings, push=push, groups=groups, writes=writes, offset_slots=slots)
    return CompiledOperator(device, desc if as_desc is None else as_desc, support, inputs, outputs, [plan], constants)


def plans_ahead(device: Device, op: CompiledOperator, done: set[Any]) -> list[DispatchPlan]:
    """Each plan in the other layout (OperatorSpec.ahead): another shape of the same tensors may merge
    into rows ("row") or not ("gen", one more binding: the geometry constant)."""
    out = []
    for plan in op.plans:
        assert isinstance(plan, DispatchPlan)  # normalization has one dispatch and no transfers
        keys = plan.variant.endswith("_q")  # (its binding stays last, after the geometry constant's)
        base, tail = (plan.variant[:-2], plan.bindings[-1:]) if keys else (plan.variant, ())
        head = plan.bindings[:-1] if keys else plan.bindings
        row = base.endswith("_row")
        constant = len(op.input_fields) + len(op.output_fields)  # the geometry constant's place after them
        head = (*head, constant) if row else head[:-1]
        out.append(dataclasses.replace(plan, variant=base[:-3] + ("gen" if row else "row") + ("_q" if keys else ""),
                                       bindings=(*head, *tail)))
    return out


# ---- spec (kompute_dml/ops/spec.py) --------------------------------------------------------
SPECS = (OperatorSpec(MeanVarianceNormalization1Desc, MEAN_VARIANCE_NORMALIZATION1,
                      compile_mean_variance_normalization1, (contract.MVN, contract.MVN_SKIP),
                      helpers=("mean_variance_normalization", "layer_norm", "skip_layer_norm", "instance_norm",
                               "group_norm", "rms_norm"), ahead=plans_ahead,
                      onnx=(OnnxOp("LayerNormalization", "", "layer_norm", check=float_input),
                            OnnxOp("SkipLayerNormalization", "com.microsoft", "skip_layer_norm", check=float_input),
                            OnnxOp("InstanceNormalization", "", "instance_norm", check=float_input),
                            OnnxOp("GroupNormalization", "", "group_norm", check=float_input),
                            OnnxOp("MeanVarianceNormalization", "", "mean_variance_normalization",
                                   check=float_input),
                            # RMS normalization (use_mean False) and onnxruntime's BERT embedding
                            # (gathers, then one skip normalization): onnx_backend/handlers_transformer.py
                            OnnxOp("SimplifiedLayerNormalization", "", "rms_norm", check=float_input),
                            OnnxOp("RMSNormalization", "", "rms_norm", check=float_input),
                            OnnxOp("SkipSimplifiedLayerNormalization", "com.microsoft", "skip_layer_norm",
                                   check=float_input),
                            OnnxOp("EmbedLayerNormalization", "com.microsoft", "skip_layer_norm"))),)
