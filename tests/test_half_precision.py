"""Backend.prepare(..., allow_half_precision=True), DirectML's
DML_EXECUTION_FLAG_ALLOW_HALF_PRECISION_COMPUTATION (onnx_backend/half_precision.py): float32
MatMul, Gemm, FusedMatMul and Conv computed in float16 with float32 accumulation. Each node type
against a numpy reference of that arithmetic (operands rounded to float16, sums in float64,
the result rounded to float16); the float16 weights uploaded once and the float32 ones never; the
model families within a per-row cosine of 0.99 of onnxruntime's float32 run, their outputs changed
by the flag, and the flag off the very bits of a prepare without it; the plugin EP's provider
option and `kompute-dml run --allow-half-precision`."""

from __future__ import annotations

import re

import numpy as np
import pytest
from helpers import cosines

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

from kompute_dml.onnx_backend import CPU, Backend  # noqa: E402

F16 = np.float16


def _f16(a):
    return np.asarray(a, np.float32).astype(F16).astype(np.float64)


def _conv_ref(x, w, b, pad):
    """NCHW convolution, stride 1, in float64."""
    x = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    n, _, h, wd = x.shape
    co, _, kh, kw = w.shape
    out = np.zeros((n, co, h - kh + 1, wd - kw + 1))
    for i in range(kh):
        for j in range(kw):
            out += np.einsum("nchw,oc->nohw", x[:, :, i:i + out.shape[2], j:j + out.shape[3]], w[:, :, i, j])
    return out + b[None, :, None, None]


def _model(rng):
    w1 = rng.standard_normal((24, 16)).astype(np.float32) / 3
    w2 = rng.standard_normal((8, 16)).astype(np.float32) / 3  # Gemm's B, transposed
    c2 = rng.standard_normal(8).astype(np.float32)
    wc = rng.standard_normal((4, 3, 3, 3)).astype(np.float32) / 3
    bc = rng.standard_normal(4).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "W1"], ["a"]),
             helper.make_node("Gemm", ["a", "W2", "C2"], ["g"], transB=1, alpha=0.5, beta=2.0),
             helper.make_node("FusedMatMul", ["a", "a"], ["f"], domain="com.microsoft", transB=1, alpha=0.25),
             helper.make_node("Conv", ["img", "Wc", "Bc"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a"], ["r"])]
    inits = [numpy_helper.from_array(v, n) for v, n in ((w1, "W1"), (w2, "W2"), (c2, "C2"), (wc, "Wc"), (bc, "Bc"))]
    g = helper.make_graph(nodes, "half", [helper.make_tensor_value_info("x", T.FLOAT, ["n", 24]),
                                          helper.make_tensor_value_info("img", T.FLOAT, ["n", 3, 6, 6])],
                          [helper.make_tensor_value_info(o, T.FLOAT, None) for o in ("a", "g", "f", "c", "r")],
                          initializer=inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
                              ir_version=9)
    return model, dict(w1=w1, w2=w2, c2=c2, wc=wc, bc=bc)


def _within_a_float16_ulp(got, want, mag, k):
    """got is float16-representable and within one float16 ulp of want (the larger of the two's, a
    rounding across a power of two), plus float32 accumulation's gamma_k over `mag` (sum |x w| of
    each output's k products): a sum that cancels can be off by more than its own ulp (seed
    1567552023: 0.00039601 against 0.00039554, 2 ulps, with 24 terms of magnitude about 1)."""
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, got.astype(F16).astype(np.float32))
    ulp = np.maximum(np.spacing(np.abs(want).astype(F16)), np.spacing(np.abs(got).astype(F16))).astype(np.float64)
    gamma = k * 2.0 ** -24 / (1 - k * 2.0 ** -24)
    assert np.all(np.abs(got - want) <= ulp + gamma * mag + 1e-7), np.max(np.abs(got - want) / (ulp + gamma * mag))


def test_each_product_computes_in_float16_with_float32_accumulation(rng, monkeypatch):
    # Conv takes the flag on the tensor-core kernel (float16 operands converted as its tiles load,
    # float32 sums and result: handlers_conv.py), forced here to its emulated family
    monkeypatch.setenv("KDML_CONV_KERNEL", "coopmat-emulated")
    model, p = _model(rng)
    x = rng.standard_normal((5, 24)).astype(np.float32)
    img = rng.standard_normal((2, 3, 6, 6)).astype(np.float32)
    rep = Backend.prepare(model, "CPU", allow_half_precision=True)
    assert rep.graph_mode
    a, g, f, c, r = rep.run({"x": x, "img": img})
    a_ref = _f16(_f16(x) @ _f16(p["w1"]))
    _within_a_float16_ulp(a, a_ref, np.abs(_f16(x)) @ np.abs(_f16(p["w1"])), 24)
    a16 = _f16(a)  # the later products read the device's float16 `a` (cast once, exact)
    _within_a_float16_ulp(g, _f16(0.5 * (a16 @ _f16(p["w2"]).T) + 2 * _f16(p["c2"])),
                          0.5 * (np.abs(a16) @ np.abs(_f16(p["w2"])).T) + 2 * np.abs(_f16(p["c2"])), 16 + 2)
    _within_a_float16_ulp(f, _f16(0.25 * (a16 @ a16.T)), 0.25 * (np.abs(a16) @ np.abs(a16).T), 16)
    c_ref = _conv_ref(_f16(img), _f16(p["wc"]), p["bc"].astype(np.float64), 1)
    c_mag = _conv_ref(np.abs(_f16(img)), np.abs(_f16(p["wc"])), np.abs(p["bc"]).astype(np.float64), 1)
    gamma = (5 * 27 + 2) * 2.0 ** -24  # docs/convolution.md: the tensor cores' bound, K = 27
    assert c.dtype == np.float32 and np.all(np.abs(c - c_ref) <= gamma / (1 - gamma) * c_mag + 2.0 ** -126)
    np.testing.assert_array_equal(r, np.maximum(a, 0))  # everything else in float32, on the product's result
    # the weights went up once, as float16; their float32 form never
    keys = set(rep.state.device_constants)
    assert {"W1#<f2", "W2#<f2", "C2#<f2"} <= keys and not keys & {"W1", "W2", "C2", "Wc"}
    from kompute_dml.onnx_backend.handlers_conv import _HALF_WEIGHTS  # the Conv weight, float16, once
    assert list(_HALF_WEIGHTS[rep]) == ["Wc"]
    rep.run({"x": x, "img": img})
    assert rep.last_run.constant_uploads == 0
    # without the flag: float32 products, not float16-representable in general
    off = Backend.prepare(model, "CPU").run({"x": x, "img": img})
    assert not np.array_equal(off[0], off[0].astype(F16).astype(np.float32))
    assert all(not np.array_equal(u, v) for u, v in zip(off[:4], (a, g, f, c)))


def test_float16_models_and_integer_products_are_unchanged_by_the_flag(rng):
    w = numpy_helper.from_array((rng.standard_normal((8, 4)) / 3).astype(F16), "W")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", T.FLOAT16, ["n", 8])],
                          [helper.make_tensor_value_info("y", T.FLOAT16, None)], initializer=[w])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    x = rng.standard_normal((3, 8)).astype(F16)
    (on,), (off,) = (Backend.prepare(model, "CPU", allow_half_precision=h).run({"x": x}) for h in (True, False))
    np.testing.assert_array_equal(on.view(np.uint16), off.view(np.uint16))


def test_a_bad_flag_is_refused():
    model, _ = _model(np.random.default_rng(0))
    with pytest.raises(TypeError, match="allow_half_precision"):
        Backend.prepare(model, "CPU", allow_half_precision="yes")


FAMILIES = ("gpt2", "llama", "vit", "whisper-encoder", "distilbert-int8", "resnet18", "mobilenet-v3-small")


@pytest.mark.parametrize("name", FAMILIES)
def test_family_with_the_flag_is_close_to_float32_and_without_it_unchanged(name):
    pytest.importorskip("torch", reason="torch (requirements-model.txt) exports the models")
    pytest.importorskip("transformers", reason="transformers (requirements-model.txt) defines the models")
    from kompute_dml.bench import families

    pytest.importorskip(families.FAMILIES[name].requires, reason="it defines the architecture")
    path = str(families.build(name, "tiny"))
    on = Backend.prepare(path, "CPU", allow_half_precision=True)
    off, default = Backend.prepare(path, "CPU", allow_half_precision=False), Backend.prepare(path, "CPU")
    assert not any(p.target == CPU for p in on.placement)
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    for batch, seq in ((1, 9), (3, 17)):
        feeds = families.feeds(name, batch, seq, np.random.default_rng(batch))
        (want,) = sess.run(None, feeds)
        (y_on,), (y_off,), (y_default,) = on.run(feeds), off.run(feeds), default.run(feeds)
        assert (on.last_run.uploads, on.last_run.downloads) == (1, 1)
        np.testing.assert_array_equal(y_off.view(np.uint32), y_default.view(np.uint32))
        assert off.last_run.dispatches == default.last_run.dispatches
        # an int8 model's float products are its attention's: fused, MULTIHEAD_ATTENTION takes the flag only
        # on the tensor-core kernel (docs/attention.md: no dispatch more); but GPUs run the chain unfused
        # below DevicePolicy.attention_fused_min_rows query rows (its events say so)
        fused = not any("ran unfused" in e for e in off.last_run.events)
        if "int8" in name and fused:
            assert on.last_run.dispatches == off.last_run.dispatches
            if not on.device.policy.attention_kernel.startswith("coopmat"):
                assert np.array_equal(y_on, y_off)
        else:
            assert off.last_run.dispatches < on.last_run.dispatches and not np.array_equal(y_on, y_off)
        c_on, c_off = cosines(y_on, want).min(), cosines(y_off, want).min()
        assert c_on >= 0.99 and c_off >= 0.9999, (name, c_on, c_off)


def test_the_command_line_flag(tmp_path, capsys, rng):
    from kompute_dml.cli.run import main

    model, _ = _model(rng)
    onnx.save(model, str(tmp_path / "m.onnx"))
    feeds = {"x": rng.standard_normal((3, 24)).astype(np.float32), "img": rng.standard_normal((1, 3, 6, 6)).astype(np.float32)}
    np.savez(tmp_path / "in.npz", **feeds)
    assert main([str(tmp_path / "m.onnx"), "--input", str(tmp_path / "in.npz"), "--allow-half-precision", "-q",
                 "--compare-onnxruntime", "--output", str(tmp_path / "out.npz")]) == 0
    printed = capsys.readouterr().out
    assert "note: --allow-half-precision rounds" in printed
    cos = re.search(r"smallest per-row cosine similarity: a ([\d.]+), g ([\d.]+), f ([\d.]+), c ([\d.]+), r ([\d.]+)",
                    printed)
    assert cos and min(float(v) for v in cos.groups()) >= 0.99, printed
    got = np.load(tmp_path / "out.npz")
    want = Backend.prepare(model, "CPU", allow_half_precision=True).run(feeds)
    for name, w in zip(("a", "g", "f", "c", "r"), want):
        np.testing.assert_array_equal(got[name], w)
