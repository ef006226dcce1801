"""kdml.group_norm / kdml.instance_norm (functional/mean_variance_normalization.py: one
MEAN_VARIANCE_NORMALIZATION1 over x seen as (N, G, C / G, ...)) against a float64 reference written
from ONNX's definitions (x reshaped to (N, G, -1), normalized, then the per-channel or per-group
scale and bias), within docs/mean_variance_normalization.md's bound: 3- to 5-D, FLOAT32 and FLOAT16,
strided inputs and outputs at random offsets, outputs poisoned first and every other byte
unchanged; refused arguments; ONNX InstanceNormalization, GroupNormalization and
MeanVarianceNormalization node cases on the device and models against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_outside_unchanged, place, poison_against, random_strides, read_logical
from mvn_reference import mvn_bound

import kompute_dml as kdml
from kompute_dml.ops.mean_variance_normalization import summation_depth

DT = kdml.DataType
TD = kdml.TensorDesc


def reference(x, scale, bias, g, eps):
    n, c = x.shape[:2]
    t = x.astype(np.float64).reshape(n, g, -1)
    m = t.mean(axis=-1, keepdims=True)
    v = ((t - m) ** 2).mean(axis=-1, keepdims=True)
    z = ((t - m) / np.sqrt(v + eps)).reshape(x.shape)
    per = np.repeat if scale.size == g and g != c else (lambda a, _k: a)
    shape = (1, c) + (1,) * (x.ndim - 2)
    s, b = (per(a.astype(np.float64), c // g).reshape(shape) for a in (scale, bias))
    return z * s + b


@pytest.mark.parametrize("dt", [DT.FLOAT32, DT.FLOAT16], ids=lambda d: d.name)
@pytest.mark.parametrize("xs, g, per_group", [
    ((2, 6, 5, 7), 3, False), ((2, 6, 5, 7), 3, True), ((1, 8, 4, 3, 2), 2, False), ((3, 4, 9), 4, False),
    ((2, 5, 3, 4), 5, False),  # one channel per group: InstanceNormalization's form
], ids=str)
def test_group_norm_against_numpy(dev, rng, dt, xs, g, per_group):
    npd = dt.numpy_dtype
    x = (rng.standard_normal(xs) * 3 + 1).astype(npd)
    c = xs[1]
    scale = rng.standard_normal(g if per_group else c).astype(npd)
    bias = rng.standard_normal(g if per_group else c).astype(npd)
    eps = 1e-3
    want = reference(x, scale, bias, g, eps)
    xd = TD(dt, xs, random_strides(rng, xs, allow_broadcast=False))
    yd = TD(dt, xs, random_strides(rng, xs, allow_broadcast=False))
    tx, _ = place(dev, rng, xd, x)
    ty, _ = place(dev, rng, yd)
    before = poison_against(ty, want.astype(npd), rng)
    if g == c and not per_group:
        kdml.instance_norm(tx, scale, bias, epsilon=eps, out=ty)
    else:
        kdml.group_norm(tx, scale, bias, g, epsilon=eps, out=ty)
    got = read_logical(assert_outside_unchanged(ty, before), ty.offset, yd).astype(np.float64)
    split = (xs[0], g, c // g, *xs[2:])
    rs = (1, g, c // g) + (1,) * (len(xs) - 2)
    sv = np.repeat(scale, c // g) if per_group else scale
    bv = np.repeat(bias, c // g) if per_group else bias
    axes = tuple(range(2, len(split)))
    depth = summation_depth(int(np.prod(split[2:])), dt)
    bound = mvn_bound(x.reshape(split), sv.reshape(rs), bv.reshape(rs), axes, True, float(np.float32(eps)), depth,
                      dt == DT.FLOAT16).reshape(xs)
    assert np.all(np.abs(got - want) <= bound), float(np.max(np.abs(got - want) / bound))


def test_refused_arguments(dev):
    x = np.ones((2, 6, 3), np.float32)
    with pytest.raises(kdml.InvalidArgumentError, match="^num_groups"):
        kdml.group_norm(x, np.ones(6, np.float32), np.ones(6, np.float32), 4, device=dev)
    with pytest.raises(kdml.InvalidArgumentError, match="^scale"):
        kdml.group_norm(x, np.ones(4, np.float32), np.ones(6, np.float32), 3, device=dev)
    with pytest.raises(kdml.InvalidArgumentError, match="^bias"):
        kdml.group_norm(x, np.ones(6, np.float32), np.ones((2, 3), np.float32), 3, device=dev)
    with pytest.raises(kdml.InvalidArgumentError, match="^x"):
        kdml.instance_norm(x[0], np.ones(3, np.float32), np.ones(3, np.float32), device=dev)


onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx_node_cases import node_case_tests, one_node_model  # noqa: E402

from kompute_dml.onnx_backend import Backend  # noqa: E402

test_case_count, test_onnx_node_case_on_the_device = node_case_tests(
    r"^test_(instancenorm|group_normalization|mvn)\w*_cpu$", __name__, 9)


def _run(node, x, inits, opset, et, reference_fn=None, tol=1e-4):
    model = one_node_model(node, [("x", et, x.shape)], et, inits, opset)
    rep = Backend.prepare(model, "CPU")
    got = rep.run({"x": x})[0].astype(np.float64)
    want = (reference_fn() if reference_fn is not None else
            ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0])
    np.testing.assert_allclose(got, want.astype(np.float64), rtol=tol, atol=tol)
    assert [p.target for p in rep.placement] == ["vulkan"] and rep.last_run.runtime_fallbacks == 0, rep.summary()


@pytest.mark.parametrize(("dt", "et"), [(np.float32, TensorProto.FLOAT), (np.float16, TensorProto.FLOAT16)],
                         ids=["f32", "f16"])
def test_instance_and_mvn_models_against_onnxruntime(rng, dt, et):
    x = (rng.standard_normal((2, 3, 6, 5)) * 2).astype(dt)
    tol = 1e-4 if dt == np.float32 else 4e-3
    inits = [numpy_helper.from_array(rng.standard_normal(3).astype(dt), n) for n in ("s", "b")]
    _run(helper.make_node("InstanceNormalization", ["x", "s", "b"], ["y"], epsilon=1e-3), x, inits, 17, et, tol=tol)
    if dt == np.float32:  # onnxruntime's MeanVarianceNormalization kernel: float32
        _run(helper.make_node("MeanVarianceNormalization", ["x"], ["y"]), x, [], 13, et, tol=tol)


@pytest.mark.parametrize("opset", [18, 21])
def test_group_norm_models(rng, opset):
    """Opset 18's per-group scale and bias, opset 21's per-channel ones, against the float64
    reference and onnxruntime (which runs the op's function body)."""
    x = (rng.standard_normal((2, 6, 4, 5)) * 2).astype(np.float32)
    k = 3 if opset == 18 else 6
    s, b = rng.standard_normal(k).astype(np.float32), rng.standard_normal(k).astype(np.float32)
    inits = [numpy_helper.from_array(s, "s"), numpy_helper.from_array(b, "b")]
    node = helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=3, epsilon=1e-4)
    _run(node, x, inits, opset, TensorProto.FLOAT, lambda: reference(x, s, b, 3, 1e-4))
    _run(node, x, inits, opset, TensorProto.FLOAT)
