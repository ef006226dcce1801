"""The ONNX backend as a new user meets it (issue 25): the CPU fallback on models written by
onnx 1.23 (IR 14, opset 28), the engine reported, fallback="onnxruntime" failing loudly, inputs
through the one input rule with declared shapes, supports_device, the docs' usage example."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper

import kompute_dml as kdml
from kompute_dml.onnx_backend import Backend, FallbackError
from kompute_dml.onnx_backend import fallback as fallback_mod

ort = pytest.importorskip("onnxruntime")
ROOT = Path(__file__).resolve().parent.parent


CPU_SIN = ["Sin"]  # Sin runs on the device too: the tests of CPU sub-graphs keep it on the CPU
CPU_CELU = ["Celu"]  # so does Celu (ACTIVATION_CELU)


def _sin_model(shape=("n", 5)):
    """What `helper.make_model` writes by default: IR 14, opset 28 (onnx 1.23); Trilu -> Sin."""
    g = helper.make_graph([helper.make_node("Trilu", ["x"], ["t"]), helper.make_node("Sin", ["t"], ["y"])], "sm",
                          [helper.make_tensor_value_info("x", T.FLOAT, list(shape))],
                          [helper.make_tensor_value_info("y", T.FLOAT, list(shape))])
    return helper.make_model(g)


def _sin(x):
    return np.sin(x)


def test_a_default_onnx_model_runs_its_cpu_subgraph_on_onnxruntime(rng):
    model = _sin_model()
    assert model.ir_version > 13 or model.opset_import[0].version > 26, "the case this test is about"
    rep = Backend.prepare(model, "CPU", exclude_ops=CPU_SIN)
    assert [p.operator for p in rep.placement] == ["DIAGONAL_MATRIX1", "onnxruntime"]
    x = rng.standard_normal((4, 5)).astype(np.float32)
    (y,) = rep.run({"x": x})
    np.testing.assert_allclose(y, _sin(np.triu(x)), rtol=1e-5, atol=1e-6)
    seg = rep.segments[0]
    assert seg.engine == "onnxruntime" and rep.last_run.events == []
    (engine, impl), = seg._runners.values()
    assert engine == "onnxruntime" and isinstance(impl, ort.InferenceSession)  # really onnxruntime
    assert "(onnxruntime 1)" in rep.summary()


def _celu_model():
    """Celu changed in opset 28, beyond what onnxruntime 1.31 loads: onnxruntime refuses it."""
    g = helper.make_graph([helper.make_node("Celu", ["x"], ["y"])], "celu",
                          [helper.make_tensor_value_info("x", T.FLOAT, [3])], [helper.make_tensor_value_info("y", T.FLOAT, [3])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 28)])


def test_a_subgraph_onnxruntime_refuses_is_reported_in_placement_and_events():
    from kompute_dml.onnx_backend.ort_compat import ort_limits

    if ort_limits()[1] >= 28:
        pytest.skip(f"this onnxruntime loads opset {ort_limits()[1]}: it takes Celu-28")
    rep = Backend.prepare(_celu_model(), "CPU", exclude_ops=CPU_CELU)
    assert rep.placement[0].operator == "reference"  # known before the run
    x = np.array([-1.0, 0.0, 2.0], np.float32)
    for _ in range(2):  # every run says so, not only the first
        (y,) = rep.run([x])
        np.testing.assert_allclose(y, np.where(x > 0, x, np.expm1(x)), rtol=1e-6)
        assert len(rep.last_run.events) == 1
        assert re.search(r"CPU sub-graph 0 of \['Celu'\] ran on onnx's reference evaluator: onnxruntime", rep.last_run.events[0])
    with pytest.raises(FallbackError, match=r"fallback='onnxruntime': CPU sub-graph 0: its nodes \['Celu'\] need "
                                            r"ai.onnx opset 28"):
        Backend.prepare(_celu_model(), "CPU", fallback="onnxruntime", exclude_ops=CPU_CELU)


def test_fallback_onnxruntime_never_switches_engines(monkeypatch):
    # onnxruntime refusing at the first run (an op it does not know): an error, not the reference
    g = helper.make_graph([helper.make_node("NoSuchOp", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", T.FLOAT, [2])], [helper.make_tensor_value_info("y", T.FLOAT, [2])])
    rep = Backend.prepare(helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)], ir_version=10), "CPU",
                          fallback="onnxruntime")
    with pytest.raises(FallbackError, match=r"onnxruntime cannot run CPU sub-graph 0 of \['NoSuchOp'\]"):
        rep.run([np.ones(2, np.float32)])
    # without onnxruntime: refused at prepare; auto expects the reference evaluator
    monkeypatch.setattr(fallback_mod, "ort_limits", lambda: None)
    with pytest.raises(FallbackError, match="onnxruntime is not installed"):
        Backend.prepare(_sin_model(), "CPU", fallback="onnxruntime", exclude_ops=CPU_SIN)
    assert Backend.prepare(_sin_model(), "CPU", exclude_ops=CPU_SIN).placement[1].operator == "reference"


def test_compare_onnxruntime_on_a_default_onnx_model(tmp_path, rng, capsys):
    from kompute_dml.cli.run import main

    onnx.save(_sin_model(), tmp_path / "m.onnx")
    x = rng.standard_normal((4, 5)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    rc = main([str(tmp_path / "m.onnx"), "--input", f"x={tmp_path / 'x.npy'}", "--compare-onnxruntime",
               "--exclude-ops", "Sin"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    assert "(onnxruntime 1)" in out.out and "note:" not in out.out
    diff = float(re.search(r"max \|kompute_dml - onnxruntime\| = ([^,\s]+)", out.out).group(1))
    assert diff <= 1e-6


# ---- inputs --------------------------------------------------------------------------------------
class CpuDLPack:
    def __init__(self, a):
        self._a = a

    def __dlpack__(self, **kw):
        return self._a.__dlpack__(**kw)

    def __dlpack_device__(self):
        return (1, 0)


class CudaDLPack(CpuDLPack):
    def __dlpack_device__(self):
        return (2, 0)


def test_backend_inputs_follow_the_one_input_rule(rng):
    rep = Backend.prepare(_sin_model(), "CPU")
    x = rng.standard_normal((3, 5)).astype(np.float32)
    want = _sin(np.triu(x))
    np.testing.assert_allclose(rep.run({"x": CpuDLPack(x)}).y, want, rtol=1e-5, atol=1e-6)  # a torch-like CPU tensor
    np.testing.assert_allclose(rep.run([x.tolist()]).y, want, rtol=1e-5, atol=1e-6)  # Python floats that fit
    with pytest.raises(kdml.InvalidArgumentError, match=r"input 'x': .*CUDA.*move it to the CPU"):
        rep.run({"x": CudaDLPack(x)})
    with pytest.raises(ValueError, match=r"input 'x': expected float32, got float64"):
        rep.run({"x": x.astype(np.float64)})


def test_declared_shapes_are_checked_and_symbolic_dims_are_free(rng):
    fixed = Backend.prepare(_sin_model((4, 5)), "CPU")
    with pytest.raises(ValueError, match=r"input 'x': has shape \(3, 5\); the model declares \(4, 5\)"):
        fixed.run([np.ones((3, 5), np.float32)])
    with pytest.raises(ValueError, match=r"input 'x': has shape \(4, 5, 1\)"):
        fixed.run([np.ones((4, 5, 1), np.float32)])
    free = Backend.prepare(_sin_model(("n", 5)), "CPU")
    for rows in (1, 7):
        assert free.run([np.ones((rows, 5), np.float32)]).y.shape == (rows, 5)
    with pytest.raises(ValueError, match=r"declares \(\?, 5\)"):
        free.run([np.ones((2, 4), np.float32)])


def test_supports_device_checks_the_device_exists():
    n = len(kdml.list_devices())
    assert Backend.supports_device("CPU") and Backend.supports_device("VULKAN:0")
    assert not Backend.supports_device(f"VULKAN:{n}")
    assert not Backend.supports_device("CUDA")


def test_the_usage_example_of_docs_onnx_md_runs_as_written(capsys):
    text = (ROOT / "docs" / "onnx.md").read_text()
    block = re.search(r"## Usage\n\n```python\n(.*?)```", text, re.S)
    assert block, "docs/onnx.md has no python block under ## Usage"
    scope: dict = {}
    exec(compile(block.group(1), "docs/onnx.md", "exec"), scope)
    x = np.arange(20, dtype=np.float32).reshape(4, 5)
    np.testing.assert_array_equal(scope["y"], np.tril(x, 1))
    assert scope["outputs"].y.shape == (4, 5)
    np.testing.assert_allclose(scope["outputs"].y, _sin(np.triu(np.ones((4, 5), np.float32))), rtol=1e-6)


def test_cast_true_converts_what_the_type_rule_refuses():
    """The advice in the refusal works as written: cast=True converts float64 feeds (numpy's
    astype), the CLI's --cast alike."""
    import numpy as np
    from onnx import TensorProto, helper

    from kompute_dml.onnx_backend import Backend

    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    rep = Backend.prepare(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8))
    x = np.array([1.1, -2.0, 3.3])
    with pytest.raises(ValueError, match="pass cast=True"):
        rep.run({"x": x})
    (y,) = rep.run({"x": x}, cast=True)
    np.testing.assert_array_equal(y, np.maximum(x.astype(np.float32), 0))
