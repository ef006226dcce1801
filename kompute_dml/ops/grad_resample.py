"""DirectML's RESAMPLE_GRAD (DML_RESAMPLE_GRAD_OPERATOR_DESC, feature level 3_0) and RESAMPLE_GRAD1
(DML_RESAMPLE_GRAD1_OPERATOR_DESC, 5_1): the backward passes of RESAMPLE1 and RESAMPLE2
(ops/resample.py). InputGradientTensor has the forward output's shape, OutputGradientTensor the
forward input's; each OutputGradientTensor element is the sum, over the forward output elements
whose sampling read it, of their gradient times the weight it had there (NEAREST_NEIGHBOR: 1).

The forward's exact coordinates: per axis, the host evaluates RESAMPLE1 / RESAMPLE2's relation in
rational arithmetic as the forward does (resample.axis_taps: `c = (o - OutputPixelOffset) / Scale -
InputPixelOffset`; NEAREST_NEIGHBOR floor(c + 1/2) for RESAMPLE_GRAD, as RESAMPLE1 (docs/resample.md
"NEAREST_NEIGHBOR's rounding"), floor(c) / ceil(c) by RoundingDirection for RESAMPLE_GRAD1, the index
clamped; LINEAR c clamped into [0, size - 1], two taps weighed 1 - f and f, taps at one index merged,
taps of weight 0 dropped) and inverts the table: for each input index, the output indices that read
it (ascending) with the float32 weight. shaders/grad_resample.comp (contract.grad_sample.GRAD_RESAMPLE)
gathers those lists per output-gradient element, row-major, each term ((w0 w1) w2) w3 dY added once in
float32 from -0 (no atomics: deterministic; an element no output read gets +0): against the exact sum
|error| <= (n + K + 1) u sum |w dY| for n axes and K terms (u = 2^-24; weights rounded to float32);
NEAREST_NEIGHBOR's single contributions are copied exactly. FLOAT16: decoded exactly, summed in
float32, rounded once.

Where the pages are silent (kompute_dml's reading):
- The examples (Scales 0.5 height, 1.5 width, nearest: [[1, 2], [3, 4]] -> [[1, 1, 2]], gradient
  [4, 5, 6] -> [[9, 6], [0, 0]]) name no offsets: they hold with InputPixelOffsets 0.5 and
  OutputPixelOffsets 0 for RESAMPLE_GRAD (floor(o / Scale)), with offsets 0 and DECREASING for
  RESAMPLE_GRAD1 (tests/test_grad_resample.py runs both).
- The gradient's sizes are free ("typically" the forward's): the relation maps any pair of sizes,
  as the forward does.
- InterpolationMode CUBIC (kompute_dml's RESAMPLE2 extension) is refused: DirectML has none.
- RESAMPLE_GRAD1's tensor table was not at hand: RESAMPLE2's (1 to 4 dimensions, FLOAT32 / FLOAT16).
- Coordinates are exact where DirectML computes them in float32 (docs/resample.md "What differs").
- On CPU devices (llvmpipe's loop limit, runtime/llvmpipe.py) an element whose lists nest beyond
  CPU_WALK_MAX iterations (upsampling by over ~245 on two axes) is refused (UnsupportedError).
Validation, in order: the table (InvalidArgumentError / UnsupportedError naming the field), one
DataType and DimensionCount, the enums, Scales / InputPixelOffsets / OutputPixelOffsets (DimensionCount
finite numbers, Scales > 0), a non-overlapping output, 32-bit addressing, the loop limit.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np

from ..core.dtypes import DataType
from ..core.errors import UnsupportedError, invalid
from ..core.layout import check_no_overlap
from ..core.registry import FL, FLOATS, OperatorSupport, row
from ..core.tensor_desc import TensorDesc
from ..runtime import DispatchPlan, grid_for
from ..runtime.llvmpipe import CPU_WALK_MAX
from . import contract
from .base import CompiledOperator, check_like, validate_tensors
from .cumulative import AxisDirection
from .elementwise_plan import check_addressable
from .resample import InterpolationMode, axis_taps, exact_numbers, resample1_nearest_offsets
from .spec import OperatorSpec

if TYPE_CHECKING:
    from ..device.device import Device


def _table(name: str, op_type: int, level: FL, dims: tuple[int, int]) -> OperatorSupport:
    return OperatorSupport(name, op_type, (
        row(level, ("input_gradient_tensor", "input", dims, FLOATS), ("output_gradient_tensor", "output", dims, FLOATS)),))


RESAMPLE_GRAD = _table("RESAMPLE_GRAD", 134, FL.FL_3_0, (4, 4))
RESAMPLE_GRAD1 = _table("RESAMPLE_GRAD1", 162, FL.FL_5_1, (1, 4))


@dataclass(frozen=True)
class ResampleGradDesc:
    """DML_RESAMPLE_GRAD_OPERATOR_DESC { InputGradientTensor, OutputGradientTensor, InterpolationMode,
    DimensionCount, Scales, InputPixelOffsets, OutputPixelOffsets }: RESAMPLE1's gradient."""

    input_gradient_tensor: TensorDesc
    output_gradient_tensor: TensorDesc
    interpolation_mode: InterpolationMode
    scales: tuple[Any, ...]
    input_pixel_offsets: tuple[Any, ...]
    output_pixel_offsets: tuple[Any, ...]


@dataclass(frozen=True)
class ResampleGrad1Desc:
    """DML_RESAMPLE_GRAD1_OPERATOR_DESC { InputGradientTensor, OutputGradientTensor, InterpolationMode,
    RoundingDirection, DimensionCount, Scales, InputPixelOffsets, OutputPixelOffsets }: RESAMPLE2's."""

    input_gradient_tensor: TensorDesc
    output_gradient_tensor: TensorDesc
    interpolation_mode: InterpolationMode
    rounding_direction: AxisDirection
    scales: tuple[Any, ...]
    input_pixel_offsets: tuple[Any, ...]
    output_pixel_offsets: tuple[Any, ...]


def inverse_taps(n_in: int, n_out: int, mode: InterpolationMode, increasing: bool, scale: Fraction, ip: Fraction,
                 op: Fraction) -> list[list[tuple[int, Fraction]]]:
    """Per input index of one axis, the forward output indices that read it (ascending) with their
    exact weights: the forward's tap table (resample.axis_taps) inverted."""
    inv: list[list[tuple[int, Fraction]]] = [[] for _ in range(n_in)]
    for o in range(n_out):
        for i, w in axis_taps(n_in, o, mode, increasing, scale, ip, op, Fraction(-3, 4), False)[1]:
            inv[i].append((o, w))
    return inv


def inverse_words(g: TensorDesc, y: TensorDesc, mode: InterpolationMode, increasing: bool,
                  params: list[tuple[Fraction, Fraction, Fraction]]) -> tuple[np.ndarray, int]:
    """shaders/grad_resample.comp's constant (its P_* words, then each axis' inverse table) and the
    most loop iterations one invocation takes (llvmpipe's limit)."""
    lead = 4 - y.dimension_count
    n_in = [1] * lead + list(y.sizes)
    n_out = [1] * lead + list(g.sizes)
    params = [(Fraction(1), Fraction(0), Fraction(0))] * lead + params
    head = 17
    tables: list[np.ndarray] = []
    pos = head
    walk, reach = 0, 1
    for n, m, (s, ip, op) in zip(n_in, n_out, params):
        inv = inverse_taps(n, m, mode, increasing, s, ip, op)
        reach *= max(1, max(len(r) for r in inv))
        walk += reach
        entries = pos + n + 1  # entry i's pairs follow the n + 1 pointers
        ptr, pairs = [], []
        for r in inv:
            ptr.append(entries + len(pairs))
            for o, w in r:
                pairs += [o, int(np.array([float(w)], np.float32).view(np.uint32)[0])]
        ptr.append(entries + len(pairs))
        tables.append(np.array(ptr + pairs, np.uint32))
        pos += len(tables[-1])
    bases = np.cumsum([head] + [len(t) for t in tables[:-1]]).tolist()
    gs = [0] * lead + list(g.effective_strides)
    ys = [0] * lead + list(y.effective_strides)
    words = np.concatenate([np.array([y.element_count, *n_in, *gs, *ys, *bases], np.uint32), *tables])
    return words, walk


def _compile(device: Device, desc: Any, support: OperatorSupport) -> CompiledOperator:
    validate_tensors(support, device.feature_level, desc, support.fields, support.outputs)
    g, y = desc.input_gradient_tensor, desc.output_gradient_tensor
    check_like(g, y, "output_gradient_tensor", "input_gradient_tensor")
    n = g.dimension_count
    try:
        mode = InterpolationMode(desc.interpolation_mode)
    except ValueError:
        raise invalid("interpolation_mode", f"must be a DML_INTERPOLATION_MODE, got {desc.interpolation_mode!r}") from None
    if mode == InterpolationMode.CUBIC:
        raise invalid("interpolation_mode", "must be NEAREST_NEIGHBOR or LINEAR (CUBIC is kompute_dml's RESAMPLE2 extension)")
    increasing = False
    if isinstance(desc, ResampleGrad1Desc):
        try:
            increasing = AxisDirection(desc.rounding_direction) == AxisDirection.INCREASING
        except ValueError:
            raise invalid("rounding_direction", f"must be a DML_AXIS_DIRECTION, got {desc.rounding_direction!r}") from None
    scales = exact_numbers(desc, "scales", n, positive=True)
    ips, ops = exact_numbers(desc, "input_pixel_offsets", n), exact_numbers(desc, "output_pixel_offsets", n)
    if isinstance(desc, ResampleGradDesc) and mode == InterpolationMode.NEAREST_NEIGHBOR:
        ips = resample1_nearest_offsets(ips)  # RESAMPLE1's floor(c + 1/2) as DECREASING's floor
    check_no_overlap(y.sizes, y.effective_strides, "output_gradient_tensor")
    check_addressable(support.fields, (g, y))
    words, walk = inverse_words(g, y, mode, increasing, list(zip(scales, ips, ops)))
    if walk > CPU_WALK_MAX and device.device_type == "cpu":
        raise UnsupportedError(f"input_gradient_tensor: an output-gradient element gathers through {walk} loop iterations, "
                               f"beyond a CPU device's loop limit ({CPU_WALK_MAX}: runtime/llvmpipe.py)")
    fam = contract.grad_sample.GRAD_RESAMPLE
    unit = g.data_type.size
    plan = DispatchPlan(variant=fam.name(t="f16" if g.data_type == DataType.FLOAT16 else "f32"), bindings=(0, 1, 2),
                        push=fam.pack(g_off=0, y_off=0), writes=(1,),
                        groups=grid_for(y.element_count, 256, device.limits["max_compute_work_group_count"][0]),
                        offset_slots=fam.slots(g_off=(0, unit), y_off=(1, unit)))
    return CompiledOperator(device, desc, support, support.inputs, support.outputs, [plan], constants=[device.tensor(words)])


def compile_resample_grad(device: Device, desc: ResampleGradDesc) -> CompiledOperator:
    return _compile(device, desc, RESAMPLE_GRAD)


def compile_resample_grad1(device: Device, desc: ResampleGrad1Desc) -> CompiledOperator:
    return _compile(device, desc, RESAMPLE_GRAD1)


_G = TensorDesc(DataType.FLOAT32, (1, 2, 6, 8))
_Y = TensorDesc(DataType.FLOAT32, (1, 2, 3, 4))
_LIN = InterpolationMode.LINEAR
SPECS = (
    OperatorSpec(ResampleGradDesc, RESAMPLE_GRAD, compile_resample_grad, (contract.grad_sample.GRAD_RESAMPLE,),
                 example=lambda: ResampleGradDesc(_G, _Y, _LIN, (1, 1, 2, 2), (0.5,) * 4, (-0.5,) * 4)),
    OperatorSpec(ResampleGrad1Desc, RESAMPLE_GRAD1, compile_resample_grad1, (contract.grad_sample.GRAD_RESAMPLE,),
                 example=lambda: ResampleGrad1Desc(_G, _Y, _LIN, AxisDirection.DECREASING, (1, 1, 2, 2), (0.5,) * 4,
                                                   (-0.5,) * 4)),
)
