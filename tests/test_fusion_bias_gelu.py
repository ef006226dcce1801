"""MatMul -> Add(constant bias) -> GELU as one GEMM dispatch with GELU as its FusedActivation
(kompute_dml/onnx_backend/fusion_bias_gelu.py): the exact chain (x / sqrt 2 by Div or Mul, operands
on either side), the tanh chain, a Gelu node (opset 20 and com.microsoft, both forms) and
com.microsoft BiasGelu, float32 and float16, ranks 2-3. Each gives, in the whole-graph program and
node by node, the bits of the dispatches it replaces (the model prepared without these patterns:
fusion_bias.py's GEMM, then the GELU; BiasGelu's MatMul, Add and GELU in float32), and agrees with
float64 numpy; a fed bias or half precision leaves the nodes to the shorter chains."""

from __future__ import annotations

import math

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

import kompute_dml as kdml  # noqa: E402
from kompute_dml.onnx_backend import Backend, fusion_match, fusions  # noqa: E402
from kompute_dml.onnx_backend.fusion_bias_gelu import matmul_bias_gelu_patterns  # noqa: E402
from kompute_dml.ops.gemm import keeps_speed_with_activation  # noqa: E402

N = helper.make_node
ELEM = {np.float32: T.FLOAT, np.float16: T.FLOAT16}
K, M = 24, 40
FORMS = ["div", "mul", "mul_swapped", "div_dynamo", "tanh", "gelu20", "gelu20_tanh", "ms_gelu", "bias_gelu", "fast_gelu"]


def _c(name, value, dt):
    return numpy_helper.from_array(np.asarray(value, dt), name)


def _gelu_nodes(form, x, dt):
    """The GELU of `x` as `form` writes it -> (nodes, constants, opsets beyond the default)."""
    if form in ("div", "mul", "mul_swapped", "div_dynamo"):
        head = N("Div", [x, "sqrt2"], ["g0"]) if form.startswith("div") else \
            N("Mul", [x, "rsqrt2"] if form == "mul" else ["rsqrt2", x], ["g0"])
        nodes = [head, N("Erf", ["g0"], ["g1"]), N("Add", ["one", "g1"], ["g2"])]
        if form == "div_dynamo":  # the dynamo exporter's order: the 0.5 first
            nodes += [N("Mul", ["half", "g2"], ["g3"]), N("Mul", [x, "g3"], ["y"])]
        else:
            nodes += [N("Mul", ["g2", x] if form == "mul" else [x, "g2"], ["g3"]), N("Mul", ["half", "g3"], ["y"])]
        return nodes, [_c("sqrt2", math.sqrt(2), dt), _c("rsqrt2", math.sqrt(0.5), dt), _c("one", 1, dt),
                       _c("half", 0.5, dt)], []
    if form == "tanh":
        nodes = [N("Mul", [x, "half"], ["h"]), N("Pow", [x, "three"], ["t0"]), N("Mul", ["t0", "cb"], ["t1"]),
                 N("Add", [x, "t1"], ["t2"]), N("Mul", ["t2", "ca"], ["t3"]), N("Tanh", ["t3"], ["t4"]),
                 N("Add", ["t4", "one"], ["t5"]), N("Mul", ["h", "t5"], ["y"])]
        a, b = (float(np.float32(v)) for v in (math.sqrt(2 / math.pi), 0.044715))
        return nodes, [_c("half", 0.5, dt), _c("three", 3, dt), _c("cb", b, dt), _c("ca", a, dt), _c("one", 1, dt)], []
    if form.startswith("gelu20"):
        return [N("Gelu", [x], ["y"], approximate="tanh" if form.endswith("tanh") else "none")], [], []
    return [N("Gelu", [x], ["y"], domain="com.microsoft")], [], [helper.make_opsetid("com.microsoft", 1)]


def _model(dt, form, a_shape, rng, fed_bias=False):
    w = (rng.standard_normal((K, M)) * 0.5).astype(dt)
    bias = rng.standard_normal(M).astype(dt)
    inits = [numpy_helper.from_array(w, "w")] + ([] if fed_bias else [numpy_helper.from_array(bias, "bias")])
    inputs = [helper.make_tensor_value_info("a", ELEM[dt], list(a_shape))]
    if fed_bias:
        inputs.append(helper.make_tensor_value_info("bias", ELEM[dt], [M]))
    if form in ("bias_gelu", "fast_gelu"):
        op = "BiasGelu" if form == "bias_gelu" else "FastGelu"
        nodes = [N("MatMul", ["a", "w"], ["p"]), N(op, ["p", "bias"], ["y"], domain="com.microsoft")]
        consts, extra = [], [helper.make_opsetid("com.microsoft", 1)]
    else:
        nodes, consts, extra = _gelu_nodes(form, "x", dt)
        nodes = [N("MatMul", ["a", "w"], ["p"]), N("Add", ["bias", "p"] if form == "mul" else ["p", "bias"], ["x"]),
                 *nodes]
    g = helper.make_graph(nodes, "ffn", inputs, [helper.make_tensor_value_info("y", ELEM[dt], None)],
                          initializer=inits + consts)
    opset = 20 if form.startswith("gelu20") else 17
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset), *extra], ir_version=10), w, bias


def _bits(a):
    return a.view(f"u{a.dtype.itemsize}")


def _two_dispatches(model, feeds, monkeypatch):
    """The model's bits without fusion_bias_gelu's patterns (its GEMM, then the GELU)."""
    ours = {p.name for p in matmul_bias_gelu_patterns(fusions.Pattern)}
    with monkeypatch.context() as m:
        m.setattr(fusion_match, "PATTERNS", tuple(p for p in fusions.PATTERNS if p.name not in ours))
        rep = Backend.prepare(model, "CPU")
        (want,) = rep.run(feeds)
    return want, rep.last_run.dispatches


@pytest.mark.parametrize("dt", [np.float32, np.float16], ids=["f32", "f16"])
@pytest.mark.parametrize("form", FORMS)
def test_one_gemm_with_the_two_dispatches_bits(rng, monkeypatch, dt, form):
    a_shape = (3, 7, K) if form in ("div", "tanh", "bias_gelu", "fast_gelu") else (9, K)
    model, w, bias = _model(dt, form, a_shape, rng)
    a = (rng.standard_normal(a_shape) * 2).astype(dt)
    a.reshape(-1)[:2] = (np.inf, np.nan)
    rep = Backend.prepare(model, "CPU")
    (y,) = rep.run({"a": a})
    # one GEMM with its GELU where the device's product kernel keeps its speed with it (lavapipe; on the
    # H200 the float16 tensor cores run the product, then the GELU: the two dispatches' bits either way)
    fused = keeps_speed_with_activation(kdml.default_device(), dt == np.float16, math.prod(a_shape[:-1]), M, K, 1)
    assert rep.last_run.dispatches == (1 if fused else 2), rep.summary()
    assert "-> GEMM" in rep.summary() and ("Gelu" in rep.summary() or "Erf" in rep.summary() or "Tanh" in rep.summary())
    rep.state.node_by_node = True
    (eager,) = rep.run({"a": a})
    want, dispatches = _two_dispatches(model, {"a": a}, monkeypatch)
    assert np.array_equal(_bits(eager), _bits(y))
    if form in ("bias_gelu", "fast_gelu"):  # MatMul, then the node's Add and GELU: FLOAT16's product rounded twice
        assert dispatches == 3
        assert dt == np.float16 or np.array_equal(_bits(y), _bits(want))
    else:
        assert dispatches == 2 and np.array_equal(_bits(y), _bits(want))
    with np.errstate(all="ignore"):
        x = a.astype(np.float64) @ w.astype(np.float64) + bias.astype(np.float64)
        if "tanh" in form or form == "fast_gelu":
            ref = 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
        else:
            ref = 0.5 * x * np.vectorize(math.erfc)(-x / math.sqrt(2))
    finite = np.isfinite(ref)
    assert np.isnan(y[~finite]).all()
    tol = 1e-4 if dt == np.float32 else 3e-2
    np.testing.assert_allclose(y[finite].astype(np.float64), ref[finite], rtol=tol, atol=tol)


@pytest.mark.parametrize("case", ["fed bias", "half precision"])
def test_other_chains_run_in_pieces(rng, case):
    model, _, _ = _model(np.float32, "div", (5, K), rng, fed_bias=case == "fed bias")
    a = rng.standard_normal((5, K)).astype(np.float32)
    feeds = {"a": a, "bias": rng.standard_normal(M).astype(np.float32)} if case == "fed bias" else {"a": a}
    rep = Backend.prepare(model, "CPU", allow_half_precision=case == "half precision")
    (y,) = rep.run(feeds)
    assert rep.last_run.dispatches > 1
    (want,) = Backend.prepare(model, "CPU", fuse=False, allow_half_precision=case == "half precision").run(feeds)
    np.testing.assert_allclose(y, want, rtol=1e-3 if case == "half precision" else 1e-5, atol=1e-3)


@pytest.mark.parametrize("form", FORMS)
def test_slower_kernels_run_the_pieces(rng, monkeypatch, form):
    """Where the product's kernel would be slower with the activation (keeps_speed_with_activation:
    the tensor cores, the 128 x 128 and 128 x 64 tiles) the two pieces run, with the same bits: the
    product with its bias, then GELU (BiasGelu too: its bias the product's C, not a third dispatch)."""
    model, _, _ = _model(np.float32, form, (4, 9, K), rng)
    a = rng.standard_normal((4, 9, K)).astype(np.float32)
    (fused,) = Backend.prepare(model, "CPU").run({"a": a})
    monkeypatch.setattr("kompute_dml.onnx_backend.fusion_bias.keeps_speed_with_activation", lambda *args: False)
    rep = Backend.prepare(model, "CPU")
    (y,) = rep.run({"a": a})
    assert rep.last_run.dispatches == 2 and np.array_equal(_bits(y), _bits(fused))


def test_the_batch_of_rows_is_the_product_asked(rng, monkeypatch):
    """The kernel choice is asked for the product the kernel runs: a [batch, rows, K] input over shared
    weights is one product of batch x rows (functional gemm), not a batch of short matrices. Under
    a GPU's tile rule, 8 x 65 rows (ViT's 65 tokens) times N = 1024 over K = 256 takes 64 x 64 tiles as
    520 rows (fused: one dispatch) where 8 matrices of 65 rows would have taken the 128 x 64 tile."""
    import dataclasses

    from kompute_dml.functional.gemm import planned_product
    from kompute_dml.ops.gemm_blocks import gemm_block

    assert gemm_block("parallel", False, False, 65, 1024, 8, 256) == "8x4"  # what the batch's shape would pick
    assert gemm_block("parallel", False, True, 520, 1024, 1, 256) == "4"
    f32 = kdml.DataType.FLOAT32
    assert planned_product(kdml.TensorDesc(f32, (8, 65, 256)), kdml.TensorDesc(f32, (256, 1024)),
                           kdml.TensorDesc(f32, (1024,))) == (520, 1024, 256, 1)
    model = _model(np.float32, "div", (8, 65, 256), rng)[0]
    g = model.graph
    w = (rng.standard_normal((256, 1024)) * 0.05).astype(np.float32)
    g.initializer[0].CopyFrom(numpy_helper.from_array(w, "w"))
    g.initializer[1].CopyFrom(numpy_helper.from_array(rng.standard_normal(1024).astype(np.float32), "bias"))
    a = rng.standard_normal((8, 65, 256)).astype(np.float32)
    rep = Backend.prepare(model, "CPU")
    monkeypatch.setattr(rep.device, "policy", dataclasses.replace(rep.device.policy, gemm_tiles="parallel"))
    (y,) = rep.run({"a": a})
    assert rep.last_run.dispatches == 1
    (want,) = Backend.prepare(model, "CPU", fuse=False).run({"a": a})
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)


def test_which_kernels_keep_their_speed(dev, monkeypatch):
    import dataclasses

    from kompute_dml.ops.gemm import keeps_speed_with_activation

    gpu = dataclasses.replace(dev.policy, gemm_tiles="parallel", gemm_family="coopmat", gemm_kernel="auto")
    monkeypatch.setattr(dev, "policy", gpu)
    assert keeps_speed_with_activation(dev, False, 512, 1024, 256, 1)  # 64 x 64 tiles
    assert keeps_speed_with_activation(dev, False, 1024, 1024, 256, 1)  # the 128 x 64 tile alone, but K < 512: fused
    assert not keeps_speed_with_activation(dev, False, 1576, 3072, 768, 1)  # the 128 x 64 tile over K >= 512
    assert not keeps_speed_with_activation(dev, False, 4096, 4096, 4096, 1)  # 128 x 128 tiles
    assert not keeps_speed_with_activation(dev, True, 4096, 4096, 4096, 1)  # tensor cores
    monkeypatch.setattr(dev, "policy", dataclasses.replace(gpu, gemm_act_blocks=("2", "4", "8")))
    assert keeps_speed_with_activation(dev, False, 4096, 4096, 4096, 1)
