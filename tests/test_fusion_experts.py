"""Gather(experts' weights, slots' experts) -> MatMul as one GEMM over every expert and a GATHER_ND of
each slot's own (kompute_dml/onnx_backend/fusion_experts.py), transformers' "batched_mm" mixture of
experts, the gathered weights on either side of the MatMul (Mixtral's left, gpt-oss's right), gathered by
Gather or (the dynamo exporter's) GatherND of indices with a last dimension of 1: float32
and float16, indices of rank 1 and 2, negative indices, the weights an initializer or an input,
whole-graph and node by node, against float64 numpy's products and the unfused nodes; inputs of more
than one column (row), a Gather along another axis and half precision run the nodes one by one."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

from kompute_dml.onnx_backend import Backend  # noqa: E402

N = helper.make_node
ELEM = {np.float32: T.FLOAT, np.float16: T.FLOAT16}


def _model(dt, w, slots, k, cols=1, axis=0, w_input=False, right=False, nd=False):
    """right: MatMul(x, gathered) with x (slots, cols, k), W (E, k, M); nd: GatherND(w, idx[..., None]) as the
    dynamo exporter writes the Gather."""
    gather = ([N("Unsqueeze", ["idx", "last"], ["idx1"]), N("GatherND", ["w", "idx1"], ["g"])] if nd else
              [N("Gather", ["w", "idx"], ["g"], axis=axis)])
    nodes = [*gather, N("MatMul", ["x", "g"] if right else ["g", "x"], ["y"])]
    ins = [helper.make_tensor_value_info("idx", T.INT64, list(slots)),
           helper.make_tensor_value_info("x", ELEM[dt], [*slots, cols, k] if right else [*slots, k, cols])]
    inits = [numpy_helper.from_array(np.array([-1], np.int64), "last")] if nd else []
    if w_input:
        ins.append(helper.make_tensor_value_info("w", ELEM[dt], list(w.shape)))
    else:
        inits.append(numpy_helper.from_array(w, "w"))
    g = helper.make_graph(nodes, "experts", ins, [helper.make_tensor_value_info("y", ELEM[dt], None)], initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def _reference(w, idx, x, right=False):
    w64, x64 = w.astype(np.float64), x.astype(np.float64).reshape(-1, *x.shape[-2:])
    if right:
        return np.stack([x64[s] @ w64[i] for s, i in enumerate(idx.reshape(-1))]).reshape(*idx.shape, x.shape[-2], w.shape[2])
    return np.stack([w64[i] @ x64[s] for s, i in enumerate(idx.reshape(-1))]).reshape(*idx.shape, w.shape[1], x.shape[-1])


@pytest.mark.parametrize("nd", [False, True], ids=["gather", "gather_nd"])
@pytest.mark.parametrize("right", [False, True], ids=["left", "right"])
@pytest.mark.parametrize("dt", [np.float32, np.float16], ids=["f32", "f16"])
@pytest.mark.parametrize("experts,m,k,slots,w_input", [
    (4, 24, 16, (10,), False),  # Mixtral's top-2 of 4: slots = tokens x 2
    (3, 7, 5, (3, 2), False),  # indices of rank 2, odd sizes
    (8, 16, 32, (33,), True),  # the weights fed at run time
])
def test_every_expert_in_one_gemm(rng, dt, experts, m, k, slots, w_input, right, nd):
    w = rng.standard_normal((experts, k, m) if right else (experts, m, k)).astype(dt)
    idx = rng.integers(-experts, experts, size=slots).astype(np.int64)  # negative indices count from the end
    x = rng.standard_normal((*slots, 1, k) if right else (*slots, k, 1)).astype(dt)
    model = _model(dt, w, slots, k, w_input=w_input, right=right, nd=nd)
    feeds = {"idx": idx, "x": x, **({"w": w} if w_input else {})}
    rep = Backend.prepare(model, "CPU")
    (y,) = rep.run(feeds)
    assert f"{'GatherND' if nd else 'Gather'}+MatMul x1 -> GEMM" in rep.summary() and not rep.last_run.events
    rep.state.node_by_node = True
    (eager,) = rep.run(feeds)
    (unfused,) = Backend.prepare(model, "CPU", fuse=False).run(feeds)
    ref = _reference(w, idx % experts, x, right)
    tol = 1e-5 if dt == np.float32 else 1e-2
    assert y.shape == ref.shape == unfused.shape and y.dtype == dt
    np.testing.assert_allclose(y.astype(np.float64), ref, rtol=tol, atol=tol)
    np.testing.assert_array_equal(eager, y)
    np.testing.assert_allclose(unfused.astype(np.float64), ref, rtol=tol, atol=tol)


@pytest.mark.parametrize("case", ["two columns", "two rows, right", "axis 1", "half precision"])
def test_other_products_run_node_by_node(rng, case):
    experts, m, k, slots = 3, 6, 4, (5,)
    cols = 2 if case.startswith("two") else 1
    axis = 1 if case == "axis 1" else 0
    right = case.endswith("right")
    w = rng.standard_normal((experts, k, m) if right else (experts, m, k) if axis == 0 else (m, experts, k)).astype(np.float32)
    idx = rng.integers(0, experts, size=slots).astype(np.int64)
    x = rng.standard_normal((*slots, cols, k) if right else (*slots, k, cols)).astype(np.float32)
    model = _model(np.float32, w, slots, k, cols, axis, right=right)
    if axis == 1:  # Gather along axis 1: (m, slots, k) @ (m, k, 1), the batch m
        model.graph.input[1].CopyFrom(helper.make_tensor_value_info("x", T.FLOAT, [m, k, cols]))
        x = rng.standard_normal((m, k, cols)).astype(np.float32)
    rep = Backend.prepare(model, "CPU", allow_half_precision=case == "half precision")
    (y,) = rep.run({"idx": idx, "x": x})
    if case == "axis 1":
        assert "Gather+MatMul" not in rep.summary()
        want = np.take(w, idx, axis=1).astype(np.float64) @ x.astype(np.float64)
    else:  # matched, then the pieces at run time
        assert "ran unfused" in " ".join(rep.last_run.events)
        want = _reference(w, idx, x, right)
    tol = 1e-2 if case == "half precision" else 1e-5
    np.testing.assert_allclose(y.astype(np.float64), want, rtol=tol, atol=tol)


def test_constant_indices(rng):
    """The slots' experts a constant (the weights fed): uploaded once under its name, then seen as
    the slots' column."""
    experts, m, k, slots = 3, 5, 4, (2, 3)
    w = rng.standard_normal((experts, m, k)).astype(np.float32)
    idx = rng.integers(0, experts, size=slots).astype(np.int64)
    x = rng.standard_normal((*slots, k, 1)).astype(np.float32)
    model = _model(np.float32, w, slots, k, w_input=True)
    model.graph.input.remove(next(i for i in model.graph.input if i.name == "idx"))
    model.graph.initializer.append(numpy_helper.from_array(idx, "idx"))
    rep = Backend.prepare(model, "CPU")
    for _ in range(2):
        (y,) = rep.run({"x": x, "w": w})
        assert "Gather+MatMul x1 -> GEMM" in rep.summary() and not rep.last_run.events
        np.testing.assert_allclose(y.astype(np.float64), _reference(w, idx, x), rtol=1e-5, atol=1e-5)
