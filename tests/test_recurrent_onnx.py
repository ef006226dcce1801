"""RNN, LSTM and GRU (ops/rnn.py, lstm.py, gru.py) against onnxruntime's ONNX RNN / LSTM / GRU where the forms
agree (no LSTM peepholes: the DirectML page's o_t reads P_o (.) C_{t-1}, ONNX's P_o (.) C_t): every direction,
biases and initial states, sequence lengths in [1, seq_length], LSTM's clip and input_forget, GRU's
linear_before_reset, other activations; FLOAT32 within 2e-5 (1 + |ort|)."""

from __future__ import annotations

import numpy as np
import pytest
from recurrent_reference import GATES

import kompute_dml as kdml
from kompute_dml.ops.gru import GruDesc
from kompute_dml.ops.lstm import LstmDesc
from kompute_dml.ops.rnn import RnnDesc

ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

DT = kdml.DataType
DESCS = {"RNN": RnnDesc, "LSTM": LstmDesc, "GRU": GruDesc}
ACTS = {"Sigmoid": kdml.ActivationSigmoidDesc(None, None), "Tanh": kdml.ActivationTanhDesc(None, None),
        "Relu": kdml.ActivationReluDesc(None, None)}
DIRECTIONS = {0: "forward", 1: "reverse", 2: "bidirectional"}


def ort_run(kind, x, w, r, b, lens, h0, c0, acts, direction, **attrs):
    hid = r.shape[-1]
    names = ["X", "W", "R", "B", "sequence_lens", "initial_h"] + (["initial_c"] if kind == "LSTM" else [])
    feeds = {"X": x, "W": w, "R": r, "B": b, "sequence_lens": lens, "initial_h": h0, "initial_c": c0}
    kw = dict(hidden_size=hid, direction=DIRECTIONS[direction], activations=acts, **attrs)
    node = helper.make_node(kind, names, ["Y", "Y_h"] + (["Y_c"] if kind == "LSTM" else []), **kw)
    ins = [helper.make_tensor_value_info(n, TensorProto.INT32 if n == "sequence_lens" else TensorProto.FLOAT,
                                         feeds[n].shape) for n in names]
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in node.output]
    model = helper.make_model(helper.make_graph([node], "g", ins, outs), opset_imports=[helper.make_opsetid("", 14)], ir_version=8)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {n: feeds[n] for n in names})


@pytest.mark.parametrize("direction", [0, 1, 2], ids=DIRECTIONS.values())
@pytest.mark.parametrize(("kind", "attrs", "acts"), [
    ("RNN", {}, ("Tanh",)), ("RNN", {}, ("Relu",)),
    ("LSTM", {}, ("Sigmoid", "Tanh", "Tanh")), ("LSTM", {"clip": 0.7, "input_forget": 1}, ("Sigmoid", "Relu", "Tanh")),
    ("GRU", {}, ("Sigmoid", "Tanh")), ("GRU", {"linear_before_reset": 1}, ("Sigmoid", "Relu")),
], ids=["rnn", "rnn-relu", "lstm", "lstm-clip-coupled", "gru", "gru-lbr"])
def test_against_onnxruntime(dev, rng, kind, attrs, acts, direction):
    steps, batch, inp, hid = 4, 3, 3, 5
    dirs = 2 if direction == 2 else 1
    g = GATES[kind]
    f32 = np.float32
    x = rng.standard_normal((steps, batch, inp)).astype(f32)
    w = (rng.standard_normal((dirs, g * hid, inp)) * 0.4).astype(f32)
    r = (rng.standard_normal((dirs, g * hid, hid)) * 0.4).astype(f32)
    b = (rng.standard_normal((dirs, 2 * g * hid)) * 0.5).astype(f32)
    h0, c0 = (rng.standard_normal((dirs, batch, hid)).astype(f32) for _ in range(2))
    lens = rng.integers(1, steps + 1, batch).astype(np.int32)
    want = ort_run(kind, x, w, r, b, lens, h0, c0, list(acts) * dirs, direction, **attrs)
    host = [x[None], w[None], r[None], b[None, None], h0[None]] + ([c0[None]] if kind == "LSTM" else []) + \
        [lens.astype(np.uint32).reshape(1, 1, 1, batch)] + ([None] if kind == "LSTM" else [])
    ins = [dev.tensor(a) if a is not None else None for a in host]
    outs = [dev.tensor(np.full(a.shape, np.nan, f32)) for a in (want[0], *(v[None] for v in want[1:]))]
    extra = {"LSTM": {"clip_threshold": attrs.get("clip", 0.0), "use_clip_threshold": "clip" in attrs,
                      "couple_input_forget": bool(attrs.get("input_forget"))},
             "GRU": {"linear_before_reset": bool(attrs.get("linear_before_reset"))}, "RNN": {}}[kind]
    desc = DESCS[kind](*(t.desc if t is not None else None for t in (*ins, *outs)), tuple(ACTS[a] for a in acts) * dirs,
                       direction, **extra)
    dev.compile(desc).execute(ins, outs)
    for got, ref in zip(outs, want):
        got, ref = got.numpy().reshape(ref.shape).astype(np.float64), ref.astype(np.float64)
        assert (np.abs(got - ref) / (1 + np.abs(ref))).max() <= 2e-5
