"""LP_POOLING / LP_POOLING1 (ops/pooling.py, shaders/pooling.comp's LP variants) against a float64
loop reference ((sum over the window of |x|^P)^(1 / P), padding contributing nothing): 1- to 3-D,
strides, padding, dilations, P 1 to 4, both kernels (the work-group one from 256 taps), FLOAT32 and
FLOAT16, strided inputs and outputs at random offsets, outputs poisoned first and every other byte
unchanged, the documented bound; refused descriptors; ONNX LpPool node cases on the device and
models against onnxruntime."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest
from helpers import assert_outside_unchanged, place, poison_against, random_strides, read_logical

import kompute_dml as kdml

DT = kdml.DataType
TD = kdml.TensorDesc
U = 2.0 ** -24


def reference(x, window, strides, dil, start, end, p):
    x64 = np.abs(x.astype(np.float64))
    n = x.ndim - 2
    sp = x.shape[2:]
    out = [(sp[i] + start[i] + end[i] - ((window[i] - 1) * dil[i] + 1)) // strides[i] + 1 for i in range(n)]
    y = np.zeros(x.shape[:2] + tuple(out))
    for o in itertools.product(*(range(k) for k in out)):
        idx = [[o[i] * strides[i] - start[i] + k * dil[i] for k in range(window[i])] for i in range(n)]
        inside = [[q for q in ax if 0 <= q < sp[i]] for i, ax in enumerate(idx)]
        vals = x64[(slice(None), slice(None), *np.ix_(*inside))].reshape(x.shape[0], x.shape[1], -1)
        y[(slice(None), slice(None), *o)] = np.sum(vals ** p, axis=-1) ** (1.0 / p)
    return y


CASES = [  # x sizes, window, strides, dilations, start, end
    ((2, 3, 9, 11), (3, 3), (2, 2), (1, 1), (1, 1), (1, 1)),
    ((1, 2, 7, 9), (3, 2), (1, 2), (2, 1), (0, 1), (2, 0)),
    ((1, 2, 4, 5, 6), (2, 3, 2), (1, 2, 1), (1, 1, 2), (1, 0, 1), (0, 1, 0)),
    ((1, 3, 16, 17), (16, 17), (1, 1), (1, 1), (0, 0), (0, 0)),  # global: the work-group kernel
]


@pytest.mark.parametrize("dt", [DT.FLOAT32, DT.FLOAT16], ids=lambda d: d.name)
@pytest.mark.parametrize("p", [1, 2, 3, 4])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_against_numpy(dev, rng, case, p, dt):
    xs, win, st, dl, ps, pe = CASES[case]
    x = (rng.standard_normal(xs) * 2).astype(dt.numpy_dtype)
    want = reference(x, win, st, dl, ps, pe, p)
    xd = TD(dt, xs, random_strides(rng, xs, allow_broadcast=False))
    yd = TD(dt, want.shape, random_strides(rng, want.shape, allow_broadcast=False))
    tx, _ = place(dev, rng, xd, x)
    ty, _ = place(dev, rng, yd)
    before = poison_against(ty, want.astype(dt.numpy_dtype), rng)
    desc = (kdml.LpPooling1Desc(xd, yd, win, st, ps, pe, dl, p) if any(d != 1 for d in dl)
            else kdml.LpPoolingDesc(xd, yd, win, st, ps, pe, p))
    op = dev.compile(desc)
    assert op.plans[0].variant.endswith("_group") == (np.prod(win) >= 256)
    op.execute([tx], [ty])
    got = read_logical(assert_outside_unchanged(ty, before), ty.offset, yd).astype(np.float64)
    n = int(np.prod(win))
    bound = U * ((n + p) / p + 3 * np.abs(np.log(np.maximum(want, 1e-300))) + 4) * want
    if dt == DT.FLOAT16:
        bound = bound + want * 2.0 ** -11 + 2.0 ** -25
    assert np.all(np.abs(got - want) <= bound), float(np.max(np.abs(got - want) / np.maximum(bound, 1e-300)))


def test_special_values_and_helper(dev):
    x = np.array([[[3.0, -4.0, 0.0, np.inf, np.nan, 1.0]]], np.float32)
    y = kdml.lp_pool(x, (2,), 2, strides=(2,), device=dev).numpy()
    assert y[0, 0, 0] == 5.0 and y[0, 0, 1] == np.inf and np.isnan(y[0, 0, 2])
    y = kdml.lp_pool(x[..., :2], (2,), 1, start_padding=(1,), end_padding=(1,), device=dev).numpy()
    np.testing.assert_array_equal(y, [[[3.0, 7.0, 4.0]]])  # padding adds nothing
    with pytest.raises(kdml.InvalidArgumentError, match="^p"):
        kdml.lp_pool(x, (2,), 0, device=dev)


F = DT.FLOAT32
BASE = kdml.LpPoolingDesc(TD(F, (1, 2, 5, 5)), TD(F, (1, 2, 2, 2)), (3, 3), (2, 2), p=2)


@pytest.mark.parametrize("change, field", [
    (dict(p=0), "p"),
    (dict(p=1.5), "p"),
    (dict(window_size=(3,)), "window_size"),
    (dict(strides=(0, 2)), r"strides\[0\]"),
    (dict(output_tensor=TD(F, (1, 2, 3, 2))), "output_tensor.sizes"),
    (dict(output_tensor=TD(DT.FLOAT16, (1, 2, 2, 2))), "output_tensor.data_type"),
])
def test_refused_descriptors_name_their_field(dev, change, field):
    with pytest.raises(kdml.InvalidArgumentError, match=f"^{field}"):
        dev.compile(dataclasses.replace(BASE, **change))


onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402
from onnx_node_cases import node_case_tests, one_node_model  # noqa: E402

from kompute_dml.onnx_backend import Backend  # noqa: E402

test_case_count, test_onnx_node_case_on_the_device = node_case_tests(r"^test_(global)?lppool\w*_cpu$", __name__, 8)


@pytest.mark.parametrize("op, attrs, shape", [
    ("LpPool", dict(kernel_shape=[3, 3], p=2, pads=[1, 1, 1, 1], strides=[2, 2]), (2, 3, 9, 8)),
    ("LpPool", dict(kernel_shape=[2, 3], p=3, auto_pad="SAME_UPPER"), (1, 2, 7, 6)),
    ("LpPool", dict(kernel_shape=[3], p=1), (2, 4, 10)),
    ("GlobalLpPool", dict(p=2), (2, 3, 20, 20)),
], ids=str)
def test_models_against_onnxruntime(rng, op, attrs, shape):
    x = rng.standard_normal(shape).astype(np.float32)
    model = one_node_model(helper.make_node(op, ["x"], ["y"], **attrs), [("x", TensorProto.FLOAT, shape)],
                           TensorProto.FLOAT, opset=18)
    rep = Backend.prepare(model, "CPU")
    got = rep.run({"x": x})[0]
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5)
    assert [p.target for p in rep.placement] == ["vulkan"] and rep.last_run.runtime_fallbacks == 0
