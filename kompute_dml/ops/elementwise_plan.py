"""Dispatch plans of the element-wise operators (ops/elementwise.py, shaders/elementwise.comp).

Every tensor of the operator (inputs, then the output) is addressed through its own strides
over the output's sizes (a stride of 0 broadcasts). The dimensions are merged where they are
contiguous in every tensor and size-1 dimensions dropped (layout.merge_dims); the shader
walks up to `contract.EW_RANK` of them (`EW_IF_RANK` for IF's four tensors). Beyond that the
host enumerates the smallest merged dimensions, one dispatch per coordinate with per-tensor
base offsets: with at most 8 dimensions of size >= 2 that is at most two (IF: four) of the
smallest, whose product is at most count^(1/4) (IF: count^(1/2)).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

from ..core.errors import UnsupportedError
from ..core.ints import cdiv
from ..core.layout import merge_dims
from ..core.tensor_desc import TensorDesc
from ..runtime import DispatchPlan, grid_for
from . import contract
from .split_range import binding_window, fits, split_outer

LOCAL_SIZE = 256
_U32 = 1 << 32


def _prefixes(n_tensors: int) -> tuple[str, ...]:
    """The push-block member prefixes of the operator's tensors, in binding order."""
    return {2: ("a", "o"), 3: ("a", "b", "o"), 4: ("c", "a", "b", "o")}[n_tensors]


def check_addressable(fields: Sequence[str], descs: Sequence[TensorDesc]) -> None:
    """UnsupportedError where an element index does not fit the shader's 32-bit words (64-bit
    elements: word 2e + 1)."""
    for name, d in zip(fields, descs):
        last = sum((s - 1) * st for s, st in zip(d.sizes, d.effective_strides))
        limit = _U32 // 2 if d.data_type.size == 8 else _U32
        if last >= limit:
            raise UnsupportedError(f"{name}: element index {last} exceeds the 32-bit addressing of the element-wise "
                                   f"shaders (at most {limit - 1})")


def device_limits(device: Any) -> dict[str, Any]:
    """plan_elementwise's keywords from a device's limits: the grid's x limit, the binding window."""
    return {"max_groups": device.limits["max_compute_work_group_count"][0], "window": binding_window(device.limits)}


def plan_elementwise(family: contract.ShaderFamily, variant: str, descs: Sequence[TensorDesc],
                     max_groups: int = 65535, unused_b: Sequence[int] = (), prm: Sequence[int] = (),
                     window: tuple[int, int] = (0, 16), vector: str | None = None) -> list[DispatchPlan]:
    """The dispatches of one element-wise operator: `descs` are its tensors in binding order
    (the output last), all of the output's sizes. `unused_b`: for one input, the first words of
    the block's unused b_str (an operator's parameters: scale, bias, modes), the rest 0; `prm`:
    the words of a block's `prm` member (contract.EW_MATH_PUSH), the rest 0. The dimensions the
    shader walks are the block's (`size`). `window`: the device's binding window
    (split_range.binding_window): tensors larger than one are cut along their outermost
    dimensions, a dispatch group per part (split_range.split_outer)."""
    if not fits(descs, window):
        rank = descs[-1].dimension_count
        return split_outer(descs, [[d] * len(descs) for d in range(rank)], window,  # type: ignore[return-value]
                           lambda parts: plan_elementwise(family, variant, parts, max_groups, unused_b, prm,
                                                          vector=vector))
    out = descs[-1]
    n = len(descs)
    prefixes = _prefixes(n)
    push = getattr(family, "push", None)  # (GATHER's wrapper has none: the element-wise block's ranks)
    layout = {name: words for name, _, words in push.layout()} if push is not None else {}
    rank = layout.get("size", contract.EW_IF_RANK if n == 4 else contract.EW_RANK)
    sizes, strides = merge_dims(out.sizes, *(d.effective_strides for d in descs))
    host = sorted(sorted(range(len(sizes)), key=lambda d: sizes[d])[:max(0, len(sizes) - rank)])
    inner = [d for d in range(len(sizes)) if d not in host]
    pad = [1] * (rank - len(inner))
    count = math.prod(sizes[d] for d in inner)
    per_inv = max(1, 4 // out.data_type.size)
    if vector is not None and len(sizes) == 1 and all(st[0] == 1 for st in strides):
        variant, per_inv = vector, 16 // out.data_type.size
    groups = grid_for(cdiv(count, per_inv), LOCAL_SIZE, max_groups)
    fixed: dict[str, object] = {"count": count, "size": [*pad, *(sizes[d] for d in inner)]}
    if n == 2:  # IS_NAN: one input, the block's B members unused
        fixed.update(b_off=0, b_base=0, b_str=[*unused_b, *[0] * (rank - len(unused_b))])
    if "prm" in layout:
        fixed["prm"] = [*prm, *[0] * (layout["prm"] - len(prm))]
    for p, st in zip(prefixes, strides):
        fixed[f"{p}_off"] = 0
        fixed[f"{p}_str"] = [0] * len(pad) + [st[d] for d in inner]
    slots = family.slots(**{f"{p}_off": (i, d.data_type.size) for i, (p, d) in enumerate(zip(prefixes, descs))})
    plans = []
    for coord in itertools.product(*(range(sizes[d]) for d in host)):
        bases = {f"{p}_base": sum(c * st[d] for c, d in zip(coord, host)) for p, st in zip(prefixes, strides)}
        plans.append(DispatchPlan(
            variant=variant, bindings=tuple(range(n)), push=family.pack(**fixed, **bases), groups=groups,
            writes=(n - 1,), offset_slots=slots,
        ))
    return plans
