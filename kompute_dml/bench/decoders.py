"""Decoders with their key/value cache: GPT-2 and Llama (random weights) exported as one step
`(input_ids, attention_mask, position_ids, past_0..past_2L-1) -> (logits, present_0..present_2L-1)`
(optimum's inputs), and the greedy loop that runs them through the ONNX backend with the cache kept
on the device (onnx_backend/generation.py: each step's presents are the next step's pasts, never
copied to the host; only the last position's logits are read).

    model = build("gpt2", "tiny");  tokens, times = greedy(rep, model, prompt, 32)
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .bert_models import CACHE, tool_versions
from .families import SIZES, VOCAB

# a wide initialization: random logits then have clear maxima, so greedy tokens do not hinge on
# rounding (with the usual 0.02 the top two logits of a random model are often within 1e-6)
INIT_RANGE = 0.5


# The step model's forms: as exported, float16 with float32 inputs and outputs (onnxruntime's
# convert_float_to_float16, keep_io_types), int8 (quantize_dynamic's QInt8 weights)
VARIANTS = ("fp32", "fp16", "int8")


@dataclass(frozen=True)
class Decoder:
    name: str
    path: Path
    layers: int
    kv_heads: int
    head_dim: int
    module: Any = None  # the torch model the ONNX file was exported from (None when loaded from the cache)

    def empty_past(self, batch: int) -> list[np.ndarray]:
        return [np.zeros((batch, self.kv_heads, 0, self.head_dim), np.float32) for _ in range(2 * self.layers)]

    @staticmethod
    def feeds(ids: np.ndarray, length: int, past: list[Any]) -> dict[str, Any]:
        """A step's inputs where the cache grows: `ids` [batch, new] after length - new tokens."""
        batch, new = ids.shape
        return {"input_ids": ids, "attention_mask": np.ones((batch, length), np.int64),
                "position_ids": np.broadcast_to(np.arange(length - new, length, dtype=np.int64), ids.shape),
                **{f"past_{i}": p for i, p in enumerate(past)}}


# Llama-style decoders beyond GPT-2 and Llama (tests/test_decoders.py): configuration and model classes and
# their own keywords. Phi-3: rotary over the whole head (an empty pass-through slice); Qwen2: biased Q, K, V;
# Gemma (1-3): one key/value head; Gemma 2 also soft-capped logits, Gemma 3 and Qwen3 normalized Q and K,
# StarCoder2 biased products and LayerNorm, Nemotron squared ReLU, Granite its scaling multipliers; Mixtral and
# Qwen3-MoE route each token to 2 of 4 experts
_MOE = {"num_experts_per_tok": 2, "experts_implementation": "batched_mm"}
OTHERS = {"phi3": ("Phi3Config", "Phi3ForCausalLM", {"pad_token_id": 0}),
          "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {}),
          "gemma": ("GemmaConfig", "GemmaForCausalLM", {"num_key_value_heads": 1}),
          "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", {"num_key_value_heads": 1}),
          "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM", {"num_key_value_heads": 1}),
          "mistral": ("MistralConfig", "MistralForCausalLM", {}),
          "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", {}),
          "starcoder2": ("Starcoder2Config", "Starcoder2ForCausalLM", {}),
          "nemotron": ("NemotronConfig", "NemotronForCausalLM", {}),
          "olmo2": ("Olmo2Config", "Olmo2ForCausalLM", {}),
          "granite": ("GraniteConfig", "GraniteForCausalLM", {}),
          "stablelm": ("StableLmConfig", "StableLmForCausalLM", {}),
          # mixtures of experts (each token's top 2 of 4 experts; transformers' batched_mm experts: its default
          # grouped_mm counts tokens with torch.histc, which torch.onnx does not export)
          "mixtral": ("MixtralConfig", "MixtralForCausalLM", {**_MOE, "num_local_experts": 4, "sliding_window": None}),
          "qwen3-moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM", {**_MOE, "num_experts": 4, "moe_intermediate_size": 32})}


def torch_model(name: str, size: str, seed: int = 0) -> Any:
    import torch
    import transformers

    s = SIZES[size]
    torch.manual_seed(seed)
    common = {"vocab_size": VOCAB, "bos_token_id": 0, "eos_token_id": 0, "initializer_range": INIT_RANGE}
    llama_like = dict(hidden_size=s["hidden"], num_hidden_layers=s["layers"], num_attention_heads=s["heads"],
                      num_key_value_heads=max(1, s["heads"] // 2), intermediate_size=s["ffn"], max_position_embeddings=512)
    if name == "gpt2":
        cfg = transformers.GPT2Config(n_embd=s["hidden"], n_layer=s["layers"], n_head=s["heads"], n_inner=s["ffn"],
                                      n_positions=512, **common)
        cls = transformers.GPT2LMHeadModel
    elif name == "llama":
        cfg = transformers.LlamaConfig(**llama_like, pad_token_id=0, **common)
        cls = transformers.LlamaForCausalLM
    elif name in OTHERS:
        config, model, own = OTHERS[name]
        cfg = getattr(transformers, config)(**{**llama_like, **common, "head_dim": s["hidden"] // s["heads"], **own})
        cls = getattr(transformers, model)
    else:
        raise ValueError(f"decoder {name!r}: gpt2, llama or one of {sorted(OTHERS)}")
    cfg._attn_implementation = "eager"
    return cls(cfg).eval()


def _shape(model: Any) -> tuple[int, int, int]:
    c = model.config
    heads = getattr(c, "num_attention_heads", None) or c.n_head
    hidden = getattr(c, "hidden_size", None) or c.n_embd
    layers = getattr(c, "num_hidden_layers", None) or c.n_layer
    return layers, getattr(c, "num_key_value_heads", None) or heads, hidden // heads


def _step_module(model: Any, layers: int) -> Any:
    import torch
    import transformers

    class Step(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.m = model

        def forward(self, ids: Any, mask: Any, positions: Any, *past: Any) -> Any:
            cache = transformers.DynamicCache()
            for i in range(layers):
                cache.update(past[2 * i], past[2 * i + 1], i)
            out = self.m(input_ids=ids, attention_mask=mask, position_ids=positions, past_key_values=cache,
                         use_cache=True)
            flat = []
            for layer in out.past_key_values.layers:
                flat += [layer.keys, layer.values]
            return (out.logits, *flat)

    return Step().eval()


def build(name: str, size: str = "tiny", cache: Path = CACHE, seed: int = 0, variant: str = "fp32") -> Decoder:
    """The decoder's step model, exported once per configuration and tool versions; `variant`
    (VARIANTS): the float32 export as it is, or converted from it once."""

    if variant not in VARIANTS:
        raise ValueError(f"variant {variant!r}: one of {VARIANTS}")
    model = torch_model(name, size, seed)
    layers, kv_heads, head_dim = _shape(model)
    stamp = json.dumps({"decoder": name, "size": SIZES[size], "seed": seed, "init": INIT_RANGE, "decoder_recipe": 2,
                        **tool_versions()}, sort_keys=True)
    path = Path(cache) / f"{name}-past-{size}-{hashlib.sha256(stamp.encode()).hexdigest()[:12]}.onnx"
    if not path.exists():
        _export(model, layers, kv_heads, head_dim, path)
    if variant != "fp32":
        src, path = path, path.with_suffix(f".{variant}.onnx")
        if not path.exists():
            _convert(src, path, variant)
    return Decoder(name, path, layers, kv_heads, head_dim, model)


def _export(model: Any, layers: int, kv_heads: int, head_dim: int, path: Path) -> None:
    import torch

    path.parent.mkdir(parents=True, exist_ok=True)
    pasts = [f"past_{i}" for i in range(2 * layers)]
    example = [torch.ones((1, 5), dtype=torch.int64), torch.ones((1, 8), dtype=torch.int64),
               torch.arange(3, 8).reshape(1, 5), *[torch.zeros((1, kv_heads, 3, head_dim)) for _ in pasts]]
    with tempfile.TemporaryDirectory() as tmp, torch.no_grad():
        raw = Path(tmp) / "step.onnx"
        torch.onnx.export(_step_module(model, layers), tuple(example), str(raw),
                          input_names=["input_ids", "attention_mask", "position_ids", *pasts],
                          output_names=["logits", *[f"present_{i}" for i in range(2 * layers)]], opset_version=17,
                          dynamo=False, dynamic_axes={"input_ids": {0: "batch", 1: "seq"},
                                                      "attention_mask": {0: "batch", 1: "total"},
                                                      "position_ids": {0: "batch", 1: "seq"},
                                                      **{n: {0: "batch", 2: "past"} for n in pasts}})
        os.replace(raw, path)


def _convert(src: Path, path: Path, variant: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:  # (onnxruntime's quantizer leaves files in the working folder)
        out = Path(tmp) / "step.onnx"
        if variant == "fp16":
            import onnx
            from onnxruntime.transformers.float16 import convert_float_to_float16

            onnx.save(convert_float_to_float16(onnx.load(str(src)), keep_io_types=True), str(out))
        else:
            from onnxruntime.quantization import QuantType, quantize_dynamic

            cwd = os.getcwd()
            os.chdir(tmp)
            try:
                quantize_dynamic(str(src), str(out), weight_type=QuantType.QInt8)
            finally:
                os.chdir(cwd)
        os.replace(out, path)


def greedy(rep: Any, dec: Decoder, prompt: np.ndarray, steps: int,
           static: bool = True) -> tuple[list[list[int]], list[float]]:
    """`steps` new tokens per row after `prompt` (batch x length int64), the cache on the device
    (onnx_backend/generation.greedy; `static`: at one capacity, else growing by a row per step);
    the tokens per row and each step's seconds (the first is the prompt's)."""
    from kompute_dml.onnx_backend import generation

    gen = generation.greedy(rep, prompt, steps, static=static)
    return gen.tokens, gen.seconds


def _greedy_loop(step: Any, past: list[Any], prompt: np.ndarray, steps: int) -> tuple[list[list[int]], list[float]]:
    """A greedy loop whose step(ids, length, past) returns (logits [batch, new, vocab] on the host, the
    presents): tokens per row and seconds per step."""
    batch, ids, length = prompt.shape[0], prompt.astype(np.int64), 0
    tokens: list[list[int]] = [[] for _ in range(batch)]
    times = []
    for _ in range(steps):
        length += ids.shape[1]
        t0 = time.perf_counter()
        logits, past = step(ids, length, past)
        nxt = logits[:, -1].argmax(-1)
        times.append(time.perf_counter() - t0)
        for b in range(batch):
            tokens[b].append(int(nxt[b]))
        ids = nxt.reshape(batch, 1).astype(np.int64)
    return tokens, times


def ort_greedy(sess: Any, dec: Decoder, prompt: np.ndarray, steps: int) -> tuple[list[list[int]], list[float]]:
    """The same loop through an onnxruntime session of the step model, its cache growing in host
    arrays: tokens and seconds per step."""
    def step(ids: np.ndarray, length: int, past: list[Any]) -> tuple[np.ndarray, list[Any]]:
        out = sess.run(None, dec.feeds(ids, length, past))
        return out[0], out[1:]

    return _greedy_loop(step, dec.empty_past(prompt.shape[0]), prompt, steps)


def ort_greedy_io(sess: Any, dec: Decoder, prompt: np.ndarray, steps: int) -> tuple[list[list[int]], list[float]]:
    """ort_greedy through IO binding (a session of the device-memory execution provider): the presents
    stay in the provider's device memory and are bound as the next step's pasts, only the logits come
    to the host: tokens and seconds per step."""
    import onnxruntime as ort

    names = [o.name for o in sess.get_outputs()]

    def step(ids: np.ndarray, length: int, past: list[Any]) -> tuple[np.ndarray, list[Any]]:
        io = sess.io_binding()
        for name, v in dec.feeds(ids, length, []).items():
            io.bind_cpu_input(name, np.ascontiguousarray(v))
        for i, p in enumerate(past):
            io.bind_ortvalue_input(f"past_{i}", p)
        io.bind_output(names[0], "cpu")
        for name in names[1:]:
            io.bind_output(name, "gpu", 0)
        sess.run_with_iobinding(io)
        outs = io.get_outputs()
        return outs[0].numpy(), outs[1:]

    return _greedy_loop(step, [ort.OrtValue.ortvalue_from_numpy(p) for p in dec.empty_past(prompt.shape[0])], prompt, steps)


def torch_greedy(dec: Decoder, prompt: np.ndarray, steps: int, device: str = "cpu", half: bool = False,
                 logits: list[np.ndarray] | None = None) -> tuple[list[list[int]], list[float]]:
    """The same loop in PyTorch eager with its own cache (`use_cache=True`): tokens and seconds per
    step; `half`: a float16 copy of the model (the module itself stays float32); `logits`: gets
    each step's last-position logits [batch, vocab]."""
    import copy

    import torch

    model = copy.deepcopy(dec.module).half().to(device) if half else dec.module.to(device)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    ids = torch.from_numpy(prompt.astype(np.int64)).to(device)
    tokens: list[list[int]] = [[] for _ in range(prompt.shape[0])]
    times, cache = [], None
    with torch.no_grad():
        for _ in range(steps):
            t0 = time.perf_counter()
            out = model(input_ids=ids, past_key_values=cache, use_cache=True)
            nxt = out.logits[:, -1].argmax(-1)
            sync()
            times.append(time.perf_counter() - t0)
            if logits is not None:
                logits.append(out.logits[:, -1].float().cpu().numpy())
            cache = out.past_key_values
            for b, t in enumerate(nxt.tolist()):
                tokens[b].append(int(t))
            ids = nxt.reshape(-1, 1)
    return tokens, times
