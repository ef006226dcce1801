"""ACTIVATION_GELU's approximate "tanh" extension (ops/activation.py, shaders/float_unary.comp): the
same bits as the element-wise chain the ONNX backend runs for GPT-2's exported NewGELUActivation
(MULTIPLY, ADD and TANH operators, each tested against its own reference), within 4 units of 2^-24
times |x| of a float64 reference, FLOAT16 (every value) each step rounded to float16 as its nodes; strided and
broadcast layouts with poisoned outputs; the refused value; ONNX Gelu(approximate="tanh") on the
device against onnxruntime, and onnx's own Gelu node cases on the device; the exported chain as one
dispatch with the unfused bits."""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers import assert_outside_unchanged, place, poison_against, random_strides, read_logical

import kompute_dml as kdml

DT = kdml.DataType
TD = kdml.TensorDesc
A, B = np.float32(math.sqrt(2.0 / math.pi)), np.float32(0.044715)


def _ref64(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def _values(rng: np.random.Generator, n: int) -> np.ndarray:
    x = (rng.standard_normal(n) * 4).astype(np.float32)
    special = [0.0, -0.0, 1e-30, -1e-30, 1e-45, 3.0, -3.0, 10.0, -10.0, 60.0, -60.0, 1e20, -1e20, np.inf, -np.inf, np.nan]
    return np.concatenate([np.array(special, np.float32), x])


def _chain(dev: kdml.Device, x: np.ndarray) -> np.ndarray:
    """The exported nodes one by one on kompute_dml's element-wise operators, in x's type, as the ONNX
    backend runs them (Pow by 3: FLOAT32 (x x) x, FLOAT16 ELEMENT_WISE_POW)."""
    t = dev.tensor(x)

    def c(v):
        return dev.tensor(np.array([v], np.float32).astype(x.dtype))
    half = kdml.mul(t, c(0.5), device=dev)
    cube = kdml.mul(kdml.mul(t, t, device=dev), t, device=dev) if x.dtype == np.float32 else \
        kdml.pow(t, c(3.0), device=dev)
    arg = kdml.mul(kdml.add(t, kdml.mul(cube, c(B), device=dev), device=dev), c(A), device=dev)
    return kdml.mul(half, kdml.add(kdml.tanh(arg, device=dev), c(1.0), device=dev), device=dev).numpy()


def _same_bits(y: np.ndarray, want: np.ndarray) -> None:
    nan = np.isnan(y)
    assert np.array_equal(nan, np.isnan(want))
    assert np.array_equal(y[~nan].view(np.uint8), want[~nan].view(np.uint8)), list(zip(y[~nan][:5], want[~nan][:5]))


def test_the_chains_bits_and_the_bound(dev, rng):
    x = _values(rng, 20000)
    y = kdml.gelu(x, approximate="tanh", device=dev).numpy()
    _same_bits(y, _chain(dev, x))
    ref = _ref64(x)
    fin = np.isfinite(ref)
    err = np.abs(y[fin].astype(np.float64) - ref[fin])
    assert (err <= 4 * 2.0 ** -24 * np.abs(x[fin]) + 2.0 ** -149).all()
    assert np.isnan(y[np.isnan(x)]).all() and y[x == np.inf].tolist() == [np.inf]


def test_every_float16_has_the_float16_chains_bits(dev):
    """FLOAT16: each step rounded to float16 as the float16 nodes run (Pow by 3 as ELEMENT_WISE_POW)."""
    x = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16)
    _same_bits(kdml.gelu(x, approximate="tanh", device=dev).numpy(), _chain(dev, x))


@pytest.mark.parametrize("dt", [DT.FLOAT32, DT.FLOAT16], ids=["f32", "f16"])
def test_layouts(dev, rng, dt):
    npd = dt.numpy_dtype
    for rank in (1, 3, 5):
        sizes = tuple(int(v) for v in rng.integers(1, 6, rank))
        xd = TD(dt, sizes, random_strides(rng, sizes, allow_broadcast=True))
        yd = TD(dt, sizes, random_strides(rng, sizes, allow_broadcast=False))
        x, xraw = place(dev, rng, xd, (rng.standard_normal(sizes) * 3).astype(npd), guard=16)
        y, _ = place(dev, rng, yd, guard=16)
        want = _chain(dev, np.ascontiguousarray(read_logical(xraw, x.offset, xd)))
        before = poison_against(y, want, rng)
        dev.compile(kdml.ActivationGeluDesc(xd, yd, approximate="tanh")).execute([x], [y])
        _same_bits(read_logical(assert_outside_unchanged(y, before), y.offset, yd), want)


def test_refused_value(dev):
    d = TD(DT.FLOAT32, (4,))
    with pytest.raises(kdml.InvalidArgumentError, match="^approximate: must be one of"):
        dev.compile(kdml.ActivationGeluDesc(d, d, approximate="sigmoid"))


def _gelu_model(dt):
    pytest.importorskip("onnx")
    from onnx import TensorProto as T
    from onnx import helper
    elem = T.FLOAT if dt == np.float32 else T.FLOAT16
    g = helper.make_graph([helper.make_node("Gelu", ["x"], ["y"], approximate="tanh")], "g",
                          [helper.make_tensor_value_info("x", elem, [3, 40])], [helper.make_tensor_value_info("y", elem, None)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)], ir_version=10)


@pytest.mark.parametrize("dt", [np.float32, np.float16], ids=["f32", "f16"])
def test_onnx_gelu_tanh_on_the_device(rng, dt):
    ort = pytest.importorskip("onnxruntime")
    from kompute_dml.onnx_backend import Backend

    model = _gelu_model(dt)
    x = (rng.standard_normal((3, 40)) * 3).astype(dt)
    rep = Backend.prepare(model, "CPU")
    (y,) = rep.run({"x": x})
    assert (rep.last_run.cpu_segments, rep.last_run.runtime_fallbacks, rep.last_run.dispatches) == (0, 0, 1)
    (want,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    tol = 1e-6 if dt == np.float32 else 2e-3
    np.testing.assert_allclose(y.astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol)


def _new_gelu_model(half_first=True, dt=np.float32):
    pytest.importorskip("onnx")
    from onnx import TensorProto as T
    from onnx import helper, numpy_helper
    N = helper.make_node
    consts = {"half": 0.5, "three": 3.0, "b": B, "a": A, "one": 1.0}
    last = ["h", "u"] if half_first else ["u", "h"]
    nodes = [N("Mul", ["x", "half"], ["h"]), N("Pow", ["x", "three"], ["p"]), N("Mul", ["p", "b"], ["q"]),
             N("Add", ["x", "q"], ["r"]), N("Mul", ["r", "a"], ["s"]), N("Tanh", ["s"], ["t"]), N("Add", ["t", "one"], ["u"]),
             N("Mul", last, ["y"])]
    inits = [numpy_helper.from_array(np.array(v, np.float32).astype(dt), k) for k, v in consts.items()]
    elem = T.FLOAT if dt == np.float32 else T.FLOAT16
    g = helper.make_graph(nodes, "new_gelu", [helper.make_tensor_value_info("x", elem, ["B", 37])],
                          [helper.make_tensor_value_info("y", elem, None)], initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


@pytest.mark.parametrize("dt", [np.float32, np.float16], ids=["f32", "f16"])
@pytest.mark.parametrize("half_first", [True, False])
def test_exported_new_gelu_is_one_dispatch_with_the_unfused_bits(rng, half_first, dt):
    from kompute_dml.onnx_backend import Backend

    model = _new_gelu_model(half_first, dt)
    x = _values(rng, 4 * 37 - 16).reshape(4, 37)
    with np.errstate(over="ignore"):
        x = x.astype(dt)
    rep = Backend.prepare(model, "CPU")
    (y,) = rep.run({"x": x})
    assert rep.last_run.dispatches == 1 and "ACTIVATION_GELU" in rep.summary()
    (unfused,) = Backend.prepare(model, "CPU", fuse=False).run({"x": x})
    _same_bits(y, unfused)


def test_other_constants_run_unfused(rng):
    from onnx import numpy_helper

    from kompute_dml.onnx_backend import Backend

    model = _new_gelu_model()
    for init in model.graph.initializer:
        if init.name == "b":
            init.CopyFrom(numpy_helper.from_array(np.array(0.045, np.float32), "b"))
    x = (rng.standard_normal((2, 37)) * 3).astype(np.float32)
    rep = Backend.prepare(model, "CPU")
    (y,) = rep.run({"x": x})
    assert rep.last_run.dispatches > 1
    (unfused,) = Backend.prepare(model, "CPU", fuse=False).run({"x": x})
    _same_bits(y, unfused)


# onnx's own Gelu node cases (the erf form and the tanh form, each also expanded into its function body);
# without onnx the kernel's tests above still run
try:
    import onnx  # noqa: F401
except ImportError:
    pass
else:
    from onnx_node_cases import node_case_tests

    test_case_count, test_onnx_node_case_on_the_device = node_case_tests(r"^test_gelu\w*_cpu$", __name__, 8)
