"""SiLU in the ONNX backend (kompute_dml/onnx_backend/fusion_swish.py): Sigmoid(x) -> Mul(x, .) on
either Mul side as one ACTIVATION_SWISH dispatch, Conv -> Sigmoid -> Mul(conv, .) as one CONVOLUTION
with the fused SWISH, both the unfused nodes' bits (float32, float16; whole-graph and node by node)
and close to a float64 reference; chains that are not x * Sigmoid(x), or whose values are read
elsewhere, left node by node; opset 24's Swish node on ACTIVATION_SWISH (alone and after a Conv)."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

import kompute_dml as kdml  # noqa: E402
from kompute_dml.onnx_backend import Backend  # noqa: E402


@pytest.fixture(autouse=True)
def _one_pass_convolutions(monkeypatch):
    """The dispatch counts below are the fusions': a GPU would cut these small convolutions' reductions
    into parts (split-K, ops/conv_split.py: a second dispatch); one pass keeps the count. The helpers'
    compiled operators are cached by descriptor, so this module gets a cache of its own: an earlier
    test's convolution of the same shape, compiled without the variable, would have its parts."""
    monkeypatch.setenv("KDML_CONV_SPLIT", "1")
    monkeypatch.setitem(kdml.default_device().caches, "compiled", {})  # (Backend.prepare's "CPU" device)

N = helper.make_node
ELEM = {np.float32: T.FLOAT, np.float16: T.FLOAT16}
BITS = {np.float32: np.uint32, np.float16: np.uint16}


def _model(nodes, dt=np.float32, inputs=("x",), outputs=("y",), inits=(), opset=17):
    ins = [helper.make_tensor_value_info(n, ELEM[dt], None) for n in inputs]
    outs = [helper.make_tensor_value_info(n, ELEM[dt], None) for n in outputs]
    g = helper.make_graph(nodes, "silu", ins, outs, initializer=list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


def _silu(dt=np.float32, side=1, other=False):
    mul_in = ["x", "s"] if side == 1 else ["s", "x"]
    if other:
        mul_in[mul_in.index("x")] = "z"
    return _model([N("Sigmoid", ["x"], ["s"]), N("Mul", mul_in, ["y"])], dt, ("x", "z") if other else ("x",))


def _x(rng, dt, shape=(3, 40)):
    x = (rng.standard_normal(shape) * 5).astype(dt)
    x.reshape(-1)[:8] = (0.0, -0.0, np.inf, -np.inf, np.nan, 30.0, -30.0, 1e-40 if dt == np.float32 else 1e-7)
    return x


def _silu64(x, alpha=1.0):
    x = x.astype(np.float64)
    with np.errstate(all="ignore"):
        return x / (1.0 + np.exp(-alpha * x))


def _close(y, x, alpha=1.0, flushes=False):
    """Within a relative eps of float64 (the sigmoid's error, then the product's rounding; with an
    alpha, that of the rounded alpha x too), plus
    |x| times the type's smallest subnormal: the sigmoid is rounded to the type before the product
    (SIGMOID's output), so where it is subnormal its error is absolute."""
    f32 = y.dtype == np.float32
    eps, tiny = (1e-6, 1.5e-45) if f32 else (2e-3, 6e-8)
    want = _silu64(x, alpha)
    assert np.array_equal(np.isnan(y), np.isnan(want))
    ok = ~np.isnan(want)
    y, want, x = y[ok].astype(np.float64), want[ok], x[ok].astype(np.float64)
    with np.errstate(invalid="ignore"):
        err = np.nan_to_num(np.abs(y - want))  # (inf - inf: the infinities checked equal below)
    assert np.array_equal(y[np.isinf(want)], want[np.isinf(want)])
    # alpha x is rounded to float32 first: sigmoid's relative change up to |alpha x| 2^-24
    rel = eps + np.nan_to_num(np.abs(alpha * x)) * 2.0 ** -24
    bad = err > rel * np.abs(want) + np.nan_to_num(np.abs(x)) * tiny * 1.01 + tiny
    if flushes and f32:  # a GPU multiply that flushes a subnormal x or sigmoid gives +-0
        normal = np.finfo(np.float32).tiny
        with np.errstate(all="ignore"):
            sig = 1.0 / (1.0 + np.exp(-alpha * x))
        bad &= ~((y == 0) & ((np.abs(x) < normal) | (sig < normal)))
    assert not bad.any(), list(zip(x[bad][:5], y[bad][:5], want[bad][:5]))


def _same_bits(a, b):
    np.testing.assert_array_equal(a.view(BITS[a.dtype.type]), b.view(BITS[b.dtype.type]))


@pytest.mark.parametrize("dt", [np.float32, np.float16], ids=["f32", "f16"])
@pytest.mark.parametrize("side", [0, 1])
def test_silu_is_one_swish_dispatch(rng, dt, side):
    model = _silu(dt, side)
    x = _x(rng, dt)
    rep = Backend.prepare(model, "CPU")
    (y,) = rep.run({"x": x})
    assert rep.last_run.dispatches == 1 and "Sigmoid+Mul" in rep.summary() and "ACTIVATION_SWISH" in rep.summary()
    unfused_rep = Backend.prepare(model, "CPU", fuse=False)
    (unfused,) = unfused_rep.run({"x": x})
    assert unfused_rep.last_run.dispatches == 2
    _same_bits(y, unfused)
    _close(y, x, flushes=rep.device.device_type != "cpu")
    rep.state.node_by_node = True
    _same_bits(rep.run({"x": x})[0], y)


def test_not_silu_left_alone(rng):
    """Mul(z, Sigmoid(x)); a Sigmoid read again (a graph output); an integer Mul never matches."""
    x, z = _x(rng, np.float32), _x(rng, np.float32)
    rep = Backend.prepare(_silu(other=True), "CPU")
    (y,) = rep.run({"x": x, "z": z})
    assert rep.last_run.dispatches == 2 and "Sigmoid+Mul" not in rep.summary()
    with np.errstate(all="ignore"):
        np.testing.assert_allclose(y, z * (1 / (1 + np.exp(-x.astype(np.float64)))), rtol=1e-6, atol=1e-30)
    both = _model([N("Sigmoid", ["x"], ["s"]), N("Mul", ["x", "s"], ["y"])], outputs=("y", "s"))
    rep = Backend.prepare(both, "CPU")
    got = rep.run({"x": x})
    assert rep.last_run.dispatches == 2 and all(p.fused_into is None for p in rep.placement)
    for a, b in zip(got, Backend.prepare(both, "CPU", fuse=False).run({"x": x})):
        _same_bits(a, b)


def _conv_silu(dt=np.float32, side=1, rng=None, extra_read=False, swish_node=False):
    rng = rng or np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal((16, 8, 3, 3)) * 0.4).astype(dt), "w"),
             numpy_helper.from_array(rng.standard_normal(16).astype(dt), "b")]
    nodes = [N("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1])]
    if swish_node:
        nodes.append(N("Swish", ["c"], ["y"], alpha=1.0))
    else:
        nodes += [N("Sigmoid", ["c"], ["s"]), N("Mul", ["c", "s"] if side == 1 else ["s", "c"], ["y"])]
    outputs = ("y", "c") if extra_read else ("y",)
    return _model(nodes, dt, outputs=outputs, inits=inits, opset=24 if swish_node else 17)


def _conv_x(rng, dt):
    x = (rng.standard_normal((2, 8, 7, 7)) * 3).astype(dt)
    x[1, 0, 3, 3] = np.nan
    return x


@pytest.mark.parametrize("dt", [np.float32, np.float16], ids=["f32", "f16"])
@pytest.mark.parametrize("side", [0, 1])
def test_conv_silu_is_one_convolution(rng, dt, side):
    model = _conv_silu(dt, side, rng)
    x = _conv_x(rng, dt)
    rep = Backend.prepare(model, "CPU")
    placed = {p.index: p for p in rep.placement}
    assert placed[0].fused_into == 2 and placed[1].fused_into == 2 and "Conv+Sigmoid+Mul" in placed[2].operator
    (y,) = rep.run({"x": x})
    assert rep.last_run.dispatches == 1
    unfused_rep = Backend.prepare(model, "CPU", fuse=False)
    (unfused,) = unfused_rep.run({"x": x})
    assert unfused_rep.last_run.dispatches == 3
    _same_bits(y, unfused)
    rep.state.node_by_node = True
    _same_bits(rep.run({"x": x})[0], y)


def test_conv_read_elsewhere_fuses_only_the_silu(rng):
    """The Conv's output also a graph output: the Conv runs alone, its Sigmoid+Mul as one SWISH."""
    model = _conv_silu(np.float32, 1, rng, extra_read=True)
    x = _conv_x(rng, np.float32)
    rep = Backend.prepare(model, "CPU")
    got = rep.run({"x": x})
    assert rep.last_run.dispatches == 2 and "Sigmoid+Mul" in rep.summary() and "Conv+Sigmoid+Mul" not in rep.summary()
    for a, b in zip(got, Backend.prepare(model, "CPU", fuse=False).run({"x": x})):
        _same_bits(a, b)


@pytest.mark.parametrize("dt", [np.float32, np.float16], ids=["f32", "f16"])
def test_swish_node(rng, dt):
    """Opset 24's Swish(alpha) on ACTIVATION_SWISH, against float64 and close to onnxruntime's; after
    a Conv fused into it with the bits of Conv then Swish."""
    ort = pytest.importorskip("onnxruntime")
    x = _x(rng, dt)
    m = _model([N("Swish", ["x"], ["y"], alpha=1.5)], dt, opset=24)
    rep = Backend.prepare(m, "CPU")
    (y,) = rep.run({"x": x})
    assert [p.target for p in rep.placement] == ["vulkan"] and rep.last_run.dispatches == 1
    _close(y, x, 1.5, flushes=rep.device.device_type != "cpu")
    # onnxruntime's own (approximate) logistic: close, not its bits
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert np.array_equal(np.isnan(y), np.isnan(want))
    np.testing.assert_allclose(y.astype(np.float64), want.astype(np.float64), rtol=2e-3, atol=1e-5)
    cm = _conv_silu(dt, rng=rng, swish_node=True)
    rep = Backend.prepare(cm, "CPU")
    xc = _conv_x(rng, dt)
    (yc,) = rep.run({"x": xc})
    assert rep.last_run.dispatches == 1 and "Conv+Swish" in rep.summary()
    _same_bits(yc, Backend.prepare(cm, "CPU", fuse=False).run({"x": xc})[0])


@pytest.mark.parametrize("dt", [np.float32, np.float16], ids=["f32", "f16"])
@pytest.mark.parametrize("alpha", [None, 1.0, -0.5])
def test_quick_gelu_node(rng, dt, alpha):
    """com.microsoft.QuickGelu (onnxruntime's fusion of x * sigmoid(1.702 x), CLIP) on one
    ACTIVATION_SWISH with alpha as its sigmoid input scale (default 1.702), against onnxruntime."""
    ort = pytest.importorskip("onnxruntime")
    kw = {} if alpha is None else {"alpha": alpha}
    node = N("QuickGelu", ["x"], ["y"], domain="com.microsoft", **kw)
    g = helper.make_graph([node], "qg", [helper.make_tensor_value_info("x", ELEM[dt], [3, 129])],
                          [helper.make_tensor_value_info("y", ELEM[dt], None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
                          ir_version=10)
    x = (rng.standard_normal((3, 129)) * 6).astype(dt)
    rep = Backend.prepare(m, "CPU")
    got = rep.run({"x": x})[0]
    assert {p.target for p in rep.placement} == {"vulkan"} and "ACTIVATION_SWISH" in rep.placement[0].operator
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    tol = 1e-6 if dt == np.float32 else 2e-3
    scale = float(np.abs(want.astype(np.float64)).max())
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), atol=tol * scale, rtol=0)
