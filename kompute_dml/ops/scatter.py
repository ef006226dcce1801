"""DirectML's SCATTER (= SCATTER_ELEMENTS) and SCATTER_ND operators (DML_SCATTER_OPERATOR_DESC,
DML_SCATTER_ND_OPERATOR_DESC): the input copied to the output, then the updates written at the
positions the indices select.

On shaders/indexing.comp (ops/index_geometry.py): `prep` (each index tuple's output offset; an
index outside its dimension raises InvalidArgumentError after the submission and nothing is
written), `link` (duplicates), `copy`, then the scatter. DirectML leaves the order of duplicate
positions undefined ("no guarantee of which last write wins"); kompute_dml is deterministic: the
last of them in the indices' row-major order wins, as onnxruntime's CPU kernels write in that
order. kompute_dml's extension `reduction` (ONNX ScatterND / ScatterElements' attribute, opsets
16 / 18): ADD, MULTIPLY, MAX, MIN fold every update of a position into the copied input, in
row-major order (FLOAT32, INT32, UINT32 elements; docs/scatter.md).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from ..core.dtypes import DataType
from ..core.errors import UnsupportedError, invalid
from ..core.ints import as_int
from ..core.layout import check_no_overlap
from ..core.registry import FL, FLOATS, INTS_8_32, INTS_64, D, OperatorSupport, row
from ..core.tensor_desc import TensorDesc
from ..device.device import Device
from ..device.memory import Tensor
from ..functional import _packed
from ..functional.elementwise import _operands
from .base import CompiledOperator, validate_tensors
from .contract import indexing as contract
from .gather import _axis, _padded, _run
from .gather_nd import nd_layout, nd_space, nd_tuples
from .index_geometry import REDUCE_TYPES, IndexPlans, Space, Tuples, check_dims, check_types, row_major
from .spec import OnnxOp, OperatorSpec

_DATA = FLOATS | INTS_8_32
_DATA_64 = _DATA | INTS_64 | frozenset({D.FLOAT64})
_IDX = frozenset({D.INT64, D.INT32, D.UINT64, D.UINT32})


def _table(name: str, op_type: int, rows: tuple[tuple[Any, tuple[int, int], frozenset, frozenset], ...]
           ) -> OperatorSupport:
    return OperatorSupport(name, op_type, tuple(
        row(level, ("input_tensor", "input", dims, data), ("indices_tensor", "input", dims, idx),
            ("updates_tensor", "input", dims, data), ("output_tensor", "output", dims, data))
        for level, dims, data, idx in rows))


_U32 = frozenset({D.UINT32})
# the page's four rows
SCATTER = _table("SCATTER", 94, ((FL.FL_1_0, (4, 4), FLOATS, _U32), (FL.FL_2_1, (4, 4), _DATA, _U32),
                                 (FL.FL_3_0, (1, 8), _DATA, _IDX), (FL.FL_4_1, (1, 8), _DATA_64, _IDX)))
# the page's rows (2_1, 3_0) and, as GATHER_ND's, kompute_dml's 4_1 row with SCATTER's 4_1 types
SCATTER_ND = _table("SCATTER_ND", 109, ((FL.FL_2_1, (4, 4), _DATA, _U32), (FL.FL_3_0, (1, 8), _DATA, _IDX),
                                        (FL.FL_4_1, (1, 8), _DATA_64, _IDX)))


class ScatterReduction(enum.IntEnum):
    """kompute_dml's extension of SCATTER / SCATTER_ND: how updates meet the output (ONNX's
    `reduction`). NONE is DirectML's operator."""

    NONE = 0
    ADD = 1
    MULTIPLY = 2
    MAX = 3
    MIN = 4


_REDUCE_CODE = {ScatterReduction.ADD: "add", ScatterReduction.MULTIPLY: "mul", ScatterReduction.MAX: "max",
                ScatterReduction.MIN: "min"}


@dataclass(frozen=True)
class ScatterDesc:
    """DML_SCATTER_OPERATOR_DESC { InputTensor, IndicesTensor, UpdatesTensor, OutputTensor, Axis }:
    output = input; output[.., indices[i..] at axis, ..] = updates[i..]. One DimensionCount; the
    indices' sizes equal the input's except at `axis` ([0, DimensionCount)); the updates' sizes
    the indices'; the output's the input's; one data type. `reduction`: kompute_dml's extension."""

    input_tensor: TensorDesc
    indices_tensor: TensorDesc
    updates_tensor: TensorDesc
    output_tensor: TensorDesc
    axis: int = 0
    reduction: ScatterReduction = ScatterReduction.NONE


ScatterElementsDesc = ScatterDesc  # DML_SCATTER_ELEMENTS_OPERATOR_DESC, the page's alias


@dataclass(frozen=True)
class ScatterNdDesc:
    """DML_SCATTER_ND_OPERATOR_DESC { InputTensor, IndicesTensor, UpdatesTensor, OutputTensor,
    InputDimensionCount, IndicesDimensionCount }: output = input; output[indices[...]] =
    updates[...]. The updates' sizes are the indices' meaningful sizes but the last, then the
    input's after the q indexed ones, right-aligned. `reduction`: kompute_dml's extension."""

    input_tensor: TensorDesc
    indices_tensor: TensorDesc
    updates_tensor: TensorDesc
    output_tensor: TensorDesc
    input_dimension_count: int
    indices_dimension_count: int
    reduction: ScatterReduction = ScatterReduction.NONE


def _common(device: Device, desc: Any, support: OperatorSupport) -> str:
    validate_tensors(support, device.feature_level, desc, support.fields, support.outputs)
    check_dims(desc, ("input_tensor", "indices_tensor", "updates_tensor", "output_tensor"))
    check_types(desc, ("input_tensor", "updates_tensor", "output_tensor"))
    x, y = desc.input_tensor, desc.output_tensor
    if y.sizes != x.sizes:
        raise invalid("output_tensor.sizes", f"must equal input_tensor's {x.sizes}, got {y.sizes}")
    check_no_overlap(y.sizes, y.effective_strides, "output_tensor")
    try:
        red = ScatterReduction(desc.reduction)
    except ValueError:
        raise invalid("reduction", f"must be a kdml.ScatterReduction (0 to 4), got {desc.reduction!r}") from None
    if red == ScatterReduction.NONE:
        return "none"
    if x.data_type not in REDUCE_TYPES:
        raise UnsupportedError(f"reduction: {red.name} takes FLOAT32, INT32 or UINT32 elements, got {x.data_type.name}")
    return _REDUCE_CODE[red]


def _copy_space(x: TensorDesc, y: TensorDesc) -> Space:
    return Space(list(y.sizes), list(x.effective_strides), list(y.effective_strides), [0] * y.dimension_count)


def compile_scatter(device: Device, desc: ScatterDesc) -> CompiledOperator:
    support = SCATTER
    red = _common(device, desc, support)
    x, ind, u, y = desc.input_tensor, desc.indices_tensor, desc.updates_tensor, desc.output_tensor
    n = x.dimension_count
    axis = as_int(desc.axis, "axis")
    if not 0 <= axis < n:
        raise invalid("axis", f"must be in [0, {n}) (the tensors' dimension count), got {axis}")
    if any(a != b for d, (a, b) in enumerate(zip(x.sizes, ind.sizes)) if d != axis):
        raise invalid("indices_tensor.sizes", f"must equal input_tensor's {x.sizes} except at axis {axis}, got {ind.sizes}")
    if u.sizes != ind.sizes:
        raise invalid("updates_tensor.sizes", f"must equal indices_tensor's {ind.sizes}, got {u.sizes}")
    ys = y.effective_strides
    tuples = Tuples(sizes=list(ind.sizes), idx_str=list(ind.effective_strides),
                    base_str=[0 if d == axis else s for d, s in enumerate(ys)], upd_str=list(u.effective_strides),
                    q=1, q_str=0, dims=[y.sizes[axis]], dim_str=[ys[axis]])
    write = Space(list(ind.sizes), [0] * n, [0] * n, row_major(ind.sizes))
    ip = IndexPlans(device, desc, {"a": (0, x), "b": (1, ind), "u": (2, u), "o": (3, y)}, 4)
    return ip.compile(support, tuples, [_copy_space(x, y), write], line=(row_major(ind.sizes)[axis], ind.sizes[axis]),
                      reduction=red)


def compile_scatter_nd(device: Device, desc: ScatterNdDesc) -> CompiledOperator:
    support = SCATTER_ND
    red = _common(device, desc, support)
    x, ind, u, y = desc.input_tensor, desc.indices_tensor, desc.updates_tensor, desc.output_tensor
    ic, jc = as_int(desc.input_dimension_count, "input_dimension_count"), as_int(desc.indices_dimension_count,
                                                                                "indices_dimension_count")
    expected, roles, q = nd_layout(y, ind, ic, jc, 0, "input_tensor")
    if u.sizes != expected:
        raise invalid("updates_tensor.sizes", f"must be {expected} (the indices' sizes but the last, then "
                                              f"input_tensor's after the {q} indexed), got {u.sizes}")
    tuples = nd_tuples(y, ind, ic, jc, 0, q)
    us = u.effective_strides
    tuple_dim = {k: d for d, (kind, k) in enumerate(roles) if kind == "tuple"}
    tuples.upd_str = [us[tuple_dim[k]] if k in tuple_dim else 0 for k in range(len(tuples.sizes))]
    ip = IndexPlans(device, desc, {"a": (0, x), "b": (1, ind), "u": (2, u), "o": (3, y)}, 4)
    return ip.compile(support, tuples, [_copy_space(x, y), nd_space(u, roles, tuples, y.effective_strides, False)],
                      line=(1, tuples.count), reduction=red)


def _reduction(reduction: Any) -> ScatterReduction:
    names = {"none": 0, "add": 1, "mul": 2, "max": 3, "min": 4}
    if isinstance(reduction, str) and reduction in names:
        return ScatterReduction(names[reduction])
    try:
        return ScatterReduction(reduction)
    except ValueError:
        raise invalid("reduction", f"must be 'none', 'add', 'mul', 'max', 'min' or a kdml.ScatterReduction, "
                                   f"got {reduction!r}") from None


def scatter_elements(x: Any, indices: Any, updates: Any, axis: Any = 0, reduction: Any = "none", *,
                     out: Tensor | None = None, device: Device | None = None) -> Tensor:
    """ONNX ScatterElements on DML_SCATTER: a copy of x with updates[i..] written at
    x[.., indices[i..] at axis, ..] (indices and updates of x's rank, x's sizes except at axis);
    duplicates: the last in row-major order, or folded by `reduction` ('add', 'mul', 'max', 'min')."""
    dev, (t, it, ut) = _operands((x, indices, updates), ("x", "indices", "updates"), device, typed=slice(0, 0))
    a = _axis(axis, t.desc.dimension_count)
    od = _packed(t.desc.data_type, t.desc.sizes)
    desc = ScatterDesc(t.desc, it.desc, ut.desc, od, a, _reduction(reduction))
    return _run(dev, desc, [t, it, ut], t.desc.sizes, out)


def scatter_nd(x: Any, indices: Any, updates: Any, reduction: Any = "none", *, out: Tensor | None = None,
               device: Device | None = None) -> Tensor:
    """ONNX ScatterND on DML_SCATTER_ND: a copy of x with updates' sub-blocks written at the index
    tuples of indices' last dimension (updates: indices.shape[:-1] + x.shape[q:])."""
    dev, (t, it, ut) = _operands((x, indices, updates), ("x", "indices", "updates"), device, typed=slice(0, 0))
    r, m, k = t.desc.dimension_count, it.desc.dimension_count, ut.desc.dimension_count
    n = max(r, m, k)
    if n > 8:
        raise UnsupportedError(f"indices: scatter_nd needs {n} dimensions (at most 8)")
    xd, idd, ud = _padded(t.desc, n), _padded(it.desc, n), _padded(ut.desc, n)
    od = _packed(t.desc.data_type, xd.sizes)
    desc = ScatterNdDesc(xd, idd, ud, od, r, m, _reduction(reduction))
    ins = [Tensor(t.buffer, xd, t.offset), Tensor(it.buffer, idd, it.offset), Tensor(ut.buffer, ud, ut.offset)]
    return _run(dev, desc, ins, t.desc.sizes, out)


def scatter_rule(t: Any) -> str:
    """ONNX Scatter / ScatterElements / ScatterND: data of a DirectML type; a reduction only on
    float32 / int32 / uint32 data (kompute_dml's extension)."""
    dt = t.elem(0) if t.inputs else None
    if dt is None:
        return ""
    red = t.attr("reduction", "none")
    red = red.decode() if isinstance(red, bytes) else red
    if red != "none":
        allowed = {d.numpy_dtype for d in REDUCE_TYPES}
        return "" if dt in allowed else f"reduction {red} of type {dt} (the device folds float32 / int32 / uint32)"
    return "" if dt in {d.numpy_dtype for d in DataType} else f"type {dt} is not a DirectML type"


def _example(kind: str) -> Any:
    f32, u32 = D.FLOAT32, D.UINT32
    x = TensorDesc(f32, (1, 2, 3, 4))
    if kind == "nd":
        return ScatterNdDesc(x, TensorDesc(u32, (1, 1, 2, 2)), TensorDesc(f32, (1, 1, 2, 4)), x, 3, 2)
    return ScatterDesc(x, TensorDesc(u32, (1, 2, 2, 4)), TensorDesc(f32, (1, 2, 2, 4)), x, 2)


# DirectML.h: `using DML_SCATTER_ELEMENTS_OPERATOR_DESC = DML_SCATTER_OPERATOR_DESC` and
# DML_OPERATOR_SCATTER = DML_OPERATOR_SCATTER_ELEMENTS (94): one operator, so one spec, two names
EXPORTS = {"ScatterReduction": ScatterReduction, "ScatterElementsDesc": ScatterElementsDesc}
_FAMILIES = (contract.IDX_PREP, contract.IDX_LINK, contract.IDX_MOVE, contract.IDX_REDUCE)
SPECS = (
    OperatorSpec(ScatterDesc, SCATTER, compile_scatter, _FAMILIES, helpers=("scatter_elements",),
                 onnx=(OnnxOp("ScatterElements", "", "scatter_elements", check=scatter_rule),
                       OnnxOp("Scatter", "", "scatter_elements", check=scatter_rule)),
                 example=lambda: _example("elements")),
    OperatorSpec(ScatterNdDesc, SCATTER_ND, compile_scatter_nd, _FAMILIES, helpers=("scatter_nd",),
                 onnx=(OnnxOp("ScatterND", "", "scatter_nd", check=scatter_rule),), example=lambda: _example("nd")),
)
