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


def _sum_bound(a, w, bias):
    """The float32 error bound of a @ w + bias against float64: K products and the bias summed, within
    (K + 2) roundings of the terms' magnitudes (the scale's multiplication, exact or one more, on top)."""
    return (K + 2) * 2.0 ** -24 * (np.abs(a.astype(np.float64)) @ np.abs(w.astype(np.float64))
                                   + np.abs(bias.astype(np.float64)))


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
        bound = _sum_bound(a, w, bias)
    finite = np.isfinite(ref) & np.isfinite(bound)
    assert np.all(np.abs(y[finite] - ref[finite]) <= bound[finite])


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


def _scaled_model(scale, side, mul_side, dt=np.float32, rng=None):
    """MatMul -> Add(bias) -> Mul(., scale): Whisper's query projection."""
    model, w, bias = _model(dt, (2, 7, K), (M,), side, rng=rng)
    g = model.graph
    g.node[1].output[0] = "s"
    g.node.append(N("Mul", ["s", "c"] if mul_side == 0 else ["c", "s"], ["y"]))
    g.initializer.append(numpy_helper.from_array(np.array(scale, dt), "c"))
    return model, w, bias


@pytest.mark.parametrize("side,mul_side", [(0, 0), (1, 1)])
@pytest.mark.parametrize("scale", [0.125, 4.0, 0.3])
def test_product_bias_and_scale(rng, scale, side, mul_side):
    """A power-of-two scale joins the GEMM (Alpha = Beta = scale) with the unfused bits; another
    scale runs as its own Mul after the fused product and bias."""
    model, w, bias = _scaled_model(scale, side, mul_side)
    a = rng.standard_normal((2, 7, K)).astype(np.float32) * 3
    a.reshape(-1)[:2] = (np.inf, -0.0)
    rep = Backend.prepare(model, "CPU")
    (y,) = rep.run({"a": a})
    (want,) = Backend.prepare(model, "CPU", fuse=False).run({"a": a})
    assert np.array_equal(_bits(y), _bits(want))
    exact = scale != 0.3
    assert rep.last_run.dispatches == (1 if exact else 2)
    assert ("MatMul+Add+Mul x1 -> GEMM" in rep.summary()) == exact
    with np.errstate(all="ignore"):
        ref = (a.astype(np.float64) @ w.astype(np.float64) + bias.astype(np.float64)) * np.float32(scale)
        bound = _sum_bound(a, w, bias) * scale
    finite = np.isfinite(ref) & np.isfinite(bound)
    assert np.all(np.abs(y[finite] - ref[finite]) <= bound[finite])


def test_float16_product_bias_and_scale(rng):
    model, w, bias = _scaled_model(0.125, 0, 0, np.float16)
    a = rng.standard_normal((2, 7, K)).astype(np.float16)
    rep = Backend.prepare(model, "CPU")
    (y,) = rep.run({"a": a})
    assert y.dtype == np.float16 and rep.last_run.dispatches == 1  # (rounded once, the unfused nodes twice)
    ref = (a.astype(np.float64) @ w.astype(np.float64) + bias.astype(np.float64)) / 8
    np.testing.assert_allclose(y.astype(np.float64), ref, rtol=2e-3, atol=3e-3)
