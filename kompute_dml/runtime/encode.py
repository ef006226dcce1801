"""Plans resolved against bound tensors into kp operations, and recorded into a kp sequence
with the barriers their hazards need.

A bound tensor is what ops/base.py binds (a kompute_dml Tensor): `.buffer.memory` is its
DeviceMemory and `.offset` its byte offset; None is an absent optional tensor.

kp 0.9 records no compute->compute barrier, and one transfer->compute barrier per bound
tensor before every dispatch; kompute_dml builds kp with a patch
(scripts/kp-patches/05-commands.patch) whose OpDispatch records the dispatch alone and whose
OpGlobalBarrier records one global memory barrier: a sequence gets one at its start and one
between levels of dispatches (`levels`: each dispatch after every earlier one that wrote a buffer
it touches (RAW, WAW) or read one it writes (WAR), as early as that allows).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import kp
import numpy as np

from ..core.tags import tag
from .memory import DeviceMemory, HostRange
from .pipelines import Programs
from .plans import DispatchPlan, Plan, TransferPlan

# Vulkan flag values (vulkan_core.h)
ACCESS_SHADER_READ = 0x20
ACCESS_SHADER_WRITE = 0x40
ACCESS_TRANSFER_READ = 0x800
ACCESS_TRANSFER_WRITE = 0x1000
ACCESS_HOST_READ = 0x2000
STAGE_HOST = 0x4000
STAGE_COMPUTE_SHADER = 0x800
STAGE_TRANSFER = 0x1000
_ALL_ACCESS = ACCESS_SHADER_READ | ACCESS_SHADER_WRITE | ACCESS_TRANSFER_READ | ACCESS_TRANSFER_WRITE
_ALL_STAGES = STAGE_COMPUTE_SHADER | STAGE_TRANSFER


@dataclass(slots=True)  # (one per dispatch a plan encodes: slots make it cheaper to build)
class EncodedDispatch:
    op: Any  # the kp operation to record (it holds the kp tensors it touches)
    reads: frozenset[int]  # DeviceMemory serials
    writes: frozenset[int]
    skip: bool = False  # nothing to do (e.g. an exact in-place copy)
    to_host: bool = False  # writes host memory the host reads after the submission


# A transfer of at most this many regions is offset in Python ints: numpy's per-call cost is most
# of a small one's encoding (a decoder's plan for a new length encodes dozens of new copies)
SMALL_REGIONS = 16


def _copy_regions(plan: TransferPlan, src_off: int, dst_off: int, in_place: bool) -> list[int]:
    """The copy's (src, dst, size) rows offset by its tensors', flat; in place (one memory), the
    rows whose bytes are already there left out (vkCmdCopyBuffer forbids overlapping regions; the
    binding checks allow no other overlap)."""
    if len(plan.regions) <= SMALL_REGIONS:
        flat: list[int] = []
        for s, d, n in plan.regions.tolist():
            if not (in_place and s + src_off == d + dst_off):
                flat += (s + src_off, d + dst_off, n)
        return flat
    regions = plan.regions + np.array([src_off, dst_off, 0], dtype=np.int64)
    if in_place:
        regions = regions[regions[:, 0] != regions[:, 1]]
    return regions.reshape(-1).tolist()


def _transfer(plan: TransferPlan, bound: Sequence[Any]) -> EncodedDispatch:
    tensors = [bound[i] for i in plan.bindings]
    dst = tensors[-1]
    dst_mem: DeviceMemory = dst.buffer.memory
    if plan.kind == "copy":
        src = tensors[0]
        src_mem: DeviceMemory = src.buffer.memory
        flat = _copy_regions(plan, src.offset, dst.offset, src_mem is dst_mem)
        op = kp.OpCopyRegions(src_mem.tensor, dst_mem.tensor, flat)
        return EncodedDispatch(
            op, frozenset({src_mem.serial}) - {dst_mem.serial}, frozenset({dst_mem.serial}), skip=not flat,
            to_host=isinstance(dst, HostRange),
        )
    if len(plan.regions) <= SMALL_REGIONS:
        flat = [v for at, n in plan.regions.tolist() for v in (at + dst.offset, n)]
    else:
        flat = (plan.regions + np.array([dst.offset, 0], dtype=np.int64)).reshape(-1).tolist()
    op = kp.OpFillRegions(dst_mem.tensor, flat, int(plan.value) & 0xFFFFFFFF)
    return EncodedDispatch(op, frozenset(), frozenset({dst_mem.serial}), skip=not flat)


def encode(plan: Plan, bound: Sequence[Any], programs: Programs, dummy: DeviceMemory) -> EncodedDispatch:
    """Resolve a plan against bound tensors (or None) into a kp operation with a descriptor set
    of its own; `dummy` is bound where a shader binding's tensor is absent."""
    if isinstance(plan, TransferPlan):
        return _transfer(plan, bound)
    assert isinstance(plan, DispatchPlan)
    memories: list[DeviceMemory] = [
        dummy if idx is None or bound[idx] is None else bound[idx].buffer.memory for idx in plan.bindings
    ]
    serials = tuple([m.serial for m in memories])
    bases = _window_bases(plan, bound, memories, programs)
    push: Sequence[int] = plan.words
    if plan.offset_slots:
        push = list(push)
        for word, idx, unit in plan.offset_slots:
            t = bound[idx]
            if t is not None:  # the packed word (an offset within the tensor, in units) plus the binding's
                push[word] = (push[word] + (t.offset - (bases.get(idx, 0) if bases else 0)) // unit) & 0xFFFFFFFF
    if bases:
        rng = programs.window_range
        windows = [(bases[idx], min(4 * m.words - bases[idx], rng)) if idx in bases else (0, 0)
                   for idx, m in zip(plan.bindings, memories)]
        algo = programs.bind(plan, memories, windows)
    else:
        algo = programs.bind(plan, memories)
    writes = frozenset([bound[i].buffer.memory.serial for i in plan.writes])
    # kp.OpDispatch records no barrier of its own (kp's OpAlgoDispatch records one per bound
    # tensor before every dispatch); record_dispatches orders the sequence with global barriers.
    return EncodedDispatch(kp.OpDispatch(algo, push, plan.groups), frozenset(serials) - writes, writes)


# Encoded dispatches EncodeCache keeps at most (the oldest out first): a decoder step's program
# has a few hundred; a cached one holds a descriptor set of the shared pools
ENCODED_CAPACITY = 1 << 13


class EncodeCache:
    """Encoded dispatches by plan and bindings (the memories and offsets of its bound tensors),
    shared by the submissions that record them. A program planned again for another input
    signature (a decoder's next length: onnx_backend/node_traces.py replays most of its nodes on
    the same plan buffers) then writes no descriptor set, nor builds its operation, for the
    dispatches it has in common with an earlier one: a first run of such a program spent about
    as long encoding as the plan's replayed nodes took to record. (A descriptor set is never
    written after it is made, so several recorded programs may bind it, as run_rest's heads are.)
    An entry lives until one of its memories is freed (its DeviceMemory collected: the entry then
    goes at once, and with it the last reference kp's algorithm held to the memory) or it is the
    oldest of ENCODED_CAPACITY."""

    def __init__(self) -> None:
        self._entries: dict[tuple[Any, ...], tuple[Plan, EncodedDispatch]] = {}
        self._keys_of: dict[int, set[tuple[Any, ...]]] = {}  # memory serial -> keys of its entries
        self.hits = 0

    def encode(self, plan: Plan, bound: Sequence[Any], programs: Programs, dummy: DeviceMemory) -> EncodedDispatch:
        if (plan.windows if type(plan) is DispatchPlan
                else any(type(t) is HostRange for t in bound)):  # (a recording's own copy in / out: a new plan per call)
            return encode(plan, bound, programs, dummy)
        # every bound tensor's memory and offset (the offsets go into the push words)
        key = (tag(plan), *[None if t is None else (t.buffer.memory.serial, t.offset) for t in bound])
        hit = self._entries.get(key)
        if hit is not None and hit[0] is plan:
            self.hits += 1
            return hit[1]
        d = encode(plan, bound, programs, dummy)
        if len(self._entries) >= ENCODED_CAPACITY:
            self._forget_key(next(iter(self._entries)))
        self._entries[key] = (plan, d)
        for t in bound:
            if t is not None:
                m = t.buffer.memory
                keys = self._keys_of.get(m.serial)
                if keys is None:
                    keys = self._keys_of[m.serial] = set()
                    weakref.finalize(m, self._forget_memory, m.serial)
                keys.add(key)
        return d

    def _forget_memory(self, serial: int) -> None:
        for key in self._keys_of.pop(serial, ()):
            self._entries.pop(key, None)

    def _forget_key(self, key: tuple[Any, ...]) -> None:
        self._entries.pop(key, None)

    def clear(self) -> None:
        self._entries.clear()
        self._keys_of.clear()


def _window_bases(plan: DispatchPlan, bound: Sequence[Any], memories: Sequence[DeviceMemory],
                  programs: Programs) -> dict[int, int] | None:
    """Per binding list index whose buffer is larger than maxStorageBufferRange, the byte where
    its window starts: the tensor's offset plus the plan's delta for it, aligned down to
    minStorageBufferOffsetAlignment (the offset words then count from there). None where every
    buffer is bound whole (the common case)."""
    rng = programs.window_range
    if not rng or all(4 * m.words <= rng for m in memories):
        return None
    deltas = {idx: delta for idx, delta, _ in plan.windows}
    bases: dict[int, int] = {}
    for idx, m in zip(plan.bindings, memories):
        if idx is not None and 4 * m.words > rng:
            start = bound[idx].offset + deltas.get(idx, 0)
            bases[idx] = start - start % programs.window_align
    return bases


_BARRIER: list[Any] = []  # global_barrier's operation, made once


def global_barrier() -> Any:
    """One global memory barrier: every compute and transfer access before it, in this
    submission and earlier ones, against every such access after it. (Naming only the
    stages of the commands since the last barrier gained nothing on the H100, interleaved in
    one process: 100 dependent adds 328-497 us against 338-498, the BERT 256/3 program at
    8 x 128 1,128 us against 1,104.) One operation recorded everywhere: it holds nothing but its
    flags (kp patch 05: its record() writes the barrier), and a program's first run recorded
    a hundred of them."""
    if not _BARRIER:
        _BARRIER.append(kp.OpGlobalBarrier(_ALL_ACCESS, _ALL_ACCESS, _ALL_STAGES, _ALL_STAGES))
    return _BARRIER[0]


def levels(dispatches: Sequence[EncodedDispatch]) -> list[list[int]]:
    """The dispatches' indices (skipped ones left out) in levels: each as early as its hazards
    with earlier dispatches allow (after every earlier dispatch that wrote what it reads or
    touched what it writes: RAW, WAW, WAR), in program order within a level. No two of a level
    conflict, so one global barrier between levels orders every hazard, and independent work
    (a transformer's attention-mask chain beside its embeddings, a decoder's key and value
    concatenations) runs between the same two barriers: a barrier and a dispatch cost a GPU about
    4 us however little the dispatch does (benchmarks/RESULTS.md, latency). One pass over
    the accesses: per memory, the level of its last write and the highest level that read
    it since."""
    written: dict[int, int] = {}
    read: dict[int, int] = {}
    out: list[list[int]] = []
    for i, d in enumerate(dispatches):
        if d.skip:
            continue
        lv = 0
        for m in d.reads:
            w = written.get(m)
            if w is not None and w >= lv:
                lv = w + 1
        for m in d.writes:
            w, r = written.get(m, -1), read.get(m, -1)
            lv = max(lv, w + 1, r + 1)
        for m in d.reads:
            if read.get(m, -1) < lv:
                read[m] = lv
        for m in d.writes:
            written[m] = lv
        if lv == len(out):
            out.append([])
        out[lv].append(i)
    return out


def program_order(dispatches: Sequence[EncodedDispatch]) -> list[list[int]]:
    """Levels in program order (the skipped dispatches left out): a new level at each dispatch that
    conflicts with one of the current level. CPU devices' order (DevicePolicy.barrier_levels):
    lavapipe runs a submission's dispatches one after another, so `levels` gains it nothing (a
    decoder's new-length steps 106.32 ms against 105.96 with levels, `python -m
    benchmarks.decode_plans --decoders llama --new 12 --order program` and `--order levels`)."""
    out: list[list[int]] = []
    written: set[int] = set()
    read: set[int] = set()
    for i, d in enumerate(dispatches):
        if d.skip:
            continue
        if not out or (d.reads & written) or (d.writes & (written | read)):
            out.append([])
            written, read = set(), set()
        out[-1].append(i)
        written |= d.writes
        read |= d.reads
    return out


Order = Callable[[Sequence[EncodedDispatch]], list[list[int]]]


def record_dispatches(seq: Any, dispatches: Sequence[EncodedDispatch], positions: list[int | None] | None = None,
                      order: Order = levels) -> int:
    """Record dispatches into a kp sequence with the barriers their hazards need, in `order`'s
    levels (the engine's: DevicePolicy.barrier_levels); returns how many barriers it recorded
    between dispatches.

    Every barrier is one global memory barrier (one vkCmdPipelineBarrier, whatever the
    buffers): its execution dependency orders all earlier compute and transfer work of the
    queue, earlier submissions included, and it makes every pending write visible. The
    sequence starts with one (the uploads and dispatches of earlier submissions), and one
    goes between two levels. `positions`, when given, receives per dispatch (in the order
    given) the index of kp's timestamp after it (None: skipped)."""
    seq.record(global_barrier())
    recorded = 1
    at: list[int | None] = [None] * len(dispatches)
    lv = order(dispatches)
    for n, level in enumerate(lv):
        if n:
            seq.record(global_barrier())
            recorded += 1
        for i in level:
            seq.record(dispatches[i].op)
            recorded += 1
            at[i] = recorded  # kp's timestamp after this command (runtime/profile.py)
    if positions is not None:
        positions.extend(at)
    if any(d.to_host and not d.skip for d in dispatches):  # host reads after the fence
        seq.record(kp.OpGlobalBarrier(ACCESS_TRANSFER_WRITE, ACCESS_HOST_READ, STAGE_TRANSFER, STAGE_HOST))
    return max(len(lv) - 1, 0)
