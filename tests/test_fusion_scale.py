"""MatMul -> Mul(., constant scalar) / Div(., power of two) as one GEMM with alpha
(kompute_dml/onnx_backend/fusion_scale.py): ranks 2-4, a transposed K operand as an attention's
scores have it, a batch that broadcasts, both Mul operand orders; float32 (the unfused nodes' bits,
in the whole-graph program and node by node, and a float64 numpy reference within tolerance) and
float16 (within its rounding of the reference); a Div by a non-power of two, a fed scale or a scale
of a higher rank run the nodes one by one; an attention chain too large for the fused kernel
(DevicePolicy.attention_fused_max_flops) runs its MatMul -> Mul as this GEMM (Fusion.within)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

from kompute_dml.onnx_backend import Backend  # noqa: E402
from kompute_dml.onnx_backend.fusion_scale import check_matmul_scale, exact_reciprocal  # noqa: E402

N = helper.make_node
ELEM = {np.float32: T.FLOAT, np.float16: T.FLOAT16}


def _model(dt, a_shape, b_shape, op="Mul", c=0.125, side=0, trans_b=False, fed=False, c_shape=()):
    """y = MatMul(a, b) (b given as its transpose where trans_b, a Transpose node making the view)
    -> op(., c); c an initializer, or an input where fed."""
    nodes, inits = [], []
    inputs = [helper.make_tensor_value_info("a", ELEM[dt], list(a_shape))]
    b_in = [*b_shape[:-2], b_shape[-1], b_shape[-2]] if trans_b else list(b_shape)
    inputs.append(helper.make_tensor_value_info("b", ELEM[dt], b_in))
    b = "b"
    if trans_b:
        perm = list(range(len(b_shape)))
        perm[-2:] = perm[-1], perm[-2]
        nodes.append(N("Transpose", ["b"], ["bt"], perm=perm))
        b = "bt"
    nodes.append(N("MatMul", ["a", b], ["p"]))
    if fed:
        inputs.append(helper.make_tensor_value_info("c", ELEM[dt], list(c_shape)))
    else:
        inits.append(numpy_helper.from_array(np.full(c_shape, c, dt), "c"))
    nodes.append(N(op, ["p", "c"] if side == 0 else ["c", "p"], ["y"]))
    g = helper.make_graph(nodes, "scale", inputs, [helper.make_tensor_value_info("y", ELEM[dt], None)],
                          initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def _feeds(rng, dt, a_shape, b_shape, trans_b=False):
    a = rng.standard_normal(a_shape).astype(dt)
    b = rng.standard_normal(b_shape).astype(dt)
    return {"a": a, "b": np.ascontiguousarray(np.swapaxes(b, -1, -2)) if trans_b else b}, a, b


def _bits(a):
    return a.view(f"u{a.dtype.itemsize}")


def _same(y, want, op="Mul"):
    """The same bits; a Div's NaNs compared as NaNs (ELEMENT_WISE_DIVIDE writes 0x7FC00000, GEMM's
    product the device's NaN: docs/elementwise.md leaves a NaN's payload unspecified)."""
    if op == "Div":
        nan = np.isnan(want)
        return np.array_equal(np.isnan(y), nan) and np.array_equal(_bits(y)[~nan], _bits(want)[~nan])
    return np.array_equal(_bits(y), _bits(want))


def _reference(a, b, op, c):
    """float64 einsum (numpy's batch broadcasting), then the scale."""
    p = np.einsum("...mk,...kn->...mn", a.astype(np.float64), b.astype(np.float64))
    return p * c if op == "Mul" else p / c


SHAPES = {  # a, b (b as the product reads it), trans_b
    "rank-2": ((9, 24), (24, 13), False),
    "rank-3": ((2, 7, 16), (2, 16, 11), False),
    "rank-4-transposed-k": ((2, 3, 10, 8), (2, 3, 8, 10), True),  # Q [b, h, s, d] x K^T [b, h, d, s]
    "rank-3-weight": ((2, 5, 12), (12, 6), False),  # a batch that broadcasts: a rank-2 B
    "batch-broadcast": ((2, 3, 4, 8), (1, 3, 8, 5), False),
}
OPS = {  # op, c, side
    "mul": ("Mul", 0.35355339, 0),
    "mul-scale-first": ("Mul", -1.7, 1),
    "div-power-of-two": ("Div", 8.0, 0),
    "div-small-power": ("Div", 0.25, 0),
}


@pytest.mark.parametrize("op_name", OPS)
@pytest.mark.parametrize("shape_name", SHAPES)
def test_product_and_scale_are_one_gemm_with_the_unfused_bits(rng, shape_name, op_name):
    a_shape, b_shape, trans_b = SHAPES[shape_name]
    op, c, side = OPS[op_name]
    model = _model(np.float32, a_shape, b_shape, op, c, side, trans_b)
    feeds, a, b = _feeds(rng, np.float32, a_shape, b_shape, trans_b)
    a.reshape(-1)[:3] = (np.inf, -0.0, 3e38)
    feeds["a"] = a
    rep = Backend.prepare(model, "CPU")
    assert f"MatMul+{op} x1 -> GEMM" in rep.summary()
    (y,) = rep.run(feeds)  # the whole-graph plan
    dispatches = rep.last_run.dispatches
    rep.state.node_by_node = True
    (eager,) = rep.run(feeds)
    unfused = Backend.prepare(model, "CPU", fuse=False)
    (want,) = unfused.run(feeds)
    assert dispatches == unfused.last_run.dispatches - 1
    assert y.shape == want.shape and _same(y, want, op) and _same(eager, want, op)
    with np.errstate(all="ignore"):
        ref = _reference(a, b, op, np.float32(c))
    finite = np.isfinite(ref)
    assert np.array_equal(np.isfinite(y), finite)
    np.testing.assert_allclose(y[finite], ref[finite], rtol=1e-5, atol=1e-5)


def test_dispatch_count_is_one_per_pair(rng):
    model = _model(np.float32, (4, 8), (8, 6))
    feeds, _a, _b = _feeds(rng, np.float32, (4, 8), (8, 6))
    rep, unfused = Backend.prepare(model, "CPU"), Backend.prepare(model, "CPU", fuse=False)
    rep.run(feeds)
    unfused.run(feeds)
    assert (rep.last_run.dispatches, unfused.last_run.dispatches) == (1, 2)


@pytest.mark.parametrize("op,c", [("Mul", 0.125), ("Mul", 0.3), ("Div", 4.0)])
def test_float16_product_and_scale(rng, op, c):
    a_shape, b_shape = (2, 3, 9, 16), (2, 3, 16, 9)
    model = _model(np.float16, a_shape, b_shape, op, c, trans_b=True)
    feeds, a, b = _feeds(rng, np.float16, a_shape, b_shape, trans_b=True)
    rep = Backend.prepare(model, "CPU")
    (y,) = rep.run(feeds)
    assert y.dtype == np.float16 and rep.last_run.dispatches == 1, rep.summary()
    np.testing.assert_allclose(y.astype(np.float64), _reference(a, b, op, float(np.float16(c))), rtol=2e-3, atol=2e-2)


def test_exact_reciprocal():
    assert exact_reciprocal(8.0) == 0.125 and exact_reciprocal(-0.5) == -2.0 and exact_reciprocal(2.0 ** -126) == 2.0 ** 126
    assert exact_reciprocal(3.0) is None and exact_reciprocal(0.0) is None and exact_reciprocal(np.inf) is None
    assert exact_reciprocal(2.0 ** 127) is None  # 2^-127 is a float32 subnormal
    assert exact_reciprocal(2.0 ** -128) is None  # 2^128 overflows float32


@pytest.mark.parametrize("case", ["div by 3", "fed scale", "zero scale", "scale of a higher rank", "half precision"])
def test_other_scales_run_node_by_node(rng, case):
    a_shape, b_shape = (4, 8), (8, 6)
    kw = {"div by 3": dict(op="Div", c=3.0), "fed scale": dict(fed=True), "zero scale": dict(c=0.0),
          "scale of a higher rank": dict(c_shape=(1, 1, 1))}.get(case, {})
    model = _model(np.float32, a_shape, b_shape, **kw)
    feeds, _a, _b = _feeds(rng, np.float32, a_shape, b_shape)
    if case == "fed scale":
        feeds["c"] = np.array(0.5, np.float32)
    half = case == "half precision"
    rep = Backend.prepare(model, "CPU", allow_half_precision=half)
    (y,) = rep.run(feeds)
    (want,) = Backend.prepare(model, "CPU", fuse=False, allow_half_precision=half).run(feeds)
    assert np.array_equal(_bits(y), _bits(want)) and y.shape == want.shape
    assert rep.last_run.dispatches >= 2
    if case in ("div by 3", "fed scale", "zero scale"):
        assert not rep.fusions.by_carrier
        g = rep.graph
        reason = check_matmul_scale(rep, [g.node[0], g.node[1]])
        assert reason and (case != "div by 3" or "not exact" in reason), reason
    else:
        assert "ran unfused" in " ".join(rep.last_run.events)


B, H, S, D = 2, 3, 12, 8  # Whisper's encoder attention, small


def _whisper_attention(rng, dt=np.float32, transposed=False):
    """MatMul(Q [B, H, S, D], K^T [B, H, D, S] through a Transpose) -> Mul(., 1 / sqrt D) -> Softmax
    -> MatMul(., V), no mask: Whisper's encoder as torch.onnx.export writes its scores
    (`transposed`: and the Transpose(0, 2, 1, 3) to [B, S, H, D] after it, as the export has it)."""
    ins = [helper.make_tensor_value_info(n, ELEM[dt], [B, H, S, D]) for n in "qkv"]
    nodes = [N("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]), N("MatMul", ["q", "kt"], ["sc"]),
             N("Mul", ["sc", "c"], ["scaled"]), N("Softmax", ["scaled"], ["p"], axis=-1),
             N("MatMul", ["p", "v"], ["pv" if transposed else "y"])]
    if transposed:
        nodes.append(N("Transpose", ["pv"], ["y"], perm=[0, 2, 1, 3]))
    g = helper.make_graph(nodes, "attn", ins, [helper.make_tensor_value_info("y", ELEM[dt], None)],
                          initializer=[numpy_helper.from_array(np.array(D ** -0.5, dt), "c")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    return model, {n: rng.standard_normal((B, H, S, D)).astype(dt) for n in "qkv"}


def test_the_attention_pattern_still_matches_first(rng, monkeypatch):
    model, feeds = _whisper_attention(rng)
    rep = Backend.prepare(model, "CPU")
    # fused at any size (a GPU's policy runs large attentions unfused)
    monkeypatch.setattr(rep.device, "policy", dataclasses.replace(rep.device.policy, attention_fused_max_flops=float("inf"),
                                                                  attention_fused_min_rows=1))
    (f,) = rep.fusions.by_carrier.values()
    assert f.pattern.operator == "MULTIHEAD_ATTENTION" and [w.pattern.name for w in f.within] == ["MatMul+Mul"]
    rep.run(feeds)
    assert rep.last_run.dispatches == 1


@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("node_by_node", [False, True])
def test_large_attention_runs_its_product_and_scale_as_one_gemm(rng, monkeypatch, node_by_node, transposed):
    """Past DevicePolicy.attention_fused_max_flops the attention runs unfused, its MatMul -> Mul
    as GEMM with alpha: one dispatch fewer than the nodes, the same bits (`transposed`: the chain
    ending in Transpose holds MatMul -> Mul and MatMul -> Transpose, fusion_transpose.py)."""
    model, feeds = _whisper_attention(rng, transposed=transposed)
    rep = Backend.prepare(model, "CPU")
    monkeypatch.setattr(rep.device, "policy", dataclasses.replace(rep.device.policy, attention_fused_max_flops=0))
    rep.state.node_by_node = node_by_node
    (y,) = rep.run(feeds)
    events = " ".join(rep.last_run.events)
    assert "ran unfused" in events and "attention_fused_max_flops" in events, events
    unfused = Backend.prepare(model, "CPU", fuse=False)
    unfused.state.node_by_node = node_by_node
    (want,) = unfused.run(feeds)
    assert np.array_equal(_bits(y), _bits(want))
    if not node_by_node:  # (RunStats.dispatches: the whole-graph program's)
        assert (rep.last_run.dispatches, unfused.last_run.dispatches) == (3, 4)  # (the Transpose: a view)
    q, k, v = (feeds[n].astype(np.float64) for n in "qkv")
    s = q @ np.swapaxes(k, -1, -2) * np.float32(D ** -0.5)
    p = np.exp(s - s.max(-1, keepdims=True))
    ref = (p / p.sum(-1, keepdims=True)) @ v
    np.testing.assert_allclose(y, ref.transpose(0, 2, 1, 3) if transposed else ref, rtol=1e-5, atol=1e-5)
