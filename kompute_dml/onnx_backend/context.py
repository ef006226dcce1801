"""What a device handler runs against: a typed context, never the prepared model itself.

Device handlers (handlers*.py), fused chains (fusions.py) and product groups (product_groups.py)
receive a `NodeContext`: node-by-node runs give them an `EagerContext` (the model's device
buffers, reused from run to run), a whole-graph plan its `PlanContext` (plan_context.py: the
plan's buffers and their liveness). Both implement the protocol below, so a handler is written
once for both executors. What a handler may read of the prepared model is `ctx.prepared`
(`PreparedGraph`): facts settled at `prepare`, never written by a run.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import onnx

import kompute_dml as kdml

from .values import RunStats

if TYPE_CHECKING:
    from .rep import BackendRep


class PreparedGraph(Protocol):
    """The prepared model's facts a handler may read."""

    model: onnx.ModelProto
    graph: onnx.GraphProto
    product_groups: dict[str, Any]  # product_groups.py: member output -> its group, found at prepare
    allow_half_precision: bool  # float32 products in float16 (half_precision.py)

    def constant_host(self, name: str) -> np.ndarray: ...

    def is_constant(self, name: str | None) -> bool: ...


class NodeContext(Protocol):
    """The calls a device handler makes while its node runs (eagerly) or is recorded (a plan)."""

    device: kdml.Device

    @property
    def prepared(self) -> PreparedGraph: ...

    @property
    def memo(self) -> dict[Any, Any]: ...  # results handlers share within one run or plan

    def host(self, value: Any, stats: RunStats) -> Any: ...

    def is_constant(self, name: str | None) -> bool: ...

    def to_device(self, value: Any, stats: RunStats, name: str | None = None) -> kdml.Tensor: ...

    def upload_group(self, arrays: list[np.ndarray], stats: RunStats,
                     names: tuple[str | None, ...] | None = None) -> list[kdml.Tensor]: ...

    def weight_to_device(self, name: str, rows: int, stats: RunStats) -> kdml.Tensor: ...

    def constant_as(self, name: str, dtype: Any, stats: RunStats) -> kdml.Tensor: ...  # converted once

    def out_tensor(self, sizes: Sequence[int], dtype: Any, over: Any = None) -> kdml.Tensor: ...

    def hold_for_members(self, value: Any, members: int) -> None: ...

    def release_after_node(self, value: Any) -> None: ...

    def attach(self, owner: Any, *values: Any) -> None: ...

    def note(self, msg: str) -> None: ...


class EagerContext:
    """NodeContext of node-by-node runs: the prepared model's transfers and reused device buffers
    (transfers.py); nothing to hold, since a run keeps every value until its last reader ends."""

    def __init__(self, rep: BackendRep) -> None:
        self._rep = rep
        self.device = rep.device
        self.host = rep.host
        self.is_constant = rep.is_constant
        self.to_device = rep.to_device
        self.upload_group = rep.upload_group
        self.weight_to_device = rep.weight_to_device
        self.constant_as = rep.constant_as
        self.out_tensor = rep.out_tensor
        self.note = rep._note

    @property
    def prepared(self) -> PreparedGraph:
        return self._rep

    @property
    def memo(self) -> dict[Any, Any]:
        return self._rep.state.memo

    def hold_for_members(self, value: Any, members: int) -> None:
        pass

    def release_after_node(self, value: Any) -> None:
        pass

    def attach(self, owner: Any, *values: Any) -> None:
        pass
