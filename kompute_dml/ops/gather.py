"""DirectML's GATHER and GATHER_ELEMENTS operators (DML_GATHER_OPERATOR_DESC,
DML_GATHER_ELEMENTS_OPERATOR_DESC): elements of the input picked along `axis` by an indices
tensor.

Both are planned as an element-wise operation over the output's sizes with three tensors
(ops/elementwise_plan.py: merged dimensions, per-tensor strides, offsets, host-enumerated
dimensions beyond the shader's rank): the input with its axis coordinate left out (stride 0
where an output dimension is an index dimension), the indices (stride 0 where an output
dimension is an input dimension) and the output; the shader (shaders/gather.comp) adds
index * the input's axis stride. Elements move as bit patterns (a variant per element width
and index type). Negative indices of signed index types count from the end of the axis; an
index outside the axis raises InvalidArgumentError ("indices_tensor: ...") and nothing is
written: a check dispatch before the gather (shaders/gather_check.comp, ops/device_check.py)
records the first one in the operator's check word, which the gather dispatches read
(docs/gather.md "The range check").
Validation, in order: DML_BUFFER_TENSOR_DESC rules and the feature level's table
(InvalidArgumentError / UnsupportedError naming the field), then the page's constraints
(InvalidArgumentError whose message starts with the field), then a non-overlapping output and
32-bit element addressing.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.dtypes import DataType
from ..core.errors import UnsupportedError, invalid
from ..core.inputs import as_host_array
from ..core.ints import as_int
from ..core.layout import check_no_overlap
from ..core.registry import FL, FLOATS, INTS_8_32, INTS_64, D, OperatorSupport, row
from ..core.tensor_desc import MAX_DIMENSIONS, TensorDesc
from ..device.device import Device
from ..device.memory import Tensor
from ..functional import _packed, check_out, compile_cached, pooled_empty
from ..functional.elementwise import _operands
from ..runtime import DispatchPlan, grid_for
from . import contract
from .base import CompiledOperator, validate_tensors
from .device_check import DeviceCheck
from .elementwise import CompiledElementWise
from .elementwise_plan import check_addressable, plan_elementwise
from .spec import OnnxOp, OperatorSpec

# ---- GATHER from DML_GATHER_OPERATOR_DESC's page ------------------
# The page's four rows, every type of them (elements moved as bit patterns: FLOAT64 / INT64 /
# UINT64 as word pairs; INT64 / UINT64 indices as word pairs, range-checked).
_GATHER_DATA_2_1 = FLOATS | INTS_8_32
GATHER = OperatorSupport("GATHER", 67, tuple(
    row(level, ("input_tensor", "input", dims, data), ("indices_tensor", "input", dims, idx),
         ("output_tensor", "output", dims, data))
    for level, dims, data, idx in (
        (FL.FL_1_0, (4, 4), FLOATS, frozenset({D.UINT32})),
        (FL.FL_2_1, (4, 4), _GATHER_DATA_2_1, frozenset({D.UINT32})),
        (FL.FL_3_0, (1, 8), _GATHER_DATA_2_1, frozenset({D.INT64, D.INT32, D.UINT64, D.UINT32})),
        (FL.FL_4_1, (1, 8), _GATHER_DATA_2_1 | INTS_64 | frozenset({D.FLOAT64}),
         frozenset({D.INT64, D.INT32, D.UINT64, D.UINT32})))))

# ---- GATHER_ELEMENTS from DML_GATHER_ELEMENTS_OPERATOR_DESC's page --
# The rows of 2_1 and 3_0, and a 4_1 row: the copies of the page consulted list a 4_1 heading
# whose row could not be read; kompute_dml gives it GATHER's 4_1 data types less FLOAT64
# (INT64 / UINT64 data, which ONNX GatherElements carries, moved as word pairs; docs/gather.md).
GATHER_ELEMENTS = OperatorSupport("GATHER_ELEMENTS", 107, tuple(
    row(level, ("input_tensor", "input", dims, data), ("indices_tensor", "input", dims, idx),
         ("output_tensor", "output", dims, data))
    for level, dims, data, idx in (
        (FL.FL_2_1, (4, 4), _GATHER_DATA_2_1, frozenset({D.UINT32})),
        (FL.FL_3_0, (1, 8), _GATHER_DATA_2_1, frozenset({D.INT64, D.INT32, D.UINT64, D.UINT32})),
        (FL.FL_4_1, (1, 8), _GATHER_DATA_2_1 | INTS_64, frozenset({D.INT64, D.INT32, D.UINT64, D.UINT32})))))


_INDEX_CODE = {DataType.INT32: "i32", DataType.UINT32: "u32", DataType.INT64: "i64", DataType.UINT64: "u64"}


@dataclass(frozen=True)
class GatherDesc:
    """DML_GATHER_OPERATOR_DESC { InputTensor, IndicesTensor, OutputTensor, Axis, IndexDimensions }:
    output[...] = input[..., indices[...], ...]. All three tensors have one DimensionCount N;
    axis in [0, N); the indices' last `index_dimensions` sizes are the index dimensions (the
    others must be 1); OutputTensor.Sizes = {Input.Sizes[0..axis), Indices.Sizes[N - k..N),
    Input.Sizes[axis + 1..N)} right-aligned to N (leading 1s cropped or added). Negative
    indices of signed types count from the end of the axis (the page, from feature level 3_0);
    an index outside the axis raises InvalidArgumentError naming it and writes nothing, as
    onnxruntime refuses it (the page only says the output is then incorrect)."""

    input_tensor: TensorDesc
    indices_tensor: TensorDesc
    output_tensor: TensorDesc
    axis: int = 0
    index_dimensions: int = 1


@dataclass(frozen=True)
class GatherElementsDesc:
    """DML_GATHER_ELEMENTS_OPERATOR_DESC { InputTensor, IndicesTensor, OutputTensor, Axis }:
    output[i, j, ...] = input[i, .., indices[i, j, ...] (at axis), ...]. All three tensors have
    one DimensionCount; the indices' sizes equal the input's except at `axis`; the output's
    sizes equal the indices'. Negative and out-of-range indices as GatherDesc's."""

    input_tensor: TensorDesc
    indices_tensor: TensorDesc
    output_tensor: TensorDesc
    axis: int = 0


class _WithAxis:
    """GATHER's family as plan_elementwise sees it: its element-wise members (`count` left out:
    the shader multiplies the sizes) plus the axis' length and input stride."""

    def __init__(self, axis_len: int, axis_str: int) -> None:
        self.axis = {"axis_len": axis_len, "axis_str": axis_str}

    def pack(self, **values: object) -> tuple[int, ...]:
        values.pop("count")
        return contract.GATHER.pack(**values, **self.axis)

    def slots(self, **members: tuple[int, int]) -> tuple[tuple[int, int, int], ...]:
        return contract.GATHER.slots(**members)


def _common(device: Device, desc: Any, support: OperatorSupport) -> int:
    validate_tensors(support, device.feature_level, desc, support.fields, support.outputs)
    x, ind, y = desc.input_tensor, desc.indices_tensor, desc.output_tensor
    n = x.dimension_count
    for f, t in (("indices_tensor", ind), ("output_tensor", y)):
        if t.dimension_count != n:
            raise invalid(f"{f}.sizes", f"dimension count must equal input_tensor's ({n}), got {t.dimension_count}")
    if y.data_type != x.data_type:
        raise invalid("output_tensor.data_type", f"must equal input_tensor's ({x.data_type.name}), "
                                                 f"got {y.data_type.name}")
    axis = as_int(desc.axis, "axis")
    if not 0 <= axis < n:
        raise invalid("axis", f"must be in [0, {n}) (input_tensor's dimension count), got {axis}")
    return axis


def _compile(device: Device, desc: Any, support: OperatorSupport, axis: int,
             a_str: list[int], b_str: list[int]) -> CompiledOperator:
    """The plans: a_str / b_str are the input's (axis left out) and the indices' strides per
    output dimension."""
    x, ind, y = desc.input_tensor, desc.indices_tensor, desc.output_tensor
    check_no_overlap(y.sizes, y.effective_strides, "output_tensor")
    check_addressable(support.fields, (x, ind, y))
    if y.element_count >= 1 << 32:
        raise UnsupportedError(f"output_tensor: {y.element_count} elements exceed the gather shader's 32-bit count")
    virtual = (TensorDesc(x.data_type, y.sizes, tuple(a_str)), TensorDesc(ind.data_type, y.sizes, tuple(b_str)), y)
    variant = contract.GATHER.name(bits=8 * x.data_type.size, idx=_INDEX_CODE[ind.data_type])
    family: Any = _WithAxis(x.sizes[axis], x.effective_strides[axis])
    max_groups = device.limits["max_compute_work_group_count"][0]
    gathers = plan_elementwise(family, variant, virtual, max_groups)
    # the binding list: input, indices, output, then the check word (ops/device_check.py); the
    # gather dispatches read the word (binding 3) and write nothing once the check set it
    check = DeviceCheck(device, 3, lambda position, bound: _out_of_range(desc, support.name, axis, position, bound[1]))
    pad = MAX_DIMENSIONS - ind.dimension_count
    count = ind.element_count
    check_plan = DispatchPlan(
        variant=contract.GATHER_CHECK.name(idx=_INDEX_CODE[ind.data_type]), bindings=(1, 3),
        push=contract.GATHER_CHECK.pack(b_off=0, count=count, size=[1] * pad + list(ind.sizes),
                                        str=[0] * pad + list(ind.effective_strides), axis_len=x.sizes[axis]),
        groups=grid_for(count, 256, max_groups), writes=(3,),
        offset_slots=contract.GATHER_CHECK.slots(b_off=(1, ind.data_type.size)))
    plans = [check.fill, check_plan, *(dataclasses.replace(p, bindings=(*p.bindings, 3)) for p in gathers)]
    op = CompiledElementWise(device, desc, support, support.inputs, support.outputs, plans, constants=[check.word])
    op.check = check
    return op


def _out_of_range(desc: Any, name: str, axis: int, position: int, indices: Tensor) -> str:
    """The error of the index at row-major `position` of the bound indices, which the check
    dispatch found outside the axis: its value is read back here (the error path)."""
    d = desc.indices_tensor
    coords = tuple(int(c) for c in np.unravel_index(position, d.sizes))
    at = indices.offset + sum(c * s for c, s in zip(coords, d.effective_strides)) * d.data_type.size
    value = int(np.frombuffer(indices.buffer.read(at, d.data_type.size), d.data_type.numpy_dtype)[0])
    n = desc.input_tensor.sizes[axis]
    lo = -n if d.data_type.is_signed else 0
    return (f"indices_tensor: index {value} at position {coords} (element {position} in row-major order) is "
            f"outside [{lo}, {n - 1}] (input_tensor's size {n} at axis {axis}): {name} wrote no output")


def gather_output_sizes(input_sizes: tuple[int, ...], indices_sizes: tuple[int, ...], axis: int,
                        index_dimensions: int) -> tuple[tuple[int, ...], list[tuple[str, int]]]:
    """DML_GATHER's OutputTensor.Sizes and, per output dimension, where it comes from: ("in", d)
    an input dimension, ("idx", d) an indices dimension, ("pad", -1) an added leading 1.
    InvalidArgumentError where a cropped leading size is not 1."""
    n, k = len(input_sizes), index_dimensions
    src = ([("in", d) for d in range(axis)] + [("idx", d) for d in range(n - k, n)]
           + [("in", d) for d in range(axis + 1, n)])
    full = [input_sizes[d] if kind == "in" else indices_sizes[d] for kind, d in src]
    extra = len(full) - n
    if extra > 0:
        if any(s != 1 for s in full[:extra]):
            raise invalid("output_tensor.sizes", f"{tuple(full)} (input_tensor's sizes around axis {axis} with the "
                                                 f"indices' last {k}) has {len(full)} dimensions and its leading "
                                                 f"{extra} are not all 1: they cannot be cropped to {n}")
        return tuple(full[extra:]), src[extra:]
    return (1,) * -extra + tuple(full), [("pad", -1)] * -extra + src


def compile_gather(device: Device, desc: GatherDesc) -> CompiledOperator:
    support = GATHER
    axis = _common(device, desc, support)
    x, ind, y = desc.input_tensor, desc.indices_tensor, desc.output_tensor
    n = x.dimension_count
    k = as_int(desc.index_dimensions, "index_dimensions")
    # The page's range is [0, IndicesTensor.DimensionCount); its own Example 1 (1-D indices,
    # IndexDimensions 1) uses k = DimensionCount, which is accepted.
    if not 0 <= k <= n:
        raise invalid("index_dimensions", f"must be in [0, {n}] (indices_tensor's dimension count), got {k}")
    if any(s != 1 for s in ind.sizes[:n - k]):
        raise invalid("indices_tensor.sizes", f"the {n - k} leading sizes outside index_dimensions ({k}) must be 1, "
                                              f"got {ind.sizes}")
    expected, src = gather_output_sizes(x.sizes, ind.sizes, axis, k)
    if y.sizes != expected:
        raise invalid("output_tensor.sizes", f"must be {expected} (input_tensor's sizes with axis {axis} replaced "
                                             f"by the indices' last {k}), got {y.sizes}")
    xs, js = x.effective_strides, ind.effective_strides
    a_str = [xs[d] if kind == "in" else 0 for kind, d in src]
    b_str = [js[d] if kind == "idx" else 0 for kind, d in src]
    return _compile(device, desc, support, axis, a_str, b_str)


def compile_gather_elements(device: Device, desc: GatherElementsDesc) -> CompiledOperator:
    support = GATHER_ELEMENTS
    axis = _common(device, desc, support)
    x, ind, y = desc.input_tensor, desc.indices_tensor, desc.output_tensor
    if any(a != b for d, (a, b) in enumerate(zip(x.sizes, ind.sizes)) if d != axis):
        raise invalid("indices_tensor.sizes", f"must equal input_tensor's {x.sizes} except at axis {axis}, "
                                              f"got {ind.sizes}")
    if y.sizes != ind.sizes:
        raise invalid("output_tensor.sizes", f"must equal indices_tensor's {ind.sizes}, got {y.sizes}")
    a_str = [0 if d == axis else s for d, s in enumerate(x.effective_strides)]
    return _compile(device, desc, support, axis, a_str, list(ind.effective_strides))


# ---- functional helpers (exported as kdml.<name>) ----------------------------------------
# The functional helpers of GATHER and GATHER_ELEMENTS (ops/gather.py, docs/gather.md), with
# ONNX Gather / GatherElements semantics mapped onto the DirectML descriptors.
#
# `gather(x, indices, axis)`: x of rank r, indices of rank q (a 0-d numpy index: q = 0), output
# x.shape[:axis] + indices.shape + x.shape[axis + 1:] (rank q + r - 1; a rank-0 result is
# returned as shape (1,): kompute_dml tensors have 1 to 8 dimensions). The descriptor has
# DimensionCount N = r + max(q, 1) - 1 for all three tensors (leading 1s added), Axis = axis +
# N - r, IndexDimensions = q. `axis` may be negative ([-r, r)). Operands: kompute_dml Tensors or
# anything kompute_dml/core/inputs.py takes (Python integers become INT64 indices); the result is a
# new packed Tensor from the device's buffer pool, or `out=` (that shape, x's type, any strides).
def _padded(desc: TensorDesc, n: int) -> TensorDesc:
    """desc with leading 1s up to n dimensions (the same elements at the same places)."""
    k = n - desc.dimension_count
    if k == 0:
        return desc
    strides = None if desc.strides is None else (1,) * k + desc.strides
    return TensorDesc(desc.data_type, (1,) * k + desc.sizes, strides, desc.total_tensor_size_in_bytes,
                      desc.guaranteed_base_offset_alignment, desc.flags)


def _axis(axis: Any, r: int) -> int:
    a = as_int(axis, "axis")
    if not -r <= a < r:
        raise invalid("axis", f"must be in [{-r}, {r}) for x of rank {r}, got {a}")
    return a % r


def _run(dev: Device, desc: Any, ins: list[Tensor], shape: tuple[int, ...], out: Tensor | None) -> Tensor:
    """Compile (cached) and run `desc`, whose output is `shape` padded with leading 1s: into
    `out` (any strides) or a pooled packed tensor returned with `shape` (GATHER, JOIN, SLICE1)."""
    dt = desc.output_tensor.data_type
    if out is not None:
        check_out(out, dev, shape, dt)
        od = _padded(out.desc, desc.output_tensor.dimension_count)
        op = compile_cached(dev, dataclasses.replace(desc, output_tensor=od))
        op.execute(ins, [Tensor(out.buffer, od, out.offset)])
        return out
    op = compile_cached(dev, desc)
    t = pooled_empty(dev, desc.output_tensor)
    op.execute(ins, [t])
    return t if t.desc.sizes == shape else Tensor(t.buffer, _packed(dt, shape), t.offset)


def gather(x: Any, indices: Any, axis: Any = 0, *, out: Tensor | None = None,
           device: Device | None = None) -> Tensor:
    """ONNX Gather on DML_GATHER: x's slices along `axis` picked by `indices` (negative indices
    count from the end; an index outside the axis raises InvalidArgumentError)."""
    q0 = None
    if not isinstance(indices, Tensor):
        indices = as_host_array(indices, "indices", dml=False)
        if indices.ndim == 0:
            q0, indices = 0, indices.reshape(1)
    dev, (t, it) = _operands((x, indices), ("x", "indices"), device, typed=slice(0, 0))
    r = t.desc.dimension_count
    q = it.desc.dimension_count if q0 is None else 0
    a = _axis(axis, r)
    shape = t.desc.sizes[:a] + (it.desc.sizes if q else ()) + t.desc.sizes[a + 1:]
    n = r + max(q, 1) - 1
    if n > MAX_DIMENSIONS:
        raise UnsupportedError(f"indices: gather of rank-{r} x by rank-{q} indices needs {n} dimensions "
                               f"(at most {MAX_DIMENSIONS})")
    xd, idd = _padded(t.desc, n), _padded(it.desc, n)
    od = _packed(t.desc.data_type, (1,) * (n - len(shape)) + shape)
    desc = GatherDesc(xd, idd, od, axis=a + n - r, index_dimensions=q)
    ins = [Tensor(t.buffer, xd, t.offset), Tensor(it.buffer, idd, it.offset)]
    return _run(dev, desc, ins, shape or (1,), out)


def gather_elements(x: Any, indices: Any, axis: Any = 0, *, out: Tensor | None = None,
                    device: Device | None = None) -> Tensor:
    """ONNX GatherElements on DML_GATHER_ELEMENTS: output[..i..] = x[.., indices[..i..] at axis, ..]
    (indices of x's rank, x's sizes except at `axis`)."""
    dev, (t, it) = _operands((x, indices), ("x", "indices"), device, typed=slice(0, 0))
    a = _axis(axis, t.desc.dimension_count)
    od = _packed(t.desc.data_type, it.desc.sizes)
    return _run(dev, GatherElementsDesc(t.desc, it.desc, od, axis=a), [t, it], it.desc.sizes, out)


# ---- spec (kompute_dml/ops/spec.py) --------------------------------------------------------
SPECS = (
    OperatorSpec(GatherDesc, GATHER, compile_gather, (contract.GATHER, contract.GATHER_CHECK), helpers=("gather",),
                 onnx=(OnnxOp("Gather", "", "gather"),)),
    OperatorSpec(GatherElementsDesc, GATHER_ELEMENTS, compile_gather_elements, (contract.GATHER, contract.GATHER_CHECK),
                 helpers=("gather_elements",),
                 onnx=(OnnxOp("GatherElements", "", "gather_elements"),)),
)
