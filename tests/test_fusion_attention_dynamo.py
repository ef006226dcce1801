"""The attention chain as torch.onnx.export's dynamo exporter writes scaled_dot_product_attention
(onnx_backend/fusion_attention.py): Q and K^T each scaled by sqrt(scale) before the product, a
boolean mask as Where(mask, 0, -inf) added to the scores, Softmax, then Where(IsNaN(weights), 0,
weights) so that a row the mask leaves no key is zero, the product with V and the Transpose back.
Against onnxruntime's CPU provider, node by node and as the whole-graph plan, with a batch row
whose mask is all False (the guard's zeros) and the chains left unfused."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402
from test_fusion_attention import TOL, projections  # noqa: E402

from kompute_dml.onnx_backend import Backend  # noqa: E402

B, H, S, D = 3, 2, 6, 8


def graph(rng, *, pre=True, mask=True, guard=True, where_value=0.0, scale_input=False, dt=np.float32):
    """x [B, S, H*D] and a padding mask m [B, S] (bool) as the dynamo export writes BERT's attention."""
    et = helper.np_dtype_to_tensor_dtype(np.dtype(dt))
    nodes, inits = [], []

    def const(name, arr):
        inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    hid = H * D
    projections(rng, nodes, const, (B, S, H, D), dt)
    inputs = [helper.make_tensor_value_info("x", et, [B, S, hid]), helper.make_tensor_value_info("m", T.BOOL, [B, S])]
    q, k = "q2", "k2"
    if pre:
        c = "c"
        if scale_input:
            inputs.append(helper.make_tensor_value_info("c", et, []))
        else:
            const("c", np.array(D ** -0.25, dt))
        nodes += [helper.make_node("Mul", ["q2", c], ["qs"]), helper.make_node("Mul", ["k2", c], ["ks"])]
        q, k = "qs", "ks"
    nodes.append(helper.make_node("MatMul", [q, k], ["sc"]))
    cur = "sc"
    if mask:
        nodes.append(helper.make_node("Unsqueeze", ["m", const("ax", np.array([1, 2], np.int64))], ["m4"]))
        nodes.append(helper.make_node("Where", ["m4", const("zero", np.array(0.0, dt)), const("ninf", np.array(-np.inf, dt))],
                                      ["bias"]))
        nodes.append(helper.make_node("Add", [cur, "bias"], ["masked"]))
        cur = "masked"
    nodes.append(helper.make_node("Softmax", [cur], ["p0"], axis=-1))
    cur = "p0"
    if guard:
        nodes.append(helper.make_node("IsNaN", ["p0"], ["nan"]))
        nodes.append(helper.make_node("Where", ["nan", const("nan_value", np.array(where_value, dt)), "p0"], ["p1"]))
        cur = "p1"
    nodes.append(helper.make_node("MatMul", [cur, "v2"], ["o0"]))
    nodes.append(helper.make_node("Transpose", ["o0"], ["o1"], perm=[0, 2, 1, 3]))
    nodes.append(helper.make_node("Reshape", ["o1", const("so", np.array([B, S, hid], np.int64))], ["y"]))
    g = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y", et, None)], initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)


def feeds(rng, dt=np.float32):
    m = np.ones((B, S), bool)
    m[1, S - 2:] = False  # padding
    m[2] = False  # a row of nothing but padding: every score -inf, the weights NaN, the guard's zeros
    return {"x": rng.standard_normal((B, S, H * D)).astype(dt), "m": m}


def fused_run(rng, monkeypatch, model, fused, dt=np.float32, tol=TOL):
    """(ours, onnxruntime's); the policy fuses every size (a GPU's keeps these few rows unfused)."""
    f = feeds(rng, dt)
    (want,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, f)
    rep = Backend.prepare(model, "CPU")
    monkeypatch.setattr(rep.device, "policy", dataclasses.replace(rep.device.policy, attention_fused_min_rows=1,
                                                                  attention_fused_max_flops=1e12))
    carriers = [p for p in rep.placement if p.operator.startswith("MULTIHEAD_ATTENTION (fused")]
    assert bool(carriers) == fused, rep.summary()
    for _ in range(2):  # node by node, then the whole-graph plan
        (got,) = rep.run(f)
        assert not any("ran unfused" in e for e in rep.last_run.events), rep.last_run.events
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol)
    return got, want


@pytest.mark.parametrize(("pre", "mask", "guard"), [(True, True, True), (True, True, False), (False, True, True),
                                                    (True, False, True), (True, False, False)])
def test_fused(rng, monkeypatch, pre, mask, guard):
    got, want = fused_run(rng, monkeypatch, graph(rng, pre=pre, mask=mask, guard=guard), fused=True)
    if mask and guard:  # the all-padding row: zeros on both sides
        assert not want[2].any() and not got[2].any() and not np.signbit(got[2]).any()
    elif mask:  # without the guard both sides' row is NaN
        assert np.isnan(want[2]).all() and np.isnan(got[2]).all()


def test_fused_float16(rng, monkeypatch):
    got, want = fused_run(rng, monkeypatch, graph(rng, dt=np.float16), fused=True, dt=np.float16, tol=2e-2)
    assert not want[2].any() and not got[2].any()


def test_a_guard_that_writes_another_value_is_left_unfused(rng):
    model = graph(rng, where_value=1.0)
    f = feeds(rng)
    (want,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, f)
    rep = Backend.prepare(model, "CPU")
    assert not [p for p in rep.placement if p.operator.startswith("MULTIHEAD_ATTENTION (fused")], rep.summary()
    (got,) = rep.run(f)
    np.testing.assert_allclose(got, want, rtol=TOL, atol=TOL)


def test_a_scale_that_is_fed_stays_outside_the_chain(rng, monkeypatch):
    """Mul(Q, c) with c a graph input: the Muls run alone, the chain from the product on fuses."""
    model = graph(rng, scale_input=True)
    rep = Backend.prepare(model, "CPU")
    names = [f.pattern.name for f in rep.fusions.by_carrier.values()]
    assert names == ["MatMul+Add+Softmax+IsNaN+Where+MatMul+Transpose"], names
    monkeypatch.setattr(rep.device, "policy", dataclasses.replace(rep.device.policy, attention_fused_min_rows=1,
                                                                  attention_fused_max_flops=1e12))
    f = {**feeds(rng), "c": np.array(D ** -0.25, np.float32)}
    (want,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, f)
    (got,) = rep.run(f)
    assert not any("ran unfused" in e for e in rep.last_run.events), rep.last_run.events
    np.testing.assert_allclose(got, want, rtol=TOL, atol=TOL)


def test_layers_on_one_mask_test_its_rows_once(rng, monkeypatch):
    """Two attentions, each making its additive mask from the one boolean mask with constants of its own
    (as torch's scaled_dot_product_attention exports every layer): the repeated mask nodes are merged at
    prepare (cse.py), so the guard's rows-with-keys test (REDUCE, LOGICAL_GREATER_THAN) runs once a run,
    each layer's zeros (ELEMENT_WISE_IF) its own."""
    model = graph(rng)
    g = model.graph
    own = {"ax", "zero", "ninf"}  # the second layer's copies of these constants, by other names
    weights = {"wq", "wk", "wv"}  # and weights of its own (an identical layer would be merged whole)
    g.initializer.extend([numpy_helper.from_array(numpy_helper.to_array(t) * (0.5 if t.name in weights else 1),
                                                  f"l2_{t.name}") for t in g.initializer if t.name in own | weights])
    own |= weights
    made = {o for n in g.node for o in n.output}
    for n in list(g.node):
        c = helper.make_node(n.op_type, [f"l2_{i}" if i in made or i in own else i for i in n.input],
                             [f"l2_{o}" for o in n.output])
        c.attribute.extend(n.attribute)
        g.node.append(c)
    g.output.append(helper.make_tensor_value_info("l2_y", T.FLOAT, None))
    f = feeds(rng)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, f)
    rep = Backend.prepare(model, "CPU")
    assert rep.merged >= 2, rep.summary()  # (the mask's Unsqueeze and Where, and the projections: one input)
    monkeypatch.setattr(rep.device, "policy", dataclasses.replace(rep.device.policy, attention_fused_min_rows=1,
                                                                  attention_fused_max_flops=1e12))
    rep.run(f)  # the plan
    with rep.device.profile() as p:
        got = rep.run(f)
    ops = [r.operator for r in p.rows]
    assert ops.count("MULTIHEAD_ATTENTION") == 2 and ops.count("REDUCE") == 1, ops
    assert ops.count("ELEMENT_WISE_LOGICAL_GREATER_THAN") == 1, ops
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=TOL, atol=TOL)
