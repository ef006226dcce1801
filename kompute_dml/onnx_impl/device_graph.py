"""A whole model as one device program per input signature.

When every node of a model either runs on the device or reads no input data (host_eval.py),
the first run of each input signature (names, shapes, types) plans the whole graph: host
nodes are resolved with numpy, device nodes run their handlers (handlers*.py) with the
device's executions captured (Device.capture), not run, into one RecordedProgram. Values
stay on the device between nodes, in buffers of this plan (a buffer whose last reader has
been recorded is reused for a later output: the recording's barriers order the reuse).
Every run after that writes the inputs into their buffers, submits the program once, and
reads the outputs back: one upload per input, one submission, one download per output.

PlanContext stands in for the BackendRep that handlers receive in node-by-node runs: the same
handler code serves both, and a handler that needs a device value on the host while planning
(a data-dependent shape) raises FallbackNeeded, so the model runs node by node instead."""

from __future__ import annotations

import collections
import dataclasses
import sys
import time
from typing import TYPE_CHECKING, Any

import numpy as np

import kompute_dml as kdml
from kompute_dml.tensor_desc import packed_strides

from ..runtime.staging import host_copy
from .fusions import Unfused
from .handlers_values import BOOL, dml_numpy, is_packed
from .host_eval import compact
from .values import CPU, HOST, DeviceValue, FallbackNeeded, RunStats, _is_tensor_value, _value_shape

if TYPE_CHECKING:
    from .rep import BackendRep

_MIN_BLOCK = 256
# Result arrays of at least this size are handed out again once nothing references them
# (GraphPlan._result_array), at most RECYCLED per output: a fresh large array costs its
# allocation, a page fault per page as it is filled and an unmap when it is freed.
RECYCLE_BYTES = 64 << 10
RECYCLED = 2
_FREE_REFS = 3  # sys.getrefcount of a kept array nothing else holds: the list, the loop name, the argument


def _block(nbytes: int) -> int:
    """The size class of a plan buffer: powers of two, so a freed buffer fits later outputs."""
    return max(_MIN_BLOCK, 1 << (max(nbytes, 1) - 1).bit_length())


class PlanContext:
    """What handlers call on their `rep` while a plan is built."""

    def __init__(self, rep: BackendRep) -> None:
        self.rep = rep
        self.device = rep.device
        self.kept: list[Any] = []  # buffers uploaded for this plan (host-known values)
        # Every plan of a model draws on the same buffers (rep.plan_buffers, by size class): runs
        # of one model never overlap (BackendRep.run holds a lock and waits), so another input
        # signature's plan reuses them, allocating only what it needs beyond them.
        self._shared: dict[int, list[kdml.Buffer]] = rep.plan_buffers
        self._free: dict[int, list[kdml.Buffer]] = collections.defaultdict(list)
        self._by_id: dict[int, kdml.Buffer] = {}
        for size, bufs in self._shared.items():
            self._free[size] = list(bufs)
            self._by_id.update((id(b), b) for b in bufs)
        self._refs: collections.Counter[int] = collections.Counter()
        # Buffers handed out while the current node is recorded: those its outputs do not hold
        # when it ends (a handler's temporaries) are free for the next node (end_node).
        self._fresh: list[kdml.Buffer] = []
        self._after_node: list[DeviceValue] = []  # holds released when the node ends
        self._attached: dict[int, list[DeviceValue]] = collections.defaultdict(list)
        self.allocated = 0  # bytes this plan added to the shared buffers
        self.memo: dict[int, Any] = {}  # results handlers share within the plan (handlers.py)

    # ---- the BackendRep methods handlers use ----------------------------------------
    def host(self, value: Any, stats: RunStats) -> Any:
        if isinstance(value, DeviceValue):
            raise FallbackNeeded("it needs a value computed on the device on the host while planning")
        if isinstance(value, list):
            return [self.host(v, stats) for v in value]
        return value

    def is_constant(self, name: str | None) -> bool:
        return self.rep.is_constant(name)

    def to_device(self, value: Any, stats: RunStats, name: str | None = None) -> kdml.Tensor:
        if isinstance(value, DeviceValue):
            return value.tensor
        if name is not None and self.rep.is_constant(name):
            return self.rep.to_device(value, stats, name)
        arr = np.asarray(value)
        part = compact(arr) if arr.ndim else arr
        t = self.device.tensor(np.ascontiguousarray(part))
        self.kept.append(t)
        stats.constant_uploads += 1
        if part.size == arr.size:
            return t
        # a broadcast view (host_eval.BROADCAST_BYTES): its distinct part, bound with zero strides
        strides = [0 if n != m else st for n, m, st in zip(part.shape, arr.shape, packed_strides(part.shape))]
        return kdml.Tensor(t.buffer, kdml.TensorDesc(t.desc.data_type, arr.shape, tuple(strides)), 0)

    def upload_group(self, arrays: list[np.ndarray], stats: RunStats,
                     names: tuple[str | None, ...] | None = None) -> list[kdml.Tensor]:
        return [self.to_device(a, stats, n) for a, n in zip(arrays, names or (None,) * len(arrays))]

    def out_tensor(self, sizes: Any, dtype: Any) -> kdml.Tensor:
        desc = kdml.TensorDesc(kdml.DataType.from_numpy(dtype), tuple(sizes) if len(sizes) else (1,))
        size = _block(desc.byte_size)
        free = self._free[size]
        if free:
            buf = free.pop()
        else:
            # not zeroed (no fill submission per buffer): every output is written before a
            # later node reads it, and bytes past an output are never read
            buf = kdml.Buffer(self.device, size, zeroed=False)
            self._shared.setdefault(size, []).append(buf)
            self._by_id[id(buf)] = buf
            self.allocated += size
        self._fresh.append(buf)
        return kdml.Tensor.trusted(buf, desc, 0)

    def _note(self, msg: str) -> None:
        self.rep._note(msg)

    # ---- liveness ----------------------------------------------------------------------
    def hold(self, value: Any) -> None:
        if isinstance(value, DeviceValue):
            self._refs[id(value.tensor.buffer)] += 1

    def hold_for_members(self, value: Any, members: int) -> None:
        """Keep value's buffer for `members` nodes still to come that each read it through
        views made now (product_groups.py); each member releases its hold (release_after_node)
        once its own outputs are held, so the buffer is reused after the last view dies."""
        for _ in range(members):
            self.hold(value)

    def release_after_node(self, value: Any) -> None:
        """Drop one hold of value's buffer when the current node ends (after its outputs are held)."""
        if isinstance(value, DeviceValue):
            self._after_node.append(value)

    def attach(self, owner: Any, *values: Any) -> None:
        """Keep `values` (a handler's results that later nodes may reuse through rep.memo, keyed
        by `owner`) as long as owner's buffer lives."""
        if not isinstance(owner, DeviceValue):
            return
        for v in values:
            if isinstance(v, DeviceValue):
                self.hold(v)
                self._attached[id(owner.tensor.buffer)].append(v)

    def end_node(self) -> None:
        """The current node is recorded and its outputs held: its handler's temporaries (buffers
        handed out during it that nothing holds) are free for later nodes; the recording's
        barriers order their reuse (a later write waits for this node's reads)."""
        for v in self._after_node:
            self.drop(v)
        self._after_node.clear()
        for buf in self._fresh:
            key = id(buf)
            if self._refs[key] <= 0 and key in self._by_id and not self._is_free(buf):
                self._refs.pop(key, None)
                self._free[buf.nbytes].append(buf)
        self._fresh.clear()

    def _is_free(self, buf: kdml.Buffer) -> bool:
        return any(b is buf for b in self._free[buf.nbytes])

    def drop(self, value: Any) -> None:
        if not isinstance(value, DeviceValue):
            return
        key = id(value.tensor.buffer)
        self._refs[key] -= 1
        if self._refs[key] <= 0 and key in self._by_id:
            del self._refs[key]
            buf = self._by_id[key]
            if not self._is_free(buf):
                self._free[buf.nbytes].append(buf)
            for v in self._attached.pop(key, ()):
                self.drop(v)


class GraphPlan:
    """The program of one input signature; `run(feeds)` returns the outputs in order."""

    def __init__(self, rep: BackendRep, feeds: dict[str, Any], stats: RunStats) -> None:
        t0 = time.perf_counter()
        g = rep.graph
        ctx = PlanContext(rep)
        env: dict[str, Any] = {}
        # Every input in one buffer (16-byte aligned parts), written once per run.
        self.inputs: list[tuple[str, int, int]] = []  # name, byte offset, byte size
        descs = []
        total = 0
        for name, value in feeds.items():
            if not _is_tensor_value(value):
                raise FallbackNeeded(f"input {name!r} is not a tensor")
            arr = np.asarray(value)
            if arr.dtype != BOOL and arr.dtype not in _dml_types():
                raise FallbackNeeded(f"input {name!r} of type {arr.dtype}")
            if arr.size == 0:
                raise FallbackNeeded(f"input {name!r} is empty")
            desc = kdml.TensorDesc(kdml.DataType.from_numpy(dml_numpy(arr.dtype)), arr.shape if arr.shape else (1,))
            self.inputs.append((name, total, arr.nbytes))
            descs.append((name, desc, total, arr))
            total += -(-desc.byte_size // 16) * 16
        total = max(total, 16)
        self._input_buffer = rep.device.buffer(total)
        for name, desc, off, arr in descs:
            env[name] = DeviceValue(kdml.Tensor(self._input_buffer, desc, off), arr.shape, arr.dtype)
        keep = set(rep.output_names)
        last: dict[str, int] = {}
        fusions = rep.fusions
        for i in range(len(g.node)):
            for n in fusions.step_inputs(g, i):  # a fused chain reads its values at its carrier
                last[n] = i
        dying: list[list[str]] = [[] for _ in g.node]
        for n, i in last.items():
            if n not in keep and n not in feeds:
                dying[i].append(n)

        def lookup(name: str) -> Any:
            if name in env:
                return env[name]
            if name in rep.constants:
                return rep._constant_host(name)
            raise KeyError(f"value {name!r} is not available (missing input?)")

        self.device_nodes = 0

        def record(i: int) -> None:  # node i's handler, its outputs kept
            node = g.node[i]
            target = rep._placement_static[i][0]
            ins = [lookup(n) if n else None for n in node.input]
            if target == HOST:
                outs = rep._host_node(i, node, ins, stats)
            elif target == CPU:
                raise FallbackNeeded(f"node {i} ({node.op_type}) runs on the CPU")
            else:
                rec.scope = f"{i} {node.op_type} {node.name}"  # profile rows: per node
                outs = rep.handler_for(node)(ctx, node, ins, stats)
                self.device_nodes += 1
            keep_outputs(node.output, outs)
            ctx.end_node()

        def keep_outputs(names: Any, outs: list[Any]) -> None:
            for name, v in zip(names, outs):
                if name:
                    env[name] = v
                    ctx.hold(v)

        with rep.device.capture() as rec:
            self._in = _host_io(rep, "in", total)
            rec.scope = "inputs"
            rec.copy_in(self._in[:total], kdml.Tensor(self._input_buffer, kdml.TensorDesc(kdml.DataType.UINT8, (total,))))
            for i in range(len(g.node)):
                fusion = fusions.by_carrier.get(i)
                if fusion is not None:  # the chain's one dispatch, or its nodes where it does not fit
                    rec.scope = fusion.scope(g)
                    try:
                        keep_outputs(g.node[i].output, fusion.run(ctx, g, lookup, stats))
                        ctx.end_node()
                        self.device_nodes += len(fusion.nodes)
                    except Unfused as e:
                        rep._note(f"nodes {list(fusion.nodes)} ({fusion.pattern.name}) ran unfused: {e}")
                        for j in fusion.nodes:
                            record(j)
                        for name in fusion.intermediates:
                            ctx.drop(env.pop(name, None))
                elif i not in fusions.absorbed:  # an absorbed node is recorded with its carrier
                    record(i)
                for name in dying[i]:
                    v = env.pop(name, None)
                    ctx.drop(v)
            self.outputs = [(name, lookup(name)) for name in rep.output_names]
            self._io_copies(rep, rec)
        self.program = rec.compile()
        self.ctx = ctx
        self.siblings_prepared = _prepare_siblings(rep.device, self.program) if rep.device.policy.prepare_siblings else 0
        # the operators' dispatches (the program's own input and output copies not counted)
        self.dispatches = self.program.dispatch_count - 1 - len(self._out_at)
        self.plan_seconds = time.perf_counter() - t0

    def _io_copies(self, rep: BackendRep, rec: Any) -> None:
        """The program's own transfers, so a run is one submission and one wait (a separate
        upload and download each cost a submission and a fence wait: ~0.1 ms per run on an
        H100 host): the inputs from host memory into the input buffer first (recorded at
        the start of the capture), the packed device outputs into host memory last."""
        self._out_at: dict[int, int] = {}  # output index -> byte offset in the output host memory
        self._kept: dict[int, list[np.ndarray]] = {}  # output index -> result arrays handed out
        end = 0
        for k, (_name, v) in enumerate(self.outputs):
            if isinstance(v, DeviceValue) and is_packed(v.tensor):
                self._out_at[k] = end
                end += -(-v.tensor.nbytes // 16) * 16
        self._out = _host_io(rep, "out", end)
        rec.scope = "outputs"
        for k, off in self._out_at.items():
            t = self.outputs[k][1].tensor
            rec.copy_out(t, self._out[off:off + t.nbytes])

    def run(self, feeds: dict[str, Any], stats: RunStats) -> list[Any]:
        io = self._in
        for name, off, nbytes in self.inputs:
            io[off:off + nbytes] = np.ascontiguousarray(feeds[name]).reshape(-1).view(np.uint8)
        stats.uploads += 1
        self.program.run()
        stats.submissions += 1
        stats.dispatches = self.dispatches
        stats.vulkan_nodes += self.device_nodes
        results: list[Any] = []
        for k, (_name, v) in enumerate(self.outputs):
            if isinstance(v, DeviceValue):
                at = self._out_at.get(k)
                if at is None:
                    arr = v.tensor.numpy().reshape(v.shape)
                else:  # copied by the program itself; the caller's own array
                    arr = self._result_array(k, v.shape, v.tensor.dtype)
                    host_copy(arr.reshape(-1).view(np.uint8), self._out[at:at + v.tensor.nbytes])
                stats.downloads += 1
                results.append(arr.astype(BOOL) if v.dtype == BOOL else arr)
            elif isinstance(v, list):
                results.append([np.array(e, copy=True) for e in v])
            else:
                results.append(v if v is None else np.array(v, copy=True))
        return results

    def _result_array(self, k: int, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        """A new array for output k: one this plan returned before that nothing references any
        more (the caller dropped it, views included: a view holds its base), else a fresh one."""
        kept = self._kept.setdefault(k, [])
        for arr in kept:
            if sys.getrefcount(arr) == _FREE_REFS:
                return arr
        arr = np.empty(shape, dtype)
        if arr.nbytes >= RECYCLE_BYTES and len(kept) < RECYCLED:
            kept.append(arr)
        return arr

    @property
    def device_bytes(self) -> int:
        return self.ctx.allocated


# A family with more variants than this is not expanded (the integer products' tile families: their
# variant is chosen from the matrix sizes the model's weights fix, not from the sequence length).
_SIBLING_FAMILY_MAX = 32


def _prepare_siblings(device: kdml.Device, program: Any) -> int:
    """Create the pipelines of the variants another input shape of this program's operators may
    pick (ShaderFamily.siblings: softmax's lanes and elements per lane, GEMM's tile), once per
    device: a first run of a new sequence length then compiles nothing (they persist on disk too:
    runtime/disk_cache.py). Returns how many were created now."""
    from kompute_dml.ops.spec import family_of  # the spec layer owns the variant -> family map
    from kompute_dml.runtime import DispatchPlan

    engine = device.engine
    done = engine.prepared_variants
    created = 0
    for plans, _bound in program.work:
        for plan in plans:
            if not isinstance(plan, DispatchPlan) or plan.variant in done:
                continue
            done.add(plan.variant)
            fam = family_of(plan.variant)
            if fam is None or len(fam.variants) > _SIBLING_FAMILY_MAX:
                continue
            for v in fam.siblings(plan.variant):
                if v in done:
                    continue
                done.add(v)
                try:
                    engine.prepare(dataclasses.replace(plan, variant=v))
                    created += 1
                except kdml.DMLError:
                    continue  # a variant the device cannot run (capabilities): never picked here
    return created


def _host_io(rep: BackendRep, key: str, nbytes: int) -> np.ndarray:
    """Host memory (Device.host_array) of at least nbytes for the plans' inputs ("in") or
    outputs ("out"): one per model and direction, shared by its plans (runs never overlap),
    grown by powers of two (a plan made before keeps the smaller one it recorded)."""
    arr = rep.plan_io.get(key)
    if arr is None or arr.nbytes < nbytes:
        arr = rep.plan_io[key] = rep.device.host_array(_block(nbytes), np.uint8)
    return arr


def _dml_types() -> set[np.dtype]:
    from .values import _DML_NUMPY
    return _DML_NUMPY


def signature(feeds: dict[str, Any]) -> tuple[Any, ...]:
    return tuple((n, _value_shape(v), str(np.asarray(v).dtype)) if _is_tensor_value(v) else (n, type(v).__name__)
                 for n, v in feeds.items())
