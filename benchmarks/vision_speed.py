"""Vision networks beyond the model families (torchvision's and timm's, random weights) end to end: ms per
`rep.run` with host arrays in and out, against PyTorch CUDA eager float32 and float16 with its inputs on the
GPU (where torch sees one), and the device time per node -> operator of the largest batch (`--profile N`: the
N costliest). Ratios are torch / ours (> 1: ours faster); the last column is the smallest per-row cosine of
ours against torch's float32 output.

    python -m benchmarks.vision_speed [--models tv:convnext_tiny,timm:deit_small_patch16_224] [--batches 1,8]
                                      [--size 224] [--repeat 30] [--profile 8]

A model is `tv:NAME` (torchvision.models, a dotted name for its sub-packages) or `timm:NAME` (timm's
default input size unless --size); video networks take clips of 8 frames. Needs torch and torchvision or timm.
"""

from __future__ import annotations

import argparse
import functools
import os
import tempfile
from typing import Any

import numpy as np

from kompute_dml.bench import gpu_clock
from kompute_dml.bench.gpu_peers import cuda_torch
from kompute_dml.bench.timing import median, once

DEFAULT = ("tv:convnext_tiny,tv:resnext50_32x4d,tv:swin_t,tv:efficientnet_v2_s,tv:video.r3d_18,"
           "timm:deit_small_patch16_224,timm:twins_svt_small")


def build(spec: str, size: int | None) -> tuple[Any, tuple[int, ...]]:
    """The torch module of `spec` (eval mode, seed 0) and its input's shape without the batch."""
    import torch

    torch.manual_seed(0)
    source, name = spec.split(":", 1)
    if source == "timm":
        import timm

        model = timm.create_model(name, pretrained=False).eval()
        shape = tuple(model.pretrained_cfg.get("input_size", (3, 224, 224)))
        return model, (3, size, size) if size else shape
    import torchvision

    factory: Any = torchvision.models
    for part in name.split("."):
        factory = getattr(factory, part)
    side = size or 224
    return factory().eval(), (3, 8, side // 2, side // 2) if name.startswith("video.") else (3, side, side)


def _ms(fn: Any, repeat: int) -> float:
    return median([once(fn) for _ in range(repeat)]) * 1e3


def _profile(rep: Any, feeds: dict[str, np.ndarray], top: int) -> None:
    from benchmarks.encoder_profile import node_costs

    with rep.device.profile() as p:
        rep.run(feeds)
    total = p.total_us()
    print(f"  device {total / 1e3:.2f} ms in {len(p.rows)} dispatches; the costliest:")
    for k, (us, n) in sorted(node_costs(p.rows).items(), key=lambda kv: -kv[1][0])[:top]:
        print(f"  {k[:96]:<96} {us:9.1f} us {us / total:6.1%} {n:4d}")


def main(argv: list[str] | None = None) -> None:
    import torch

    from benchmarks.architectures import _export, _min_cos
    from kompute_dml.onnx_backend import Backend

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=DEFAULT)
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--size", type=int, default=None, help="input height and width (default: the network's own, 224)")
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--profile", type=int, default=0, metavar="N")
    args = ap.parse_args(argv)
    cuda = cuda_torch() is not None
    print("| model | batch | ours ms | CPU sub-graphs, up / down | torch fp32 ms | torch fp16 ms | x torch fp32 | "
          "x torch fp16 | min cos |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as tmp, torch.no_grad():
        for spec in args.models.split(","):
            model, shape = build(spec, args.size)
            path = os.path.join(tmp, "model.onnx")
            _export(model, ["x"], {"x": np.zeros((2, *shape), np.float32)}, path)
            rep = Backend.prepare(path)
            peers = [model.cuda(), build(spec, args.size)[0].cuda().half()] if cuda else []
            feeds: dict[str, np.ndarray] = {}
            for b in map(int, args.batches.split(",")):
                feeds = {"x": np.random.default_rng(b).standard_normal((b, *shape)).astype(np.float32)}
                got = rep.run(feeds)[0]
                step = functools.partial(rep.run, feeds)
                if cuda:
                    gpu_clock.hold(step)
                ours = _ms(step, args.repeat)
                st = rep.last_run
                row = f"| {spec} | {b} | {ours:.2f} | {st.cpu_segments}, {st.uploads} / {st.downloads} | "
                x = torch.from_numpy(feeds["x"])
                if not cuda:
                    print(row + f"- | - | - | - | {_min_cos(got, model(x).numpy(), b):.6f} |", flush=True)
                    continue
                x = x.cuda()
                want = peers[0](x).float().cpu().numpy()
                ms = []
                for m, xi in zip(peers, (x, x.half())):
                    gpu_clock.hold(lambda m=m, xi=xi: (m(xi), torch.cuda.synchronize()))
                    ms.append(_ms(lambda m=m, xi=xi: (m(xi), torch.cuda.synchronize()), args.repeat))
                print(row + f"{ms[0]:.2f} | {ms[1]:.2f} | {ms[0] / ours:.2f} | {ms[1] / ours:.2f} | {_min_cos(got, want, b):.6f} |",
                      flush=True)
            if args.profile:
                _profile(rep, feeds, args.profile)


if __name__ == "__main__":
    main()
