"""ELEMENT_WISE_NEGATE's signed integer rows (ops/negate_integer.py): against numpy's wrapping
negation over INT8 to INT64, ranks 1 to 8, random strides (broadcast and in-place included),
edge values (0, -1, the most negative and most positive), outputs poisoned first and every byte
outside them unchanged; the rules; ONNX Neg of int64 on the device."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_output, place, poison_against, random_strides, read_logical

import kompute_dml as kdml

DT = kdml.DataType
TD = kdml.TensorDesc
SIGNED = [DT.INT8, DT.INT16, DT.INT32, DT.INT64]


def _values(rng: np.random.Generator, dt: DT, shape: tuple[int, ...]) -> np.ndarray:
    info = np.iinfo(dt.numpy_dtype)
    v = rng.integers(info.min, info.max, shape, dtype=dt.numpy_dtype, endpoint=True)
    edges = np.array([0, -1, 1, info.min, info.max, info.min + 1], dt.numpy_dtype)
    flat = v.reshape(-1)
    flat[:min(flat.size, edges.size)] = edges[:flat.size]
    return v


@pytest.mark.parametrize("dt", SIGNED, ids=lambda d: d.name)
@pytest.mark.parametrize("rank", [1, 2, 3, 5, 8])
def test_integer_negate_wraps_as_numpy(dev, rng, dt, rank):
    shape = tuple(int(s) for s in rng.integers(1, 5 if rank > 3 else 9, rank))
    x_st = random_strides(rng, shape, allow_broadcast=True)
    xd, yd = TD(dt, shape, x_st), TD(dt, shape, random_strides(rng, shape, allow_broadcast=False))
    x_vals = _values(rng, dt, shape)
    x, raw = place(dev, rng, xd, x_vals)
    y, _ = place(dev, rng, yd)
    want = np.negative(read_logical(raw, x.offset, xd))  # (a broadcast dimension holds one value); numpy wraps
    before = poison_against(y, want, rng)
    op = dev.compile(kdml.ElementWiseNegateDesc(xd, yd))
    op.execute([x], [y])
    assert_output(y, before, want)


@pytest.mark.parametrize("dt", SIGNED, ids=lambda d: d.name)
def test_broadcast_input_and_in_place(dev, rng, dt):
    shape = (3, 5)
    row = _values(rng, dt, (5,))
    xd = TD(dt, shape, (0, 1))  # a row repeated (stride 0)
    x, _ = place(dev, rng, xd, np.broadcast_to(row, shape))
    y = kdml.neg(x, device=dev)
    np.testing.assert_array_equal(y.numpy(), np.broadcast_to(np.negative(row), shape))
    t = dev.tensor(_values(rng, dt, (7,)))
    want = np.negative(t.numpy())
    kdml.neg(t, out=t, device=dev)  # the page allows the output to alias the input
    np.testing.assert_array_equal(t.numpy(), want)


def test_unsigned_and_mixed_types_are_refused(dev):
    for x, y, err, field in ((TD(DT.UINT32, (4,)), TD(DT.UINT32, (4,)), kdml.UnsupportedError, "input_tensor"),
                             (TD(DT.INT32, (4,)), TD(DT.INT64, (4,)), kdml.InvalidArgumentError, "output_tensor")):
        with pytest.raises(err, match=field):
            dev.compile(kdml.ElementWiseNegateDesc(x, y))


def test_onnx_neg_of_int64_on_the_device(rng):
    pytest.importorskip("onnx")
    from onnx import TensorProto as T
    from onnx import helper

    from kompute_dml.onnx_backend import CPU, Backend

    g = helper.make_graph([helper.make_node("Neg", ["x"], ["y"])], "neg",
                          [helper.make_tensor_value_info("x", T.INT64, ["n", 3])],
                          [helper.make_tensor_value_info("y", T.INT64, None)])
    rep = Backend.prepare(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), "CPU")
    assert all(p.target != CPU for p in rep.placement), rep.summary()
    x = _values(rng, DT.INT64, (4, 3))
    (got,) = rep.run({"x": x})
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, np.negative(x))
