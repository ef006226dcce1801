"""`kompute-dml run --compare-onnxruntime`'s verdicts (kompute_dml/cli/compare.py): the stated
tolerance for floats, exact comparison for integers, NaN where both are NaN, and the note that
onnxruntime's u8 x s8 product is the inexact side on processors without VNNI."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
from ort_exactness import onnxruntime_exact

from kompute_dml.cli import compare


def test_float_verdicts_against_the_stated_tolerance():
    ref = np.array([1.0, -2.0, 100.0, np.nan], np.float32)
    near = ref * np.float32(1 + 5e-4)
    far = ref + np.float32([0, 0, 0.2, 0])
    lines = compare.compare_lines(["a", "b"], [near, far], [ref, ref], set())
    assert lines[0].startswith("  a: max |kompute_dml - onnxruntime| = ") and lines[0].count("agree") == 1
    assert "DIFFER" in lines[1] and "max relative 0.002" in lines[1] and "0.2" in lines[1]
    assert len(lines) == 2


def test_integer_and_shape_verdicts():
    a = np.array([1, 2, 3], np.int64)
    lines = compare.compare_lines(["x", "y", "z"], [a, a + np.array([0, 1, 0]), a.astype(np.int32)], [a, a, a], set())
    assert "x: equal (int64" in lines[0]
    assert "y: DIFFERS (int64, compared exactly; 1 of 3 elements differ)" in lines[1]
    assert "z: DIFFERS: ours int32 [3], onnxruntime int64 [3]" in lines[2]


@pytest.mark.parametrize("exact", [False, True])
def test_the_quantized_product_note(monkeypatch, exact):
    monkeypatch.setattr(compare, "ort_u8s8_exact", lambda: exact)
    ref = np.ones(4, np.float32)
    lines = compare.compare_lines(["y"], [ref + 1], [ref], {"MatMulIntegerToFloat", "Add"})
    assert ("note: the model has MatMulIntegerToFloat" in lines[-1]) != exact
    assert not any("note" in ln for ln in compare.compare_lines(["y"], [ref], [ref], {"MatMulIntegerToFloat"}))


def test_the_probe_agrees_with_the_test_suites_probe():
    assert compare.ort_u8s8_exact() == onnxruntime_exact(np.uint8, np.int8).exact
