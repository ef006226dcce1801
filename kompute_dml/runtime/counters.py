"""What `Engine.stats()` (and `Device.stats()`, `kompute-dml info`) reports about a device's engine."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def engine_stats(engine: Any, replays: Iterable[Any], live_buffers: int) -> dict[str, int]:
    """Counters of `engine`: its cached submissions `replays` and `live_buffers` buffers alive."""
    replays = list(replays)
    programs, created = engine.manager.kdml_program_counts()
    return {  # programs: shared pipelines of this device; descriptor sets: one per encoded dispatch
        "programs": int(programs), "pipelines_created": int(created), "descriptor_sets": engine.programs.descriptor_sets,
        "recorded_sequences": len(replays), "sequences_created": engine.sequences_created,  # cached submissions
        "first_runs": engine.first_runs.runs,
        "word_sequences": sum(1 for r in replays if r.seq is not None and r.seq.kdml_completes_by_word()),
        "live_buffers": live_buffers, "pooled_buffers": len(engine.pool), "spare_buffers": len(engine.later.spares),
        "allocated_bytes": engine.budget.allocated, "staging_bytes": engine.staging.held_bytes,
        "deferred_write_submissions": engine.staging.deferred.submissions,
        "pipeline_cache_loaded_bytes": engine.disk_cache.loaded_bytes,
    }
