"""MATRIX_MULTIPLY_INTEGER_TO_FLOAT's fused activation (kompute_dml's extension,
MatrixMultiplyIntegerToFloatDesc.fused_activation): the bits of the product and then the activation's
own operator, on the tensor-core kernel's epilogue (FLOAT32 outputs: here `coopmat-emulated`, the same
kernel with each cooperative-matrix operation as subgroup code; `coopmat` where the device has it) and
as a dispatch after the product elsewhere (the policy's family on lavapipe, FLOAT16 outputs); outputs
poisoned, bytes outside unchanged; the refusals; ONNX Runtime's DynamicQuantizeMatMul / MatMulIntegerToFloat
-> Gelu as one fused chain (fusion_quant.py), equal to the unfused nodes."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from helpers import assert_outside_unchanged, force_kernel, place, poison_against, read_logical

import kompute_dml as kdml

DT = kdml.DataType
ACTS = {
    "gelu": kdml.ActivationGeluDesc(None, None),
    "gelu_tanh": kdml.ActivationGeluDesc(None, None, approximate="tanh"),
    "relu": kdml.ActivationReluDesc(None, None),
    "sigmoid": kdml.ActivationSigmoidDesc(None, None),
    "leaky_relu": kdml.ActivationLeakyReluDesc(None, None, alpha=0.125),
    "hard_swish": kdml.ActivationHardSwishDesc(None, None, alpha=1 / 6, beta=0.5),
}


@pytest.fixture(params=["auto", "coopmat-emulated", "coopmat"])
def kernel(request, dev, monkeypatch):
    if request.param == "coopmat" and "cooperative_matrix" not in dev.capabilities:
        pytest.skip("the device has no cooperative_matrix capability")
    force_kernel(monkeypatch, dev, request.param)
    dev.caches.pop("compiled", None)  # (compile_cached keys by descriptor, not by the forced family)
    return request.param


def operands(rng, m, k, n):
    a = rng.integers(0, 256, (m, k)).astype(np.uint8)
    b = rng.integers(-128, 128, (k, n)).astype(np.int8)
    b_scale = rng.uniform(0.001, 0.05, n).astype(np.float32)
    bias = rng.uniform(-1, 1, n).astype(np.float32)
    return a, b, np.float32(0.02), b_scale, np.uint8(rng.integers(100, 156)), bias


def chain(dev, ops, act, out_dt):
    """The product, then the activation's own operator on it: the fused result's definition."""
    y = kdml.matmul_integer_to_float(*ops[:4], ops[4], None, ops[5], out_data_type=out_dt, device=dev)
    desc = dataclasses.replace(act, input_tensor=y.desc, output_tensor=y.desc)
    out = dev.empty(y.desc)
    dev.compile(desc).execute([y], [out])
    return out.numpy()


@pytest.mark.parametrize("act", list(ACTS))
@pytest.mark.parametrize("out_dt", [DT.FLOAT32, DT.FLOAT16])
@pytest.mark.parametrize("mkn", [(17, 32, 24), (64, 256, 96), (130, 64, 33)])
def test_fused_equals_the_chain(dev, rng, kernel, act, out_dt, mkn):
    ops = operands(rng, *mkn)
    want = chain(dev, ops, ACTS[act], out_dt)
    out, _ = place(dev, rng, kdml.TensorDesc(out_dt, want.shape))
    before = poison_against(out, want, rng)
    kdml.matmul_integer_to_float(*ops[:4], ops[4], None, ops[5], out_data_type=out_dt, out=out,
                                 fused_activation=ACTS[act], device=dev)
    got = read_logical(assert_outside_unchanged(out, before), out.offset, out.desc)
    bits = np.uint32 if out_dt == DT.FLOAT32 else np.uint16
    bad = np.argwhere(got.view(bits) != want.view(bits))
    assert bad.size == 0, f"{len(bad)} of {got.size} differ, first {bad[:3].tolist()}"


def _compiled(dev, act, out_dt, m=64, k=64, n=32):
    u8, f32 = DT.UINT8, DT.FLOAT32
    desc = kdml.MatrixMultiplyIntegerToFloatDesc(
        kdml.TensorDesc(u8, (m, k)), kdml.TensorDesc(f32 if out_dt == f32 else out_dt, (1, 1)), None,
        kdml.TensorDesc(DT.INT8, (k, n)), kdml.TensorDesc(out_dt, (1, n)), None, None, kdml.TensorDesc(out_dt, (m, n)),
        fused_activation=act)
    return dev.compile(desc)


def test_where_the_activation_runs(dev, kernel):
    """In the tensor-core kernel (its ACT_KIND specialization constant) for FLOAT32 outputs; a second
    dispatch for FLOAT16 outputs and on the other families."""
    op32, op16 = _compiled(dev, ACTS["gelu"], DT.FLOAT32), _compiled(dev, ACTS["gelu"], DT.FLOAT16)
    if kernel == "auto" and dev.device_type == "cpu":
        assert len(op32.plans) == 2 and op32.variants[1].startswith("gelu_f32")
    if kernel != "auto":
        assert len(op32.plans) == 1 and op32.variants[0].startswith("mmc8"), op32.variants
        assert op32.plans[0].spec[11] == 10  # ACT_GELU
    assert len(op16.plans) == 2 and op16.variants[1].startswith("gelu_f16"), op16.variants


def test_refusals(dev):
    with pytest.raises(kdml.UnsupportedError, match="fused_activation"):
        _compiled(dev, kdml.ActivationSoftmaxDesc(None, None), DT.FLOAT32)
    f = kdml.TensorDesc(DT.FLOAT32, (64, 32))
    with pytest.raises(kdml.InvalidArgumentError, match="fused_activation"):
        _compiled(dev, kdml.ActivationGeluDesc(f, f), DT.FLOAT32)


# ---- ONNX: the quantized feed-forward's product -> Gelu ---------------------------------------
@pytest.mark.parametrize("product", ["DynamicQuantizeMatMul", "MatMulIntegerToFloat"])
def test_onnx_product_gelu_chain(dev, rng, kernel, product):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto as T
    from onnx import helper, numpy_helper

    from kompute_dml.onnx_backend import Backend

    m, k, n = 24, 64, 48
    b = rng.integers(-128, 128, (k, n)).astype(np.int8)
    inits = {"B": b, "bs": rng.uniform(0.001, 0.05, n).astype(np.float32), "bias": rng.uniform(-1, 1, n).astype(np.float32)}
    if product == "DynamicQuantizeMatMul":
        node = helper.make_node(product, ["A", "B", "bs", "", "bias"], ["y"], domain="com.microsoft")
        feeds = {"A": (rng.standard_normal((2, m, k)) * 2).astype(np.float32)}
        a_type = T.FLOAT
    else:
        inits["as"] = np.array(0.02, np.float32)
        node = helper.make_node(product, ["A", "B", "as", "bs", "", "", "bias"], ["y"], domain="com.microsoft")
        feeds = {"A": rng.integers(0, 256, (2, m, k)).astype(np.uint8)}
        a_type = T.UINT8
    gelu = helper.make_node("Gelu", ["y"], ["z"], domain="com.microsoft")
    graph = helper.make_graph([node, gelu], "g", [helper.make_tensor_value_info("A", a_type, [2, m, k])],
                              [helper.make_tensor_value_info("z", T.FLOAT, [2, m, n])],
                              [numpy_helper.from_array(v, name) for name, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    onnx.checker.check_model(model)
    fused = Backend.prepare(model, "CPU", kdml_device=dev)
    (got,) = fused.run(feeds)
    assert f"{product}+Gelu" in fused.summary()
    (want,) = Backend.prepare(model, "CPU", kdml_device=dev, fuse=False).run(feeds)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
