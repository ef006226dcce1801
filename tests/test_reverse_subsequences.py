"""REVERSE_SUBSEQUENCES (ops/reverse_subsequences.py, shaders/reverse_subsequences.comp): the page's
two examples; every data type (8, 16, 32 bits) and ranks 1 to 8 against an independent numpy
reference (lengths 0, 1, the axis' length and beyond it: clamped), strided input, lengths and
output views at random offsets, the output poisoned first (every byte outside it unchanged);
refused descriptors with the field they name; feature levels; the helper."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_output, compile_at_level, place, poison_against, random_strides, random_values

import kompute_dml as kdml
from kompute_dml.ops import reverse_subsequences as rs

DT = kdml.DataType
TD = kdml.TensorDesc
TYPES = [DT.FLOAT32, DT.FLOAT16, DT.INT32, DT.INT16, DT.INT8, DT.UINT32, DT.UINT16, DT.UINT8]


def reference(x: np.ndarray, lens: np.ndarray, axis: int) -> np.ndarray:
    """Each line along `axis`: its first min(L, n) elements reversed, element by element."""
    y = x.copy()
    n = x.shape[axis]
    xm, ym = np.moveaxis(x, axis, -1), np.moveaxis(y, axis, -1)
    lm = np.moveaxis(lens, axis, -1)[..., 0]
    for idx in np.ndindex(*lm.shape):
        m = min(int(lm[idx]), n)
        for k in range(m):
            ym[(*idx, k)] = xm[(*idx, m - 1 - k)]
    return y


def test_the_pages_examples(dev):
    x = np.arange(1, 13, dtype=np.float32).reshape(1, 1, 3, 4)
    y = kdml.reverse_subsequences(x, np.array([2, 4, 3], np.uint32).reshape(1, 1, 3, 1), 3, device=dev).numpy()
    np.testing.assert_array_equal(y, np.array([[2, 1, 3, 4], [8, 7, 6, 5], [11, 10, 9, 12]], np.float32).reshape(x.shape))
    y = kdml.reverse_subsequences(x, np.array([2, 3, 1, 0], np.uint32).reshape(1, 1, 1, 4), 2, device=dev).numpy()
    np.testing.assert_array_equal(y, np.array([[5, 10, 3, 4], [1, 6, 7, 8], [9, 2, 11, 12]], np.float32).reshape(x.shape))


CASES = [((2, 3, 5, 4), 2), ((7,), 0), ((3, 9), 1), ((2, 1, 6, 3, 2), 0), ((2, 2, 2, 2, 2, 2, 5, 2), 6), ((4, 33, 3), 1)]


@pytest.mark.parametrize("dt", TYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("case", range(len(CASES)))
def test_against_numpy(dev, rng, case, dt):
    shape, axis = CASES[case]
    x = random_values(rng, dt, shape)
    lshape = tuple(1 if d == axis else s for d, s in enumerate(shape))
    n = shape[axis]
    lens = rng.choice(np.array([0, 1, n, n + 1, 0xFFFFFFFF, *range(n)], np.uint32), size=lshape)
    want = reference(x, lens, axis)
    xd = TD(dt, shape, random_strides(rng, shape, allow_broadcast=True))
    ld = TD(DT.UINT32, lshape, random_strides(rng, lshape, allow_broadcast=False))
    yd = TD(dt, shape, random_strides(rng, shape, allow_broadcast=False))
    if xd.strides is not None and 0 in [s for s, z in zip(xd.strides, shape) if z > 1]:
        want = reference(np.broadcast_to(_broadcast(x, xd), shape).copy(), lens, axis)
        x = _broadcast(x, xd)
    tx, _ = place(dev, rng, xd, x)
    tl, _ = place(dev, rng, ld, lens)
    ty, _ = place(dev, rng, yd)
    before = poison_against(ty, want, rng)
    dev.compile(rs.ReverseSubsequencesDesc(xd, ld, yd, axis)).execute([tx, tl], [ty])
    assert_output(ty, before, want)


def _broadcast(x: np.ndarray, d: kdml.TensorDesc) -> np.ndarray:
    """x as a tensor with d's broadcast (stride 0) dimensions reads it: their first element."""
    idx = tuple(slice(0, 1) if s == 0 and z > 1 else slice(None) for s, z in zip(d.strides, d.sizes))
    return np.broadcast_to(x[idx], x.shape).copy()


def _desc(**over):
    f32 = DT.FLOAT32
    d = {"input_tensor": TD(f32, (1, 1, 3, 4)), "sequence_lengths_tensor": TD(DT.UINT32, (1, 1, 3, 1)),
         "output_tensor": TD(f32, (1, 1, 3, 4)), "axis": 3}
    d.update(over)
    return rs.ReverseSubsequencesDesc(**d)


@pytest.mark.parametrize("over, error, field", [
    ({"output_tensor": TD(DT.FLOAT16, (1, 1, 3, 4))}, kdml.InvalidArgumentError, "output_tensor.data_type"),
    ({"output_tensor": TD(DT.FLOAT32, (1, 1, 4, 3))}, kdml.InvalidArgumentError, "output_tensor.sizes"),
    ({"output_tensor": TD(DT.FLOAT32, (1, 1, 1, 3, 4))}, kdml.InvalidArgumentError, "output_tensor.sizes"),
    ({"axis": 4}, kdml.InvalidArgumentError, "axis"),
    ({"axis": -1}, kdml.InvalidArgumentError, "axis"),
    ({"sequence_lengths_tensor": TD(DT.UINT32, (1, 1, 3, 4))}, kdml.InvalidArgumentError, "sequence_lengths_tensor.sizes"),
    ({"sequence_lengths_tensor": TD(DT.UINT32, (1, 1, 1, 4))}, kdml.InvalidArgumentError, "sequence_lengths_tensor.sizes"),
    ({"sequence_lengths_tensor": TD(DT.INT32, (1, 1, 3, 1))}, kdml.UnsupportedError, "sequence_lengths_tensor"),
    ({"sequence_lengths_tensor": TD(DT.UINT64, (1, 1, 3, 1))}, kdml.UnsupportedError, "sequence_lengths_tensor"),
    ({"input_tensor": TD(DT.INT64, (1, 1, 3, 4)), "output_tensor": TD(DT.INT64, (1, 1, 3, 4))}, kdml.UnsupportedError,
     "input_tensor"),
    ({"output_tensor": TD(DT.FLOAT32, (1, 1, 3, 4), (12, 12, 0, 1))}, kdml.InvalidArgumentError, "output_tensor"),
])
def test_refused(dev, over, error, field):
    with pytest.raises(error, match=field.replace(".", r"\.")):
        dev.compile(_desc(**over))
    assert dev.compile(_desc()) is not None


def test_feature_levels():
    with pytest.raises(kdml.UnsupportedError, match="2_1"):
        compile_at_level(kdml.FeatureLevel.FL_2_0, _desc())
    five = {"input_tensor": TD(DT.FLOAT32, (1, 1, 1, 3, 4)), "sequence_lengths_tensor": TD(DT.UINT32, (1, 1, 1, 3, 1)),
            "output_tensor": TD(DT.FLOAT32, (1, 1, 1, 3, 4)), "axis": 4}
    with pytest.raises(kdml.UnsupportedError, match="input_tensor"):
        compile_at_level(kdml.FeatureLevel.FL_2_1, _desc(**five))
    compile_at_level(kdml.FeatureLevel.FL_3_0, _desc(**five))
    two = {"input_tensor": TD(DT.FLOAT32, (3, 4)), "sequence_lengths_tensor": TD(DT.UINT32, (3, 1)),
           "output_tensor": TD(DT.FLOAT32, (3, 4)), "axis": 1}
    with pytest.raises(kdml.UnsupportedError, match="input_tensor"):
        compile_at_level(kdml.FeatureLevel.FL_3_0, _desc(**two))
    compile_at_level(kdml.FeatureLevel.FL_4_0, _desc(**two))


def test_helper(dev, rng):
    x = rng.integers(-100, 100, (4, 6, 3)).astype(np.int16)
    lens = np.array([[0, 6, 3]] * 4, np.uint32).reshape(4, 1, 3)
    y = kdml.reverse_subsequences(x, lens, -2, device=dev)
    np.testing.assert_array_equal(y.numpy(), reference(x, lens, 1))
    with pytest.raises(kdml.InvalidArgumentError, match="lengths"):
        kdml.reverse_subsequences(x, -lens.astype(np.int64) - 1, 1, device=dev)
    with pytest.raises(kdml.InvalidArgumentError, match="axis"):
        kdml.reverse_subsequences(x, lens, 3, device=dev)


# ---- ONNX ReverseSequence (onnx_backend/handlers_sequence.py) ------------------------------
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402
from onnx_node_cases import node_case_tests  # noqa: E402

from kompute_dml.onnx_backend import Backend  # noqa: E402

test_case_count, test_onnx_node_case_on_the_device = node_case_tests(r"^test_reversesequence_(batch|time)_cpu$", __name__, 2)


@pytest.mark.parametrize("np_type, elem", [(np.float32, TensorProto.FLOAT), (np.float16, TensorProto.FLOAT16),
                                           (np.int8, TensorProto.INT8), (np.bool_, TensorProto.BOOL)],
                         ids=["f32", "f16", "i8", "bool"])
@pytest.mark.parametrize("lens_type", [TensorProto.INT64, TensorProto.INT32], ids=["i64", "i32"])
@pytest.mark.parametrize("batch, time", [(1, 0), (0, 1)])
def test_reverse_sequence_matches_onnxruntime(rng, np_type, elem, lens_type, batch, time):
    shape = [6, 4, 3] if batch == 1 else [4, 6, 3]
    x = (rng.standard_normal(shape) * 10).astype(np_type)
    lens = np.array([6, 1, 0, 3], np.int64 if lens_type == TensorProto.INT64 else np.int32)
    g = helper.make_graph([helper.make_node("ReverseSequence", ["x", "l"], ["y"], batch_axis=batch, time_axis=time)], "g",
                          [helper.make_tensor_value_info("x", elem, shape), helper.make_tensor_value_info("l", lens_type, [4])],
                          [helper.make_tensor_value_info("y", elem, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    if lens_type == TensorProto.INT32:  # onnx's schema takes int64 lengths only: kompute_dml alone
        lshape = [1 if d == time else s for d, s in enumerate(shape)]
        want = reference(x, np.broadcast_to(np.expand_dims(lens, [d for d in range(3) if d != batch]), lshape), time)
    else:
        want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x, "l": lens})[0]
    rep = Backend.prepare(m, "CPU")
    got = rep.run({"x": x, "l": lens})[0]
    assert {pl.target for pl in rep.placement} == {"vulkan"} and rep.last_run.runtime_fallbacks == 0, rep.last_run.events
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
