"""DirectML's TOP_K1: the K largest (AxisDirection DECREASING) or smallest (INCREASING) elements of
each sequence along Axis, sorted (largest first, or smallest first), with their indices within the
sequence; tied values ordered by ascending index, whatever the direction (the page). On
shaders/topk.comp (contract.TOPK), docs/top_k.md:

- a sequence of at most 1024 elements: one work group per sequence sorts its (key, index) pairs in
  shared memory (bitonic, padded to a power of two) and writes the first K: one dispatch;
- longer ones: a work group per tile of 1024 sorts it and keeps its best min(K, 1024) as the
  sequence's candidates (the operator's scratch), then each candidate's rank among the candidates
  is counted (a work group per 256 of them) and the K of rank < K are written at their rank: two
  dispatches, the second O(candidates^2) per sequence, so a K near a long axis is slow (K <= 1024:
  at most tiles x K candidates).

Values are copied from the input at their index (bit for bit, NaN payloads included); floats order
by value with -0 equal to +0 (a tie, by index) and every NaN above +inf (numpy's sort order: the
largest K take NaNs first, the smallest last). Tables: 2_1 4 dimensions, 3_1 1 to 8 (FLOAT32,
FLOAT16, 8- to 32-bit integers; UINT32 indices); 5_0 adds INT64 / UINT64 values and UINT64
indices (the 5_0 rows of the other operators' pages: TOP_K1's page as stored here stops at 3_1).
K from 1 to the axis' length (the page says "less than"; equal is taken: ONNX allows it).

ONNX TopK (onnx_backend/handlers_reduce.py): `k` read on the host (a constant plans as usual; a
fed one makes the model run node by node, k read at each run; opset 1's attribute), `largest`,
`sorted` (unsorted results come sorted: ONNX leaves their order free), `axis`; its int64 indices
are the UINT64 index output over the same bytes; every DirectML type but float64.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any

from ..core.dtypes import DataType
from ..core.errors import UnsupportedError, invalid
from ..core.ints import as_int, cdiv
from ..core.layout import check_no_overlap, merge_dims
from ..core.registry import FL, FLOATS, INTS_8_32, INTS_64, D, OperatorSupport, row
from ..core.tensor_desc import TensorDesc
from ..device.device import Device
from ..device.memory import Tensor
from ..functional import _packed, check_out, compile_cached, pooled_empty
from ..functional.elementwise import _operands
from ..runtime import DispatchPlan, TransferPlan, grid_for
from ..runtime.llvmpipe import CPU_WALK_MAX
from . import contract
from .base import CompiledOperator, validate_tensors
from .cumulative import AxisDirection
from .elementwise import type_code
from .elementwise_plan import check_addressable
from .onnx_types import DML_NUMPY, NodeTypes
from .spec import OnnxOp, OperatorSpec

_VALUES = FLOATS | INTS_8_32
_U32 = frozenset({D.UINT32})
TOP_K1 = OperatorSupport("TOP_K1", 112, tuple(
    row(level, ("input_tensor", "input", dims, vals), ("output_value_tensor", "output", dims, vals),
        ("output_index_tensor", "output", dims, idx))
    for level, dims, vals, idx in ((FL.FL_2_1, (4, 4), _VALUES, _U32), (FL.FL_3_1, (1, 8), _VALUES, _U32),
                                   (FL.FL_5_0, (1, 8), _VALUES | INTS_64, _U32 | {D.UINT64}))))
TILE = contract.TOPK_TILE
_X, _V, _I, _SCRATCH = range(4)


@dataclass(frozen=True)
class TopK1Desc:
    """DML_TOP_K1_OPERATOR_DESC { InputTensor, OutputValueTensor, OutputIndexTensor, Axis, K,
    AxisDirection }: per sequence along `axis`, the K largest (DECREASING) or smallest (INCREASING)
    values sorted that way and their indices within the sequence (ties by ascending index). The
    outputs have the input's sizes with K along the axis; the values the input's DataType."""

    input_tensor: TensorDesc
    output_value_tensor: TensorDesc
    output_index_tensor: TensorDesc
    axis: int
    k: int
    axis_direction: AxisDirection = AxisDirection.DECREASING


def _check(desc: TopK1Desc) -> tuple[int, int]:
    x, v, i = desc.input_tensor, desc.output_value_tensor, desc.output_index_tensor
    n = x.dimension_count
    for field, t in (("output_value_tensor", v), ("output_index_tensor", i)):
        if t.dimension_count != n:
            raise invalid(f"{field}.sizes", f"dimension count must equal input_tensor's ({n}), got {t.dimension_count}")
    axis, k = as_int(desc.axis, "axis"), as_int(desc.k, "k")
    if not 0 <= axis < n:
        raise invalid("axis", f"must be in [0, {n}) (input_tensor's dimension count), got {axis}")
    length = x.sizes[axis]
    if not 1 <= k <= length:
        raise invalid("k", f"must be in [1, {length}] (input_tensor's size along axis {axis}), got {k}")
    want = (*x.sizes[:axis], k, *x.sizes[axis + 1:])
    for field, t in (("output_value_tensor", v), ("output_index_tensor", i)):
        if t.sizes != want:
            raise invalid(f"{field}.sizes", f"must be input_tensor's sizes with K along axis {axis}, {want}, got {t.sizes}")
    if v.data_type != x.data_type:
        raise invalid("output_value_tensor.data_type", f"must equal input_tensor's ({x.data_type.name}), "
                                                       f"got {v.data_type.name}")
    mode = desc.axis_direction
    if isinstance(mode, bool) or mode not in set(AxisDirection):
        raise invalid("axis_direction", f"must be a kdml.AxisDirection (0 or 1), got {mode!r}")
    for field, t in (("output_value_tensor", v), ("output_index_tensor", i)):
        check_no_overlap(t.sizes, t.effective_strides, field)
    check_addressable(("input_tensor", "output_value_tensor", "output_index_tensor"), (x, v, i))
    return axis, k


def candidates(length: int, k: int) -> int:
    """A sequence's candidates: min(K, TILE) from each tile of TILE elements where it has more than one
    tile, else none (one work group sorts it whole)."""
    return cdiv(length, TILE) * min(k, TILE) if length > TILE else 0


def _plans(desc: TopK1Desc, axis: int, k: int, max_groups: int) -> tuple[list[DispatchPlan | TransferPlan], int]:
    """The dispatches and the scratch words they need (0: one tile per sequence, none)."""
    x, v, i = desc.input_tensor, desc.output_value_tensor, desc.output_index_tensor
    outer = [d for d in range(x.dimension_count) if d != axis]
    strides = [[t.effective_strides[d] for d in outer] for t in (x, v, i)]
    sizes, merged = merge_dims([x.sizes[d] for d in outer], *strides)
    rank = contract.TOPK_RANK
    host = sorted(sorted(range(len(sizes)), key=lambda d: sizes[d])[:max(0, len(sizes) - rank)])
    inner = [d for d in range(len(sizes)) if d not in host]
    pad = [1] * (rank - len(inner))
    rows = math.prod(sizes[d] for d in inner)
    length = x.sizes[axis]
    ntiles = 1 if length <= TILE else cdiv(length, TILE)
    cand = candidates(length, k)
    f = contract.TOPK
    t = type_code(x.data_type, True)
    ib = 8 * i.data_type.size
    direction = int(desc.axis_direction == AxisDirection.INCREASING)
    tile = TILE if ntiles > 1 else max(2, 1 << (length - 1).bit_length())
    fixed = dict(x_off=0, v_off=0, i_off=0, rows=rows, len=length, k=k, tile=tile, ntiles=ntiles, cand=cand,
                 size=[*pad, *(sizes[d] for d in inner)], x_ax=x.effective_strides[axis], v_ax=v.effective_strides[axis],
                 i_ax=i.effective_strides[axis])
    for p, st in zip(("x", "v", "i"), merged):
        fixed[f"{p}_str"] = [0] * len(pad) + [st[d] for d in inner]
    slots = f.slots(x_off=(_X, x.data_type.size), v_off=(_V, v.data_type.size), i_off=(_I, i.data_type.size))
    plans: list[DispatchPlan | TransferPlan] = []
    for n, coord in enumerate(itertools.product(*(range(sizes[d]) for d in host))):
        bases = {f"{p}_base": sum(c * st[d] for c, d in zip(coord, host)) for p, st in zip(("x", "v", "i"), merged)}
        common = dict(**fixed, **bases, r_base=n * rows)
        if ntiles == 1:
            plans.append(DispatchPlan(variant=f.name(mode="tile", t=t, ib=ib), bindings=(_X, _V, _I, None),
                                      push=f.pack(**common, flags=direction | 2), writes=(_V, _I), offset_slots=slots,
                                      groups=grid_for(rows * 256, 256, max_groups)))
            continue
        plans.append(DispatchPlan(variant=f.name(mode="tile", t=t, ib=ib), bindings=(_X, _V, _I, _SCRATCH),
                                  push=f.pack(**common, flags=direction), writes=(_SCRATCH,), offset_slots=slots,
                                  groups=grid_for(rows * ntiles * 256, 256, max_groups)))
        plans.append(DispatchPlan(variant=f.name(mode="rank", t=t, ib=ib), bindings=(_X, _V, _I, _SCRATCH),
                                  push=f.pack(**common, flags=direction), writes=(_V, _I), offset_slots=slots,
                                  groups=grid_for(rows * cdiv(cand, 256) * 256, 256, max_groups)))
    n_host = math.prod(sizes[d] for d in host)  # each host-enumerated coordinate: rows of its own
    words = n_host * rows * cand * (3 if x.data_type.size == 8 else 2)  # key word(s), then the index
    return plans, words


def compile_top_k(device: Device, desc: TopK1Desc) -> CompiledOperator:
    support = TOP_K1
    validate_tensors(support, device.feature_level, desc, support.fields, support.outputs)
    plans, constants = plan_top_k(device, desc)
    return CompiledOperator(device, desc, support, support.inputs, support.outputs, plans, constants=constants)


def plan_top_k(device: Device, desc: TopK1Desc) -> tuple[list[DispatchPlan | TransferPlan], list[Tensor]]:
    """The descriptor's rules after its table (TOP_K, the first version, plans through it), then
    its dispatches and the operator's constants (the candidates' scratch)."""
    axis, k = _check(desc)
    cand = candidates(desc.input_tensor.sizes[axis], k)
    if cand > CPU_WALK_MAX and device.device_type == "cpu":  # the rank pass walks every candidate in one invocation
        raise UnsupportedError(f"k: {k} of {desc.input_tensor.sizes[axis]} elements make {cand} candidates, past this CPU "
                               f"device's loop limit for ranking them ({CPU_WALK_MAX}: runtime/llvmpipe.py)")
    plans, words = _plans(desc, axis, k, device.limits["max_compute_work_group_count"][0])
    constants: list[Tensor] = []
    if words:  # the candidates: every word the rank dispatch reads, the tile dispatch writes first
        sd = TensorDesc(DataType.UINT32, (words,))
        constants.append(Tensor.scratch(device, sd))
    return plans, constants


def top_k(x: Any, k: int, *, axis: int = -1, largest: bool = True, index_type: Any = D.UINT32,
          out: tuple[Tensor, Tensor] | None = None, device: Device | None = None) -> tuple[Tensor, Tensor]:
    """(values, indices) of the k largest (or smallest) elements along `axis`, sorted, ties by
    ascending index (DML_TOP_K1); indices UINT32 or UINT64 (`index_type`, or `out`'s)."""
    dev, (t,) = _operands((x,), ("x",), device)
    d = t.desc
    ax = as_int(axis, "axis")
    ax = ax + d.dimension_count if ax < 0 else ax
    sizes = (*d.sizes[:ax], as_int(k, "k"), *d.sizes[ax + 1:]) if 0 <= ax < d.dimension_count else d.sizes
    it = D.coerce(index_type, "index_type") if out is None else out[1].desc.data_type
    if out is not None:
        check_out(out[0], dev, sizes, d.data_type)
        check_out(out[1], dev, sizes, it)
    vd = out[0].desc if out is not None else _packed(d.data_type, sizes)
    idd = out[1].desc if out is not None else _packed(it, sizes)
    direction = AxisDirection.DECREASING if largest else AxisDirection.INCREASING
    op = compile_cached(dev, TopK1Desc(d, vd, idd, ax, k, direction))
    values, indices = (out if out is not None else (pooled_empty(dev, vd), pooled_empty(dev, idd)))
    op.execute([t], [values, indices])
    return values, indices


def topk_rule(t: NodeTypes) -> str:
    """ONNX TopK on the device: a DirectML type but float64."""
    dt = t.elem(0) if t.inputs else None
    if dt is not None and (dt not in DML_NUMPY or (dt.kind == "f" and dt.itemsize == 8)):
        return f"type {dt} is not one TOP_K1 takes"
    return ""


_F4 = TensorDesc(DataType.FLOAT32, (1, 2, 3, 4))
SPECS = (OperatorSpec(TopK1Desc, TOP_K1, compile_top_k, (contract.TOPK,), helpers=("top_k",),
                      onnx=(OnnxOp("TopK", "", "top_k", check=topk_rule),),  # onnx_backend/handlers_reduce.py
                      example=lambda: TopK1Desc(_F4, TensorDesc(DataType.FLOAT32, (1, 2, 3, 2)),
                                                TensorDesc(DataType.UINT32, (1, 2, 3, 2)), 3, 2)),)
