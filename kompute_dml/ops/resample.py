"""DirectML's RESAMPLE, RESAMPLE1, RESAMPLE2 and RESAMPLE3 (DML_RESAMPLE*_OPERATOR_DESC): each output
element interpolated from the input at the coordinate the pages' relation gives, axis by axis:

    OutputX = (InputX + InputPixelOffset) * Scale + OutputPixelOffset
    so  c = InputX = (OutputX - OutputPixelOffset) / Scale - InputPixelOffset

LINEAR weighs the two neighbours of each axis (2^n elements), c clamped into the input (the pages'
"output edges are clamped"). NEAREST_NEIGHBOR takes one element per axis, its index clamped:
RESAMPLE2 / RESAMPLE3 round c by RoundingDirection (DECREASING floor(c), INCREASING ceil(c): the
page; onnxruntime's DirectML provider maps ONNX's nearest_mode "floor" to DECREASING with no offset
change and "ceil" to INCREASING). RESAMPLE and RESAMPLE1 take "the input element nearest to the
corresponding pixel center": floor(c + 1/2), halves rounded up (RESAMPLE2 DECREASING with the
InputPixelOffsets 0.5 less). The evidence, weighed (docs/resample.md "NEAREST_NEIGHBOR's rounding"):
- onnxruntime's DirectML provider while it built RESAMPLE1 (DmlOperatorResize.cpp, before RESAMPLE2):
  "DML's nearest neighbor mode uses round-halves-up (or round_prefer_ceil) via floor(input.x + 0.5)";
  it passed round_prefer_ceil's offsets unchanged and made "floor" by adding 0.5 to the
  InputPixelOffsets, which is floor(c) only if RESAMPLE1 computes floor(c + 0.5). Its RESAMPLE2 port
  gives round_prefer_ceil DECREASING with the InputPixelOffsets 0.5 less: the same index.
- the pages' words, nearest to the pixel centre: at RESAMPLE's offsets (0.5, -0.5) floor(c + 1/2) is
  floor((OutputX + 0.5) / Scale), the classic nearest (scale 3 over [0, 1, 2]: 0 0 0 1 1 1 2 2 2).
- RESAMPLE2's remarks ("equivalent ... RoundingDirection DECREASING, and OutputPixelOffsets adjusted
  an additional -0.5") agree at Scale 1 only: moving the output offset moves c by 0.5 / Scale
  (scale 3 would give 0 0 0 0 1 1 1 2 2, no nearest selection); read as the input offset they agree.
- RESAMPLE_GRAD's example (a RESAMPLE1 nearest, scales 0.5 height and 1.5 width: [[1, 2], [3, 4]] ->
  [[1, 1, 2]]) names no offsets; at RESAMPLE's (0.5, -0.5) both axes land on exact halves (c = 0.5),
  where halves rounded up give [[3, 4, 4]]; the example holds with InputPixelOffsets 0.5 and
  OutputPixelOffsets 0 (floor(OutputX / Scale)), as tests/test_resample_rounding.py runs it.
ONNX Resize and Upsample run on RESAMPLE2 (onnx_backend/handlers_vision.py; helpers kdml.resample,
kdml.resize in functional/resample.py), whose RoundingDirection the above does not touch.

kompute_dml's coordinates are exact: the host evaluates the relation per axis and output index in
rational arithmetic (Scales and offsets may be floats, taken at their exact binary value, or
fractions.Fraction), rounds and clamps, and uploads per axis a table of input indices and float32
weights (taps at one clamped index merged, taps of weight 0 dropped); DirectML computes the relation
in float32 on the GPU, so a coordinate its rounding moves across an integer (nearest) differs.
shaders/resample.comp then gathers: NEAREST copies bits (exact); LINEAR sums w0 w1 w2 w3 x in float32
in row-major tap order: |error| <= (2n + K + 1) u sum |w x| (K taps, n axes, u = 2^-24; FLOAT16 one
more rounding). RESAMPLE3's Antialiased (LINEAR; ignored by NEAREST_NEIGHBOR, as ONNX Resize-18's
antialias, which onnxruntime passes for every mode) widens the kernel by 1 / Scale where Scale < 1,
weights normalized; its table (1 to 4 dimensions, FLOAT32 / FLOAT16, level 6_4) is taken from RESAMPLE2's
(the page's tail was not at hand). kompute_dml's extensions of RESAMPLE2 (docs/resample.md): InterpolationMode CUBIC
(Keys' cubic convolution with `cubic_coeff_a`, four taps per axis at floor(c) - 1 .. floor(c) + 2,
indices clamped), `exclude_outside` (the taps outside the input zeroed, the rest renormalized),
`extrapolation_value` (outputs whose c lies outside [0, size - 1] on some axis take it; for NEAREST,
whose rounded index lies outside the input) and `antialias` (LINEAR and CUBIC: RESAMPLE3's).

Validation, in order: the tables (InvalidArgumentError / UnsupportedError naming the field), then
the pages' rules (InvalidArgumentError whose message starts with the field): the output's data type
and dimension count equal the input's; Scales, InputPixelOffsets and OutputPixelOffsets hold
DimensionCount finite numbers, scales > 0; then a non-overlapping output and 32-bit addressing.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np

from ..core.dtypes import DataType
from ..core.errors import invalid
from ..core.layout import check_no_overlap
from ..core.registry import FL, FLOATS, OperatorSupport, row
from ..core.tensor_desc import TensorDesc
from ..runtime import DispatchPlan, grid_for
from . import contract
from .base import CompiledOperator, check_like, validate_tensors
from .cumulative import AxisDirection
from .elementwise_plan import check_addressable
from .onnx_types import float_input
from .pooling import writes_words
from .spec import OnnxOp, OperatorSpec

if TYPE_CHECKING:
    from ..device.device import Device


class InterpolationMode(enum.IntEnum):
    """DML_INTERPOLATION_MODE (exported as kdml.InterpolationMode); CUBIC is kompute_dml's
    extension (RESAMPLE2 only): DirectML has no cubic interpolation."""

    NEAREST_NEIGHBOR = 0
    LINEAR = 1
    CUBIC = 2


def _table(name: str, op_type: int, level: FL, dims: tuple[int, int]) -> OperatorSupport:
    return OperatorSupport(name, op_type, (
        row(level, ("input_tensor", "input", dims, FLOATS), ("output_tensor", "output", dims, FLOATS)),))


RESAMPLE = _table("RESAMPLE", 96, FL.FL_1_0, (4, 4))
RESAMPLE1 = _table("RESAMPLE1", 116, FL.FL_2_1, (4, 4))
RESAMPLE2 = _table("RESAMPLE2", 161, FL.FL_5_1, (1, 4))
RESAMPLE3 = _table("RESAMPLE3", 175, FL.FL_6_4, (1, 4))


@dataclass(frozen=True)
class ResampleDesc:
    """DML_RESAMPLE_OPERATOR_DESC { InputTensor, OutputTensor, InterpolationMode, ScaleCount,
    Scales }: RESAMPLE1 with InputPixelOffsets 0.5 and OutputPixelOffsets -0.5 (pixel centres)."""

    input_tensor: TensorDesc
    output_tensor: TensorDesc
    interpolation_mode: InterpolationMode
    scales: tuple[Any, ...]


@dataclass(frozen=True)
class Resample1Desc:
    """DML_RESAMPLE1_OPERATOR_DESC { InputTensor, OutputTensor, InterpolationMode, DimensionCount,
    Scales, InputPixelOffsets, OutputPixelOffsets }."""

    input_tensor: TensorDesc
    output_tensor: TensorDesc
    interpolation_mode: InterpolationMode
    scales: tuple[Any, ...]
    input_pixel_offsets: tuple[Any, ...]
    output_pixel_offsets: tuple[Any, ...]


@dataclass(frozen=True)
class Resample2Desc:
    """DML_RESAMPLE2_OPERATOR_DESC { InputTensor, OutputTensor, InterpolationMode,
    RoundingDirection, DimensionCount, Scales, InputPixelOffsets, OutputPixelOffsets }, and
    kompute_dml's extensions: `cubic_coeff_a` (InterpolationMode CUBIC), `exclude_outside`,
    `extrapolation_value` (None: DirectML's clamping) and `antialias` (LINEAR and CUBIC: the kernel
    widened by 1 / Scale where Scale < 1, as DirectML's RESAMPLE3 Antialiased)."""

    input_tensor: TensorDesc
    output_tensor: TensorDesc
    interpolation_mode: InterpolationMode
    rounding_direction: AxisDirection
    scales: tuple[Any, ...]
    input_pixel_offsets: tuple[Any, ...]
    output_pixel_offsets: tuple[Any, ...]
    cubic_coeff_a: float = -0.75
    exclude_outside: bool = False
    extrapolation_value: float | None = None
    antialias: bool = False


@dataclass(frozen=True)
class Resample3Desc:
    """DML_RESAMPLE3_OPERATOR_DESC { InputTensor, OutputTensor, InterpolationMode, RoundingDirection,
    DimensionCount, Scales, InputPixelOffsets, OutputPixelOffsets, Antialiased }: RESAMPLE2's fields
    plus Antialiased (LINEAR's kernel widened by 1 / Scale where Scale < 1)."""

    input_tensor: TensorDesc
    output_tensor: TensorDesc
    interpolation_mode: InterpolationMode
    rounding_direction: AxisDirection
    scales: tuple[Any, ...]
    input_pixel_offsets: tuple[Any, ...]
    output_pixel_offsets: tuple[Any, ...]
    antialiased: bool = False


def exact(value: Any, name: str) -> Fraction:
    """A finite number (float, int or Fraction; no bool) at its exact value."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, Fraction, np.integer, np.floating)):
        raise invalid(name, f"must be a finite number, got {type(value).__name__} {value!r}")
    if isinstance(value, (float, np.floating)) and not math.isfinite(float(value)):
        raise invalid(name, f"must be finite, got {value!r}")
    return Fraction(value) if isinstance(value, (int, Fraction)) else Fraction(float(value))


def exact_numbers(desc: Any, name: str, n: int, positive: bool = False) -> list[Fraction]:
    values = getattr(desc, name)
    if not isinstance(values, (tuple, list)) or len(values) != n:
        got = len(values) if isinstance(values, (tuple, list)) else type(values).__name__
        raise invalid(name, f"must hold DimensionCount ({n}) numbers (the tensors' dimension count), got {got}")
    out = [exact(v, f"{name}[{i}]") for i, v in enumerate(values)]
    for i, v in enumerate(out):
        if positive and v <= 0:
            raise invalid(f"{name}[{i}]", f"must be > 0, got {values[i]!r}")
    return out


def _kernel(mode: InterpolationMode, d: Fraction, a: Fraction) -> Fraction:
    """LINEAR's triangle, or Keys' cubic convolution kernel (coefficient a), at distance d."""
    d = abs(d)
    if mode == InterpolationMode.LINEAR:
        return max(1 - d, Fraction(0))
    if d <= 1:
        return ((a + 2) * d - (a + 3)) * d * d + 1
    if d < 2:
        return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return Fraction(0)


def axis_taps(n_in: int, x: int, mode: InterpolationMode, increasing: bool, scale: Fraction, ip: Fraction,
              op: Fraction, a: Fraction, exclude: bool, antialias: bool = False) -> tuple[bool, list[tuple[int, Fraction]]]:
    """Output index x of one axis: (outside the input, [(clamped input index, exact weight)]).
    LINEAR and CUBIC weigh every index i with |i - c| s < R (R 1 or 2; s = min(Scale, 1) with
    `antialias`, else 1) by the kernel at (i - c) s, normalized to sum 1 (a no-op without
    antialias); `exclude` zeroes those outside the input and renormalizes; then indices are
    clamped, taps at one index merged and weights of 0 dropped."""
    c = (x - op) / scale - ip
    last = n_in - 1
    if mode == InterpolationMode.NEAREST_NEIGHBOR:
        k = math.ceil(c) if increasing else math.floor(c)
        return not 0 <= k <= last, [(min(max(k, 0), last), Fraction(1))]
    radius = 1 if mode == InterpolationMode.LINEAR else 2
    s = min(scale, Fraction(1)) if antialias else Fraction(1)
    reach = radius / s
    raw = [(i, _kernel(mode, (i - c) * s, a)) for i in range(math.floor(c - reach) + 1, math.ceil(c + reach))]
    for drop in (False, exclude):
        if drop:
            raw = [(i, w if 0 <= i <= last else Fraction(0)) for i, w in raw]
        total = sum(w for _, w in raw)
        raw = [(i, w / total if total else w) for i, w in raw]
    merged: dict[int, Fraction] = {}
    for i, w in raw:
        j = min(max(i, 0), last)
        merged[j] = merged.get(j, Fraction(0)) + w
    return not 0 <= c <= last, [(i, w) for i, w in merged.items() if w != 0]


_F32 = np.dtype("<f4")


def geometry_words(x: TensorDesc, y: TensorDesc, mode: InterpolationMode, increasing: bool,
                   params: list[tuple[Fraction, Fraction, Fraction]], a: Fraction, exclude: bool,
                   extrapolation: float | None, antialias: bool = False, pairs: bool = True) -> tuple[np.ndarray, bool]:
    """shaders/resample.comp's constant (its P_* words, then each axis' table) and whether every
    tap is a single weight of 1 (the element copied: the nearest variant serves). `pairs`: FLOAT16
    outputs may be written a word (two elements) at a time where the layout allows."""
    lead = 4 - x.dimension_count
    n_in = [1] * lead + list(x.sizes)
    n_out = [1] * lead + list(y.sizes)
    params = [(Fraction(1), Fraction(0), Fraction(0))] * lead + params
    tables, taps, copies = [], [], True
    for n, m, (s, ip, op) in zip(n_in, n_out, params):
        rows = [axis_taps(n, o, mode, increasing, s, ip, op, a, exclude, antialias) for o in range(m)]
        t = max(1, max(len(r) for _, r in rows))
        copies = copies and all(len(r) == 1 and r[0][1] == 1 for _, r in rows)
        words = np.zeros((m, 1 + 2 * t), np.uint32)
        for o, (out, r) in enumerate(rows):
            words[o, 0] = out
            for k, (i, w) in enumerate(r):
                words[o, 1 + k] = i
                words[o, 1 + t + k] = np.array([float(w)], _F32).view(np.uint32)[0]
        tables.append(words.reshape(-1))
        taps.append(t)
    head = 23
    bases = np.cumsum([head] + [len(tb) for tb in tables[:-1]]).tolist()
    xs = [0] * lead + list(x.effective_strides)
    ys = [0] * lead + list(y.effective_strides)
    flags = (1 if extrapolation is not None else 0) | (2 if pairs and writes_words(y) else 0)
    extra = int(np.array([extrapolation or 0.0], _F32).view(np.uint32)[0])
    words = np.concatenate([np.array([y.element_count, *n_out, *xs, *ys, *taps, *bases, flags, extra], np.uint32),
                            *tables])
    return words, copies and extrapolation is None


def _mode(value: Any, extension: bool) -> InterpolationMode:
    try:
        mode = InterpolationMode(value)
    except ValueError:
        raise invalid("interpolation_mode", f"must be a DML_INTERPOLATION_MODE, got {value!r}") from None
    if mode == InterpolationMode.CUBIC and not extension:
        raise invalid("interpolation_mode", "CUBIC (kompute_dml's extension) is RESAMPLE2's only")
    return mode


def plan_resample(device: Device, x: TensorDesc, y: TensorDesc, mode: InterpolationMode, increasing: bool,
                  params: list[tuple[Fraction, Fraction, Fraction]], a: Fraction = Fraction(-3, 4), exclude: bool = False,
                  extrapolation: float | None = None, antialias: bool = False,
                  starts: tuple[tuple[int, int], ...] = ((0, 0),)) -> tuple[list[DispatchPlan], np.ndarray]:
    """shaders/resample.comp's dispatches over x -> y (at most 4 dimensions; per axis (Scale, input
    offset, output offset) of the relation) and their constant: one dispatch per (x, y) start in
    elements (UPSAMPLE_2D's leading axes beyond 4), bindings x, y, the constant."""
    pairs = writes_words(y) and all(yo % 2 == 0 for _, yo in starts)  # a start inside a word: element stores
    words, copies = geometry_words(x, y, mode, increasing, params, a, exclude, extrapolation, antialias, pairs)
    kind = "nearest" if mode == InterpolationMode.NEAREST_NEIGHBOR or copies else "interp"
    fam = contract.RESAMPLE
    unit = x.data_type.size
    total = y.element_count
    groups = grid_for(total // 2 if pairs else total, 256, device.limits["max_compute_work_group_count"][0])
    variant = fam.name(k=kind, t="f16" if x.data_type == DataType.FLOAT16 else "f32")
    return [DispatchPlan(variant=variant, bindings=(0, 1, 2), push=fam.pack(x_off=xo, y_off=yo), writes=(1,),
                         offset_slots=fam.slots(x_off=(0, unit), y_off=(1, unit)), groups=groups)
            for xo, yo in starts], words


def resample1_nearest_offsets(ips: list[Fraction]) -> list[Fraction]:
    """RESAMPLE / RESAMPLE1's nearest, floor(c + 1/2), as RESAMPLE2's DECREASING floor: the
    InputPixelOffsets 0.5 less (the module's docstring weighs the evidence)."""
    return [i - Fraction(1, 2) for i in ips]


def _compile(device: Device, desc: Any, support: OperatorSupport) -> CompiledOperator:
    validate_tensors(support, device.feature_level, desc, support.fields, support.outputs)
    x, y = desc.input_tensor, desc.output_tensor
    n = x.dimension_count
    check_like(x, y)
    v2, v3 = isinstance(desc, Resample2Desc), isinstance(desc, Resample3Desc)
    mode = _mode(desc.interpolation_mode, v2)
    scales = exact_numbers(desc, "scales", n, positive=True)
    if isinstance(desc, ResampleDesc):
        ips, ops = [Fraction(1, 2)] * n, [Fraction(-1, 2)] * n
    else:
        ips, ops = exact_numbers(desc, "input_pixel_offsets", n), exact_numbers(desc, "output_pixel_offsets", n)
    increasing, a, exclude, extrapolation, antialias = False, Fraction(-3, 4), False, None, False
    if v2 or v3:
        try:
            increasing = AxisDirection(desc.rounding_direction) == AxisDirection.INCREASING
        except ValueError:
            raise invalid("rounding_direction", f"must be a DML_AXIS_DIRECTION, got {desc.rounding_direction!r}") from None
        for f in ("antialiased",) if v3 else ("exclude_outside", "antialias"):
            if not isinstance(getattr(desc, f), (bool, np.bool_)):
                raise invalid(f, f"must be a bool, got {getattr(desc, f)!r}")
    if v3:  # ONNX Resize-18's antialias, which onnxruntime passes for every mode: nearest ignores it
        antialias = bool(desc.antialiased) and mode != InterpolationMode.NEAREST_NEIGHBOR
    elif v2:
        a = exact(desc.cubic_coeff_a, "cubic_coeff_a")
        exclude, antialias = bool(desc.exclude_outside), bool(desc.antialias)
        if antialias and mode == InterpolationMode.NEAREST_NEIGHBOR:
            raise invalid("antialias", "applies to LINEAR and CUBIC only (kompute_dml's extension), not NEAREST_NEIGHBOR")
        if desc.extrapolation_value is not None:
            e = desc.extrapolation_value
            if isinstance(e, (bool, np.bool_)) or not isinstance(e, (int, float, np.integer, np.floating)):
                raise invalid("extrapolation_value", f"must be None or a float, got {e!r}")
            extrapolation = float(e)
    elif mode == InterpolationMode.NEAREST_NEIGHBOR:
        ips = resample1_nearest_offsets(ips)
    check_no_overlap(y.sizes, y.effective_strides, "output_tensor")
    check_addressable(support.fields, (x, y))
    plans, words = plan_resample(device, x, y, mode, increasing, list(zip(scales, ips, ops)), a, exclude, extrapolation,
                                 antialias)
    return CompiledOperator(device, desc, support, support.inputs, support.outputs, plans, constants=[device.tensor(words)])


def compile_resample(device: Device, desc: ResampleDesc) -> CompiledOperator:
    return _compile(device, desc, RESAMPLE)


def compile_resample1(device: Device, desc: Resample1Desc) -> CompiledOperator:
    return _compile(device, desc, RESAMPLE1)


def compile_resample2(device: Device, desc: Resample2Desc) -> CompiledOperator:
    return _compile(device, desc, RESAMPLE2)


def compile_resample3(device: Device, desc: Resample3Desc) -> CompiledOperator:
    return _compile(device, desc, RESAMPLE3)


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def resize_rule(t: Any) -> str:
    """ONNX Resize / Upsample on RESAMPLE2: a float input; nearest with tf_crop_and_resize (whose
    extrapolation ONNX decides on the unrounded coordinate) stays on the CPU."""
    bad = float_input(t)
    if bad:
        return bad
    if (_text(t.attr("mode", "nearest")).lower() == "nearest"
            and _text(t.attr("coordinate_transformation_mode", "")) == "tf_crop_and_resize"):
        return "nearest tf_crop_and_resize (kompute_dml extrapolates linear and cubic resizes only)"
    return ""


EXPORTS = {"InterpolationMode": InterpolationMode}
_X = TensorDesc(DataType.FLOAT32, (1, 2, 3, 4))
_Y = TensorDesc(DataType.FLOAT32, (1, 2, 6, 8))
_NN = InterpolationMode.NEAREST_NEIGHBOR
SPECS = (
    OperatorSpec(Resample2Desc, RESAMPLE2, compile_resample2, (contract.RESAMPLE,), helpers=("resample", "resize"),
                 onnx=(OnnxOp("Resize", "", "resize", check=resize_rule), OnnxOp("Upsample", "", "resize", check=resize_rule)),
                 example=lambda: Resample2Desc(_X, _Y, InterpolationMode.LINEAR, AxisDirection.DECREASING, (1, 1, 2, 2),
                                               (0.5,) * 4, (-0.5,) * 4)),
    OperatorSpec(Resample3Desc, RESAMPLE3, compile_resample3, (contract.RESAMPLE,),
                 example=lambda: Resample3Desc(_X, _Y, InterpolationMode.LINEAR, AxisDirection.DECREASING, (1, 1, 0.5, 0.5),
                                               (0.5,) * 4, (-0.5,) * 4, True)),
    OperatorSpec(Resample1Desc, RESAMPLE1, compile_resample1, (contract.RESAMPLE,),
                 example=lambda: Resample1Desc(_X, _Y, _NN, (1, 1, 2, 2), (0.5,) * 4, (-0.5,) * 4)),
    OperatorSpec(ResampleDesc, RESAMPLE, compile_resample, (contract.RESAMPLE,),
                 example=lambda: ResampleDesc(_X, _Y, _NN, (1, 1, 2, 2))),
)
