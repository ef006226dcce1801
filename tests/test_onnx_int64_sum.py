"""ONNX ReduceSum over int64 / uint64 values on the device (onnx_backend/int64_sum.py): exact against numpy's
wrapping sums (the exact oracle) over the whole 64-bit range, axes, keepdims, a strided input, placed on Vulkan;
more terms than one sum takes exactly run on the CPU, as exact."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from kompute_dml.onnx_backend import CPU, Backend  # noqa: E402
from kompute_dml.onnx_backend.int64_sum import MAX_TERMS  # noqa: E402

ONNX_TYPE = {np.int64: TensorProto.INT64, np.uint64: TensorProto.UINT64}


def model(shape, axes, keepdims, dtype, transpose=None):
    nodes, x = [], "x"
    if transpose is not None:  # a strided view into the sum (the Transpose a mixture of experts' mask takes)
        nodes.append(helper.make_node("Transpose", ["x"], ["xt"], perm=transpose))
        x = "xt"
    inits = [numpy_helper.from_array(np.asarray(axes, np.int64), "axes")]
    nodes.append(helper.make_node("ReduceSum", [x, "axes"], ["y"], keepdims=keepdims))
    t = ONNX_TYPE[dtype]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", t, list(shape))],
                          [helper.make_tensor_value_info("y", t, None)], initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m


def values(rng, shape, dtype, kind):
    info = np.iinfo(dtype)
    if kind == "mask":
        return rng.integers(0, 2, shape).astype(dtype)
    if kind == "small":
        return rng.integers(-1000 if info.min else 0, 1000, shape).astype(dtype)
    # the whole range: wrapping sums, every 16-bit part and carry exercised
    return rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)


def want_sum(x, axes, keepdims):
    with np.errstate(over="ignore"):
        return np.sum(x, axis=tuple(a % x.ndim for a in axes), keepdims=bool(keepdims), dtype=x.dtype)


@pytest.mark.parametrize("dtype", [np.int64, np.uint64], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("kind", ["mask", "small", "full"])
@pytest.mark.parametrize(("shape", "axes", "keepdims"), [((7,), [0], 0), ((3, 5), [1], 1), ((2, 3, 4), [0, 2], 0),
                                                         ((2, 3, 4, 5), [-1], 1), ((4, 6), [0, 1], 1)], ids=str)
def test_int64_sums_are_exact_on_the_device(rng, dtype, kind, shape, axes, keepdims):
    m = model(shape, axes, keepdims, dtype)
    rep = Backend.prepare(m, "CPU")
    assert all(p.target != CPU for p in rep.placement), [p.reason for p in rep.placement]
    for planned in (True, False):  # the plan, then its replay: one submission each, nothing on the CPU
        x = values(rng, shape, dtype, kind)
        got, want = rep.run({"x": x})[0], want_sum(x, axes, keepdims)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)
        run = rep.last_run
        assert run.planned == planned and run.submissions == 1 and run.runtime_fallbacks == 0 and run.cpu_segments == 0


def test_a_transposed_mask_summed(rng):
    shape, perm = (5, 3, 4), [2, 1, 0]
    m = model(shape, [-1], 0, np.int64, transpose=perm)
    x = rng.integers(0, 2, shape).astype(np.int64)
    got = Backend.prepare(m, "CPU").run({"x": x})[0]
    np.testing.assert_array_equal(got, want_sum(np.transpose(x, perm), [-1], 0))


def test_more_terms_than_one_exact_sum_run_on_the_cpu(rng):
    """(Values whose sums do not overflow: onnxruntime's CPU kernel saturates where numpy and the device wrap.)"""
    shape = (2, MAX_TERMS + 1)
    x = values(rng, shape, np.int64, "small")
    got = Backend.prepare(model(shape, [1], 0, np.int64), "CPU").run({"x": x})[0]
    np.testing.assert_array_equal(got, want_sum(x, [1], 0))
