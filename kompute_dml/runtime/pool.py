"""The functional helpers' buffer pool (one per device, held by its Engine).

A fresh buffer costs an allocation, a descriptor set and a newly recorded submission (the
pipeline itself is shared: runtime/pipelines.py). Helpers therefore draw their outputs and
uploads from a small pool and reuse a buffer once nothing outside the pool references it
(CPython reference counts); its descriptor sets and recorded submissions are then reused too. Under memory pressure the
engine drops the pooled buffers nobody holds (`trim`) before refusing an allocation.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Protocol, TypeVar

POOL_MAX_BYTES = 256 << 20
POOL_MAX_BUFFERS = 64
# sys.getrefcount of a pooled buffer that nothing outside the pool holds: the pool's list,
# the loop variable, getrefcount's argument
_FREE_REFS = 3


class Sized(Protocol):
    nbytes: int


B = TypeVar("B", bound=Sized)


class BufferPool:
    """Buffers by size, most recently used last. Callers hold the engine's lock."""

    def __init__(self, max_bytes: int = POOL_MAX_BYTES, max_buffers: int = POOL_MAX_BUFFERS) -> None:
        self.max_bytes = max_bytes
        self.max_buffers = max_buffers
        self._buffers: list[Sized] = []

    def take(self, nbytes: int, make: Callable[[int], B]) -> B:
        """A free pooled buffer of exactly `nbytes`, else a new one from `make` (then pooled).
        The most recently used first: a helper called in a loop whose results are dropped
        finds its last output at the end, with that output's descriptor sets and recorded
        submissions, without looking at the rest of the pool."""
        pool = self._buffers
        last = len(pool) - 1
        for i in range(last, -1, -1):
            b = pool[i]
            if b.nbytes == nbytes and sys.getrefcount(b) == _FREE_REFS:
                if i != last:
                    pool.append(pool.pop(i))
                return b  # type: ignore[return-value]
            del b
        buf = make(nbytes)
        pool.append(buf)
        total = sum(x.nbytes for x in pool)
        i = 0
        while (total > self.max_bytes or len(pool) > self.max_buffers) and i < len(pool) - 1:
            b = pool[i]
            if sys.getrefcount(b) == _FREE_REFS:  # free: forget it (freed with its last reference)
                total -= b.nbytes
                del pool[i]
            else:
                i += 1
            del b
        return buf

    def trim(self) -> int:
        """Drop the pooled buffers that nothing else uses; returns how many were dropped."""
        pool = self._buffers
        keep = [b for b in pool if sys.getrefcount(b) > _FREE_REFS]  # the pool, `b`, the argument
        dropped = len(pool) - len(keep)
        pool[:] = keep
        return dropped

    def clear(self) -> None:
        self._buffers.clear()

    def __len__(self) -> int:
        return len(self._buffers)
