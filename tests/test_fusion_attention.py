"""The exported graphs' attention chain as one MULTIHEAD_ATTENTION dispatch (onnx_backend/
fusion_attention.py): MatMul(Q, K^T) | FusedMatMul -> [Mul | Div by a constant] -> [Add mask] ->
Softmax -> [no-op Cast]* -> MatMul(., V) over the Transposes torch.onnx.export writes, against
onnxruntime's CPU provider (node by node and as a whole-graph plan), and the chains left unfused:
a scale that is not a constant, a Softmax over another axis, a score read elsewhere, a Cast that
changes the type; batch dimensions that broadcast run unfused at run time, still correct."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import compiled_variants

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

from kompute_dml.onnx_backend import VULKAN, Backend  # noqa: E402

B, H, S, D = 2, 3, 5, 8


def projections(rng, nodes, const, sizes, dt, rank=4, trans_b=False):
    """x [b, s, h*d] projected to q2, k2 (K^T unless trans_b) and v2 by three constant weights (`const`
    adds an initializer), split into heads by Reshape and Transpose as torch exports it; rank 3: one
    head of h*d."""
    b, s, h, d = sizes
    hid = h * d
    for p in "qkv":
        nodes.append(helper.make_node("MatMul", ["x", const(f"w{p}", (rng.standard_normal((hid, hid)) * 0.3).astype(dt))],
                                      [f"{p}0"]))
        shape = [b, s, h, d] if rank == 4 else [b, s, hid]
        nodes.append(helper.make_node("Reshape", [f"{p}0", const(f"s{p}", np.array(shape, np.int64))], [f"{p}1"]))
        perm = {"q": [0, 2, 1, 3], "k": [0, 2, 1, 3] if trans_b else [0, 2, 3, 1], "v": [0, 2, 1, 3]}[p]
        perm3 = [0, 2, 1] if p == "k" and not trans_b else [0, 1, 2]
        nodes.append(helper.make_node("Transpose", [f"{p}1"], [f"{p}2"], perm=perm if rank == 4 else perm3))


def graph(rng, *, head="MatMul", scale="Mul", mask=True, casts=1, rank=4, trans_b=False, axis=-1, extra_read=False,
          scale_input=False, cast_to=T.FLOAT, k_batch=B, dt=np.float32):
    """x [B, S, H*D] projected to Q, K, V by three constant weights, split into heads by Reshape and
    Transpose as torch exports it, then the chain; the result transposed back to [B, S, H*D]."""
    et = helper.np_dtype_to_tensor_dtype(np.dtype(dt))
    nodes, inits = [], []

    def const(name, arr):
        inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    hid = H * D
    projections(rng, nodes, const, (B, S, H, D), dt, rank, trans_b)
    kin = "k2"
    if k_batch != B:  # K of batch 1 broadcast in the product
        nodes.append(helper.make_node("Slice", ["k2", const("z", np.array([0], np.int64)), const("o", np.array([1], np.int64)),
                                                const("ax", np.array([0], np.int64))], ["k3"]))
        kin = "k3"
    if head == "FusedMatMul":
        nodes.append(helper.make_node("FusedMatMul", ["q2", kin], ["sc"], domain="com.microsoft", alpha=0.5,
                                      transB=int(trans_b)))
    else:
        nodes.append(helper.make_node("MatMul", ["q2", kin], ["sc"]))
    cur = "sc"
    inputs = [helper.make_tensor_value_info("x", et, [B, S, hid])]
    if scale:
        c = "c"
        if scale_input:
            inputs.append(helper.make_tensor_value_info("c", et, []))
        else:
            const("c", np.array(np.sqrt(D), dt))
        nodes.append(helper.make_node(scale, [cur, c], ["scaled"]))
        cur = "scaled"
    if mask:
        m = np.where(np.tril(np.ones((S, S), bool)), 0.0, np.finfo(dt).min).astype(dt)
        nodes.append(helper.make_node("Add", [cur, const("mask", m[None, None] if rank == 4 else m[None])], ["masked"]))
        cur = "masked"
    nodes.append(helper.make_node("Softmax", [cur], ["p0"], axis=axis))
    cur = "p0"
    for i in range(casts):
        nodes.append(helper.make_node("Cast", [cur], [f"p{i + 1}"], to=cast_to if i == 0 else et))
        cur = f"p{i + 1}"
    nodes.append(helper.make_node("MatMul", [cur, "v2"], ["o0"]))
    nodes.append(helper.make_node("Transpose", ["o0"], ["o1"], perm=[0, 2, 1, 3] if rank == 4 else [0, 1, 2]))
    nodes.append(helper.make_node("Reshape", ["o1", const("so", np.array([B, S, hid], np.int64))], ["y"]))
    outputs = [helper.make_tensor_value_info("y", et, None)]
    if extra_read:
        outputs.append(helper.make_tensor_value_info("sc", et, None))
    g = helper.make_graph(nodes, "g", inputs, outputs, initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
                             ir_version=10)


# float32 against onnxruntime's float32: the scores of these random projections reach about +-20, where
# either side's rounding (summation order, FMA) moves a softmax input by ~1e-5 relative to 1 + |value|,
# the weights and the output with it; 150 seeds per case (lavapipe): |ours - onnxruntime| / (1 +
# |onnxruntime|) median 0.7-1.7e-6, largest 5.3e-6 (gpt2), 1.1e-5 (rank 3: one head of H * D sums three
# times the products), 3.2e-5 (no mask); CI saw 2.2e-5 at rank 3. A wrong mask, scale or head layout is
# off by 1e-2 and more.
TOL = 1e-4


def run(rng, model, fused: bool, dt=np.float32, tol=TOL, feeds_extra=None):
    feeds = {"x": rng.standard_normal((B, S, H * D)).astype(dt), **(feeds_extra or {})}
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    rep = Backend.prepare(model, "CPU")
    carriers = [p for p in rep.placement if p.operator.startswith("MULTIHEAD_ATTENTION (fused")]
    assert bool(carriers) == fused, rep.summary()
    assert {p.target for p in rep.placement} <= {VULKAN, "host"}, rep.summary()
    for _ in range(2):  # node by node, then the whole-graph plan
        got = rep.run(feeds)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=tol, atol=tol)
    return rep


CASES = {
    "gpt2": dict(),
    "llama-two-casts": dict(casts=2),
    "whisper-no-mask": dict(mask=False, casts=0),
    "div": dict(scale="Div", casts=0),
    "no-scale": dict(scale="", casts=0),
    "fused-matmul": dict(head="FusedMatMul", scale="", casts=0),
    "fused-matmul-transb": dict(head="FusedMatMul", scale="Mul", trans_b=True, casts=0),
    "rank-3": dict(rank=3, casts=0),
}


@pytest.mark.parametrize("name", CASES)
def test_fused(rng, name):
    run(rng, graph(rng, **CASES[name]), fused=True)


def test_fused_float16(rng):
    run(rng, graph(rng, dt=np.float16, cast_to=T.FLOAT16), fused=True, dt=np.float16, tol=2e-2)


UNFUSED = {
    "scale-not-constant": (dict(scale_input=True), {"c": np.array(2.5, np.float32)}),
    "softmax-axis": (dict(axis=2, mask=False, casts=0), None),
    "scores-read-elsewhere": (dict(extra_read=True), None),
    "cast-changes-type": (dict(cast_to=T.FLOAT16, casts=2), None),
}


@pytest.mark.parametrize("name", UNFUSED)
def test_left_unfused(rng, name):
    kw, extra = UNFUSED[name]
    run(rng, graph(rng, **kw), fused=False, feeds_extra=extra, tol=1e-3 if name == "cast-changes-type" else TOL)


def test_broadcast_batch_runs_unfused_at_run_time(rng):
    """K of batch 1: matched at prepare, refused by the run (Unfused), its nodes one by one."""
    model = graph(rng, k_batch=1)
    rep = Backend.prepare(model, "CPU")
    feeds = {"x": rng.standard_normal((B, S, H * D)).astype(np.float32)}
    (got,) = rep.run(feeds)  # the first run plans the signature: the chain's note is its event
    assert any("ran unfused: shapes" in e for e in rep.last_run.events), rep.last_run.events
    (want,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    np.testing.assert_allclose(got, want, rtol=TOL, atol=TOL)


def test_beyond_the_policys_flops_the_chain_runs_unfused(rng, monkeypatch):
    """Past DevicePolicy.attention_fused_max_flops (the device's measured crossover: the fused
    kernel is slower on large attention) the matched chain runs as its nodes, with the note."""
    import dataclasses

    model = graph(rng)
    rep = Backend.prepare(model, "CPU")
    dev = rep.device
    monkeypatch.setattr(dev, "policy", dataclasses.replace(dev.policy, attention_fused_max_flops=4 * B * H * S * S * D - 1))
    feeds = {"x": rng.standard_normal((B, S, H * D)).astype(np.float32)}
    (got,) = rep.run(feeds)
    assert any("ran unfused" in e and "attention_fused_max_flops" in e for e in rep.last_run.events), rep.last_run.events
    (want,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    np.testing.assert_allclose(got, want, rtol=TOL, atol=TOL)


@pytest.mark.parametrize("mask", [True, False])
def test_from_the_policys_gemm_flops_a_float32_chain_runs_as_two_gemms(rng, monkeypatch, mask):
    """From DevicePolicy.attention_gemm_min_flops, past the fused kernels' limit, the float32 chain
    runs on MULTIHEAD_ATTENTION's two-GEMM kernel (ops/attention_gemm.py: its mask as the scores'
    C), not as its nodes."""
    import dataclasses

    model = graph(rng, mask=mask)
    rep = Backend.prepare(model, "CPU")
    dev = rep.device
    flops = 4 * B * H * S * S * D
    monkeypatch.setattr(dev, "policy", dataclasses.replace(dev.policy, attention_fused_max_flops=flops - 1,
                                                           attention_gemm_min_flops=flops))
    monkeypatch.setitem(dev.caches, "compiled", {})
    feeds = {"x": rng.standard_normal((B, S, H * D)).astype(np.float32)}
    (got,) = rep.run(feeds)
    assert not any("ran unfused" in e for e in rep.last_run.events), rep.last_run.events
    variants = compiled_variants("MultiheadAttention", dev)
    assert variants and all(v.startswith("gemmx_f32_") for v in variants), variants
    (want,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    np.testing.assert_allclose(got, want, rtol=TOL, atol=TOL)


def test_below_the_policys_rows_the_chain_runs_unfused(rng, monkeypatch):
    """Fewer query rows than DevicePolicy.attention_fused_min_rows (a GPU's decoding step) run the
    chain as its nodes, with the note."""
    import dataclasses

    model = graph(rng)
    rep = Backend.prepare(model, "CPU")
    monkeypatch.setattr(rep.device, "policy", dataclasses.replace(rep.device.policy, attention_fused_min_rows=S + 1))
    feeds = {"x": rng.standard_normal((B, S, H * D)).astype(np.float32)}
    (got,) = rep.run(feeds)
    assert any("attention_fused_min_rows" in e for e in rep.last_run.events), rep.last_run.events
    (want,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    np.testing.assert_allclose(got, want, rtol=TOL, atol=TOL)


def undeclared(model):
    """The model with its input x behind a com.microsoft FastGelu, whose output onnx's shape inference
    cannot type: every value after it has no declared type or rank, as in onnxruntime's optimized graphs."""
    g = model.graph
    g.input[0].name = "x_in"
    g.node.insert(0, helper.make_node("FastGelu", ["x_in"], ["x"], domain="com.microsoft"))
    return model


@pytest.mark.parametrize("rank", [4, 3, "4, undeclared"])
def test_the_transpose_after_the_attention_joins_it(rng, rank, monkeypatch):
    """Rank 4: the exported Transpose(0, 2, 1, 3) after the product with V is part of the chain (the
    operator writes [batch, seq, heads, head] packed), so the Reshape after it is a view: no COPY
    in the plan (there was one per attention). Rank 3 (one head: an identity Transpose) keeps the
    chain without it. A rank the graph does not declare is checked at run time. (The policy fuses
    every size here: a GPU's keeps these few rows unfused.)"""
    import dataclasses

    model = graph(rng, rank=3 if rank == 3 else 4, casts=0)
    if rank == "4, undeclared":
        model, rank = undeclared(model), 4
    rep = Backend.prepare(model, "CPU")
    monkeypatch.setattr(rep.device, "policy", dataclasses.replace(rep.device.policy, attention_fused_min_rows=1,
                                                                  attention_fused_max_flops=1e12))
    names = [f.pattern.name for f in rep.fusions.by_carrier.values()]
    assert any(n.endswith("+Transpose") for n in names) == (rank == 4), names
    feeds = {model.graph.input[0].name: rng.standard_normal((B, S, H * D)).astype(np.float32)}
    (want,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    rep.run(feeds)  # the plan
    with rep.device.profile() as p:
        (got,) = rep.run(feeds)
    assert not any("ran unfused" in e for e in rep.last_run.events), rep.last_run.events
    assert [r.scope for r in p.rows if r.operator == "COPY"] == []
    np.testing.assert_allclose(got, want, rtol=TOL, atol=TOL)


@pytest.mark.parametrize(("dt", "half", "want"), [(np.float16, False, "mhac16xh"), (np.float32, False, "mha_f32"),
                                                  (np.float32, True, "mhac32xh")])
def test_float16_chain_keeps_float16_weights(rng, monkeypatch, dt, half, want):
    """On the tensor-core kernel (its emulation here) a float16 chain, whose Softmax rounds its
    weights to float16, runs the float16-weight variant; a float32 chain another kernel, or under
    allow_half_precision the tensor-core kernel's float32 variant (float16 as it loads)."""
    import dataclasses


    model = graph(rng, dt=dt, cast_to=T.FLOAT16 if dt == np.float16 else T.FLOAT)
    rep = Backend.prepare(model, "CPU", allow_half_precision=half)
    monkeypatch.setattr(rep.device, "policy", dataclasses.replace(rep.device.policy, attention_kernel="coopmat-emulated",
                                                                  attention_fused_min_rows=1))
    monkeypatch.setitem(rep.device.caches, "compiled", {})
    feeds = {"x": rng.standard_normal((B, S, H * D)).astype(dt)}
    (got,) = rep.run(feeds)
    variants = compiled_variants("MultiheadAttention", rep.device)
    assert len(variants) == 1 and variants.pop().startswith(want), variants
    (ref,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    if half:  # float16 inputs to products and attention (scores of tens here): the flag's per-row cosine
        g, r = got.astype(np.float64).reshape(-1, got.shape[-1]), ref.astype(np.float64).reshape(-1, got.shape[-1])
        cos = (g * r).sum(1) / np.linalg.norm(g, axis=1) / np.linalg.norm(r, axis=1)
        assert cos.min() >= 0.999, cos.min()
    else:
        tol = 2e-2 if dt == np.float16 else TOL
        np.testing.assert_allclose(got.astype(np.float64), ref.astype(np.float64), rtol=tol, atol=tol)


@pytest.mark.parametrize("dt", [np.float32, np.float16])
def test_windows_of_rank_5_fuse(rng, dt, monkeypatch):
    """Attention within windows (Twins, NesT, Hiera): Q, K, V of [batch, windows, heads, seq, d], views of one
    packed projection whose batch and windows merge: one dispatch over batch x windows. (The policy fuses
    every size here: a GPU's keeps these few rows unfused.)"""
    import dataclasses

    w, et = 4, helper.np_dtype_to_tensor_dtype(np.dtype(dt))
    inits = [numpy_helper.from_array((rng.standard_normal((H * D, 3 * H * D)) * 0.3).astype(dt), "wqkv"),
             numpy_helper.from_array(np.array([B, w, S, 3, H, D], np.int64), "s6"),
             numpy_helper.from_array(np.array(D ** -0.5, dt), "c")]
    nodes = [helper.make_node("MatMul", ["x", "wqkv"], ["qkv"]), helper.make_node("Reshape", ["qkv", "s6"], ["r"]),
             helper.make_node("Transpose", ["r"], ["t"], perm=[3, 0, 1, 4, 2, 5]),  # [3, B, W, H, S, D]
             helper.make_node("Split", ["t"], ["q1", "k1", "v1"], axis=0, num_outputs=3)]
    nodes += [helper.make_node("Squeeze", [f"{p}1", "ax0"], [f"{p}2"]) for p in "qkv"]
    inits.append(numpy_helper.from_array(np.array([0], np.int64), "ax0"))
    nodes += [helper.make_node("Transpose", ["k2"], ["kt"], perm=[0, 1, 2, 4, 3]),
              helper.make_node("MatMul", ["q2", "kt"], ["sc"]), helper.make_node("Mul", ["sc", "c"], ["scaled"]),
              helper.make_node("Softmax", ["scaled"], ["p"], axis=-1), helper.make_node("MatMul", ["p", "v2"], ["y"])]
    g = helper.make_graph(nodes, "windows", [helper.make_tensor_value_info("x", et, [B, w, S, H * D])],
                          [helper.make_tensor_value_info("y", et, None)], initializer=inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)
    feeds = {"x": rng.standard_normal((B, w, S, H * D)).astype(dt)}
    (want,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    rep = Backend.prepare(model, "CPU")
    monkeypatch.setattr(rep.device, "policy", dataclasses.replace(rep.device.policy, attention_fused_min_rows=1,
                                                                  attention_fused_max_flops=1e12))
    for _ in range(2):
        (got,) = rep.run(feeds)
        assert not any("ran unfused" in e for e in rep.last_run.events), rep.last_run.events
        tol = TOL if dt == np.float32 else 2e-2
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol)
    assert rep.last_run.dispatches and not rep.last_run.cpu_segments
