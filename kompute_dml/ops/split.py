"""DirectML's SPLIT operator (DML_SPLIT_OPERATOR_DESC): the input cut along `axis` into
consecutive parts, one per output; data movement, exact (elements are copied as bit patterns;
64-bit types as word pairs). The mirror of JOIN (ops/join.py).

One strided copy per output (ops/identity.plan_region_copy, the copy shaders of COPY, no shader
of its own): output i reads the input from the sum of the earlier outputs' axis sizes times the
input's axis stride. Nothing else of any output is written.
Validation, in order: the tuple, DML_BUFFER_TENSOR_DESC rules and the feature level's table
(InvalidArgumentError / UnsupportedError naming the field, `output_tensors[i]` for the array),
then the page's constraints (InvalidArgumentError whose message starts with the field), then
non-overlapping outputs and 32-bit element addressing. Outputs overlapping each other or the
input are refused when bound (ops/base.CompiledOperator.bind).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.errors import invalid
from ..core.ints import as_int, as_int_tuple
from ..core.layout import check_no_overlap
from ..core.registry import FL, FLOATS, INTS_8_32, INTS_64, D, OperatorSupport, row
from ..core.tensor_desc import TensorDesc
from ..device.device import Device
from ..device.memory import Tensor
from ..functional import _packed, check_out, compile_cached, pooled_empty
from ..functional.elementwise import _operands
from ..runtime import DispatchPlan, TransferPlan
from .base import CompiledOperator, array_fields, validate_tensors
from .elementwise_plan import check_addressable
from .gather import _axis, _padded
from .identity import _COPY_SHADERS, plan_region_copy
from .join import CompiledCopies, _device, _limits, _min_rank, _view
from .onnx_types import dml_or_bool_input
from .spec import OnnxOp, OperatorSpec

# ---- SPLIT from DML_SPLIT_OPERATOR_DESC's page: every row (OutputTensors is an "Array of
# outputs"; 64-bit elements are moved as word pairs).
_TYPES_1_0 = FLOATS | frozenset({D.INT32, D.INT16, D.UINT32, D.UINT16})
_TYPES_2_1 = FLOATS | INTS_8_32
_TYPES_4_1 = _TYPES_2_1 | INTS_64 | frozenset({D.FLOAT64})
SPLIT = OperatorSupport("SPLIT", 62, tuple(
    row(level, ("input_tensor", "input", dims, types), ("output_tensors", "output", dims, types))
    for level, dims, types in (
        (FL.FL_1_0, (4, 4), _TYPES_1_0), (FL.FL_2_1, (4, 4), _TYPES_2_1), (FL.FL_3_0, (1, 8), _TYPES_2_1),
        (FL.FL_4_1, (1, 8), _TYPES_4_1))))


@dataclass(frozen=True)
class SplitDesc:
    """DML_SPLIT_OPERATOR_DESC { InputTensor, OutputCount, OutputTensors, Axis }: the input cut
    along `axis` into consecutive parts (OutputCount = len(output_tensors) > 0). Every output
    has the input's DataType, DimensionCount and Sizes except at `axis`; the outputs' axis sizes
    sum to the input's; axis in [0, DimensionCount). One output is a copy of the input."""

    input_tensor: TensorDesc
    output_tensors: tuple[TensorDesc, ...]
    axis: int


def compile_split(device: Device, desc: SplitDesc) -> CompiledOperator:
    support = SPLIT
    if desc.output_tensors is not None and not isinstance(desc.output_tensors, tuple):
        raise invalid("output_tensors", f"must be a tuple of TensorDesc, got {type(desc.output_tensors).__name__}")
    validate_tensors(support, device.feature_level, desc, support.fields, support.outputs)
    x = desc.input_tensor
    n = x.dimension_count
    axis = as_int(desc.axis, "axis")
    if not 0 <= axis < n:
        raise invalid("axis", f"must be in [0, {n}) (input_tensor's DimensionCount), got {axis}")
    total = 0
    for i, y in enumerate(desc.output_tensors):
        name = f"output_tensors[{i}]"
        if y.data_type != x.data_type:
            raise invalid(f"{name}.data_type", f"must equal input_tensor's ({x.data_type.name}), got {y.data_type.name}")
        if y.dimension_count != n:
            raise invalid(f"{name}.sizes", f"dimension count must equal input_tensor's ({n}), got {y.dimension_count}")
        if any(d != axis and y.sizes[d] != x.sizes[d] for d in range(n)):
            raise invalid(f"{name}.sizes", f"must equal input_tensor's sizes {x.sizes} except at axis {axis}, "
                          f"got {y.sizes}")
        total += y.sizes[axis]
    if total != x.sizes[axis]:
        raise invalid("output_tensors", f"sizes at axis {axis} must sum to input_tensor's ({x.sizes[axis]}), "
                      f"got {total}")
    fields = array_fields(desc, support.fields)
    for name, y in zip(fields[1:], desc.output_tensors):
        check_no_overlap(y.sizes, y.effective_strides, name)
    check_addressable(fields, (x, *desc.output_tensors))
    max_groups, by_transfer, kernel = _limits(device)
    xs = x.effective_strides
    plans: list[DispatchPlan | TransferPlan] = []
    start = 0
    for i, y in enumerate(desc.output_tensors):
        plans += plan_region_copy(
            x.data_type, y.sizes, xs, y.effective_strides, start * xs[axis], 0, 0, 1 + i, max_groups,
            lambda regions, nbytes=y.byte_size: by_transfer(nbytes, regions), kernel)  # type: ignore[operator]
        start += y.sizes[axis]
    return CompiledCopies(device, desc, support, fields[:1], fields[1:], plans)


# ---- functional helper (exported as kdml.split) --------------------------------------------
def split_sizes(length: int, sizes_or_count: Any, field: str = "sizes_or_count") -> tuple[int, ...]:
    """The part sizes of `sizes_or_count` along an axis of `length`: an int n is n equal parts
    (numpy.split's sections: n must divide the length); a sequence is the parts' sizes (not
    numpy.split's indices), each >= 0, summing to the length."""
    if not isinstance(sizes_or_count, Iterable) or (isinstance(sizes_or_count, np.ndarray) and sizes_or_count.ndim == 0):
        count = as_int(sizes_or_count, field, "an int or a sequence of ints")
        if count < 1:
            raise invalid(field, f"a count of parts must be >= 1, got {count}")
        if length % count:
            raise invalid(field, f"{count} equal parts do not divide the axis length {length}")
        return (length // count,) * count
    sizes = as_int_tuple(sizes_or_count, field)
    if not sizes:
        raise invalid(field, "must hold at least one size")
    for i, s in enumerate(sizes):
        if s < 0:
            raise invalid(f"{field}[{i}]", f"must be >= 0, got {s}")
    if sum(sizes) != length:
        raise invalid(field, f"sizes must sum to the axis length {length}, got {sum(sizes)}")
    return sizes


def split(x: Any, sizes_or_count: Any, axis: Any = 0, *, out: Sequence[Tensor] | None = None,
          device: Device | None = None) -> list[Tensor]:
    """numpy.split(x, ..., axis) on DML_SPLIT: `sizes_or_count` an int n (n equal parts; n must
    divide x's axis length) or the parts' sizes along `axis` (negative: from the end). A part
    of size 0 is refused (kompute_dml tensors are never empty). Operands: a kompute_dml Tensor
    (any strides and offset) or anything kompute_dml/core/inputs.py takes; the results are new
    packed Tensors from the device's buffer pool, or `out=` (one Tensor per part, the part's
    shape, x's type, any strides). Results are bit copies."""
    first = out[0] if out is not None and len(out) else None
    dev, (t,) = _operands((x,), ("x",), _device(device, first))
    r = t.desc.dimension_count
    a = _axis(axis, r)
    sizes = split_sizes(t.desc.sizes[a], sizes_or_count)
    for i, s in enumerate(sizes):
        if s == 0:
            raise invalid(f"sizes_or_count[{i}]", "a part of size 0 is empty (kompute_dml tensors are never empty)")
    shapes = [(*t.desc.sizes[:a], s, *t.desc.sizes[a + 1:]) for s in sizes]
    n = max(r, _min_rank(dev, SPLIT, "input_tensor"))
    k = n - r
    dt = t.desc.data_type
    view = _view(t, n)
    descs = tuple(_packed(dt, (1,) * k + s) for s in shapes)
    desc = SplitDesc(view.desc, descs, a + k)
    if out is not None:
        if isinstance(out, Tensor) or not isinstance(out, Sequence) or len(out) != len(shapes):
            raise invalid("out", f"must be a sequence of {len(shapes)} Tensors (one per part)")
        for i, (o, s) in enumerate(zip(out, shapes)):
            check_out(o, dev, s, dt, field=f"out[{i}]")
        ods = tuple(_padded(o.desc, n) for o in out)
        op = compile_cached(dev, dataclasses.replace(desc, output_tensors=ods))
        op.execute([view], [Tensor(o.buffer, d, o.offset) for o, d in zip(out, ods)])
        return list(out)
    op = compile_cached(dev, desc)
    ys = [pooled_empty(dev, d) for d in descs]
    op.execute([view], ys)
    return [y if k == 0 else Tensor(y.buffer, _packed(dt, s), y.offset) for y, s in zip(ys, shapes)]


def _example() -> SplitDesc:
    x = TensorDesc(D.FLOAT32, (1, 2, 5, 4))
    return SplitDesc(x, (TensorDesc(D.FLOAT32, (1, 2, 2, 4)), TensorDesc(D.FLOAT32, (1, 2, 3, 4))), 2)


# ---- specs (kompute_dml/ops/spec.py) ------------------------------------------------------
SPECS = (
    OperatorSpec(SplitDesc, SPLIT, compile_split, _COPY_SHADERS, helpers=("split",),
                 onnx=(OnnxOp("Split", "", "split", check=dml_or_bool_input),), example=_example),
)
