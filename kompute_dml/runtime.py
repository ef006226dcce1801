"""The thin layer over kp: cached pipelines, encoded dispatches, submissions, recordings.

kp builds one pipeline + descriptor set per `Manager.algorithm(...)` call and binds whole
buffers, so an algorithm is cached per (shader variant, bound buffers, grid). Push
constants carry everything else (binding offsets, shapes, strides, parameters).

kp 0.9 records no compute->compute barrier; kompute_dml builds kp with a small patch
(scripts/kp-0.9.0-kompute-dml.patch) that exposes kp::OpMemoryBarrier, and a recording
inserts one before every dispatch that touches a buffer an earlier dispatch wrote (RAW,
WAW) or read (WAR).
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import kp
import numpy as np

from .shaders import load_spirv

if TYPE_CHECKING:
    from .device import Device
    from .memory import Buffer

# Vulkan flag values (vulkan_core.h)
ACCESS_SHADER_READ = 0x20
ACCESS_SHADER_WRITE = 0x40
ACCESS_TRANSFER_READ = 0x800
ACCESS_TRANSFER_WRITE = 0x1000
STAGE_COMPUTE_SHADER = 0x800
STAGE_TRANSFER = 0x1000
_ALL_ACCESS = ACCESS_SHADER_READ | ACCESS_SHADER_WRITE | ACCESS_TRANSFER_READ | ACCESS_TRANSFER_WRITE
_ALL_STAGES = STAGE_COMPUTE_SHADER | STAGE_TRANSFER
_EMPTY_SPEC = np.zeros((0,), dtype=np.uint32)


@dataclass(frozen=True)
class DispatchPlan:
    """One shader dispatch of a compiled operator, independent of the bound buffers.

    `bindings[i]` is the index, in the operator's flat binding list (inputs then outputs),
    of the tensor bound at shader binding i (None binds the device's dummy buffer).
    `offset_slots` are (push-constant word, binding list index, unit in bytes): at encode
    time the word receives that tensor's byte offset divided by the unit.
    """

    variant: str
    bindings: tuple[int | None, ...]
    push: tuple[int, ...]
    groups: tuple[int, int, int]
    writes: tuple[int, ...]
    offset_slots: tuple[tuple[int, int, int], ...] = ()
    spec: tuple[int, ...] = ()  # specialization constants (uint32 words, constant_id 0, 1, ...)


@dataclass(frozen=True, eq=False)
class TransferPlan:
    """A transfer command on byte ranges of bound tensors' buffers, relative to the
    tensors' binding offsets: vkCmdCopyBuffer ("copy": `regions` rows are (src byte,
    dst byte, size); bindings (src, dst)) or vkCmdFillBuffer ("fill": rows are (dst byte,
    size), both multiples of 4; bindings (dst,); `value` is the 32-bit word written).

    Dense and row-contiguous copies, fills of zeros or of a repeated word: the DMA-style
    commands every Vulkan device has, and the fastest way to move bytes on lavapipe, whose
    compute shaders pay a per-lane bounds-checked loop for every buffer access."""

    kind: str
    bindings: tuple[int, ...]
    regions: np.ndarray
    writes: tuple[int, ...]
    value: int = 0

    @property
    def variant(self) -> str:
        return f"transfer:{self.kind}"

    @property
    def groups(self) -> tuple[int, int, int]:
        return (0, 0, 0)


def grid_for(invocations: int, local_size: int, max_count: int = 65535) -> tuple[int, int, int]:
    """Work-group grid covering `invocations`, folded into y beyond max_count groups."""
    groups = max(1, -(-invocations // local_size))
    if groups <= max_count:
        return (groups, 1, 1)
    gy = -(-groups // max_count)
    gx = -(-groups // gy)
    if gy > max_count:
        raise ValueError(f"{invocations} invocations exceed the dispatch grid")
    return (gx, gy, 1)


@dataclass
class EncodedDispatch:
    algorithm: Any
    push: np.ndarray
    tensors: list[Any]
    reads: frozenset[int]  # buffer serials
    writes: frozenset[int]
    write_buffers: list[Buffer] = field(default_factory=list)
    op: Any = None  # a prebuilt kp operation (transfers); None = OpAlgoDispatch(algorithm, push)
    skip: bool = False  # nothing to do (e.g. an exact in-place copy)


class PipelineCache:
    """LRU cache of kp algorithms keyed by (variant, buffer serials, grid, push size)."""

    def __init__(self, device: Device, capacity: int = 512) -> None:
        self.device = device
        self.capacity = capacity
        self._entries: collections.OrderedDict[tuple[Any, ...], Any] = collections.OrderedDict()
        self.hits = 0
        self.misses = 0

    def get(self, plan: DispatchPlan, buffers: list[Buffer]) -> Any:
        key = (plan.variant, tuple(b.serial for b in buffers), plan.groups, len(plan.push), plan.spec)
        algo = self._entries.get(key)
        if algo is not None:
            self._entries.move_to_end(key)
            self.hits += 1
            return algo
        self.misses += 1
        algo = self.device._mgr.algorithm(
            [b._kp for b in buffers],
            load_spirv(plan.variant),
            list(plan.groups),
            np.asarray(plan.spec, dtype=np.uint32) if plan.spec else _EMPTY_SPEC,
            np.asarray(plan.push, dtype=np.uint32),
        )
        self._entries[key] = algo
        # Evicted algorithms are dropped, not destroy()ed: a recorded replay sequence or a
        # pending Recording may still hold them, and kp frees an algorithm when its last
        # reference goes (explicit destroy() here crashed those later submissions).
        while len(self._entries) > self.capacity:
            self._entries.popitem(last=False)
        return algo

    def forget_buffer(self, serial: int) -> None:
        for key in [k for k in self._entries if serial in k[1]]:
            del self._entries[key]

    def clear(self) -> None:
        for algo in self._entries.values():
            algo.destroy()
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


def encode_transfer(plan: TransferPlan, bound: list[Any]) -> EncodedDispatch:
    tensors = [bound[i] for i in plan.bindings]
    dst = tensors[-1]
    if plan.kind == "copy":
        src = tensors[0]
        regions = plan.regions + np.array([src.offset, dst.offset, 0], dtype=np.int64)
        if src.buffer is dst.buffer:
            # An exact in-place copy: the bytes are already there (vkCmdCopyBuffer forbids
            # overlapping regions; the binding checks allow no other overlap).
            regions = regions[regions[:, 0] != regions[:, 1]]
        op = kp.OpCopyRegions(src.buffer._kp, dst.buffer._kp, regions.reshape(-1).tolist())
        reads = frozenset({src.buffer.serial}) - {dst.buffer.serial}
        return EncodedDispatch(
            algorithm=None, push=np.zeros(0, np.uint32), tensors=[src.buffer._kp, dst.buffer._kp], reads=reads,
            writes=frozenset({dst.buffer.serial}), write_buffers=[dst.buffer], op=op, skip=len(regions) == 0,
        )
    regions = plan.regions + np.array([dst.offset, 0], dtype=np.int64)
    op = kp.OpFillRegions(dst.buffer._kp, regions.reshape(-1).tolist(), int(plan.value) & 0xFFFFFFFF)
    return EncodedDispatch(
        algorithm=None, push=np.zeros(0, np.uint32), tensors=[dst.buffer._kp], reads=frozenset(),
        writes=frozenset({dst.buffer.serial}), write_buffers=[dst.buffer], op=op, skip=len(regions) == 0,
    )


def encode(device: Device, plan: DispatchPlan | TransferPlan, bound: list[Any]) -> EncodedDispatch:
    """Resolve a plan against bound Tensors (or None) into a kp operation."""
    if isinstance(plan, TransferPlan):
        return encode_transfer(plan, bound)
    buffers = []
    for idx in plan.bindings:
        t = bound[idx] if idx is not None else None
        buffers.append(t.buffer if t is not None else device._dummy)
    push = np.asarray(plan.push, dtype=np.uint32).copy()
    for word, idx, unit in plan.offset_slots:
        t = bound[idx]
        push[word] = (t.offset // unit) if t is not None else 0
    algo = device._pipelines.get(plan, buffers)
    writes = frozenset(bound[i].buffer.serial for i in plan.writes)
    reads = frozenset(b.serial for b in buffers) - writes
    return EncodedDispatch(
        algorithm=algo, push=push, tensors=[b._kp for b in buffers], reads=reads, writes=writes,
        write_buffers=[bound[i].buffer for i in plan.writes],
    )


def record_dispatches(seq: Any, dispatches: list[EncodedDispatch]) -> int:
    """Record dispatches into a kp sequence with the barriers their hazards need.

    A barrier covers every buffer touched since the previous barrier (its execution
    dependency orders all earlier compute and transfer work; its buffer memory barriers
    make every pending write visible), so the access sets can be reset after it."""
    written: set[int] = set()
    read: set[int] = set()
    touched: dict[int, Any] = {}
    barriers = 0
    for d in dispatches:
        if d.skip:
            continue
        if (d.reads & written) or (d.writes & (written | read)):
            seq.record(kp.OpMemoryBarrier(list(touched.values()), _ALL_ACCESS, _ALL_ACCESS, _ALL_STAGES, _ALL_STAGES, True))
            barriers += 1
            written.clear()
            read.clear()
            touched.clear()
        seq.record(d.op if d.op is not None else kp.OpAlgoDispatch(d.algorithm, d.push))
        written |= d.writes
        read |= d.reads
        for t in d.tensors:
            touched[id(t)] = t
    return barriers
