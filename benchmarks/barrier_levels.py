"""A model's steady run with its submissions recorded in levels (runtime/encode.levels, GPUs'
order: each dispatch as early as its hazards allow, a barrier between levels) against the same
dispatches in program order (encode.program_order, CPU devices': a barrier before each that
conflicts with one since the last barrier), rounds interleaved: two prepared copies of the model on one device, each
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


@contextlib.contextmanager
def ordered_by(device: Any, fn: Any, counts: list[int]) -> Iterator[None]:
    """Record `device`'s submissions with `fn`'s levels while the block runs; `counts` gets each
    submission's barriers."""
    real = device.engine.first_runs.order

    def counted(ds: Sequence[EncodedDispatch]) -> list[list[int]]:
        lv = fn(ds)
        counts.append(max(len(lv) - 1, 0))
        return lv

    device.engine.set_order(counted)
    try:
        yield
    finally:
        device.engine.set_order(real)


def _make(fn: Any) -> Make:
    def make(path: str, feeds: dict[str, Any]) -> tuple[Any, str]:
        counts: list[int] = []
        rep = Backend.prepare(path, "CPU")
        with ordered_by(rep.device, fn, counts):
            rep.run(feeds)  # the plan (its first run)
            counts.clear()
            rep.run(feeds)  # its submissions' own sequences, recorded
            rep.run(feeds)
        return rep, str(sum(counts))
    return make


def main() -> None:
    args = model_ab.arguments(__doc__, "distilbert-int8,gpt2,llama")
    model_ab.table(args, "barriers", {"levels": _make(encode.levels), "program order": _make(encode.program_order)})


if __name__ == "__main__":
    main()
