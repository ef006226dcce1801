"""Cached kp algorithms: the descriptor sets that bind buffers to a shared pipeline.

A device has one pipeline per (SPIR-V, specialization constants, push-constant size, binding
count), shared by every kp algorithm that uses it, and known by a handle (kp patch level 9:
`Manager.kdml_prepare_program`), found once per (variant, spec, push size) in this process. An
algorithm is then only a descriptor set (the buffers it binds), made from the handle without
passing the SPIR-V again (`Manager.kdml_algorithm`: at level 8 every new set copied and
compared the whole shader, ~50 us for an 80 KB variant), and cached per (shader variant,
bound buffers, push-constant size, specialization constants). The grid is given at each
dispatch (encode.py) and push constants carry everything else (binding offsets, shapes,
strides, parameters), so a new shape or new buffers never build a pipeline.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from typing import Any

from ..shaders import check_capabilities, load_spirv
from .memory import DeviceMemory
from .plans import DispatchPlan


class PipelineCache:
    """LRU cache of kp algorithms keyed by (variant, buffer serials, push size, spec)."""

    def __init__(self, manager: Any, capabilities: frozenset[str] = frozenset(), capacity: int = 512) -> None:
        self.manager = manager
        self.capabilities = capabilities  # the device's enabled optional features
        self.capacity = capacity
        self._entries: collections.OrderedDict[tuple[Any, ...], Any] = collections.OrderedDict()
        # SPIR-V by variant, checked (capabilities, staleness) and read once per device: a new
        # descriptor set must not cost a file read and a hash of the shader sources
        self._spirv: dict[str, bytes] = {}
        self._programs: dict[tuple[Any, ...], int] = {}  # (variant, spec, push words, bindings) -> handle
        self.hits = 0
        self.misses = 0

    def get(self, plan: DispatchPlan, memories: Sequence[DeviceMemory], serials: tuple[int, ...] | None = None) -> Any:
        """The algorithm binding `memories` (whose serials the caller may pass, made once)."""
        if serials is None:
            serials = tuple([m.serial for m in memories])
        key = (plan.variant, serials, len(plan.push), plan.spec)
        algo = self._entries.get(key)
        if algo is not None:
            self._entries.move_to_end(key)
            self.hits += 1
            return algo
        self.misses += 1
        algo = self.manager.kdml_algorithm([m.tensor for m in memories], self.program(plan))
        self._entries[key] = algo
        # Evicted algorithms are dropped, not destroy()ed: a recorded replay sequence or a
        # pending Recording may still hold them, and kp frees an algorithm when its last
        # reference goes (explicit destroy() here crashed those later submissions).
        while len(self._entries) > self.capacity:
            self._entries.popitem(last=False)
        return algo

    def spirv(self, variant: str) -> bytes:
        data = self._spirv.get(variant)
        if data is None:
            # A variant needing a feature the device did not enable is refused, never handed to
            # the driver (operators check at compile time too; this holds for any caller).
            check_capabilities(variant, self.capabilities)
            data = self._spirv[variant] = load_spirv(variant)
        return data

    def program(self, plan: DispatchPlan) -> int:
        """The handle of `plan`'s shared pipeline (created through the device's pipeline cache
        the first time the device sees its variant, spec and push size)."""
        key = (plan.variant, plan.spec, len(plan.push), len(plan.bindings))
        handle = self._programs.get(key)
        if handle is None:
            handle = self._programs[key] = int(self.manager.kdml_prepare_program(
                self.spirv(plan.variant), len(plan.bindings), [int(v) for v in plan.spec], len(plan.push)))
        return handle

    def prepare(self, plan: DispatchPlan) -> None:
        """Create the shared pipeline of `plan`'s variant, spec and push size, binding nothing."""
        self.program(plan)

    def forget_memory(self, serial: int) -> None:
        """Drop the algorithms bound to a released buffer."""
        for key in [k for k in self._entries if serial in k[1]]:
            del self._entries[key]

    def clear(self) -> None:
        for algo in self._entries.values():
            algo.destroy()
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)
