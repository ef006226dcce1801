"""The pipelines another input shape of a planned program may take, created when the program is
(device_graph.GraphPlan), so a first run of a new sequence length creates none."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

import kompute_dml as kdml

from ..runtime.pipelines import pipeline_key

# A variant with more siblings than this is not expanded (a family whose variant is chosen from
# sizes the model's weights fix, not from the sequence length, would create pipelines never used;
# softmax's row geometries, 19 siblings per type and function, are expanded).
_SIBLINGS_MAX = 24


def prepare_siblings(device: kdml.Device, program: Any, operators: Iterable[Any]) -> int:
    """Create the pipelines another input shape of this program's operators may take, once per
    device: the variants of their families (ShaderFamily.siblings: softmax's lanes and elements per
    lane, GEMM's tile), their specializations for other output sizes (ShaderFamily.shape_specs: the
    memory kernels' chunks per invocation) and their specs' plans ahead (OperatorSpec.ahead: the integer product's tiles
    for other row counts, a normalization's other layout). A first run of a new sequence length then
    creates no pipeline (they persist on disk too: runtime/disk_cache.py). Returns how many were
    queued (made on a thread of their own)."""
    from kompute_dml.ops import BY_NAME
    from kompute_dml.ops.spec import family_of  # the spec layer owns the variant -> family map
    from kompute_dml.runtime import DispatchPlan

    engine = device.engine
    done = engine.prepared_variants
    todo: list[Any] = []  # compiled together at the end (in parallel: Programs.prepare_later)
    for plans, _bound in program.work:
        for plan in plans:
            if not isinstance(plan, DispatchPlan) or plan.variant in done:
                continue
            done.add(plan.variant)
            fam = family_of(plan.variant)
            if fam is None:
                continue
            siblings = fam.siblings(plan.variant)
            if len(siblings) > _SIBLINGS_MAX:
                continue
            for other in fam.shape_specs:  # the same variant specialized for another output size
                if other != plan.spec:
                    todo.append(dataclasses.replace(plan, spec=other))
            for v in siblings:
                if v in done:
                    continue
                done.add(v)
                todo.append(dataclasses.replace(plan, variant=v))
    for op in operators:
        if ("operator", op.serial) in done:  # an operator of an earlier plan (node_traces.py replays them)
            continue
        done.add(("operator", op.serial))
        spec = BY_NAME.get(op.support.name)
        for plan in spec.ahead(device, op, done) if spec is not None and spec.ahead is not None else ():
            key = ("pipeline", *pipeline_key(plan))
            if key not in done:
                done.add(key)
                todo.append(plan)  # planned as a compile would plan it: it can run here
    # a variant the device cannot run (capabilities) is skipped there: never picked here. Made in the
    # background (Programs.prepare_later): a model's next plan waits for them (GraphPlan), its first
    # run does not
    with engine.lock:
        engine.check_open()
    return engine.programs.prepare_later(todo, engine.pipeline_threads)
