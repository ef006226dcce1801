"""The softmax word geometries' ablations (benchmarks/overlay_softmax.py) timed beside the product's
variant: what the exactly rounded exp, the compensated sum, the row reductions and the FLOAT16
conversions cost at Whisper's and BERT-large's score rows. A row's figures are medians over rounds
of the slope over N recorded executions (kompute_dml.bench.timing), us; "x" is the product's time
over the ablation's; "[the product's bits]" where the outputs equal the product's.

    python -m benchmarks.softmax_ablation [--rounds 5] [-n 20]
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from typing import Any

import numpy as np

import kompute_dml as kdml
from kompute_dml.bench.cases import executions
from kompute_dml.bench.timing import slopes
from kompute_dml.core.ints import cdiv
from kompute_dml.runtime import grid_for

from . import overlay_softmax as ov

DT = kdml.DataType
ROWS = [(DT.FLOAT32, (8, 4, 1500, 1500)), (DT.FLOAT16, (8, 4, 1500, 1500)), (DT.FLOAT32, (64, 12, 256, 256))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("-n", type=int, default=20)
    args = ap.parse_args()
    ov.load()
    dev = kdml.Device()
    print(f"device: {dev.name}")
    rng = np.random.default_rng(0)
    for dt, shape in ROWS:
        x = (rng.standard_normal(shape) * 4.0).astype(dt.numpy_dtype)
        d = kdml.TensorDesc(dt, shape)
        xt = kdml.Tensor(dev.buffer(x.tobytes()), d, 0)
        ops: dict[str, Any] = {}
        product = dev.compile(kdml.ActivationSoftmax1Desc(d, d, (len(shape) - 1,)))
        variant = product.variants[0]
        ops["product"] = product
        _, t, g = variant.split("_", 2)
        if g not in ov.GEOMETRIES:
            print(f"{variant}: not a geometry of the overlay ({', '.join(ov.GEOMETRIES)})")
            continue
        for abl in ov.ABLATIONS:
            op = dev.compile(kdml.ActivationSoftmax1Desc(d, d, (len(shape) - 1,)))
            op.plans[0] = dataclasses.replace(op.plans[0], variant=ov.SMX_ABLATION.name(abl=abl, t=t, g=g))
            ops[f"abl {abl}"] = op
        rows, lanes = math.prod(shape[:-1]), int(g.split("_")[0][1:])
        for pipe in ov.PIPES:  # PIPE rows per invocation: the grid shrinks by PIPE
            op = dev.compile(kdml.ActivationSoftmax1Desc(d, d, (len(shape) - 1,)))
            groups = grid_for(cdiv(rows, 256 // lanes * pipe) * 256, 256, dev.limits["max_compute_work_group_count"][0])
            op.plans[0] = dataclasses.replace(op.plans[0], variant=ov.SMX_PIPE.name(pipe=pipe, t=t, g=g), groups=groups)
            ops[f"pipe {pipe}"] = op
        outs = {name: [kdml.Tensor(dev.buffer(d.byte_size), d, 0) for _ in range(2)] for name in ops}

        med = slopes({name: executions(dev, op, [xt], outs[name]) for name, op in ops.items()}, args.rounds, args.n)
        base = outs["product"][0].numpy().view(np.uint8)
        print(f"{dt.name} {'x'.join(map(str, shape))} ({variant}): product {med['product'] * 1e6:.1f} us")
        for abl in ov.ABLATIONS:
            name = f"abl {abl}"
            same = np.array_equal(outs[name][0].numpy().view(np.uint8), base)
            what = "; ".join(text for bit, text in ov.BITS.items() if abl & bit) or "nothing left out"
            print(f"  abl {abl:2d} ({what}): {med[name] * 1e6:8.1f} us  x{med['product'] / med[name]:.2f}"
                  + ("  [the product's bits]" if same else ""))
        for pipe in ov.PIPES:
            name = f"pipe {pipe}"
            same = np.array_equal(outs[name][0].numpy().view(np.uint8), base)
            print(f"  {pipe} rows per invocation: {med[name] * 1e6:8.1f} us  x{med['product'] / med[name]:.2f}"
                  + ("  [the product's bits]" if same else "  DIFFERENT BITS"))
    dev.close()


if __name__ == "__main__":
    main()
