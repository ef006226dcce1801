"""A whole model as one device program per input signature.

When every node of a model either runs on the device or reads no input data (host_eval.py), the first
run of each input signature (names, shapes, types) plans the whole graph: host nodes are resolved with
numpy, device nodes run their handlers (handlers*.py) with the device's executions captured
(Device.capture), not run, into one RecordedProgram. Values stay on the device between nodes, in
buffers of this plan (a buffer whose last reader has been recorded is reused for a later output: the
recording's barriers order the reuse). Every run after that writes the inputs into their buffers,
submits the program once, and reads the outputs back: one upload per input, one submission, one
download per output (a run that leaves them on the device: the program less its copies into host
memory, then one submission of their copies into new Tensors). A plan made after another of the same
input names repeats that plan's steps that read the very same values (step_reuse.py). On GPUs the
plan also starts what it has recorded every few milliseconds of planning (DevicePolicy.plan_flush_ms,
Recording.flush): the first run's early layers run on the device while the host plans the later
ones, and the program's first run runs the rest.

PlanContext (plan_context.py) stands in for the BackendRep that handlers receive in node-by-node runs:
the same handler code serves both, and a handler that needs a device value on the host while planning
(a data-dependent shape) raises FallbackNeeded, so the model runs node by node instead."""

from __future__ import annotations

import contextlib
import dataclasses
import operator
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

import kompute_dml as kdml

from ..runtime import DispatchPlan
from ..runtime.staging import host_copy
from .handlers_values import BOOL, OutputArrays, dml_numpy, into, is_packed
from .node_traces import host_node, input_key, keep_traces, run_node
from .plan_context import PlanContext, plan_order
from .siblings import prepare_siblings
from .step_reuse import StepReuse
from .transfers import copy_into, device_results, early_copies, host_io
from .values import CPU, HOST, DeviceValue, FallbackNeeded, RunStats, _is_tensor_value, _value_dtype, _value_shape, at_node, empty_on_host

if TYPE_CHECKING:
    from .rep import BackendRep

# Result arrays of at least this size are handed out again once nothing references them (GraphPlan._result_array), at most
# RECYCLED per output: a fresh large array costs its allocation, a page fault per page as it is filled and an unmap when freed.
RECYCLE_BYTES = 64 << 10
RECYCLED = 2
# Outputs the program itself copies into pinned host memory (shared by a model's plans), at most this many bytes together;
# larger ones are downloaded after it through the staging ring, a submission and a wait per staging.CHUNK_BYTES. Pinned
# memory grown past PLAN_IO_BYTES costs the first run that needs it its allocation (32 MiB: 18 ms on the H100, a MiniLM
# 64 x 256 first run's largest part after the run); staging costs every run of such a shape its extra submissions.
PROGRAM_OUT_BYTES = 32 << 20
_FREE_REFS = 3  # sys.getrefcount of a kept array nothing else holds: the list, the loop name, the argument


@dataclasses.dataclass(frozen=True)
class _PlanSteps:
    """The plan's part of a device step (fusions.StepExecutor): record a node, a chain's profile
    scope, keep a chain's outputs, drop an unfused chain's intermediate."""
    node: Callable[[int], None]
    scoped: Callable[[Any], Any]
    chain_done: Callable[[Any, list[Any]], None]
    drop: Callable[[str], None]
    run_chain: Callable[[Any, Callable[[Any], list[Any]]], list[Any]]


class GraphPlan:
    """The program of one input signature; `run(feeds)` returns the outputs in order."""

    def __init__(self, rep: BackendRep, feeds: dict[str, Any], stats: RunStats) -> None:
        rep.device.engine.programs.wait()  # an earlier plan's siblings (siblings.py): this plan may need them
        t0 = time.perf_counter()
        g = rep.graph
        self._device = rep.device
        tracing = rep.state.trace_capacity > 0
        reuse = StepReuse(rep, frozenset(feeds)) if tracing else None  # step_reuse.py
        ctx = PlanContext(rep, reuse.lineage if reuse is not None else None)
        env: dict[str, Any] = {}
        # Every input in one buffer (16-byte aligned parts), written once per run: host inputs first (the
        # program's own upload covers them), then the Tensors fed on the device, copied in before the program.
        self.inputs: list[tuple[str, int, int]] = []  # host inputs: name, byte offset, byte size
        self.device_inputs: list[tuple[str, kdml.Tensor]] = []  # device inputs: name, their part
        descs = []
        total = host_total = 0
        for on_device in (False, True):
            for name, value in feeds.items():
                if not _is_tensor_value(value):
                    raise FallbackNeeded(f"input {name!r} is not a tensor")
                if isinstance(value, DeviceValue) != on_device:
                    continue
                shape, dtype = _value_shape(value), _value_dtype(value)
                if dtype != BOOL and dtype not in _dml_types():
                    raise FallbackNeeded(f"input {name!r} of type {dtype}")
                if 0 in shape:
                    if on_device:  # (a Tensor is never empty)
                        raise FallbackNeeded(f"input {name!r} is empty")
                    env[name] = np.empty(shape, dtype)  # a decoder's first past: a host value (values.empty_on_host)
                    continue
                desc = kdml.TensorDesc(kdml.DataType.from_numpy(dml_numpy(dtype)), shape if shape else (1,))
                if not on_device:
                    self.inputs.append((name, total, int(np.prod(shape, dtype=np.int64)) * dtype.itemsize))
                descs.append((name, desc, total, shape, dtype))
                total += -(-desc.byte_size // 16) * 16
            if not on_device:  # the host inputs' bytes lead the buffer (0 where all are on the device)
                host_total = total
        # one of the model's plan buffers (PlanContext.input_buffer): every run writes the inputs
        # first, and nothing reads the padding
        self._input_buffer = ctx.input_buffer(max(total, 16))
        for name, desc, off, shape, dtype in descs:
            part = kdml.Tensor(self._input_buffer, desc, off)
            env[name] = DeviceValue(part, shape, dtype)
            if isinstance(feeds[name], DeviceValue):
                self.device_inputs.append((name, part))
        self._copy_device_inputs(feeds)  # before the capture: its flushed heads may read them
        fusions = rep.fusions
        order = plan_order(rep, feeds)

        def lookup(name: str) -> Any:
            if name in env:
                return env[name]
            if name in rep.constants:
                return rep.constant_host(name)
            raise KeyError(f"value {name!r} is not available (missing input?)")

        self.device_nodes = 0
        nodes = self._nodes = rep.node_table

        traces = rep.state.node_traces  # node_traces.py: replayed, and made by this plan
        made: dict[Any, Any] = {}
        host_last = rep.state.host_last  # node_traces.host_node: host nodes' inputs and results of the last plan

        def record(i: int) -> None:  # node i's handler (or its trace), its outputs kept
            node, target, inputs, outputs, scope = nodes[i]
            # (env inline: a plan looks up every input of every node, over 1,000 in a decoder step)
            ins = [(env[n] if n in env else lookup(n)) if n else None for n in inputs]
            if target == HOST:
                if tracing:
                    prev = host_last.get(i)
                    if prev is not None and prev[2] and all(map(operator.is_, ins, prev[0])):
                        # host_node's common case inline (most of a decoder step's nodes): the last
                        # plan's read-only host results, no device value among them to hold
                        for name, v in zip(outputs, prev[1]):
                            if name:
                                env[name] = v
                        return
                    outs = host_node(rep, host_last, i, node, ins, stats)
                else:
                    outs = rep._host_node(i, node, ins, stats)
            elif target == CPU:
                raise FallbackNeeded(f"node {i} ({node.op_type}) runs on the CPU")
            elif empty_on_host(ins):  # nothing to compute on the device: an empty value's node
                outs = rep._host_node(i, node, ins, stats)
            else:
                rec.scope = scope  # profile rows: per node
                key = input_key(inputs, ins, env) if tracing else None
                outs = run_node(ctx, rec, rep.state, made, i, key, rep.handler_for(node), node, ins, stats)
                self.device_nodes += 1
            keep_outputs(outputs, outs)
            ctx.end_node()

        def keep_outputs(names: Any, outs: list[Any]) -> None:
            for name, v in zip(names, outs):
                if name:
                    env[name] = v
                    if isinstance(v, DeviceValue):
                        ctx.hold(v)

        def chain_done(fusion: Any, outs: list[Any]) -> None:
            names = nodes[fusion.carrier][3]
            keep_outputs(names, outs)
            if fusion.shared:  # after the carrier's own outputs
                keep_outputs(fusion.shared, outs[len(names):])
            ctx.end_node()
            self.device_nodes += len(fusion.nodes)

        def scoped(fusion: Any) -> Any:
            rec.scope = fusion.scope(g)  # profile rows: the chain's
            return contextlib.nullcontext()

        def run_chain(fusion: Any, run: Callable[[Any], list[Any]]) -> list[Any]:  # traced as a node's handler
            ins = [(env[n] if n in env else lookup(n)) if n else None for n in fusion.inputs]
            key = input_key(fusion.inputs, ins, env) if tracing else None
            return run_node(ctx, rec, rep.state, made, ("chain", fusion.carrier), key,
                            lambda c, _node, _ins, _stats: run(c), None, ins, stats)

        steps = _PlanSteps(record, scoped, chain_done, lambda name: ctx.drop(env.pop(name, None)), run_chain)
        flush_s = rep.device.policy.plan_flush_ms / 1e3
        engine = rep.device.engine
        ignore_allocations = rep.device.policy.plan_flush_allocating
        ignore_compiles = rep.device.policy.plan_flush_compiling
        with rep.device.capture() as rec:
            self._in = host_io(rep, "in", total)
            self._write_inputs(feeds)  # now: the program's first executions may start while it is planned
            self._inputs_written = True
            if host_total:
                rec.scope = "inputs"
                rec.copy_in(self._in[:host_total], kdml.Tensor(self._input_buffer, kdml.TensorDesc(kdml.DataType.UINT8, (host_total,))))
            flushed_at = time.perf_counter()
            if reuse is not None:
                reuse.begin(ctx, rec, env, lookup)
            for k, (i, dying, chain) in enumerate(order):  # (a node absorbed into a chain has no step: its carrier runs it)
                # not while a buffer is being made: the driver would hold the submissions up meanwhile
                # (DevicePolicy.plan_flush_allocating); nor before the pipelines of what it would start
                # are made: they would be compiled one flush at a time (DevicePolicy.plan_flush_compiling)
                if (flush_s and time.perf_counter() - flushed_at >= flush_s
                        and (ignore_allocations or not engine.allocating())
                        and (ignore_compiles or rec.pipelines_made())):
                    ctx.write_staged()  # the host values the executions flushed now may read
                    rec.flush()
                    flushed_at = time.perf_counter()
                ctx.dying = [env[n] for n in dying if n in env] if dying else []
                if reuse is not None:
                    if reuse.repeat(k, i, chain):  # the previous plan's step, as it was
                        self.device_nodes += reuse.nodes
                        ctx.drop_names(dying, env)
                        continue
                    reuse.start()
                    counted = self.device_nodes
                try:
                    if chain:
                        fusions.step(i, steps, ctx, g, lookup, stats)
                    else:  # a node alone: fusions.step's work without its calls (most of a plan's nodes)
                        try:
                            record(i)
                        except ValueError as e:  # a shape that breaks a rule at run time: say where
                            err = at_node(e, i, g.node[i])
                            if err is e:
                                raise
                            raise err from e
                except FallbackNeeded as e:  # say which node the whole-graph plan stopped at
                    raise FallbackNeeded(f"node {i} ({g.node[i].op_type} {g.node[i].name!r}): {e}") from None
                if reuse is not None:
                    reuse.done(k, i, chain, self.device_nodes - counted)
                ctx.drop_names(dying, env)
            self.outputs = [(name, lookup(name)) for name in rep.output_names]
            ctx.write_staged()
            self._io_copies(rep, rec)
        # (where the siblings follow: whether any of the program's own pipelines is still to be made,
        # checked from where the flushes' checks stopped: a decoder step's plan checks only its tail)
        missing = rep.device.policy.prepare_siblings and not rec.pipelines_made()
        self.program = rec.compile()
        self._device_program: Any = None  # the program less its copies into host memory (run(on_device=True))
        ctx.share_buffers()
        keep_traces(traces, made, rep.state.trace_capacity)
        if reuse is not None:
            reuse.keep(self.program, {name: env[name] for name in feeds if name in env})
            stats.reused_nodes = reuse.reused
        ctx.requests.clear()  # (step_reuse.py's log of the last step: the plan keeps its context)
        self.flushed = rec.flushed  # executions the first run started while planning
        self.ctx = ctx
        if missing:
            # the program's own pipelines first, all at once (the flushes left those not yet made:
            # DevicePolicy.plan_flush_compiling), then the siblings' on their thread: compiled together,
            # the siblings took the cores the first run's compiles wanted
            engine.prepare_many([p for plans, _bound in self.program.work for p in plans if isinstance(p, DispatchPlan)])
        # the siblings start after the first run (run), whose execution then shares the host's cores
        # with no compile of theirs (a cold float16 sibling takes up to 1.8 s on the H100's driver)
        self._sibling_ops = list(rec.operators.values()) if rep.device.policy.prepare_siblings else None
        self.siblings_prepared = 0
        # the operators' dispatches (the program's own input and output copies not counted)
        self.dispatches = self.program.dispatch_count - 1 - len(self._out_at)
        self.plan_seconds = time.perf_counter() - t0

    def start_siblings(self) -> None:
        """Queue the pipelines other input shapes may take (siblings.py) on their thread, once: after the first run's wait."""
        ops, self._sibling_ops = self._sibling_ops, None
        if ops is not None:
            self.siblings_prepared = prepare_siblings(self._device, self.program, ops)

    def _io_copies(self, rep: BackendRep, rec: Any) -> None:
        """The program's own transfers, so a run is one submission and one wait (a separate upload and
        download each cost a submission and a fence wait: ~0.1 ms per run on an H100 host): the inputs from
        host memory into the input buffer first (recorded at the start of the capture), the packed device
        outputs into host memory last (the last executions: run(on_device=True) leaves them out)."""
        self._out_at: dict[int, int] = {}  # output index -> byte offset in the output host memory
        self._staged: set[int] = set()  # packed outputs past PROGRAM_OUT_BYTES: downloaded after the program
        self._kept: dict[int, list[np.ndarray]] = {}  # output index -> result arrays handed out
        end = 0
        for k, (_name, v) in enumerate(self.outputs):
            if isinstance(v, DeviceValue) and is_packed(v.tensor):
                size = -(-v.tensor.nbytes // 16) * 16
                if end + size <= PROGRAM_OUT_BYTES:
                    self._out_at[k] = end
                    end += size
                else:
                    self._staged.add(k)
        self._out = host_io(rep, "out", end)
        rec.scope = "outputs"
        for k, off in self._out_at.items():
            t = self.outputs[k][1].tensor
            rec.copy_out(t, self._out[off:off + t.nbytes])

    def _write_inputs(self, feeds: dict[str, Any]) -> None:
        # large inputs over the device's copy threads, as the outputs' copies (staging.PARALLEL_BYTES:
        # one core's memcpy is below what PCIe moves; a batch of 8 images is 4.8 MB)
        io, copies = self._in, self._device.engine.staging.copies
        for name, off, nbytes in self.inputs:
            host_copy(io[off:off + nbytes], np.ascontiguousarray(feeds[name]).reshape(-1).view(np.uint8), copies)

    def _copy_device_inputs(self, feeds: dict[str, Any]) -> None:
        """The Tensors fed on the device into their parts of the input buffer: one submission, not
        waited for (the program's, on the same queue, begins with a global barrier)."""
        if self.device_inputs:
            with self._device.capture() as rec:  # one submission (device_results says why)
                for name, part in self.device_inputs:
                    copy_into(rec, feeds[name].tensor, part)
            rec.submit(wait=False)

    def run(self, feeds: dict[str, Any], stats: RunStats, on_device: bool = False,
            out: OutputArrays | None = None) -> list[Any]:
        """The outputs in order: host arrays (in `out`'s where given: BackendRep.run), or (`on_device`)
        new Tensors copied from the plan's buffers on the device, which later runs leave alone."""
        if self._inputs_written:  # the first run's: written while planning, maybe read already
            self._inputs_written = False
        else:
            self._write_inputs(feeds)
            self._copy_device_inputs(feeds)
        stats.uploads += 1 if self.inputs else 0
        early = (None if on_device or out is not None
                 else early_copies(self.outputs, self._out_at, self._out, self._result_array))
        on_dev = None
        # outputs left on the device: the program less its copies into host memory (16.6 MB at GPT-2
        # small's prompt step at batch 8: benchmarks/prompt_profile.py lists the step's dispatches)
        program = self.program
        if on_device and self._out_at and not program.head_pending:
            program = self._device_program = self._device_program or program.without_tail(len(self._out_at))
        try:  # on_device: the outputs' copies queued behind the program, the host waits once
            running = program.run(wait=not on_device, copies=early[1] if early else None)
            if on_device:
                on_dev = device_results([v for _name, v in self.outputs], self._device)
                running.wait()  # (done by now; raises a failed device check)
        except kdml.InvalidArgumentError as e:  # a device check (a Gather's indices): name its node
            # (by Recording.scope; made here, not per plan: a decoder makes a plan per step)
            node_of = {scope: (i, node) for i, (node, _t, _i, _o, scope) in enumerate(self._nodes)}
            scope = getattr(e, "recorded_scope", None)
            node = node_of.get(scope) if scope is not None else None
            if node is not None:
                at_node(e, *node)  # a kompute_dml error keeps its message and gains the node as a note
            raise
        if self._sibling_ops is not None:
            self.start_siblings()
        stats.submissions += 1 + bool(self.device_inputs) + on_device  # the program, the copies in and out
        stats.dispatches = self.dispatches
        stats.vulkan_nodes += self.device_nodes
        if on_dev is not None:
            return on_dev
        results: list[Any] = []
        copies = self._device.engine.staging.copies
        for k, (_name, v) in enumerate(self.outputs):
            if isinstance(v, DeviceValue):
                at = self._out_at.get(k)
                if out is not None and v.dtype != BOOL:  # straight into the caller's array
                    arr = out(k, v.shape, v.tensor.dtype)
                    if at is None:
                        v.tensor.numpy(out=arr.reshape(v.tensor.desc.sizes))
                    else:
                        host_copy(arr.reshape(-1).view(np.uint8), self._out[at:at + v.tensor.nbytes], copies)
                elif k in self._staged:  # past PROGRAM_OUT_BYTES: through the staging ring
                    arr = self._result_array(k, v.shape, v.tensor.dtype)
                    v.tensor.numpy(out=arr.reshape(v.tensor.desc.sizes))
                elif at is None:
                    arr = v.tensor.numpy().reshape(v.shape)
                elif early is not None and early[1].done and k in early[0]:  # copied in the wait
                    arr = early[0][k]
                else:  # copied by the program itself; the caller's own array
                    arr = self._result_array(k, v.shape, v.tensor.dtype)
                    host_copy(arr.reshape(-1).view(np.uint8), self._out[at:at + v.tensor.nbytes], copies)
                stats.downloads += 1
                results.append(arr.astype(BOOL) if v.dtype == BOOL else arr)
            elif isinstance(v, list):
                results.append([np.array(e, copy=True) for e in v])
            else:
                results.append(v if v is None else into(out, k, v) if out is not None else np.array(v, copy=True))
        return results

    def _result_array(self, k: int, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        """A new array for output k: one this plan returned before that nothing references any more
        (the caller dropped it, views included: a view holds its base), else a fresh one."""
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


def _dml_types() -> set[np.dtype]:
    from .values import _DML_NUMPY
    return _DML_NUMPY

