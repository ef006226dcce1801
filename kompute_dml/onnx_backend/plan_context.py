"""PlanContext: the NodeContext (context.py) of handlers (handlers*.py) while a whole-graph plan
(device_graph.GraphPlan) is built, where node-by-node runs have an EagerContext: host values
stay host values, device outputs come from the plan's buffers (shared by a model's plans, by
size class, and reused once their last reader is recorded), host values go up once per plan."""

from __future__ import annotations

import collections
from typing import TYPE_CHECKING, Any

import numpy as np

import kompute_dml as kdml
from kompute_dml.core.inputs import as_host_array
from kompute_dml.core.tensor_desc import packed_strides
from kompute_dml.device.memory import packed_desc_for

from .host_eval import compact
from .step_reuse import Lineage, Memo
from .values import DeviceValue, FallbackNeeded, RunStats, check_bindable

if TYPE_CHECKING:
    from .rep import BackendRep

_MIN_BLOCK = 256
_FINE_BLOCK = 1 << 20


# Host values (computed by host nodes) of at most this many bytes go up once per model and are
# bound by every plan that needs the same bytes again, at most SMALL_HOST_VALUES of them. The
# first plan that needs one places it among its other host values (_staged, one transfer):
# an upload of its own would cost a synchronous allocation and a submission, and the allocation
# waits while kp's thread makes the plan's large buffers (with runtime/later.py's spares, the allocation
# part of MiniLM's 64 x 256 first run went from 3.5 to 0.3 ms on an H100 host: benchmarks/first_runs.py).
SMALL_HOST_BYTES = 256
SMALL_HOST_VALUES = 64
# An output may take a free plan buffer of up to this many times its own size class (PlanContext.
# _larger_free): a larger factor saves more allocations and wastes more of the buffers it takes.
LARGER_FREE = 2
# A plan's larger host values go up together, into buffers of at least this size (PlanContext._staged)
STAGED_BYTES = 1 << 20


def _block(nbytes: int) -> int:
    """The size class of a plan buffer, so a freed buffer fits later outputs: powers of two up to
    1 MiB, then four classes per octave (5/8, 6/8, 7/8 and 8/8 of the next power of two: a new
    sequence length's large buffers cost their allocation, ~18 us per MiB on the H100, and a
    power of two wastes up to half of one, e.g. 256 MiB for 201 MiB of attention scores)."""
    top = 1 << (max(nbytes, 1) - 1).bit_length()
    if top <= _FINE_BLOCK:
        return max(_MIN_BLOCK, top)
    step = top >> 3
    return -(-nbytes // step) * step


class PlanContext:
    """What handlers call on their `rep` while a plan is built."""

    def __init__(self, rep: BackendRep, lineage: Lineage | None = None) -> None:
        self.rep = rep
        self.device = rep.device
        self.kept: list[Any] = []  # buffers uploaded for this plan (host-known values)
        self._staged_buf: kdml.Buffer | None = None  # _staged: the host values' current buffer,
        self._staged_used = 0  # its bytes placed,
        self._pending: list[tuple[int, np.ndarray]] = []  # and those not yet written (offset, bytes)
        # small host values placed there, not yet written: they join rep.state.plan_small once written
        self._small: dict[tuple[Any, ...], kdml.Tensor] = {}
        self.staged_bytes = 0  # the host values' bytes this plan placed there
        # Every plan of a model draws on the same buffers (rep.state.plan_buffers, by size class): runs
        # of one model never overlap (BackendRep.run holds a lock and waits), so another input
        # signature's plan reuses them, allocating only what it needs beyond them.
        self._shared: dict[int, list[kdml.Buffer]] = rep.state.plan_buffers
        self._free: dict[int, list[kdml.Buffer]] = collections.defaultdict(list)
        self._by_serial: dict[int, kdml.Buffer] = {}
        # A plan made from an earlier one of the same input names (step_reuse.py) starts from that
        # plan's free buffers and takes, where it needs a new buffer, the one that plan made at that
        # point: its requests then get that plan's buffers, and its steps match that plan's.
        if lineage is None:
            lineage = Lineage({size: tuple(bufs) for size, bufs in self._shared.items()}, ())
        self.lineage_start = lineage.start
        self.allocs: list[kdml.Buffer] = []  # the buffers this plan took as new ones, in order
        self._queue: dict[int, collections.deque[kdml.Buffer]] = collections.defaultdict(collections.deque)
        for buf in lineage.allocs:
            self._queue[buf.nbytes].append(buf)
            self._by_serial[buf.serial] = buf
        for size, bufs in lineage.start.items():
            self._free[size] = list(bufs)
            self._by_serial.update((b.serial, b) for b in bufs)
        # the model's other plan buffers (made by plans of other lines), taken before a new one
        self._spare: dict[int, list[kdml.Buffer]] = collections.defaultdict(list)
        for size, bufs in self._shared.items():
            for b in bufs:
                if b.serial not in self._by_serial:
                    self._spare[size].append(b)
                    self._by_serial[b.serial] = b
        # what step_reuse.py logs of the current step: its out_tensor requests (sizes, dtype, over,
        # buffer, where the buffer came from), whether it did anything else a step cannot repeat
        # from its log (held values for later nodes, used the memo), the nodes it ended, its notes
        self.requests: list[tuple[Any, ...]] = []
        self.irregular = False
        self.ends = 0
        self.notes: list[str] = []
        self._added: list[kdml.Buffer] = []  # joins the shared buffers once the plan is made (share_buffers)
        self._refs: collections.Counter[int] = collections.Counter()
        # Buffers handed out while the current node is recorded: those its outputs do not hold
        # when it ends (a handler's temporaries) are free for the next node (end_node).
        self._fresh: list[kdml.Buffer] = []
        self._after_node: list[DeviceValue] = []  # holds released when the node ends
        self._attached: dict[int, list[DeviceValue]] = collections.defaultdict(list)
        # the values whose last reader is the node being recorded (device_graph sets it per node):
        # an output may be written over one of them (out_tensor's `over`)
        self.dying: list[Any] = []
        self.allocated = 0  # bytes this plan added to the shared buffers
        self.memo: dict[int, Any] = Memo(self)  # results handlers share within the plan (handlers.py)
        self._out_descs: dict[tuple[Any, ...], tuple[kdml.TensorDesc, int]] = {}  # out_tensor's, by type and shape

    # ---- the BackendRep methods handlers use ----------------------------------------
    def host(self, value: Any, stats: RunStats) -> Any:
        if isinstance(value, DeviceValue):
            raise FallbackNeeded("it needs a value computed on the device on the host while planning")
        if isinstance(value, list):
            return [self.host(v, stats) for v in value]
        return value

    def is_constant(self, name: str | None) -> bool:
        return self.rep.is_constant(name)

    def weight_to_device(self, name: str, rows: int, stats: RunStats) -> kdml.Tensor:
        return self.rep.weight_to_device(name, rows, stats)  # uploaded once per model and layout

    def constant_as(self, name: str, dtype: Any, stats: RunStats) -> kdml.Tensor:
        return self.rep.constant_as(name, dtype, stats)  # uploaded once per model and type

    def to_device(self, value: Any, stats: RunStats, name: str | None = None) -> kdml.Tensor:
        if isinstance(value, DeviceValue):
            return value.tensor
        if name is not None and self.rep.is_constant(name):
            return self.rep.to_device(value, stats, name)
        arr = np.asarray(value)
        if arr.nbytes <= SMALL_HOST_BYTES:  # the same few bytes in every plan (a Cast's 0 and 1)
            key = (arr.dtype.str, arr.shape, arr.tobytes())
            t = self.rep.state.plan_small.get(key)
            if t is None:
                t = self._small.get(key)
            if t is None:
                t = self._small[key] = self._staged(np.ascontiguousarray(arr))
                stats.constant_uploads += 1
            else:
                self.kept.append(t)  # (a staged one is kept with its buffer)
            return t
        part = np.ascontiguousarray(compact(arr) if arr.ndim else arr)
        t = self._staged(part)
        stats.constant_uploads += 1
        if part.size == arr.size:
            return t
        # a broadcast view (host_eval.BROADCAST_BYTES): its distinct part, bound with zero strides
        strides = [0 if n != m else st for n, m, st in zip(part.shape, arr.shape, packed_strides(part.shape))]
        return kdml.Tensor(t.buffer, kdml.TensorDesc(t.desc.data_type, arr.shape, tuple(strides)), t.offset)

    def _staged(self, arr: np.ndarray) -> kdml.Tensor:
        """A tensor for host value `arr` in this plan's host-value buffer, written later with the
        buffer's other values in one transfer (write_staged): one allocation and one submission
        per plan, not per value (each a fence wait: ~0.25 ms on the H100)."""
        desc = packed_desc_for(as_host_array(arr, "array"))  # a type DirectML lacks: UnsupportedError, as an upload's
        at = -(-self._staged_used // 16) * 16
        if self._staged_buf is None or at + desc.byte_size > self._staged_buf.nbytes:
            self.write_staged()
            size = min(max(STAGED_BYTES, _block(desc.byte_size)), check_bindable(self.device, desc.byte_size))
            self._staged_buf = kdml.Buffer(self.device, size, zeroed=False, later=True)  # written at a flush
            self.kept.append(self._staged_buf)
            at = 0
        self._pending.append((at, arr.reshape(-1).view(np.uint8)))
        self._staged_used = at + desc.byte_size
        self.staged_bytes += desc.byte_size
        return kdml.Tensor.trusted(self._staged_buf, desc, at)

    def write_staged(self) -> None:
        """Write the host values placed since the last call: before the device may read them
        (device_graph.py calls it before each flush and at the plan's end)."""
        if not self._pending:
            return
        start = self._pending[0][0]  # placed in order: [start, used) holds them all, and no earlier one
        data = np.zeros(self._staged_used - start, np.uint8)
        for at, raw in self._pending:
            data[at - start:at - start + raw.size] = raw
        # no submission has bound [start, used) yet: the copy goes with the next one (runtime/deferred_writes.py),
        # not after a wait for the heads in flight that read the buffer's earlier ranges
        self._staged_buf.memory.write(start, data, settle=False)  # type: ignore[union-attr]
        self._pending.clear()
        if self._small:  # written: later plans may bind them (a plan that fails never writes its own)
            small = self.rep.state.plan_small
            small.update(self._small)
            self._small.clear()
            while len(small) > SMALL_HOST_VALUES:
                small.pop(next(iter(small)))  # the oldest: its plans keep it (self.kept)

    def upload_group(self, arrays: list[np.ndarray], stats: RunStats,
                     names: tuple[str | None, ...] | None = None) -> list[kdml.Tensor]:
        return [self.to_device(a, stats, n) for a, n in zip(arrays, names or (None,) * len(arrays))]

    def out_tensor(self, sizes: Any, dtype: Any, over: Any = None) -> kdml.Tensor:
        """A buffer for the current node's output; `over`, an input the operator may overwrite
        exactly in place, is reused where nothing reads it after this node (_writable)."""
        key = (dtype, tuple(sizes))
        hit = self._out_descs.get(key)
        if hit is None:  # the descriptor and size class of this type and shape (a plan asks again and again)
            desc = kdml.TensorDesc(kdml.DataType.from_numpy(dtype), key[1] if len(sizes) else (1,))
            hit = self._out_descs[key] = (desc, min(_block(desc.byte_size), check_bindable(self.device, desc.byte_size)))
        desc, size = hit
        if over is not None and self._writable(over, desc):
            self.requests.append((sizes, dtype, over, over.tensor.buffer, None))
            return kdml.Tensor.trusted(over.tensor.buffer, desc, 0)
        free = self._free[size]
        buf = free.pop() if free else self._larger_free(size)
        source = "free"
        if buf is None:
            buf, source = self._new_buffer(size)
        self._fresh.append(buf)
        self.requests.append((sizes, dtype, over, buf, source))
        return kdml.Tensor.trusted(buf, desc, 0)

    def undo_request(self, request: tuple[Any, ...]) -> None:
        """Take back out_tensor's `request` (the last one not taken back): its buffer free again,
        where it was before (step_reuse.py, a step whose requests do not match its log's)."""
        _sizes, _dtype, _over, buf, source = request
        if source is None:  # written over an input: nothing was taken
            return
        self._fresh.pop()
        if source == "queue":
            self._queue[buf.nbytes].appendleft(buf)
        elif source == "spare":
            self._spare[buf.nbytes].append(buf)
        else:  # (a new one stays the plan's, free)
            self._free[buf.nbytes].append(buf)
        if source != "free":
            self.allocs.pop()

    def _new_buffer(self, size: int) -> tuple[kdml.Buffer, str]:
        """A buffer of `size` not among the free ones; "queue": the one the lineage's plan made here."""
        larger = [k for k in (*self._queue, *self._spare) if size <= k <= size * LARGER_FREE
                  and (self._queue.get(k) or self._spare.get(k))]  # (an exact size class first)
        source = "new"
        if larger:
            k = min(larger)
            source = "queue" if self._queue.get(k) else "spare"
            buf = self._queue[k].popleft() if source == "queue" else self._spare[k].pop()
        else:
            # not zeroed (no fill submission per buffer): every output is written before a
            # later node reads it, and bytes past an output are never read; made on another
            # thread while the plan goes on, until a flush or the program's encoding binds it
            buf = kdml.Buffer(self.device, size, zeroed=False, later=True)
            self._added.append(buf)
            self._by_serial[buf.serial] = buf
            self.allocated += size
        self.allocs.append(buf)
        return buf, source

    def input_buffer(self, nbytes: int) -> kdml.Buffer:
        """The buffer of the plan's inputs: a free one of the model's plan buffers of its size
        class (a run writes its inputs before anything reads them, as each node its outputs: a
        decoder's next length then allocates nothing for its inputs), else a new one that joins
        them with the plan. Never handed out again by this plan: its values are the inputs."""
        size = _block(nbytes)
        free = self._free[size]
        # not zeroed; made on kp's thread: a synchronous allocation waits for the driver while the
        # plan's large ones are made (docs/onnx.md)
        buf = free.pop() if free else self._new_buffer(size)[0]
        self._by_serial.pop(buf.serial, None)
        return buf

    def share_buffers(self) -> None:
        """The buffers this plan allocated join the model's shared ones (the plan is made): a plan
        that fails (the graph then runs node by node) leaves them to be freed with it."""
        for buf in self._added:
            self._shared.setdefault(buf.nbytes, []).append(buf)
        self._added.clear()

    def _larger_free(self, size: int) -> kdml.Buffer | None:
        """The free buffer of the smallest class above `size`, up to LARGER_FREE times it, else
        None: an output that finds no free buffer of its own class takes a larger one that is
        free before a new one is allocated (MiniLM 64 x 256: the feed-forward's 96 MiB GELU
        output in the 192 MiB attention scores' buffer, dead by then)."""
        fits = [k for k, bufs in self._free.items() if bufs and size < k <= size * LARGER_FREE]
        return self._free[min(fits)].pop() if fits else None

    def _writable(self, value: Any, desc: kdml.TensorDesc) -> bool:
        """Whether an output of `desc` may be written over `value`: its last reader is this node,
        no other value (a view) or memoized result holds its buffer, the buffer is the plan's own,
        and the value lies packed at its start with the output's type and sizes. The output's
        hold then keeps the buffer once the value is dropped at the node's end."""
        if not isinstance(value, DeviceValue) or not any(v is value for v in self.dying):
            return False
        t = value.tensor
        key = t.buffer.serial
        return (self._refs.get(key, 0) == 1 and key in self._by_serial and key not in self._attached and t.offset == 0
                and t.desc.same_layout(desc))

    def note(self, msg: str) -> None:
        self.notes.append(msg)
        self.rep._note(msg)

    @property
    def prepared(self) -> BackendRep:
        return self.rep

    # ---- liveness ----------------------------------------------------------------------
    def hold(self, value: Any) -> None:
        if isinstance(value, DeviceValue):
            self._refs[value.tensor.buffer.serial] += 1

    def hold_for_members(self, value: Any, members: int) -> None:
        """Keep value's buffer for `members` nodes still to come that each read it through
        views made now (product_groups.py); each member releases its hold (release_after_node)
        once its own outputs are held, so the buffer is reused after the last view dies."""
        self.irregular = True
        for _ in range(members):
            self.hold(value)

    def release_after_node(self, value: Any) -> None:
        """Drop one hold of value's buffer when the current node ends (after its outputs are held)."""
        self.irregular = True
        if isinstance(value, DeviceValue):
            self._after_node.append(value)

    def attach(self, owner: Any, *values: Any) -> None:
        """Keep `values` (a handler's results that later nodes may reuse through rep.state.memo, keyed
        by `owner`) as long as owner's buffer lives."""
        self.irregular = True
        if not isinstance(owner, DeviceValue):
            return
        for v in values:
            if isinstance(v, DeviceValue):
                self.hold(v)
                self._attached[owner.tensor.buffer.serial].append(v)

    def end_node(self) -> None:
        """The current node is recorded and its outputs held: its handler's temporaries (buffers
        handed out during it that nothing holds) are free for later nodes; the recording's
        barriers order their reuse (a later write waits for this node's reads)."""
        self.ends += 1
        if not self._fresh and not self._after_node:  # (most nodes of a plan: host nodes, views)
            return
        for v in self._after_node:
            self.drop(v)
        self._after_node.clear()
        for buf in self._fresh:
            key = buf.serial
            if self._refs[key] <= 0 and key in self._by_serial and not self._is_free(buf):
                self._refs.pop(key, None)
                self._free[buf.nbytes].append(buf)
        self._fresh.clear()

    def _is_free(self, buf: kdml.Buffer) -> bool:
        return any(b is buf for b in self._free[buf.nbytes])

    def drop_names(self, names: tuple[str, ...], env: dict[str, Any]) -> None:
        """The values of `names` (their last reader was recorded) out of `env`, their buffers dropped."""
        for name in names:
            v = env.pop(name, None)
            if type(v) is DeviceValue:  # (host values hold no buffer: most of those dropped)
                self.drop(v)

    def drop(self, value: Any) -> None:
        if not isinstance(value, DeviceValue):
            return
        key = value.tensor.buffer.serial
        self._refs[key] -= 1
        if self._refs[key] <= 0 and key in self._by_serial:
            del self._refs[key]
            buf = self._by_serial[key]
            if not self._is_free(buf):
                self._free[buf.nbytes].append(buf)
            for v in self._attached.pop(key, ()):
                self.drop(v)


def plan_order(rep: BackendRep, feeds: dict[str, Any]) -> list[tuple[int, tuple[str, ...], bool]]:
    """A whole-graph plan's steps (device_graph.GraphPlan): per node that has one (not absorbed
    into a fused chain), its index, the values its step reads last (none an output or an input:
    dropped after it) and whether it carries a chain. The same for every plan of the same input
    names, so made once per model and names."""
    names = frozenset(feeds)
    order = rep.state.plan_liveness.get(names)
    if order is None:
        g, keep, last = rep.graph, set(rep.output_names), {}
        for i in range(len(g.node)):
            for n in rep.fusions.step_inputs(g, i):  # a fused chain reads its values at its carrier
                last[n] = i
        dying: list[list[str]] = [[] for _ in g.node]
        for n, i in last.items():
            if n not in keep and n not in names:
                dying[i].append(n)
        chains, absorbed = rep.fusions.by_carrier, rep.fusions.absorbed
        order = [(i, tuple(dying[i]), i in chains) for i in range(len(g.node)) if i not in absorbed]
        rep.state.plan_liveness[names] = order
    return order
