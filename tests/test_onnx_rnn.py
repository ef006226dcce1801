"""ONNX LSTM, GRU (both linear_before_reset) and RNN on the device (onnx_backend/handlers_rnn.py:
GEMM and the activations, step by step) against onnxruntime's CPU kernels: forward, reverse and
bidirectional, with and without bias and initial states, hidden sizes that are not a multiple of
4 (the padded step rows), batches, outputs each alone; onnx's node cases; what stays on the CPU,
named."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx_node_cases import node_cases, run_case, run_on_device  # noqa: E402

from kompute_dml.onnx_backend import Backend  # noqa: E402

GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
CASES = {  # op, steps, batch, input, hidden, direction, bias, initial states, outputs, attributes
    "lstm-forward": ("LSTM", 5, 2, 3, 4, "forward", True, False, ("Y", "Y_h", "Y_c"), {}),
    "lstm-reverse-odd-hidden": ("LSTM", 4, 3, 5, 7, "reverse", True, True, ("Y", "Y_h", "Y_c"), {}),
    "lstm-bidirectional": ("LSTM", 6, 1, 8, 5, "bidirectional", True, True, ("Y", "Y_h", "Y_c"), {}),
    "lstm-no-bias-y-only": ("LSTM", 3, 2, 4, 6, "forward", False, False, ("Y",), {}),
    "lstm-y-h-only": ("LSTM", 7, 4, 3, 16, "bidirectional", True, False, ("", "Y_h"), {}),
    "gru-forward": ("GRU", 5, 2, 3, 4, "forward", True, False, ("Y", "Y_h"), {}),
    "gru-bidirectional-init": ("GRU", 6, 3, 5, 7, "bidirectional", True, True, ("Y", "Y_h"), {}),
    "gru-linear-before-reset": ("GRU", 5, 2, 4, 6, "reverse", True, True, ("Y", "Y_h"), {"linear_before_reset": 1}),
    "gru-lbr-bidirectional": ("GRU", 4, 2, 3, 5, "bidirectional", True, False, ("Y",), {"linear_before_reset": 1}),
    "rnn-forward": ("RNN", 6, 2, 3, 5, "forward", True, False, ("Y", "Y_h"), {}),
    "rnn-bidirectional-init": ("RNN", 4, 3, 4, 8, "bidirectional", True, True, ("Y", "Y_h"), {}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_recurrent_matches_onnxruntime_on_the_device(rng, case):
    op, steps, batch, inp, hid, direction, with_bias, with_init, outs, attrs = CASES[case]
    gates = GATES[op]
    dirs = 2 if direction == "bidirectional" else 1
    inits = [numpy_helper.from_array((rng.standard_normal((dirs, gates * hid, inp)) * 0.4).astype(np.float32), "W"),
             numpy_helper.from_array((rng.standard_normal((dirs, gates * hid, hid)) * 0.4).astype(np.float32), "R")]
    names = ["X", "W", "R"]
    if with_bias or with_init:
        inits.append(numpy_helper.from_array((rng.standard_normal((dirs, 2 * gates * hid)) * 0.2).astype(np.float32)
                                             if with_bias else np.zeros((dirs, 2 * gates * hid), np.float32), "B"))
        names.append("B")
    feeds = {"X": rng.standard_normal((steps, batch, inp)).astype(np.float32)}
    inputs = [helper.make_tensor_value_info("X", TensorProto.FLOAT, [steps, batch, inp])]
    if with_init:
        states = ["h0", "c0"] if op == "LSTM" else ["h0"]
        names += ["", *states]
        for n in states:
            feeds[n] = rng.standard_normal((dirs, batch, hid)).astype(np.float32)
            inputs.append(helper.make_tensor_value_info(n, TensorProto.FLOAT, [dirs, batch, hid]))
    node = helper.make_node(op, names, list(outs), hidden_size=hid, direction=direction, **attrs)
    g = helper.make_graph([node], "rnn", inputs,
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs if o], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)], ir_version=8)
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    rep = Backend.prepare(m, "CPU")
    got = rep.run(feeds)
    assert {p.target for p in rep.placement} == {"vulkan"}, rep.summary()
    assert rep.last_run.runtime_fallbacks == 0, rep.last_run.events
    for name, g_, w in zip([o for o in outs if o], got, want):
        assert g_.shape == w.shape, name
        np.testing.assert_allclose(g_, w, rtol=0, atol=2e-6, err_msg=name)


def test_lstm_with_peepholes_stays_on_the_cpu_named(rng):
    hid = 3
    inits = [numpy_helper.from_array(np.ones((1, 4 * hid, 2), np.float32), "W"),
             numpy_helper.from_array(np.ones((1, 4 * hid, hid), np.float32), "R"),
             numpy_helper.from_array(np.ones((1, 3 * hid), np.float32), "P")]
    node = helper.make_node("LSTM", ["X", "W", "R", "", "", "", "", "P"], ["Y"], hidden_size=hid)
    g = helper.make_graph([node], "lstm", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, 1, 2])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)], inits)
    rep = Backend.prepare(helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)], ir_version=8), "CPU")
    assert rep.placement[0].target == "cpu" and "peepholes" in rep.placement[0].reason


_CASE, NAMES = node_cases(r"^test_(lstm|gru|rnn|simple_rnn)_\w+_cpu$", __name__)


def test_node_case_count():
    assert len(NAMES) >= 15, NAMES


@pytest.mark.parametrize("name", NAMES)
def test_onnx_recurrent_node_cases(name):
    """On the device where the rule takes the node (peepholes and layout 1 pass on the CPU)."""
    if "peepholes" in name or "batchwise" in name:
        run_case(_CASE, name)
    else:
        run_on_device(_CASE, name)


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
def test_torch_exported_stacked_bidirectional_model_on_the_device(tmp_path, kind):
    """torch.nn.LSTM / GRU / RNN (2 layers, bidirectional, batch_first) and a Linear head, exported
    by torch.onnx: every node on the device or the host at two batch and sequence sizes, as
    torch and onnxruntime compute it."""
    torch = pytest.importorskip("torch", reason="torch (requirements-model.txt) exports the model")

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = getattr(torch.nn, kind)(input_size=12, hidden_size=9, num_layers=2, batch_first=True,
                                               bidirectional=True)
            self.head = torch.nn.Linear(18, 5)

        def forward(self, x):
            return self.head(self.rnn(x)[0][:, -1])

    torch.manual_seed(0)
    model = Model().eval()
    path = str(tmp_path / f"{kind}.onnx")
    torch.onnx.export(model, (torch.randn(2, 7, 12),), path, input_names=["x"], output_names=["y"],
                      dynamic_axes={"x": {0: "b", 1: "t"}}, opset_version=17, dynamo=False)
    rep = Backend.prepare(path, "CPU")
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    for b, t in ((1, 4), (3, 11)):
        x = np.random.default_rng(t).standard_normal((b, t, 12)).astype(np.float32)
        got = rep.run({"x": x})[0]
        assert rep.last_run.cpu_segments == 0 and rep.last_run.runtime_fallbacks == 0, rep.last_run.events
        with torch.no_grad():
            np.testing.assert_allclose(got, model(torch.from_numpy(x)).numpy(), rtol=0, atol=1e-5)
        np.testing.assert_allclose(got, sess.run(None, {"x": x})[0], rtol=0, atol=1e-5)
