"""Python's cyclic garbage collector paused while a whole-graph plan is made (device_graph.py), the
plan's objects then moved to its oldest generation."""

from __future__ import annotations

import contextlib
import gc
from typing import Any

# Objects the collector had frozen when this module was imported: the interpreter's own (CPython
# 3.12 starts with 375, its static types' MRO tuples: the lent H100's 3.12.3 and pyenv's 3.12.1)
# or the embedding's. gc_paused may thaw those, never more than those.
FROZEN_AT_IMPORT = gc.get_freeze_count()


@contextlib.contextmanager
def gc_paused() -> Any:
    """Python's cyclic garbage collector off while a plan is made, as it was after: planning
    allocates tens of thousands of objects, enough to set off collections, and a full one over
    a process holding a model took 12-18 ms on lavapipe's host (benchmarks/plan_shapes.py at 16a7ab2).
    Nothing a plan makes is cyclic garbage it needs collected before it ends. After it, every
    object the collector tracks joins its oldest generation (gc.freeze then gc.unfreeze: no
    scan): the plan's objects live as long as the model, and left young they made a generation-1
    collection due at the first run's next allocation (MiniLM 64 x 256 on H100 hosts: 4.0-6.7 ms,
    benchmarks/first_run_trace.py at 16a7ab2). A younger object of the process that becomes cyclic garbage is
    then freed at the next full collection. gc.unfreeze also thaws what was frozen before: that is
    done only while no more objects are frozen than at this module's import (FROZEN_AT_IMPORT), so
    what the application froze later (gc.freeze before a fork) stays frozen."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if gc.get_freeze_count() <= FROZEN_AT_IMPORT:
            gc.freeze()
            gc.unfreeze()
        if was:
            gc.enable()
