"""A growing key/value cache fed by the caller, step by step (onnx_backend/cache_padding.py): the pasts
left-padded to a bucket so that a bucket's steps replay one plan, every step's outputs as onnxruntime's
CPU provider computes them from the unpadded feeds, and the check that turns padding off for models
whose results the padding would change (positions from the past's length, a mask added to the scores)."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import kompute_dml as kdml  # noqa: E402
from kompute_dml.device import recording  # noqa: E402
from kompute_dml.onnx_backend import Backend, cache_padding  # noqa: E402
from kompute_dml.onnx_backend.backend import _kdml_device  # noqa: E402

E, H, D, V, MAXPOS = 16, 2, 8, 40, 256
RNG = np.random.default_rng(3)
W = {n: RNG.standard_normal(s).astype(np.float32) * sc for n, s, sc in (
    ("wte", (V, E), 1.0), ("wpe", (MAXPOS, E), 1.0), ("wq", (E, E), 0.5), ("wk", (E, E), 0.5),
    ("wv", (E, E), 0.5), ("wo", (E, E), 0.5), ("lm", (E, V), 1.0))}


def _i64(name, v):
    return numpy_helper.from_array(np.asarray(v, np.int64), name)


def decoder(positions="input", mask="multiply", position_input=True) -> bytes:
    """A one-layer decoder step: (input_ids, attention_mask, position_ids, past_key, past_value) ->
    (logits, present_key, present_value). `positions`: "input" reads position_ids, "length" counts
    from the past's length (position_ids unread), "mask" from the mask's running count (no position_ids
    input; neither has "length" with `position_input=False`); `mask`: "multiply" (1 keep, 0 padding, as
    transformers' exports) or "add" (a float mask added to the scores)."""
    n = helper.make_node
    nodes = [n("Gather", ["wte", "input_ids"], ["tok"]),
             n("Shape", ["past_key"], ["pshape"]), n("Gather", ["pshape", "two"], ["past_len"]),
             n("Shape", ["input_ids"], ["ishape"]), n("Gather", ["ishape", "one"], ["step_len"]),
             n("Add", ["past_len", "step_len"], ["total"]),
             n("Range", ["past_len", "total", "one"], ["qpos"])]
    if positions == "input":
        nodes.append(n("Gather", ["wpe", "position_ids"], ["pos"]))
    elif positions == "mask":  # the mask's running count less one (ALiBi's rule), the step's columns
        nodes += [n("CumSum", ["attention_mask", "one"], ["count"]), n("Sub", ["count", "one"], ["pos_all"]),
                  n("Unsqueeze", ["past_len", "zero1"], ["past_len1"]), n("Unsqueeze", ["total", "zero1"], ["total1"]),
                  n("Slice", ["pos_all", "past_len1", "total1", "one1"], ["step_pos"]),
                  n("Gather", ["wpe", "step_pos"], ["pos"])]
    else:
        nodes += [n("Unsqueeze", ["qpos", "zero1"], ["qpos2"]), n("Gather", ["wpe", "qpos2"], ["pos"])]
    nodes += [n("Add", ["tok", "pos"], ["x"])]
    for p in "qkv":
        nodes += [n("MatMul", ["x", f"w{p}"], [f"{p}0"]), n("Reshape", [f"{p}0", "heads"], [f"{p}1"]),
                  n("Transpose", [f"{p}1"], [f"{p}"], perm=[0, 2, 1, 3])]
    nodes += [n("Concat", ["past_key", "k"], ["present_key"], axis=2),
              n("Concat", ["past_value", "v"], ["present_value"], axis=2),
              n("Transpose", ["present_key"], ["kt"], perm=[0, 1, 3, 2]),
              n("MatMul", ["q", "kt"], ["s0"]), n("Mul", ["s0", "scale"], ["s1"])]
    if mask == "multiply":
        nodes += [n("Cast", ["attention_mask"], ["mf"], to=TensorProto.FLOAT), n("Sub", ["onef", "mf"], ["mi"]),
                  n("Mul", ["mi", "neg"], ["madd"])]
    else:
        nodes += [n("Identity", ["attention_mask"], ["madd"])]
    nodes += [n("Unsqueeze", ["madd", "axes12"], ["m4"]), n("Add", ["s1", "m4"], ["s2"]),
              # causal: key j is seen by the query at position past_len + i where j <= past_len + i
              n("Range", ["zero", "total", "one"], ["kpos"]), n("Unsqueeze", ["kpos", "zero1"], ["kpos2"]),
              n("Unsqueeze", ["qpos", "one1"], ["qpos3"]), n("LessOrEqual", ["kpos2", "qpos3"], ["allowed"]),
              n("Where", ["allowed", "zerof", "neg"], ["causal"]), n("Add", ["s2", "causal"], ["s3"]),
              n("Softmax", ["s3"], ["p"], axis=-1), n("MatMul", ["p", "present_value"], ["a0"]),
              n("Transpose", ["a0"], ["a1"], perm=[0, 2, 1, 3]), n("Reshape", ["a1", "flat"], ["a2"]),
              n("MatMul", ["a2", "wo"], ["a3"]), n("Add", ["a3", "x"], ["h"]), n("MatMul", ["h", "lm"], ["logits"])]
    inits = [numpy_helper.from_array(w, k) for k, w in W.items()] + [
        _i64("two", 2), _i64("one", 1), _i64("zero", 0), _i64("zero1", [0]), _i64("one1", [1]),
        _i64("axes12", [1, 2]), _i64("heads", [0, 0, H, D]), _i64("flat", [0, 0, E]),
        numpy_helper.from_array(np.float32(1 / np.sqrt(D)), "scale"), numpy_helper.from_array(np.float32(1), "onef"),
        numpy_helper.from_array(np.float32(-1e9), "neg"), numpy_helper.from_array(np.float32(0), "zerof")]
    mtype = TensorProto.INT64 if mask == "multiply" else TensorProto.FLOAT
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["B", "S"]),
              helper.make_tensor_value_info("attention_mask", mtype, ["B", "T"]),
              *([helper.make_tensor_value_info("position_ids", TensorProto.INT64, ["B", "S"])]
                if position_input and positions != "mask" else []),
              helper.make_tensor_value_info("past_key", TensorProto.FLOAT, ["B", H, "L", D]),
              helper.make_tensor_value_info("past_value", TensorProto.FLOAT, ["B", H, "L", D])]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["B", "S", V]),
               helper.make_tensor_value_info("present_key", TensorProto.FLOAT, ["B", H, "T", D]),
               helper.make_tensor_value_info("present_value", TensorProto.FLOAT, ["B", H, "T", D])]
    g = helper.make_graph(nodes, "step", inputs, outputs, initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9).SerializeToString()


def _loop(run, prompt, prompt_mask, steps, *, mask="multiply", device=None, positions=True):
    """The caller's greedy loop: each step's feeds (host arrays) and outputs; `run(feeds)` -> outputs.
    With `device`, the pasts fed are the previous outputs as they came (device Tensors)."""
    batch, with_positions = prompt.shape[0], positions
    past = [np.zeros((batch, H, 0, D), np.float32)] * 2
    ids, mask_now = prompt, prompt_mask.astype(np.int64)
    positions = np.maximum(np.cumsum(prompt_mask, axis=1) - 1, 0)
    seen = prompt_mask.sum(axis=1, keepdims=True)
    record = []
    for step in range(steps):
        m = mask_now if mask == "multiply" else np.where(mask_now > 0, 0, -1e9).astype(np.float32)
        feeds = {"input_ids": ids, "attention_mask": m, "position_ids": positions, "past_key": past[0],
                 "past_value": past[1]}
        if not with_positions:
            del feeds["position_ids"]
        out = list(run(feeds))
        record.append((feeds, out))
        logits = out[0].numpy() if isinstance(out[0], kdml.Tensor) else out[0]
        nxt = logits[:, -1].argmax(-1)
        past = out[1:]
        ids, positions = nxt.reshape(batch, 1).astype(np.int64), seen + step
        mask_now = np.concatenate([mask_now, np.ones((batch, 1), np.int64)], axis=1)
    return record


def _host(v):
    return v.numpy() if isinstance(v, kdml.Tensor) else np.asarray(v)


def _check_against_cpu(model, record):
    sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    for feeds, out in record:
        ref = sess.run(None, {k: _host(v) for k, v in feeds.items()})
        for r, o in zip(ref, out):
            o = _host(o)
            assert o.shape == r.shape
            np.testing.assert_allclose(o, r, rtol=1e-4, atol=2e-6 * max(1.0, float(np.abs(r).max())))


@pytest.fixture(scope="module")
def device():
    return kdml.Device()


def test_a_growing_cache_replays_one_plan_per_bucket_as_onnxruntime_computes_it(device):
    model = decoder()
    rep = Backend.prepare(model, "CPU", kdml_device=device)
    prompt = np.array([[0, 0, 3, 4, 5, 6, 7], [1, 2, 3, 4, 5, 6, 7]], np.int64)
    pm = np.array([[0, 0, 1, 1, 1, 1, 1], [1] * 7])  # the first row left-padded
    steps = 70  # past rows 7 .. 75: two buckets (64, 128)
    record = _loop(rep.run, prompt, pm, steps)
    _check_against_cpu(model, record)
    cp = rep.state.cache_padding
    assert cp.verified and cp.presents == (1, 2) and cp.checks == 1
    # the prompt's past is empty, the first past's step is the check, a past of 64 rows fills its bucket
    # (fed as it is: the bucket's signature)
    assert cp.padded_runs == steps - 3
    # the prompt, the check's own, its padded, and the next bucket's: not a plan per step
    assert len(rep.state.plans) == 4
    assert all(out[1].flags.c_contiguous and out[1].shape[2] == feeds["attention_mask"].shape[1]
               for feeds, out in record)


def test_device_pasts_handed_back_are_widened_not_copied(device):
    model = decoder()
    rep = Backend.prepare(model, "CPU", kdml_device=device)
    prompt = RNG.integers(0, V, (1, 9))
    pm = np.ones_like(prompt)
    record = _loop(lambda f: rep.run(f, device_outputs=True), prompt, pm, 12)
    _check_against_cpu(model, record)
    cp = rep.state.cache_padding
    # copied: the check's padded pasts (the prompt's presents) and the next step's (the check's unpadded
    # results); every later step's pasts are the views a padded step handed out
    assert cp.padded_runs == 10 and cp.copied_pasts == 4 and cp.widened_pasts == 2 * 9
    host = _loop(rep.run, prompt, pm, 12)
    for (_, a), (_, b) in zip(record, host):
        for x, y in zip(a, b):
            np.testing.assert_array_equal(_host(x), y)


@pytest.mark.parametrize("kind", ["length", "add"])
def test_a_model_the_padding_would_change_is_not_padded(device, kind):
    """Positions from the past's length, or a float mask added to the scores (all zeros: every key
    kept, the padding's too): the check finds the padded step different and padding stops."""
    model = decoder(positions="input" if kind == "add" else "length", mask="add" if kind == "add" else "multiply")
    rep = Backend.prepare(model, "CPU", kdml_device=device)
    prompt = RNG.integers(0, V, (2, 6))
    record = _loop(rep.run, prompt, np.ones_like(prompt), 8, mask="add" if kind == "add" else "multiply")
    _check_against_cpu(model, record)
    cp = rep.state.cache_padding
    assert cp.checks == 1 and cp.padded_runs == 0 and "differs padded" in cp.refusal
    assert cp.prompt_runs == 0
    if kind == "length":  # the prompt's padding changes its positions too (an additive mask's prompt is not padded)
        assert "differs padded" in cp.prompt_refusal
    assert len(rep.state.plans) == 8 + 1 + (kind == "length")  # a plan per step, and the checks' padded ones


def test_positions_from_the_mask_without_position_ids_are_padded(device):
    """No position_ids input: the step's tokens counted by its ids; positions from the mask's running count
    stand where the padding puts zeros in front, so the check keeps padding (a plan per bucket)."""
    model = decoder(positions="mask")
    rep = Backend.prepare(model, "CPU", kdml_device=device)
    prompt = np.array([[0, 3, 4, 5, 6], [1, 2, 3, 4, 5]], np.int64)
    pm = np.array([[0, 1, 1, 1, 1], [1, 1, 1, 1, 1]], np.int64)
    record = _loop(rep.run, prompt, pm, 70, positions=False)
    _check_against_cpu(model, record)
    cp = rep.state.cache_padding
    # past rows 5 .. 73: the check's step, and the 64-row step (its bucket's signature as it is) unpadded
    assert cp.verified and cp.padded_runs == 70 - 3 and not cp.refusal
    assert len(rep.state.plans) == 4  # the prompt, the check's own, its padded, the next bucket's


def test_positions_from_the_length_without_position_ids_are_not_padded(device):
    model = decoder(positions="length", position_input=False)
    rep = Backend.prepare(model, "CPU", kdml_device=device)
    prompt = RNG.integers(0, V, (2, 6))
    record = _loop(rep.run, prompt, np.ones_like(prompt), 6, positions=False)
    _check_against_cpu(model, record)
    cp = rep.state.cache_padding
    assert cp.checks == 1 and cp.padded_runs == 0 and "differs padded" in cp.refusal


def test_padding_turned_off(device, monkeypatch):
    monkeypatch.setenv("KDML_CACHE_PADDING", "0")
    rep = Backend.prepare(decoder(), "CPU", kdml_device=device)
    prompt = RNG.integers(0, V, (1, 5))
    _loop(rep.run, prompt, np.ones_like(prompt), 4)
    assert not rep.state.cache_padding.enabled and rep.state.cache_padding.checks == 0
    assert len(rep.state.plans) == 4


@pytest.fixture(scope="module")
def kort():
    """kompute_dml.ort, where its plugin EP library was built (onnxruntime's headers at set-up)."""
    module = pytest.importorskip("kompute_dml.ort")
    try:
        module.get_library_path()
    except FileNotFoundError as e:
        pytest.skip(str(e))
    return module


def test_the_execution_provider_loop(device, kort):
    """An onnxruntime session with our execution provider (its outputs in onnxruntime's arrays)."""
    model = decoder()
    sess = ort.InferenceSession(model, sess_options=kort.session_options())
    assert sess.get_providers()[0] == kort.get_ep_name()
    prompt = RNG.integers(0, V, (2, 5))
    record = _loop(lambda f: sess.run(None, f), prompt, np.ones_like(prompt), 8)
    _check_against_cpu(model, record)


def test_the_bucket_rows():
    cp = cache_padding.CachePadding()
    feeds = {"attention_mask": np.ones((1, 70), np.int64), "position_ids": np.zeros((1, 1), np.int64),
             "past_key": np.zeros((1, H, 69, D), np.float32), "x": np.zeros((1, H, 68, D), np.float32)}
    assert cp.layout(feeds)[2:] == (69, ["past_key"])
    feeds["past_key"] = np.zeros((1, H, 64, D), np.float32)  # a whole bucket: nothing to pad
    feeds["attention_mask"] = np.ones((1, 65), np.int64)
    assert cp.layout(feeds) is None


def test_after_the_check_only_its_pasts_are_padded():
    """An input of the pasts' rank and rows by chance (a fixed cross-attention cache of L rows) is
    not padded once the check has named the pasts; a step without them all is not padded."""
    cp = cache_padding.CachePadding(verified=True, pasts=("past_key",))
    feeds = {"attention_mask": np.ones((1, 70), np.int64), "position_ids": np.zeros((1, 1), np.int64),
             "past_key": np.zeros((1, H, 69, D), np.float32), "cross": np.zeros((1, H, 69, D), np.float32)}
    assert cp.layout(feeds)[2:] == (69, ["past_key"])
    feeds["past_key"] = np.zeros((1, H, 68, D), np.float32)
    assert cp.layout(feeds) is None


def test_a_padded_step_that_fails_turns_padding_off(device, monkeypatch):
    """The check's padded run raising (a model that cannot take the padded shapes): the step's
    results are the unpadded run's and the model is not padded again, the reason kept."""
    model = decoder()
    rep = Backend.prepare(model, "CPU", kdml_device=device)
    real = type(rep)._run

    def refuse_padded(self, feeds, *a, **kw):
        if feeds["attention_mask"].shape[1] % cache_padding.ROWS == 1:  # a padded step's mask
            raise kdml.UnsupportedError("no padded shapes here")
        return real(self, feeds, *a, **kw)

    monkeypatch.setattr(type(rep), "_run", refuse_padded)
    prompt = RNG.integers(0, V, (1, 5))
    record = _loop(rep.run, prompt, np.ones_like(prompt), 4)
    _check_against_cpu(model, record)
    cp = rep.state.cache_padding
    assert cp.padded_runs == 0 and "UnsupportedError: no padded shapes here" in cp.refusal


def test_the_execution_provider_loop_on_the_device(device, kort):
    """The device-memory provider with IO binding: each step's presents (views past their padding)
    copied into onnxruntime's device buffers and bound as the next step's pasts."""
    model = decoder()
    sess = ort.InferenceSession(model, sess_options=kort.session_options(device_memory=True))
    cpu = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    prompt = RNG.integers(0, V, (2, 5))
    ids, mask = prompt, np.ones_like(prompt)
    positions = np.broadcast_to(np.arange(5), (2, 5)).astype(np.int64)
    past = [ort.OrtValue.ortvalue_from_numpy(np.zeros((2, H, 0, D), np.float32))] * 2
    host_past = [np.zeros((2, H, 0, D), np.float32)] * 2
    pool = _kdml_device("VULKAN:0").engine.pool
    for step in range(12):
        if step == 8:
            pooled = len(pool)
        io = sess.io_binding()
        for name, v in (("input_ids", ids), ("attention_mask", mask), ("position_ids", positions)):
            io.bind_cpu_input(name, v)
        io.bind_ortvalue_input("past_key", past[0])
        io.bind_ortvalue_input("past_value", past[1])
        for name in ("logits", "present_key", "present_value"):
            io.bind_output(name, "gpu", 0)
        sess.run_with_iobinding(io)
        outs = io.get_outputs()
        got = io.copy_outputs_to_cpu()
        want = cpu.run(None, {"input_ids": ids, "attention_mask": mask, "position_ids": positions,
                              "past_key": host_past[0], "past_value": host_past[1]})
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=2e-6 * max(1.0, float(np.abs(w).max())), err_msg=f"step {step}")
        past, host_past = outs[1:], want[1:]
        nxt = want[0][:, -1].argmax(-1)
        ids, positions = nxt.reshape(2, 1).astype(np.int64), np.full((2, 1), 5 + step, np.int64)
        mask = np.ones((2, mask.shape[1] + 1), np.int64)
    # the buffers onnxruntime freed are the pool's again, the outputs they stood for with them: over steps 8-11
    # (pasts of 12-15 rows, one size class) the pool does not grow (a cache holding the Tensors once made every
    # step allocate its presents anew: 4 more buffers a step)
    assert len(pool) == pooled, (pooled, len(pool))


def _io_loop(sess, prompt, steps):
    """A greedy loop through IO binding: the presents bound on the device as the next pasts; each step's logits."""
    batch, n = prompt.shape
    ids, mask = prompt, np.ones_like(prompt)
    positions = np.broadcast_to(np.arange(n), (batch, n)).astype(np.int64)
    past = [ort.OrtValue.ortvalue_from_numpy(np.zeros((batch, H, 0, D), np.float32))] * 2
    logits = []
    for step in range(steps):
        io = sess.io_binding()
        for name, v in (("input_ids", ids), ("attention_mask", mask), ("position_ids", positions)):
            io.bind_cpu_input(name, np.ascontiguousarray(v))
        io.bind_ortvalue_input("past_key", past[0])
        io.bind_ortvalue_input("past_value", past[1])
        io.bind_output("logits", "cpu")
        for name in ("present_key", "present_value"):
            io.bind_output(name, "gpu", 0)
        sess.run_with_iobinding(io)
        outs = io.get_outputs()
        logits.append(outs[0].numpy())
        past = outs[1:]
        ids = logits[-1][:, -1].argmax(-1).reshape(batch, 1).astype(np.int64)
        positions = np.full((batch, 1), n + step, np.int64)
        mask = np.ones((batch, mask.shape[1] + 1), np.int64)
    return logits


def test_execution_provider_loops_from_several_threads(kort):
    """Three sessions of the device-memory provider, each a loop of its own in a thread of its own (the outputs
    kept by reference, the small host writes kept: deferred.py's table shared): each as it runs alone."""
    import threading

    model = decoder()
    prompts = [RNG.integers(0, V, (2, 4 + 3 * i)) for i in range(3)]
    sessions = [ort.InferenceSession(model, sess_options=kort.session_options(device_memory=True)) for _ in prompts]
    for s, p in zip(sessions, prompts):  # (each session's first loop makes the padding's checks: other sums)
        _io_loop(s, p, 10)
    alone = [_io_loop(s, p, 10) for s, p in zip(sessions, prompts)]
    together: list = [None] * 3

    def work(i):
        together[i] = _io_loop(sessions[i], prompts[i], 10)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for a, b in zip(alone, together):
        assert b is not None and len(a) == len(b)
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)


def test_a_tensor_is_not_kept_by_the_block_rule(device):
    t = device.tensor(np.zeros((2, 3, 4), np.float32))
    assert recording.contiguous_blocks(t) and not recording.contiguous_blocks(t[:, :, :2])
    gone = weakref.ref(t)
    del t
    gc.collect()
    assert gone() is None


def test_rows_off_the_16_byte_grid_are_not_padded():
    """A head of 2 float32 (8 bytes a row): a view past the padding could not start a binding."""
    cp = cache_padding.CachePadding()
    feeds = {"attention_mask": np.ones((1, 70), np.int64), "position_ids": np.zeros((1, 1), np.int64),
             "past_key": np.zeros((1, H, 69, 2), np.float32)}
    assert cp.layout(feeds) is None
    feeds["past_key"] = np.zeros((1, H, 69, 4), np.float32)
    assert cp.layout(feeds) is not None


def test_prompts_of_one_bucket_share_a_plan(device):
    """Prompts (no past rows, the mask all ones) of 5, 9 and 30 tokens run as 64: the first also runs
    as given (the check), the others replay its plan; each step as onnxruntime computes it, and the
    presents' views over the padding tokens' rows are widened by the next step, not copied."""
    model = decoder()
    rep = Backend.prepare(model, "CPU", kdml_device=device)
    cp = rep.state.cache_padding
    plans = []
    for n in (5, 9, 30):
        prompt = RNG.integers(0, V, (2, n))
        record = _loop(lambda f: rep.run(f, device_outputs=True), prompt, np.ones_like(prompt), 4)
        _check_against_cpu(model, record)
        plans.append(len(rep.state.plans))
    assert cp.prompt_verified and cp.prompt_cuts == {0: 1, 1: 2, 2: 2} and cp.prompt_runs == 2
    # the first prompt: its check's two plans, the decode check's unpadded one and the bucket's; later none
    assert plans == [4, 4, 4]
    # pasts copied only after the checks (their results are not views); every later past widened
    assert cp.copied_pasts == 4 and cp.widened_pasts == 2 * (3 * 3 - 2)


def test_a_prompt_padded_by_its_caller_is_not_padded(device):
    rep = Backend.prepare(decoder(), "CPU", kdml_device=device)
    prompt = RNG.integers(0, V, (2, 6))
    mask = np.ones_like(prompt)
    mask[0, :2] = 0
    _check_against_cpu(decoder(), _loop(rep.run, prompt, mask, 2))
    assert rep.state.cache_padding.prompt_runs == 0 and not rep.state.cache_padding.prompt_verified


def test_device_pasts_not_handed_out_are_copied_after_zeros(device):
    """Pasts on the device that no padded step handed out (an execution provider's buffers, the caller's
    own tensors): copied by transfers into a padded tensor kept per input, whose rows before the past are
    zeros, also where an earlier, longer past wrote them; each step as onnxruntime computes it."""
    model = decoder()
    rep = Backend.prepare(model, "CPU", kdml_device=device)
    sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    cp = rep.state.cache_padding
    for rows in (10, 12, 8):  # one bucket; the third's padding covers rows the second wrote
        feeds = {"input_ids": RNG.integers(0, V, (2, 1)), "attention_mask": np.ones((2, rows + 1), np.int64),
                 "position_ids": np.full((2, 1), rows, np.int64),
                 "past_key": RNG.standard_normal((2, H, rows, D)).astype(np.float32),
                 "past_value": RNG.standard_normal((2, H, rows, D)).astype(np.float32)}
        got = rep.run({k: device.tensor(v) if k.startswith("past") else v for k, v in feeds.items()})
        for g, w in zip(got, sess.run(None, feeds)):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=2e-6 * max(1.0, float(np.abs(w).max())))
        z, zeros = cp._padded["past_key"]
        held = z.numpy()
        assert zeros == 64 - rows and not held[:, :, :zeros].any()
        np.testing.assert_array_equal(held[:, :, zeros:], feeds["past_key"])
    assert cp.copied_pasts == 2 * 3
    rep.release()  # the padded tensors kept per input go with the plans
    assert not cp._padded
