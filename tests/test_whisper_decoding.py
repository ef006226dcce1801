"""Whisper (random weights, tiny) decoded greedily with its self-attention cache on the device: the
encoder run once, its states kept on the device; the decoder exported as one step
(decoder_input_ids, encoder_hidden_states, past self keys / values) -> (logits, presents), each
step's presents fed back as Tensors (cross-attention over the encoder's states every step). The
tokens equal PyTorch's greedy loop with its own cache, batch 1 and 3 (rows of different prompts)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")
torch = pytest.importorskip("torch", reason="torch (requirements-model.txt) exports the model")
transformers = pytest.importorskip("transformers", reason="transformers (requirements-model.txt) defines Whisper")

from kompute_dml.onnx_backend import Backend  # noqa: E402

LAYERS, HEADS, HEAD, MELS, FRAMES, STEPS = 2, 4, 16, 16, 64, 10


def _model():
    torch.manual_seed(0)
    cfg = transformers.WhisperConfig(vocab_size=120, d_model=HEADS * HEAD, encoder_layers=LAYERS, decoder_layers=LAYERS,
                                     encoder_attention_heads=HEADS, decoder_attention_heads=HEADS, encoder_ffn_dim=128,
                                     decoder_ffn_dim=128, num_mel_bins=MELS, max_source_positions=FRAMES // 2,
                                     max_target_positions=64, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                                     decoder_start_token_id=1, init_std=0.5)  # (wide: clear maxima among the logits)
    cfg._attn_implementation = "eager"
    return transformers.WhisperForConditionalGeneration(cfg).eval()


def _export(model, tmp):
    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, feats):
            return self.m.model.encoder(feats).last_hidden_state

    class Step(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, ids, states, *past):
            own = transformers.DynamicCache()
            for i in range(LAYERS):
                own.update(past[2 * i], past[2 * i + 1], i)
            out = self.m.model.decoder(input_ids=ids, encoder_hidden_states=states, use_cache=True,
                                       past_key_values=transformers.EncoderDecoderCache(own, transformers.DynamicCache()))
            flat = [t for layer in out.past_key_values.self_attention_cache.layers for t in (layer.keys, layer.values)]
            return (self.m.proj_out(out.last_hidden_state), *flat)

    pasts = [f"past_{i}" for i in range(2 * LAYERS)]
    enc, step = str(tmp / "encoder.onnx"), str(tmp / "step.onnx")
    with torch.no_grad():
        torch.onnx.export(Encoder().eval(), (torch.zeros(2, MELS, FRAMES),), enc, input_names=["feats"],
                          output_names=["states"], opset_version=17, dynamo=False, dynamic_axes={"feats": {0: "b"}})
        torch.onnx.export(Step().eval(), (torch.ones(2, 3, dtype=torch.int64), torch.zeros(2, FRAMES // 2, HEADS * HEAD),
                                          *[torch.zeros(2, HEADS, 2, HEAD) for _ in pasts]), step,
                          input_names=["ids", "states", *pasts], output_names=["logits", *[f"present_{i}" for i in pasts]],
                          opset_version=17, dynamo=False,
                          dynamic_axes={"ids": {0: "b", 1: "s"}, "states": {0: "b"}, **{n: {0: "b", 2: "p"} for n in pasts}})
    return enc, step, pasts


def _torch_greedy(model, feats, prompt):
    with torch.no_grad():
        states = model.model.encoder(torch.from_numpy(feats)).last_hidden_state
        cache, ids, tokens = None, torch.from_numpy(prompt), []
        for _ in range(STEPS):
            out = model(encoder_outputs=(states,), decoder_input_ids=ids, past_key_values=cache, use_cache=True)
            ids = out.logits[:, -1].argmax(-1).reshape(-1, 1)
            cache = out.past_key_values
            tokens.append(ids[:, 0].numpy())
    return np.stack(tokens, 1)


@pytest.mark.parametrize("batch", [1, 3])
def test_greedy_tokens_equal_torch_with_the_cache_on_the_device(tmp_path, batch):
    model = _model()
    enc, step, pasts = _export(model, tmp_path)
    rng = np.random.default_rng(batch)
    feats = rng.standard_normal((batch, MELS, FRAMES)).astype(np.float32)
    prompt = np.concatenate([np.ones((batch, 1), np.int64), rng.integers(3, 120, (batch, 2))], axis=1)
    encoder, decoder = Backend.prepare(enc, "CPU"), Backend.prepare(step, "CPU")
    states = encoder.run({"feats": decoder.device.tensor(feats)}, device_outputs=True)[0]  # stays on the device
    past = [np.zeros((batch, HEADS, 0, HEAD), np.float32) for _ in pasts]
    ids, tokens = prompt, []
    for _ in range(STEPS):
        logits, *past = decoder.run({"ids": ids, "states": states, **dict(zip(pasts, past))}, device_outputs=True)
        st = decoder.last_run
        assert not st.cpu_segments and not st.runtime_fallbacks and (st.uploads, st.downloads) == (1, 0), st
        ids = logits.numpy()[:, -1].argmax(-1).reshape(batch, 1).astype(np.int64)
        tokens.append(ids[:, 0])
    np.testing.assert_array_equal(np.stack(tokens, 1), _torch_greedy(model, feats, prompt))
