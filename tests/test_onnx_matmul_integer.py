"""ONNX MatMulInteger alone (its INT32 result read as it is, not through the Cast -> Mul chain the
quantized models fuse) on the device: a 1 x 1 CONVOLUTION_INTEGER seen through strides
(onnx_backend/handlers_conv_integer.matmul_integer), exact against numpy's int64 product, over the
8-bit type pairs, zero points absent / scalar / per column of B, batched A (also transposed in the
graph: a strided view), and B with leading 1s; a batched B on the CPU, exact too."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

from kompute_dml.onnx_backend import Backend  # noqa: E402

ELEM = {np.int8: T.INT8, np.uint8: T.UINT8}


def _q(rng, dt, shape):
    info = np.iinfo(dt)
    v = np.asarray(rng.integers(info.min, info.max + 1, shape)).astype(dt)
    if v.size >= 2:
        v.reshape(-1)[:2] = (info.min, info.max)  # the edges
    return v


def _run(a, b, azp, bzp, transpose_a=False):
    inits = [numpy_helper.from_array(b, "b")]
    names = ["a_in" if transpose_a else "a", "b"]
    for name, zp in (("azp", azp), ("bzp", bzp)):
        if zp is not None:
            inits.append(numpy_helper.from_array(zp, name))
            names.append(name)
        elif name == "azp" and bzp is not None:
            names.append("")
    nodes = [helper.make_node("MatMulInteger", names, ["y"])]
    feed = a
    if transpose_a:  # the device value A is a strided view of the Transpose's input
        perm = [*range(a.ndim - 2), a.ndim - 1, a.ndim - 2]
        feed = np.ascontiguousarray(np.swapaxes(a, -1, -2))
        nodes.insert(0, helper.make_node("Transpose", ["a"], ["a_in"], perm=perm))
    graph = helper.make_graph(nodes, "mmi", [helper.make_tensor_value_info("a", ELEM[a.dtype.type], list(feed.shape))],
                              [helper.make_tensor_value_info("y", T.INT32, None)], inits)
    rep = Backend.prepare(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), "CPU")
    (y,) = rep.run({"a": feed})
    return y, rep


def _want(a, b, azp, bzp):
    za = np.int64(0) if azp is None else np.int64(azp.reshape(-1)[0])
    zb = np.int64(0) if bzp is None else bzp.astype(np.int64).reshape(-1)
    return np.matmul(a.astype(np.int64) - za, b.astype(np.int64) - zb).astype(np.int32)


@pytest.mark.parametrize(("at", "bt"), [(np.uint8, np.uint8), (np.uint8, np.int8), (np.int8, np.int8), (np.int8, np.uint8)])
@pytest.mark.parametrize("zero_points", ["none", "scalar", "per column", "b only"])
@pytest.mark.parametrize(("a_shape", "b_shape"), [((5, 33), (33, 7)), ((2, 3, 4, 17), (17, 9)), ((3, 6, 8), (1, 8, 5))])
def test_on_the_device(rng, at, bt, zero_points, a_shape, b_shape):
    a, b = _q(rng, at, a_shape), _q(rng, bt, b_shape)
    n = b_shape[-1]
    azp = None if zero_points in ("none", "b only") else _q(rng, at, ())
    bzp = {"none": None, "scalar": _q(rng, bt, ()), "per column": _q(rng, bt, (n,)), "b only": _q(rng, bt, (n,))}[zero_points]
    y, rep = _run(a, b, azp, bzp)
    np.testing.assert_array_equal(y, _want(a, b, azp, bzp))
    assert rep.last_run.planned and not rep.last_run.runtime_fallbacks and not rep.last_run.cpu_segments


def test_a_strided_a(rng, monkeypatch):
    """A the Transpose's view of its input: the kernel reads it through strides (M's stride 1)."""
    import kompute_dml as kdml

    seen, real = [], kdml.conv_integer
    monkeypatch.setattr(kdml, "conv_integer", lambda x, *a, **k: seen.append(x.desc.effective_strides) or real(x, *a, **k))
    a, b = _q(rng, np.uint8, (2, 6, 11)), _q(rng, np.int8, (11, 4))
    azp, bzp = _q(rng, np.uint8, ()), _q(rng, np.int8, (4,))
    y, rep = _run(a, b, azp, bzp, transpose_a=True)
    np.testing.assert_array_equal(y, _want(a, b, azp, bzp))
    assert rep.last_run.planned and not rep.last_run.runtime_fallbacks
    assert seen and tuple(seen[0][:3]) == (66, 6, 1), seen  # (batch, K, M): the transposed input's own strides


def test_a_batched_b_on_the_cpu_and_exact(rng):
    a, b = _q(rng, np.uint8, (2, 5, 6)), _q(rng, np.uint8, (2, 6, 3))
    y, rep = _run(a, b, None, None)
    np.testing.assert_array_equal(y, _want(a, b, None, None))
    assert rep.last_run.runtime_fallbacks or rep.last_run.cpu_segments
