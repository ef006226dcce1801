"""The ONNX backend's fusions (kompute_dml/onnx_backend/fusions.py) on small hand-built models:
Add -> LayerNormalization (its sum also written where later nodes read it) and Add -> Softmax ->
IsNaN -> Where each run as one dispatch (and com.microsoft SkipLayerNormalization as one), only
where every other intermediate value is read by the chain alone and is no graph output, the
attributes and the Where's constant fit; results bit for
bit the unfused backend's (prepare(fuse=False)), in the whole-graph program and node by node,
and within float32 rounding of onnxruntime (exactly its zeros where a fully masked row's NaN is
replaced) or, for FLOAT16 and the unfused cases, of onnx's reference evaluator (which rounds every
node's output to its type; onnxruntime's FLOAT16 Add -> Softmax does not round the masked
scores); the whole-graph program's dispatch count drops by the chain's length minus one."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

from kompute_dml.onnx_backend import Backend  # noqa: E402
from kompute_dml.onnx_backend.values import VULKAN  # noqa: E402

N = helper.make_node
ELEM = {np.float32: T.FLOAT, np.float16: T.FLOAT16}


def _model(nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    opsets = [helper.make_opsetid("", opset), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(g, opset_imports=opsets, ir_version=10)


def _vi(name, dt, shape=None):
    return helper.make_tensor_value_info(name, ELEM[dt], shape)


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(f"u{a.dtype.itemsize}")


def _runs(model, feeds):
    """Outputs and the last run's statistics: fused and unfused, each as one program and node by
    node; asserts every output has the same bits in all four."""
    got = {}
    for fuse in (True, False):
        for graph in (True, False):
            rep = Backend.prepare(model, "CPU", fuse=fuse)
            rep.state.node_by_node = not graph
            outs = rep.run(feeds)
            got[fuse, graph] = (outs, rep.last_run, rep)
    ref = got[False, False][0]
    for key, (outs, _, _) in got.items():
        for name, o, r in zip(ref._fields, outs, ref):
            assert o.dtype == r.dtype and np.array_equal(_bits(o), _bits(r)), f"{name}: {key} differs from unfused"
    return got


def _ort(model, feeds):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def _reference(model, feeds):
    from onnx.reference import ReferenceEvaluator

    with np.errstate(invalid="ignore"):  # (-inf) - (-inf) in fully masked rows
        return ReferenceEvaluator(model).run(None, feeds)


# ---- Add -> LayerNormalization ----------------------------------------------------------------------
def _add_ln(dt=np.float32, hidden=32, skip_shape=("B", "S", 32), axis=-1, extra=(), outputs=("y",), eps=1e-5):
    rng = np.random.default_rng(1)
    nodes = [N("Add", ["x", "skip"], ["sum"]),
             N("LayerNormalization", ["sum", "gamma", "beta"], ["y"], axis=axis, epsilon=eps), *extra]
    inits = [numpy_helper.from_array(rng.standard_normal(hidden).astype(dt), n) for n in ("gamma", "beta")]
    return _model(nodes, [_vi("x", dt, ["B", "S", hidden]), _vi("skip", dt, list(skip_shape))],
                  [_vi(o, dt) for o in outputs], inits)


def _ln_feeds(rng, dt=np.float32, shape=(2, 5, 32), skip_shape=None):
    x = (rng.standard_normal(shape) * 3).astype(dt)
    skip = rng.standard_normal(skip_shape or shape).astype(dt)
    return {"x": x, "skip": skip}


@pytest.mark.parametrize("dt", [np.float32, np.float16], ids=["f32", "f16"])
def test_add_layer_norm_is_one_dispatch(rng, dt):
    model = _add_ln(dt)
    feeds = _ln_feeds(rng, dt)
    got = _runs(model, feeds)
    (y,), st, rep = got[True, True]
    assert st.dispatches == 1 and got[False, True][1].dispatches == 2 and st.vulkan_nodes == 2
    assert [p.operator for p in rep.placement] == ["fused into node 1", "MEAN_VARIANCE_NORMALIZATION1 (fused "
                                                   "Add+LayerNormalization: nodes 0, 1)"]
    assert [p.fused_into for p in rep.placement] == [1, None] and {p.target for p in rep.placement} == {VULKAN}
    assert "Add+LayerNormalization x1 -> MEAN_VARIANCE_NORMALIZATION1" in rep.summary()
    (want,) = _ort(model, feeds)
    tol = 1e-5 if dt == np.float32 else 4e-3
    np.testing.assert_allclose(y.astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol)


def test_add_layer_norm_broadcast_skip_and_profile_scope(rng):
    """A skip broadcast over the batch (Add's numpy broadcasting), and the fused dispatch's profile
    row named by its chain."""
    model = _add_ln(skip_shape=("S", 32))
    feeds = _ln_feeds(rng, skip_shape=(5, 32))
    _runs(model, feeds)
    rep = Backend.prepare(model, "CPU")
    rep.run(feeds)
    with rep.device.profile() as p:
        rep.run(feeds)
    # the program's own input and output copies carry the scopes "inputs" and "outputs"
    assert [r.scope for r in p.rows] == ["inputs", "1 Add+LayerNormalization ", "outputs"]
    assert p.rows[1].variant.startswith("mvn_skip_f32")


@pytest.mark.parametrize("case", ["second reader", "graph output", "read twice"])
def test_add_layer_norm_keeps_a_sum_read_later(rng, case):
    """Where nodes after the LayerNormalization (or the graph's outputs) also read the sum, the one
    dispatch writes it too (a residual stream, Pattern.shared): one dispatch fewer, the same bits
    in both executors."""
    extra, outputs = {"second reader": ((N("Mul", ["sum", "x"], ["prod"]),), ("y", "prod")),
                      "read twice": ((N("Add", ["sum", "sum"], ["twice"]),), ("y", "twice")),
                      "graph output": ((), ("y", "sum"))}[case]
    model = _add_ln(extra=extra, outputs=outputs)
    rep = Backend.prepare(model, "CPU")
    assert [f.shared for f in rep.fusions.by_carrier.values()] == [("sum",)]
    feeds = _ln_feeds(rng)
    got = _runs(model, feeds)
    assert got[True, True][1].dispatches == got[False, True][1].dispatches - 1
    for g, w in zip(got[True, True][0], _reference(model, feeds)):
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("case", ["read before the normalization", "axis -2", "mean output"])
def test_add_layer_norm_left_alone(rng, case):
    """Not fused where a node between the Add and the LayerNormalization reads the sum, the
    normalization is not over the last axis alone, or asks for its mean: the nodes run as before,
    with the same results."""
    axis = -2 if case == "axis -2" else -1
    outputs = ("y", "prod") if case == "read before the normalization" else ("y",)
    model = _add_ln(outputs=outputs, axis=axis)
    if case == "read before the normalization":
        model.graph.node.insert(1, N("Mul", ["sum", "x"], ["prod"]))
    if case == "mean output":
        model.graph.node[1].output.append("mean")
        model.graph.output.append(_vi("mean", np.float32))
    rep = Backend.prepare(model, "CPU")
    assert not rep.fusions.by_carrier and all(p.fused_into is None for p in rep.placement)
    if case == "mean output":
        return  # the LayerNormalization's mean runs on the CPU: not this test's subject
    feeds = _ln_feeds(rng)
    got = _runs(model, feeds)
    assert got[True, True][1].dispatches == got[False, True][1].dispatches >= 2
    want = _reference(model, feeds)
    for g, w in zip(got[True, True][0], want):
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-5)


# ---- Add -> Softmax -> IsNaN -> Where -----------------------------------------------------------------
def _attention(dt=np.float32, mask_shape=("B", 1, "S", "S"), zero=0.0, zero_shape=(), opset=17, axis=None,
               outputs=("y",), extra=()):
    attrs = {} if axis is None else {"axis": axis}
    nodes = [N("Add", ["scores", "mask"], ["masked"]), N("Softmax", ["masked"], ["probs"], **attrs),
             N("IsNaN", ["probs"], ["nan"]), N("Where", ["nan", "zero", "probs"], ["y"]), *extra]
    inits = [numpy_helper.from_array(np.full(zero_shape, zero, dt), "zero")]
    return _model(nodes, [_vi("scores", dt, ["B", 4, "S", "S"]), _vi("mask", dt, list(mask_shape))],
                  [_vi(o, dt) for o in outputs], inits, opset)


def _att_feeds(rng, dt=np.float32, b=2, s=6, mask_shape=None, fill=-np.inf):
    scores = (rng.standard_normal((b, 4, s, s)) * 3).astype(dt)
    shape = mask_shape or (b, 1, s, s)
    keep = rng.random(shape) < 0.7
    keep[0, ..., :] = False  # batch 0: every key masked (NaN rows with -inf)
    return {"scores": scores, "mask": np.where(keep, 0.0, fill).astype(dt)}


@pytest.mark.parametrize("dt", [np.float32, np.float16], ids=["f32", "f16"])
@pytest.mark.parametrize("mask_shape", [(2, 1, 6, 6), (2, 1, 1, 6)], ids=["B1SS", "B11S"])
@pytest.mark.parametrize("fill", [-np.inf, "min"], ids=["-inf", "min"])
def test_masked_softmax_is_one_dispatch(rng, dt, mask_shape, fill):
    fill = float(np.finfo(dt).min) if fill == "min" else fill
    model = _attention(dt, mask_shape=[("B", 1, "S", "S"), ("B", 1, 1, "S")][mask_shape[2] == 1])
    feeds = _att_feeds(rng, dt, mask_shape=mask_shape, fill=fill)
    got = _runs(model, feeds)
    (y,), st, rep = got[True, True]
    assert st.dispatches == 1 and got[False, True][1].dispatches == 4
    assert [p.fused_into for p in rep.placement] == [3, 3, 3, None]
    assert rep.placement[3].operator.startswith("ACTIVATION_SOFTMAX1 (fused Add+Softmax+IsNaN+Where")
    (want,) = _ort(model, feeds) if dt == np.float32 else _reference(model, feeds)
    if fill == -np.inf:
        assert (y[0] == 0).all() and (_bits(y[0]) == 0).all()  # NaN rows: +0, as the Where writes them
    np.testing.assert_array_equal(y == 0, want == 0)
    tol = 1e-6 if dt == np.float32 else 1e-3
    np.testing.assert_allclose(y.astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol)


@pytest.mark.parametrize("case", ["minus zero", "not zero", "probs output", "second reader", "axis 2",
                                  "opset 11 axis 1"])
def test_masked_softmax_left_alone(rng, case):
    """Not fused where the Where's constant is -0.0 (Where would write its bits, the kernel +0) or
    not 0, the softmax is a graph output or the IsNaN result has another reader, or the softmax is
    not over the last axis alone (opset 11's axis 1 flattens three axes): the nodes run as before
    (onnx's reference evaluator: fully masked rows are NaN, written as the constant's bits; for
    opset 11, whose flattening the evaluator does not model, onnxruntime's values)."""
    kw = {"minus zero": {"zero": -0.0}, "not zero": {"zero": 1.0}, "probs output": {"outputs": ("y", "probs")},
          "second reader": {"extra": (N("And", ["nan", "nan"], ["n2"]),), "outputs": ("y", "n2")},
          "axis 2": {"axis": 2}, "opset 11 axis 1": {"opset": 11, "axis": 1}}[case]
    model = _attention(**kw)
    if case == "second reader":
        model.graph.output[1].type.tensor_type.elem_type = T.BOOL
    rep = Backend.prepare(model, "CPU")
    assert not rep.fusions.by_carrier, case
    feeds = _att_feeds(rng)
    got = _runs(model, feeds)
    assert got[True, True][1].dispatches == got[False, True][1].dispatches >= 4
    want = _ort(model, feeds) if case == "opset 11 axis 1" else _reference(model, feeds)
    for g, w in zip(got[True, True][0], want):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)
        if case != "opset 11 axis 1":
            assert np.array_equal(_bits(g)[g == 0], _bits(w)[w == 0])


def test_masked_softmax_opset_11_last_axis_and_scalar_zero(rng):
    """Opset 11 Softmax with axis = rank - 1 (its flattened block is the last axis) and a rank-1
    zero constant fuse."""
    model = _attention(opset=11, axis=3, zero_shape=(1,))
    got = _runs(model, _att_feeds(rng))
    assert got[True, True][1].dispatches == 1


def test_masked_softmax_unfused_at_run_time(rng):
    """A chain that matches statically but whose run does not fit the fused kernel (the Where's
    zero constant broadcasts the result to a fifth dimension) runs node by node: an event says so,
    the results are onnxruntime's."""
    model = _attention(zero_shape=(1, 1, 1, 1, 1))
    rep = Backend.prepare(model, "CPU")
    assert 3 in rep.fusions.by_carrier
    feeds = _att_feeds(rng)
    got = _runs(model, feeds)
    (y,), st, _ = got[True, True]
    assert st.dispatches == 4 and any("ran unfused" in e for e in st.events), st.events
    assert y.shape == (1, 2, 4, 6, 6)
    (want,) = _ort(model, feeds)
    np.testing.assert_allclose(y, want, rtol=1e-6, atol=1e-7)
    node_by_node = got[True, False][1]
    assert any("ran unfused" in e for e in node_by_node.events) and node_by_node.runtime_fallbacks == 0


def test_two_chains_share_the_mask(rng):
    """An encoder's layers: one mask read by two chains (its readers are outside the chains'
    intermediates), a LayerNormalization chain beside them; every chain fused."""
    dt = np.float32
    nodes = [N("Add", ["scores", "mask"], ["m1"]), N("Softmax", ["m1"], ["p1"]), N("IsNaN", ["p1"], ["n1"]),
             N("Where", ["n1", "zero", "p1"], ["w1"]),
             N("Add", ["w1", "mask"], ["m2"]), N("Softmax", ["m2"], ["p2"]), N("IsNaN", ["p2"], ["n2"]),
             N("Where", ["n2", "zero", "p2"], ["w2"]),
             N("Add", ["w2", "w1"], ["r"]), N("LayerNormalization", ["r", "g"], ["y"], axis=-1)]
    inits = [numpy_helper.from_array(np.array(0.0, dt), "zero"),
             numpy_helper.from_array(np.linspace(0.5, 1.5, 6).astype(dt), "g")]
    model = _model(nodes, [_vi("scores", dt, ["B", 4, "S", "S"]), _vi("mask", dt, ["B", 1, 1, "S"])],
                   [_vi("y", dt)], inits)
    feeds = _att_feeds(rng, mask_shape=(2, 1, 1, 6))
    got = _runs(model, feeds)
    rep = got[True, True][2]
    assert sorted(rep.fusions.by_carrier) == [3, 7, 9] and got[True, True][1].dispatches == 3
    assert got[False, True][1].dispatches == 10
    assert "Add+Softmax+IsNaN+Where x2" in rep.summary() and "Add+LayerNormalization x1" in rep.summary()


# ---- com.microsoft SkipLayerNormalization -------------------------------------------------------------
@pytest.mark.parametrize("dt", [np.float32, np.float16], ids=["f32", "f16"])
@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "no-bias"])
def test_skip_layer_norm_is_one_dispatch(rng, dt, with_bias):
    """SkipLayerNormalization with its sum output: one dispatch, both outputs the bits of the same
    computation written as Add -> (Add ->) LayerNormalization and run unfused."""
    h = 24
    ins = ["x", "skip", "gamma", "beta"] + (["bias"] if with_bias else [])
    inits = [numpy_helper.from_array(rng.standard_normal(h).astype(dt), n) for n in ("gamma", "beta", "bias")]
    skip_ln = _model([N("SkipLayerNormalization", ins, ["y", "", "", "s"], domain="com.microsoft", epsilon=1e-6)],
                     [_vi("x", dt, ["B", "S", h]), _vi("skip", dt, ["B", "S", h])], [_vi("y", dt), _vi("s", dt)],
                     inits)
    sums = [N("Add", ["x", "skip"], ["s0" if with_bias else "s"])] + (
        [N("Add", ["s0", "bias"], ["s"])] if with_bias else [])
    plain = _model([*sums, N("LayerNormalization", ["s", "gamma", "beta"], ["y"], axis=-1, epsilon=1e-6)],
                   [_vi("x", dt, ["B", "S", h]), _vi("skip", dt, ["B", "S", h])], [_vi("y", dt), _vi("s", dt)], inits)
    feeds = {"x": rng.standard_normal((2, 7, h)).astype(dt), "skip": rng.standard_normal((2, 7, h)).astype(dt)}
    fused = Backend.prepare(skip_ln, "CPU")
    y, s = fused.run(feeds)
    assert fused.last_run.dispatches == 1
    unfused = Backend.prepare(plain, "CPU", fuse=False)
    y2, s2 = unfused.run(feeds)
    assert unfused.last_run.dispatches == 2 + with_bias
    assert np.array_equal(_bits(s), _bits(s2)) and np.array_equal(_bits(y), _bits(y2))
    want_y, want_s = _ort(skip_ln, feeds)
    np.testing.assert_allclose(y.astype(np.float64), want_y.astype(np.float64), rtol=4e-3 if dt == np.float16 else 2e-5,
                               atol=4e-3 if dt == np.float16 else 2e-5)
    if dt == np.float32:  # onnxruntime adds in float32 like ELEMENT_WISE_ADD1 (FLOAT16: it rounds once)
        assert np.array_equal(_bits(s), _bits(want_s))
