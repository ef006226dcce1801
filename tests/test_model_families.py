"""The families users bring (kompute_dml/bench/families.py: random weights, tiny sizes) through
the ONNX backend on this device: outputs against onnxruntime's CPU provider, and which node types
still leave the device. STILL_ON_THE_CPU (families.CPU_NODE_TYPES, which the README's table shows)
is today's list per family (for the graphs onnxruntime's optimizer fused, the most that may stay
there: its fusions vary with its version): a node type on the CPU that is not listed fails (a
regression), and a listed one that no longer is fails too (the list must shrink with the work that
moves it: issue 52). An image family wholly on the device moves one upload (the image) and one
download (the output) per run."""

from __future__ import annotations

import collections
import re

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("torch", reason="torch (requirements-model.txt) exports the models")
pytest.importorskip("transformers", reason="transformers (requirements-model.txt) defines the models")

from kompute_dml.bench import families  # noqa: E402
from kompute_dml.onnx_backend import CPU, Backend  # noqa: E402

STILL_ON_THE_CPU = families.CPU_NODE_TYPES
AT_RUN_TIME = families.RUNTIME_CPU_NODE_TYPES  # placed on the device, refused there by the operator


def _rows(a: np.ndarray) -> np.ndarray:
    return a.reshape(-1, a.shape[-1]).astype(np.float64)


@pytest.mark.parametrize("name", sorted(n for n, f in families.FAMILIES.items() if f.post != "fp16"))
def test_family_runs_correct_and_its_cpu_nodes_are_known(name):  # float16: tests/test_model_families_fp16.py
    pytest.importorskip(families.FAMILIES[name].requires, reason="it defines the architecture (requirements-model.txt)")
    path = families.build(name, "tiny")
    rep = Backend.prepare(str(path), "CPU")
    cpu = collections.Counter(p.op_type for p in rep.placement if p.target == CPU)
    if families.FAMILIES[name].post:  # onnxruntime's optimizer wrote it: its fusions vary with its version
        assert set(cpu) <= STILL_ON_THE_CPU[name], (cpu, rep.summary())
    else:
        assert set(cpu) == STILL_ON_THE_CPU[name], (cpu, rep.summary())
    so = ort.SessionOptions()
    if families.FAMILIES[name].post == "qdq":
        # the QDQ graph as written, node by node: onnxruntime's own levels disagree (its fused QLinear
        # kernels round otherwise): ORT_ENABLE_ALL against ORT_DISABLE_ALL per-row cosine 0.9987-0.9993
        # on resnet18-qdq at torch 2.14 / torchvision 0.29, ours against ORT_DISABLE_ALL 0.99984 at 1 x 9
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    for batch, seq in ((1, 9), (3, 17)):
        feeds = families.feeds(name, batch, seq, np.random.default_rng(batch))
        (got,), (want,) = rep.run(feeds), sess.run(None, feeds)
        assert got.shape == want.shape and got.dtype == want.dtype
        g, w = _rows(got), _rows(want)
        cos = (g * w).sum(1) / (np.linalg.norm(g, axis=1) * np.linalg.norm(w, axis=1))
        assert cos.min() >= families.FAMILIES[name].cos, (name, batch, seq, cos.min())
        late = {rep.placement[int(m.group(1))].op_type for e in rep.last_run.events
                if (m := re.match(r"node (\d+) \(", e)) and "ran on the CPU" in e}
        listed = AT_RUN_TIME.get(name, frozenset())
        assert late <= listed if families.FAMILIES[name].post else late == listed, (name, late, rep.last_run.events)
        if "pixel_values" in feeds and not STILL_ON_THE_CPU[name]:  # an image family wholly on the device
            st = rep.last_run
            assert (st.uploads, st.downloads, st.cpu_segments) == (1, 1, 0), (name, batch, st.uploads, st.downloads)


def test_fused_attention_over_512_tokens():
    """onnxruntime's fused BERT (com.microsoft Attention: MULTIHEAD_ATTENTION directly, head size 64) over
    512 tokens: lavapipe's rows kernel stopped at its loop limit there (per-row cosine 0.9916 at a3f9ca1:
    checked); the tiled kernel takes such problems (ops/attention_layout.rows_fit)."""
    name = "bert-fp32-fused"
    pytest.importorskip(families.FAMILIES[name].requires, reason="it defines the architecture (requirements-model.txt)")
    path = families.build(name, "small")
    rep = Backend.prepare(str(path), "CPU")
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feeds = families.feeds(name, 1, 512, np.random.default_rng(0), "small")
    (got,), (want,) = rep.run(feeds), sess.run(None, feeds)
    g, w = _rows(got), _rows(want)
    cos = (g * w).sum(1) / (np.linalg.norm(g, axis=1) * np.linalg.norm(w, axis=1))
    assert cos.min() >= families.FAMILIES[name].cos, cos.min()
