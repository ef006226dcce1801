"""SQUEEZE_EXCITATION (ops/squeeze_excitation.py, shaders/squeeze_excitation.comp) against an
independent float64 numpy reference (the mean, the two products and their activations, rounded to
the type where the unfused chain rounds): FLOAT32 and FLOAT16, 1-D to 3-D spatial extents, more
channels and hidden values than one round of 64, with and without biases, several activation pairs;
inputs at random offsets with the batch and channel strides in either order, strided filters, a
strided output poisoned first, every byte outside it unchanged; refused descriptors with the field
they name; the helper. In the ONNX backend (onnx_backend/fusion_se.py): MobileNetV3's and
EfficientNet's float32 blocks as one dispatch plus the Mul, against the same reference; chains left
node by node where a value is read elsewhere, the channels exceed the kernel's limit or the block is
float16."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from helpers import assert_outside_unchanged, place, poison_against, random_strides, read_logical

import kompute_dml as kdml
from kompute_dml.ops import squeeze_excitation as se_op

DT = kdml.DataType
TD = kdml.TensorDesc
NP = {DT.FLOAT32: np.float32, DT.FLOAT16: np.float16}


def _sigmoid(v):
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-v))


# name -> (descriptor, float64 function)
ACTS = {
    None: (None, lambda v: v),
    "relu": (kdml.ActivationReluDesc(None, None), lambda v: np.maximum(v, 0.0)),
    "hard_sigmoid": (kdml.ActivationHardSigmoidDesc(None, None, alpha=1 / 6, beta=0.5),
                     lambda v: np.clip(np.float64(np.float32(1 / 6)) * v + 0.5, 0.0, 1.0)),
    "sigmoid": (kdml.ActivationSigmoidDesc(None, None), _sigmoid),
    "swish": (kdml.ActivationSwishDesc(None, None), lambda v: v * _sigmoid(v)),
    "tanh": (kdml.ActivationTanhDesc(None, None), np.tanh),
}


def reference(x, w1, b1, w2, b2, act1, act2, npd):
    """The gate in float64, rounded to the type (`npd`) where the unfused chain rounds; and the scale
    of its last sum (sum |w2| |h| + |b2|) for the error bound."""
    def held(v):
        return v.astype(npd).astype(np.float64)
    n, c = x.shape[:2]
    m = held(x.reshape(n, c, -1).astype(np.float64).mean(axis=2))
    h = held(ACTS[act1][1](held(m @ w1.T.astype(np.float64) + (0 if b1 is None else b1.astype(np.float64)))))
    s = h @ w2.T.astype(np.float64) + (0 if b2 is None else b2.astype(np.float64))
    scale = np.abs(h) @ np.abs(w2.T.astype(np.float64)) + (0 if b2 is None else np.abs(b2.astype(np.float64)))
    return held(ACTS[act2][1](held(s))), scale


def check(got, want, scale, dt):
    # float32: the sums' roundings in another order (relative to the magnitudes summed); float16: a
    # hidden value or the gate's sum rounding the other way at a tie of the type (2^-11 relative)
    rel, floor = (4e-5, 1e-7) if dt == DT.FLOAT32 else (4e-3, 2.0 ** -14)
    err = np.abs(got.astype(np.float64) - want)
    bound = rel * (scale + np.abs(want)) + floor
    assert np.all(err <= bound), f"worst error / bound {np.max(err / bound):.3f}"


# (N, C, R, spatial sizes, activation 1, activation 2, biases)
CASES = [
    (1, 16, 4, (7, 7), "relu", "hard_sigmoid", True),  # MobileNetV3's
    (3, 70, 17, (5, 3), "swish", "sigmoid", True),  # EfficientNet's; two channel rounds
    (2, 130, 9, (1, 1), "relu", "sigmoid", False),  # three work groups of 64 channels; no biases
    (2, 24, 6, (33,), None, None, True),  # 1-D, more positions than a team's 32 lanes
    (1, 8, 70, (2, 3, 4), "tanh", "hard_sigmoid", True),  # 3-D; two hidden rounds
]


def _x_strides(rng, n, c, hw):
    """The spatial positions packed (they address as one dimension), the batch and channel strides
    in a random order with gaps."""
    gap = int(rng.integers(0, 3))
    if rng.integers(2):
        return (c * (hw + gap) + int(rng.integers(0, 3)), hw + gap)
    return (hw + gap, n * (hw + gap) + int(rng.integers(0, 3)))


@pytest.mark.parametrize("dt", [DT.FLOAT32, DT.FLOAT16], ids=lambda d: d.name)
@pytest.mark.parametrize("case", range(len(CASES)))
def test_squeeze_excitation_against_numpy(dev, rng, case, dt):
    n, c, r, spatial, a1, a2, bias = CASES[case]
    npd = NP[dt]
    hw = int(np.prod(spatial))
    x = (rng.standard_normal((n, c, *spatial)) * 2).astype(npd)
    w1 = (rng.standard_normal((r, c)) / np.sqrt(c)).astype(npd)
    w2 = (rng.standard_normal((c, r)) / np.sqrt(r)).astype(npd)
    b1, b2 = (rng.standard_normal(r).astype(npd), rng.standard_normal(c).astype(npd)) if bias else (None, None)
    want, scale = reference(x, w1, b1, w2, b2, a1, a2, npd)
    inner = tuple(int(np.prod(spatial[i + 1:])) for i in range(len(spatial)))
    xd = TD(dt, x.shape, _x_strides(rng, n, c, hw) + inner)
    descs = [xd, TD(dt, w1.shape, random_strides(rng, w1.shape, allow_broadcast=False)),
             TD(dt, (r,), (int(rng.integers(1, 3)),)) if bias else None,
             TD(dt, w2.shape, random_strides(rng, w2.shape, allow_broadcast=False)),
             TD(dt, (c,), (int(rng.integers(1, 3)),)) if bias else None]
    tensors = [None if d is None else place(dev, rng, d, v)[0] for d, v in zip(descs, (x, w1, b1, w2, b2))]
    yd = TD(dt, (n, c), random_strides(rng, (n, c), allow_broadcast=False))
    ty, _ = place(dev, rng, yd)
    before = poison_against(ty, want.astype(npd), rng)
    desc = se_op.SqueezeExcitationDesc(*descs, yd, ACTS[a1][0], ACTS[a2][0])
    dev.compile(desc).execute(tensors, [ty, None])
    after = assert_outside_unchanged(ty, before)
    check(read_logical(after, ty.offset, yd), want, scale, dt)


# (C, R, positions): streams of more loads than a batch, channel boundaries inside a batch; quads
# (positions a multiple of 4) and single positions
STREAMS = [(16, 8, 3136), (96, 24, 196), (240, 64, 196), (576, 144, 49), (2048, 8, 3)]


@pytest.mark.parametrize("dt", [DT.FLOAT32, DT.FLOAT16], ids=lambda d: d.name)
@pytest.mark.parametrize("lanes", [None, 0, 1, 2, 3], ids=lambda v: f"mp{v}")
@pytest.mark.parametrize("gap", [0, 1, 4], ids=lambda g: f"gap{g}")
@pytest.mark.parametrize("case", range(len(STREAMS)))
def test_packed_filters_and_mean_streams(dev, rng, monkeypatch, case, gap, lanes, dt):
    """Filters whose rows are contiguous with `gap` elements between them: quads where the row
    stride is a multiple of 4 (gap 0 and 4; tensors start 16-byte aligned), elements otherwise
    (gap 1); the means spread over 2^mp invocations per channel (the plan's, and forced: 1 to 8,
    the subgroup's butterfly)."""
    if lanes is not None:
        monkeypatch.setenv(se_op.MEAN_LANES_ENV, str(lanes))
    c, r, hw = STREAMS[case]
    npd = NP[dt]
    x = (rng.standard_normal((1, c, hw)) * 2 + 0.5).astype(npd)
    w1 = (rng.standard_normal((r, c)) / np.sqrt(c)).astype(npd)
    w2 = (rng.standard_normal((c, r)) / np.sqrt(r)).astype(npd)
    b1, b2 = rng.standard_normal(r).astype(npd), rng.standard_normal(c).astype(npd)
    want, scale = reference(x, w1, b1, w2, b2, "relu", "hard_sigmoid", npd)
    descs = [TD(dt, x.shape), TD(dt, w1.shape, (c + gap, 1)), TD(dt, (r,)), TD(dt, w2.shape, (r + gap, 1)), TD(dt, (c,))]
    tensors = [place(dev, rng, d, v)[0] for d, v in zip(descs, (x, w1, b1, w2, b2))]
    yd = TD(dt, (1, c))
    ty, _ = place(dev, rng, yd)
    before = poison_against(ty, want.astype(npd), rng)
    desc = se_op.SqueezeExcitationDesc(*descs, yd, ACTS["relu"][0], ACTS["hard_sigmoid"][0])
    dev.compile(desc).execute(tensors, [ty, None])
    check(read_logical(assert_outside_unchanged(ty, before), ty.offset, yd), want, scale, dt)


# (N, C, R, spatial): one and several work groups of 64 channels; float16 images of an odd element
# count (a word of the scaled output shared by two images or two work groups)
SCALED = [(1, 16, 8, (56, 56)), (3, 70, 9, (7, 7)), (2, 130, 5, (3, 1)), (1, 576, 144, (7, 7))]


@pytest.mark.parametrize("dt", [DT.FLOAT32, DT.FLOAT16], ids=lambda d: d.name)
@pytest.mark.parametrize("case", range(len(SCALED)))
def test_scaled_output(dev, rng, case, dt):
    """ScaledOutputTensor: x times the gate (ELEMENT_WISE_MULTIPLY's product of the gate the output
    holds: those bits exactly), x strided, the scaled output packed at an offset, poisoned first,
    every byte outside it unchanged; the gate as without it."""
    n, c, r, spatial = SCALED[case]
    npd = NP[dt]
    hw = int(np.prod(spatial))
    x = (rng.standard_normal((n, c, *spatial)) * 2).astype(npd)
    x.reshape(-1)[:2] = (-0.0, 0.0)  # (an infinity or NaN would make its image's gate NaN)
    w1 = (rng.standard_normal((r, c)) / np.sqrt(c)).astype(npd)
    w2 = (rng.standard_normal((c, r)) / np.sqrt(r)).astype(npd)
    b1, b2 = rng.standard_normal(r).astype(npd), rng.standard_normal(c).astype(npd)
    inner = tuple(int(np.prod(spatial[i + 1:])) for i in range(len(spatial)))
    descs = [TD(dt, x.shape, _x_strides(rng, n, c, hw) + inner), TD(dt, w1.shape), TD(dt, (r,)), TD(dt, w2.shape),
             TD(dt, (c,))]
    tensors = [place(dev, rng, d, v)[0] for d, v in zip(descs, (x, w1, b1, w2, b2))]
    yd, zd = TD(dt, (n, c)), TD(dt, x.shape)
    ty, tz = place(dev, rng, yd)[0], place(dev, rng, zd)[0]
    want_y, scale = reference(x, w1, b1, w2, b2, "relu", "hard_sigmoid", npd)
    before = poison_against(tz, x, rng)
    desc = se_op.SqueezeExcitationDesc(*descs, yd, ACTS["relu"][0], ACTS["hard_sigmoid"][0], zd)
    dev.compile(desc).execute(tensors, [ty, tz])
    z = read_logical(assert_outside_unchanged(tz, before), tz.offset, zd)
    y = ty.numpy()
    check(y, want_y, scale, dt)
    want = (x.astype(np.float32) * y.astype(np.float32).reshape(n, c, *(1,) * len(spatial))).astype(npd)
    assert np.array_equal(z.view(f"u{z.itemsize}"), want.view(f"u{want.itemsize}"))


def test_mean_lanes():
    """8 lanes per channel, doubled while the channels fill at most one round; capped by 32, the
    subgroup, the items."""
    assert se_op.mean_lanes_log2(1152, 49) == 3 and se_op.mean_lanes_log2(96, 49) == 3
    assert se_op.mean_lanes_log2(16, 784) == 5 and se_op.mean_lanes_log2(32, 784) == 4
    assert se_op.mean_lanes_log2(16, 784, 8) == 3  # lavapipe's subgroups of 8
    assert se_op.mean_lanes_log2(64, 1) == 0 and se_op.mean_lanes_log2(2048, 3) == 1  # the items


def test_mean_lanes_forced(monkeypatch):
    monkeypatch.setenv(se_op.MEAN_LANES_ENV, "5")
    assert se_op.mean_lanes_log2(1152, 49, 8) == 3  # within the subgroup
    monkeypatch.setenv(se_op.MEAN_LANES_ENV, "six")
    with pytest.raises(ValueError, match="KDML_SE_MEAN_LANES='six'"):
        se_op.mean_lanes_log2(96, 49)


def _desc(c=8, r=4, dt=DT.FLOAT32, **over):
    d = {"input_tensor": TD(dt, (2, c, 3, 3)), "filter1_tensor": TD(dt, (r, c)), "bias1_tensor": TD(dt, (r,)),
         "filter2_tensor": TD(dt, (c, r)), "bias2_tensor": TD(dt, (c,)), "output_tensor": TD(dt, (2, c))}
    d.update(over)
    return se_op.SqueezeExcitationDesc(**d)


@pytest.mark.parametrize("over, error, field", [
    ({"filter1_tensor": TD(DT.FLOAT32, (4, 9))}, kdml.InvalidArgumentError, "filter1_tensor.sizes"),
    ({"bias2_tensor": TD(DT.FLOAT32, (4,))}, kdml.InvalidArgumentError, "bias2_tensor.sizes"),
    ({"output_tensor": TD(DT.FLOAT32, (8, 2))}, kdml.InvalidArgumentError, "output_tensor.sizes"),
    ({"filter2_tensor": TD(DT.FLOAT16, (8, 4))}, kdml.InvalidArgumentError, "filter2_tensor.data_type"),
    ({"input_tensor": TD(DT.FLOAT32, (2, 8, 3, 3), (72, 9, 4, 1))}, kdml.UnsupportedError, "input_tensor.strides"),
    ({"output_tensor": TD(DT.FLOAT32, (2, 8), (1, 0))}, kdml.InvalidArgumentError, "output_tensor"),
    ({"activation1": kdml.ActivationGeluDesc(None, None)}, kdml.UnsupportedError, "fused_activation"),
    ({"scaled_output_tensor": TD(DT.FLOAT32, (2, 8, 9))}, kdml.InvalidArgumentError, "scaled_output_tensor.sizes"),
    ({"scaled_output_tensor": TD(DT.FLOAT16, (2, 8, 3, 3))}, kdml.InvalidArgumentError, "scaled_output_tensor.data_type"),
    ({"scaled_output_tensor": TD(DT.FLOAT32, (2, 8, 3, 3), (80, 9, 3, 1))}, kdml.UnsupportedError,
     "scaled_output_tensor.strides"),
])
def test_refused(dev, over, error, field):
    with pytest.raises(error, match=field.replace(".", r"\.")):
        dev.compile(_desc(**over))


def test_limits(dev):
    big = se_op.MAX_CHANNELS + 1
    with pytest.raises(kdml.UnsupportedError, match=r"input_tensor\.sizes"):
        dev.compile(_desc(c=big))
    with pytest.raises(kdml.UnsupportedError, match=r"filter1_tensor\.sizes"):
        dev.compile(_desc(r=se_op.MAX_HIDDEN + 1))
    # the device stays usable
    assert dev.compile(_desc()) is not None


def test_helper(dev, rng):
    x = rng.standard_normal((2, 12, 4, 4)).astype(np.float32)
    w1, w2 = rng.standard_normal((3, 12)).astype(np.float32), rng.standard_normal((12, 3)).astype(np.float32)
    b1, b2 = rng.standard_normal(3).astype(np.float32), rng.standard_normal(12).astype(np.float32)
    y = kdml.squeeze_excitation(x, w1, b1, w2, b2, activation1=ACTS["relu"][0], activation2=ACTS["sigmoid"][0],
                                device=dev)
    want, scale = reference(x, w1, b1, w2, b2, "relu", "sigmoid", np.float32)
    assert y.shape == (2, 12)
    check(y.numpy(), want, scale, DT.FLOAT32)
    out = dev.empty((2, 12))
    assert kdml.squeeze_excitation(x, w1, None, w2, None, out=out, device=dev) is out
    want, scale = reference(x, w1, None, w2, None, None, None, np.float32)
    check(out.numpy(), want, scale, DT.FLOAT32)


@pytest.mark.parametrize("dt", [DT.FLOAT32, DT.FLOAT16])
def test_relu_keeps_nan(dev, rng, dt):
    """ReLU as ACTIVATION_RELU: a NaN kept (with the kind compiled in, a float compare against 0 may
    become a maximum, which makes NaN +0). Image 0's NaN channel makes every hidden value NaN, so
    every gate of it; image 1's as the reference."""
    npd = NP[dt]
    x = rng.standard_normal((2, 12, 3, 3)).astype(npd)
    x[0, 5, 1, 1] = np.nan
    w1, w2 = rng.standard_normal((4, 12)).astype(npd), rng.standard_normal((12, 4)).astype(npd)
    b1, b2 = rng.standard_normal(4).astype(npd), rng.standard_normal(12).astype(npd)
    y = kdml.squeeze_excitation(x, w1, b1, w2, b2, activation1=ACTS["relu"][0], device=dev).numpy()
    assert np.isnan(y[0]).all()
    want, scale = reference(x[1:], w1, b1, w2, b2, "relu", None, npd)
    check(y[1:], want, scale, dt)

# ---- the ONNX backend's fusion ----------------------------------------------------------------------------
onnx = pytest.importorskip("onnx")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

from kompute_dml.onnx_backend import Backend, fusion_se  # noqa: E402

N = helper.make_node
ELEM = {np.float32: T.FLOAT, np.float16: T.FLOAT16}
GATE_ACTS = {"HardSigmoid": "hard_sigmoid", "Sigmoid": "sigmoid"}  # node type -> ACTS' name


@pytest.fixture
def _one_pass(monkeypatch):
    """Dispatch counts without split-K's second dispatch (a GPU splits some small convolutions)."""
    monkeypatch.setenv("KDML_CONV_SPLIT", "1")
    monkeypatch.setitem(kdml.default_device().caches, "compiled", {})  # (Backend.prepare's "CPU" device)


def _block(rng, c, r, silu, gate, dt=np.float32, extra_output=False, shape=None, mean=None, axes=(2, 3)):
    """x -> GlobalAveragePool -> Conv -> Relu | SiLU -> Conv -> gate -> Mul(x, .) as ONNX, its weights;
    `mean`: the pool as the dynamo exporter writes it, ReduceMean(x, axes, keepdims) with the axes an
    attribute ("attr", opset 17) or an input ("input", opset 18)."""
    w1 = (rng.standard_normal((r, c, 1, 1)) / np.sqrt(c)).astype(dt)
    w2 = (rng.standard_normal((c, r, 1, 1)) / np.sqrt(r)).astype(dt)
    b1, b2 = rng.standard_normal(r).astype(dt), rng.standard_normal(c).astype(dt)
    head = (N("GlobalAveragePool", ["x"], ["m"]) if mean is None else
            N("ReduceMean", ["x"], ["m"], axes=list(axes), keepdims=1) if mean == "attr" else
            N("ReduceMean", ["x", "axes"], ["m"], keepdims=1))
    nodes = [head, N("Conv", ["m", "w1", "b1"], ["c1"])]
    if silu:
        nodes += [N("Sigmoid", ["c1"], ["s1"]), N("Mul", ["c1", "s1"], ["h"])]
    else:
        nodes += [N("Relu", ["c1"], ["h"])]
    attrs = {"alpha": 1 / 6, "beta": 0.5} if gate == "HardSigmoid" else {}
    nodes += [N("Conv", ["h", "w2", "b2"], ["c2"]), N(gate, ["c2"], ["g"], **attrs), N("Mul", ["x", "g"], ["y"])]
    outs = [helper.make_tensor_value_info("y", ELEM[dt], None)]
    if extra_output:
        outs.append(helper.make_tensor_value_info("h", ELEM[dt], None))
    inits = [numpy_helper.from_array(v, k) for k, v in (("w1", w1), ("b1", b1), ("w2", w2), ("b2", b2))]
    if mean == "input":
        inits.append(numpy_helper.from_array(np.array(axes, np.int64), "axes"))
    g = helper.make_graph(nodes, "se", [helper.make_tensor_value_info("x", ELEM[dt], shape)], outs, initializer=inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18 if mean == "input" else 17)], ir_version=10)
    return model, (w1.reshape(r, c), b1, w2.reshape(c, r), b2)


@pytest.mark.parametrize("silu, gate", [(False, "HardSigmoid"), (True, "Sigmoid"), (False, "Sigmoid")])
@pytest.mark.parametrize("dt", [np.float32, np.float16], ids=["FLOAT32", "FLOAT16"])
@pytest.mark.parametrize("c, r", [(40, 10), (fusion_se.F16_MAX_CHANNELS + 1, 12)])
def test_block_is_one_dispatch_and_the_mul(rng, _one_pass, monkeypatch, silu, gate, dt, c, r):
    """The gate and the Mul in one dispatch (the scaled output), the Mul's bits of the gate as its own
    dispatch reads it (DevicePolicy.se_scale_max_elements 0: two dispatches); float16 blocks of more than
    F16_MAX_CHANNELS channels node by node (measured faster)."""
    model, (w1, b1, w2, b2) = _block(rng, c, r, silu, gate, dt)
    x = (rng.standard_normal((2, c, 5, 5)) * 2).astype(dt)
    rep = Backend.prepare(model, "CPU")
    (y,) = rep.run({"x": x})
    label = "GlobalAveragePool+Conv+" + ("Sigmoid+Mul" if silu else "Relu") + "+Conv+" + gate
    if dt == np.float32 or c <= fusion_se.F16_MAX_CHANNELS:
        assert label + "+Mul x1" in rep.summary() and "SQUEEZE_EXCITATION" in rep.summary()
        assert rep.last_run.dispatches == 1 and not rep.last_run.events  # the gate and the Mul
        dev = kdml.default_device()
        monkeypatch.setattr(dev, "policy", dataclasses.replace(dev.policy, se_scale_max_elements=(0, 0)))
        two = Backend.prepare(model, "CPU")
        (y2,) = two.run({"x": x})
        assert two.last_run.dispatches == 2  # the gate, the Mul (the shape undeclared: decided at run time)
        assert np.array_equal(y.view(f"u{y.itemsize}"), y2.view(f"u{y2.itemsize}"))
    else:  # wide float16 blocks run node by node (fusion_se.FLOAT16), each Conv with its activation
        assert "SQUEEZE_EXCITATION" not in rep.summary() and rep.last_run.dispatches == 4
    gate_ref, scale = reference(x, w1, b1, w2, b2, "swish" if silu else "relu", GATE_ACTS[gate], dt)
    want = (x.astype(np.float64) * gate_ref[:, :, None, None]).astype(dt).astype(np.float64)
    check(y, want, np.abs(x.astype(np.float64)) * (scale[:, :, None, None] + 1), DT.FLOAT32 if dt == np.float32 else
          DT.FLOAT16)


@pytest.mark.parametrize("side, fused", [(5, False), (14, True)])
def test_wide_float16_blocks_fused_where_their_pool_runs_first(rng, _one_pass, side, fused):
    """A float16 block of more than F16_MAX_CHANNELS channels is fused where its declared image has more
    than MEAN_ELEMENTS elements (the pool, the gate, the Mul: 3 dispatches), else runs node by node (4)."""
    c = fusion_se.F16_MAX_CHANNELS + 1
    assert (c * side * side > fusion_se.MEAN_ELEMENTS) == fused
    model, (w1, b1, w2, b2) = _block(rng, c, 12, True, "Sigmoid", np.float16, shape=["N", c, side, side])
    x = rng.standard_normal((2, c, side, side)).astype(np.float16)
    rep = Backend.prepare(model, "CPU")
    (y,) = rep.run({"x": x})
    assert ("SQUEEZE_EXCITATION" in rep.summary()) == fused and rep.last_run.dispatches == (3 if fused else 4)
    gate_ref, scale = reference(x, w1, b1, w2, b2, "swish", "sigmoid", np.float16)
    want = (x.astype(np.float64) * gate_ref[:, :, None, None]).astype(np.float16).astype(np.float64)
    check(y, want, np.abs(x.astype(np.float64)) * (scale[:, :, None, None] + 1), DT.FLOAT16)


@pytest.mark.parametrize("side", [14, 56])
def test_scaled_output_within_the_policy(rng, _one_pass, side):
    """A declared image decides at prepare: 16 channels of 14 x 14 (3,136 elements per work group) scale
    in the gate's dispatch; of 56 x 56 (50,176, past DevicePolicy.se_scale_max_elements) the Mul runs
    alone, with no run-time event either way."""
    model, (w1, b1, w2, b2) = _block(rng, 16, 4, False, "HardSigmoid", shape=["N", 16, side, side])
    x = rng.standard_normal((1, 16, side, side)).astype(np.float32)
    rep = Backend.prepare(model, "CPU")
    (y,) = rep.run({"x": x})
    fits = 16 * side * side <= kdml.default_device().policy.se_scale_max_elements[0]
    assert fits == (side == 14)
    assert rep.last_run.dispatches == (1 if fits else 2) and not rep.last_run.events
    gate_ref, scale = reference(x, w1, b1, w2, b2, "relu", "hard_sigmoid", np.float32)
    check(y, x.astype(np.float64) * gate_ref[:, :, None, None], np.abs(x.astype(np.float64)) * (scale[:, :, None, None] + 1),
          DT.FLOAT32)


def test_many_positions_pool_first(rng, _one_pass):
    """Past fusion_se.MEAN_ELEMENTS the pool runs as its own dispatch and the gate reads its means."""
    side = int(np.sqrt(fusion_se.MEAN_ELEMENTS / 12)) + 1
    model, (w1, b1, w2, b2) = _block(rng, 12, 3, True, "Sigmoid")
    x = rng.standard_normal((2, 12, side, side)).astype(np.float32)
    rep = Backend.prepare(model, "CPU")
    (y,) = rep.run({"x": x})
    assert "SQUEEZE_EXCITATION" in rep.summary() and rep.last_run.dispatches == 3  # the pool, the gate, the Mul
    gate_ref, scale = reference(x, w1, b1, w2, b2, "swish", "sigmoid", np.float32)
    check(y, x.astype(np.float64) * gate_ref[:, :, None, None], np.abs(x.astype(np.float64)) * (scale[:, :, None, None] + 1),
          DT.FLOAT32)


@pytest.mark.parametrize("mean", ["attr", "input"])
@pytest.mark.parametrize("side", [5, 70], ids=["gate", "pool first"])
def test_reduce_mean_head(rng, _one_pass, mean, side):
    """The dynamo exporter's pool, ReduceMean over the spatial axes with keepdims: the same dispatches
    as GlobalAveragePool's chain (one; past MEAN_ELEMENTS the pool, the gate and the Mul)."""
    model, (w1, b1, w2, b2) = _block(rng, 12, 3, True, "Sigmoid", mean=mean, axes=(-2, -1) if mean == "input" else (2, 3))
    x = rng.standard_normal((2, 12, side, side)).astype(np.float32)
    rep = Backend.prepare(model, "CPU")
    (y,) = rep.run({"x": x})
    assert "ReduceMean+Conv+Sigmoid+Mul+Conv+Sigmoid" in rep.summary(), rep.summary()
    assert rep.last_run.dispatches == (1 if side == 5 else 3)
    gate_ref, scale = reference(x, w1, b1, w2, b2, "swish", "sigmoid", np.float32)
    check(y, x.astype(np.float64) * gate_ref[:, :, None, None], np.abs(x.astype(np.float64)) * (scale[:, :, None, None] + 1),
          DT.FLOAT32)


def test_reduce_mean_of_other_axes_runs_node_by_node(rng, _one_pass):
    model, _ = _block(rng, 12, 3, False, "HardSigmoid", mean="attr", axes=(3,), shape=["N", 12, 5, 5])
    x = rng.standard_normal((2, 12, 5, 5)).astype(np.float32)
    rep = Backend.prepare(model, "CPU")
    (y,) = rep.run({"x": x})
    assert "SQUEEZE_EXCITATION" not in rep.summary()
    (want,) = Backend.prepare(model, "CPU", fuse=False).run({"x": x})
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)


def test_chains_left_node_by_node(rng, _one_pass):
    # the hidden value also a graph output: not a chain
    model, _ = _block(rng, 16, 4, False, "HardSigmoid", extra_output=True)
    x = rng.standard_normal((1, 16, 3, 3)).astype(np.float32)
    rep = Backend.prepare(model, "CPU")
    rep.run({"x": x})
    assert "SQUEEZE_EXCITATION" not in rep.summary()
    # more channels than the kernel holds: the chain runs unfused, its Conv + activation pairs fused
    c = se_op.MAX_CHANNELS + 8
    model, (w1, b1, w2, b2) = _block(rng, c, 2, False, "HardSigmoid")
    x = rng.standard_normal((1, c, 1, 1)).astype(np.float32)
    rep = Backend.prepare(model, "CPU")
    (y,) = rep.run({"x": x})
    # the pool, Conv+Relu, Conv+HardSigmoid (on GEMM's kernels on GPUs: a split reduction may add a
    # dispatch each), the Mul
    assert rep.last_run.dispatches >= 4
    assert any("ran unfused" in e and f"{c} channels" in e for e in rep.last_run.events), rep.last_run.events
    gate_ref, scale = reference(x, w1, b1, w2, b2, "relu", "hard_sigmoid", np.float32)
    check(y, x.astype(np.float64) * gate_ref[:, :, None, None], np.abs(x.astype(np.float64)) * (scale[:, :, None, None] + 1),
          DT.FLOAT32)
