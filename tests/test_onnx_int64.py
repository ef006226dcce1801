"""ONNX Cast from and to INT64 / UINT64 and GatherElements of INT64 data through
Backend.prepare(model, "CPU").run against onnxruntime's CPU results: placed on Vulkan and run
there (no run-time fallback), over values beyond 2^32, negative ones and the types' extremes
(RoBERTa's and BERT's exported graphs carry both: issue 52)."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402

from kompute_dml.onnx_backend import Backend  # noqa: E402

T = TensorProto
SHAPE = (3, 4, 5)


def model_of(node, inputs, out_type, out_shape):
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, t, list(s)) for n, t, s in inputs],
                              [helper.make_tensor_value_info("y", out_type, list(out_shape))])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def run_both(model, feeds):
    rep = Backend.prepare(model, "CPU")
    got = rep.run(feeds)[0]
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    assert got.shape == want.shape and got.dtype == want.dtype
    assert [p.target for p in rep.placement] == ["vulkan"], rep.summary()
    assert rep.last_run.runtime_fallbacks == 0, rep.last_run.events
    return got, want


def wide_ints(rng, dtype, shape):
    """Random values of the whole range with the extremes, values around 2^32 and small ones."""
    info = np.iinfo(dtype)
    v = rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True).reshape(-1)
    edges = [info.min, info.max, 0, 1, 2 ** 32, 2 ** 32 - 1, 2 ** 32 + 1, 2 ** 31, 2 ** 53 + 1, 12345]
    if info.min < 0:
        edges += [-1, -(2 ** 32), -(2 ** 31) - 1, -12345]
    v[:len(edges)] = np.array(edges, dtype=dtype)
    return v.reshape(shape)


INT_TYPES = [(np.int64, T.INT64), (np.uint64, T.UINT64)]
OTHERS = [(np.float32, T.FLOAT), (np.float16, T.FLOAT16), (np.int32, T.INT32), (np.uint32, T.UINT32),
          (np.int8, T.INT8), (np.uint8, T.UINT8), (np.int16, T.INT16), (np.int64, T.INT64), (np.uint64, T.UINT64)]


@pytest.mark.parametrize(("src", "st"), INT_TYPES, ids=lambda v: getattr(v, "__name__", str(v)))
@pytest.mark.parametrize(("dst", "dt"), OTHERS, ids=lambda v: getattr(v, "__name__", str(v)))
def test_cast_from_64_bits(src, st, dst, dt):
    x = wide_ints(np.random.default_rng(1), src, SHAPE)
    got, want = run_both(model_of(helper.make_node("Cast", ["x"], ["y"], to=dt), [("x", st, SHAPE)], dt, SHAPE),
                         {"x": x})
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(("dst", "dt"), INT_TYPES, ids=lambda v: getattr(v, "__name__", str(v)))
@pytest.mark.parametrize(("src", "st"), OTHERS[:6], ids=lambda v: getattr(v, "__name__", str(v)))
def test_cast_to_64_bits(src, st, dst, dt):
    rng = np.random.default_rng(2)
    if np.dtype(src).kind == "f":  # in the output's range (onnxruntime's conversion beyond it is C's, undefined)
        lo = 0 if dst == np.uint64 else -6e4
        x = rng.uniform(lo, 6e4, SHAPE).astype(src)
        if src == np.float32:
            x.reshape(-1)[:4] = [2.0 ** 40 + 2.0 ** 20, 3.5 * 2.0 ** 33, 2.0 ** 62, 0.75]
    else:
        x = wide_ints(rng, src, SHAPE) if np.dtype(src).itemsize == 8 else rng.integers(
            np.iinfo(src).min, np.iinfo(src).max, SHAPE, dtype=src, endpoint=True)
    got, want = run_both(model_of(helper.make_node("Cast", ["x"], ["y"], to=dt), [("x", st, SHAPE)], dt, SHAPE),
                         {"x": x})
    np.testing.assert_array_equal(got, want)


def test_cast_int64_to_bool():
    x = wide_ints(np.random.default_rng(3), np.int64, SHAPE)
    x.reshape(-1)[-5:] = 0
    x.reshape(-1)[-6] = 2 ** 32  # low word 0: still true
    got, want = run_both(model_of(helper.make_node("Cast", ["x"], ["y"], to=T.BOOL), [("x", T.INT64, SHAPE)],
                                  T.BOOL, SHAPE), {"x": x})
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(("data", "et"), INT_TYPES, ids=lambda v: getattr(v, "__name__", str(v)))
@pytest.mark.parametrize("axis", [0, -1, 1])
def test_gather_elements_of_64_bit_data(data, et, axis):
    rng = np.random.default_rng(4)
    x = wide_ints(rng, data, SHAPE)
    ishape = list(SHAPE)
    ishape[axis] = 6
    n = SHAPE[axis]
    idx = rng.integers(-n, n, ishape).astype(np.int64)
    node = helper.make_node("GatherElements", ["x", "idx"], ["y"], axis=axis)
    got, want = run_both(model_of(node, [("x", et, SHAPE), ("idx", T.INT64, ishape)], et, ishape), {"x": x, "idx": idx})
    np.testing.assert_array_equal(got, want)
