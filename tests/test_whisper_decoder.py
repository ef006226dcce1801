"""Whisper's decoder with its key / value cache (random weights, tiny): one step exported with
the self-attention past and the cross-attention keys / values as inputs (the encoder's, projected
once), run greedily through the ONNX backend with each step's presents fed back on the device;
the tokens equal PyTorch's greedy tokens (its decoder without a cache) and onnxruntime's, every
node on the device or the host."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")
torch = pytest.importorskip("torch", reason="torch (requirements-model.txt) exports the decoder")
transformers = pytest.importorskip("transformers", reason="transformers (requirements-model.txt) defines Whisper")
ort = pytest.importorskip("onnxruntime")

from kompute_dml.onnx_backend import CPU, Backend  # noqa: E402

LAYERS, HEADS, HEAD, FRAMES, VOCAB, STEPS = 2, 4, 16, 30, 300, 6


def _model():
    cfg = transformers.WhisperConfig(vocab_size=VOCAB, d_model=HEADS * HEAD, encoder_layers=1, decoder_layers=LAYERS,
                                     encoder_attention_heads=HEADS, decoder_attention_heads=HEADS, encoder_ffn_dim=128,
                                     decoder_ffn_dim=128, num_mel_bins=16, max_source_positions=FRAMES,
                                     max_target_positions=32, pad_token_id=0, decoder_start_token_id=1)
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    return transformers.WhisperForConditionalGeneration(cfg).eval()


class _Step(torch.nn.Module):
    """(ids, mask[, positions], past...) -> (logits, present...); `positions`: position_ids is an
    input (generation.greedy's static cache needs it), else the decoder counts the past."""

    def __init__(self, model, positions: bool = False):
        super().__init__()
        self.m, self.positions = model, positions

    def forward(self, ids, mask, *rest):
        pos, past = (rest[0], rest[1:]) if self.positions else (None, rest)
        own, cross = transformers.DynamicCache(), transformers.DynamicCache()
        for i in range(LAYERS):
            own.update(past[4 * i], past[4 * i + 1], i)
            cross.update(past[4 * i + 2], past[4 * i + 3], i)
        # (encoder states must be given for the cross attention to run; its keys / values come
        # from the cache, so these zeros are never read and leave the exported graph)
        unread = torch.zeros(ids.shape[0], 1, HEADS * HEAD)
        out = self.m.model.decoder(input_ids=ids, attention_mask=mask, encoder_hidden_states=unread, use_cache=True,
                                   past_key_values=transformers.EncoderDecoderCache(own, cross), position_ids=pos)
        flat = []
        for layer in out.past_key_values.self_attention_cache.layers:
            flat += [layer.keys, layer.values]
        return (self.m.proj_out(out.last_hidden_state), *flat)


def _reference(model):
    """The cross-attention keys and values of a random encoder output, projected once per layer, and
    torch's greedy tokens: its decoder over the whole prefix at every step, no cache."""
    enc = torch.randn(1, FRAMES, HEADS * HEAD)
    with torch.no_grad():
        cross = []
        for layer in model.model.decoder.layers:
            a = layer.encoder_attn
            cross += [p(enc).view(1, FRAMES, HEADS, HEAD).transpose(1, 2) for p in (a.k_proj, a.v_proj)]
        want, ids = [], torch.tensor([[1]])
        for _ in range(STEPS):
            h = model.model.decoder(input_ids=ids, encoder_hidden_states=enc, use_cache=False).last_hidden_state
            want.append(int(model.proj_out(h)[0, -1].argmax()))
            ids = torch.cat([ids, torch.tensor([[want[-1]]])], 1)
    return cross, want


def _greedy(run, cross):
    own = [np.zeros((1, HEADS, 0, HEAD), np.float32) for _ in range(2 * LAYERS)]
    tok, tokens = np.array([[1]], np.int64), []
    for n in range(1, STEPS + 1):
        feeds = {"ids": tok, "mask": np.ones((1, n), np.int64)}
        for i in range(LAYERS):
            feeds[f"past_{4 * i}"], feeds[f"past_{4 * i + 1}"] = own[2 * i], own[2 * i + 1]
            feeds[f"past_{4 * i + 2}"], feeds[f"past_{4 * i + 3}"] = cross[2 * i], cross[2 * i + 1]
        out = run(feeds)
        tok = np.array([[int(np.argmax(np.asarray(out[0])[0, -1]))]], np.int64)
        tokens.append(int(tok[0, 0]))
        own = list(out[1:])
    return tokens


def test_whisper_decoder_greedy_tokens_with_the_cache_on_the_device(tmp_path):
    model = _model()
    cross, want = _reference(model)
    past = []
    for i in range(LAYERS):
        past += [torch.zeros(1, HEADS, 2, HEAD), torch.zeros(1, HEADS, 2, HEAD), cross[2 * i], cross[2 * i + 1]]
    names = [f"past_{i}" for i in range(4 * LAYERS)]
    axes = {"ids": {1: "t"}, "mask": {1: "m"}, **{n: {2: "p" if i % 4 < 2 else "s"} for i, n in enumerate(names)}}
    path = tmp_path / "whisper_step.onnx"
    torch.onnx.export(_Step(model), (torch.tensor([[5]]), torch.ones(1, 3, dtype=torch.int64), *past), str(path),
                      input_names=["ids", "mask", *names], output_names=["logits"] + [f"present_{i}" for i in range(2 * LAYERS)],
                      dynamic_axes=axes, opset_version=17, dynamo=False)
    cross_np = [c.numpy() for c in cross]
    rep = Backend.prepare(str(path), "CPU")
    assert rep.feed_names == ["ids", "mask", *names]  # the cross keys / values are read, not the zeros
    assert not [p.op_type for p in rep.placement if p.target == CPU]
    got = _greedy(lambda f: rep.run(f, device_outputs=True), cross_np)
    assert rep.last_run.cpu_segments == 0 and rep.last_run.runtime_fallbacks == 0, rep.last_run.events
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert got == want == _greedy(lambda f: sess.run(None, f), cross_np)



def test_whisper_decoder_through_generation_greedy_with_a_static_cache(tmp_path, plans_made):
    """generation.greedy over Whisper's decoder step (onnx_backend/generation.py): its
    cross-attention keys and values `fixed` (Tensors on the device, fed unchanged), its own cache at
    one capacity, so every step after the first replays one plan; the tokens are torch's decoder
    without a cache over the whole prefix."""
    from kompute_dml.onnx_backend import generation

    model = _model()
    cross, want = _reference(model)
    with torch.no_grad():
        past = []
        for i in range(LAYERS):
            past += [torch.zeros(1, HEADS, 2, HEAD), torch.zeros(1, HEADS, 2, HEAD), cross[2 * i], cross[2 * i + 1]]
        names = [f"past_{i}" for i in range(4 * LAYERS)]
        axes = {"input_ids": {1: "t"}, "attention_mask": {1: "m"}, "position_ids": {1: "t"},
                **{n: {2: "p" if i % 4 < 2 else "s"} for i, n in enumerate(names)}}
        path = tmp_path / "whisper_step.onnx"
        example = (torch.tensor([[5]]), torch.ones(1, 3, dtype=torch.int64), torch.tensor([[2]]), *past)
        torch.onnx.export(_Step(model, positions=True), example,
                          str(path), input_names=["input_ids", "attention_mask", "position_ids", *names],
                          output_names=["logits"] + [f"present_{i}" for i in range(2 * LAYERS)],
                          dynamic_axes=axes, opset_version=17, dynamo=False)
    rep = Backend.prepare(str(path), "CPU")
    assert "position_ids" in rep.feed_names
    fixed = {names[4 * i + j]: rep.device.tensor(cross[2 * i + j - 2].numpy()) for i in range(LAYERS) for j in (2, 3)}
    gen = generation.greedy(rep, np.array([[1]]), STEPS, fixed=fixed)
    assert gen.tokens == [want]
    assert len(plans_made) == 2 and gen.capacity == generation.CAPACITY_ROWS
    assert rep.last_run.cpu_segments == 0 and rep.last_run.uploads == 1
    # a cache that grows (onnx_backend/cache_padding.py): its own pasts padded, the cross-attention's left alone
    grown = generation.greedy(rep, np.array([[1]]), STEPS, fixed=fixed, static=False)
    cp = rep.state.cache_padding
    assert grown.tokens == [want] and cp.verified and cp.padded_runs == STEPS - 2
    assert sorted(cp.pasts) == sorted(n for i, n in enumerate(names) if i % 4 < 2)
