"""DirectML's GATHER_ND and GATHER_ND1 operators (DML_GATHER_ND_OPERATOR_DESC,
DML_GATHER_ND1_OPERATOR_DESC): whole sub-blocks of the input picked by index tuples,
output[batch, ...] = input[batch, indices[batch, ...], ...].

On shaders/indexing.comp (ops/index_geometry.py): a `prep` dispatch per index tuple (its element
offset into the input; an index outside its dimension sets the operator's check word, raised as
InvalidArgumentError after the submission with nothing written: docs/gather_nd.md), then one
invocation per output element copying its bits (8/16-bit elements as word fields, 64-bit ones as
word pairs; 64-bit indices as word pairs: no shaderInt64). Negative indices of signed types count
from the end of their dimension. Validation: the tables (UnsupportedError), then the page's
constraints (InvalidArgumentError whose message starts with the field).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..core.errors import UnsupportedError, invalid
from ..core.ints import as_int
from ..core.layout import check_no_overlap
from ..core.registry import FL, FLOATS, INTS_8_32, INTS_64, D, OperatorSupport, row
from ..core.tensor_desc import MAX_DIMENSIONS, TensorDesc
from ..device.device import Device
from ..device.memory import Tensor
from ..functional import _packed
from ..functional.elementwise import _operands
from .base import CompiledOperator, validate_tensors
from .contract import indexing as contract
from .gather import _padded, _run
from .index_geometry import IndexPlans, Space, Tuples, check_dims, check_types, row_major
from .spec import OnnxOp, OperatorSpec

_DATA = FLOATS | INTS_8_32
_IDX = frozenset({D.INT64, D.INT32, D.UINT64, D.UINT32})
# 4_1: the copies of the pages consulted list rows up to 3_0; kompute_dml adds a 4_1 row with
# GATHER's 4_1 types (64-bit elements as word pairs: ONNX GatherND of int64 / float64 data)
_DATA_64 = _DATA | INTS_64 | frozenset({D.FLOAT64})


def _table(name: str, op_type: int, rows: tuple[tuple[Any, tuple[int, int], frozenset, frozenset], ...]
           ) -> OperatorSupport:
    return OperatorSupport(name, op_type, tuple(
        row(level, ("input_tensor", "input", dims, data), ("indices_tensor", "input", dims, idx),
            ("output_tensor", "output", dims, data)) for level, dims, data, idx in rows))


GATHER_ND = _table("GATHER_ND", 108, ((FL.FL_2_1, (4, 4), _DATA, frozenset({D.UINT32})), (FL.FL_3_0, (1, 8), _DATA, _IDX),
                                      (FL.FL_4_1, (1, 8), _DATA_64, _IDX)))
GATHER_ND1 = _table("GATHER_ND1", 140, ((FL.FL_3_0, (1, 8), _DATA, _IDX), (FL.FL_4_1, (1, 8), _DATA_64, _IDX)))


@dataclass(frozen=True)
class GatherNdDesc:
    """DML_GATHER_ND_OPERATOR_DESC { InputTensor, IndicesTensor, OutputTensor, InputDimensionCount,
    IndicesDimensionCount }: GATHER_ND1 with no batch dimensions. The counts are the meaningful
    trailing dimensions of the input and the indices ([1, DimensionCount]; the leading others
    must be 1); the indices' last size is the tuple size q (1 to InputDimensionCount); the output's
    sizes are the indices' meaningful sizes but the last, then the input's after the q indexed
    ones, right-aligned (leading 1s added or cropped)."""

    input_tensor: TensorDesc
    indices_tensor: TensorDesc
    output_tensor: TensorDesc
    input_dimension_count: int
    indices_dimension_count: int


@dataclass(frozen=True)
class GatherNd1Desc:
    """DML_GATHER_ND1_OPERATOR_DESC: GatherNdDesc's fields and BatchDimensionCount, the leading
    meaningful dimensions of input and indices that are batches (equal sizes; [0, both counts))."""

    input_tensor: TensorDesc
    indices_tensor: TensorDesc
    output_tensor: TensorDesc
    input_dimension_count: int
    indices_dimension_count: int
    batch_dimension_count: int = 0


def nd_layout(x: TensorDesc, ind: TensorDesc, ic: int, jc: int, b: int, target: str
              ) -> tuple[tuple[int, ...], list[tuple[str, int]], int]:
    """The expected sizes of GATHER_ND's output / SCATTER_ND's updates and, per dimension, its
    role: ("pad", 0), ("tuple", k) the indices' k-th meaningful dimension, ("slice", d) input
    dimension d; and q. InvalidArgumentError for a broken rule."""
    n = x.dimension_count
    for f, v, hi in (("input_dimension_count", ic, n), ("indices_dimension_count", jc, n)):
        if not 1 <= v <= hi:
            raise invalid(f, f"must be in [1, {hi}] (the tensors' dimension count), got {v}")
    for f, t, c in (("input_tensor", x, ic), ("indices_tensor", ind, jc)):
        if any(s != 1 for s in t.sizes[:n - c]):
            raise invalid(f"{f}.sizes", f"the {n - c} leading sizes outside the dimension count {c} must be 1, "
                                        f"got {t.sizes}")
    if not (0 <= b < ic and b < jc):
        raise invalid("batch_dimension_count", f"must be in [0, {min(ic, jc)}) (below both dimension counts), got {b}")
    q = ind.sizes[-1]
    if not 1 <= q <= ic - b:
        raise invalid("indices_tensor.sizes", f"the last size (coordinates per tuple, {q}) must be in [1, {ic - b}] "
                                              f"({target}'s dimension count {ic} less {b} batch dimensions)")
    for k in range(b):
        if x.sizes[n - ic + k] != ind.sizes[n - jc + k]:
            raise invalid("indices_tensor.sizes", f"batch dimension {k} has size {ind.sizes[n - jc + k]}, "
                                                  f"{target}'s {x.sizes[n - ic + k]}")
    roles = [("tuple", k) for k in range(jc - 1)] + [("slice", d) for d in range(n - ic + b + q, n)]
    full = [ind.sizes[n - jc + k] if kind == "tuple" else x.sizes[k] for kind, k in roles]
    if len(full) > n:
        extra = len(full) - n
        if any(s != 1 for s in full[:extra]):
            raise invalid("output_tensor.sizes", f"{tuple(full)} has {len(full)} dimensions whose leading {extra} "
                                                 f"are not all 1: they cannot be cropped to {n}")
        return tuple(full[extra:]), roles[extra:], q
    return (1,) * (n - len(full)) + tuple(full), [("pad", 0)] * (n - len(full)) + roles, q


def nd_tuples(x: TensorDesc, ind: TensorDesc, ic: int, jc: int, b: int, q: int) -> Tuples:
    """The index tuples of GATHER_ND / SCATTER_ND into target x (its batch strides direct)."""
    n = x.dimension_count
    tdims = range(n - jc, n - 1)
    xs, js = x.effective_strides, ind.effective_strides
    return Tuples(sizes=[ind.sizes[d] for d in tdims], idx_str=[js[d] for d in tdims],
                  base_str=[xs[n - ic + k] if k < b else 0 for k in range(jc - 1)], upd_str=[0] * (jc - 1),
                  q=q, q_str=js[n - 1], dims=[x.sizes[n - ic + b + j] for j in range(q)],
                  dim_str=[xs[n - ic + b + j] for j in range(q)])


def nd_space(y: TensorDesc, roles: list[tuple[str, int]], tuples: Tuples, x_str: tuple[int, ...],
             full: bool) -> Space:
    """The iteration space over y (GATHER_ND's output, SCATTER_ND's updates): s1 = x's strides of
    the slice dimensions, s2 = y's strides (all of them where `full`, else the slice ones)."""
    weights = row_major(tuples.sizes)
    ys = y.effective_strides
    return Space(list(y.sizes), [x_str[k] if kind == "slice" else 0 for kind, k in roles],
                 [s if full or kind == "slice" else 0 for s, (kind, _) in zip(ys, roles)],
                 [weights[k] if kind == "tuple" else 0 for kind, k in roles])


def _compile(device: Device, desc: Any, support: OperatorSupport, b: int) -> CompiledOperator:
    validate_tensors(support, device.feature_level, desc, support.fields, support.outputs)
    check_dims(desc, ("input_tensor", "indices_tensor", "output_tensor"))
    check_types(desc, ("input_tensor", "output_tensor"))
    x, ind, y = desc.input_tensor, desc.indices_tensor, desc.output_tensor
    ic, jc = as_int(desc.input_dimension_count, "input_dimension_count"), as_int(desc.indices_dimension_count,
                                                                                "indices_dimension_count")
    expected, roles, q = nd_layout(x, ind, ic, jc, b, "input_tensor")
    if y.sizes != expected:
        raise invalid("output_tensor.sizes", f"must be {expected} (the indices' sizes but the last, then "
                                             f"input_tensor's after the {q} indexed), got {y.sizes}")
    check_no_overlap(y.sizes, y.effective_strides, "output_tensor")
    tuples = nd_tuples(x, ind, ic, jc, b, q)
    ip = IndexPlans(device, desc, {"a": (0, x), "b": (1, ind), "o": (2, y)}, 3)
    return ip.compile(support, tuples, [nd_space(y, roles, tuples, x.effective_strides, True)], gather=True)


def compile_gather_nd(device: Device, desc: GatherNdDesc) -> CompiledOperator:
    return _compile(device, desc, GATHER_ND, 0)


def compile_gather_nd1(device: Device, desc: GatherNd1Desc) -> CompiledOperator:
    return _compile(device, desc, GATHER_ND1, as_int(desc.batch_dimension_count, "batch_dimension_count"))


def gather_nd(x: Any, indices: Any, batch_dims: Any = 0, *, out: Tensor | None = None,
              device: Device | None = None) -> Tensor:
    """ONNX GatherND on DML_GATHER_ND1: output = x's sub-blocks at the index tuples of `indices`'
    last dimension, shape indices.shape[:-1] + x.shape[batch_dims + q:] (a rank-0 result as (1,));
    negative indices count from the end; an index outside its dimension raises
    InvalidArgumentError."""
    dev, (t, it) = _operands((x, indices), ("x", "indices"), device, typed=slice(0, 0))
    r, m = t.desc.dimension_count, it.desc.dimension_count
    b = as_int(batch_dims, "batch_dims")
    q = it.desc.sizes[-1]
    if not 0 <= b < min(r, m):
        raise invalid("batch_dims", f"must be in [0, {min(r, m)}) for x of rank {r} and indices of rank {m}, got {b}")
    if not 1 <= q <= r - b:
        raise invalid("indices", f"the last size ({q}) must be in [1, {r - b}] (x's rank less batch_dims)")
    shape = it.desc.sizes[:-1] + t.desc.sizes[b + q:]
    n = max(r, m, len(shape))
    if n > MAX_DIMENSIONS:
        raise UnsupportedError(f"indices: gather_nd of rank-{r} x by rank-{m} indices needs {n} dimensions "
                               f"(at most {MAX_DIMENSIONS})")
    xd, idd = _padded(t.desc, n), _padded(it.desc, n)
    od = _packed(t.desc.data_type, (1,) * (n - len(shape)) + shape)
    desc = GatherNd1Desc(xd, idd, od, r, m, b)
    return _run(dev, desc, [Tensor(t.buffer, xd, t.offset), Tensor(it.buffer, idd, it.offset)], shape or (1,), out)


def _example(cls: type) -> Any:
    f32, u32 = D.FLOAT32, D.UINT32
    return cls(TensorDesc(f32, (1, 3, 4, 5)), TensorDesc(u32, (1, 1, 2, 2)), TensorDesc(f32, (1, 1, 2, 5)), 3, 2)


SPECS = (
    OperatorSpec(GatherNdDesc, GATHER_ND, compile_gather_nd, (contract.IDX_PREP, contract.IDX_MOVE),
                 example=lambda: _example(GatherNdDesc)),
    OperatorSpec(GatherNd1Desc, GATHER_ND1, compile_gather_nd1, (contract.IDX_PREP, contract.IDX_MOVE),
                 helpers=("gather_nd",), onnx=(OnnxOp("GatherND", "", "gather_nd"),),
                 example=lambda: _example(GatherNd1Desc)),
)
