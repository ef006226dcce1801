"""DirectML's NONZERO_COORDINATES (DML_NONZERO_COORDINATES_OPERATOR_DESC, feature level 3_0): the
count of the input's nonzero elements (OutputCountTensor, UINT32, every size 1) and their
coordinates (OutputCoordinatesTensor {1,1,M,N} or {1,1,1,M,N}, UINT32: M the input's element count,
N at least the input's effective rank and at most its DimensionCount), a row per nonzero element in
ascending element index (row-major order), each row the element's last N coordinates. FLOAT32 and
FLOAT16 -0 is zero; NaN is not. Rows past the count are not written (the page: undefined; here
every byte there keeps its value).

shaders/nonzero_coordinates.comp: one work group of 256 scans the input in 256-element chunks in
row-major order (a scan in shared memory per chunk, the running count carried): each nonzero
element's row is the count of nonzero elements before it, so the output is deterministic and
in order; one dispatch, no scratch. An invocation's chunk loop stays under llvmpipe's loop limit
(runtime/llvmpipe.py) up to MAX_ELEMENTS elements; larger inputs are refused (UnsupportedError
naming input_tensor). It is one work group: a GPU runs it on one multiprocessor.

The table is the page's (4 to 5 dimensions; FLOAT32, FLOAT16, INT32, INT16, INT8, UINT32, UINT16,
UINT8). Validation, in order: the table (InvalidArgumentError / UnsupportedError naming the
field), the three DimensionCounts equal (the page's constraint), OutputCountTensor's sizes all 1,
OutputCoordinatesTensor's leading sizes 1, M the input's element count and N within [effective
rank, DimensionCount], the two outputs each non-overlapping and 32-bit addressing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..core.dtypes import DataType
from ..core.errors import UnsupportedError, invalid
from ..core.layout import check_no_overlap
from ..core.registry import FL, FLOATS, INTS_8_32, OperatorSupport, row
from ..core.tensor_desc import TensorDesc
from ..runtime import DispatchPlan
from . import contract
from .base import CompiledOperator, validate_tensors
from .contract.sequence import NZ_RANK
from .elementwise_plan import check_addressable
from .spec import OnnxOp, OperatorSpec

if TYPE_CHECKING:
    from ..device.device import Device

_U32 = frozenset({DataType.UINT32})
NONZERO_COORDINATES = OperatorSupport("NONZERO_COORDINATES", 133, (
    row(FL.FL_3_0, ("input_tensor", "input", (4, 5), FLOATS | INTS_8_32), ("output_count_tensor", "output", (4, 5), _U32),
        ("output_coordinates_tensor", "output", (4, 5), _U32)),))
MAX_ELEMENTS = 65535 * 256  # the chunk loop's iterations under llvmpipe's limit (shaders/nonzero_coordinates.comp)


@dataclass(frozen=True)
class NonzeroCoordinatesDesc:
    """DML_NONZERO_COORDINATES_OPERATOR_DESC { InputTensor, OutputCountTensor, OutputCoordinatesTensor }."""

    input_tensor: TensorDesc
    output_count_tensor: TensorDesc
    output_coordinates_tensor: TensorDesc


def effective_rank(sizes: tuple[int, ...]) -> int:
    """The page's effective rank: the dimension count without leading dimensions of size 1."""
    lead = 0
    while lead < len(sizes) and sizes[lead] == 1:
        lead += 1
    return len(sizes) - lead


def compile_nonzero_coordinates(device: Device, desc: NonzeroCoordinatesDesc) -> CompiledOperator:
    support = NONZERO_COORDINATES
    validate_tensors(support, device.feature_level, desc, support.fields, support.outputs)
    x, c, y = desc.input_tensor, desc.output_count_tensor, desc.output_coordinates_tensor
    rank = x.dimension_count
    for f, t in (("output_count_tensor", c), ("output_coordinates_tensor", y)):
        if t.dimension_count != rank:
            raise invalid(f"{f}.sizes", f"dimension count must equal input_tensor's ({rank}), got {t.dimension_count}")
    if any(s != 1 for s in c.sizes):
        raise invalid("output_count_tensor.sizes", f"must all be 1 (a scalar), got {c.sizes}")
    m, n = y.sizes[-2], y.sizes[-1]
    if any(s != 1 for s in y.sizes[:-2]) or m != x.element_count:
        raise invalid("output_coordinates_tensor.sizes", f"must be (1, ..., M, N) with M input_tensor's element count "
                                                         f"({x.element_count}), got {y.sizes}")
    low = effective_rank(x.sizes)
    if not low <= n <= rank:
        raise invalid("output_coordinates_tensor.sizes", f"N must be within [{low}, {rank}] (input_tensor's effective "
                                                         f"rank, DimensionCount), got {n}")
    if x.element_count > MAX_ELEMENTS:
        raise UnsupportedError(f"input_tensor: kompute_dml's NONZERO_COORDINATES scans at most {MAX_ELEMENTS} elements, "
                               f"got {x.element_count}")
    check_no_overlap(y.sizes, y.effective_strides, "output_coordinates_tensor")
    check_addressable(support.fields, (x, c, y))
    pad = NZ_RANK - rank
    dt = x.data_type
    t = {DataType.FLOAT32: "f32", DataType.FLOAT16: "f16"}.get(dt, f"b{8 * dt.size}")
    fam = contract.sequence.NZ
    ys = y.effective_strides
    push = fam.pack(x_off=0, c_off=0, y_off=0, total=x.element_count, ncols=n, y_row=ys[-2], y_col=ys[-1],
                    size=[1] * pad + list(x.sizes), xs=[0] * pad + list(x.effective_strides))
    plan = DispatchPlan(variant=fam.name(t=t), bindings=(0, 1, 2), push=push, writes=(1, 2), groups=(1, 1, 1),
                        offset_slots=fam.slots(x_off=(0, dt.size), c_off=(1, 4), y_off=(2, 4)))
    return CompiledOperator(device, desc, support, support.inputs, support.outputs, [plan])


# ---- functional helper (exported as kdml.<name>) -----------------------------------------
def nonzero_coordinates(x: Any, *, device: Any = None) -> tuple[Any, Any]:
    """DML_NONZERO_COORDINATES of x (4 or 5 dimensions): (count, coordinates) as new packed Tensors,
    count (1, ..., 1) UINT32 and coordinates (1, ..., 1, M, rank) UINT32, the rows past the count
    not written. `kdml.nonzero_coordinates(x)[1].numpy()[..., :count, :]` is numpy.argwhere's."""
    from ..functional import _packed, compile_cached, pooled_empty
    from ..functional.elementwise import _operands

    dev, (t,) = _operands((x,), ("x",), device)
    d = t.desc
    rank = d.dimension_count
    cd = _packed(DataType.UINT32, (1,) * rank)
    yd = _packed(DataType.UINT32, (1,) * (rank - 2) + (d.element_count, rank))
    op = compile_cached(dev, NonzeroCoordinatesDesc(d, cd, yd))
    count, coords = pooled_empty(dev, cd), pooled_empty(dev, yd)
    op.execute([t], [count, coords])
    return count, coords


def _example() -> NonzeroCoordinatesDesc:
    u32 = DataType.UINT32
    return NonzeroCoordinatesDesc(TensorDesc(DataType.FLOAT32, (1, 1, 2, 4)), TensorDesc(u32, (1, 1, 1, 1)),
                                  TensorDesc(u32, (1, 1, 8, 3)))


def nonzero_rule(t: Any) -> str:
    """ONNX NonZero on the device (onnx_backend/handlers_nonzero.py): any type the device holds but float64 (bool as
    its bytes, 64-bit integers through their words); ranks and sizes are checked at run time."""
    dt = t.elem(0) if t.inputs else None
    if dt is not None and (dt.kind not in "biuf" or (dt.kind == "f" and dt.itemsize == 8)):
        return f"type {dt} is not one NonZero takes on the device"
    return ""


SPECS = (OperatorSpec(NonzeroCoordinatesDesc, NONZERO_COORDINATES, compile_nonzero_coordinates, (contract.sequence.NZ,),
                      helpers=("nonzero_coordinates",), example=_example,
                      onnx=(OnnxOp("NonZero", "", "nonzero_coordinates", check=nonzero_rule),)),)
