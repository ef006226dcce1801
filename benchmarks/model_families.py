"""The transformer families (kompute_dml/bench/families.py, random weights) end to end: where
their nodes run, correctness against onnxruntime's CPU provider, and ms per run of ours,
onnxruntime CPU (all cores) and PyTorch CUDA float32 eager (inputs already on the GPU), as
issue 52's table (a "-fp16" family's PyTorch peer runs float16: the module and its float
inputs in half precision). Ratios are peer / ours (> 1: ours faster). "ours ms" feeds host arrays
and reads the outputs back (as onnxruntime's users do); "dev ms" feeds kompute_dml Tensors already on
the device and leaves the outputs there (`rep.run(..., device_outputs=True)`, which waits for the
run), as PyTorch is timed: "x torch" compares that one.

    python -m benchmarks.model_families [--size small] [--shapes 1x128,8x128] [--families gpt2,vit] [--repeat 20]
                                        [--allow-half-precision]
"""

from __future__ import annotations

import argparse
import collections
import time
from typing import Any

import numpy as np

from kompute_dml.bench import families, gpu_clock
from kompute_dml.bench.timing import median, once


def _cos_min(got: np.ndarray, want: np.ndarray) -> float:
    g, w = (a.reshape(-1, a.shape[-1]).astype(np.float64) for a in (got, want))
    return float(((g * w).sum(1) / (np.linalg.norm(g, axis=1) * np.linalg.norm(w, axis=1) + 1e-30)).min())


def _ms(fn: Any, repeat: int, sync: Any = None) -> float:
    fn()
    if sync:
        sync()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        if sync:
            sync()
        times.append(time.perf_counter() - t0)
    return median(times) * 1e3


class _Torch:
    """The family's torch module on CUDA (float32; float16 for a "-fp16" family), fed tensors
    already on the GPU."""

    def __init__(self, name: str, size: str) -> None:
        self.module: Any = None
        self.note = ""
        self.half = families.FAMILIES[name].post == "fp16"
        try:
            import torch

            if not torch.cuda.is_available():
                self.note = "no CUDA"
                return
            torch.manual_seed(0)
            self.torch = torch
            self.module = families.FAMILIES[name].make(families.SIZES[size]).cuda().eval()
            if self.half:
                self.module = self.module.half()
        except Exception as e:  # a peer that cannot run is reported, not fatal
            self.note = f"{type(e).__name__}: {e}"

    def ms(self, feeds: dict[str, np.ndarray], repeat: int) -> float:
        torch = self.torch
        args = [torch.from_numpy(v).cuda() for v in feeds.values()]
        args = [a.half() if self.half and a.is_floating_point() else a for a in args]
        with torch.no_grad():
            # the GPU's clock up first, as for ours (gpu_clock.py): timed right after onnxruntime's runs, which
            # leave the GPU idle for seconds, torch's first runs met a lowered clock (its times moved up to 1.7x
            # from call to call before this hold: BERT-base at batch 8, 8.14 / 13.58 / 10.20 ms in device
            # calls 294 / 297 / 299, benchmarks/RESULTS.md)
            gpu_clock.hold(lambda: (self.module(*args), torch.cuda.synchronize()), gpu_clock.WARM_SECONDS)
            return _ms(lambda: self.module(*args), repeat, torch.cuda.synchronize)


def bench(name: str, size: str, shapes: list[tuple[int, int]], repeat: int, half: bool = False,
          exporter: str = "torchscript", group_products: bool = True) -> list[dict[str, Any]]:
    import onnxruntime as ort

    from kompute_dml.onnx_backend import CPU, VULKAN, Backend
    from kompute_dml.onnx_backend.values import HOST

    path = families.build(name, size, exporter=exporter)
    reps: list[Any] = []
    kwargs = {"allow_half_precision": True} if half else {}
    if not group_products:
        kwargs["group_products"] = False
    prepare_ms = once(lambda: reps.append(Backend.prepare(str(path), "CPU", **kwargs))) * 1e3
    rep = reps[0]
    where = collections.Counter(p.target for p in rep.placement)
    cpu_ops = collections.Counter(p.op_type for p in rep.placement if p.target == CPU)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    peer = _Torch(name, size)
    rows = []
    for b, s in shapes:
        feeds = families.feeds(name, b, s, np.random.default_rng([b, s]), size)
        first = once(lambda f=feeds: rep.run(f)) * 1e3
        gpu_clock.hold(lambda f=feeds: rep.run(f), gpu_clock.WARM_SECONDS)
        ours = _ms(lambda f=feeds: rep.run(f), repeat)
        st = rep.last_run
        on_device = {k: rep.device.tensor(v) for k, v in feeds.items()}
        ours_dev = _ms(lambda f=on_device: rep.run(f, device_outputs=True), repeat)
        ours_mhz = gpu_clock.sm_clock_mhz()  # (outside the timed runs: about 50 ms of nvidia-smi)
        got = rep.run(feeds)[0]
        want = sess.run(None, feeds)[0]
        ort_ms = _ms(lambda f=feeds: sess.run(None, f), max(3, repeat // 4))
        torch_ms = peer.ms(feeds, repeat) if peer.module is not None else None
        torch_mhz = gpu_clock.sm_clock_mhz() if torch_ms is not None else None
        label = name + (" (allow_half_precision)" if half else "")
        rows.append({"family": label, "shape": f"{b}x{s}", "vulkan": where[VULKAN], "host": where[HOST], "cpu": where[CPU],
                     "cpu_ops": dict(cpu_ops), "segments": st.cpu_segments, "fallbacks": st.runtime_fallbacks,
                     "uploads": st.uploads, "downloads": st.downloads, "prepare_ms": prepare_ms, "first_ms": first,
                     "ours_ms": ours, "ours_dev_ms": ours_dev, "ort_ms": ort_ms, "torch_ms": torch_ms, "torch_note": peer.note,
                     "cos_min": _cos_min(got, want), "dispatches": st.dispatches})
        r = rows[-1]
        print(f"  {name} {r['shape']}: ours {ours:.2f} ms (first {first:.0f}; device I/O {ours_dev:.2f}), "
              f"onnxruntime {ort_ms:.2f}, "
              f"torch {torch_ms if torch_ms is None else round(torch_ms, 2)}; cos {r['cos_min']:.6f}; "
              f"{st.dispatches} dispatches; SM clock after ours / torch {ours_mhz} / {torch_mhz} MHz", flush=True)
    rep.release()
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    head = ("| family | shape | nodes vulkan / host / cpu | CPU sub-graphs, fallbacks | up / down | ours ms | dev ms "
            "| ORT ms | torch ms | x ORT | x torch | min cos | CPU ops |")
    lines = [head, "| " + " | ".join(["---"] * 13) + " |"]
    for r in rows:
        t = r["torch_ms"]
        t_ms, x_torch = ("-", "-") if t is None else (f"{t:.2f}", f"{t / r['ours_dev_ms']:.2f}")
        lines.append(f"| {r['family']} | {r['shape']} | {r['vulkan']} / {r['host']} / {r['cpu']} | {r['segments']}, "
                     f"{r['fallbacks']} | {r['uploads']} / {r['downloads']} | {r['ours_ms']:.2f} | "
                     f"{r['ours_dev_ms']:.2f} | {r['ort_ms']:.2f} | "
                     f"{t_ms} | {r['ort_ms'] / r['ours_ms']:.2f} | {x_torch} | {r['cos_min']:.6f} | "
                     f"{', '.join(f'{k} {v}' for k, v in sorted(r['cpu_ops'].items())) or '-'} |")
    return "\n".join(lines)


def _no_pointwise_gemm() -> None:
    """Every device's policy as if it lacked conv_pointwise_gemm (this process only)."""
    from kompute_dml.runtime.policy import DevicePolicy

    choose = DevicePolicy.conv_family_for

    def without(self: DevicePolicy, **kw: Any) -> str:
        return choose(self, **{**kw, "pointwise": False})

    DevicePolicy.conv_family_for = without  # type: ignore[method-assign]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="small", choices=sorted(families.SIZES))
    ap.add_argument("--shapes", default="1x128,8x128", help="batch x tokens, comma-separated")
    ap.add_argument("--families", default=",".join(families.FAMILIES))
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--allow-half-precision", action="store_true",
                    help="prepare with allow_half_precision (float32 products and convolutions in float16 on tensor cores)")
    ap.add_argument("--exporter", default="torchscript", choices=families.EXPORTERS,
                    help="dynamo: torch.onnx.export's default exporter since torch 2.9 (torch.export, opset 18; needs onnxscript)")
    ap.add_argument("--no-group-products", action="store_true",
                    help="prepare with group_products=False (products sharing an input run one by one)")
    ap.add_argument("--drop-fusion", action="append", default=[], metavar="OPERATOR",
                    help="an ablation: leave the fusion patterns onto this operator out (ROTARY_EMBEDDING, ...; repeatable)")
    ap.add_argument("--drop-pattern-suffix", action="append", default=[], metavar="SUFFIX",
                    help="an ablation: leave out the fusion patterns whose name ends so (+Transpose: the attention "
                         "chains ending in the Transpose after them; repeatable)")
    ap.add_argument("--drop-pattern", action="append", default=[], metavar="NAME",
                    help="an ablation: leave out the fusion patterns of exactly this name (MatMul+Transpose, ...; repeatable)")
    ap.add_argument("--no-pointwise-gemm", action="store_true",
                    help="an ablation: 1 x 1 convolutions on the convolution kernels, not GEMM's (ops/conv_pointwise.py)")
    args = ap.parse_args(argv)
    if args.no_pointwise_gemm:
        _no_pointwise_gemm()
    if args.drop_fusion or args.drop_pattern_suffix or args.drop_pattern:
        from kompute_dml.onnx_backend import fusion_match, fusions

        unknown = set(args.drop_fusion) - {p.operator for p in fusions.PATTERNS}
        if unknown:
            ap.error(f"--drop-fusion: no pattern fuses onto {', '.join(sorted(unknown))}")
        unmatched = [x for x in args.drop_pattern_suffix if not any(p.name.endswith(x) for p in fusions.PATTERNS)]
        if unmatched:
            ap.error(f"--drop-pattern-suffix: no pattern's name ends with {', '.join(unmatched)}")
        unnamed = set(args.drop_pattern) - {p.name for p in fusions.PATTERNS}
        if unnamed:
            ap.error(f"--drop-pattern: no pattern is named {', '.join(sorted(unnamed))}")
        fusion_match.PATTERNS = tuple(p for p in fusions.PATTERNS if p.operator not in args.drop_fusion
                                      and p.name not in args.drop_pattern
                                      and not any(p.name.endswith(x) for x in args.drop_pattern_suffix))
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    rows = []
    for name in args.families.split(","):
        try:
            rows += bench(name, args.size, shapes, args.repeat, args.allow_half_precision,  # type: ignore[arg-type]
                          args.exporter, not args.no_group_products)
        except Exception as e:  # one family's failure is a row, not the end
            print(f"  {name}: FAILED {type(e).__name__}: {str(e)[:300]}", flush=True)
    print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
