"""Decoders with their key/value cache on the device (kompute_dml/bench/decoders.py): GPT-2 and
Llama (random weights, tiny) exported as one step with past / present values, run greedily
through the ONNX backend with each step's presents fed back as Tensors; the tokens equal
PyTorch's greedy tokens with its own cache, and only the logits come back to the host."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("torch", reason="torch (requirements-model.txt) exports the decoders")
pytest.importorskip("transformers", reason="transformers (requirements-model.txt) defines the decoders")

import kompute_dml as kdml
from kompute_dml.bench import decoders
from kompute_dml.bench.families import CPU_NODE_TYPES as STILL_ON_THE_CPU
from kompute_dml.onnx_backend import CPU, Backend


@pytest.mark.parametrize("static, padded", [(True, True), (False, True), (False, False)],
                         ids=["static-cache", "growing-cache", "growing-cache-unpadded"])
@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_greedy_tokens_equal_torch_with_the_cache_on_the_device(name, static, padded, monkeypatch, plans_made):
    """Both caches (onnx_backend/generation.py): one capacity, left-padded and masked, whose steps
    replay one plan, and one that grows by a row per step: its prompt and pasts left-padded to their
    bucket (onnx_backend/cache_padding.py: the prompt's plan as given and padded, the first step's too,
    then replayed), or with that padding off a plan per step; the tokens are torch's and the last
    position's logits torch's to float32 roundoff."""
    from kompute_dml.onnx_backend import generation

    dec = decoders.build(name, "tiny")
    rep = Backend.prepare(str(dec.path), "CPU")
    rep.state.cache_padding.enabled = padded
    assert {p.op_type for p in rep.placement if p.target == CPU} == STILL_ON_THE_CPU[name]
    prompt = np.random.default_rng(7).integers(1, decoders.VOCAB, (2, 7))
    torch_logits: list[np.ndarray] = []
    want, _ = decoders.torch_greedy(dec, prompt, 6, logits=torch_logits)
    reads = []
    real = kdml.Tensor.numpy
    monkeypatch.setattr(kdml.Tensor, "numpy", lambda self, *a, **kw: reads.append(self.shape) or real(self, *a, **kw))
    gen = generation.greedy(rep, prompt, 6, static=static, keep_logits=True)
    assert gen.tokens == want
    assert gen.capacity == (generation.CAPACITY_ROWS if static else None)
    # static: the prompt's plan and the step's; padded: the prompt's and the first step's as given and padded
    assert len(plans_made) == (2 if static else 4 if padded else 6)
    for step, (ours, theirs) in enumerate(zip(gen.logits, torch_logits)):
        np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-4 * np.abs(theirs).max(), err_msg=f"step {step}")
    if not STILL_ON_THE_CPU[name]:  # wholly on the device: the logits are all that is read back
        # the last position's logits: the prompt's sliced and packed on the device first
        if static or not padded:
            assert reads == [(2, decoders.VOCAB)] + [(2, 1, decoders.VOCAB)] * 5
        else:  # the paddings' checks (the prompt's, the first step's) read those steps' outputs once, presents too
            assert [r for r in reads if len(r) != 4] == [(2, 7, decoders.VOCAB), (2, decoders.VOCAB)] + [
                (2, 1, decoders.VOCAB)] * 6
            assert len([r for r in reads if len(r) == 4]) == 2 * (len(rep.output_names) - 1)
        assert rep.last_run.uploads == 1 and rep.last_run.downloads == 0 and rep.last_run.cpu_segments == 0


@pytest.mark.parametrize("name", sorted(decoders.OTHERS))
def test_other_decoder_families(name):
    """Phi-3 (rotary over the whole head: its pass-through slice is empty), Qwen2 (biased Q, K, V), Gemma 1-3
    (one key/value head), Mistral, Qwen3, StarCoder2, Nemotron, OLMo 2, Granite, StableLM, and the mixtures of
    experts Mixtral and Qwen3-MoE (decoders.OTHERS):
    torch's greedy tokens, wholly on the device, the cache kept there."""
    from kompute_dml.onnx_backend import generation

    dec = decoders.build(name, "tiny")
    rep = Backend.prepare(str(dec.path), "CPU")
    assert not [p.op_type for p in rep.placement if p.target == CPU]
    prompt = np.random.default_rng(7).integers(1, decoders.VOCAB, (2, 7))
    want, _ = decoders.torch_greedy(dec, prompt, 5)
    assert generation.greedy(rep, prompt, 5, static=True).tokens == want
    st = rep.last_run
    assert (st.uploads, st.downloads, st.cpu_segments, st.runtime_fallbacks) == (1, 0, 0, 0) and not st.events, st.events


@pytest.mark.parametrize("name, gpu_policy", [("gpt2", False), ("llama", False), ("gpt2", True)],
                         ids=["gpt2", "llama", "gpt2-flushed-siblings"])
def test_new_lengths_replay_node_traces_bit_for_bit(name, gpu_policy, monkeypatch):
    """Every decoding step is a new past length, so a new plan: plans made from the node traces
    (onnx_backend/node_traces.py), and plans that also repeat the previous plan's steps reading the
    same values (onnx_backend/step_reuse.py, the default), give every output (logits and presents)
    bit for bit equal to plans that run every handler (trace_capacity 0), over many lengths, the
    cache on the device; also with the GPUs' policy of starting what is recorded while planning (a
    flush before every node) and preparing shape siblings (the device all three share)."""
    import dataclasses

    dec = decoders.build(name, "tiny")
    fast = Backend.prepare(str(dec.path), "CPU")
    fast.state.step_reuse = False
    if gpu_policy:
        dev = fast.device
        monkeypatch.setattr(dev, "policy", dataclasses.replace(dev.policy, plan_flush_ms=1e-9, prepare_siblings=True))
    slow = Backend.prepare(str(dec.path), "CPU")
    slow.state.trace_capacity = 0
    reuse = Backend.prepare(str(dec.path), "CPU")
    for r in (fast, slow, reuse):  # a plan per length: the pasts as they grow (cache_padding.py off)
        r.state.cache_padding.enabled = False
    prompt = np.random.default_rng(3).integers(1, decoders.VOCAB, (1, 5))
    pasts = {id(r): dec.empty_past(1) for r in (fast, slow, reuse)}
    ids, length, replayed, reused = prompt, 0, [], []
    for step in range(12):
        length += ids.shape[1]
        outs = {}
        for r in (fast, slow, reuse):
            out = r.run(dec.feeds(ids, length, pasts[id(r)]), device_outputs=True)
            pasts[id(r)] = list(out[1:])
            outs[id(r)] = [t.numpy() for t in out]
            assert r.last_run.planned and r.last_run.runtime_fallbacks == 0  # the prompt's empty past too
        replayed.append(fast.last_run.replayed_nodes)
        reused.append(reuse.last_run.reused_nodes)
        assert slow.last_run.replayed_nodes == 0 and slow.last_run.reused_nodes == fast.last_run.reused_nodes == 0
        for r in (fast, reuse):
            for a, b in zip(outs[id(r)], outs[id(slow)]):
                assert a.shape == b.shape and a.dtype == b.dtype
                assert a.tobytes() == b.tobytes(), f"step {step} (past length {length - ids.shape[1]})"
        ids = outs[id(fast)][0][:, -1].argmax(-1).reshape(1, 1).astype(np.int64)
    assert replayed[:2] == [0, 0] and min(replayed[2:]) > 0  # the first plan made the traces later plans replay
    assert reused[0] == 0 and min(reused[2:]) > 0  # (the prompt's plan and the first step's differ in every shape)


@pytest.mark.parametrize("static", [True, False], ids=["static-cache", "growing-cache"])
@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_prompts_of_several_lengths_in_one_batch(name, static):
    """Left-padded prompts (`prompt_mask`) give each row the tokens of its prompt alone: torch's
    greedy loop over the unpadded prompt, row by row."""
    from kompute_dml.onnx_backend import generation

    dec = decoders.build(name, "tiny")
    rep = Backend.prepare(str(dec.path), "CPU")
    prompt = np.random.default_rng(11).integers(1, decoders.VOCAB, (3, 9))
    lengths = (9, 4, 1)
    pm = np.zeros(prompt.shape, np.int64)
    for b, n in enumerate(lengths):
        pm[b, 9 - n:] = 1
        prompt[b, :9 - n] = 0  # the padding's ids are any token: the mask hides them
    got = generation.greedy(rep, prompt, 5, prompt_mask=pm, static=static).tokens
    want = [decoders.torch_greedy(dec, prompt[b:b + 1, 9 - n:], 5)[0][0] for b, n in enumerate(lengths)]
    assert got == want
    ids, mask = generation.left_pad([prompt[b, 9 - n:] for b, n in enumerate(lengths)])  # (the same batch)
    assert ids.tolist() == prompt.tolist() and mask.tolist() == pm.tolist()
    with pytest.raises(kdml.InvalidArgumentError, match="^rows"):
        generation.left_pad([[1, 2], []])


@pytest.mark.parametrize("variant", ["fp16", "int8"])
@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_float16_and_int8_decoders(name, variant):
    """The float16 form (float32 inputs and outputs kept) and the int8 form (quantize_dynamic) of each
    decoder generate wholly on the device: the static cache (the prompt unpadded) gives the growing
    cache's tokens and logits (its masked keys add zeros), and onnxruntime's tokens where its arithmetic is a
    second opinion: float16 here, int8 where its u8 x s8 products are exact (tests/ort_exactness.py;
    without VNNI they saturate and its tokens drift)."""
    from ort_exactness import onnxruntime_exact

    from kompute_dml.onnx_backend import generation

    dec = decoders.build(name, "tiny", variant=variant)
    rep = Backend.prepare(str(dec.path), "CPU")
    assert {p.op_type for p in rep.placement if p.target == CPU} == set()
    prompt = np.random.default_rng(7).integers(1, decoders.VOCAB, (2, 7))
    static = generation.greedy(rep, prompt, 6, bucket=1, keep_logits=True)  # (the prompt's rows as they are)
    assert rep.last_run.cpu_segments == 0 and rep.last_run.runtime_fallbacks == 0
    growing = generation.greedy(rep, prompt, 6, static=False, keep_logits=True)
    assert static.tokens == growing.tokens
    # the growing cache padded (cache_padding.py); its prompt checked, but for int8's dynamic quantization
    # (float16 products of other shapes may take other kernels on a GPU: the H200's check refused the
    # padded prompt's logits, lavapipe's kept them)
    cp = rep.state.cache_padding
    assert cp.verified and cp.padded_runs == 4 and cp.prompt_runs == 0
    if variant == "int8":
        assert not cp.prompt_verified and not cp.prompt_refusal
    else:
        assert cp.prompt_verified or "differs padded" in cp.prompt_refusal
    for step, (a, b) in enumerate(zip(static.logits, growing.logits)):
        np.testing.assert_allclose(a, b, rtol=0, atol=2e-3 * np.abs(b).max(), err_msg=f"step {step}")
    # the prompt padded to its bucket (float16; int8 is not padded): float16 products of other shapes
    # may take other kernels on a GPU (other roundings), the tokens stay
    assert generation.greedy(rep, prompt, 6).tokens == static.tokens
    if variant == "int8" and not onnxruntime_exact(np.uint8, np.int8).exact:
        return
    import onnxruntime as ort

    sess = ort.InferenceSession(str(dec.path), providers=["CPUExecutionProvider"])
    assert static.tokens == decoders.ort_greedy(sess, dec, prompt, 6)[0]


def test_prompts_of_one_bucket_share_their_plans(monkeypatch, plans_made):
    """With a static cache the prompt is left-padded to a multiple of `bucket` rows: prompts of 7
    and 9 tokens then share the prompt's plan and the step's (no plan at the second), each with
    torch's tokens; bucket=1 plans the prompt of each length. A padded prompt whose logits are not finite (a mask
    that turns a wholly masked row into NaN) runs again unpadded."""
    from kompute_dml.onnx_backend import generation

    dec = decoders.build("gpt2", "tiny")
    rep = Backend.prepare(str(dec.path), "CPU")
    rng = np.random.default_rng(5)
    for n, new_plans in ((7, 2), (9, 0)):
        prompt = rng.integers(1, decoders.VOCAB, (1, n))
        before = len(plans_made)
        assert generation.greedy(rep, prompt, 4).tokens == decoders.torch_greedy(dec, prompt, 4)[0]
        assert len(plans_made) - before == new_plans, n
    before = len(plans_made)
    generation.greedy(rep, prompt, 4, bucket=1)
    assert len(plans_made) - before == 1  # the prompt's 9 rows (the step's capacity, 64, was planned)
    with pytest.raises(kdml.InvalidArgumentError, match="^bucket"):
        generation.greedy(rep, prompt, 4, bucket=0)
    real, widths = type(rep).run, []

    def nan_when_padded(self, feeds, **kw):  # a model whose wholly masked rows give NaN
        out = real(self, feeds, **kw)
        widths.append(feeds["input_ids"].shape[1])
        if feeds["input_ids"].shape[1] == generation.CAPACITY_ROWS:
            return [np.full((1, 1, decoders.VOCAB), np.nan, np.float32), *out[1:]]
        return out

    monkeypatch.setattr(type(rep), "run", nan_when_padded)
    assert generation.greedy(rep, prompt, 4).tokens == decoders.torch_greedy(dec, prompt, 4)[0]
    assert widths == [generation.CAPACITY_ROWS, 9, 1, 1, 1]  # the padded prompt, then unpadded


def test_stream_and_eos():
    """generation.stream yields greedy's tokens step by step (its arguments checked before any run);
    `eos` ends a row (the id repeats from there) and, once every row has given it, the generation."""
    from kompute_dml.onnx_backend import generation

    dec = decoders.build("gpt2", "tiny")
    rep = Backend.prepare(str(dec.path), "CPU")
    prompt = np.random.default_rng(7).integers(1, decoders.VOCAB, (2, 7))
    want = generation.greedy(rep, prompt, 6).tokens
    steps = list(generation.stream(rep, prompt, 6))
    assert [s.shape for s in steps] == [(2,)] * 6 and np.stack(steps, axis=1).tolist() == want
    with pytest.raises(kdml.InvalidArgumentError, match="^new_tokens"):
        generation.stream(rep, prompt, 0)
    eos = want[0][2]
    got = generation.greedy(rep, prompt, 6, eos=eos).tokens
    for row, full in zip(got, want):
        end = full.index(eos) + 1 if eos in full else len(full)
        assert row[:end] == full[:end] and set(row[end:]) <= {eos}
    assert len(got[0]) == (6 if eos not in want[1] else max(full.index(eos) + 1 for full in want))
    alone = generation.greedy(rep, prompt[:1], 6, eos=eos).tokens
    assert alone == [want[0][:want[0].index(eos) + 1]]  # its only row ended: so did the generation
    with pytest.raises(kdml.InvalidArgumentError, match="^eos"):
        generation.greedy(rep, prompt, 2, eos="</s>")


def test_inputs_found_by_name_wherever_they_stand(tmp_path):
    """A step model whose position_ids comes after its pasts (its graph inputs reordered): the
    inputs are found by name, the tokens are torch's."""
    import onnx

    from kompute_dml.onnx_backend import generation

    dec = decoders.build("gpt2", "tiny")
    model = onnx.load(str(dec.path))
    inputs = list(model.graph.input)
    order = [i for i in inputs if i.name != "position_ids"] + [i for i in inputs if i.name == "position_ids"]
    del model.graph.input[:]
    model.graph.input.extend(order)
    path = tmp_path / "reordered.onnx"
    onnx.save(model, str(path))
    rep = Backend.prepare(str(path), "CPU")
    assert rep.feed_names[-1] == "position_ids"
    prompt = np.random.default_rng(4).integers(1, decoders.VOCAB, (1, 6))
    gen = generation.greedy(rep, prompt, 4)
    assert gen.capacity == generation.CAPACITY_ROWS and gen.tokens == decoders.torch_greedy(dec, prompt, 4)[0]


def test_static_cache_capacity_and_inputs_are_checked():
    """A capacity below the prompt and the new tokens (the last step's keys), a prompt of no
    tokens and a count below one are refused naming the field, before any run."""
    from kompute_dml.onnx_backend import generation

    dec = decoders.build("gpt2", "tiny")
    rep = Backend.prepare(str(dec.path), "CPU")
    prompt = np.ones((1, 5), np.int64)
    with pytest.raises(kdml.InvalidArgumentError, match="capacity"):
        generation.greedy(rep, prompt, 4, capacity=7)  # the last step reads 5 + 3 keys before its own
    with pytest.raises(kdml.InvalidArgumentError, match="prompt"):
        generation.greedy(rep, np.ones((1, 0), np.int64), 4)
    with pytest.raises(kdml.InvalidArgumentError, match="new_tokens"):
        generation.greedy(rep, prompt, 0)
    with pytest.raises(kdml.InvalidArgumentError, match="^fixed: .'encoder_out'. are not inputs"):
        generation.greedy(rep, prompt, 2, fixed={"encoder_out": np.zeros(3, np.float32)})
    for bad in (np.ones((1, 4)), np.array([[1, 0, 1, 1, 1]]), np.array([[1, 1, 1, 1, 0]]), np.full((1, 5), 2)):
        with pytest.raises(kdml.InvalidArgumentError, match="prompt_mask"):  # shape, gaps, right padding, values
            generation.greedy(rep, prompt, 2, prompt_mask=bad)
    assert rep.last_run is None or not rep.last_run.planned  # nothing ran
    gen = generation.greedy(rep, prompt, 4, capacity=8)  # the least capacity: every padding row used
    assert gen.tokens == decoders.torch_greedy(dec, prompt, 4)[0]


def test_first_pasts_are_zeros_kept_on_the_device(monkeypatch):
    """A static cache's first step feeds every layer's past from one Tensor of zeros per shape and
    type, made at the first generation and fed again by the next (generation._zeros: no upload of
    host zeros per prompt), at most ZERO_PASTS of them; the tokens are those of host zeros."""
    from kompute_dml.onnx_backend import generation

    dec = decoders.build("gpt2", "tiny")
    rep = Backend.prepare(str(dec.path), "CPU")
    prompt = np.random.default_rng(3).integers(1, decoders.VOCAB, (2, 9))
    first = generation.greedy(rep, prompt, 4, capacity=128).tokens
    (key, zeros), = rep.state.zero_pasts.items()
    assert key[0][0] == 2 and key[0][2] == 128 - generation.CAPACITY_ROWS and isinstance(zeros, kdml.Tensor)
    assert generation.greedy(rep, prompt, 4, capacity=128).tokens == first
    assert next(iter(rep.state.zero_pasts.values())) is zeros and not zeros.numpy().any()
    # the same tokens from host zeros (the uncached form)
    monkeypatch.setattr(generation, "_zeros", lambda _rep, shape, dtype: np.zeros(shape, dtype))
    assert generation.greedy(rep, prompt, 4, capacity=128).tokens == first
    monkeypatch.undo()
    monkeypatch.setattr(generation, "ZERO_PASTS", 2)
    for cap in (192, 256, 320):
        generation.greedy(rep, prompt, 2, capacity=cap)
    assert len(rep.state.zero_pasts) == 2


def test_steps_after_a_long_prompt():
    """GPT-2 (small: head size 64) after a 490-token prompt: each step's fused attention over ~490 keys
    passed lavapipe's loop limit on the rows kernel, and the tokens differed from torch's from the second
    (a3f9ca1: checked); the tiled kernel takes such problems on CPU devices (ops/attention_layout.rows_fit)."""
    from kompute_dml.onnx_backend import generation

    dec = decoders.build("gpt2", "small")
    rep = Backend.prepare(str(dec.path), "CPU")
    prompt = np.random.default_rng(7).integers(1, decoders.VOCAB, (1, 490))
    want, _ = decoders.torch_greedy(dec, prompt, 6)
    assert generation.greedy(rep, prompt, 6).tokens == want


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_onnxruntime_loops_through_our_provider_give_torchs_tokens(name):
    """A user's own greedy loop in onnxruntime with our execution provider, the cache in host arrays and
    bound on the device (IO binding: the presents handed over by reference, kompute_dml/ort/deferred.py),
    across a padding bucket's edge (past rows 58 .. 67): torch's tokens both ways."""
    ort = pytest.importorskip("onnxruntime")
    kort = pytest.importorskip("kompute_dml.ort")
    try:
        kort.get_library_path()
    except FileNotFoundError as e:
        pytest.skip(str(e))
    dec = decoders.build(name, "tiny")
    prompt = np.random.default_rng(11).integers(1, decoders.VOCAB, (2, 58))
    want = decoders.torch_greedy(dec, prompt, 10)[0]
    host = ort.InferenceSession(str(dec.path), sess_options=kort.session_options())
    on_device = ort.InferenceSession(str(dec.path), sess_options=kort.session_options(device_memory=True))
    assert decoders.ort_greedy(host, dec, prompt, 10)[0] == want
    assert decoders.ort_greedy_io(on_device, dec, prompt, 10)[0] == want
