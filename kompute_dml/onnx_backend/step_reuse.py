"""Plan reuse: a whole-graph plan made from the model's previous plan of the same input names,
taking that plan's recorded work for every step whose inputs are the very same values.

A decoder with its key/value cache (bench/decoders.py) makes a plan per past length, and most of
a step's work does not depend on it: the new token's projections, layer norms and feed-forward.
Node traces (node_traces.py) spare those nodes their handlers, but the plan still looks every
node up, keys its inputs and records its executions again (a small GPT-2's plan took 13.3 ms on
the H100 host with traces alone, 10.8 with this: benchmarks/RESULTS.md, `benchmarks.decode_plans`).
A plan made here goes through the same steps
(plan_context.plan_order) and, per step, compares the values it reads with those the previous
plan's step read (`is`: the same host arrays, the same DeviceValues). Where they are the same and
its buffer requests get the same buffers, the step takes the previous plan's executions as they
are (Recording.splice) and its outputs as they were; anything else runs as in any plan.

The same buffers come from the plan's lineage (plan_context.PlanContext): a plan made from an
earlier one starts from the free buffers that plan started from and, where it needs a new buffer,
takes the one that plan took at that point. Its requests then get that plan's buffers while its
steps ask for what that plan's asked, so a step whose inputs changed (the past's concatenation,
the attention over it) writes its output where the previous plan's did, and the steps after it
read the same values again. A step's outputs equal to the previous plan's (the same buffer,
offset, descriptor and shape, or the same host bytes) are replaced by those, for the same reason.
Where the line has no such buffer left, a plan takes one the line made of a larger size class (up
to plan_context.LARGER_FREE times) or one of the model's plan buffers made by another line, before
a new one: as much memory as plans took before they repeated steps.

A step is repeated only where what it did can be repeated from its log: no device check among its
executions, no values held for later nodes, no use of the plan's memo (a result of another step),
at most one node ended (an unfused chain ends several), every output written over an input named
by the input's position. A request that gets another buffer than the log's is taken back and the
step runs as in any plan. Correctness rests on the allocator's own bookkeeping: a repeated step
asks for and holds its buffers as it would have, so later steps see the buffers it uses as taken.
"""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from .values import DeviceValue

if TYPE_CHECKING:
    import kompute_dml as kdml

    from .plan_context import PlanContext
    from .rep import BackendRep

# Host values up to this size are compared by their bytes (a step's outputs, with the previous plan's)
SAME_HOST_BYTES = 1 << 12


class Lineage(NamedTuple):
    """Where a plan's buffers came from: the model's free plan buffers when the first plan of
    the line began (by size class, in order), and those its plans took as new ones, in order."""

    start: dict[int, tuple[kdml.Buffer, ...]]
    allocs: tuple[kdml.Buffer, ...]


class Memo(dict):  # type: ignore[type-arg]
    """PlanContext.memo: a step that uses it depends on other steps' results (not repeated)."""

    def __init__(self, ctx: PlanContext) -> None:
        super().__init__()
        self._ctx = ctx

    def get(self, key: Any, default: Any = None) -> Any:
        self._ctx.irregular = True
        return super().get(key, default)

    def __getitem__(self, key: Any) -> Any:
        self._ctx.irregular = True
        return super().__getitem__(key)

    def __setitem__(self, key: Any, value: Any) -> None:
        self._ctx.irregular = True
        super().__setitem__(key, value)

    def __contains__(self, key: Any) -> bool:
        self._ctx.irregular = True
        return super().__contains__(key)

    def setdefault(self, key: Any, default: Any = None) -> Any:
        self._ctx.irregular = True
        return super().setdefault(key, default)

    def pop(self, key: Any, *default: Any) -> Any:
        self._ctx.irregular = True
        return super().pop(key, *default)


class StepLog(NamedTuple):
    """What one step of a plan read and did."""

    ins: tuple[Any, ...]  # the values it read
    outs: tuple[Any, ...]  # its outputs' values, per output name
    start: int  # its executions in its plan's program: [start, end)
    end: int
    dispatches: int
    requests: tuple[tuple[Any, ...], ...]  # out_tensor's: sizes, dtype, index of `over` among ins or None, buffer
    nodes: int  # the device nodes it ran
    notes: tuple[str, ...]


class Parent(NamedTuple):
    """A completed plan as the next plan of its input names reads it."""

    logs: list[StepLog | None]
    program: Any  # its RecordedProgram
    lineage: Lineage
    inputs: dict[str, Any]  # its input values


def same_value(a: Any, b: Any) -> bool:
    """Whether value `a` of this plan can stand for value `b` of the previous plan."""
    if a is b:
        return True
    ta = type(a)
    if ta is not type(b):
        return False
    if ta is DeviceValue:
        x, y = a.tensor, b.tensor
        return (x.buffer is y.buffer and x.offset == y.offset and x.desc == y.desc and a.shape == b.shape
                and a.dtype == b.dtype)
    if ta is np.ndarray or isinstance(a, np.generic):
        return (a.dtype == b.dtype and a.shape == b.shape and a.nbytes <= SAME_HOST_BYTES
                and a.tobytes() == b.tobytes())
    return False


class StepReuse:
    """One plan's side of reuse: its steps' logs, and the previous plan's steps it repeats."""

    def __init__(self, rep: BackendRep, names: frozenset[str]) -> None:
        self.rep = rep
        self.names = names
        self.parent: Parent | None = rep.state.plan_parent.get(names) if rep.state.step_reuse else None
        self.logs: list[StepLog | None] = []
        self.nodes = 0  # the device nodes the last repeated step ran
        self.reused = 0  # the device nodes this plan repeated
        self._steps = rep.state.step_names
        self._nodes, self._fusions = rep.node_table, rep.fusions.by_carrier
        self.ctx: Any = None
        self.rec: Any = None
        self.env: dict[str, Any] = {}
        self.lookup: Any = None
        self._mark: tuple[int, int, int] = (0, 0, 0)

    @property
    def lineage(self) -> Lineage | None:
        return None if self.parent is None else self.parent.lineage

    def begin(self, ctx: PlanContext, rec: Any, env: dict[str, Any], lookup: Any) -> None:
        """The plan's context, recording and values; its inputs equal to the previous plan's
        (the same part of the same input buffer) replaced by those."""
        self.ctx, self.rec, self.env, self.lookup = ctx, rec, env, lookup
        if self.parent is not None:
            for name, old in self.parent.inputs.items():
                v = env.get(name)
                if v is not None and v is not old and same_value(v, old):
                    env[name] = old

    def _names(self, i: int, chain: bool) -> tuple[tuple[str, ...], tuple[str, ...]]:
        hit = self._steps.get(i)
        if hit is None:
            node = self._nodes[i]
            if chain:
                fusion = self._fusions[i]
                hit = (tuple(fusion.inputs), (*node[3], *fusion.shared))
            else:
                hit = (tuple(node[2]), tuple(node[3]))
            self._steps[i] = hit
        return hit

    def _read(self, names: tuple[str, ...]) -> tuple[Any, ...]:
        """The values of a step's input names now (None for an omitted optional input)."""
        env, lookup = self.env, self.lookup
        return tuple((env[n] if n in env else lookup(n)) if n else None for n in names)

    def repeat(self, k: int, i: int, chain: bool) -> bool:
        """Step k (node i) as the previous plan's step k, where it read the same values and its
        requests get the same buffers; False (nothing done) otherwise."""
        parent = self.parent
        if parent is None or k >= len(parent.logs):
            return False
        log = parent.logs[k]
        if log is None:
            return False
        env = self.env
        in_names, out_names = self._names(i, chain)
        ins = self._read(in_names)
        if not all(map(operator.is_, ins, log.ins)):
            return False
        ctx = self.ctx
        if log.requests:
            requests = ctx.requests
            requests.clear()
            for sizes, dtype, j, buf in log.requests:
                ctx.out_tensor(sizes, dtype, None if j is None else ins[j])
                if requests[-1][3] is not buf:
                    for r in reversed(requests):
                        ctx.undo_request(r)
                    requests.clear()
                    return False
            requests.clear()
        for name, v in zip(out_names, log.outs):
            if name:
                env[name] = v
                if type(v) is DeviceValue:
                    ctx.hold(v)
        if log.requests:  # (a step that took no buffer has none to free)
            ctx.end_node()
        if log.end > log.start:  # its executions, where this plan's recording has come to
            rec = self.rec
            start = rec.mark[0]
            rec.splice(self.parent.program, log.start, log.end, log.dispatches)
            if start != log.start:
                log = log._replace(start=start, end=start + log.end - log.start)
        for msg in log.notes:
            ctx.note(msg)
        self.logs.append(log)
        self.nodes = log.nodes
        self.reused += log.nodes
        return True

    def start(self) -> None:
        """A step that runs as in any plan begins."""
        ctx = self.ctx
        ctx.requests.clear()
        ctx.irregular = False
        ctx.ends = 0
        ctx.notes.clear()
        self._mark = self.rec.mark

    def done(self, k: int, i: int, chain: bool, nodes: int) -> None:
        """That step ended: its log, and its outputs equal to the previous plan's replaced by those."""
        ctx, env = self.ctx, self.env
        w0, d0, c0 = self._mark
        w1, d1, c1 = self.rec.mark
        log = None
        if not ctx.irregular and c1 == c0 and ctx.ends <= 1:
            in_names, out_names = self._names(i, chain)
            ins = self._read(in_names)
            requests, outs = [], None
            for sizes, dtype, over, buf, _source in ctx.requests:
                j = None if over is None else next((x for x, v in enumerate(ins) if v is over), -1)
                if j == -1:
                    break
                requests.append((sizes, dtype, j, buf))
            else:
                outs = [env.get(n) if n else None for n in out_names]
                if any(type(o) is list or (type(o) is np.ndarray and o.flags.writeable) for o in outs):
                    outs = None  # (a value a later step could change: shared by plans only read-only, as host_node's)
            if outs is not None:
                old = None if self.parent is None or k >= len(self.parent.logs) else self.parent.logs[k]
                if old is not None and len(old.outs) == len(outs):
                    for x, (v, o) in enumerate(zip(outs, old.outs)):
                        if v is not None and v is not o and same_value(v, o):
                            env[out_names[x]] = outs[x] = o
                log = StepLog(ins, tuple(outs), w0, w1, d1 - d0, tuple(requests), nodes, tuple(ctx.notes))
        ctx.requests.clear()
        self.logs.append(log)

    def keep(self, program: Any, inputs: dict[str, Any]) -> None:
        """The plan is made: the next plan of these input names reads this one."""
        ctx = self.ctx
        lineage = Lineage(ctx.lineage_start, tuple(ctx.allocs))
        self.rep.state.plan_parent[self.names] = Parent(self.logs, program, lineage, inputs)
