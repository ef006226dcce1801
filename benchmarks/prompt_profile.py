"""A decoder's prompt step (kompute_dml/bench/decoders.py's step models, random weights) as
onnx_backend/generation.py feeds it with a static cache: its wall time with the outputs left on the
device (the last position's logits read back, as greedy reads them) and the device time per node
type of one run (Device.profile: one timestamp per dispatch).

    python -m benchmarks.prompt_profile [--decoder gpt2] [--batch 8] [--prompt 128] [--pad 64] [--host-pasts]

`--pad`: the pasts' rows (the capacity less the prompt: zeros the mask hides); `--host-pasts` feeds
them as host zeros (uploaded with the step's inputs) instead of generation's zeros kept on the device.
"""

from __future__ import annotations

import argparse
import collections

import numpy as np

from kompute_dml.bench import decoders, gpu_clock
from kompute_dml.bench.timing import median, series
from kompute_dml.onnx_backend import Backend, generation


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--decoder", default="gpt2", choices=("gpt2", "llama"))
    ap.add_argument("--size", default="small")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--pad", type=int, default=64)
    ap.add_argument("--host-pasts", action="store_true")
    ap.add_argument("--top", type=int, default=14)
    args = ap.parse_args()
    dec = decoders.build(args.decoder, args.size)
    rep = Backend.prepare(str(dec.path), "CPU")
    m = generation.StepModel.of(rep)
    b, n, pad = args.batch, args.prompt, args.pad
    shapes = [((b, h, pad, d), dt) for (h, d), dt in zip(m.rows, m.dtypes)]
    pasts = [np.zeros(s, dt) if args.host_pasts else generation._zeros(rep, s, dt) for s, dt in shapes]
    mask = np.zeros((b, n + pad), np.int64)
    mask[:, pad:] = 1
    feeds = {"input_ids": np.random.default_rng(0).integers(1, decoders.VOCAB, (b, n)), "attention_mask": mask,
             **({"position_ids": np.tile(np.arange(n), (b, 1))} if m.positions else {}), **dict(zip(m.pasts, pasts))}

    def step() -> np.ndarray:
        out = rep.run(feeds, device_outputs=True)
        return generation._last_position(out[0]).argmax(-1)

    step()
    gpu_clock.hold(step, 1.0)
    walls = series(step, 20)
    with rep.device.profile() as p:
        rep.run(feeds, device_outputs=True)
    by: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0])
    for r in p.rows:
        key = (r.scope.split(" ")[1] if " " in r.scope else r.scope) + " -> " + r.operator
        by[key][0] += r.microseconds
        by[key][1] += 1
    past_mb = sum(int(np.prod(s)) * np.dtype(dt).itemsize for s, dt in shapes) / 1e6
    print(f"{args.decoder} ({args.size}) prompt {n} at batch {b}, pasts of {pad} rows ({past_mb:.1f} MB, "
          f"{'host zeros' if args.host_pasts else 'zeros kept on the device'}): step median {median(walls) * 1e3:.3f} ms "
          f"over 20; device {p.total_us() / 1e3:.3f} ms in {len(p.rows)} dispatches")
    print(f"{'node -> operator':<62} {'us':>8} {'dispatches':>10}")
    for key, (us, count) in sorted(by.items(), key=lambda kv: -kv[1][0])[:args.top]:
        print(f"{key[:62]:<62} {us:8.1f} {count:10d}")


if __name__ == "__main__":
    main()
