"""ONNX QLinearMatMul on the device (MATRIX_MULTIPLY_INTEGER_TO_FLOAT with AScale 1 and BScale
a_scale * b_scale / y_scale, then ELEMENT_WISE_QUANTIZE_LINEAR): against an exact numpy oracle
(the int64 sum, float32 scaling, round half to even, saturation) for every int8 / uint8 pairing,
per-tensor and per-column B scale and zero point, batches; against onnxruntime where its CPU
kernel is exact (u8 x u8, s8 x s8); onnx's node cases (float32 scales) on the device."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import helper, numpy_helper  # noqa: E402
from onnx_node_cases import node_cases, run_on_device  # noqa: E402

from kompute_dml.onnx_backend import Backend  # noqa: E402

_LIMITS = {np.uint8: (0, 255), np.int8: (-128, 127)}


def _oracle(a, a_s, a_zp, b, b_s, b_zp, y_s, y_zp):
    s = (a.astype(np.int64) - np.int64(a_zp)) @ (b.astype(np.int64) - b_zp.astype(np.int64))
    m = ((np.float32(a_s) * b_s.astype(np.float32)) / np.float32(y_s)).astype(np.float32)
    y = np.rint(s.astype(np.float32) * m) + np.float32(y_zp)
    return np.clip(y, *_LIMITS[y_zp.dtype.type]).astype(y_zp.dtype)


CASES = {  # A shape, B shape, A type, B type, output type, per-column B scale / zero point
    "u8u8-batch": ((2, 5, 40), (40, 7), np.uint8, np.uint8, np.uint8, False),
    "s8s8-per-column": ((3, 300), (300, 9), np.int8, np.int8, np.int8, True),
    "u8s8-k1000": ((4, 1000), (1000, 6), np.uint8, np.int8, np.uint8, True),
    "s8u8-batched-b": ((2, 3, 17), (2, 17, 5), np.int8, np.uint8, np.int8, False),
}


@pytest.mark.parametrize("case", list(CASES))
def test_qlinear_matmul_exact_on_the_device(rng, case):
    ash, bsh, at, bt, yt, per_col = CASES[case]
    n = bsh[-1]
    lo_a, hi_a = _LIMITS[at]
    lo_b, hi_b = _LIMITS[bt]
    a = rng.integers(lo_a, hi_a + 1, ash).astype(at)
    b = rng.integers(lo_b, hi_b + 1, bsh).astype(bt)
    a_s, y_s = np.float32(0.02), np.float32(rng.uniform(2, 40))
    b_s = rng.uniform(0.001, 0.05, n).astype(np.float32) if per_col else np.float32(0.013)
    a_zp = np.array(rng.integers(lo_a, hi_a + 1), at)
    b_zp = rng.integers(lo_b, hi_b + 1, n).astype(bt) if per_col else np.array(rng.integers(lo_b, hi_b + 1), bt)
    y_zp = np.array(_LIMITS[yt][0] // 2 + 7, yt)
    inits = [numpy_helper.from_array(np.asarray(v), nm) for nm, v in
             (("a_s", a_s), ("a_zp", a_zp), ("b", b), ("b_s", b_s), ("b_zp", b_zp), ("y_s", y_s), ("y_zp", y_zp))]
    node = helper.make_node("QLinearMatMul", ["a", "a_s", "a_zp", "b", "b_s", "b_zp", "y_s", "y_zp"], ["y"])
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(at))
    g = helper.make_graph([node], "qmm", [helper.make_tensor_value_info("a", elem, list(ash))],
                          [helper.make_tensor_value_info("y", helper.np_dtype_to_tensor_dtype(np.dtype(yt)), None)],
                          inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    rep = Backend.prepare(m, "CPU")
    got = rep.run({"a": a})[0]
    assert {p.target for p in rep.placement} == {"vulkan"} and rep.last_run.runtime_fallbacks == 0, \
        rep.last_run.events
    want = _oracle(a, a_s, a_zp, b, np.asarray(b_s), np.asarray(b_zp), y_s, y_zp)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    if at == bt:  # onnxruntime's CPU product is exact for these (u8 x s8 needs VNNI)
        theirs = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"a": a})[0]
        np.testing.assert_array_equal(got, theirs)


_CASE, NAMES = node_cases(r"^test_qlinearmatmul_\w+_cpu$", __name__)


def test_node_case_count():
    assert len(NAMES) >= 8, NAMES


@pytest.mark.parametrize("name", [n for n in NAMES if "float16" not in n])
def test_onnx_node_case_on_the_device(name):
    run_on_device(_CASE, name)
