"""The model families exported by torch.onnx.export's two exporters, TorchScript and dynamo
(torch.export: the default since torch 2.9), side by side on the device: dispatches per run, CPU
sub-graphs, and the fused chains and operators the dynamo export runs more often (a pattern its
graph writes differently shows there). Needs torch, onnxscript and the families' packages.

    python -m benchmarks.exporter_parity [--size tiny] [--shape 2x16] FAMILY ...
"""

from __future__ import annotations

import argparse
import collections
from typing import Any

import numpy as np

from kompute_dml.bench import families
from kompute_dml.onnx_backend import Backend

from .encoder_profile import node_costs


def _profile(name: str, size: str, batch: int, seq: int, exporter: str) -> tuple[int, int, collections.Counter[str]]:
    rep = Backend.prepare(str(families.build(name, size, exporter=exporter)), "CPU")
    feeds = families.feeds(name, batch, seq, np.random.default_rng(0), size)
    rep.run(feeds)
    with rep.device.profile() as prof:
        rep.run(feeds)
    counts = collections.Counter({k: n for k, (_us, n) in node_costs(prof.rows).items()})
    return len(prof.rows), rep.last_run.cpu_segments, counts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("families", nargs="+")
    ap.add_argument("--size", default="tiny")
    ap.add_argument("--shape", default="2x16", help="BATCHxSEQUENCE")
    args = ap.parse_args()
    batch, seq = (int(v) for v in args.shape.split("x"))
    for name in args.families:
        got: dict[str, Any] = {}
        for exporter in ("torchscript", "dynamo"):
            try:
                got[exporter] = _profile(name, args.size, batch, seq, exporter)
            except Exception as e:  # an export or a build that fails is reported, not fatal
                got[exporter] = f"{type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}"
        ts, dyn = got["torchscript"], got["dynamo"]
        if isinstance(ts, str) or isinstance(dyn, str):
            print(f"{name}: torchscript {ts if isinstance(ts, str) else ts[0]}; dynamo {dyn if isinstance(dyn, str) else dyn[0]}")
            continue
        more = dict((dyn[2] - ts[2]).most_common(6))
        print(f"{name}: dispatches torchscript {ts[0]}, dynamo {dyn[0]}; CPU sub-graphs {ts[1]} / {dyn[1]}; "
              f"dynamo's more frequent: {more or '-'}", flush=True)


if __name__ == "__main__":
    main()
