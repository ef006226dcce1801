"""The pipelines a device made in earlier processes, made again in the background when the next
process prepares a model (Programs.warm), so that its first run finds them made.

With the disk cache warm (disk_cache.py) a pipeline still cost its first run about 1 ms to create
from the driver's cache on the H100 host: 10-16 ms of a model's warm first run (ResNet-18's 10,
Llama's 20 pipelines). The device's Programs note every pipeline they make (variant, its SPIR-V's
sha256, specialization constants, push words, bindings); after each background batch (a model's
siblings, onnx_backend/siblings.py) they are written beside the pipeline cache file,
`programs-<the pipeline cache key>.json`: this process's, most recent first, then the earlier
ones, at most RECORD_CAP. A later process preparing a model on that device queues them on
prepare_later's thread while `prepare` goes on. An entry whose variant's SPIR-V changed since
(a rebuild) is left out: the driver's cache would not hold it, and compiling it cold would hold
up the first plan. Files that cannot be read or written are skipped, never an error."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, NamedTuple

from .disk_cache import cache_dir

RECORD_CAP = 128


class RecordedPlan(NamedTuple):
    """What Programs.prepare_many reads of a dispatch plan."""

    variant: str
    spec: tuple[int, ...]
    push: tuple[int, ...]
    bindings: tuple[int, ...]


def record_path(manager: Any) -> Path | None:
    folder = cache_dir()
    return None if folder is None else folder / f"programs-{manager.kdml_pipeline_cache_key()}.json"


def load(path: Path | None, digest: Any) -> list[RecordedPlan]:
    """The recorded pipelines whose variant's SPIR-V is the one built now (`digest(variant)`)."""
    if path is None:
        return []
    try:
        entries = json.loads(path.read_text())
        return [RecordedPlan(v, tuple(spec), (0,) * push, tuple(range(bindings)))
                for v, sha, spec, push, bindings in entries if digest(v) == sha][:RECORD_CAP]
    except (OSError, ValueError, TypeError):
        return []


def save(path: Path | None, made: list[tuple[Any, ...]], digest: Any) -> None:
    """`made` (variant, spec, push words, bindings; most recent last) first, then what the file held."""
    if path is None:
        return
    entries = [[v, digest(v), [int(x) for x in spec], int(push), int(bindings)] for v, spec, push, bindings in reversed(made)]
    seen = {json.dumps(e) for e in entries}
    with contextlib.suppress(OSError, ValueError, TypeError):
        for e in json.loads(path.read_text()):
            if json.dumps(e) not in seen:
                entries.append(e)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump(entries[:RECORD_CAP], f)
        os.replace(tmp, path)  # atomic: processes of one device write it in turn
    except (OSError, ValueError, TypeError):
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
