"""DirectML's JOIN and SLICE1 operators (DML_JOIN_OPERATOR_DESC, DML_SLICE1_OPERATOR_DESC):
data movement, exact (elements are copied as bit patterns; 64-bit types as word pairs).

Both are strided copies planned by ops/identity.plan_region_copy (the copy shaders of COPY, no
shader of their own): JOIN is one copy per input into its part of the output (the part starts
at the sum of the earlier inputs' axis sizes times the output's axis stride), SLICE1 one copy
from the input window's first copied element with the window strides times the input's
strides (negative window strides walk backwards). Nothing else of the output is written.
Validation, in order: DML_BUFFER_TENSOR_DESC rules and the feature level's table
(InvalidArgumentError / UnsupportedError naming the field, `input_tensors[i]` for JOIN's
array), then the pages' constraints (InvalidArgumentError whose message starts with the field),
then a non-overlapping output and 32-bit element addressing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..core.errors import UnsupportedError, invalid
from ..core.ints import as_int, as_int_tuple
from ..core.layout import check_no_overlap
from ..core.registry import FL, FLOATS, INTS_8_32, INTS_64, D, OperatorSupport, row
from ..core.tensor_desc import TensorDesc
from ..device.device import Device
from ..device.memory import Tensor
from ..functional import _packed
from ..functional.elementwise import _operands
from ..runtime import DispatchPlan, TransferPlan
from .base import CompiledOperator, array_fields, validate_tensors
from .elementwise_plan import check_addressable
from .gather import _axis, _padded, _run
from .identity import _COPY_SHADERS, plan_region_copy
from .onnx_types import dml_or_bool_input
from .spec import OnnxOp, OperatorSpec

# ---- JOIN, SLICE1 from DML_JOIN_OPERATOR_DESC's and
# DML_SLICE1_OPERATOR_DESC's pages: every row of each (InputTensors is an "Array of inputs";
# 64-bit elements are moved as word pairs).
_MOVE_2_1 = FLOATS | INTS_8_32
_MOVE_4_1 = _MOVE_2_1 | INTS_64 | frozenset({D.FLOAT64})
JOIN = OperatorSupport("JOIN", 63, tuple(
    row(level, ("input_tensors", "input", dims, types), ("output_tensor", "output", dims, types))
    for level, dims, types in (
        (FL.FL_1_0, (4, 4), FLOATS | frozenset({D.INT32, D.INT16, D.UINT32, D.UINT16})),
        (FL.FL_2_1, (4, 4), _MOVE_2_1), (FL.FL_3_0, (4, 5), _MOVE_2_1), (FL.FL_4_1, (1, 8), _MOVE_4_1))))
SLICE1 = OperatorSupport("SLICE1", 111, tuple(
    row(level, ("input_tensor", "input", dims, types), ("output_tensor", "output", dims, types))
    for level, dims, types in ((FL.FL_2_1, (4, 5), _MOVE_2_1), (FL.FL_3_0, (1, 8), _MOVE_2_1),
                               (FL.FL_4_1, (1, 8), _MOVE_4_1))))


@dataclass(frozen=True)
class JoinDesc:
    """DML_JOIN_OPERATOR_DESC { InputCount, InputTensors, OutputTensor, Axis }: the inputs
    concatenated along `axis` (InputCount = len(input_tensors) > 0). Every input has the
    output's DataType, DimensionCount and Sizes except at `axis` (any non-zero size there);
    the output's axis size is the sum of the inputs'; axis in [0, DimensionCount)."""

    input_tensors: tuple[TensorDesc, ...]
    output_tensor: TensorDesc
    axis: int


@dataclass(frozen=True)
class Slice1Desc:
    """DML_SLICE1_OPERATOR_DESC { InputTensor, OutputTensor, DimensionCount, InputWindowOffsets,
    InputWindowSizes, InputWindowStrides } (DimensionCount = the length of the three tuples, the
    tensors' DimensionCount): output[c] = input[start + strides * c], start[i] = offsets[i]
    (+ sizes[i] - 1 where strides[i] < 0). offsets[i] + sizes[i] <= input sizes[i]; sizes[i] >= 1;
    strides[i] != 0; 1 <= output sizes[i] <= 1 + (sizes[i] - 1) // |strides[i]|."""

    input_tensor: TensorDesc
    output_tensor: TensorDesc
    input_window_offsets: tuple[int, ...]
    input_window_sizes: tuple[int, ...]
    input_window_strides: tuple[int, ...]


class CompiledCopies(CompiledOperator):
    """JOIN / SLICE1: copies only (bind's rules are the base class's: an output overlapping an
    input is refused)."""


def _limits(device: Device) -> tuple[int, object, str]:
    policy = device.policy
    return (device.limits["max_compute_work_group_count"][0], policy.copies_by_transfer, policy.memory_kernel)


def compile_join(device: Device, desc: JoinDesc) -> CompiledOperator:
    support = JOIN
    if desc.input_tensors is not None and not isinstance(desc.input_tensors, tuple):
        raise invalid("input_tensors", f"must be a tuple of TensorDesc, got {type(desc.input_tensors).__name__}")
    validate_tensors(support, device.feature_level, desc, support.fields, support.outputs)
    y = desc.output_tensor
    n = y.dimension_count
    axis = as_int(desc.axis, "axis")
    if not 0 <= axis < n:
        raise invalid("axis", f"must be in [0, {n}) (the output's DimensionCount), got {axis}")
    total = 0
    for i, x in enumerate(desc.input_tensors):
        name = f"input_tensors[{i}]"
        if x.data_type != y.data_type:
            raise invalid(f"{name}.data_type", f"must equal output_tensor's ({y.data_type.name}), got {x.data_type.name}")
        if x.dimension_count != n:
            raise invalid(f"{name}.sizes", f"dimension count must equal output_tensor's ({n}), got {x.dimension_count}")
        other = [d for d in range(n) if d != axis and x.sizes[d] != y.sizes[d]]
        if other:
            raise invalid(f"{name}.sizes", f"must equal output_tensor's sizes {y.sizes} except at axis {axis}, "
                          f"got {x.sizes}")
        total += x.sizes[axis]
    if total != y.sizes[axis]:
        raise invalid("output_tensor.sizes", f"axis {axis} must be the sum of the inputs' ({total}), "
                      f"got {y.sizes[axis]}")
    check_no_overlap(y.sizes, y.effective_strides, "output_tensor")
    fields = array_fields(desc, support.fields)
    check_addressable(fields, (*desc.input_tensors, y))
    max_groups, by_transfer, kernel = _limits(device)
    out_index = len(desc.input_tensors)
    ys = y.effective_strides
    plans: list[DispatchPlan | TransferPlan] = []
    start = 0
    for i, x in enumerate(desc.input_tensors):
        plans += plan_region_copy(
            y.data_type, x.sizes, x.effective_strides, ys, 0, start * ys[axis], i, out_index, max_groups,
            lambda regions, nbytes=x.byte_size: by_transfer(nbytes, regions), kernel)  # type: ignore[operator]
        start += x.sizes[axis]
    return CompiledCopies(device, desc, support, fields[:-1], fields[-1:], plans)


def slice1_window(desc: Slice1Desc) -> tuple[int, tuple[int, ...]]:
    """Validate the window; (input element index of output[0, ..., 0], input element stride of
    each output dimension)."""
    x, y = desc.input_tensor, desc.output_tensor
    n = x.dimension_count
    if y.data_type != x.data_type:
        raise invalid("output_tensor.data_type", f"must equal input_tensor's ({x.data_type.name}), got {y.data_type.name}")
    if y.dimension_count != n:
        raise invalid("output_tensor.sizes", f"dimension count must equal input_tensor's ({n}), got {y.dimension_count}")
    offsets = as_int_tuple(desc.input_window_offsets, "input_window_offsets")
    sizes = as_int_tuple(desc.input_window_sizes, "input_window_sizes")
    strides = as_int_tuple(desc.input_window_strides, "input_window_strides")
    for name, v in (("input_window_offsets", offsets), ("input_window_sizes", sizes),
                    ("input_window_strides", strides)):
        if len(v) != n:
            raise invalid(name, f"must hold DimensionCount = {n} values (the tensors'), got {len(v)}")
    xs = x.effective_strides
    start = 0
    steps = []
    for i in range(n):
        o, s, st = offsets[i], sizes[i], strides[i]
        if o < 0:
            raise invalid("input_window_offsets", f"[{i}] must be >= 0, got {o}")
        if s < 1:
            raise invalid("input_window_sizes", f"[{i}] must be >= 1 (the window may not be empty), got {s}")
        if o + s > x.sizes[i]:
            raise invalid("input_window_offsets", f"[{i}] + input_window_sizes[{i}] must be <= input_tensor.sizes[{i}] "
                          f"({x.sizes[i]}), got {o} + {s}")
        if st == 0:
            raise invalid("input_window_strides", f"[{i}] may not be 0")
        reach = 1 + (s - 1) // abs(st)
        if not 1 <= y.sizes[i] <= reach:
            raise invalid("output_tensor.sizes", f"[{i}] must be in [1, {reach}] (1 + (input_window_sizes[{i}] - 1) "
                          f"/ |input_window_strides[{i}]|), got {y.sizes[i]}")
        first = o + s - 1 if st < 0 else o
        start += first * xs[i]
        steps.append(st * xs[i])
    return start, tuple(steps)


def compile_slice1(device: Device, desc: Slice1Desc) -> CompiledOperator:
    validate_tensors(SLICE1, device.feature_level, desc, SLICE1.fields, SLICE1.outputs)
    return compile_window(device, desc, SLICE1, *slice1_window(desc))


def compile_window(device: Device, desc: Any, support: Any, start: int, steps: tuple[int, ...]) -> CompiledOperator:
    """A validated slice's copy (SLICE1, and SLICE's first version, ops/slice_first.py): the output's
    elements read from `start` in `steps` (input elements per output step, per dimension)."""
    x, y = desc.input_tensor, desc.output_tensor
    check_no_overlap(y.sizes, y.effective_strides, "output_tensor")
    check_addressable(support.fields, (x, y))
    max_groups, by_transfer, kernel = _limits(device)
    plans = plan_region_copy(y.data_type, y.sizes, steps, y.effective_strides, start, 0, 0, 1, max_groups,
                             lambda regions: by_transfer(y.byte_size, regions), kernel)  # type: ignore[operator]
    return CompiledCopies(device, desc, support, support.inputs, support.outputs, plans)


# ---- functional helpers (exported as kdml.<name>) ----------------------------------------
# The functional helpers of JOIN and SLICE1 (ops/join.py, docs/join.md), with numpy / ONNX
# semantics mapped onto the DirectML descriptors.
#
# `join(tensors, axis)`: numpy.concatenate (ONNX Concat) of tensors of one rank and type.
# `slice1(x, offsets, sizes, strides)`: DML_SLICE1's window, every reachable element
# (output sizes 1 + (sizes[i] - 1) // |strides[i]|). `onnx_slice(x, starts, ends, axes, steps)`:
# ONNX Slice, its clamping computed on the host from x's sizes, as one SLICE1. Ranks below the
# device's feature level's smallest (4 before 3_0 / 4_1) get leading 1s in the descriptors.
# Operands: kompute_dml Tensors (any strides and offset) or anything kompute_dml/core/inputs.py takes;
# the result is a new packed Tensor from the device's buffer pool, or `out=` (that shape, the
# input's type, any strides). Results are bit copies.
def _min_rank(dev: Device, support: OperatorSupport, field: str) -> int:
    row = support.at(dev.feature_level)
    return row.tensor(field).dims[0] if row is not None else 1


def _device(device: Device | None, out: Any) -> Device | None:
    """`device`, else out's device (the operands may all be host data)."""
    return device if device is not None or not isinstance(out, Tensor) else out.device


def _view(t: Tensor, n: int) -> Tensor:
    d = _padded(t.desc, n)
    return t if d is t.desc else Tensor(t.buffer, d, t.offset)


def join(tensors: Sequence[Any], axis: Any = 0, *, out: Tensor | None = None,
         device: Device | None = None) -> Tensor:
    """numpy.concatenate(tensors, axis) on DML_JOIN: one rank and type, the sizes equal except
    at `axis` (negative: from the end)."""
    if isinstance(tensors, (str, bytes)) or not isinstance(tensors, Sequence) or not tensors:
        raise invalid("tensors", "must be a non-empty sequence of tensors")
    names = tuple(f"tensors[{i}]" for i in range(len(tensors)))
    dev, ts = _operands(tuple(tensors), names, _device(device, out))
    r = ts[0].desc.dimension_count
    dt = ts[0].desc.data_type
    for name, t in zip(names, ts):
        if t.desc.dimension_count != r:
            raise invalid(name, f"rank must equal tensors[0]'s ({r}), got {t.desc.dimension_count}")
        if t.desc.data_type != dt:
            raise invalid(name, f"data type must equal tensors[0]'s ({dt.name}), got {t.desc.data_type.name}")
    a = _axis(axis, r)
    shape = list(ts[0].desc.sizes)
    shape[a] = sum(t.desc.sizes[a] for t in ts)
    n = max(r, _min_rank(dev, JOIN, "input_tensors"))
    views = [_view(t, n) for t in ts]
    od = _packed(dt, (1,) * (n - r) + tuple(shape))
    desc = JoinDesc(tuple(v.desc for v in views), od, a + n - r)
    return _run(dev, desc, views, tuple(shape), out)


def _slice(dev: Device, t: Tensor, offsets: tuple[int, ...], sizes: tuple[int, ...], strides: tuple[int, ...],
           shape: tuple[int, ...], out: Tensor | None) -> Tensor:
    r = t.desc.dimension_count
    n = max(r, _min_rank(dev, SLICE1, "input_tensor"))
    k = n - r
    view = _view(t, n)
    od = _packed(t.desc.data_type, (1,) * k + shape)
    desc = Slice1Desc(view.desc, od, (0,) * k + offsets, (1,) * k + sizes, (1,) * k + strides)
    return _run(dev, desc, [view], shape, out)


def slice1(x: Any, offsets: Any, sizes: Any, strides: Any, *, out: Tensor | None = None,
           device: Device | None = None) -> Tensor:
    """DML_SLICE1: output[c] = x[start + strides * c] with start[i] = offsets[i] (+ sizes[i] - 1
    where strides[i] < 0), every element the window reaches (the rules: ops/join.Slice1Desc)."""
    dev, (t,) = _operands((x,), ("x",), _device(device, out))
    r = t.desc.dimension_count
    vals = []
    for name, v in (("offsets", offsets), ("sizes", sizes), ("strides", strides)):
        v = as_int_tuple(v, name)
        if len(v) != r:
            raise invalid(name, f"must hold {r} values (x's rank), got {len(v)}")
        vals.append(v)
    o, s, st = vals
    for i in range(r):  # the output shape needs these; the descriptor checks the rest
        if s[i] < 1:
            raise invalid("sizes", f"[{i}] must be >= 1 (the window may not be empty), got {s[i]}")
        if st[i] == 0:
            raise invalid("strides", f"[{i}] may not be 0")
    shape = tuple(1 + (s[i] - 1) // abs(st[i]) for i in range(r))
    return _slice(dev, t, o, s, st, shape, out)


def onnx_slice_window(shape: Sequence[int], starts: Any, ends: Any, axes: Any = None,
                      steps: Any = None) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """ONNX Slice on a tensor of `shape`: (offsets, window sizes, strides, output shape) of the
    equivalent SLICE1 window (the output shape may hold 0: an empty result)."""
    r = len(shape)
    starts = as_int_tuple(starts, "starts")
    ends = as_int_tuple(ends, "ends")
    if len(ends) != len(starts):
        raise invalid("ends", f"must hold as many values as starts ({len(starts)}), got {len(ends)}")
    axes = tuple(range(len(starts))) if axes is None else as_int_tuple(axes, "axes")
    steps = (1,) * len(starts) if steps is None else as_int_tuple(steps, "steps")
    for name, v in (("axes", axes), ("steps", steps)):
        if len(v) != len(starts):
            raise invalid(name, f"must hold as many values as starts ({len(starts)}), got {len(v)}")
    offsets, sizes, strides, out = [0] * r, list(shape), [1] * r, list(shape)
    seen: set[int] = set()
    for s, e, a, st in zip(starts, ends, axes, steps):
        if not -r <= a < r:
            raise invalid("axes", f"must be in [{-r}, {r}), got {a}")
        a %= r
        if a in seen:
            raise invalid("axes", f"repeats axis {a}")
        seen.add(a)
        if st == 0:
            raise invalid("steps", "may not be 0")
        d = shape[a]
        s = s + d if s < 0 else s
        e = e + d if e < 0 else e
        if st > 0:
            s, e = min(max(s, 0), d), min(max(e, 0), d)
            count = max(0, -(-(e - s) // st))
        else:
            s, e = min(max(s, 0), d - 1), min(max(e, -1), d - 1)
            count = max(0, -(-(s - e) // -st))
        out[a] = count
        if count == 0:
            continue
        span = (count - 1) * abs(st) + 1
        offsets[a] = s if st > 0 else s - span + 1
        sizes[a], strides[a] = span, st
    return tuple(offsets), tuple(sizes), tuple(strides), tuple(out)


def onnx_slice(x: Any, starts: Any, ends: Any, axes: Any = None, steps: Any = None, *, out: Tensor | None = None,
               device: Device | None = None) -> Tensor:
    """ONNX Slice (opset 10+): starts / ends / axes / steps as the node's inputs, clamped as ONNX
    clamps them against x's sizes, run as one SLICE1. An empty result raises UnsupportedError
    (kompute_dml tensors have at least one element)."""
    dev, (t,) = _operands((x,), ("x",), _device(device, out))
    offsets, sizes, strides, shape = onnx_slice_window(t.desc.sizes, starts, ends, axes, steps)
    if 0 in shape:
        raise UnsupportedError(f"onnx_slice: the result of shape {shape} is empty")
    return _slice(dev, t, offsets, sizes, strides, shape, out)


# ---- specs (kompute_dml/ops/spec.py) ------------------------------------------------------
SPECS = (
    OperatorSpec(JoinDesc, JOIN, compile_join, _COPY_SHADERS, helpers=("join",),
                 onnx=(OnnxOp("Concat", "", "join", check=dml_or_bool_input),)),
    OperatorSpec(Slice1Desc, SLICE1, compile_slice1, _COPY_SHADERS, helpers=("slice1", "onnx_slice"),
                 onnx=(OnnxOp("Slice", "", "slice1", check=dml_or_bool_input),)),
)
