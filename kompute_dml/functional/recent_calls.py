"""A functional helper's recent calls, recognised by the identity of their arguments.

A helper called again with the very same argument objects needs none of its argument
handling: a Tensor is immutable (its buffer, offset and desc never change) and so are
Python numbers, numpy scalars, data types and devices, so everything the helper derived
from them (descriptors, the compiled operator, device constants, views binding the
caller's tensors) is what it would derive again. The key is the arguments' `id()`s; an
entry keeps its non-Tensor arguments alive (so their ids name them while it exists) and
watches its Tensors through weak references, leaving when any of them is collected (so
no id in a live entry can name another object, and no entry keeps a caller's tensor or
buffer alive). Mutable arguments (numpy arrays, lists) are never part of such a key: the
helper takes its ordinary path for them.

The entry only skips the helper's argument handling: the operator still checks every
binding it has not seen (ops/base.CompiledOperator.bind), e.g. a new pooled output.
"""

from __future__ import annotations

import collections
import itertools
import weakref
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import numpy as np

from ..core.dtypes import DataType
from ..core.tensor_desc import TensorDesc
from ..device.memory import Buffer, Tensor

E = TypeVar("E")
CAPACITY = 256
_serials = itertools.count(1)


def immutable(x: Any) -> bool:
    """True for an argument whose identity fixes its value: None, a Tensor, a Python number
    (not bool: helpers refuse or treat it apart), a string, a numpy scalar or dtype, a
    DataType."""
    return x is None or type(x) in (Tensor, float, int, str) or isinstance(x, (np.generic, np.dtype, DataType))


class RecentCalls(Generic[E]):
    """Entries by the ids of a call's arguments, at most `capacity` (oldest dropped first)."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        self.capacity = capacity
        # key -> (entry, serial, what keeps the key valid: weak refs to its Tensors and
        # the other arguments themselves)
        # (ordered: the oldest goes first in O(1); `next(iter(dict))` after deletions from a plain
        # dict's front scans its tombstones: 57 us an eviction once the helpers churn)
        self._entries: collections.OrderedDict[tuple[int, ...], tuple[E, int, tuple[Any, ...]]] = \
            collections.OrderedDict()

    def get(self, key: tuple[int, ...]) -> E | None:
        hit = self._entries.get(key)
        return None if hit is None else hit[0]

    def add(self, args: tuple[Any, ...], entry: E) -> None:
        """Remember `entry` for a call whose arguments are `args` (every one `immutable`, or
        a Device / data type, kept alive by the entry), keyed by `tuple(map(id, args))`."""
        key = tuple(map(id, args))
        serial = next(_serials)
        drop = _dropper(weakref.ref(self), key, serial)
        held = tuple(weakref.ref(x, drop) if type(x) is Tensor else x for x in args)
        entries = self._entries
        while len(entries) >= self.capacity:
            try:
                entries.popitem(last=False)
            except KeyError:  # another thread emptied it meanwhile
                break
        entries[key] = (entry, serial, held)

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


class BoundCall:
    """A helper call recognised by its arguments: the compiled operator, its bound inputs
    (the library's own views and constants: none of them is a caller's Tensor object) and,
    with `out` given, its bound output. Without `out`, each run takes its output from the
    device's buffer pool (runtime/pool.py: the previous result's buffer once the caller
    dropped it, with its descriptor set and recorded submission), bound through the result
    itself where the compiled output desc (`out_desc`) addresses the same elements as the
    result's (`res_desc`)."""

    __slots__ = ("engine", "inputs", "make", "nbytes", "op", "out_desc", "outputs", "res_desc", "same")

    def __init__(self, op: Any, inputs: list[Tensor | None], res_desc: TensorDesc, out_desc: TensorDesc,
                 out: Tensor | None) -> None:
        dev = op.device
        self.engine, self.op, self.res_desc, self.out_desc = dev.engine, op, res_desc, out_desc
        self.inputs = tuple(inputs)
        self.nbytes = res_desc.byte_size
        self.make = lambda n: Buffer(dev, n)
        self.same = res_desc.layout == out_desc.layout
        self.outputs = None if out is None else (Tensor.trusted(out.buffer, out_desc, out.offset),)

    def run(self, out: Tensor | None) -> Tensor:
        outputs = self.outputs
        if outputs is None:
            engine = self.engine
            with engine.lock:
                buf = engine.pool.take(self.nbytes, self.make)
            out = Tensor.trusted(buf, self.res_desc, 0)  # a packed desc over the whole buffer
            outputs = (out,) if self.same else (Tensor.trusted(buf, self.out_desc, 0),)
        self.op.execute(self.inputs, outputs)
        return out  # type: ignore[return-value]


def _dropper(calls_ref: weakref.ref[RecentCalls[Any]], key: tuple[int, ...], serial: int) -> Callable[[Any], None]:
    """The weak-reference callback of one entry: removes that entry (not a later one under
    the same key) once one of its Tensors is collected."""

    def drop(_ref: Any) -> None:
        calls = calls_ref()
        if calls is None:
            return
        hit = calls._entries.get(key)
        if hit is not None and hit[1] == serial:
            calls._entries.pop(key, None)

    return drop
