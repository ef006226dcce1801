"""The float16 families (kompute_dml/bench/families.py: each float32 family's export converted by
onnxruntime's convert_float_to_float16, float32 inputs and outputs kept) through the ONNX backend
on this device: wholly on the device (families.CPU_NODE_TYPES empty: no node on the CPU at
prepare or at run time), one upload and one download per run, and outputs within a per-row
cosine of 0.99 of the float32 model they were converted from (onnxruntime's CPU provider) and of
onnxruntime running the float16 model itself."""

from __future__ import annotations

import collections
import re

import numpy as np
import pytest
from helpers import cosines

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("torch", reason="torch (requirements-model.txt) exports the models")
pytest.importorskip("transformers", reason="transformers (requirements-model.txt) defines the models")

from kompute_dml.bench import families  # noqa: E402
from kompute_dml.onnx_backend import CPU, Backend  # noqa: E402

FP16 = sorted(n for n, f in families.FAMILIES.items() if f.post == "fp16")


def _float16_values(path) -> int:
    """How many of the model's initializers are float16 (the conversion really happened)."""
    return sum(t.data_type == onnx.TensorProto.FLOAT16 for t in onnx.load(str(path)).graph.initializer)


@pytest.mark.parametrize("name", FP16)
def test_float16_family_runs_wholly_on_the_device_close_to_float32(name):
    pytest.importorskip(families.FAMILIES[name].requires, reason="it defines the architecture (requirements-model.txt)")
    path, src = families.build(name, "tiny"), families.source(name, "tiny")
    assert _float16_values(path) > 0 and _float16_values(src) == 0
    rep = Backend.prepare(str(path), "CPU")
    cpu = collections.Counter(p.op_type for p in rep.placement if p.target == CPU)
    assert set(cpu) == families.CPU_NODE_TYPES[name] == set(), (cpu, rep.summary())
    assert rep.graph_mode
    fp32 = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"])
    fp16 = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for batch, seq in ((1, 9), (3, 17)):
        feeds = families.feeds(name, batch, seq, np.random.default_rng(batch))
        (got,), (want,), (theirs,) = rep.run(feeds), fp32.run(None, feeds), fp16.run(None, feeds)
        assert got.shape == want.shape and got.dtype == want.dtype == np.float32
        assert np.isfinite(got).all() and np.abs(want).max() > 1e-3  # not a net whose values vanish in float16
        st = rep.last_run
        assert (st.uploads, st.downloads, st.cpu_segments, st.runtime_fallbacks) == (1, 1, 0, 0), (name, st)
        late = [e for e in st.events if re.match(r"node \d+ \(", e) and "ran on the CPU" in e]
        assert not late, late
        c32, c16 = cosines(got, want).min(), cosines(got, theirs).min()
        print(f"{name} {batch}x{seq}: cosine vs float32 {c32:.6f}, vs onnxruntime float16 {c16:.6f}, "
              f"onnxruntime float16 vs float32 {cosines(theirs, want).min():.6f}")
        assert c32 >= 0.99 and c16 >= 0.99, (name, batch, seq, c32, c16)
