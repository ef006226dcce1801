"""BERT-family encoders for the ONNX backend: the one export / quantize / fuse recipe, and random models.

    from kompute_dml.bench.bert_models import build_random_bert, random_feeds
    path = build_random_bert(hidden=64, layers=1, heads=2)       # .cache/models/bert-...qint8.fused.onnx
    feeds = random_feeds(2, 13, 1000, np.random.default_rng(0))  # input_ids, attention_mask (int64)

`export_fused(model, fused_path)` is the recipe minilm.py uses for all-MiniLM-L6-v2 and
`build_random_bert` for random ones:
  1. torch.onnx.export (TorchScript exporter, opset 17) of `model(input_ids=, attention_mask=)
     .last_hidden_state`, dynamic batch and sequence axes, traced at 2 x 16;
  2. onnxruntime.quantization.quantize_dynamic with QInt8 weights;
  3. onnxruntime's ORT_ENABLE_EXTENDED optimization written out with optimized_model_filepath: the
     quantized MatMuls become com.microsoft MatMulIntegerToFloat / DynamicQuantizeMatMul, the rest
     SkipLayerNormalization, FusedMatMul, Gelu (the nodes kompute_dml's backend runs).

`build_random_bert` builds a transformers BertModel from a BertConfig with weights drawn after
torch.manual_seed(seed) (transformers' own initialisation: normal(0, 0.02) matrices and embeddings,
LayerNorm 1 / 0): nothing is downloaded. The fused model is cached under .cache/models/, keyed by the
configuration, the seed and the tool versions (a stamp beside it, as minilm.build_model does).

torch and transformers come from requirements-model.txt; they are imported only when a model is built.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from .timing import once

ROOT = Path(__file__).resolve().parents[2]  # the source tree (.cache/ beside the package)
CACHE = ROOT / ".cache" / "models"
RECIPE_VERSION = 1  # bump when export_fused changes what it writes
INPUT_NAMES = ("input_ids", "attention_mask")
OUTPUT_NAME = "last_hidden_state"
FUSED_SUFFIX = ".qint8.fused.onnx"


def tool_versions() -> dict[str, str]:
    """What the cached models depend on: the recipe and the versions of the tools that made them."""
    import onnx
    import onnxruntime
    import torch
    import transformers

    return {"recipe": str(RECIPE_VERSION), "torch": torch.__version__, "transformers": transformers.__version__,
            "onnx": onnx.__version__, "onnxruntime": onnxruntime.__version__}


def op_counts(path: Path) -> dict[str, int]:
    """How many nodes of each op type the model at `path` has."""
    import onnx

    ops: dict[str, int] = {}
    for n in onnx.load(str(path), load_external_data=False).graph.node:
        ops[n.op_type] = ops.get(n.op_type, 0) + 1
    return ops


def export_fused(model: Any, fused: Path) -> dict[str, int]:
    """Export `model` (called as model(input_ids=, attention_mask=), returning .last_hidden_state),
    quantize it dynamically (QInt8 weights) and fuse it with onnxruntime's extended optimizations,
    writing `fused` (which must end in .qint8.fused.onnx) and, beside it, the fp32 export
    (NAME.fp32.onnx) and the quantized model (NAME.qint8.onnx). Returns the fused model's op counts."""
    import onnxruntime as ort
    import torch
    from onnxruntime.quantization import QuantType, quantize_dynamic

    fused = Path(fused)
    if not fused.name.endswith(FUSED_SUFFIX):
        raise ValueError(f"fused: {fused.name!r} must end in {FUSED_SUFFIX}")
    stem = fused.name[: -len(FUSED_SUFFIX)]
    fp32 = fp32_beside(fused)
    quant = fused.with_name(stem + ".qint8.onnx")

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
        torch.onnx.export(Encoder(model.eval()), (ids, mask), str(fp32), input_names=list(INPUT_NAMES),
                          output_names=[OUTPUT_NAME], opset_version=17, dynamo=False,
                          dynamic_axes={"input_ids": axes, "attention_mask": axes, OUTPUT_NAME: axes})
    quantize_dynamic(str(fp32), str(quant), weight_type=QuantType.QInt8)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    so.optimized_model_filepath = str(fused)
    ort.InferenceSession(str(quant), so, providers=["CPUExecutionProvider"])
    return op_counts(fused)


def fp32_beside(fused: Path) -> Path:
    """The float32 export export_fused writes beside a fused model (NAME.fp32.onnx)."""
    return fused.with_name(fused.name[: -len(FUSED_SUFFIX)] + ".fp32.onnx")


def describe_ops(ops: dict[str, int]) -> str:
    return (f"MatMulIntegerToFloat x{ops.get('MatMulIntegerToFloat', 0)}, "
            f"DynamicQuantizeMatMul x{ops.get('DynamicQuantizeMatMul', 0)}, {sum(ops.values())} nodes")


def _shown(path: Path) -> Path:
    return path.relative_to(ROOT) if path.is_relative_to(ROOT) else path


def bert_config(hidden: int, layers: int, heads: int, intermediate: int | None = None, vocab: int = 1000,
                max_position: int = 512) -> Any:
    """The transformers BertConfig of a random encoder (BERT's defaults otherwise: GELU, eps 1e-12)."""
    from transformers import BertConfig

    if hidden % heads:
        raise ValueError(f"heads: {heads} must divide hidden {hidden}")
    return BertConfig(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                      intermediate_size=intermediate or 4 * hidden, max_position_embeddings=max_position)


def random_bert_module(hidden: int, layers: int, heads: int, intermediate: int | None = None, vocab: int = 1000,
                       max_position: int = 512, seed: int = 0) -> Any:
    """The torch BertModel (float32, eval mode) whose weights build_random_bert exports: the same
    configuration and seed give the same weights."""
    import torch
    from transformers import BertModel

    config = bert_config(hidden, layers, heads, intermediate, vocab, max_position)
    torch.manual_seed(seed)
    return BertModel(config, add_pooling_layer=False).eval()


def random_bert_name(hidden: int, layers: int, heads: int, intermediate: int | None = None, vocab: int = 1000,
                     max_position: int = 512, seed: int = 0) -> str:
    return f"bert-h{hidden}-l{layers}-a{heads}-i{intermediate or 4 * hidden}-v{vocab}-p{max_position}-s{seed}"


def build_random_bert(hidden: int, layers: int, heads: int, intermediate: int | None = None, vocab: int = 1000,
                      max_position: int = 512, seed: int = 0, cache: Path = CACHE, force: bool = False,
                      verbose: bool = False) -> Path:
    """The fused, dynamically quantized ONNX model of a random BertModel (random_bert_module),
    cached under `cache` and rebuilt when the configuration's stamp (configuration, seed, tool
    versions) changes."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    cache = Path(cache)
    cache.mkdir(parents=True, exist_ok=True)
    name = random_bert_name(hidden, layers, heads, intermediate, vocab, max_position, seed)
    fused = cache / (name + FUSED_SUFFIX)
    stamp = cache / (name + ".stamp.json")
    config = bert_config(hidden, layers, heads, intermediate, vocab, max_position)
    key = {**tool_versions(), "seed": seed, "config": config.to_diff_dict()}
    key = json.loads(json.dumps(key))  # as it reads back
    if not force and fused.is_file() and stamp.is_file() and json.loads(stamp.read_text()) == key:
        return fused
    ops: dict[str, int] = {}
    took = once(lambda: ops.update(export_fused(random_bert_module(hidden, layers, heads, intermediate, vocab,
                                                                   max_position, seed), fused)))
    stamp.write_text(json.dumps(key, indent=1))
    if verbose:
        print(f"built {_shown(fused)} in {took:.1f} s ({fused.stat().st_size / 1e6:.2f} MB): "
              f"{describe_ops(ops)}")
    return fused


def random_feeds(batch: int, seq: int, vocab: int, rng: np.random.Generator, pad: bool = True) -> dict[str, np.ndarray]:
    """input_ids and attention_mask (int64, batch x seq) as a tokenizer pads a batch: row 0 fills the
    sequence; with `pad` the other rows have random lengths in [1, seq] (at least one of them shorter
    than seq where batch > 1 and seq > 1), mask 0 and token 0 (the pad token) after their end.
    Real tokens are drawn from [1, vocab)."""
    if batch < 1 or seq < 1 or vocab < 2:
        raise ValueError(f"random_feeds: batch {batch}, seq {seq} must be >= 1 and vocab {vocab} >= 2")
    lengths = np.full(batch, seq, np.int64)
    if pad and batch > 1 and seq > 1:
        lengths[1:] = rng.integers(1, seq + 1, batch - 1)
        lengths[1 + int(rng.integers(0, batch - 1))] = int(rng.integers(1, seq))  # one shorter row for sure
    mask = (np.arange(seq)[None, :] < lengths[:, None]).astype(np.int64)
    ids = rng.integers(1, vocab, (batch, seq)).astype(np.int64) * mask
    return {"input_ids": ids, "attention_mask": mask}
