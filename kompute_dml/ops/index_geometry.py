"""What GATHER_ND / GATHER_ND1 (ops/gather_nd.py), SCATTER / SCATTER_ND (ops/scatter.py) and ONE_HOT
(ops/one_hot.py) share: the geometry constant shaders/indexing.comp reads, and the dispatch plans.

An operator is seen as index tuples (T of them, each of q coordinates into a target tensor: the
input of a gather, the output of a scatter) and iteration spaces of up to 8 dimensions. The plans,
in order: the check word's fill; `prep`, one invocation per tuple: its element offset into the
target, or the row-major position of an index outside its dimension atomicMin'd into the check
word (ops/device_check.py: raised on the host after the submission, nothing written); for scatters
`link` (each tuple's next duplicate and whether it is the first of its position: duplicates are
looked for along a line of tuples) and `copy` (input -> output); then the gather, the scatter (the
last of duplicates writes, in row-major order of the tuples) or kompute_dml's reduction (the first
of duplicates folds them all in order). Every dispatch after the check reads the word and writes
nothing once it is set.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.dtypes import DataType
from ..core.errors import UnsupportedError, invalid
from ..core.tensor_desc import TensorDesc
from ..device.memory import Tensor
from ..runtime import DispatchPlan, TransferPlan, grid_for
from ..runtime.llvmpipe import CPU_WALK_MAX
from .base import CompiledOperator
from .contract.indexing import IDX_LINK, IDX_MOVE, IDX_PREP, IDX_REDUCE, INDEX_PUSH, ONE_HOT
from .device_check import DeviceCheck
from .elementwise_plan import check_addressable

INDEX_CODE = {DataType.INT32: "i32", DataType.UINT32: "u32", DataType.INT64: "i64", DataType.UINT64: "u64"}
_SPACES = (64, 96)  # the words where iteration spaces 0 and 1 start (the tuple table: words 0-49)
_ROLES = ("a", "b", "u", "o", "geo", "scratch", "check")  # shader bindings 0-6
REDUCE_TYPES = {DataType.FLOAT32: "f32", DataType.INT32: "i32", DataType.UINT32: "u32"}


def pad8(values: Sequence[int], fill: int = 0) -> list[int]:
    """values right-aligned to 8 entries."""
    if len(values) > 8:
        raise ValueError(f"{len(values)} dimensions")
    return [fill] * (8 - len(values)) + [int(v) for v in values]


def row_major(sizes: Sequence[int]) -> list[int]:
    """Each dimension's weight in a row-major linear index over `sizes`."""
    out, w = [], 1
    for s in reversed(sizes):
        out.append(w)
        w *= s
    return out[::-1]


@dataclass
class Tuples:
    """The index tuples: their space's sizes and, per tuple dimension, the indices' stride (to the
    tuple's first coordinate), the target's direct stride (0 but for batches / SCATTER's
    non-axis dimensions) and the updates' stride; q coordinates `q_str` apart in the indices,
    coordinate j addressing a target dimension of length dims[j] and stride dim_str[j]."""

    sizes: list[int]
    idx_str: list[int]
    base_str: list[int]
    upd_str: list[int]
    q: int
    q_str: int
    dims: list[int]
    dim_str: list[int]

    @property
    def count(self) -> int:
        return math.prod(self.sizes)


@dataclass
class Space:
    """An iteration space: sizes, two stride sets (s1: the input / scatter target side, s2: the
    output / updates side) and each dimension's weight in the tuple's index (0: a slice dimension)."""

    sizes: list[int]
    s1: list[int]
    s2: list[int]
    tlin: list[int]

    @property
    def count(self) -> int:
        return math.prod(self.sizes)


def geometry_words(tuples: Tuples | None, spaces: Sequence[Space]) -> np.ndarray:
    words = np.zeros(128, np.uint32)
    if tuples is not None:
        t = tuples
        words[:50] = (pad8(t.sizes, 1) + pad8(t.idx_str) + pad8(t.base_str) + pad8(t.upd_str) + [t.q, t.q_str]
                      + t.dims + [0] * (8 - t.q) + t.dim_str + [0] * (8 - t.q))
    for at, s in zip(_SPACES, spaces):
        words[at:at + 32] = pad8(s.sizes, 1) + pad8(s.s1) + pad8(s.s2) + pad8(s.tlin)
    return words


class IndexPlans:
    """The plans of one operator over its binding list: `roles` maps the shader's tensors (a
    input, b indices, u updates / values, o output) to binding-list entries; the geometry, the
    scratch and the check word follow the inputs and outputs, in that order."""

    def __init__(self, device: Any, desc: Any, roles: dict[str, tuple[int, TensorDesc]], n_fields: int) -> None:
        self.device, self.desc = device, desc
        self.roles = dict(roles)
        self.n_fields = n_fields
        self.max_groups = device.limits["max_compute_work_group_count"][0]
        fields = [f for f in ("a", "b", "u", "o") if f in roles]
        check_addressable(fields, [roles[f][1] for f in fields])

    def _entry(self, role: str) -> int | None:
        if role in self.roles:
            return self.roles[role][0]
        extra = {"geo": 0, "scratch": 1, "check": 2}.get(role)
        return None if extra is None or extra >= self._n_constants else self.n_fields + extra

    def plan(self, family: Any, variant: str, count: int, space: int, p: Sequence[int], writes: tuple[str, ...]
             ) -> DispatchPlan:
        if count >= 1 << 32:
            raise UnsupportedError(f"{count} invocations exceed the indexing shader's 32-bit count")
        slots = {f"{r}_off": (self.roles[r][0], self.roles[r][1].data_type.size) for r in ("a", "b", "u", "o")
                 if r in self.roles}
        p = [*p, 0, 0, 0, 0][:4]
        return DispatchPlan(
            variant=variant, bindings=tuple(self._entry(r) for r in _ROLES),
            push=INDEX_PUSH.pack(a_off=0, b_off=0, u_off=0, o_off=0, count=count, space=_SPACES[space],
                                 p0=p[0], p1=p[1], p2=p[2], p3=p[3]),
            groups=grid_for(count, 256, self.max_groups), writes=tuple(int(self._entry(w)) for w in writes),  # type: ignore[arg-type]
            offset_slots=family.slots(**slots))

    def compile(self, support: Any, tuples: Tuples | None, spaces: Sequence[Space], *, gather: bool = False,
                line: tuple[int, int] = (1, 1), reduction: str = "none") -> CompiledOperator:
        """The operator: a gather (`gather`), a scatter (tuples, `line` = (step, length) of the
        candidates for duplicates) or, without tuples, ONE_HOT (space 0; set `onehot` first)."""
        self._n_constants = 1 if tuples is None else 3
        words = geometry_words(tuples, spaces)
        constants: list[Tensor] = [self.device.tensor(words)]
        plans: list[DispatchPlan | TransferPlan] = []
        if tuples is None:
            bits = 8 * self.roles["o"][1].data_type.size
            variant = ONE_HOT.name(bits=bits, idx=INDEX_CODE[self.roles["b"][1].data_type])
            plans.append(self.plan(ONE_HOT, variant, spaces[0].count, 0, self.onehot, ("o",)))
            return CompiledOperator(self.device, self.desc, support, support.inputs, support.outputs, plans,
                                    constants=constants)
        n = tuples.count
        if not gather and line[1] > CPU_WALK_MAX and self.device.device_type == "cpu":
            # the link pass walks a tuple's line in one invocation: past llvmpipe's loop limit it stops short
            raise UnsupportedError(f"indices_tensor: {line[1]} index tuples along one line pass this CPU device's loop "
                                   f"limit for finding duplicates ({CPU_WALK_MAX}: runtime/llvmpipe.py)")
        scratch_words = n if gather else 3 * n
        sd = TensorDesc(DataType.UINT32, (scratch_words,))
        constants.append(Tensor.scratch(self.device, sd))
        check = DeviceCheck(self.device, self.n_fields + 2, lambda position, bound: self._bad_index(tuples, position,
                                                                                                   bound))
        constants.append(check.word)
        idx = INDEX_CODE[self.roles["b"][1].data_type]
        plans += [check.fill, self.plan(IDX_PREP, IDX_PREP.name(idx=idx), n, 0, (), ("scratch", "check"))]
        bits = 8 * self.roles["o"][1].data_type.size
        if gather:
            plans.append(self.plan(IDX_MOVE, IDX_MOVE.name(mode="gather", bits=bits), spaces[0].count, 0, (n,), ("o",)))
        else:
            plans.append(self.plan(IDX_LINK, IDX_LINK.name(w="u32"), n, 0, (n, *line), ("scratch",)))
            plans.append(self.plan(IDX_MOVE, IDX_MOVE.name(mode="copy", bits=bits), spaces[0].count, 0, (), ("o",)))
            if reduction == "none":
                variant, fam = IDX_MOVE.name(mode="scatter", bits=bits), IDX_MOVE
            else:
                variant, fam = IDX_REDUCE.name(op=reduction, t=REDUCE_TYPES[self.roles["o"][1].data_type]), IDX_REDUCE
            plans.append(self.plan(fam, variant, spaces[1].count, 1, (n,), ("o",)))
        op = CompiledOperator(self.device, self.desc, support, support.inputs, support.outputs, plans,
                              constants=constants)
        op.check = check
        return op

    onehot: tuple[int, ...] = ()

    def _bad_index(self, tuples: Tuples, position: int, bound: Sequence[Any]) -> str:
        """The error of the index at row-major `position` of the bound indices (read back here:
        the error path)."""
        entry, d = self.roles["b"]
        indices: Tensor = bound[entry]
        coords = tuple(int(c) for c in np.unravel_index(position, d.sizes))
        at = indices.offset + sum(c * s for c, s in zip(coords, d.effective_strides)) * d.data_type.size
        value = int(np.frombuffer(indices.buffer.read(at, d.data_type.size), d.data_type.numpy_dtype)[0])
        n = tuples.dims[position % tuples.q]
        lo = -n if d.data_type.is_signed else 0
        return (f"indices_tensor: index {value} at position {coords} (element {position} in row-major order) is "
                f"outside [{lo}, {n - 1}] (the size of the dimension it indexes): nothing was written")


def check_dims(desc: Any, fields: Sequence[str]) -> int:
    """DirectML's constraint: `fields` have one DimensionCount (returned)."""
    n = getattr(desc, fields[0]).dimension_count
    for f in fields[1:]:
        t = getattr(desc, f)
        if t.dimension_count != n:
            raise invalid(f"{f}.sizes", f"dimension count must equal {fields[0]}'s ({n}), got {t.dimension_count}")
    return n


def check_types(desc: Any, fields: Sequence[str]) -> None:
    ref = getattr(desc, fields[0]).data_type
    for f in fields[1:]:
        t = getattr(desc, f).data_type
        if t != ref:
            raise invalid(f"{f}.data_type", f"must equal {fields[0]}'s ({ref.name}), got {t.name}")
