"""ONNX NonZero on the device (onnx_backend/handlers_nonzero.py, NONZERO_COORDINATES): numpy.nonzero's coordinates,
exactly, over ranks 1-5, the types (bool from a comparison on the device, float32 / float16 with -0 and NaN, 8- to
64-bit integers with values only in a high word), no nonzero element, and a consumer on the device; placed on
Vulkan, the count read on the host (node by node)."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from kompute_dml.onnx_backend import CPU, Backend  # noqa: E402

TYPES = {np.float32: TensorProto.FLOAT, np.float16: TensorProto.FLOAT16, np.int8: TensorProto.INT8,
         np.uint8: TensorProto.UINT8, np.int32: TensorProto.INT32, np.int64: TensorProto.INT64,
         np.uint64: TensorProto.UINT64}


def model(shape, dtype, compare=False, gather=False):
    nodes, src = [], "x"
    if compare:  # the mask a mixture of experts routes by: a bool computed on the device
        nodes.append(helper.make_node("Greater", ["x", "zero"], ["mask"]))
        src = "mask"
    nodes.append(helper.make_node("NonZero", [src], ["y"]))
    outs = [helper.make_tensor_value_info("y", TensorProto.INT64, None)]
    if gather:  # the rows of the first coordinate, gathered from x (the experts' token selection)
        nodes += [helper.make_node("Gather", ["y", "zero_i"], ["rows"], axis=0),
                  helper.make_node("Gather", ["x", "rows"], ["picked"], axis=0)]
        outs.append(helper.make_tensor_value_info("picked", TYPES[dtype], None))
    inits = [numpy_helper.from_array(np.zeros((), dtype), "zero"), numpy_helper.from_array(np.int64(0), "zero_i")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TYPES[dtype], list(shape))], outs,
                          initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


def sample(rng, shape, dtype):
    if np.dtype(dtype).kind == "f":
        x = rng.standard_normal(shape).astype(dtype)
        x[rng.random(shape) < 0.4] = 0
        flat = x.reshape(-1)
        flat[:2] = [-0.0, np.nan]  # -0 is zero, NaN is not
        return x
    x = rng.integers(-3 if np.dtype(dtype).kind == "i" else 0, 4, shape).astype(dtype)
    if np.dtype(dtype).itemsize == 8:
        x.reshape(-1)[-1] = np.array(1 << 40, dtype)  # nonzero in the high word only
    return x


def check(m, feeds, want):
    rep = Backend.prepare(m, "CPU")
    assert all(p.target != CPU for p in rep.placement), [(p.op_type, p.reason) for p in rep.placement if p.target == CPU]
    for _ in range(2):
        got = rep.run(feeds)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and g.shape == w.shape
            np.testing.assert_array_equal(g, w)
        run = rep.last_run  # node by node (no whole-graph plan: the count is read on the host), none on the CPU
        assert not run.planned and run.runtime_fallbacks == 0 and run.cpu_segments == 0
        assert "(NonZero" in rep.state.plan_refusal
    return rep


@pytest.mark.parametrize("dtype", list(TYPES), ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape", [(9,), (3, 5), (2, 3, 4), (1, 2, 3, 4), (2, 1, 3, 2, 2)], ids=str)
def test_nonzero_coordinates_as_numpy(rng, dtype, shape):
    x = sample(rng, shape, dtype)
    check(model(shape, dtype), {"x": x}, [np.stack(np.nonzero(x)).astype(np.int64)])


@pytest.mark.parametrize("dtype", [np.float32, np.int64], ids=lambda d: np.dtype(d).name)
def test_a_mask_computed_on_the_device_and_its_rows_gathered(rng, dtype):
    shape = (6, 4)
    x = sample(rng, shape, dtype)
    nz = np.stack(np.nonzero(x > 0)).astype(np.int64)
    check(model(shape, dtype, compare=True, gather=True), {"x": x}, [nz, x[nz[0]]])


def test_no_nonzero_element(rng):
    x = np.zeros((3, 4), np.float32)
    check(model((3, 4), np.float32), {"x": x}, [np.zeros((2, 0), np.int64)])
