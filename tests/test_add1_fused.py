"""ELEMENT_WISE_ADD1's FusedActivation (ops/elementwise.py, shaders/elementwise.comp's ew_add1
variants, shaders/fused_act.glsl): every activation CONVOLUTION fuses, FLOAT32 and FLOAT16, ranks
1-8 with strided and broadcast layouts, random offsets, poisoned outputs and edge values (inf, NaN,
the type's extremes). The reference is the unfused chain: ADD1 without activation, then the
standalone activation operator on its output (each checked against numpy in its own tests), and
for ReLU numpy itself; both bit for bit. In place, the helper's refusal, and the ONNX Add -> Relu
fusion (onnx_backend/fusions.py) against the unfused model's bits."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from elementwise_reference import float_ref
from onnx import TensorProto, helper
from test_conv_fused import ACTS
from test_elementwise import random_sizes, run

import kompute_dml as kdml
from kompute_dml.onnx_backend import Backend

DT = kdml.DataType
TD = kdml.TensorDesc


def _unfused(dev, name, a, b):
    """ADD1, then the standalone activation on its output: the bits the fused operator must give."""
    _desc, fn, kw = ACTS[name]
    return fn(kdml.add(a, b, device=dev), device=dev, **kw).numpy()


@pytest.mark.parametrize("dt", [DT.FLOAT32, DT.FLOAT16], ids=lambda d: d.name)
@pytest.mark.parametrize("name", list(ACTS))
def test_fused_activation(dev, rng, dt, name):
    desc = ACTS[name][0]
    for rank in range(1, 9):
        sizes = random_sizes(rng, rank)
        make = lambda a, b, o: kdml.ElementWiseAdd1Desc(a, b, o, fused_activation=desc)  # noqa: E731
        run(dev, rng, make, (dt, dt), dt, sizes, lambda a, b: _unfused(dev, name, a, b))


def _relu(s):
    return np.where(np.isnan(s) | (s > 0), s, np.zeros_like(s))


def _same(got, want):
    """The same bits, or NaN in both (a device's NaN payload is its own: elementwise_reference)."""
    return (got.view(f"u{got.dtype.itemsize}") == want.view(f"u{want.dtype.itemsize}")) | (np.isnan(got) & np.isnan(want))


@pytest.mark.parametrize("dt", [DT.FLOAT32, DT.FLOAT16], ids=lambda d: d.name)
def test_relu_against_numpy(dev, rng, dt):
    """ReLU's bits from numpy alone: the sum rounded to the type (FLOAT32: or with subnormals
    flushed, as ADD's allowance), -0 and negatives +0, NaN kept."""
    def check(got, a, b):
        ok = _same(got, _relu(float_ref("add", a, b, dt)))
        if dt == DT.FLOAT32:
            ok |= _same(got, _relu(float_ref("add", a, b, dt, flush=True)))
        bad = np.argwhere(~ok)
        assert bad.size == 0, f"{len(bad)} differ, first {a[tuple(bad[0])]!r} + {b[tuple(bad[0])]!r} gave {got[tuple(bad[0])]!r}"

    for rank in (1, 3, 5, 8):
        sizes = random_sizes(rng, rank)
        make = lambda a, b, o: kdml.ElementWiseAdd1Desc(a, b, o, fused_activation=kdml.ActivationReluDesc(None, None))  # noqa: E731
        run(dev, rng, make, (dt, dt), dt, sizes, lambda a, b: _relu(float_ref("add", a, b, dt)), check=check)


def test_in_place_and_helper(dev, rng):
    a = rng.standard_normal((4, 33)).astype(np.float32)
    b = rng.standard_normal((33,)).astype(np.float32)
    relu = kdml.ActivationReluDesc(None, None)
    x = dev.tensor(a)
    got = kdml.add(x, b, activation=relu, out=x, device=dev)  # A's tensor as the output (ADD1 allows it)
    assert got is x
    np.testing.assert_array_equal(x.numpy(), np.maximum(a + b, 0))
    with pytest.raises(kdml.InvalidArgumentError, match=r"^activation: a fused activation needs ELEMENT_WISE_ADD1"):
        kdml.add(np.ones(3, np.int32), np.ones(3, np.int32), activation=relu, device=dev)
    np.testing.assert_array_equal(kdml.add(a, b, device=dev).numpy(), a + b)  # the device is still usable


def _add_relu_model(dtype: int) -> onnx.ModelProto:
    """y = Relu(a + b) (b broadcast), and z = a + b read elsewhere too (not fused: its sum is used twice)."""
    nodes = [helper.make_node("Add", ["a", "b"], ["s"]), helper.make_node("Relu", ["s"], ["y"]),
             helper.make_node("Add", ["a", "b2"], ["t"]), helper.make_node("Relu", ["t"], ["z"]),
             helper.make_node("Neg", ["t"], ["w"])]
    g = helper.make_graph(nodes, "add_relu", [helper.make_tensor_value_info(n, dtype, s) for n, s in
                                               (("a", [2, 3, 8]), ("b", [8]), ("b2", [2, 3, 8]))],
                          [helper.make_tensor_value_info(n, dtype, None) for n in "yzw"])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize(("dtype", "npd"), [(TensorProto.FLOAT, np.float32), (TensorProto.FLOAT16, np.float16)])
def test_onnx_add_relu(rng, dtype, npd):
    model = _add_relu_model(dtype)
    rep = Backend.prepare(model, "CPU")
    fused = [f.pattern.name for f in rep.fusions.by_carrier.values()]
    assert fused == ["Add+Relu"]  # the second Add's sum has another reader: left alone
    feeds = {"a": (rng.standard_normal((2, 3, 8)) * 3).astype(npd), "b": rng.standard_normal(8).astype(npd),
             "b2": rng.standard_normal((2, 3, 8)).astype(npd)}
    feeds["a"][0, 0, :3] = [np.nan, -0.0, np.inf]
    y, z, w = rep.run(feeds)
    s = (feeds["a"] + feeds["b"]).astype(npd)
    t = (feeds["a"] + feeds["b2"]).astype(npd)
    for got, want in ((y, _relu(s)), (z, _relu(t)), (w, -t)):
        assert got.dtype == want.dtype and _same(got, want).all()
