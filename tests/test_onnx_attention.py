"""onnxruntime's transformer contrib nodes on the device (onnx_backend/handlers_attention.py,
handlers_transformer.py, rotary.py) against onnxruntime's CPU provider: com.microsoft Attention
(every mask_index form, past / present, unidirectional, attention_bias, qkv_hidden_sizes, float16),
MultiHeadAttention (separate, packed QKV / KV, a projected 4-D cache, past / present, masks),
GroupQueryAttention (first prompt, ragged decode over a past, packed QKV, rotary), RotaryEmbedding,
SimplifiedLayerNormalization / RMSNormalization / SkipSimplifiedLayerNormalization, FastGelu,
BiasAdd, EmbedLayerNormalization (mask index, segments, sum output). Each node must run on the
device (placement and the run's events), both node by node and as a whole-graph plan."""

from __future__ import annotations

import re

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import helper, numpy_helper  # noqa: E402

from kompute_dml.onnx_backend import VULKAN, Backend  # noqa: E402

MS = "com.microsoft"
F32, F16, I32, I64 = np.float32, np.float16, np.int32, np.int64


def _model(op, inputs, outputs, attrs=None, consts=None, opset=17):
    """One node: `inputs` name -> array (feeds) or None (absent), `consts` name -> array
    (initializers), `outputs` names ('' for absent)."""
    consts = consts or {}
    names = list(inputs)
    feeds = {n: v for n, v in inputs.items() if v is not None and n not in consts}
    node = helper.make_node(op, [n if (inputs[n] is not None or n in consts) else "" for n in names], outputs,
                            domain="" if op in ("SimplifiedLayerNormalization", "RMSNormalization") else MS,
                            **(attrs or {}))
    vi = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape))
          for n, v in feeds.items()]
    ft = next(helper.np_dtype_to_tensor_dtype(v.dtype) for v in (*inputs.values(), *consts.values())
              if v is not None and v.dtype.kind == "f")
    outs = [helper.make_tensor_value_info(o, onnx.TensorProto.INT32 if o == "mask_index" else ft, None)
            for o in outputs if o]
    g = helper.make_graph([node], "g", vi, outs, initializer=[numpy_helper.from_array(v, n) for n, v in consts.items()])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(MS, 1)], ir_version=10)
    return model, feeds


def ort_run(model, feeds):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def check(model, feeds, rtol=1e-4, atol=1e-5, operator=None, want=None):
    """The node on the device, its outputs as onnxruntime's CPU provider gives them (`want`: its
    outputs of an equivalent model, where its CPU kernel lacks the form), node by node and through
    the whole-graph plan (the second run)."""
    want = ort_run(model, feeds) if want is None else want
    rep = Backend.prepare(model, "CPU")
    assert [p.target for p in rep.placement] == [VULKAN], rep.summary()
    if operator:
        assert rep.placement[0].operator == operator
    for _ in range(2):
        got = rep.run(feeds)
        late = [e for e in rep.last_run.events if re.match(r"node \d+ \(", e) and "CPU" in e]
        assert not late, late
        for g, w in zip(got, want):
            assert g.shape == w.shape and g.dtype == w.dtype
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol, atol=atol)
    return got


def _r(rng, *shape, dt=F32, s=1.0):
    return (rng.standard_normal(shape) * s).astype(dt)


ATTENTION = {  # name: (batch, seq, past, heads, head, mask form, unidirectional, attention_bias, v hidden)
    "lengths": (2, 5, 0, 2, 8, "lengths", 0, False, None),
    "raw-2d": (3, 6, 0, 2, 4, "2d", 0, False, None),
    "end-start": (2, 7, 0, 4, 4, "end-start", 0, True, None),
    "raw-3d": (2, 5, 0, 2, 8, "3d", 0, False, None),
    "causal-past": (2, 3, 4, 2, 8, "2d", 1, False, None),
    "megatron-4d": (2, 4, 0, 2, 8, "4d", 0, False, None),
    "v-hidden": (2, 5, 0, 2, 8, None, 0, False, 24),
}


@pytest.mark.parametrize("name", ATTENTION)
def test_attention(rng, name):
    b, s, p, h, d, mform, uni, ab, vh = ATTENTION[name]
    hid = h * d
    vh = vh or hid
    total = p + s
    ins = {"input": _r(rng, b, s, 16), "weights": _r(rng, 16, 2 * hid + vh, s=0.3), "bias": _r(rng, 2 * hid + vh, s=0.1)}
    lens = rng.integers(1, total + 1, b).astype(I32)
    lens[0] = total
    mask = {"lengths": lens, "2d": (np.arange(total)[None] < lens[:, None]).astype(I32),
            # (a start below each end: a row with no key adds the finite filter value to every score, whose
            # float32 sum keeps about 1e-3 of a score's bits, so both sides' weights are their rounding's)
            "end-start": np.concatenate([lens, np.minimum(rng.integers(0, 2, b), lens - 1)]).astype(I32),
            "3d": (rng.random((b, s, total)) < 0.8).astype(I32), None: None,
            "4d": np.tril(np.ones((8, 8), I32))[None, None].repeat(b, 0)}[mform]
    if mform == "3d":
        mask[:, :, 0] = 1
    ins["mask_index"] = mask
    ins["past"] = _r(rng, 2, b, h, p, d) if p else None
    ins["attention_bias"] = _r(rng, 1, h, s, total) if ab else None
    attrs = {"num_heads": h, "unidirectional": uni}
    if vh != hid:
        attrs["qkv_hidden_sizes"] = [hid, hid, vh]
    outs = ["y", "present"] if p else ["y"]
    model, feeds = _model("Attention", ins, outs, attrs, consts={"weights": ins["weights"], "bias": ins["bias"]})
    want = None
    if mform == "4d":  # onnxruntime's CPU kernel has no 4-D mask: its rows as a 3-D one
        m3, f3 = _model("Attention", {**ins, "mask_index": np.ascontiguousarray(mask[:, 0, p:p + s, :total])}, outs,
                        attrs, consts={"weights": ins["weights"], "bias": ins["bias"]})
        want = ort_run(m3, f3)
    check(model, feeds, operator="MULTIHEAD_ATTENTION", want=want)


def test_attention_float16(rng):
    b, s, h, d = 2, 6, 2, 8
    ins = {"input": _r(rng, b, s, 16, dt=F16), "weights": _r(rng, 16, 3 * h * d, dt=F16, s=0.3),
           "bias": _r(rng, 3 * h * d, dt=F16, s=0.1), "mask_index": np.array([s, 3], I32)}
    model, feeds = _model("Attention", ins, ["y"], {"num_heads": h, "scale": 0.3, "mask_filter_value": -500.0},
                          consts={"weights": ins["weights"], "bias": ins["bias"]})
    check(model, feeds, rtol=1e-2, atol=1e-2)


MHA = {  # name: (batch, seq, keys, past, heads, head, form, mask, unidirectional, attention_bias)
    "separate": (2, 4, 6, 0, 2, 8, "sep", "lengths", 0, False),
    "packed-qkv": (2, 5, 5, 0, 2, 4, "qkv", None, 0, True),
    "packed-kv": (2, 3, 7, 0, 4, 4, "kv", "2d", 0, False),
    "past-present": (2, 3, 3, 4, 2, 8, "sep", None, 1, False),
    "projected-cache": (2, 3, 5, 0, 2, 8, "bnsh", "lengths", 0, True),
    "empty-past": (2, 3, 3, 0, 2, 8, "sep", None, 1, False),
}


@pytest.mark.parametrize("name", MHA)
def test_multihead_attention(rng, name):
    b, s, t, p, h, d, form, mform, uni, ab = MHA[name]
    total = p + t
    ins: dict = {"query": _r(rng, b, s, h * d), "key": _r(rng, b, t, h * d), "value": _r(rng, b, t, h * d),
                 "bias": _r(rng, 3 * h * d, s=0.1), "key_padding_mask": None, "attention_bias": None,
                 "past_key": None, "past_value": None}
    plain = dict(ins)  # onnxruntime's CPU kernel has no packed forms: theirs from the separate tensors
    bshd = lambda x: x.reshape(b, -1, h, d)  # noqa: E731
    if form == "qkv":
        ins.update(query=np.stack([bshd(ins[n]) for n in ("query", "key", "value")], 3), key=None, value=None, bias=None)
        plain.update(bias=None)
    elif form == "kv":
        ins.update(key=np.stack([bshd(ins[n]) for n in ("key", "value")], 3), value=None, bias=None)
        plain.update(bias=None)
    elif form == "bnsh":
        ins.update(key=_r(rng, b, h, t, d), value=_r(rng, b, h, t, d), bias=None)
    if p or name == "empty-past":  # (a decoder's first step: a past of no rows)
        ins.update(past_key=_r(rng, b, h, p, d), past_value=_r(rng, b, h, p, d))
    lens = rng.integers(1, total + 1, b).astype(I32)
    ins["key_padding_mask"] = {"lengths": lens, "2d": (np.arange(total)[None] < lens[:, None]).astype(I32), None: None}[mform]
    if ab:
        ins["attention_bias"] = _r(rng, b, 1, s, total)
    outs = ["y", "present_key", "present_value"] if p or name == "empty-past" else ["y"]
    model, feeds = _model("MultiHeadAttention", ins, outs, {"num_heads": h, "unidirectional": uni})
    want = None
    if form in ("qkv", "kv"):
        plain.update({k: ins[k] for k in ("key_padding_mask", "attention_bias", "past_key", "past_value")})
        want = ort_run(*_model("MultiHeadAttention", plain, outs, {"num_heads": h, "unidirectional": uni}))
    check(model, feeds, want=want)


def _caches(rng, positions, half):
    ang = np.arange(positions)[:, None] * (10000.0 ** (-np.arange(half) / half))[None]
    return np.cos(ang).astype(F32), np.sin(ang).astype(F32)


@pytest.mark.parametrize("case", ["prompt", "prompt-empty-past", "decode", "packed", "rotary-prompt", "rotary-decode",
                                  "interleaved"])
def test_group_query_attention(rng, case):
    b, h, kvh = 2, 4, 2
    d = 16 if "rotary" in case or case == "interleaved" else 8  # onnxruntime's rotary: head size a multiple of 16
    decode = "decode" in case
    s = 1 if decode else 5
    past = 6 if decode else 0
    seqlens = np.array([past, past - 2], I32) if decode else np.full(b, s - 1, I32)
    total = past + s
    ins: dict = {"query": _r(rng, b, s, h * d), "key": _r(rng, b, s, kvh * d), "value": _r(rng, b, s, kvh * d),
                 "past_key": _r(rng, b, kvh, past, d) if decode or "empty" in case else None,
                 "past_value": _r(rng, b, kvh, past, d) if decode or "empty" in case else None,
                 "seqlens_k": seqlens, "total_sequence_length": np.array(total, I32), "cos_cache": None,
                 "sin_cache": None}
    if case == "packed":
        ins.update(query=_r(rng, b, s, (h + 2 * kvh) * d), key=None, value=None)
    attrs = {"num_heads": h, "kv_num_heads": kvh}
    consts = {}
    if "rotary" in case or case == "interleaved":
        cos, sin = _caches(rng, 32, d // 2)
        ins.update(cos_cache=cos, sin_cache=sin)
        consts = {"cos_cache": cos, "sin_cache": sin}
        attrs.update(do_rotary=1, rotary_interleaved=int(case == "interleaved"))
    model, feeds = _model("GroupQueryAttention", ins, ["y", "present_key", "present_value"], attrs, consts=consts)
    check(model, feeds, operator="MULTIHEAD_ATTENTION1")


@pytest.mark.parametrize("case", ["3d", "3d-interleaved", "4d-start"])
def test_rotary_embedding(rng, case):
    b, s, h, d = 2, 5, 2, 8
    cos, sin = _caches(rng, 16, d // 2)
    if case == "4d-start":
        x, pos = _r(rng, b, h, s, d), np.array([3], I64)
    else:
        x, pos = _r(rng, b, s, h * d), rng.integers(0, 16, (b, s)).astype(I64)
    ins = {"input": x, "position_ids": pos, "cos_cache": cos, "sin_cache": sin}
    attrs = {"interleaved": int("interleaved" in case)}
    if case != "4d-start":
        attrs["num_heads"] = h
    model, feeds = _model("RotaryEmbedding", ins, ["y"], attrs, consts={"cos_cache": cos, "sin_cache": sin,
                                                                         **({"position_ids": pos} if case == "4d-start" else {})})
    check(model, feeds)


@pytest.mark.parametrize("op", ["SimplifiedLayerNormalization", "RMSNormalization"])
def test_rms_norm(rng, op):
    x, g = _r(rng, 2, 5, 24, s=3.0), _r(rng, 24)
    model, feeds = _model(op, {"x": x, "scale": g}, ["y"], {"epsilon": 1e-5, "axis": -1}, consts={"scale": g},
                          opset=23 if op == "RMSNormalization" else 17)
    check(model, feeds, operator="MEAN_VARIANCE_NORMALIZATION1")


@pytest.mark.parametrize("bias", [False, True])
def test_skip_simplified_layer_norm(rng, bias):
    x, skip, g = _r(rng, 2, 5, 32), _r(rng, 2, 5, 32), _r(rng, 32)
    ins = {"input": x, "skip": skip, "gamma": g, "bias": _r(rng, 32) if bias else None}
    outs = ["y", "", "", "sum"] if bias else ["y"]
    model, feeds = _model("SkipSimplifiedLayerNormalization", ins, outs, {"epsilon": 1e-6}, consts={"gamma": g})
    check(model, feeds)


@pytest.mark.parametrize("bias", [False, True])
def test_fast_gelu(rng, bias):
    x = _r(rng, 3, 7, 16, s=3.0)
    ins = {"X": x, "bias": _r(rng, 16) if bias else None}
    model, feeds = _model("FastGelu", ins, ["Y"], consts={"bias": ins["bias"]} if bias else {})
    check(model, feeds, rtol=1e-4, atol=1e-5, operator="ACTIVATION_GELU")


def test_bias_add(rng):
    """onnxruntime has BiasAdd on CUDA only: X + bias + skip in float32, in that order."""
    ins = {"X": _r(rng, 2, 4, 8), "bias": _r(rng, 8), "skip": _r(rng, 2, 4, 8)}
    model, feeds = _model("BiasAdd", ins, ["Y"], consts={"bias": ins["bias"]})
    check(model, feeds, rtol=0, atol=0, want=[(ins["X"] + ins["bias"]) + ins["skip"]])


@pytest.mark.parametrize("case", ["segments-mask", "no-segments", "positions-sum"])
def test_embed_layer_norm(rng, case):
    b, s, hid = 3, 6, 16
    ids = rng.integers(0, 50, (b, s)).astype(I32)
    mask = np.ones((b, s), I32)
    mask[1, 4:] = 0
    mask[2, 2:] = 0
    consts = {"word": _r(rng, 50, hid), "pos": _r(rng, 32, hid), "gamma": _r(rng, hid), "beta": _r(rng, hid)}
    ins = {"input_ids": ids, "segment_ids": rng.integers(0, 2, (b, s)).astype(I32), "word": consts["word"],
           "pos": consts["pos"], "seg": _r(rng, 2, hid), "gamma": consts["gamma"], "beta": consts["beta"],
           "mask": mask, "position_ids": None}
    if case == "no-segments":
        ins.update(segment_ids=None, seg=None)
    else:
        consts["seg"] = ins["seg"]
    outs = ["y", "mask_index"]
    if case == "positions-sum":
        ins["position_ids"] = np.tile(np.arange(s)[::-1], (b, 1)).astype(I32)
        outs.append("sum")
    model, feeds = _model("EmbedLayerNormalization", ins, outs, {"epsilon": 1e-12}, consts=consts)
    check(model, feeds)


def test_onnx_rms_normalization_node_cases():
    """onnx's own RMSNormalization node cases pass, the node on the device."""
    from onnx_node_cases import node_cases, run_case

    case, names = node_cases(r"test_rms_normalization_.*_cpu$", __name__, skip=("expanded_cpu",))
    assert names
    for name in names:
        targets = {p.target for rep in run_case(case, name) for p in rep.placement}
        assert targets == {VULKAN}, (name, targets)
