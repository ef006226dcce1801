"""What running a prepared model changes: the executor's state, apart from the prepared model.

`BackendRep.__init__` runs the passes (types, validation, placement, fusions, partition into
steps, product groups, the node table) and then freezes the model: a later attribute write on
the BackendRep raises. Everything a run reads and writes lives here, in `rep.state`: buffers
reused from run to run, the whole-graph plans per input signature and what they share, results
memoized by their inputs, and the latest run's statistics. `BackendRep.release()` empties it.
"""

from __future__ import annotations

import collections
import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import kompute_dml as kdml

from .cache_padding import CachePadding
from .fallback import CpuSegment
from .host_eval import HostMemo
from .values import DeviceValue, RunStats


@dataclass(eq=False)
class RunState:
    lock: threading.Lock = field(default_factory=threading.Lock)  # one run at a time per model
    last_run: RunStats = field(default_factory=RunStats)
    node_by_node: bool = False  # set: runs go node by node even where a whole-graph plan could run
    feeds_now: set[str] = field(default_factory=set)  # the current run's feed names (they shadow constants)
    # ---- node by node (rep.py's eager steps, transfers.py)
    # device buffers each node reuses from run to run, by (node, role, slot, layout): a run on
    # buffers it had before replays its recorded submissions (runtime/engine.py)
    arena: collections.OrderedDict[tuple[Any, ...], Any] = field(default_factory=collections.OrderedDict)
    arena_capacity: int = 4096
    cur_node: int = -1  # the node whose handler runs (the arena's key)
    slot: int = 0  # the buffers that node took so far
    uploads: dict[tuple[Any, ...], list[kdml.Tensor]] = field(default_factory=dict)  # upload_group's buffers
    memo: dict[int, Any] = field(default_factory=dict)  # results handlers share within one run
    host_constants: dict[str, np.ndarray] = field(default_factory=dict)  # constants decoded once
    device_constants: dict[str, DeviceValue] = field(default_factory=dict)  # constants uploaded once
    constant_arena: Any = None  # the buffers they share (constant_arena.py), made at the first upload
    single_node_segments: dict[int, CpuSegment] = field(default_factory=dict)  # a CPU node alone, made once
    folded_values: dict[int, list[Any]] = field(default_factory=dict)  # constant-only nodes' results
    # ---- whole-graph plans (device_graph.py) per input signature (None: not planned)
    plans: collections.OrderedDict[Any, Any] = field(default_factory=collections.OrderedDict)
    # kept while both hold, least recently used out first: a decoder makes a plan per past length,
    # and a later generation over the same lengths replays them (bench/decoder_speed.py, again);
    # a plan holds its recorded program (a descriptor set per dispatch), its buffers are shared
    plan_capacity: int = 256
    plan_dispatch_capacity: int = 1 << 16
    plan_refusal: str = ""  # why the last signature was not planned
    plan_buffers: dict[int, list[kdml.Buffer]] = field(default_factory=dict)  # shared by size class
    plan_io: dict[str, np.ndarray] = field(default_factory=dict)  # host memory of plans' inputs, outputs
    host_memo: HostMemo = field(default_factory=HostMemo)  # host nodes' results by their inputs
    plan_small: dict[tuple[Any, ...], kdml.Tensor] = field(default_factory=dict)  # small host values
    plan_liveness: dict[frozenset[str], list[Any]] = field(default_factory=dict)  # per input names: device_graph._order
    # device nodes' work replayed by later plans where their inputs look the same (node_traces.py),
    # by (node, input key), most recently used last; 0: no traces (every plan runs every handler)
    node_traces: collections.OrderedDict[Any, Any] = field(default_factory=collections.OrderedDict)
    trace_capacity: int = 4096
    trace_misses: dict[int, int] = field(default_factory=dict)  # per node: plans in a row that found no trace
    host_last: dict[int, Any] = field(default_factory=dict)  # per host node: the last plan's inputs, results
    # per input names, the last plan made (step_reuse.py: the next plan repeats its steps where they read
    # the same values)
    plan_parent: dict[frozenset[str], Any] = field(default_factory=dict)
    step_reuse: bool = True  # False: plans repeat no steps
    step_names: dict[int, Any] = field(default_factory=dict)  # per step's node: the names it reads, writes
    zero_pasts: dict[tuple[Any, ...], kdml.Tensor] = field(default_factory=dict)  # generation.py's first pasts
    cache_padding: CachePadding = field(default_factory=CachePadding)  # a growing cache's pasts padded
