"""MatMul -> Transpose (the last axis kept last) as one GEMM writing the transposed layout
(kompute_dml/onnx_backend/fusion_transpose.py): an attention's context -> Transpose(0, 2, 1, 3) ->
Reshape, ranks 3 and 4, broadcast batches, float32 and float16, whole-graph and node by node: the
unfused model's bits (its Transpose a strided view, its Reshape a copy), one dispatch instead of two,
and float64 numpy's values; a perm that moves the last axis and half precision run the nodes one by one."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

from kompute_dml.onnx_backend import Backend  # noqa: E402

N = helper.make_node
ELEM = {np.float32: T.FLOAT, np.float16: T.FLOAT16}


def _model(dt, a_shape, b_shape, perm, reshape):
    nodes = [N("MatMul", ["a", "b"], ["p"]), N("Transpose", ["p"], ["t"], perm=list(perm))]
    inits = []
    out = "t"
    if reshape is not None:
        nodes.append(N("Reshape", ["t", "shape"], ["y"]))
        inits.append(numpy_helper.from_array(np.array(reshape, np.int64), "shape"))
        out = "y"
    g = helper.make_graph(nodes, "ctx", [helper.make_tensor_value_info("a", ELEM[dt], list(a_shape)),
                                         helper.make_tensor_value_info("b", ELEM[dt], list(b_shape))],
                          [helper.make_tensor_value_info(out, ELEM[dt], None)], initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def _bits(a):
    return a.view(f"u{a.dtype.itemsize}")


@pytest.mark.parametrize("dt", [np.float32, np.float16], ids=["f32", "f16"])
@pytest.mark.parametrize("a_shape,b_shape,perm,reshape", [
    ((2, 3, 7, 5), (2, 3, 5, 4), (0, 2, 1, 3), (2, 7, 12)),  # an attention's context, heads merged
    ((2, 3, 7, 5), (5, 4), (0, 2, 1, 3), None),  # B broadcast over the batch
    ((3, 6, 5), (3, 5, 9), (1, 0, 2), (6, 27)),
    ((4, 6, 5), (5, 9), (1, 0, 2), None),
])
def test_one_gemm_with_the_unfused_bits(rng, dt, a_shape, b_shape, perm, reshape):
    model = _model(dt, a_shape, b_shape, perm, reshape)
    feeds = {"a": rng.standard_normal(a_shape).astype(dt), "b": rng.standard_normal(b_shape).astype(dt)}
    feeds["a"].reshape(-1)[:2] = (np.inf, -0.0)
    rep = Backend.prepare(model, "CPU")
    (y,) = rep.run(feeds)
    assert rep.last_run.dispatches == 1 and "MatMul+Transpose x1 -> GEMM" in rep.summary()
    rep.state.node_by_node = True
    (eager,) = rep.run(feeds)
    unfused = Backend.prepare(model, "CPU", fuse=False)
    (want,) = unfused.run(feeds)
    assert unfused.last_run.dispatches == (2 if reshape is not None else 1)  # the Reshape copies the strided view
    assert y.shape == want.shape and np.array_equal(_bits(y), _bits(want)) and np.array_equal(_bits(eager), _bits(want))
    with np.errstate(all="ignore"):
        ref = np.transpose(feeds["a"].astype(np.float64) @ feeds["b"].astype(np.float64), perm)
    ref = ref.reshape(reshape) if reshape is not None else ref
    finite = np.isfinite(ref)
    tol = 1e-5 if dt == np.float32 else 2e-2
    np.testing.assert_allclose(y[finite].astype(np.float64), ref[finite], rtol=tol, atol=tol)


@pytest.mark.parametrize("case", ["last axis moves", "half precision"])
def test_other_transposes_run_node_by_node(rng, case):
    perm = (0, 2, 1) if case == "last axis moves" else (1, 0, 2)
    model = _model(np.float32, (3, 6, 5), (3, 5, 9), perm, None)
    feeds = {"a": rng.standard_normal((3, 6, 5)).astype(np.float32), "b": rng.standard_normal((3, 5, 9)).astype(np.float32)}
    rep = Backend.prepare(model, "CPU", allow_half_precision=case == "half precision")
    (y,) = rep.run(feeds)
    if case == "half precision":  # matched, then the pieces at run time
        assert "ran unfused" in " ".join(rep.last_run.events)
    else:
        assert "MatMul+Transpose" not in rep.summary()
    want = np.transpose(feeds["a"] @ feeds["b"], perm)
    np.testing.assert_allclose(y, want, rtol=1e-2 if case == "half precision" else 1e-5, atol=1e-2)


@pytest.mark.parametrize("node_by_node", [False, True])
def test_unfused_attention_writes_its_context_transposed(rng, monkeypatch, node_by_node):
    """An attention -> Transpose(0, 2, 1, 3) -> Reshape past DevicePolicy.attention_fused_max_flops runs
    its products' chains (fusion_match does not nest the attention without its Transpose): MatMul ->
    Mul and MatMul -> Transpose as GEMMs, the Reshape a view: 3 dispatches where the nodes take 5, the
    same bits."""
    import dataclasses

    b, h, s, d = 2, 3, 12, 8
    ins = [helper.make_tensor_value_info(n, T.FLOAT, [b, h, s, d]) for n in "qkv"]
    nodes = [N("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]), N("MatMul", ["q", "kt"], ["sc"]),
             N("Mul", ["sc", "c"], ["scaled"]), N("Softmax", ["scaled"], ["p"], axis=-1), N("MatMul", ["p", "v"], ["pv"]),
             N("Transpose", ["pv"], ["t"], perm=[0, 2, 1, 3]), N("Reshape", ["t", "shape"], ["y"])]
    g = helper.make_graph(nodes, "attn", ins, [helper.make_tensor_value_info("y", T.FLOAT, None)],
                          initializer=[numpy_helper.from_array(np.array(d ** -0.5, np.float32), "c"),
                                       numpy_helper.from_array(np.array([b, s, h * d], np.int64), "shape")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    feeds = {n: rng.standard_normal((b, h, s, d)).astype(np.float32) for n in "qkv"}
    rep = Backend.prepare(model, "CPU")
    (f,) = rep.fusions.by_carrier.values()
    assert f.pattern.operator == "MULTIHEAD_ATTENTION" and [w.pattern.name for w in f.within] == ["MatMul+Mul", "MatMul+Transpose"]
    monkeypatch.setattr(rep.device, "policy", dataclasses.replace(rep.device.policy, attention_fused_max_flops=0))
    rep.state.node_by_node = node_by_node
    (y,) = rep.run(feeds)
    assert "ran unfused" in " ".join(rep.last_run.events)
    unfused = Backend.prepare(model, "CPU", fuse=False)
    unfused.state.node_by_node = node_by_node
    (want,) = unfused.run(feeds)
    assert np.array_equal(_bits(y), _bits(want))
    if not node_by_node:  # (RunStats.dispatches: the whole-graph program's)
        assert (rep.last_run.dispatches, unfused.last_run.dispatches) == (3, 5)
