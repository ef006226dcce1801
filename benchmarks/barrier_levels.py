"""A model's steady run with its submissions recorded in levels (runtime/encode.levels, the
product's order: each dispatch as early as its hazards allow, a barrier between levels) against
the same dispatches in program order (a barrier before each that conflicts with one since the
last barrier), rounds interleaved: two prepared copies of the model on one device, each
recorded under its own order. ms per run (median), and each order's barriers per run.

    python -m benchmarks.barrier_levels [--families distilbert-int8,gpt2,llama] [--shapes 8x128] [--rounds 15]
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

from kompute_dml.onnx_backend import Backend
from kompute_dml.runtime import encode
from kompute_dml.runtime.encode import EncodedDispatch

from . import model_ab
from .model_ab import Make


def program_order(dispatches: Sequence[EncodedDispatch]) -> list[list[int]]:
    """Levels in program order: a new level at each dispatch that conflicts with the current one."""
    out: list[list[int]] = []
    written: set[int] = set()
    read: set[int] = set()
    for i, d in enumerate(dispatches):
        if d.skip:
            continue
        if not out or (d.reads & written) or (d.writes & (written | read)):
            out.append([])
            written, read = set(), set()
        out[-1].append(i)
        written |= d.writes
        read |= d.reads
    return out


@contextlib.contextmanager
def ordered_by(fn: Any, counts: list[int]) -> Iterator[None]:
    """Record submissions with `fn`'s levels while the block runs; `counts` gets each submission's barriers."""
    real = encode.levels

    def counted(ds: Sequence[EncodedDispatch]) -> list[list[int]]:
        lv = fn(ds)
        counts.append(max(len(lv) - 1, 0))
        return lv

    encode.levels = counted
    try:
        yield
    finally:
        encode.levels = real


def _make(fn: Any) -> Make:
    def make(path: str, feeds: dict[str, Any]) -> tuple[Any, str]:
        counts: list[int] = []
        with ordered_by(fn, counts):
            rep = Backend.prepare(path, "CPU")
            rep.run(feeds)  # the plan (its first run)
            counts.clear()
            rep.run(feeds)  # its submissions' own sequences, recorded
            rep.run(feeds)
        return rep, str(sum(counts))
    return make


def main() -> None:
    args = model_ab.arguments(__doc__, "distilbert-int8,gpt2,llama")
    model_ab.table(args, "barriers", {"levels": _make(encode.levels), "program order": _make(program_order)})


if __name__ == "__main__":
    main()
