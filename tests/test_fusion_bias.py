"""MatMul -> Add(constant bias) as one GEMM dispatch (kompute_dml/onnx_backend/fusion_bias.py):
the product on either side of the Add, ranks 2-4, the bias as [N] or with leading ones, float32
(the unfused nodes' bits, in the whole-graph program and node by node) and float16 (within its
rounding of a float64 numpy reference); a fed bias, a bias along another axis, one that broadcasts
the product up, or half precision run the two nodes one by one with their own bits."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

from kompute_dml.onnx_backend import Backend  # noqa: E402

N = helper.make_node
ELEM = {np.float32: T.FLOAT, np.float16: T.FLOAT16}
K, M = 24, 20


def _model(dt, a_shape, bias_shape, side=0, fed_bias=False, rng=None):
    rng = rng or np.random.default_rng(3)
    w = rng.standard_normal((K, M)).astype(dt)
    bias = rng.standard_normal(bias_shape).astype(dt)
    add_in = ["p", "bias"] if side == 0 else ["bias", "p"]
    inits = [numpy_helper.from_array(w, "w")] + ([] if fed_bias else [numpy_helper.from_array(bias, "bias")])
    inputs = [helper.make_tensor_value_info("a", ELEM[dt], list(a_shape))]
    if fed_bias:
        inputs.append(helper.make_tensor_value_info("bias", ELEM[dt], list(bias_shape)))
    g = helper.make_graph([N("MatMul", ["a", "w"], ["p"]), N("Add", add_in, ["y"])], "bias", inputs,
                          [helper.make_tensor_value_info("y", ELEM[dt], None)], initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=10), w, bias


def _bits(a):
    return a.view(f"u{a.dtype.itemsize}")


@pytest.mark.parametrize("a_shape,bias_shape,side", [
    ((5, K), (M,), 0), ((5, K), (1, M), 1), ((2, 7, K), (M,), 1), ((2, 7, K), (1, 1, M), 0),
    ((2, 3, 4, K), (M,), 0)])
def test_product_and_bias_are_one_gemm_with_the_unfused_bits(rng, a_shape, bias_shape, side):
    model, w, bias = _model(np.float32, a_shape, bias_shape, side)
    a = rng.standard_normal(a_shape).astype(np.float32)
    a.reshape(-1)[:3] = (np.inf, -0.0, 3e38)
    rep = Backend.prepare(model, "CPU")
    (y,) = rep.run({"a": a})
    assert rep.last_run.dispatches == 1 and "MatMul+Add x1 -> GEMM" in rep.summary()
    rep.state.node_by_node = True
    (eager,) = rep.run({"a": a})
    unfused = Backend.prepare(model, "CPU", fuse=False)
    (want,) = unfused.run({"a": a})
    assert unfused.last_run.dispatches == 2
    assert np.array_equal(_bits(y), _bits(want)) and np.array_equal(_bits(eager), _bits(want))
    with np.errstate(all="ignore"):
        ref = a.astype(np.float64) @ w.astype(np.float64) + bias.astype(np.float64)
    finite = np.isfinite(ref)
    np.testing.assert_allclose(y[finite], ref[finite], rtol=1e-5, atol=1e-5)


def test_float16_product_and_bias(rng):
    model, w, bias = _model(np.float16, (3, 9, K), (M,))
    a = rng.standard_normal((3, 9, K)).astype(np.float16)
    rep = Backend.prepare(model, "CPU")
    (y,) = rep.run({"a": a})
    assert y.dtype == np.float16 and rep.last_run.dispatches == 1
    ref = a.astype(np.float64) @ w.astype(np.float64) + bias.astype(np.float64)
    np.testing.assert_allclose(y.astype(np.float64), ref, rtol=2e-3, atol=2e-2)


@pytest.mark.parametrize("case", ["fed bias", "bias along rows", "bias broadcasts the product", "half precision"])
def test_other_sums_run_node_by_node(rng, case):
    a_shape, bias_shape, fed = (4, K), (M,), False
    if case == "fed bias":
        fed = True
    elif case == "bias along rows":
        bias_shape = (4, 1)
    elif case == "bias broadcasts the product":
        bias_shape = (1, 1, M)  # of a rank-2 product: the sum is rank 3
    model, _w, bias = _model(np.float32, a_shape, bias_shape, fed_bias=fed)
    feeds = {"a": rng.standard_normal(a_shape).astype(np.float32)}
    if fed:
        feeds["bias"] = bias
    half = case == "half precision"
    rep = Backend.prepare(model, "CPU", allow_half_precision=half)
    (y,) = rep.run(feeds)
    (want,) = Backend.prepare(model, "CPU", fuse=False, allow_half_precision=half).run(feeds)
    assert np.array_equal(_bits(y), _bits(want)) and y.shape == want.shape
    assert rep.last_run.dispatches >= 2
    if case in ("fed bias", "bias along rows"):
        assert not rep.fusions.by_carrier
    else:
        assert "ran unfused" in " ".join(rep.last_run.events)


def _siblings(dt, rng, widths=(16, 24, 8), extra_reader=False):
    """A [2, 5, K] read by one MatMul -> Add(bias) per width (the bias on alternate sides, as [N]
    or [1, 1, N]), each result reshaped to heads of 4 and transposed, as attention's Q, K and V."""
    nodes, inits, outs, ws = [], [], [], []
    for i, n in enumerate(widths):
        w = rng.standard_normal((K, n)).astype(dt)
        b = rng.standard_normal((n,) if i % 2 else (1, 1, n)).astype(dt)
        ws.append((w, b))
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(b, f"b{i}"),
                  numpy_helper.from_array(np.array([2, 5, n // 4, 4], np.int64), f"s{i}")]
        nodes += [N("MatMul", ["a", f"w{i}"], [f"p{i}"]), N("Add", [f"p{i}", f"b{i}"] if i % 2 else [f"b{i}", f"p{i}"], [f"q{i}"]),
                  N("Reshape", [f"q{i}", f"s{i}"], [f"r{i}"]), N("Transpose", [f"r{i}"], [f"y{i}"], perm=[0, 2, 1, 3])]
        outs.append(helper.make_tensor_value_info(f"y{i}", ELEM[dt], None))
    if extra_reader:  # the first product read by another node too: its chain is not a GEMM of its own
        nodes.append(N("Relu", ["p0"], ["z"]))
        outs.append(helper.make_tensor_value_info("z", ELEM[dt], None))
    g = helper.make_graph(nodes, "siblings", [helper.make_tensor_value_info("a", ELEM[dt], [2, 5, K])], outs,
                          initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=10), ws


@pytest.mark.parametrize("dt", [np.float32, np.float16], ids=["f32", "f16"])
def test_linear_siblings_run_as_one_gemm(dt):
    """MatMul -> Add chains on one A (attention's Q, K and V projections) run as one GEMM over the
    weights side by side (onnx_backend/product_groups.py), their results column views of it through
    the heads' Reshape and Transpose: a float64 numpy reference within the type's rounding, and, as
    each output element's sum over k is its own GEMM's, the ungrouped run's bits (lavapipe's tiled
    GEMM), in the whole-graph program and node by node; one dispatch for the three."""
    rng = np.random.default_rng(11)
    model, ws = _siblings(dt, rng)
    a = rng.standard_normal((2, 5, K)).astype(dt)
    grouped, single = Backend.prepare(model, "CPU"), Backend.prepare(model, "CPU", group_products=False)
    want = single.run({"a": a})
    tol = 1e-5 if dt == np.float32 else 4e-3
    for (w, b), got in zip(ws, want):
        ref = (a.astype(np.float64) @ w.astype(np.float64) + b.reshape(-1)).reshape(2, 5, -1, 4).transpose(0, 2, 1, 3)
        np.testing.assert_allclose(got.astype(np.float64), ref, rtol=tol, atol=tol * np.abs(ref).max())
    for node_by_node in (False, True):
        grouped.state.node_by_node = node_by_node
        for g, w in zip(grouped.run({"a": a}), want):
            assert g.shape == w.shape and _bits(g).tobytes() == _bits(w).tobytes()
    assert len({id(g) for g in grouped.product_groups.values()}) == 1
    assert grouped.last_run.dispatches < single.last_run.dispatches
    assert next(iter(grouped.state.plans.values())).dispatches == 1


def test_linear_siblings_that_are_no_group():
    """A product that another node also reads, a lone chain, and weights of another K stay
    GEMMs of their own (the same outputs either way)."""
    from kompute_dml.onnx_backend.product_groups import find_linear_groups

    rng = np.random.default_rng(12)
    model, _ = _siblings(np.float32, rng, extra_reader=True)
    rep = Backend.prepare(model, "CPU")
    assert set(rep.product_groups) == {"q1", "q2"}  # the first chain's product has two readers
    model, _ = _siblings(np.float32, rng, widths=(16,))
    assert find_linear_groups(Backend.prepare(model, "CPU", group_products=False)) == {}
    model, _ = _siblings(np.float32, rng, widths=(16, 24))
    w1 = next(i for i in model.graph.initializer if i.name == "w1")
    w1.CopyFrom(numpy_helper.from_array(rng.standard_normal((K + 1, 24)).astype(np.float32), "w1"))
    assert find_linear_groups(Backend.prepare(model, "CPU", group_products=False)) == {}
