"""ONNX Sum and Mean (a fold of ELEMENT_WISE_ADD, Mean's divided by the count last) and CastLike
(CAST to input 1's type) through Backend.prepare(model, "CPU").run, against numpy's own
arithmetic and onnxruntime's CPU results, placed on Vulkan (rep.placement); float64 stays on the
CPU with the rule's reason; onnx's own node cases for these types."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402

from kompute_dml.onnx_backend import Backend  # noqa: E402

ET = {np.float32: TensorProto.FLOAT, np.float16: TensorProto.FLOAT16, np.float64: TensorProto.DOUBLE,
      np.int32: TensorProto.INT32, np.int64: TensorProto.INT64, np.uint8: TensorProto.UINT8,
      np.int8: TensorProto.INT8, np.bool_: TensorProto.BOOL}
SHAPES = ((3, 4, 5), (4, 1), (1, 5), (5,))


def model_of(op, feeds, out_dtype, out_shape):
    node = helper.make_node(op, list(feeds), ["y"])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, ET[v.dtype.type], list(v.shape))
                                            for n, v in feeds.items()],
                              [helper.make_tensor_value_info("y", ET[out_dtype], list(out_shape))])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    m.ir_version = 9
    return m


def run(model, feeds):
    rep = Backend.prepare(model, "CPU")
    got = rep.run(feeds)[0]
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    return rep, got, want


@pytest.mark.parametrize("op", ["Sum", "Mean"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=lambda d: d.__name__)
@pytest.mark.parametrize("count", [1, 2, 4])
def test_sum_mean(op, dtype, count):
    rng = np.random.default_rng(count)
    feeds = {f"x{i}": rng.standard_normal(SHAPES[i]).astype(dtype) for i in range(count)}
    shape = np.broadcast_shapes(*(v.shape for v in feeds.values()))
    rep, got, want = run(model_of(op, feeds, dtype, shape), feeds)
    acc = next(iter(feeds.values()))
    for v in list(feeds.values())[1:]:
        acc = acc + v  # numpy in the inputs' type, left to right: the fold's order
    if op == "Sum":
        np.testing.assert_array_equal(got, np.broadcast_to(acc, shape))
    else:
        ref = (acc / dtype(count)).astype(dtype)
        np.testing.assert_allclose(got, np.broadcast_to(ref, shape), rtol=2e-7 if dtype == np.float32 else 1e-3)
    np.testing.assert_allclose(got, want, rtol=1e-6 if dtype == np.float32 else 2e-3, atol=1e-3 if dtype == np.float16 else 0)
    assert [p.target for p in rep.placement] == ["vulkan"] and rep.last_run.runtime_fallbacks == 0


def test_sum_float64_on_cpu():
    feeds = {"a": np.ones((2, 3)), "b": np.ones((2, 3))}
    rep, got, want = run(model_of("Sum", feeds, np.float64, (2, 3)), feeds)
    np.testing.assert_array_equal(got, want)
    assert rep.placement[0].target == "cpu" and "float64" in rep.placement[0].reason


CAST_PAIRS = [(np.float32, np.int32), (np.float32, np.float16), (np.float16, np.float32), (np.float32, np.int64),
              (np.int64, np.float32), (np.int32, np.uint8), (np.float32, np.bool_), (np.uint8, np.float32)]


@pytest.mark.parametrize(("src", "dst"), CAST_PAIRS, ids=lambda d: d.__name__)
def test_cast_like(src, dst):
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((3, 4, 5)) * 50).astype(src) if np.dtype(src).kind == "f" else \
        rng.integers(0, 100, (3, 4, 5)).astype(src)
    x.reshape(-1)[:3] = 0  # zeros (bool targets' false)
    like = np.zeros((2,), dst)
    feeds = {"x": x, "like": like}
    rep, got, want = run(model_of("CastLike", feeds, dst, x.shape), feeds)
    ref = (x != 0) if dst == np.bool_ else x.astype(dst)  # in range: numpy's truncation is ONNX's
    assert got.dtype == np.dtype(dst)
    np.testing.assert_array_equal(got, ref)
    np.testing.assert_array_equal(got, want)
    assert [p.target for p in rep.placement] == ["vulkan"] and rep.last_run.runtime_fallbacks == 0


def test_cast_like_bfloat16_on_cpu():
    node = helper.make_node("CastLike", ["x", "like"], ["y"])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2]),
                                            helper.make_tensor_value_info("like", TensorProto.BFLOAT16, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.BFLOAT16, [2, 2])])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    rep = Backend.prepare(m, "CPU")
    assert rep.placement[0].target == "cpu" and "input 1 type" in rep.placement[0].reason


def test_onnx_node_cases():
    """onnx's Sum / Mean cases on Vulkan (float32); CastLike's float32 <-> float16 ones on Vulkan,
    the others (double, bfloat16, float8, float4, int4, string) pass on the CPU, their results of
    the declared ml_dtypes type (BackendRep._declared_views: the bits came back as uint8)."""
    from onnx_node_cases import node_cases, run_case

    case, names = node_cases(r"^test_(sum|mean|castlike)_\w*_cpu$", __name__)
    assert len(names) >= 60 and any("FLOAT8" in n for n in names), names
    on_device = []
    for name in names:
        reps = run_case(case, name)
        targets = {p.target for rep in reps for p in rep.placement}
        if name.startswith(("test_sum", "test_mean")) or name in ("test_castlike_FLOAT_to_FLOAT16_cpu",
                                                                   "test_castlike_FLOAT16_to_FLOAT_cpu"):
            assert targets == {"vulkan"}, (name, targets)
            on_device.append(name)
    assert len(on_device) >= 8, on_device
