"""ONNX's own Attention (opset 23, 24) and RotaryEmbedding (opset 23) on the device
(onnx_backend/handlers_onnx_attention.py, ops/attention_rules.py): each form against onnxruntime's
CPU provider (where its kernel takes the form) and an independent float64 numpy reference written
here: 3-D and 4-D inputs, GQA / MQA, value head sizes, scale, causal (offset by the past: query i
attends key j <= past + i), bool and float masks in every broadcast rank, masks shorter than the
keys, fully masked rows (zeros), past / present, opset 25's sliding windows, float32 and float16, odd
lengths; node by node and as a whole-graph plan. The forms the rule refuses stay on the CPU with its reason. onnx's own node
cases: the set that runs wholly on the device."""

from __future__ import annotations

import re

import numpy as np
import pytest
from helpers import compiled_variants

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402

from kompute_dml.onnx_backend import CPU, VULKAN, Backend  # noqa: E402

F32, F16 = np.float32, np.float16
TOL = {F32: dict(rtol=2e-5, atol=2e-6), F16: dict(rtol=4e-3, atol=2e-3)}
# against peers that compute float16 in float16 (onnxruntime's CPU kernel, onnx's reference evaluator):
# their own error (the evaluator 2.4e-3 from the float64 reference at 2 of 300 seeds of the sliding-window
# case with a float mask) comes on top of ours
PEER_TOL = {F32: TOL[F32], F16: dict(rtol=1e-2, atol=5e-3)}


def _model(op, ins, outs, attrs, opset=23, inits=()):
    node = helper.make_node(op, [n if v is not None else "" for n, v in ins.items()], outs, **attrs)
    vi = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
          for n, v in ins.items() if v is not None and n not in inits]
    ft = helper.np_dtype_to_tensor_dtype(next(iter(ins.values())).dtype)
    g = helper.make_graph([node], "g", vi, [helper.make_tensor_value_info(o, ft, None) for o in outs if o],
                          initializer=[onnx.numpy_helper.from_array(ins[n], n) for n in inits])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)
    return model, {n: v for n, v in ins.items() if v is not None and n not in inits}


def _device(model, feeds, refs, dt, runs=2, peers=()):
    """The node on the device (placement and the run's events), its outputs against each of refs
    (float64 references: TOL) and peers (PEER_TOL), node by node and through the whole-graph plan
    (the second run)."""
    rep = Backend.prepare(model, "CPU")
    assert [p.target for p in rep.placement] == [VULKAN], rep.summary()
    for _ in range(runs):
        got = rep.run(feeds)
        late = [e for e in rep.last_run.events if re.match(r"node \d+ \(", e) and "CPU" in e]
        assert not late and rep.last_run.runtime_fallbacks == 0, late
        for want, tol in [(r, TOL[dt]) for r in refs] + [(r, PEER_TOL[dt]) for r in peers]:
            assert len(got) == len(want)
            for g, w in zip(got, want):
                assert g.shape == w.shape and g.dtype == dt
                np.testing.assert_allclose(g.astype(np.float64), np.asarray(w, np.float64), **tol)
    return got


def _ort(model, feeds):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


# ---- the independent reference (float64) -------------------------------------------------------
def attention_ref(q, k, v, mask=None, past_k=None, past_v=None, *, scale=None, causal=False, heads=None,
                  kv_heads=None, window=(-1, -1)):
    """ONNX Attention in float64: (Y, present_key, present_value); `window`: opset 25's (left, right)
    bounds around the query's position past + i (-1: none)."""
    three = q.ndim == 3
    if three:  # [b, s, h x d] -> [b, h, s, d]
        split = lambda x, h: x.reshape(x.shape[0], x.shape[1], h, -1).transpose(0, 2, 1, 3)  # noqa: E731
        q, k, v = split(q, heads), split(k, kv_heads), split(v, kv_heads)
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    if past_k is not None:
        k, v = np.concatenate([past_k, k], 2), np.concatenate([past_v, v], 2)
    past = 0 if past_k is None else past_k.shape[2]
    b, h, s, d = q.shape
    total, g = k.shape[2], h // k.shape[1]
    allowed = np.ones((b, h, s, total), bool)
    bias = np.zeros((b, h, s, total))
    if mask is not None:
        m = np.asarray(mask)
        pad = total - m.shape[-1]
        if m.dtype == bool:
            m = np.concatenate([m, np.zeros((*m.shape[:-1], pad), bool)], -1)
            allowed &= np.broadcast_to(m, allowed.shape)
        else:
            m = np.concatenate([m.astype(np.float64), np.full((*m.shape[:-1], pad), -np.inf)], -1)
            bias = bias + np.broadcast_to(m, bias.shape)
            allowed &= bias != -np.inf
    if causal:
        allowed &= np.arange(total)[None, :] <= past + np.arange(s)[:, None]
    pos_minus_key = past + np.arange(s)[:, None] - np.arange(total)[None, :]
    if window[0] >= 0:
        allowed &= pos_minus_key <= window[0]
    if window[1] >= 0:
        allowed &= -pos_minus_key <= window[1]
    sc = (1 / np.sqrt(d)) if scale is None else scale
    kk, vv = np.repeat(k, g, 1), np.repeat(v, g, 1)
    scores = np.einsum("bhsd,bhtd->bhst", q, kk) * sc + np.where(allowed, bias, 0)
    scores = np.where(allowed, scores, -np.inf)
    live = allowed.any(-1, keepdims=True)
    e = np.exp(scores - np.where(live, scores.max(-1, keepdims=True), 0))
    p = np.where(live, e / np.where(live, e.sum(-1, keepdims=True), 1), 0)
    y = np.einsum("bhst,bhtd->bhsd", p, vv)
    if three:
        y = y.transpose(0, 2, 1, 3).reshape(b, s, -1)
    return y, k, v


def rotary_ref(x, cos, sin, pos=None, *, interleaved=False, rot=0, heads=None):
    """ONNX RotaryEmbedding in float64."""
    shape = x.shape
    x = x.astype(np.float64)
    x = x.transpose(0, 2, 1, 3) if x.ndim == 4 else x.reshape(shape[0], shape[1], heads, -1)
    d = x.shape[-1]
    rot = rot or d
    c, s_ = (np.asarray(t, np.float64) for t in ((cos, sin) if pos is None else (cos[pos], sin[pos])))
    c, s_ = c[:, :, None, :], s_[:, :, None, :]
    r = x[..., :rot]
    x1, x2 = (r[..., 0::2], r[..., 1::2]) if interleaved else (r[..., :rot // 2], r[..., rot // 2:])
    real, imag = c * x1 - s_ * x2, s_ * x1 + c * x2
    out = x.copy()
    if interleaved:
        out[..., 0:rot:2], out[..., 1:rot:2] = real, imag
    else:
        out[..., :rot // 2], out[..., rot // 2:rot] = real, imag
    return out.transpose(0, 2, 1, 3) if len(shape) == 4 else out.reshape(shape)


# ---- Attention ----------------------------------------------------------------------------------
# name: (rank, batch, q heads, kv heads, seq, keys, past, head, v head, causal, mask, mask shape, scale)
# mask shape: b(atch), h(eads), s(equence), t(otal keys) or 1
CASES = {
    "4d": (4, 2, 2, 2, 3, 5, 0, 8, 8, False, None, None, None),
    "3d": (3, 2, 3, 3, 4, 4, 0, 8, 8, False, None, None, None),
    "3d-odd-v-head": (3, 1, 2, 2, 7, 5, 0, 6, 10, False, None, None, 0.3),
    "4d-gqa": (4, 2, 4, 2, 3, 6, 0, 8, 8, False, None, None, None),
    "3d-mqa": (3, 2, 4, 1, 5, 5, 0, 4, 4, False, None, None, None),
    "causal-square": (4, 2, 2, 2, 5, 5, 0, 8, 8, True, None, None, None),
    "causal-more-keys": (4, 1, 2, 2, 3, 7, 0, 8, 8, True, None, None, None),
    "causal-fewer-keys": (3, 2, 2, 2, 5, 2, 0, 8, 8, True, None, None, None),
    "past-present": (4, 2, 2, 2, 3, 3, 4, 8, 8, False, None, None, None),
    "past-causal-decode": (3, 2, 4, 2, 1, 1, 6, 8, 8, True, None, None, None),
    "past-causal-chunk": (4, 1, 2, 1, 3, 2, 5, 8, 6, True, None, None, None),
    "bool-2d": (4, 2, 2, 2, 3, 5, 0, 8, 8, False, "bool", "st", None),
    "bool-4d": (4, 2, 2, 2, 3, 5, 0, 8, 8, False, "bool", "bhst", None),
    "float-3d": (4, 2, 2, 2, 3, 5, 0, 8, 8, False, "float", "hst", None),
    "float-4d-b1": (3, 2, 2, 2, 4, 4, 0, 8, 8, False, "float", "b1st", 0.2),
    "float-key-padding": (4, 2, 2, 2, 3, 5, 0, 8, 8, False, "float", "b11t", None),
    "bool-causal-past": (4, 2, 2, 2, 3, 3, 2, 8, 8, True, "bool", "b1st", None),
    "float-causal-gqa": (3, 2, 4, 2, 5, 5, 0, 8, 8, True, "float", "1st", None),
}


def _inputs(rng, dt, case):
    rank, b, h, kvh, s, t, past, d, dv, causal, mkind, mshape, scale = case
    r = lambda *shape: rng.standard_normal(shape).astype(dt)  # noqa: E731
    if rank == 4:
        q, k, v = r(b, h, s, d), r(b, kvh, t, d), r(b, kvh, t, dv)
    else:
        q, k, v = r(b, s, h * d), r(b, t, kvh * d), r(b, t, kvh * dv)
    mask = None
    if mkind:
        shape = tuple({"b": b, "h": h, "s": s, "t": past + t, "1": 1}[c] for c in mshape)
        mask = rng.random(shape) < 0.7 if mkind == "bool" else (rng.standard_normal(shape) * 2).astype(dt)
        if mkind == "float":
            mask[rng.random(shape) < 0.2] = -np.inf
    ins = {"Q": q, "K": k, "V": v, "attn_mask": mask,
           "past_key": r(b, kvh, past, d) if past else None, "past_value": r(b, kvh, past, dv) if past else None}
    attrs = {"is_causal": int(causal)}
    if rank == 3:
        attrs.update(q_num_heads=h, kv_num_heads=kvh)
    if scale is not None:
        attrs["scale"] = scale
    return ins, attrs, ["Y", "present_key", "present_value"] if past else ["Y"]


def _ref(ins, attrs):
    y, pk, pv = attention_ref(ins["Q"], ins["K"], ins["V"], ins["attn_mask"], ins["past_key"], ins["past_value"],
                              scale=attrs.get("scale"), causal=bool(attrs["is_causal"]),
                              heads=attrs.get("q_num_heads"), kv_heads=attrs.get("kv_num_heads"))
    return [y, pk, pv] if ins["past_key"] is not None else [y]


# onnxruntime's CPU kernel wants the mask's sequence dimension whole: the reference alone
NO_ORT = {"float-key-padding"}


@pytest.mark.parametrize("dt", [F32, F16], ids=["f32", "f16"])
@pytest.mark.parametrize("name", CASES)
def test_attention(rng, name, dt):
    ins, attrs, outs = _inputs(rng, dt, CASES[name])
    model, feeds = _model("Attention", ins, outs, attrs)
    _device(model, feeds, [_ref(ins, attrs)], dt, peers=[] if name in NO_ORT else [_ort(model, feeds)])


@pytest.mark.parametrize("kind", ["bool", "float"])
def test_mask_shorter_than_the_keys(rng, kind):
    """The mask's last dimension below the keys: padded with keys that take no part (onnxruntime's
    CPU kernel refuses the form: the reference alone)."""
    ins, attrs, outs = _inputs(rng, F32, (4, 2, 2, 2, 3, 6, 2, 8, 8, False, None, None, None))
    ins["attn_mask"] = rng.random((2, 1, 3, 5)) < 0.8 if kind == "bool" else rng.standard_normal((3, 5)).astype(F32)
    model, feeds = _model("Attention", ins, outs, attrs)
    _device(model, feeds, [_ref(ins, attrs)], F32)


@pytest.mark.parametrize("kind", ["bool", "float", "bool-causal"])
@pytest.mark.parametrize("rank", [3, 4])
def test_fully_masked_rows_are_zero(rng, kind, rank):
    """A query row that attends no key is 0 (ONNX's rule), not NaN nor the values' mean."""
    ins, attrs, outs = _inputs(rng, F32, (rank, 2, 2, 1, 4, 5, 0, 8, 8, kind == "bool-causal", None, None, None))
    if kind == "float":
        m = rng.standard_normal((2, 2, 4, 5)).astype(F32)
        m[0, 1, 2] = -np.inf
        m[1, :, 0] = -np.inf
    else:
        m = rng.random((2, 1, 4, 5)) < 0.8
        m[1, 0, 3] = False
        m[0, 0, 0, 0] = False  # causal: row 0 sees key 0 alone
    ins["attn_mask"] = m
    model, feeds = _model("Attention", ins, outs, attrs)
    (y,) = _device(model, feeds, [_ort(model, feeds), _ref(ins, attrs)], F32)
    y4 = y if rank == 4 else y.reshape(2, 4, 2, 8).transpose(0, 2, 1, 3)
    assert not np.isnan(y).any()
    zero = {"bool": (y4[1, :, 3],), "bool-causal": (y4[1, :, 3], y4[0, :, 0]), "float": (y4[0, 1, 2], y4[1, :, 0])}[kind]
    for z in zero:
        assert (z == 0).all()


def test_present_without_past(rng):
    """present_key / present_value of the new keys alone (the cache's first step)."""
    ins, attrs, _ = _inputs(rng, F32, (3, 2, 2, 2, 4, 4, 0, 8, 8, True, None, None, None))
    model, feeds = _model("Attention", ins, ["Y", "present_key", "present_value"], attrs)
    y, pk, pv = attention_ref(ins["Q"], ins["K"], ins["V"], causal=True, heads=2, kv_heads=2)
    _device(model, feeds, [_ort(model, feeds), [y, pk, pv]], F32)


def test_opset_24_without_nonpad(rng):
    ins, attrs, outs = _inputs(rng, F32, CASES["bool-causal-past"])
    model, feeds = _model("Attention", ins, outs, attrs, opset=24)
    _device(model, feeds, [_ort(model, feeds), _ref(ins, attrs)], F32)


NONPAD = {  # name: (rank, q heads, kv heads, seq, keys, causal, mask kind, nonpad_kv_seqlen per batch)
    "padding": (4, 2, 2, 3, 6, False, None, (6, 2)),
    "causal-prefill": (4, 2, 2, 4, 6, True, None, (4, 6)),
    "causal-decode-gqa": (3, 4, 2, 1, 7, True, None, (3, 7)),
    "causal-negative-offset": (4, 2, 1, 4, 5, True, None, (2, 5)),
    "empty-batch": (3, 2, 2, 3, 4, False, None, (0, 4)),
    "bool-mask": (4, 2, 2, 3, 6, True, "bool", (5, 6)),
    "float-mask": (3, 2, 2, 3, 6, False, "float", (3, 6)),
}


@pytest.mark.parametrize("dt", [F32, F16], ids=["f32", "f16"])
@pytest.mark.parametrize("name", NONPAD)
def test_nonpad_kv_seqlen(rng, name, dt):
    """opset 24's external cache: keys from nonpad_kv_seqlen[b] on take no part, and causal is offset
    by nonpad_kv_seqlen[b] - sequence per batch (rows before the cache's first key: zeros)."""
    rank, h, kvh, s, t, causal, mkind, lens = NONPAD[name]
    ins, attrs, _ = _inputs(rng, dt, (rank, 2, h, kvh, s, t, 0, 8, 8, causal, mkind, "b1st" if mkind else None, None))
    n = np.array(lens, np.int64)
    ins.update(nonpad_kv_seqlen=n)
    model, feeds = _model("Attention", ins, ["Y"], attrs, opset=24)
    q4 = ins["Q"] if rank == 4 else ins["Q"].reshape(2, s, h, 8).transpose(0, 2, 1, 3)
    k4 = ins["K"] if rank == 4 else ins["K"].reshape(2, t, kvh, 8).transpose(0, 2, 1, 3)
    v4 = ins["V"] if rank == 4 else ins["V"].reshape(2, t, kvh, 8).transpose(0, 2, 1, 3)
    want = []
    for b in range(2):  # batch b: its first n[b] keys, the causal frontier as over a past of n[b] - s
        m = None if ins["attn_mask"] is None else ins["attn_mask"][b:b + 1, ..., :lens[b]]
        past = max(lens[b] - s, 0)
        sl = slice(s - (lens[b] - past), s) if causal else slice(0, s)
        y = np.zeros((1, h, s, 8))
        if lens[b] and sl.stop > sl.start:
            kb, vb = k4[b:b + 1, :, :lens[b]], v4[b:b + 1, :, :lens[b]]
            yb = attention_ref(q4[b:b + 1, :, sl], kb[:, :, past:], vb[:, :, past:],
                               None if m is None else m[..., sl, :], kb[:, :, :past], vb[:, :, :past],
                               causal=causal)[0]
            y[:, :, sl] = yb
        want.append(y)
    y = np.concatenate(want)
    if rank == 3:
        y = y.transpose(0, 2, 1, 3).reshape(2, s, h * 8)
    _device(model, feeds, [[y]], dt, peers=[_ort(model, feeds)])


# opset 25's sliding windows: name: (CASES' form, left, right)
WINDOWS = {
    "causal-left": ("causal-more-keys", 2, -1),
    "both-sides": ("4d", 1, 2),
    "causal-left-past": ("past-causal-chunk", 3, -1),
    "right-only-gqa-3d": ("float-causal-gqa", -1, 1),
    "bool-mask-left": ("bool-2d", 1, 1),
    "float-mask-past": ("bool-causal-past", 2, 0),
    "rows-without-keys": ("causal-fewer-keys", 0, 0),  # queries past the keys attend none: zeros
}


@pytest.mark.parametrize("dt", [F32, F16], ids=["f32", "f16"])
@pytest.mark.parametrize("name", WINDOWS)
def test_sliding_windows(rng, name, dt):
    """left_window_size / right_window_size (opset 25) join the causal frontier's constant mask, with
    masks, a past, GQA and 3-D inputs: against the float64 reference and onnx's reference evaluator."""
    from onnx.reference import ReferenceEvaluator

    form, left, right = WINDOWS[name]
    ins, attrs, outs = _inputs(rng, dt, CASES[form])
    if name == "float-mask-past":
        ins["attn_mask"] = np.where(ins["attn_mask"], rng.standard_normal(ins["attn_mask"].shape), -np.inf).astype(dt)
    attrs = {**attrs, **({"left_window_size": left} if left >= 0 else {}), **({"right_window_size": right} if right >= 0 else {})}
    model, feeds = _model("Attention", ins, outs, attrs, opset=25)
    y, pk, pv = attention_ref(ins["Q"], ins["K"], ins["V"], ins["attn_mask"], ins["past_key"], ins["past_value"],
                              scale=attrs.get("scale"), causal=bool(attrs["is_causal"]), heads=attrs.get("q_num_heads"),
                              kv_heads=attrs.get("kv_num_heads"), window=(left, right))
    ours = [y, pk, pv] if ins["past_key"] is not None else [y]
    got = _device(model, feeds, [ours], dt, peers=[ReferenceEvaluator(model).run(None, feeds)])
    if name == "rows-without-keys":
        assert not np.any(got[0][:, 2:]) and np.all(np.isfinite(got[0]))  # rows 2.. (3-D: [b, s, h d])


@pytest.mark.parametrize("dt", [F32, F16], ids=["f32", "f16"])
@pytest.mark.parametrize(("name", "left", "right"), [("causal-prefill", 2, -1), ("bool-mask", 1, 1),
                                                     ("float-mask", 0, 2), ("causal-decode-gqa", 3, 0),
                                                     ("causal-negative-offset", 1, -1)])
def test_sliding_windows_with_nonpad_kv_seqlen(rng, name, left, right, dt):
    """A window around p = nonpad_kv_seqlen[b] - sequence + i (the external cache's per-batch offset):
    two more comparisons of constants with n on the device, against onnx's reference evaluator."""
    from onnx.reference import ReferenceEvaluator

    rank, h, kvh, s, t, causal, mkind, lens = NONPAD[name]
    ins, attrs, _ = _inputs(rng, dt, (rank, 2, h, kvh, s, t, 0, 8, 8, causal, mkind, "b1st" if mkind else None, None))
    ins.update(nonpad_kv_seqlen=np.array(lens, np.int64))
    attrs = {**attrs, **({"left_window_size": left} if left >= 0 else {}), **({"right_window_size": right} if right >= 0 else {})}
    model, feeds = _model("Attention", ins, ["Y"], attrs, opset=25)
    _device(model, feeds, [], dt, peers=[ReferenceEvaluator(model).run(None, feeds)])


# softcap and the qk_matmul_output output (the reference's chain of operators on the device):
# name: (CASES' form, softcap, qk_matmul_output_mode or None (no such output), left window)
CHAIN = {
    "softcap-4d": ("4d", 2.0, None, -1),
    "softcap-3d-mqa": ("3d-mqa", 3.0, None, -1),
    "softcap-gqa-causal-float-mask": ("float-causal-gqa", 2.5, None, -1),
    "softcap-past-bool-mask": ("bool-causal-past", 1.5, None, -1),
    "qk-mode0": ("4d-gqa", 0.0, 0, -1),
    "qk-mode1-softcap": ("bool-4d", 2.0, 1, -1),
    "qk-mode2-past": ("past-present", 0.0, 2, -1),
    "qk-mode3-causal-window": ("causal-more-keys", 0.0, 3, 1),
    "qk-mode3-softcap-fewer-keys": ("causal-fewer-keys", 4.0, 3, 0),  # rows without keys: zeros
}


@pytest.mark.parametrize("dt", [F32, F16], ids=["f32", "f16"])
@pytest.mark.parametrize("name", CHAIN)
def test_softcap_and_qk_matmul_output(rng, name, dt):
    """softcap (tanh between the scores and the mask) and the qk_matmul_output output in its four modes,
    with masks, a past and present, GQA / MQA, 3-D inputs, the causal frontier and a window: on the
    device against onnx's reference evaluator (the scores scaled once, not sqrt(scale) on each side:
    the float tolerances)."""
    from onnx.reference import ReferenceEvaluator

    form, cap, mode, left = CHAIN[name]
    ins, attrs, outs = _inputs(rng, dt, CASES[form])
    attrs = dict(attrs)
    if cap:
        attrs["softcap"] = cap
    if left >= 0:
        attrs["left_window_size"] = left
    if mode is not None:
        attrs["qk_matmul_output_mode"] = mode
        outs = ["Y", "present_key", "present_value", "qk"] if ins["past_key"] is not None else ["Y", "", "", "qk"]
    model, feeds = _model("Attention", ins, outs, attrs, opset=25)
    want = ReferenceEvaluator(model).run(None, feeds)
    got = _device(model, feeds, [], dt, peers=[want])
    if name.endswith("fewer-keys"):
        assert not np.any(got[0][:, 2:]) and not np.any(got[-1][:, :, 2:])


REFUSED = {  # name: (attrs, extra inputs / outputs, the rule's reason)
    "negative softcap": ({"softcap": -1.0}, {}, "softcap -1.0"),
    "bfloat16": ({}, {"dtype": TensorProto.BFLOAT16}, "bfloat16"),
    "softmax_precision double": ({"softmax_precision": TensorProto.DOUBLE}, {}, "softmax_precision"),
    "int mask": ({}, {"mask": np.ones((3, 5), np.int32)}, "attn_mask type int32"),
}


@pytest.mark.parametrize("name", REFUSED)
def test_refused_forms_stay_on_the_cpu(rng, name):
    attrs, extra, reason = REFUSED[name]
    ins, base, _ = _inputs(rng, F32, CASES["4d"])
    ins["attn_mask"] = extra.get("mask")
    model, feeds = _model("Attention", ins, extra.get("outputs", ["Y"]), {**base, **attrs})
    if "dtype" in extra:  # retyped in the declaration alone: prepare decides from the declared types
        for vi in model.graph.input[:3]:
            vi.type.tensor_type.elem_type = extra["dtype"]
    rep = Backend.prepare(model, "CPU")
    (p,) = rep.placement
    assert p.target == CPU and reason in p.reason, rep.summary()
    if "dtype" not in extra:
        for g, w in zip(rep.run(feeds), _ort(model, feeds)):
            np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)


# ---- RotaryEmbedding ----------------------------------------------------------------------------
ROTARY = {  # name: (rank, batch, heads, seq, head, rotary dim, interleaved, position ids, constant caches)
    "3d": (3, 2, 2, 5, 8, 0, False, True, False),
    "3d-interleaved": (3, 2, 3, 4, 8, 0, True, True, False),
    "4d": (4, 2, 2, 3, 16, 0, False, True, False),
    "4d-rot-dim": (4, 1, 2, 5, 12, 4, False, True, False),
    "3d-rot-dim-interleaved": (3, 2, 2, 3, 10, 6, True, True, False),
    "no-position-ids": (3, 2, 2, 4, 8, 0, False, False, False),
    "no-position-ids-interleaved-rot": (4, 2, 2, 4, 12, 8, True, False, False),
    "constant-caches": (3, 2, 2, 5, 8, 0, False, True, True),
    "constant-caches-4d-interleaved": (4, 2, 2, 3, 8, 0, True, True, True),
}


@pytest.mark.parametrize("dt", [F32, F16], ids=["f32", "f16"])
@pytest.mark.parametrize("name", ROTARY)
def test_rotary(rng, name, dt):
    rank, b, h, s, d, rot, inter, with_pos, const = ROTARY[name]
    half = (rot or d) // 2
    x = rng.standard_normal((b, h, s, d) if rank == 4 else (b, s, h * d)).astype(dt)
    ang = rng.uniform(0, 6.3, (16, half))
    cos, sin = np.cos(ang).astype(dt), np.sin(ang).astype(dt)
    pos = rng.integers(0, 16, (b, s)).astype(np.int64)
    if not with_pos:
        cos, sin = cos[pos], sin[pos]
    ins = {"X": x, "cos_cache": cos, "sin_cache": sin, "position_ids": pos if with_pos else None}
    attrs = {"interleaved": int(inter)}
    if rot:
        attrs["rotary_embedding_dim"] = rot
    if rank == 3:
        attrs["num_heads"] = h
    model, feeds = _model("RotaryEmbedding", ins, ["Y"], attrs, inits=("cos_cache", "sin_cache") if const else ())
    want = rotary_ref(x, cos, sin, pos if with_pos else None, interleaved=inter, rot=rot, heads=h)
    _device(model, feeds, [_ort(model, feeds), [want]], dt)


def test_rotary_bfloat16_stays_on_the_cpu():
    model, _ = _model("RotaryEmbedding", {"X": np.zeros((1, 2, 2, 4), F32), "cos_cache": np.zeros((2, 2), F32),
                                          "sin_cache": np.zeros((2, 2), F32)}, ["Y"], {})
    for vi in model.graph.input:
        vi.type.tensor_type.elem_type = TensorProto.BFLOAT16
    (p,) = Backend.prepare(model, "CPU").placement
    assert p.target == CPU and "bfloat16" in p.reason


def test_each_domain_has_its_handler():
    """ai.onnx and com.microsoft share the names Attention and RotaryEmbedding: the backend picks the
    handler by (type, domain)."""
    from kompute_dml.onnx_backend.handlers import HANDLERS, handler_for

    for op in ("Attention", "RotaryEmbedding"):
        ours, contrib = (handler_for(helper.make_node(op, ["x"], ["y"], domain=d)) for d in ("", "com.microsoft"))
        assert contrib is HANDLERS[op] and ours is not contrib
        assert handler_for(helper.make_node(op, ["x"], ["y"], domain="ai.onnx")) is ours


# ---- onnx's own node cases ----------------------------------------------------------------------
NODE_CASES = r"^test_(attention|rotary_embedding)\w*_cpu$"
# the cases that do not run wholly on the device, and why (the rule's reason at prepare)
NOT_ON_DEVICE = {
    **{f"attention_{n}": "bfloat16" for n in (
        "3d_causal_bf16", "4d_attn_mask_causal_bf16", "4d_causal_bf16", "4d_causal_padded_kv_bf16",
        "4d_padded_kv_bf16")},
    "attention_local_window_gqa_rank4_mask": "softmax_precision",
}
def test_onnx_node_cases():
    """Every non-expanded case that the rule takes runs wholly on the device and passes (the
    expanded forms are primitive nodes: tests of their own operators), the two that onnxruntime's
    own kernel fails (a past with a 3-D / 4-D mask, causal, and the qk output) included; the rest
    stay on the CPU with the rule's reason."""
    from onnx_node_cases import node_cases, run_case, run_on_device

    case, names = node_cases(NODE_CASES, __name__)
    names = [n for n in names if "_expanded" not in n]
    short = {n: n[len("test_"):-len("_cpu")] for n in names}
    assert len(names) >= 60 + len(NOT_ON_DEVICE), names
    assert set(NOT_ON_DEVICE) <= set(short.values())
    on_device = []
    for name in names:
        if short[name] in NOT_ON_DEVICE:
            reps = run_case(case, name)
            reasons = {p.reason for rep in reps for p in rep.placement if p.target == CPU}
            assert any(NOT_ON_DEVICE[short[name]] in r for r in reasons), (name, reasons)
        else:
            run_on_device(case, name)
            on_device.append(name)
    assert len(on_device) == len(names) - len(NOT_ON_DEVICE)
    assert sum(n.startswith("test_rotary") for n in on_device) == 8


@pytest.mark.parametrize(("dt", "precision", "want"), [(F16, None, "mhac16xh"), (F16, TensorProto.FLOAT16, "mhac16xh"),
                                                       (F16, TensorProto.FLOAT, "mhac16x_"), (F32, None, "mha_f32")])
def test_float16_weights_follow_softmax_precision(rng, monkeypatch, dt, precision, want):
    """Float16 inputs on the tensor-core kernel (its emulation here): softmax_precision absent or
    FLOAT16 (the weights in the inputs' type) takes the float16-weight variant, FLOAT the float32 one;
    float32 inputs another kernel (their weights are float32); within the type's tolerance of the
    float64 reference."""
    import dataclasses

    ins, attrs, outs = _inputs(rng, dt, (4, 2, 2, 2, 9, 12, 0, 16, 16, False, None, None, None))
    if precision is not None:
        attrs["softmax_precision"] = precision
    model, feeds = _model("Attention", ins, outs, attrs, opset=23)
    rep = Backend.prepare(model, "CPU")
    monkeypatch.setattr(rep.device, "policy", dataclasses.replace(rep.device.policy, attention_kernel="coopmat-emulated"))
    monkeypatch.setitem(rep.device.caches, "compiled", {})
    (got,) = rep.run(feeds)
    variants = compiled_variants("MultiheadAttention", rep.device)
    assert len(variants) == 1 and variants.pop().startswith(want)
    np.testing.assert_allclose(got.astype(np.float64), np.asarray(_ref(ins, attrs)[0], np.float64), **TOL[dt])
