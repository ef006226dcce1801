"""Node traces: what a device node's handler recorded while one whole-graph plan was built,
replayed by the later plans of the model whose inputs at that node look the same.

A decoder with its key/value cache (bench/decoders.py) has a new input signature at every
step (the past grows by one), so every step builds a new plan (device_graph.GraphPlan). Most of
its nodes see the same inputs at every step, though: the projections, layer norms and
feed-forward of the new token, whose shapes do not depend on the past length. A handler's work
depends only on what it is given (its inputs' shapes, types and layouts, the host values it
reads, the node and the prepared model), so the first plan records, per device node, what the
handler did through its context and the recording:

- each `out_tensor(sizes, dtype, over)` it asked for (and whether it was written in place),
- each `to_device` / `upload_group` / `weight_to_device` / `constant_as` tensor that lives as long as the model
  (constants, weights, the few bytes of small host values shared by plans),
- each `Recording.execute(op, inputs, outputs)`, every bound tensor expressed as a view of one
  of those: an output buffer, an input's buffer (relative to the input's offset) or a kept tensor,
- its results, expressed the same way;

and a later plan whose inputs at that node have the same key (`input_key`: per input its ONNX
shape and type, its tensor's descriptor, its offset modulo 256 and which inputs share a buffer;
a host value's bytes; a constant by its name) replays that: the same output requests to its
own PlanContext (liveness and buffer reuse stay the plan's), the same compiled operators on the
mapped tensors, so the program recorded is the one the handler would have recorded: the same
operators, shaders and dispatches. A node whose handler did anything else (bound a buffer of
another node's value, as a result shared through the plan's memo; uploaded a larger host value
into its plan's own staging buffer; held values for later nodes) is recorded as not traceable
and planned as before. A replay whose in-place decision differs from the recorded one (its
output request got a new buffer where the trace wrote over an input, or the reverse) is
abandoned before it records anything and the handler runs instead.

Traces are made by plans that complete (a plan that falls back leaves none: its staged values
were never written) and kept in `RunState.node_traces`, at most `RunState.trace_capacity` (0: none
made or replayed), least recently used out first. A node that found no trace at MISSES_UNTRACED
plans in a row (its inputs change with every plan: a decoder's products over the past) is not
traced until a plan finds one. `host_node` does the same for host nodes, more simply: the last
plan's results where the inputs are the very same values."""

from __future__ import annotations

import collections
import operator
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from kompute_dml.device.memory import Tensor

from .host_eval import SHAPE_ONLY
from .plan_context import SMALL_HOST_BYTES
from .values import DeviceValue, _value_shape

if TYPE_CHECKING:
    from .plan_context import PlanContext

# Host inputs of a device node are keyed by their bytes up to this size; a node fed a larger host
# value is planned as before
KEY_HOST_BYTES = 1 << 16
# Input offsets are keyed modulo this: an operator's choices may depend on an offset's alignment,
# never beyond Vulkan's largest minStorageBufferOffsetAlignment
OFFSET_ALIGN = 256
UNTRACEABLE = "untraceable"  # the marker of a node (at one key) whose handler is always run
# A node that found no trace at this many plans in a row is traced again only after a plan finds one
MISSES_UNTRACED = 2

# a tensor of a trace: ("o", k, desc, offset) in output request k's buffer; ("i", j, desc, offset
# from input j's) in input j's buffer; ("f", tensor) a tensor that lives as long as the model
_Ref = tuple[Any, ...]


class Untraceable(Exception):
    """The handler did something a trace cannot express."""


def input_key(names: tuple[str, ...], ins: list[Any], env: dict[str, Any]) -> tuple[Any, ...] | None:
    """What a handler's work depends on in its inputs (module docstring); None: not keyed."""
    parts: list[Any] = []
    buffers: dict[int, tuple[int, int]] = {}
    for j, (n, v) in enumerate(zip(names, ins)):
        if v is None:
            parts.append(None)
        elif n not in env:  # a constant of the model (device_graph's lookup)
            parts.append("c")
        elif type(v) is DeviceValue:
            t = v.tensor
            b, off = t.buffer.serial, t.offset
            first = buffers.get(b)
            if first is None:
                buffers[b] = (j, off)
                parts.append((v.shape, v.dtype, t.desc, off % OFFSET_ALIGN))
            else:
                parts.append((v.shape, v.dtype, t.desc, off % OFFSET_ALIGN, first[0], off - first[1]))
        elif isinstance(v, (np.ndarray, np.generic)) and v.nbytes <= KEY_HOST_BYTES:
            parts.append((v.dtype.str, v.shape, v.tobytes()))
        else:
            return None
    return tuple(parts)


class Trace:
    """One device node's recorded work (module docstring)."""

    __slots__ = ("execs", "notes", "out_calls", "results")

    def __init__(self, out_calls: tuple[Any, ...], execs: tuple[Any, ...], results: tuple[Any, ...],
                 notes: tuple[str, ...]) -> None:
        self.out_calls = out_calls  # (sizes, dtype, index of `over` among the inputs or None, written in place)
        self.execs = execs  # (compiled operator, input refs, output refs)
        self.results = results  # ("same", j) | ("dv", ref, shape, dtype) | ("host", value)
        self.notes = notes

    def replay(self, ctx: PlanContext, rec: Any, ins: list[Any]) -> list[Any] | None:
        """Record the node's work again on this plan's buffers; None (nothing recorded) where an
        output request's in-place decision differs from the trace's."""
        bufs = []
        for sizes, dtype, j, inplace in self.out_calls:
            over = None if j is None else ins[j]
            t = ctx.out_tensor(sizes, dtype, over)
            if (isinstance(over, DeviceValue) and t.buffer is over.tensor.buffer) != inplace:
                return None
            bufs.append(t.buffer)
        execute = rec.execute
        for op, ri, ro in self.execs:
            execute(op, [_resolve(r, bufs, ins) for r in ri], [_resolve(r, bufs, ins) for r in ro])
        outs: list[Any] = []
        for r in self.results:
            if r[0] == "same":
                outs.append(ins[r[1]])
            elif r[0] == "dv":
                outs.append(DeviceValue(_resolve(r[1], bufs, ins), r[2], r[3]))
            else:
                outs.append(r[1])
        for msg in self.notes:
            ctx.note(msg)
        return outs


def _resolve(r: _Ref | None, bufs: list[Any], ins: list[Any]) -> Any:
    """A trace's tensor on a replay's output buffers `bufs` and inputs `ins`."""
    if r is None:
        return None
    kind = r[0]
    if kind == "o":
        return Tensor.trusted(bufs[r[1]], r[2], r[3])
    if kind == "f":
        return r[1]
    if kind == "i":
        t = ins[r[1]].tensor
        return Tensor.trusted(t.buffer, r[2], t.offset + r[3])
    return [_resolve(x, bufs, ins) for x in r[1]]  # ("l", refs): a list field


class TracingContext:
    """The plan's context as a handler sees it while its trace is made: every call passes to
    the PlanContext; those a trace replays are noted."""

    def __init__(self, ctx: PlanContext, ins: list[Any]) -> None:
        self._ctx = ctx
        self._ins = ins
        self._in_bufs: dict[int, int] = {}
        for j, v in enumerate(ins):
            if isinstance(v, DeviceValue):
                self._in_bufs.setdefault(v.tensor.buffer.serial, j)
        self._out_bufs: dict[int, int] = {}
        self._kept: set[int] = set()  # serials of the buffers of tensors that live as long as the model
        self._keep: list[Any] = []  # and those tensors
        self.out_calls: list[Any] = []
        self.execs: list[Any] = []
        self.notes: list[str] = []
        self.broken = ""  # why the trace cannot express the handler's work

    def __getattr__(self, name: str) -> Any:  # device, memo, prepared, host, is_constant, ...
        return getattr(self._ctx, name)

    # ---- the calls a trace replays ----------------------------------------------------
    def out_tensor(self, sizes: Any, dtype: Any, over: Any = None) -> Tensor:
        t = self._ctx.out_tensor(sizes, dtype, over)
        j = None
        if over is not None:
            j = next((k for k, v in enumerate(self._ins) if v is over), None)
            if j is None:
                self.broken = "an output written over a value that is not an input"
        inplace = isinstance(over, DeviceValue) and t.buffer is over.tensor.buffer
        if not inplace and t.buffer.serial in self._out_bufs:
            self.broken = "one buffer for two outputs"
        self._out_bufs.setdefault(t.buffer.serial, len(self.out_calls))
        self.out_calls.append((tuple(int(s) for s in sizes), dtype, j, inplace))
        return t

    def to_device(self, value: Any, stats: Any, name: str | None = None) -> Tensor:
        t = self._ctx.to_device(value, stats, name)
        if not isinstance(value, DeviceValue):
            self._lasting(t, value, name)
        return t

    def upload_group(self, arrays: list[np.ndarray], stats: Any,
                     names: tuple[str | None, ...] | None = None) -> list[Tensor]:
        ts = self._ctx.upload_group(arrays, stats, names)
        for t, a, n in zip(ts, arrays, names or (None,) * len(arrays)):
            self._lasting(t, a, n)
        return ts

    def weight_to_device(self, name: str, rows: int, stats: Any) -> Tensor:
        t = self._ctx.weight_to_device(name, rows, stats)  # kept by the model, per layout
        self._keep_tensor(t)
        return t

    def constant_as(self, name: str, dtype: Any, stats: Any) -> Tensor:
        t = self._ctx.constant_as(name, dtype, stats)  # kept by the model, per type
        self._keep_tensor(t)
        return t

    def note(self, msg: str) -> None:
        self.notes.append(msg)
        self._ctx.note(msg)

    def _lasting(self, t: Tensor, value: Any, name: str | None) -> None:
        """A host value's tensor: kept by a trace only where it lives as long as the model (a
        constant, or small bytes shared by plans), not in one plan's staging buffer."""
        if (name is not None and self._ctx.is_constant(name)) or np.asarray(value).nbytes <= SMALL_HOST_BYTES:
            self._keep_tensor(t)
        else:
            self.broken = "a host value uploaded into the plan's own staging buffer"

    def _keep_tensor(self, t: Tensor) -> None:
        self._kept.add(t.buffer.serial)
        self._keep.append(t)

    # ---- what the handler leaves for later nodes: not expressible ------------------------
    def hold_for_members(self, value: Any, members: int) -> None:
        self.broken = "values held for later nodes"
        self._ctx.hold_for_members(value, members)

    def release_after_node(self, value: Any) -> None:
        self.broken = "values held for later nodes"
        self._ctx.release_after_node(value)

    def attach(self, owner: Any, *values: Any) -> None:
        self.broken = "results attached for later nodes"
        self._ctx.attach(owner, *values)

    # ---- the recording's executions -------------------------------------------------------
    def observe(self, op: Any, inputs: Any, outputs: Any) -> None:
        """Recording.observer: an execution the handler recorded."""
        try:
            self.execs.append((op, tuple(self._ref(t) for t in inputs), tuple(self._ref(t) for t in outputs)))
        except Untraceable as e:
            self.broken = str(e)

    def _ref(self, t: Any) -> _Ref | None:
        if t is None:
            return None
        if isinstance(t, (list, tuple)):
            return ("l", tuple(self._ref(x) for x in t))
        if type(t) is not Tensor:
            raise Untraceable(f"a binding that is not a Tensor ({type(t).__name__})")
        b = t.buffer.serial
        k = self._out_bufs.get(b)
        if k is not None:
            return ("o", k, t.desc, t.offset)
        j = self._in_bufs.get(b)
        if j is not None:
            return ("i", j, t.desc, t.offset - self._ins[j].tensor.offset)
        if b in self._kept:
            return ("f", t)
        raise Untraceable("a tensor of a buffer that is neither an input's, an output's nor the model's")

    def trace(self, outs: list[Any]) -> Trace | None:
        """The trace of the handler's work, its results `outs`; None where it is not expressible."""
        results: list[Any] = []
        try:
            for v in outs:
                j = next((k for k, x in enumerate(self._ins) if x is v), None) if v is not None else None
                if j is not None:
                    results.append(("same", j))
                elif type(v) is DeviceValue:
                    results.append(("dv", self._ref(v.tensor), v.shape, v.dtype))
                elif v is None or isinstance(v, (np.ndarray, np.generic)):
                    results.append(("host", v))
                else:
                    raise Untraceable(f"a result of type {type(v).__name__}")
        except Untraceable as e:
            self.broken = str(e)
        if self.broken:
            return None
        return Trace(tuple(self.out_calls), tuple(self.execs), tuple(results), tuple(self.notes))


def run_node(ctx: PlanContext, rec: Any, state: Any, made: dict[Any, Any], i: int, key: tuple[Any, ...] | None,
             handler: Callable[..., list[Any]], node: Any, ins: list[Any], stats: Any) -> list[Any]:
    """Device node i of a plan: its trace at `key` replayed where there is one, else its handler
    run, and traced into `made` (which the plan adds to `state.node_traces` once it is complete)
    unless the node found no trace at its last MISSES_UNTRACED plans (its inputs change with
    every plan: a decoder's products over the past; a trace would never be replayed)."""
    if key is None:
        return handler(ctx, node, ins, stats)
    k = (i, key)
    traces = state.node_traces
    trace = traces.get(k)
    if trace is UNTRACEABLE:
        return handler(ctx, node, ins, stats)
    misses = state.trace_misses
    if trace is not None:
        traces.move_to_end(k)
        misses.pop(i, None)
        outs = trace.replay(ctx, rec, ins)
        if outs is not None:
            stats.replayed_nodes += 1
            return outs
    else:
        missed = misses[i] = misses.get(i, 0) + 1
        if missed > MISSES_UNTRACED:
            return handler(ctx, node, ins, stats)
    tracer = TracingContext(ctx, ins)
    rec.observer = tracer.observe
    try:
        outs = handler(tracer, node, ins, stats)
    finally:
        rec.observer = None
    made[k] = tracer.trace(outs) or UNTRACEABLE
    return outs


def keep_traces(traces: collections.OrderedDict[Any, Any], made: dict[Any, Any], capacity: int) -> None:
    """The traces a completed plan made join the model's, the least recently used dropped beyond
    `capacity`."""
    traces.update(made)
    while len(traces) > capacity:
        traces.popitem(last=False)


def host_node(rep: Any, last: dict[int, Any], i: int, node: Any, ins: list[Any], stats: Any) -> list[Any]:
    """Host node i of a plan (rep._host_node): the results of the model's last plan again where
    its inputs are the very same host values (shape arithmetic, whose results are the host memo's
    shared read-only arrays, repeats in every plan) or, for a Shape node, values of the same
    shape; else computed, and kept for the next plan where they are read-only arrays."""
    shape_of = node.op_type in SHAPE_ONLY
    prev = last.get(i)
    if prev is not None:
        keys, outs, _same = prev
        if (all(map(operator.is_, ins, keys)) if not shape_of  # (None is None: an absent input matches)
                else all((v is None and k is None) or (v is not None and _value_shape(v) == k) for v, k in zip(ins, keys))):
            return list(outs)
    outs = rep._host_node(i, node, ins, stats)
    if all(o is None or isinstance(o, np.generic) or (isinstance(o, np.ndarray) and not o.flags.writeable)
           for o in outs) and (shape_of or not any(isinstance(v, DeviceValue) for v in ins)):
        # (the third: whether the inputs are compared by identity, device_graph's fast path)
        last[i] = (tuple(_value_shape(v) if shape_of and v is not None else v for v in ins), outs, not shape_of)
    else:
        last.pop(i, None)
    return outs
