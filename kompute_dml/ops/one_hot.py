"""DirectML's ONE_HOT operator (DML_ONE_HOT_OPERATOR_DESC): every sequence along `axis` of the
output is OffValue but at the position its index names (OnValue there).

One invocation per output element (shaders/indexing.comp, mode `onehot`; ops/index_geometry.py):
its sequence's index (indices of INT32 / UINT32 / INT64 / UINT64, 64-bit as word pairs; negative
ones of signed types count from the end of the sequence; one outside it leaves the whole sequence
OffValue, as the page says), then the off or on value's bits (8/16-bit elements as word fields,
64-bit ones as word pairs). OffValue is the values tensor's element 0, OnValue its element 1
along the fastest-changing dimension of size > 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..core.errors import UnsupportedError, invalid
from ..core.inputs import as_host_array
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
from .gather import _padded, _run
from .index_geometry import IndexPlans, Space, check_dims
from .onnx_types import DML_NUMPY
from .spec import OnnxOp, OperatorSpec

_U32 = frozenset({D.UINT32})
_IDX = frozenset({D.INT64, D.INT32, D.UINT64, D.UINT32})
_DATA = FLOATS | INTS_8_32
# the page's rows (2_0, 2_1, 3_0) and kompute_dml's 4_1 row with 64-bit values (moved as bits)
ONE_HOT = OperatorSupport("ONE_HOT", 95, tuple(
    row(level, ("indices_tensor", "input", dims, idx), ("values_tensor", "input", dims, data),
        ("output_tensor", "output", dims, data))
    for level, dims, idx, data in ((FL.FL_2_0, (4, 4), _U32, FLOATS), (FL.FL_2_1, (4, 4), _U32, _DATA),
                                   (FL.FL_3_0, (1, 8), _IDX, _DATA),
                                   (FL.FL_4_1, (1, 8), _IDX, _DATA | INTS_64 | frozenset({D.FLOAT64})))))


@dataclass(frozen=True)
class OneHotDesc:
    """DML_ONE_HOT_OPERATOR_DESC { IndicesTensor, ValuesTensor, OutputTensor, Axis }: the three
    tensors of one DimensionCount; the indices' sizes are the output's with 1 at `axis`
    ([0, DimensionCount)); the values hold at least 2 elements, of the output's type."""

    indices_tensor: TensorDesc
    values_tensor: TensorDesc
    output_tensor: TensorDesc
    axis: int = 0


def compile_one_hot(device: Device, desc: OneHotDesc) -> CompiledOperator:
    support = ONE_HOT
    validate_tensors(support, device.feature_level, desc, support.fields, support.outputs)
    n = check_dims(desc, ("indices_tensor", "values_tensor", "output_tensor"))
    ind, v, y = desc.indices_tensor, desc.values_tensor, desc.output_tensor
    if y.data_type != v.data_type:
        raise invalid("output_tensor.data_type", f"must equal values_tensor's ({v.data_type.name}), got {y.data_type.name}")
    axis = as_int(desc.axis, "axis")
    if not 0 <= axis < n:
        raise invalid("axis", f"must be in [0, {n}) (the tensors' dimension count), got {axis}")
    want = (*y.sizes[:axis], 1, *y.sizes[axis + 1:])
    if ind.sizes != want:
        raise invalid("indices_tensor.sizes", f"must be output_tensor's sizes with 1 at axis {axis}: {want}, "
                                              f"got {ind.sizes}")
    if v.element_count < 2:
        raise invalid("values_tensor.sizes", f"must hold at least 2 elements (OffValue, OnValue), got {v.sizes}")
    check_no_overlap(y.sizes, y.effective_strides, "output_tensor")
    long = [d for d in range(n) if v.sizes[d] > 1]
    on = v.effective_strides[long[-1]]
    istr = list(ind.effective_strides)
    istr[axis] = 0
    ip = IndexPlans(device, desc, {"b": (0, ind), "u": (1, v), "o": (2, y)}, 3)
    ip.onehot = (axis + 8 - n, y.sizes[axis], 0, on)
    return ip.compile(support, None, [Space(list(y.sizes), istr, list(y.effective_strides), [0] * n)])


def one_hot(indices: Any, depth: Any, values: Any, axis: Any = -1, *, out: Tensor | None = None,
            device: Device | None = None) -> Tensor:
    """ONNX OneHot on DML_ONE_HOT: indices of rank r -> rank r + 1 with a new dimension of
    `depth` at `axis` ([-r - 1, r]), values[1] where the index (negative: from the end) is the
    position, values[0] elsewhere; the output has values' type."""
    d = as_int(depth, "depth")
    if d < 1:
        raise invalid("depth", f"must be at least 1, got {d}")
    scalar = False
    if not isinstance(indices, Tensor):
        indices = as_host_array(indices, "indices", dml=False)
        scalar = indices.ndim == 0
        indices = indices.reshape(1) if scalar else indices
    dev, (it, vt) = _operands((indices, values), ("indices", "values"), device, typed=slice(0, 0))
    r = 0 if scalar else it.desc.dimension_count
    a = as_int(axis, "axis")
    if not -r - 1 <= a <= r:
        raise invalid("axis", f"must be in [{-r - 1}, {r}] for indices of rank {r}, got {a}")
    a = 1 if scalar else a % (r + 1)  # rank-0 indices: computed as (1,), the result (depth,)
    r = it.desc.dimension_count
    n = r + 1
    if n > 8:
        raise UnsupportedError(f"indices: one_hot of rank-{r} indices needs {n} dimensions (at most 8)")
    sizes, strides = list(it.desc.sizes), list(it.desc.effective_strides)
    idd = TensorDesc(it.desc.data_type, (*sizes[:a], 1, *sizes[a:]), (*strides[:a], 0, *strides[a:]))
    vd = _padded(vt.desc, n)
    shape = (*sizes[:a], d, *sizes[a:])
    desc = OneHotDesc(idd, vd, _packed(vt.desc.data_type, shape), a)
    ins = [Tensor(it.buffer, idd, it.offset), Tensor(vt.buffer, vd, vt.offset)]
    return _run(dev, desc, ins, (d,) if scalar else shape, out)


def one_hot_rule(t: Any) -> str:
    """ONNX OneHot: values (input 2) of a DirectML type; indices of a DirectML type (other than
    32/64-bit integers: cast to INT32 on the device first, truncating as ONNX says)."""
    for i, what in ((0, "indices"), (2, "values")):
        dt = t.elem(i) if t.inputs > i else None
        if dt is not None and dt not in DML_NUMPY:
            return f"{what} type {dt} is not a DirectML type"
    return ""


SPECS = (
    OperatorSpec(OneHotDesc, ONE_HOT, compile_one_hot, (contract.ONE_HOT,), helpers=("one_hot",),
                 onnx=(OnnxOp("OneHot", "", "one_hot", check=one_hot_rule),),
                 example=lambda: OneHotDesc(TensorDesc(D.UINT32, (1, 1, 3, 1)), TensorDesc(D.FLOAT32, (1, 1, 1, 2)),
                                            TensorDesc(D.FLOAT32, (1, 1, 3, 4)), 3)),
)
