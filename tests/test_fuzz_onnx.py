"""Malformed and hostile ONNX models through kompute_dml.onnx_backend.Backend: clear errors,
no crash, no hang.

The backend's conventions (kompute_dml/onnx_backend/__init__.py): a bad model or bad inputs raise
ValueError (kdml.InvalidArgumentError is one), a model of the wrong Python type TypeError,
a node that neither the device nor any CPU fallback can run RuntimeError("no CPU fallback
could run ..."), device failures kdml.DMLError; empty or unparsable bytes and IR versions or
opsets newer than the onnx package knows ValueError naming the source and the field. Absurd
but valid attributes (EyeLike k = 2**62, Trilu k = -2**62) must give
ONNX's answer. Every test has a timeout (pytest-timeout), so a hang fails.
The FIXED_BUGS cases were backend bugs found by this file and since fixed (see
docs/reliability.md); they stay as regression tests.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto as TP
from onnx import helper, numpy_helper
from onnx_reference import assert_product, mmitf_exact

import kompute_dml as kdml
from kompute_dml.onnx_backend import Backend

pytestmark = pytest.mark.timeout(120)
vi = helper.make_tensor_value_info
F = TP.FLOAT
MS = "com.microsoft"


def _model(nodes, inputs, outputs, ms: bool = False) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "fuzz", inputs, outputs)
    ops = [helper.make_opsetid("", 18)] + ([helper.make_opsetid(MS, 1)] if ms else [])
    return helper.make_model(g, opset_imports=ops, ir_version=10)


def _unary(op: str, x_shape, x_type=F, extra_inputs=(), **attrs) -> onnx.ModelProto:
    names = ["x", *[n for n, _, _ in extra_inputs]]
    ins = [vi("x", x_type, x_shape), *[vi(n, t, s) for n, t, s in extra_inputs]]
    return _model([helper.make_node(op, names, ["y"], **attrs)], ins, [vi("y", x_type, None)])


def _mmitf(a_shape, b_shape, bs_shape=(), a_type=TP.INT8, n_inputs: int = 4) -> tuple[onnx.ModelProto, list[Any]]:
    names = ["a", "b", "as", "bs"][:n_inputs]
    ins = [vi("a", a_type, a_shape), vi("b", TP.INT8, b_shape), vi("as", F, []), vi("bs", F, list(bs_shape))][:n_inputs]
    m = _model([helper.make_node("MatMulIntegerToFloat", names, ["y"], domain=MS)], ins, [vi("y", F, None)], ms=True)
    a_np = np.ones(a_shape, onnx.helper.tensor_dtype_to_np_dtype(a_type))
    feeds = [a_np, np.ones(b_shape, np.int8), np.array(1, np.float32), np.ones(bs_shape, np.float32)][:n_inputs]
    return m, feeds


@dataclass
class Bad:
    id: str
    run: Callable[[], Any]
    error: type[BaseException] | tuple[type[BaseException], ...]
    match: str


def _run(model, feeds):
    return lambda: Backend.run_model(model, feeds)


Z34 = np.zeros((3, 4), np.float32)
def _versions(model, ir=None, opset=None):
    if ir is not None:
        model.ir_version = ir
    if opset is not None:
        model.opset_import[0].version = opset
    return model


BAD: list[Bad] = [
    Bad("missing-input", _run(_unary("Identity", [3]), []), kdml.InvalidArgumentError, r"missing input\(s\) \['x'\]"),
    Bad("too-many-inputs", _run(_unary("Identity", [3]), [np.ones(3, np.float32)] * 3), kdml.InvalidArgumentError,
        "3 inputs given"),
    Bad("unknown-input-name", _run(_unary("Identity", [3]), {"q": np.ones(3, np.float32)}), kdml.InvalidArgumentError,
        "unknown input"),
    Bad("wrong-input-type", _run(_unary("Identity", [3]), [np.ones(3, np.float64)]), ValueError,
        "expected float32, got float64"),
    Bad("trilu-k-not-scalar", _run(_unary("Trilu", [3, 4], extra_inputs=[("k", TP.INT64, [2])]), [Z34, np.array([1, 2])]),
        ValueError, "single value"),
    Bad("eyelike-3d", _run(_unary("EyeLike", [2, 3, 4]), [np.zeros((2, 3, 4), np.float32)]), (ValueError, RuntimeError),
        "EyeLike"),
    Bad("eyelike-k-string", _run(_unary("EyeLike", [3, 4], k="a"), [Z34]), ValueError, ""),
    Bad("mmitf-k-mismatch", _run(*_mmitf([2, 3], [4, 5])), ValueError, r"A \(2, 3\) and B \(4, 5\) do not multiply"),
    Bad("mmitf-batch-mismatch", _run(*_mmitf([2, 2, 3], [3, 3, 5])), ValueError, "do not broadcast"),
    Bad("mmitf-a-float", _run(*_mmitf([2, 3], [3, 5], a_type=F)), (ValueError, RuntimeError), "tensor\\(float\\)"),
    Bad("mmitf-missing-scales", _run(*_mmitf([2, 3], [3, 5], n_inputs=2)), (ValueError, RuntimeError),
        "MatMulIntegerToFloat"),
    Bad("unknown-op", _run(_unary("FooBar", [3]), [np.ones(3, np.float32)]), RuntimeError, "no CPU fallback could run"),
    Bad("cycle", _run(_model([helper.make_node("Identity", ["b"], ["a"]), helper.make_node("Identity", ["a"], ["b"])],
                             [vi("x", F, [3])], [vi("b", F, None)]), [np.ones(3, np.float32)]), ValueError, "cycle"),
    Bad("garbage-bytes", lambda: Backend.prepare(b"\x00\x01 not an onnx model"), ValueError,
        "^the model bytes: not a readable ONNX model"),
    Bad("empty-bytes", lambda: Backend.prepare(b""), ValueError, r"^the model bytes: empty \(0 bytes\)"),
    Bad("ir-version-99", lambda: Backend.prepare(_versions(_unary("Identity", [3]), ir=99)), ValueError,
        "^the model: ir_version 99 is newer than this onnx package reads"),
    Bad("opset-99", lambda: Backend.prepare(_versions(_unary("Identity", [3]), opset=99)), ValueError,
        "^the model: opset_import ai.onnx version 99 is newer"),
    Bad("no-ir-version", lambda: Backend.prepare(_versions(_unary("Identity", [3]), ir=0)), ValueError,
        "ir_version is 0 .*not an ONNX model"),
    Bad("unknown-run-keyword", lambda: Backend.prepare(_unary("Identity", [3])).run([np.ones(3, np.float32)], foo=1),
        TypeError, "unexpected keyword argument 'foo'"),
    Bad("model-of-wrong-type", lambda: Backend.prepare(42), TypeError, "ModelProto, bytes or a path"),
    Bad("device-cuda", lambda: Backend.prepare(_unary("Identity", [3]), "CUDA"), ValueError, "not supported"),
    Bad("feature-level-unknown", lambda: Backend.prepare(_unary("Identity", [3]), "CPU", feature_level=0x1234),
        kdml.InvalidArgumentError, "feature_level"),
]

FIXED_BUGS: list[Bad] = [
    # ONNX Trilu needs rank >= 2: the backend sends a 1-D input to the CPU fallback, whose
    # np.triu broadcasting returns a (5, 5) matrix for a (5,) input instead of an error.
    Bad("trilu-1d", _run(_unary("Trilu", [5]), [np.zeros(5, np.float32)]), ValueError, "Trilu"),
    # rank 0: the reference evaluator's TypeError ("Issues with types ...") escapes.
    Bad("trilu-0d", _run(_unary("Trilu", []), [np.array(1, np.float32)]), ValueError, "Trilu"),
    # EyeLike dtype=999: KeyError('999') from the dtype table.
    Bad("eyelike-dtype-999", _run(_unary("EyeLike", [3, 4], dtype=999), [Z34]), ValueError, "dtype"),
    # a value no node produces: KeyError at run time instead of a ValueError at prepare.
    Bad("undefined-value", _run(_model([helper.make_node("Identity", ["nope"], ["y"])], [vi("x", F, [3])],
                                       [vi("y", F, None)]), [np.ones(3, np.float32)]), ValueError, "nope"),
    # b_scale of 4 elements for N = 5: the CPU fallback fails, and the error reported is the
    # reference evaluator's NotImplementedError ("Node type 'MatMulIntegerToFloat' ... is unknown").
    Bad("mmitf-b-scale-length", _run(*_mmitf([2, 3], [3, 5], bs_shape=(4,))), ValueError, "b_scale"),
]


def _check_bad(case: Bad) -> None:
    with pytest.raises(case.error) as ei:
        case.run()
    assert not isinstance(ei.value, (KeyError, IndexError, AttributeError, AssertionError))
    assert (not case.match) or re.search(case.match, str(ei.value)), str(ei.value)
    # the default device still works afterwards
    assert np.array_equal(kdml.identity(np.arange(4, dtype=np.float32)).numpy(), np.arange(4, dtype=np.float32))


@pytest.mark.parametrize("case", BAD, ids=lambda c: c.id)
def test_fuzz_onnx_malformed(case):
    _check_bad(case)


@pytest.mark.parametrize("case", FIXED_BUGS, ids=lambda c: c.id)
def test_fuzz_onnx_fixed_backend_bugs(case):
    _check_bad(case)


# ---- absurd but valid attributes: ONNX's answer ------------------------------------------------
@pytest.mark.parametrize("k", [2**62, -(2**62), 2**63 - 1, -(2**63), 2**31, -(2**31) - 1, 3, -2])
def test_fuzz_onnx_eyelike_huge_k(k):
    (y,) = Backend.run_model(_unary("EyeLike", [3, 4], k=k), [Z34])
    i, j = np.indices((3, 4))
    assert np.array_equal(y, (j - i == k).astype(np.float32))


@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize("k", [2**62, -(2**62), 2**63 - 1, -(2**63), 2**31 - 1, -(2**31), 0])
def test_fuzz_onnx_trilu_huge_k(k, upper):
    x = np.arange(1, 13, dtype=np.float32).reshape(3, 4)
    model = _unary("Trilu", [3, 4], extra_inputs=[("k", TP.INT64, [])], upper=upper)
    (y,) = Backend.run_model(model, [x, np.array(k, np.int64)])
    i, j = np.indices((3, 4))
    keep = (j - i >= k) if upper else (j - i <= k)
    assert np.array_equal(y, np.where(keep, x, 0))


# ---- random models: success with the right answer, or a clear error --------------------------------
NP_TYPES = [np.float32, np.float16, np.float64, np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32,
            np.int64, np.uint64]


def _clear(e: BaseException) -> bool:
    if isinstance(e, (ValueError, kdml.DMLError)):
        return True
    return isinstance(e, RuntimeError) and str(e).startswith("no CPU fallback could run")


def _values(rng: np.random.Generator, shape, dt) -> np.ndarray:
    dt = np.dtype(dt)
    if dt.kind == "f":
        return rng.standard_normal(shape).astype(dt)
    info = np.iinfo(dt)
    return rng.integers(max(info.min, -1000), min(info.max, 1000), shape, endpoint=True).astype(dt)


@st.composite
def onnx_case(draw):
    op = draw(st.sampled_from(["EyeLike", "Trilu", "Identity", "MatMulIntegerToFloat"]))
    seed = draw(st.integers(0, 2**32 - 1))
    big = st.integers(-(2**63), 2**63 - 1)
    small = st.integers(-6, 6)
    dims = st.integers(0, 5)
    if op == "EyeLike":
        shape = tuple(draw(st.lists(dims, min_size=2, max_size=2)))
        attrs = {"k": draw(st.one_of(small, big))}
        dt = draw(st.sampled_from(NP_TYPES))
        if draw(st.booleans()):
            attrs["dtype"] = helper.np_dtype_to_tensor_dtype(np.dtype(draw(st.sampled_from(NP_TYPES))))
        return op, seed, shape, dt, attrs, None
    if op == "Trilu":
        shape = tuple(draw(st.lists(dims, min_size=2, max_size=5)))  # rank < 2: see FIXED_BUGS
        k = draw(st.one_of(st.none(), small, big))
        return op, seed, shape, draw(st.sampled_from(NP_TYPES)), {"upper": draw(st.integers(0, 1))}, k
    if op == "Identity":
        shape = tuple(draw(st.lists(dims, min_size=0, max_size=4)))
        return op, seed, shape, draw(st.sampled_from(NP_TYPES)), {}, None
    batch = tuple(draw(st.lists(st.integers(1, 3), max_size=2)))
    m, k, n = draw(st.integers(1, 6)), draw(st.integers(1, 9)), draw(st.integers(1, 6))
    kb = k if draw(st.integers(0, 4)) else draw(st.integers(1, 9))  # sometimes K mismatches
    mm = {
        "a": (*batch, m, k), "b": (kb, n), "a_t": draw(st.sampled_from([np.int8, np.uint8])),
        "b_t": draw(st.sampled_from([np.int8, np.uint8])), "b_scale": draw(st.sampled_from([(), (n,)])),
        "a_zp": draw(st.booleans()), "b_zp": draw(st.sampled_from([None, (), (n,)])), "bias": draw(st.booleans()),
    }
    return op, seed, None, None, mm, None


def _build(case) -> tuple[onnx.ModelProto, list[np.ndarray], Callable[[list[np.ndarray]], Any]]:
    op, seed, shape, dt, attrs, k = case
    rng = np.random.default_rng(seed)
    if op in ("EyeLike", "Trilu", "Identity"):
        x = _values(rng, shape, dt)
        t = helper.np_dtype_to_tensor_dtype(np.dtype(dt))
        if op == "Trilu" and k is not None:
            model = _unary(op, list(shape), t, extra_inputs=[("k", TP.INT64, [])], **attrs)
            feeds = [x, np.array(k, np.int64)]
        else:
            model = _unary(op, list(shape), t, **attrs)
            feeds = [x]
        if op == "EyeLike":
            out_t = helper.tensor_dtype_to_np_dtype(attrs.get("dtype", t))
            model.graph.output[0].type.tensor_type.elem_type = attrs.get("dtype", t)
            i, j = np.indices(shape)
            return model, feeds, lambda f: (j - i == attrs["k"]).astype(out_t)
        if op == "Trilu":
            kk = 0 if k is None else k
            i, j = np.indices(shape[-2:])
            keep = (j - i >= kk) if attrs["upper"] else (j - i <= kk)
            return model, feeds, lambda f: np.where(keep, f[0], np.zeros((), dt)).astype(dt)
        return model, feeds, lambda f: f[0]
    mm = attrs
    n = mm["b"][1]
    names = ["a", "b", "as", "bs", "azp" if mm["a_zp"] else "", "bzp" if mm["b_zp"] is not None else "",
             "bias" if mm["bias"] else ""]
    while names and not names[-1]:
        names.pop()
    a = _values(rng, mm["a"], mm["a_t"])
    b = _values(rng, mm["b"], mm["b_t"])
    a_s = np.array(rng.uniform(0.01, 0.1), np.float32)
    b_s = rng.uniform(0.01, 0.1, mm["b_scale"]).astype(np.float32)
    vals = {"a": a, "b": b, "as": a_s, "bs": b_s}
    if mm["a_zp"]:
        vals["azp"] = np.array(rng.integers(0, 100), mm["a_t"])
    if mm["b_zp"] is not None:
        vals["bzp"] = rng.integers(0, 100, mm["b_zp"]).astype(mm["b_t"])
    if mm["bias"]:
        vals["bias"] = rng.standard_normal(n).astype(np.float32)
    ins = [vi(nm, helper.np_dtype_to_tensor_dtype(vals[nm].dtype), list(vals[nm].shape)) for nm in names if nm]
    node = helper.make_node("MatMulIntegerToFloat", names, ["y"], domain=MS)
    model = _model([node], ins, [vi("y", F, None)], ms=True)
    feeds = [vals[nm] for nm in names if nm]

    def expect(_f):  # int64 sums, checked bit for bit (tests/onnx_reference.py)
        return mmitf_exact(a, b, a_s, b_s, vals.get("azp"), vals.get("bzp"), vals.get("bias"))

    return model, feeds, expect


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow], deadline=None)
@given(case=onnx_case())
def test_fuzz_onnx_random_models(case):
    model, feeds, expect = _build(case)
    try:
        (y,) = Backend.run_model(model, feeds)
    except Exception as e:  # the point is to classify whatever escapes
        assert _clear(e), f"unclear error {type(e).__name__}: {e}"
        if case[0] == "MatMulIntegerToFloat":
            assert case[4]["a"][-1] != case[4]["b"][0], f"a valid product failed: {e}"
        return
    if case[0] == "MatMulIntegerToFloat":
        assert case[4]["a"][-1] == case[4]["b"][0], "a K mismatch was not refused"
        assert y.dtype == np.float32
        assert_product(y, expect(feeds))
        return
    want = expect(feeds)
    assert y.shape == want.shape and y.dtype == want.dtype
    assert np.array_equal(y.view(f"u{y.dtype.itemsize}") if y.dtype.kind == "f" else y,
                          want.view(f"u{want.dtype.itemsize}") if want.dtype.kind == "f" else want) or (
        y.dtype.kind == "f" and np.array_equal(y, want, equal_nan=True)
    )


def test_fuzz_onnx_device_usable_afterwards():
    assert math.isclose(float(kdml.identity(np.array([1.5], np.float32)).numpy()[0]), 1.5)


def test_a_shape_error_at_run_time_names_the_node():
    """A value whose shape breaks a node's rule only at run time (an Expand of a table to a
    longer sequence: BERT's position ids beyond its 512 rows) names the node, not just numpy's words."""
    c = numpy_helper.from_array(np.ones((1, 4), np.float32), "c")
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Expand", ["c", "s"], ["e"], name="expand_c"),
             helper.make_node("Add", ["x", "e"], ["y"])]
    g = helper.make_graph(nodes, "g", [vi("x", F, [1, "n"])], [vi("y", F, None)], initializer=[c])
    rep = Backend.prepare(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8))
    np.testing.assert_array_equal(rep.run({"x": np.ones((1, 4), np.float32)})[0], np.full((1, 4), 2, np.float32))
    with pytest.raises(ValueError, match=r"^node 1 \(Expand 'expand_c'\): .*\(1, 4\).*\(1, 6\)"):
        rep.run({"x": np.ones((1, 6), np.float32)})
    np.testing.assert_array_equal(rep.run({"x": np.ones((1, 4), np.float32)})[0], np.full((1, 4), 2, np.float32))
