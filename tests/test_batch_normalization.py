"""BATCH_NORMALIZATION (ops/batch_normalization.py, shaders/batch_normalization.comp) against a
float64 numpy reference: per-channel statistics broadcast over (N, C, H, W) after a conv, 1-D to
5-D, statistics broadcast on other axes too, the fused ReLU, FLOAT32 and FLOAT16, strided inputs
and statistics at random offsets, strided outputs poisoned first and every byte outside them
unchanged, within 8 u (|scale * n| + |bias|); edge values; refused descriptors; the helper."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from helpers import assert_outside_unchanged, place, poison_against, random_strides, read_logical

import kompute_dml as kdml

DT = kdml.DataType
TD = kdml.TensorDesc
U = 2.0 ** -24


def reference(x, mean, var, scale, bias, eps, relu):
    f = [a.astype(np.float64) for a in (x, mean, var, scale, bias)]
    norm = (f[0] - f[1]) / np.sqrt(f[2] + np.float64(np.float32(eps)))
    y = f[3] * norm + f[4]
    s = np.abs(f[3] * norm) + np.abs(f[4])
    return (np.maximum(y, 0.0) if relu else y), s


def check(got, want, s, dt):
    bound = 8 * U * s
    if dt == DT.FLOAT16:
        bound = bound + np.abs(want) * 2.0 ** -11 + 2.0 ** -25
    err = np.abs(got.astype(np.float64) - want)
    assert np.all(err <= bound), f"worst error / bound {np.max(err / np.maximum(bound, 1e-300)):.3f}"


CASES = [  # x sizes, statistics sizes
    ((2, 16, 7, 7), (1, 16, 1, 1)),  # after a conv
    ((1, 5, 3, 11), (1, 5, 1, 1)),
    ((3, 4, 9), (1, 4, 1)),  # 1-D form (N, C, L)
    ((6, 10), (1, 10)),  # (N, C)
    ((7,), (7,)),
    ((2, 3, 2, 3, 4), (1, 3, 1, 1, 4)),  # broadcast on some axes only
]


@pytest.mark.parametrize("dt", [DT.FLOAT32, DT.FLOAT16], ids=lambda d: d.name)
@pytest.mark.parametrize("case", range(len(CASES)))
def test_batch_normalization_against_numpy(dev, rng, case, dt):
    xs, cs = CASES[case]
    npd = dt.numpy_dtype
    relu, eps = bool(case % 2), float(rng.choice([1e-5, 1e-3, 0.0]))
    x = (rng.standard_normal(xs) * 3).astype(npd)
    mean = rng.standard_normal(cs).astype(npd)
    var = (rng.random(cs) * 4 + 0.05).astype(npd)
    scale = rng.standard_normal(cs).astype(npd)
    bias = rng.standard_normal(cs).astype(npd)
    want, s = reference(x, mean, var, scale, bias, eps, relu)
    descs, tensors = [], []
    for a in (x, mean, var, scale, bias):
        d = TD(dt, a.shape, random_strides(rng, a.shape, allow_broadcast=False))
        descs.append(d)
        tensors.append(place(dev, rng, d, a)[0])
    yd = TD(dt, xs, random_strides(rng, xs, allow_broadcast=False))
    ty, _ = place(dev, rng, yd)
    before = poison_against(ty, want.astype(npd), rng)
    desc = kdml.BatchNormalizationDesc(*descs, yd, True, eps, kdml.ActivationReluDesc(None, None) if relu else None)
    dev.compile(desc).execute(tensors, [ty])
    after = assert_outside_unchanged(ty, before)
    check(read_logical(after, ty.offset, yd), want, s, dt)


def test_helper_per_channel_vectors_edges_and_out(dev, rng):
    x = rng.standard_normal((2, 3, 4, 4)).astype(np.float32)
    x[0, 0, 0, :3] = [np.nan, np.inf, -0.0]
    m, v = rng.standard_normal(3).astype(np.float32), (rng.random(3) + 0.5).astype(np.float32)
    sc, b = rng.standard_normal(3).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    r = (1, 3, 1, 1)
    want, s = reference(x, m.reshape(r), v.reshape(r), sc.reshape(r), b.reshape(r), 1e-5, False)
    out = dev.empty(TD(DT.FLOAT32, x.shape))
    assert kdml.batch_norm(x, m, v, sc, b, out=out) is out
    got = out.numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    fin = np.isfinite(want)
    check(got[fin], want[fin], s[fin], DT.FLOAT32)
    # variance 0 and epsilon 0: a division by zero, IEEE's infinities
    z = kdml.batch_norm(np.array([[1.0, -1.0]], np.float32).T.reshape(2, 1), [0.0], [0.0], [1.0], [0.0],
                        epsilon=0.0).numpy()
    assert np.isposinf(z[0, 0]) and np.isneginf(z[1, 0])


@pytest.mark.parametrize("dt", [DT.FLOAT32, DT.FLOAT16], ids=lambda d: d.name)
def test_fused_relu_bits_as_activation_relu(dev, dt):
    """The fused ReLU is ACTIVATION_RELU's: -0 (x = mean, Scale < 0, Bias = -0) and negatives give
    +0, NaN passes, positives unchanged: the same bits as BATCH_NORMALIZATION then kdml.relu."""
    npd = dt.numpy_dtype
    x = np.array([[1.0, 1.0, -3.0, np.nan, 5.0, np.inf, -np.inf]], npd)  # (N, C) = (1, 7)
    ones = np.ones((1, 1), npd)
    args = (x, ones, ones, -ones, np.full((1, 1), -0.0, npd))  # y = -(x - 1) + -0
    fused = kdml.batch_norm(*args, epsilon=0.0, relu=True, device=dev).numpy()
    plain = kdml.batch_norm(*args, epsilon=0.0, device=dev)
    assert np.signbit(plain.numpy()[0, 0])  # the unfused result is -0
    bits = np.uint32 if dt == DT.FLOAT32 else np.uint16
    np.testing.assert_array_equal(fused.view(bits), kdml.relu(plain, device=dev).numpy().view(bits))
    np.testing.assert_array_equal(fused, np.array([[0, 0, 4, np.nan, 0, 0, np.inf]], npd))
    assert not np.signbit(fused[0, :2]).any()


F = DT.FLOAT32
X = TD(F, (2, 3, 4, 5))
C = TD(F, (1, 3, 1, 1))
BASE = kdml.BatchNormalizationDesc(X, C, C, C, C, X, True, 1e-5)


@pytest.mark.parametrize("change, field", [
    (dict(mean_tensor=TD(F, (1, 2, 1, 1))), "mean_tensor.sizes"),
    (dict(scale_tensor=TD(F, (3, 1, 1))), "scale_tensor.sizes"),
    (dict(bias_tensor=TD(DT.FLOAT16, (1, 3, 1, 1))), "bias_tensor.data_type"),
    (dict(output_tensor=TD(F, (2, 3, 4, 4))), "output_tensor.sizes"),
    (dict(epsilon=float("nan")), "epsilon"),
    (dict(fused_activation=kdml.ActivationReluDesc(X, X)), "fused_activation"),
])
def test_refused_descriptors_name_their_field(dev, change, field):
    with pytest.raises(kdml.InvalidArgumentError, match=f"^{field}"):
        dev.compile(dataclasses.replace(BASE, **change))


def test_unsupported_activation_and_levels():
    from helpers import compile_at_level

    dev_desc = dataclasses.replace(BASE, fused_activation=kdml.ActivationSigmoidDesc(None, None))
    with pytest.raises(kdml.UnsupportedError, match="^fused_activation"):
        compile_at_level(kdml.FeatureLevel.FL_6_2, dev_desc)
    two = kdml.BatchNormalizationDesc(TD(F, (4, 3)), TD(F, (1, 3)), TD(F, (1, 3)), TD(F, (1, 3)), TD(F, (1, 3)),
                                      TD(F, (4, 3)), True, 1e-5)
    with pytest.raises(kdml.UnsupportedError):
        compile_at_level(kdml.FeatureLevel.FL_3_0, two)
    compile_at_level(kdml.FeatureLevel.FL_3_1, two)
    # Spatial = FALSE before 4_0: mean and variance not broadcast on height and width
    with pytest.raises(kdml.InvalidArgumentError, match="^mean_tensor.sizes"):
        compile_at_level(kdml.FeatureLevel.FL_3_1, dataclasses.replace(BASE, spatial=False))
    compile_at_level(kdml.FeatureLevel.FL_4_0, dataclasses.replace(BASE, spatial=False))


@pytest.mark.parametrize("strides, pairs", [
    (None, True), ((160, 48, 8, 1), True), ((84, 28, 7, 1), False), ((1, 2, 6, 24), False),
], ids=["packed", "gapped-even", "odd-rows", "column-major"])
def test_float16_outputs_by_words_and_by_fields(dev, rng, strides, pairs):
    """FLOAT16 outputs whose rows pack whole words take two elements per invocation and plain
    stores; others STORE_FIELD: both exact to the bound, every other byte unchanged."""
    from kompute_dml.ops.batch_normalization import writes_words

    xs, cs = (2, 3, 4, 6), (1, 3, 1, 1)
    dt = DT.FLOAT16
    x = (rng.standard_normal(xs) * 3).astype(np.float16)
    m, s, b = (rng.standard_normal(cs).astype(np.float16) for _ in range(3))
    v = (rng.random(cs) + 0.1).astype(np.float16)
    want, sc = reference(x, m, v, s, b, 1e-3, True)
    yd = TD(dt, xs, strides)
    assert writes_words(yd) == pairs
    ty, _ = place(dev, rng, yd)
    before = poison_against(ty, want.astype(np.float16), rng)
    tensors = [place(dev, rng, TD(dt, a.shape), a)[0] for a in (x, m, v, s, b)]
    desc = kdml.BatchNormalizationDesc(*(t.desc for t in tensors), yd, True, 1e-3, kdml.ActivationReluDesc(None, None))
    dev.compile(desc).execute(tensors, [ty])
    check(read_logical(assert_outside_unchanged(ty, before), ty.offset, yd), want, sc, dt)


@pytest.mark.parametrize("dt", [np.float32, np.float16], ids=["f32", "f16"])
@pytest.mark.parametrize("shape, outputs, relu", [((4, 3, 5, 6), ("y", "rm", "rv"), False), ((2, 5, 7), ("y", "rm", "rv"), True),
                                                  ((3, 4, 2, 2, 3), ("y", "", "rv"), False), ((4, 3, 5, 6), ("y",), True)])
def test_onnx_batch_norm_training_mode_on_the_device(rng, dt, shape, outputs, relu):
    """ONNX BatchNormalization with training_mode = 1 (opset 15) on the device: Y normalized by
    the batch's own mean and population variance, the running statistics out as input * momentum
    + batch's * (1 - momentum); against onnx's reference evaluator (the spec's function), a
    following Relu fused where the node has only Y."""
    pytest.importorskip("onnx")
    from onnx import helper, numpy_helper
    from onnx.reference import ReferenceEvaluator

    from kompute_dml.onnx_backend import Backend

    c = shape[1]
    x = (rng.standard_normal(shape) * 2 + 0.5).astype(dt)
    params = {"s": rng.uniform(0.5, 1.5, c), "b": rng.standard_normal(c), "m": rng.standard_normal(c),
              "v": rng.uniform(0.5, 2, c)}
    inits = [numpy_helper.from_array(v.astype(dt), k) for k, v in params.items()]
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dt))
    nodes = [helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], list(outputs), training_mode=1,
                              momentum=0.8, epsilon=1e-4)]
    names = [o for o in outputs if o]
    if relu:
        nodes.append(helper.make_node("Relu", ["y"], ["r"]))
        names[0] = "r"
    g = helper.make_graph(nodes, "bn", [helper.make_tensor_value_info("x", elem, list(shape))],
                          [helper.make_tensor_value_info(n, elem, None) for n in names], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 15)], ir_version=8)
    rep = Backend.prepare(m, "CPU")
    got = rep.run({"x": x})
    assert {p.target for p in rep.placement} == {"vulkan"} and rep.last_run.runtime_fallbacks == 0, rep.last_run.events
    want = ReferenceEvaluator(m).run(None, {"x": x})
    tol = 2e-5 if dt == np.float32 else 4e-3
    for name, g_, w in zip(names, got, want):
        assert g_.dtype == w.dtype and g_.shape == w.shape, name
        np.testing.assert_allclose(g_.astype(np.float64), w.astype(np.float64), rtol=tol, atol=tol, err_msg=name)
