"""ACTIVATION_RELU (ops/activation_relu.py, FN_RELU of shaders/float_unary.comp) against an
independent numpy reference, bit for bit: every float16 value, float32 special values and
random bits, 1-8 dimensions with random strides and broadcast inputs at random offsets with
guard bytes and poisoned outputs whose every other byte must stay unchanged, host-enumerated
dimensions, float16 word boundaries; the helper, refused descriptors, the feature levels'
tables, and ONNX Relu through the backend against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_outside_unchanged, place, poison_against, random_strides, read_logical

import kompute_dml as kdml

DT = kdml.DataType
FL = kdml.FeatureLevel
TD = kdml.TensorDesc
FLOATS = (DT.FLOAT32, DT.FLOAT16)
IDS = ("f32", "f16")
UINT = {np.dtype(np.float32): np.uint32, np.dtype(np.float16): np.uint16}


def relu_ref(x: np.ndarray) -> np.ndarray:
    """max(0, x) on the values: +0 for negatives and -0, NaN (any payload) unchanged."""
    out = np.where(x > 0, x, np.zeros_like(x))
    return np.where(np.isnan(x), x, out).astype(x.dtype)


def bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(UINT[a.dtype])


def run_packed(dev, x: np.ndarray) -> np.ndarray:
    d = TD(DT.from_numpy(x.dtype), x.shape)
    t, _ = place(dev, np.random.default_rng(0), d, x, guard=16)
    y, _ = place(dev, np.random.default_rng(1), d, guard=16)
    dev.compile(kdml.ActivationReluDesc(d, d)).execute([t], [y])
    return y.numpy()


def test_every_float16(dev):
    x = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    np.testing.assert_array_equal(bits(run_packed(dev, x)), bits(relu_ref(x)))


def test_float32_bits(dev, rng):
    special = np.array([0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000, 0x7F800001,
                        0xFFFFFFFF, 0x00000001, 0x80000001, 0x7F7FFFFF, 0xFF7FFFFF], np.uint32)
    x = np.concatenate([special, rng.integers(0, 1 << 32, 1 << 16, dtype=np.uint64).astype(np.uint32)]).view(np.float32)
    got = run_packed(dev, x)
    np.testing.assert_array_equal(bits(got), bits(relu_ref(x)))
    assert bits(got)[1] == 0 and bits(got)[4] == 0x7FC00000 and bits(got)[7] == 0xFFFFFFFF  # -0 -> +0, NaNs kept


def values(rng, dt: DT, sizes) -> np.ndarray:
    x = rng.standard_normal(sizes)
    flat = x.reshape(-1)
    k = min(flat.size, 5)
    flat[rng.choice(flat.size, k, replace=False)] = [0.0, -0.0, np.inf, -np.inf, np.nan][:k]
    return x.astype(dt.numpy_dtype)


def run(dev, rng, x_desc: TD, y_desc: TD, v: np.ndarray) -> None:
    x, xraw = place(dev, rng, x_desc, v)
    y, _ = place(dev, rng, y_desc)
    ref = relu_ref(read_logical(xraw, x.offset, x_desc))
    before = poison_against(y, ref, rng)
    dev.compile(kdml.ActivationReluDesc(x_desc, y_desc)).execute([x], [y])
    got = read_logical(assert_outside_unchanged(y, before), y.offset, y_desc)
    assert x.buffer.read() == xraw
    np.testing.assert_array_equal(bits(got), bits(ref))


def random_sizes(rng, rank: int, max_elems: int = 400) -> tuple[int, ...]:
    sizes = [int(rng.integers(1, 7)) for _ in range(rank)]
    while np.prod(sizes) > max_elems:
        sizes[int(np.argmax(sizes))] //= 2
    return tuple(max(1, s) for s in sizes)


@pytest.mark.parametrize("dt", FLOATS, ids=IDS)
@pytest.mark.parametrize("rank", range(1, 9))
def test_layouts(dev, rng, dt, rank):
    for _ in range(3):
        sizes = random_sizes(rng, rank)
        xs = random_strides(rng, sizes, allow_broadcast=True) if rng.random() < 0.7 else None
        ys = random_strides(rng, sizes, allow_broadcast=False) if rng.random() < 0.7 else None
        run(dev, rng, TD(dt, sizes, xs), TD(dt, sizes, ys), values(rng, dt, sizes))


@pytest.mark.parametrize("dt", FLOATS, ids=IDS)
def test_host_enumerated_dimensions(dev, rng, dt):
    sizes = (2, 3, 2, 2, 3, 2, 2, 3)
    run(dev, rng, TD(dt, sizes, random_strides(rng, sizes, allow_broadcast=True, max_gap=2)),
        TD(dt, sizes, random_strides(rng, sizes, allow_broadcast=False, max_gap=2)), values(rng, dt, sizes))


@pytest.mark.parametrize("n", [1, 2, 3, 257])
def test_float16_word_boundaries(dev, rng, n):
    run(dev, rng, TD(DT.FLOAT16, (n,)), TD(DT.FLOAT16, (n,), (3,)), values(rng, DT.FLOAT16, (n,)))
    run(dev, rng, TD(DT.FLOAT16, (n,)), TD(DT.FLOAT16, (n,)), values(rng, DT.FLOAT16, (n,)))


def test_helper(dev, rng):
    x = values(rng, DT.FLOAT32, (3, 4, 5))
    y = kdml.relu(x, device=dev)
    assert y.desc.data_type == DT.FLOAT32 and y.desc.sizes == (3, 4, 5)
    np.testing.assert_array_equal(bits(y.numpy()), bits(relu_ref(x)))
    out, _ = place(dev, rng, TD(DT.FLOAT32, (3, 4, 5), random_strides(rng, (3, 4, 5), allow_broadcast=False)))
    assert kdml.relu(-y.numpy(), out=out, device=dev) is out
    np.testing.assert_array_equal(bits(out.numpy()), bits(relu_ref(-y.numpy())))
    with pytest.raises(kdml.UnsupportedError, match="^input_tensor: ACTIVATION_RELU does not support INT32"):
        kdml.relu(np.arange(4, dtype=np.int32), device=dev)


F = TD(DT.FLOAT32, (2, 3))
BAD = [
    (kdml.ActivationReluDesc(F, TD(DT.FLOAT16, (2, 3))), kdml.InvalidArgumentError,
     r"^output_tensor\.data_type: must equal input_tensor's"),
    (kdml.ActivationReluDesc(F, TD(DT.FLOAT32, (3, 2))), kdml.InvalidArgumentError, r"^output_tensor\.sizes: must equal"),
    (kdml.ActivationReluDesc(F, TD(DT.FLOAT32, (2, 3), (0, 1))), kdml.InvalidArgumentError, r"^output_tensor\.strides"),
    (kdml.ActivationReluDesc(TD(DT.INT8, (2, 3)), TD(DT.INT8, (2, 3))), kdml.UnsupportedError,
     r"^input_tensor: ACTIVATION_RELU does not support INT8"),
]


@pytest.mark.parametrize(("desc", "error", "match"), BAD, ids=[m[1:40] for _, _, m in BAD])
def test_refused(dev, desc, error, match):
    with pytest.raises(error, match=match):
        dev.compile(desc)


@pytest.mark.parametrize(("level", "dims", "ok"), [(FL.FL_1_0, 4, True), (FL.FL_1_0, 3, False), (FL.FL_2_0, 5, True),
                                                    (FL.FL_2_0, 3, False), (FL.FL_3_0, 1, True), (FL.FL_3_0, 8, True)],
                         ids=str)
def test_feature_levels(level, dims, ok):
    with kdml.Device(feature_level=level) as d:
        desc = TD(DT.FLOAT16, (2,) * dims)
        if ok:
            d.compile(kdml.ActivationReluDesc(desc, desc))
        else:
            with pytest.raises(kdml.UnsupportedError, match="^input_tensor: ACTIVATION_RELU supports"):
                d.compile(kdml.ActivationReluDesc(desc, desc))


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32])
def test_onnx_relu_against_onnxruntime(dtype):
    """ONNX Relu runs on the device for float types (placed by the operator's OnnxOp declaration
    alone) and on the CPU for the rest, each equal to onnxruntime's result."""
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper

    from kompute_dml.onnx_backend import Backend

    et = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu",
                              [helper.make_tensor_value_info("x", et, [3, 5])], [helper.make_tensor_value_info("y", et, [3, 5])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    x = (np.random.default_rng(3).standard_normal((3, 5)) * 4).astype(dtype)
    if dtype != np.int32:
        x.reshape(-1)[:3] = [np.nan, -0.0, np.inf]
    rep = Backend.prepare(model)
    got = rep.run({"x": x})[0]
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, want)
    assert [(p.target, p.operator) for p in rep.placement] == (
        [("vulkan", "ACTIVATION_RELU")] if dtype != np.int32 else [("cpu", "onnxruntime")])
    del onnx, TensorProto
