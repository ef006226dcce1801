"""The transformer families users bring, built here with random weights (no downloads): a
`transformers` configuration per family, exported with torch.onnx.export (opset 17), quantized
with onnxruntime's `quantize_dynamic` (then fused at its extended level), fused by its BERT
optimizer or converted to float16 (onnxruntime's `convert_float_to_float16`, float32 inputs and
outputs kept) where the family's row says so, cached under .cache/models by configuration and
tool versions.

    build("gpt2", size="tiny") -> Path of the .onnx;  feeds("gpt2", batch, seq, rng) -> the inputs
    source("gpt2-fp16") -> the float32 export a "-fp16" family's model was converted from

Sizes: "tiny" (tests on lavapipe: hidden 64, 2 layers) and "small" (benchmarks: hidden 256,
4 layers). Every family's outputs are its last hidden state or logits.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .bert_models import CACHE, tool_versions

SIZES = {"tiny": {"hidden": 64, "layers": 2, "heads": 4, "ffn": 128, "audio": 64, "image": 64, "unet": 8},
         "small": {"hidden": 256, "layers": 4, "heads": 4, "ffn": 1024, "audio": 1500, "image": 224, "unet": 32},
         # the published models' dimensions: BERT-base, GPT-2 (124M), ViT-B/16 at 224 x 224, Whisper-small's encoder
         "base": {"hidden": 768, "layers": 12, "heads": 12, "ffn": 3072, "audio": 1500, "image": 224, "unet": 64,
                  "vit_image": 224, "vit_patch": 16}}
# "audio": Whisper's encoder positions; its input is twice as many mel frames (3000 = 30 s at "small");
# "image": the convolution nets' input height and width (torchvision's architectures at full width);
# "unet": the UNet's first-level channels (kompute_dml/bench/unet.py); "vit_image" / "vit_patch": ViT's input
# height and width and its patch (64 and 8 where absent)
VOCAB = 1000


@dataclass(frozen=True)
class Family:
    name: str
    make: Callable[[dict[str, int]], Any]  # size -> (torch module taking the inputs, input names)
    inputs: Callable[[int, int, np.random.Generator, dict[str, int]], dict[str, np.ndarray]]  # batch, length, size
    # "int8": quantize_dynamic then ORT's extended level; "int8-raw": not fused; "fused": ORT's BERT optimizer;
    # "fused:<model_type>": onnxruntime.transformers.optimizer with that model type;
    # "fp16": convert_float_to_float16(keep_io_types=True), the float32 export kept beside it (source());
    # "qdq": quantize_static in the QDQ format, calibrated on four random inputs of the family's own (images: a
    # dedicated DequantizeLinear per consumer; text: quantize_static's default, one shared by a value's readers)
    post: str = ""
    dynamic: tuple[str, ...] = ("batch", "seq")  # the inputs' symbolic dimensions
    requires: str = "transformers"  # the package that defines the architecture
    # the least row cosine against onnxruntime's CPU provider (tests/test_model_families.py): the QDQ
    # family's Add / pooling / Gemm run dequantized in float here, quantized by onnxruntime's fusions
    cos: float = 0.9999


def _text_feeds(batch: int, seq: int, rng: np.random.Generator, _size: dict[str, int]) -> dict[str, np.ndarray]:
    ids = rng.integers(3, VOCAB, (batch, seq), dtype=np.int64)
    mask = np.ones((batch, seq), np.int64)
    for b in range(1, batch):  # padding: later rows shorter
        mask[b, seq - (b * seq) // (2 * batch):] = 0
    return {"input_ids": ids, "attention_mask": mask}


class _Wrapped:
    """A module whose forward takes the feeds positionally and returns one tensor."""

    @staticmethod
    def of(model: Any, names: tuple[str, ...], out: str) -> Any:
        import torch

        class W(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.m = model

            def forward(self, *args: Any) -> Any:
                return getattr(self.m(**dict(zip(names, args))), out)

        return W().eval()


def _encoder(config_cls: str, model_cls: str, **extra: Any) -> Callable[[dict[str, int]], Any]:
    def make(s: dict[str, int]) -> Any:
        import transformers

        cfg = getattr(transformers, config_cls)(vocab_size=VOCAB, hidden_size=s["hidden"], num_hidden_layers=s["layers"],
                                                num_attention_heads=s["heads"], intermediate_size=s["ffn"], **extra)
        cfg._attn_implementation = "eager"
        return _Wrapped.of(getattr(transformers, model_cls)(cfg), ("input_ids", "attention_mask"), "last_hidden_state")
    return make


def _distilbert(s: dict[str, int]) -> Any:
    import transformers

    cfg = transformers.DistilBertConfig(vocab_size=VOCAB, dim=s["hidden"], n_layers=s["layers"], n_heads=s["heads"],
                                        hidden_dim=s["ffn"])
    cfg._attn_implementation = "eager"
    return _Wrapped.of(transformers.DistilBertModel(cfg), ("input_ids", "attention_mask"), "last_hidden_state")


def _gpt2(s: dict[str, int]) -> Any:
    import transformers

    cfg = transformers.GPT2Config(vocab_size=VOCAB, n_embd=s["hidden"], n_layer=s["layers"], n_head=s["heads"],
                                  n_inner=s["ffn"], n_positions=512, bos_token_id=0, eos_token_id=0, use_cache=False)
    cfg._attn_implementation = "eager"
    return _Wrapped.of(transformers.GPT2LMHeadModel(cfg), ("input_ids", "attention_mask"), "logits")


def _llama(s: dict[str, int]) -> Any:
    import transformers

    cfg = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=s["hidden"], num_hidden_layers=s["layers"],
                                   num_attention_heads=s["heads"], num_key_value_heads=max(1, s["heads"] // 2),
                                   intermediate_size=s["ffn"], max_position_embeddings=512, use_cache=False,
                                   bos_token_id=0, eos_token_id=0, pad_token_id=0)
    cfg._attn_implementation = "eager"
    return _Wrapped.of(transformers.LlamaForCausalLM(cfg), ("input_ids", "attention_mask"), "logits")


def _mixtral(s: dict[str, int]) -> Any:
    """A mixture of experts: Llama's attention, each token's top 2 of 4 SwiGLU experts by a router, run as
    batched products of the tokens' experts' weights (transformers' "batched_mm": its default grouped_mm
    counts tokens with torch.histc, which torch.onnx does not export)."""
    import transformers

    cfg = transformers.MixtralConfig(vocab_size=VOCAB, hidden_size=s["hidden"], num_hidden_layers=s["layers"],
                                     num_attention_heads=s["heads"], num_key_value_heads=max(1, s["heads"] // 2),
                                     intermediate_size=s["ffn"], max_position_embeddings=512, use_cache=False,
                                     num_local_experts=4, num_experts_per_tok=2, sliding_window=None,
                                     bos_token_id=0, eos_token_id=0, pad_token_id=0, experts_implementation="batched_mm")
    cfg._attn_implementation = "eager"
    return _Wrapped.of(transformers.MixtralForCausalLM(cfg), ("input_ids", "attention_mask"), "logits")


def _vit(s: dict[str, int]) -> Any:
    import transformers

    cfg = transformers.ViTConfig(image_size=s.get("vit_image", 64), patch_size=s.get("vit_patch", 8), hidden_size=s["hidden"],
                                 num_hidden_layers=s["layers"], num_attention_heads=s["heads"], intermediate_size=s["ffn"])
    cfg._attn_implementation = "eager"
    return _Wrapped.of(transformers.ViTModel(cfg, add_pooling_layer=False), ("pixel_values",), "last_hidden_state")


def _whisper(s: dict[str, int]) -> Any:
    import transformers

    cfg = transformers.WhisperConfig(vocab_size=VOCAB, d_model=s["hidden"], encoder_layers=s["layers"],
                                     encoder_attention_heads=s["heads"], decoder_layers=1, decoder_attention_heads=s["heads"],
                                     encoder_ffn_dim=s["ffn"], decoder_ffn_dim=s["ffn"], num_mel_bins=80,
                                     max_source_positions=s["audio"], pad_token_id=0, bos_token_id=0, eos_token_id=0,
                                     decoder_start_token_id=0)
    cfg._attn_implementation = "eager"
    return _Wrapped.of(transformers.WhisperModel(cfg).get_encoder(), ("input_features",), "last_hidden_state")


def _torchvision(arch: str) -> Callable[[dict[str, int]], Any]:
    def make(s: dict[str, int]) -> Any:
        import torch
        import torchvision

        model = getattr(torchvision.models, arch)(weights=None)  # BatchNorm folded into Conv at export
        # BatchNorm's running statistics measured on random images (cumulative over a few train-mode
        # passes), so every normalization gives unit-scale activations as a trained net's do: with
        # the initial ones MobileNetV3's activations shrink layer by layer to 1e-10, below float16's range
        bns = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
        for m in bns:
            m.reset_running_stats()
            m.momentum = None
        model.train()
        with torch.no_grad():
            for _ in range(4):
                model(torch.randn(8, 3, s["image"], s["image"]))
        return model.eval()
    return make


def _unet(s: dict[str, int]) -> Any:
    from .unet import make_unet

    return make_unet(s["unet"])


def _image_feeds(b: int, _seq: int, rng: np.random.Generator, z: dict[str, int]) -> dict[str, np.ndarray]:
    return {"pixel_values": rng.standard_normal((b, 3, z["image"], z["image"])).astype(np.float32)}


FAMILIES = {f.name: f for f in (
    Family("distilbert-int8", _distilbert, _text_feeds, "int8"),
    Family("distilbert-int8-raw", _distilbert, _text_feeds, "int8-raw"),  # quantize_dynamic's output as it is
    Family("roberta-int8", _encoder("RobertaConfig", "RobertaModel", max_position_embeddings=514, pad_token_id=1),
           _text_feeds, "int8"),
    Family("bert-fp32-fused", _encoder("BertConfig", "BertModel"), _text_feeds, "fused"),
    Family("gpt2", _gpt2, _text_feeds),
    Family("gpt2-fused", _gpt2, _text_feeds, "fused:gpt2"),
    Family("llama", _llama, _text_feeds),
    Family("llama-fused", _llama, _text_feeds, "fused:gpt2"),  # the model type ORT's Llama export scripts use
    Family("mixtral", _mixtral, _text_feeds),
    Family("vit", _vit, lambda b, _s, rng, z: {"pixel_values": rng.standard_normal(
        (b, 3, z.get("vit_image", 64), z.get("vit_image", 64))).astype(np.float32)}, dynamic=("batch",)),
    Family("whisper-encoder", _whisper,
           lambda b, _s, rng, z: {"input_features": rng.standard_normal((b, 80, 2 * z["audio"])).astype(np.float32)},
           dynamic=("batch",)),
    Family("resnet18", _torchvision("resnet18"), _image_feeds, dynamic=("batch",), requires="torchvision"),
    Family("mobilenet-v3-small", _torchvision("mobilenet_v3_small"), _image_feeds, dynamic=("batch",),
           requires="torchvision"),
    Family("resnet50", _torchvision("resnet50"), _image_feeds, dynamic=("batch",), requires="torchvision"),
    Family("efficientnet-b0", _torchvision("efficientnet_b0"), _image_feeds, dynamic=("batch",), requires="torchvision"),
    Family("convnext-tiny", _torchvision("convnext_tiny"), _image_feeds, dynamic=("batch",), requires="torchvision"),
    Family("unet", _unet, _image_feeds, dynamic=("batch",), requires="torch"),
    Family("resnet18-qdq", _torchvision("resnet18"), _image_feeds, "qdq", dynamic=("batch",), requires="torchvision",
           cos=0.999),
    Family("bert-qdq", _encoder("BertConfig", "BertModel"), _text_feeds, "qdq", cos=0.999),
)}
# float16 variants: each float32 family above converted (bert-fp16 from the unfused BERT export)
FAMILIES.update({f.name: f for f in (
    Family("bert-fp16", _encoder("BertConfig", "BertModel"), _text_feeds, "fp16"),
    *(Family(f"{f.name}-fp16", f.make, f.inputs, "fp16", f.dynamic, f.requires) for f in list(FAMILIES.values())
      if not f.post),
)})


# The node types of each family (tiny) that still run on onnxruntime's CPU provider on lavapipe:
# tests/test_model_families.py holds the backend to it both ways, the README's table says it.
CPU_NODE_TYPES: dict[str, frozenset[str]] = {
    "distilbert-int8": frozenset(),
    "distilbert-int8-raw": frozenset(),
    "roberta-int8": frozenset(),
    "bert-fp32-fused": frozenset(),
    "gpt2": frozenset(),
    "gpt2-fused": frozenset(),
    "llama": frozenset(),
    "llama-fused": frozenset(),
    "mixtral": frozenset(),
    "vit": frozenset(),
    "whisper-encoder": frozenset(),
    "resnet18": frozenset(),
    "mobilenet-v3-small": frozenset(),
    **{name: frozenset() for name, f in FAMILIES.items() if f.post == "fp16"},
    "resnet50": frozenset(),
    "efficientnet-b0": frozenset(),
    "convnext-tiny": frozenset(),
    "unet": frozenset(),
    "resnet18-qdq": frozenset(),
    "bert-qdq": frozenset(),
}
# Node types placed on the device at `prepare` that still run on the CPU at run time, because the
# operator refuses their values' types there (the run's "ran on the CPU" events): none since CAST
# and GATHER_ELEMENTS take INT64 / UINT64 (RoBERTa's and BERT's Cast to int64, RoBERTa's
# GatherElements of int64 data). tests/test_model_families.py holds the backend to it both ways;
# the README's table says it.
RUNTIME_CPU_NODE_TYPES: dict[str, frozenset[str]] = {}
DESCRIBED = {
    "distilbert-int8": "DistilBERT, quantize_dynamic int8 + onnxruntime's extended fusions",
    "distilbert-int8-raw": "DistilBERT, quantize_dynamic int8 as written (MatMulInteger chains)",
    "roberta-int8": "RoBERTa, int8 fused",
    "bert-fp32-fused": "BERT float32, onnxruntime's BERT optimizer",
    "gpt2": "GPT-2 (logits; with its KV cache: kompute_dml/bench/decoders.py)",
    "gpt2-fused": "GPT-2, onnxruntime's optimizer (model type gpt2: SkipLayerNormalization, FastGelu)",
    "llama": "Llama (GQA, RMSNorm, rotary, SiLU)",
    "llama-fused": "Llama, onnxruntime's optimizer (model type gpt2: SimplifiedLayerNormalization, SkipSimplifiedLayerNormalization)",
    "mixtral": "Mixtral (a mixture of experts: the top 2 of 4 SwiGLU experts per token, Llama's attention)",
    "vit": "ViT",
    "whisper-encoder": "Whisper encoder",
    "resnet18": "ResNet-18 (torchvision)",
    "mobilenet-v3-small": "MobileNetV3-Small (torchvision)",
    "bert-fp16": "BERT float16 (unfused)",
    **{f"{name}-fp16": f"{label} float16" for name, label in (
        ("gpt2", "GPT-2"), ("llama", "Llama"), ("vit", "ViT"), ("whisper-encoder", "Whisper encoder"),
        ("resnet18", "ResNet-18"), ("mobilenet-v3-small", "MobileNetV3-Small"))},
    "resnet50": "ResNet-50 (torchvision)",
    "efficientnet-b0": "EfficientNet-B0 (torchvision)",
    "convnext-tiny": "ConvNeXt-Tiny (torchvision: depthwise 7 x 7, LayerNorm and Linear layers over [batch, H, W, C])",
    "unet": "UNet (kompute_dml/bench/unet.py: Resize nearest and linear, ConvTranspose, Concat skips)",
    "resnet18-qdq": "ResNet-18, quantize_static QDQ int8 (its convolutions fused into QUANTIZED_LINEAR_CONVOLUTION)",
    "bert-qdq": "BERT, quantize_static QDQ int8 (its weight products fused into QLinearMatMul)",
}


def _quantize_qdq(raw: Path, out: Path, fam: Family, size: dict[str, int], seed: int) -> None:
    """onnxruntime's quantize_static, QDQ format (uint8 activations, int8 weights, per tensor),
    calibrated on four random inputs: images (batch 1, a dedicated DequantizeLinear per consumer) or
    text (batch 2 x 24, padded, the DequantizeLinear of a value shared by its readers, the default)."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    rng = np.random.default_rng(seed)
    images = [fam.inputs(1, 0, rng, size) if fam.inputs is _image_feeds else fam.inputs(2, 24, rng, size) for _ in range(4)]

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.it = iter(images)

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.it, None)

    with contextlib.chdir(out.parent):  # (onnxruntime's quantizer leaves <uuid>.data files in the working directory)
        quantize_static(str(raw), str(out), Reader(), quant_format=QuantFormat.QDQ, activation_type=QuantType.QUInt8,
                        weight_type=QuantType.QInt8, extra_options={"DedicatedQDQPair": fam.inputs is _image_feeds})


def feeds(name: str, batch: int, seq: int, rng: np.random.Generator, size: str = "tiny") -> dict[str, np.ndarray]:
    """Inputs for `batch` x `seq` (text: token ids and a padding mask, later rows shorter; images and
    audio: the size's fixed shape)."""
    return FAMILIES[name].inputs(batch, seq, rng, SIZES[size])


def source(name: str, size: str = "tiny", cache: Path = CACHE, seed: int = 0, exporter: str = "torchscript") -> Path:
    """The float32 model a "-fp16" family's was converted from (its own export, the very model
    of the float32 family it names: same configuration and seed); other families' own model."""
    path = build(name, size, cache, seed, exporter)
    return path.with_suffix(".fp32.onnx") if FAMILIES[name].post == "fp16" else path


EXPORTERS = ("torchscript", "dynamo")


def build(name: str, size: str = "tiny", cache: Path = CACHE, seed: int = 0, exporter: str = "torchscript") -> Path:
    """The family's ONNX model at `size`, built once per configuration and tool versions.
    `exporter`: torch.onnx.export's TorchScript exporter (opset 17) or its dynamo one (torch.export
    and onnxscript, opset 18: torch.onnx.export's default since torch 2.9; needs onnxscript)."""
    import torch

    if exporter not in EXPORTERS:
        raise ValueError(f"exporter: one of {EXPORTERS}, got {exporter!r}")
    fam = FAMILIES[name]
    recipe = {"family": name, "size": SIZES[size], "seed": seed, "post": fam.post, **tool_versions(), "family_recipe": 4}
    if exporter != "torchscript":
        recipe["exporter"] = exporter
    stamp = json.dumps(recipe, sort_keys=True)
    path = Path(cache) / f"{name}-{size}-{hashlib.sha256(stamp.encode()).hexdigest()[:12]}.onnx"
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch.manual_seed(seed)
    module = fam.make(SIZES[size])
    example = {k: torch.from_numpy(v) for k, v in fam.inputs(2, 16, np.random.default_rng(seed), SIZES[size]).items()}
    names = list(example)
    axes = {n: ({0: "batch", 1: "seq"} if "seq" in fam.dynamic and n != "pixel_values" else {0: "batch"}) for n in names}
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "raw.onnx"
        with torch.no_grad():
            if exporter == "dynamo":  # the same dimensions dynamic, as torch.export's automatic ones
                auto = torch.export.Dim.AUTO
                shapes: Any = tuple({a: auto for a in axes[n]} for n in names)
                if any(p.kind is p.VAR_POSITIONAL for p in inspect.signature(module.forward).parameters.values()):
                    shapes = (shapes,)  # forward(*args): one entry, the tuple of its inputs'
                torch.onnx.export(module, tuple(example.values()), str(raw), input_names=names, output_names=["output"],
                                  dynamic_shapes=shapes, opset_version=18, dynamo=True, verbose=False)
                import onnx

                onnx.save(onnx.load(str(raw)), str(raw))  # its weights inline (it writes them to raw.onnx.data)
            else:
                torch.onnx.export(module, tuple(example.values()), str(raw), input_names=names, output_names=["output"],
                                  dynamic_axes={**axes, "output": {0: "batch"}}, opset_version=17, dynamo=False)
        out = Path(tmp) / "post.onnx"
        if fam.post in ("int8", "int8-raw"):
            import onnxruntime as ort
            from onnxruntime.quantization import QuantType, quantize_dynamic

            quant = Path(tmp) / "quant.onnx" if fam.post == "int8" else out
            quantize_dynamic(str(raw), str(quant), weight_type=QuantType.QInt8)
        if fam.post == "int8":
            so = ort.SessionOptions()  # then onnxruntime's extended fusions, as its users deploy it
            so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
            so.optimized_model_filepath = str(out)
            ort.InferenceSession(str(quant), so, providers=["CPUExecutionProvider"])
        elif fam.post.startswith("fused"):
            from onnxruntime.transformers.optimizer import optimize_model

            s = SIZES[size]
            model_type = fam.post.partition(":")[2] or "bert"
            optimize_model(str(raw), model_type=model_type, num_heads=s["heads"], hidden_size=s["hidden"]).save_model_to_file(
                str(out))
        elif fam.post == "fp16":
            import onnx
            from onnxruntime.transformers.float16 import convert_float_to_float16

            # as written: the Casts of the graph inputs come after their readers (the backend sorts them)
            onnx.save(convert_float_to_float16(onnx.load(str(raw)), keep_io_types=True), str(out))
            os.replace(raw, path.with_suffix(".fp32.onnx"))
        elif fam.post == "qdq":
            _quantize_qdq(raw, out, fam, SIZES[size], seed)
        elif fam.post == "":
            out = raw
        os.replace(out, path)
    return path
