"""A quantized encoder's steady run with its normalizations writing the partial keys of their
outputs (handlers_nn.keys_for: each DynamicQuantizeLinear of them one dispatch) against the same
model without (its two dispatches), rounds interleaved: two prepared copies on one device, the
second prepared and planned with keys_for returning None. ms per run (median) and dispatches.

    python -m benchmarks.dql_keys [--families distilbert-int8,roberta-int8] [--shapes 1x128,8x128] [--rounds 15]
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from kompute_dml.onnx_backend import Backend, fusions, handlers_nn, handlers_transformer

from . import model_ab


@contextlib.contextmanager
def without_keys() -> Iterator[None]:
    """Normalizations and GELUs write no keys while the block runs (every place that asks for them)."""
    real = handlers_nn.keys_for
    handlers_nn.keys_for = fusions.keys_for = handlers_transformer.keys_for = lambda *a, **k: None
    try:
        yield
    finally:
        handlers_nn.keys_for = fusions.keys_for = handlers_transformer.keys_for = real


def _dispatches(rep: Any, feeds: dict[str, Any]) -> str:
    with rep.device.profile() as p:
        rep.run(feeds)
    return str(len(p.rows))


def _keys(path: str, feeds: dict[str, Any]) -> tuple[Any, str]:
    rep = Backend.prepare(path, "CPU")
    rep.run(feeds)
    return rep, _dispatches(rep, feeds)


def _none(path: str, feeds: dict[str, Any]) -> tuple[Any, str]:
    with without_keys():
        rep = Backend.prepare(path, "CPU")
        rep.run(feeds)  # planned without keys; its replays record no new work
    return rep, _dispatches(rep, feeds)


def main() -> None:
    args = model_ab.arguments(__doc__, "distilbert-int8,roberta-int8")
    model_ab.table(args, "dispatches", {"keys": _keys, "none": _none})


if __name__ == "__main__":
    main()
