"""Whole models as one device program (onnx_backend/device_graph.py): shape arithmetic resolved
on the host per input shape, every other node on the device, one upload, one submission and
one download per output; results against onnx's reference evaluator and numpy."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402
from onnx_reference import mmitf_exact  # noqa: E402

import kompute_dml as kdml  # noqa: E402
from kompute_dml.onnx_backend import Backend  # noqa: E402
from kompute_dml.onnx_backend.values import CPU, HOST, VULKAN  # noqa: E402

OPSETS = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]


def _model(nodes, inputs, outputs, inits=()):
    g = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    return helper.make_model(g, opset_imports=OPSETS, ir_version=10)


def _encoder_like(rng, hidden=16, vocab=50):
    """Embedding lookup (quantized table, DequantizeLinear), a padding mask turned into an
    additive bias through Cast / Equal / Where / Expand, a head split and merge through
    Reshape / Transpose with shapes computed from Shape / Gather / Unsqueeze / Concat, and a
    quantized product (MatMulIntegerToFloat) with a residual Add."""
    table = rng.integers(0, 256, (vocab, hidden)).astype(np.uint8)
    w = rng.integers(-128, 128, (hidden, hidden)).astype(np.int8)
    inits = [
        numpy_helper.from_array(table, "table"),
        numpy_helper.from_array(np.array(0.05, np.float32), "t_scale"),
        numpy_helper.from_array(np.array(128, np.uint8), "t_zp"),
        numpy_helper.from_array(w, "w"),
        numpy_helper.from_array(np.array(0.01, np.float32), "w_scale"),
        numpy_helper.from_array(np.array(0.02, np.float32), "a_scale"),
        numpy_helper.from_array(np.array(0, np.int64), "zero_i"),
        numpy_helper.from_array(np.array([0], np.int64), "ax0"),
        numpy_helper.from_array(np.array([1], np.int64), "i1"),
        numpy_helper.from_array(np.array([2, -1], np.int64), "heads"),
        numpy_helper.from_array(np.array(-1e4, np.float32), "neg"),
        numpy_helper.from_array(np.array(0.0, np.float32), "zero_f"),
        numpy_helper.from_array(np.array([0, 2, 1, 3], np.int64), "unused"),
    ]
    n = helper.make_node
    nodes = [
        n("Gather", ["table", "ids"], ["emb_q"]),
        n("DequantizeLinear", ["emb_q", "t_scale", "t_zp"], ["emb"]),
        n("Shape", ["ids"], ["ids_shape"]),
        n("Gather", ["ids_shape", "zero_i"], ["batch"]),
        n("Unsqueeze", ["batch", "ax0"], ["batch1"]),
        n("Gather", ["ids_shape", "i1"], ["seq1"]),
        n("Concat", ["batch1", "seq1", "heads"], ["split_shape"], axis=0),
        n("Reshape", ["emb", "split_shape"], ["split"]),
        n("Transpose", ["split"], ["heads_first"], perm=[0, 2, 1, 3]),
        n("Transpose", ["heads_first"], ["back"], perm=[0, 2, 1, 3]),
        n("Concat", ["batch1", "seq1", "minus1"], ["merge_shape"], axis=0),
        n("Reshape", ["back", "merge_shape"], ["merged"]),
        n("Cast", ["mask"], ["mask_b"], to=T.BOOL),
        n("Where", ["mask_b", "zero_f", "neg"], ["bias"]),
        n("Unsqueeze", ["bias", "minus1"], ["bias3"]),
        n("Shape", ["merged"], ["m_shape"]),
        n("Expand", ["bias3", "m_shape"], ["bias_full"]),
        n("Add", ["merged", "bias_full"], ["x"]),
        n("Equal", ["ids", "zero_i"], ["is_pad"]),
        n("Cast", ["is_pad"], ["is_pad_f"], to=T.FLOAT),
        n("Unsqueeze", ["is_pad_f", "minus1"], ["pad3"]),
        n("Add", ["x", "pad3"], ["x2"]),
        n("MatMulIntegerToFloat", ["xq", "w", "a_scale", "w_scale"], ["proj"], domain="com.microsoft"),
        n("Add", ["proj", "x2"], ["y"]),
    ]
    inits.append(numpy_helper.from_array(np.array([-1], np.int64), "minus1"))
    inputs = [helper.make_tensor_value_info("ids", T.INT64, ["B", "S"]),
              helper.make_tensor_value_info("mask", T.INT64, ["B", "S"]),
              helper.make_tensor_value_info("xq", T.UINT8, ["B", "S", hidden])]
    outputs = [helper.make_tensor_value_info("y", T.FLOAT, None), helper.make_tensor_value_info("is_pad", T.BOOL, None)]
    return _model(nodes, inputs, outputs, inits), (table, w)


# How often a plan starts what it recorded so far (DevicePolicy.plan_flush_ms): never, or before
# every node (each node's executions a head of their own: Recording.flush)
FLUSH = pytest.mark.parametrize("flush_ms", [0.0, 1e-9], ids=["planned-then-run", "flushed-while-planned"])


def _flush_every(monkeypatch, rep, flush_ms):
    import dataclasses

    from kompute_dml.runtime.memory import DeviceMemory
    monkeypatch.setattr(rep.device, "policy", dataclasses.replace(rep.device.policy, plan_flush_ms=flush_ms))
    # every flush starts all it recorded, waiting for buffers still being made (on a loaded host they
    # may be made for the whole plan, which would then never flush)
    monkeypatch.setattr(type(rep.device.engine), "allocating", lambda self: False)
    monkeypatch.setattr(DeviceMemory, "ready", property(lambda self: True))


def _feeds(rng, b, s, hidden=16, vocab=50):
    ids = rng.integers(0, vocab, (b, s)).astype(np.int64)
    ids[0, -1] = 0
    mask = (rng.random((b, s)) < 0.8).astype(np.int64)
    xq = rng.integers(0, 256, (b, s, hidden)).astype(np.uint8)
    return {"ids": ids, "mask": mask, "xq": xq}


def _expected(table, w, feeds):
    """The graph in numpy: float32 operations in the graph's order; the quantized product
    from the int64 oracle."""
    ids, mask = feeds["ids"], feeds["mask"]
    emb = (table[ids].astype(np.int64) - 128).astype(np.float32) * np.float32(0.05)
    x = emb + np.where(mask != 0, np.float32(0), np.float32(-1e4))[..., None]
    is_pad = ids == 0
    x2 = x + is_pad.astype(np.float32)[..., None]
    proj = mmitf_exact(feeds["xq"], w, np.float32(0.02), np.float32(0.01), None, None, None)
    return proj.value + x2, is_pad


def test_placement_puts_shape_arithmetic_on_the_host_and_the_rest_on_the_device(rng):
    model, _ = _encoder_like(rng)
    rep = Backend.prepare(model, "CPU")
    where = {(p.index, p.op_type): p.target for p in rep.placement}
    assert CPU not in where.values() and rep.graph_mode
    assert all(t == HOST for (i, op), t in where.items() if op in ("Shape", "Concat"))
    assert where[(0, "Gather")] == VULKAN and where[(3, "Gather")] == HOST
    s = rep.summary()
    assert "resolved on the host per input shape" in s and "one device submission" in s


@FLUSH
@pytest.mark.parametrize("program_out", [8 << 20, 16, 0], ids=["program-copies", "mask-only", "staging"])
def test_whole_graph_runs_as_one_submission_and_matches_the_reference(rng, monkeypatch, program_out, flush_ms):
    """`program_out`: the bytes of outputs the program copies into pinned memory itself
    (device_graph.PROGRAM_OUT_BYTES); the others are downloaded after it through staging. At 16
    bytes the float output goes through staging while the boolean mask is still copied by the
    program where it fits (2 x 5, 1 x 1; not 3 x 7): both paths in one run."""
    from kompute_dml.onnx_backend import device_graph
    monkeypatch.setattr(device_graph, "PROGRAM_OUT_BYTES", program_out)
    model, (table, w) = _encoder_like(rng)
    rep = Backend.prepare(model, "CPU")
    _flush_every(monkeypatch, rep, flush_ms)
    kept = []
    for b, s in ((2, 5), (2, 5), (3, 7), (1, 1), (3, 7)):
        feeds = _feeds(rng, b, s)
        misses = rep.device.stats()["descriptor_sets"]
        y, is_pad = rep.run(feeds)
        st = rep.last_run
        assert st.submissions == 1 and st.uploads == 1 and st.downloads == 2 and st.runtime_fallbacks == 0
        assert st.cpu_segments == 0
        plan = rep.state.plans[next(reversed(rep.state.plans))] if st.planned else None
        assert plan is None or (plan.flushed > 0) == (flush_ms > 0)
        want_y, want_pad = _expected(table, w, feeds)
        np.testing.assert_array_equal(is_pad, want_pad)
        assert is_pad.dtype == np.bool_
        np.testing.assert_allclose(y, want_y, rtol=2e-6, atol=1e-5)
        if not st.planned:  # a signature seen before: nothing is built again
            assert rep.device.stats()["descriptor_sets"] == misses
        kept.append((y, want_y))  # results still held are never handed out again
    for y, want_y in kept:
        np.testing.assert_allclose(y, want_y, rtol=2e-6, atol=1e-5)
    planned = [k for k, v in rep.state.plans.items() if v is not None]
    assert len(planned) == 3


@FLUSH
def test_plan_buffers_are_reused_without_corrupting_live_values(rng, monkeypatch, flush_ms):
    """A chain of 40 additions, each output dying after the next node: the plan reuses
    buffers, and every value read later (the first one, at the end) survives, also where each
    node ran as it was planned (a buffer reused across heads)."""
    n = helper.make_node
    nodes = [n("Add", ["x", "x"], ["v0"])]
    for i in range(1, 40):
        nodes.append(n("Add", [f"v{i - 1}", "x"], [f"v{i}"]))
    nodes.append(n("Sub", ["v39", "v0"], ["y"]))
    model = _model(nodes, [helper.make_tensor_value_info("x", T.FLOAT, [64])],
                   [helper.make_tensor_value_info("y", T.FLOAT, [64])])
    rep = Backend.prepare(model, "CPU")
    _flush_every(monkeypatch, rep, flush_ms)
    x = rng.integers(-50, 50, 64).astype(np.float32)
    for _ in range(2):  # the first run (heads, then the rest), then the whole program
        (y,) = rep.run({"x": x})
        np.testing.assert_array_equal(y, 39 * x)  # small integers: every float operation exact
        x = x + 1
    plan = next(iter(rep.state.plans.values()))
    assert plan.device_bytes <= 4 * 256  # a handful of 256-byte blocks, not 40


def test_data_dependent_shapes_run_node_by_node(rng):
    """A Reshape whose target shape is computed from input data cannot be planned: the run
    goes node by node and its events say so."""
    n = helper.make_node
    nodes = [n("Add", ["shape_in", "zero"], ["target"]), n("Reshape", ["x", "target"], ["y"])]
    model = _model(nodes, [helper.make_tensor_value_info("x", T.FLOAT, [6]),
                           helper.make_tensor_value_info("shape_in", T.INT64, [2])],
                   [helper.make_tensor_value_info("y", T.FLOAT, None)],
                   [numpy_helper.from_array(np.zeros(2, np.int64), "zero")])
    rep = Backend.prepare(model, "CPU")
    x = np.arange(6, dtype=np.float32)
    (y,) = rep.run({"x": x, "shape_in": np.array([2, 3], np.int64)})
    np.testing.assert_array_equal(y, x.reshape(2, 3))
    assert rep.last_run.submissions == 0
    assert any("node by node" in e for e in rep.last_run.events)


def test_models_with_cpu_nodes_keep_the_hybrid_path(rng):
    model = _model([helper.make_node("Abs", ["x"], ["r"]), helper.make_node("Add", ["r", "x"], ["y"])],
                   [helper.make_tensor_value_info("x", T.FLOAT, [4])], [helper.make_tensor_value_info("y", T.FLOAT, [4])])
    rep = Backend.prepare(model, "CPU", exclude_ops=["Abs"])  # a CPU node whatever the device runs
    assert not rep.graph_mode
    x = rng.standard_normal(4).astype(np.float32)
    (y,) = rep.run({"x": x})
    np.testing.assert_array_equal(y, np.abs(x) + x)


def test_shape_siblings_are_prepared_where_the_policy_says(rng, monkeypatch):
    """On a policy that prepares them, a model's first plan creates the pipelines of the
    variants another sequence length picks (softmax's per-row-length variants): a new length's
    first run then creates none."""
    import dataclasses

    from kompute_dml.ops.contract import SMX_FAST

    assert set(SMX_FAST.siblings("smx_f32_l8_k4")) >= {"smx_f32_l8_k1", "smx_f32_l32_k8"}
    assert not any(v.startswith("smx_f16") for v in SMX_FAST.siblings("smx_f32_l8_k4"))
    # weight layouts and features are not shape siblings (their specialization constants differ)
    from kompute_dml.ops.contract import MMG
    assert MMG.siblings("mmg8_r") == ()
    model = _model([helper.make_node("Softmax", ["x"], ["y"])], [helper.make_tensor_value_info("x", T.FLOAT, ["n", "m"])],
                   [helper.make_tensor_value_info("y", T.FLOAT, None)])
    rep = Backend.prepare(model, "CPU")
    dev = rep.device
    monkeypatch.setattr(dev, "policy", dataclasses.replace(dev.policy, prepare_siblings=True))
    monkeypatch.setattr(dev.engine, "prepared_variants", set())
    rep.run({"x": rng.standard_normal((3, 5)).astype(np.float32)})
    # prepared by this first plan (pipelines of earlier tests' softmax runs may exist already,
    # so the count below alone would not show it)
    assert {"smx_f32_l8_k1", "smx_f32_l32_k8", "smx_f32_l32_k16"} <= dev.engine.prepared_variants
    dev.engine.programs.wait()  # made on a thread of their own (Programs.prepare_later)
    created = dev.stats()["pipelines_created"]
    for m in (17, 100, 300):
        x = rng.standard_normal((3, m)).astype(np.float32)
        (y,) = rep.run({"x": x})
        e = np.exp(x - x.max(axis=1, keepdims=True))
        np.testing.assert_allclose(y, e / e.sum(axis=1, keepdims=True), rtol=1e-5)
    assert dev.stats()["pipelines_created"] == created


@FLUSH
def test_plans_share_buffers_and_match_node_by_node_bit_for_bit(rng, monkeypatch, flush_ms):
    """Signatures planned one after another draw on one set of buffers (rep.state.plan_buffers); going
    back to an earlier signature, every output still equals the node-by-node run's bits."""
    model, _ = _encoder_like(rng)
    graph = Backend.prepare(model, "CPU")
    _flush_every(monkeypatch, graph, flush_ms)
    nodes = Backend.prepare(model, "CPU")
    nodes.state.node_by_node = True
    sizes = []
    for b, s in ((2, 5), (3, 9), (1, 3), (2, 5), (4, 11), (3, 9)):
        feeds = _feeds(rng, b, s)
        got = graph.run(feeds)
        assert graph.last_run.submissions == 1
        want = nodes.run(feeds)
        assert nodes.last_run.submissions == 0
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and np.array_equal(g.view(np.uint8), w.view(np.uint8))
        sizes.append(sum(len(v) for v in graph.state.plan_buffers.values()))
    assert sizes[3] == sizes[2] and sizes[-1] == sizes[-2]  # a signature seen before allocates nothing


@pytest.mark.parametrize(("ta", "tb", "with_c"), [(0, 0, True), (1, 0, True), (0, 1, False), (1, 1, True)])
def test_onnx_gemm_runs_on_gemm(rng, ta, tb, with_c):
    m, k, n = 5, 7, 3
    a = rng.standard_normal((k, m) if ta else (m, k)).astype(np.float32)
    b = rng.standard_normal((n, k) if tb else (k, n)).astype(np.float32)
    c = rng.standard_normal((n,)).astype(np.float32)
    node = helper.make_node("Gemm", ["a", "b", "c"] if with_c else ["a", "b"], ["y"], transA=ta, transB=tb,
                            alpha=0.5, beta=2.0)
    model = _model([node], [helper.make_tensor_value_info(x, T.FLOAT, None) for x in "ab"] +
                   ([helper.make_tensor_value_info("c", T.FLOAT, None)] if with_c else []),
                   [helper.make_tensor_value_info("y", T.FLOAT, None)])
    rep = Backend.prepare(model, "CPU")
    assert rep.placement[0].operator == "GEMM"
    feeds = {"a": a, "b": b, **({"c": c} if with_c else {})}
    (y,) = rep.run(feeds)
    want = 0.5 * ((a.T if ta else a).astype(np.float64) @ (b.T if tb else b)) + (2.0 * c if with_c else 0)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
    assert rep.last_run.submissions == 1


def test_host_integer_div_truncates_as_onnxruntime():
    """Integer Div of host-known values (host_eval.py: exported decoders' head_dim arithmetic)
    truncates toward zero as onnxruntime's C++ quotient does (numpy's // would floor -7 / 2 to
    -4); a zero divisor is not evaluated here (the fallback engine's)."""
    ort = pytest.importorskip("onnxruntime")
    from kompute_dml.onnx_backend.host_eval import HOST_EVAL

    node = helper.make_node("Div", ["a", "b"], ["y"])
    a = np.array([7, -7, 7, -7, 0, 6, -9223372036854775807], np.int64)
    b = np.array([2, 2, -2, -2, 3, 3, 2], np.int64)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, T.INT64, [7]) for n in "ab"],
                              [helper.make_tensor_value_info("y", T.INT64, [7])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"a": a, "b": b})[0]
    got = HOST_EVAL["Div"](node, [a, b])
    assert got.dtype == np.int64 and got.tolist() == want.tolist() == [3, -3, -3, 3, 0, 2, -4611686018427387903]
    with pytest.raises(NotImplementedError):
        HOST_EVAL["Div"](node, [a, np.zeros(7, np.int64)])
    with pytest.raises(NotImplementedError), np.errstate(over="ignore"):  # float16: the fallback engine's arithmetic
        HOST_EVAL["Div"](node, [a.astype(np.float16), b.astype(np.float16)])


def _edge_floats(rng, dtype, n=64):
    info = np.finfo(dtype)
    edges = [0.0, -0.0, 1.0, -1.5, np.inf, -np.inf, np.nan, info.tiny, info.tiny / 4, -info.tiny / 8, info.max,
             -info.max, info.eps, 3.0, 7.0, 0.1, 2.0 ** 24 + 1, -(2.0 ** 31), 2.0 ** 31 - 128]
    x = np.concatenate([np.array(edges, np.float64), rng.standard_normal(n) * 10.0 ** rng.integers(-40, 40, n)])
    with np.errstate(over="ignore"):
        return x.astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_host_float_arithmetic_and_casts_equal_onnxruntime_bit_for_bit(rng, dtype):
    """Float Add / Sub / Mul / Div / comparisons and Casts of host-known values (host_eval.py:
    a decoder's rotary angles and mask values, computed at every plan) against onnxruntime's CPU
    kernels on edge values (signed zeros, subnormals, infinities, NaN, the largest finite values,
    products past the range), bit for bit; a float to an integer only where every value fits."""
    ort = pytest.importorskip("onnxruntime")
    from onnx import helper as h

    from kompute_dml.onnx_backend.host_eval import HOST_EVAL

    a, b = _edge_floats(rng, dtype), _edge_floats(rng, dtype)[::-1].copy()
    elem = {np.float32: T.FLOAT, np.float64: T.DOUBLE}[dtype]

    def onnxruntime(node, feeds, out_type):
        graph = h.make_graph([node], "g", [h.make_tensor_value_info(k, elem if v.dtype.kind == "f" else T.INT64, None)
                                           for k, v in feeds.items()], [h.make_tensor_value_info("y", out_type, None)])
        model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=8)
        return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]

    def same(got, want):
        assert got.dtype == want.dtype and got.shape == want.shape
        assert np.array_equal(got.view(f"u{got.itemsize}") if got.dtype.kind == "f" else got,
                              want.view(f"u{want.itemsize}") if want.dtype.kind == "f" else want)

    for op in ("Add", "Sub", "Mul", "Div", "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"):
        node = h.make_node(op, ["a", "b"], ["y"])
        out = T.BOOL if op not in ("Add", "Sub", "Mul", "Div") else elem
        same(HOST_EVAL[op](node, [a, b]), onnxruntime(node, {"a": a, "b": b}, out))
    # (2^62 + 2^38 + 1 and the like: rounded through float64 first they would land on a tie and round down)
    ints = np.array([0, 1, -1, 2 ** 24 + 1, -(2 ** 53) - 3, 2 ** 62 + 2 ** 39 + 1, 7 * 2 ** 40 + 5, 2 ** 62 + 2 ** 38 + 1,
                     -(2 ** 60 + 2 ** 36 + 1), 2 ** 54 + 2 ** 30 + 1], np.int64)
    for to, src in ((T.FLOAT, ints), (T.DOUBLE, ints), (T.FLOAT, a), (T.DOUBLE, a), (T.BOOL, a)):
        node = h.make_node("Cast", ["a"], ["y"], to=to)
        same(HOST_EVAL["Cast"](node, [src]), onnxruntime(node, {"a": src}, to))
    fits = np.array([0.0, -0.0, 2.5, -2.5, 1e9, -7.99, 2.0 ** 62], dtype)
    node = h.make_node("Cast", ["a"], ["y"], to=T.INT64)
    same(HOST_EVAL["Cast"](node, [fits]), onnxruntime(node, {"a": fits}, T.INT64))
    for unfit in (a, np.array([2.0 ** 63], dtype)):  # NaN, infinities, out of range: C++ leaves them undefined
        with pytest.raises(NotImplementedError):
            HOST_EVAL["Cast"](node, [unfit])
    with pytest.raises(NotImplementedError):  # float16: onnxruntime's own conversion routine
        HOST_EVAL["Cast"](h.make_node("Cast", ["a"], ["y"], to=T.FLOAT16), [a])


def test_host_slice_clamps_as_onnx_says():
    """Slice of host-known values (host_eval.py) as the ONNX spec and onnxruntime clamp it:
    with a negative step a start below -dim is clamped to 0, so element 0 is taken (numpy's
    slicing, and onnx's reference evaluator, give nothing there)."""
    ort = pytest.importorskip("onnxruntime")
    from kompute_dml.onnx_backend.host_eval import HOST_EVAL

    names = ("x", "s", "e", "a", "t")
    node = helper.make_node("Slice", list(names), ["y"])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, T.INT64, None) for n in names],
                              [helper.make_tensor_value_info("y", T.INT64, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    x = np.arange(10, dtype=np.int64)
    for start, end, step in [(-20, -30, -1), (-20, 5, 1), (8, -20, -2), (3, 100, 2), (100, 0, -3), (-1, -11, -1),
                             (-20, -30, 1)]:
        ins = [x, np.array([start]), np.array([end]), np.array([0]), np.array([step])]
        (want,) = sess.run(None, dict(zip(names, ins)))
        assert HOST_EVAL["Slice"](node, ins).tolist() == want.tolist(), (start, end, step)
    assert HOST_EVAL["Slice"](node, [x, np.array([-20]), np.array([-30]), np.array([0]), np.array([-1])]).tolist() == [0]


def test_products_sharing_their_activation_run_as_one_and_equal_their_own_products(rng):
    """Q, K and V (MatMulIntegerToFloat on one quantized activation, constant weights with
    per-tensor and per-column scales, zero points and biases) run as one product whose column
    views feed the heads' Reshape / Transpose without a copy; every output's bits equal those
    of the three products run one by one, in whole-graph and node-by-node runs."""
    a = rng.integers(0, 256, (2, 5, 16), dtype=np.uint8)
    inits = []
    nodes = []
    for i, n in enumerate((8, 12, 8)):
        inits += [numpy_helper.from_array(rng.integers(-128, 128, (16, n), dtype=np.int8), f"w{i}"),
                  numpy_helper.from_array((np.full((), 0.01 * (i + 1)) if i != 1 else
                                           rng.uniform(0.001, 0.1, n)).astype(np.float32), f"bs{i}"),
                  numpy_helper.from_array(rng.integers(-3, 4, n if i == 2 else ()).astype(np.int8), f"bz{i}"),
                  numpy_helper.from_array(rng.standard_normal(n).astype(np.float32), f"bias{i}")]
        nodes.append(helper.make_node("MatMulIntegerToFloat", ["a", f"w{i}", "s", f"bs{i}", "z", f"bz{i}", f"bias{i}"],
                                      [f"p{i}"], domain="com.microsoft"))
        nodes.append(helper.make_node("Reshape", [f"p{i}", f"shape{i}"], [f"r{i}"]))
        nodes.append(helper.make_node("Transpose", [f"r{i}"], [f"y{i}"], perm=[0, 2, 1, 3]))
        inits.append(numpy_helper.from_array(np.array([2, 5, 2, n // 2], np.int64), f"shape{i}"))
    graph = helper.make_graph(nodes, "qkv", [helper.make_tensor_value_info("a", T.UINT8, [2, 5, 16]),
                                             helper.make_tensor_value_info("s", T.FLOAT, []),
                                             helper.make_tensor_value_info("z", T.UINT8, [])],
                              [helper.make_tensor_value_info(f"y{i}", T.FLOAT, None) for i in range(3)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    feeds = {"a": a, "s": np.array(0.02, np.float32), "z": np.array(9, np.uint8)}
    grouped = Backend.prepare(model, "CPU")
    single = Backend.prepare(model, "CPU", group_products=False)  # three products
    want = single.run(feeds)
    # the outputs are transposed views (not packed): read after the run, not copied by it
    assert next(iter(single.state.plans.values())).dispatches == 3
    for mode in (True, False):
        grouped.state.node_by_node = not mode
        got = grouped.run(feeds)
        for g, w in zip(got, want):
            assert g.shape == w.shape
            np.testing.assert_array_equal(g.view(np.uint32), w.view(np.uint32))
    plan = next(iter(grouped.state.plans.values()))
    # one product, no copy for the Reshapes of the column views
    assert plan.dispatches == 1


def _float_projections(rng, dt, kinds, scale=0.25):
    """x [2, 5, 16] -> per kind a MatMul by constant weights ("bias": then Add(., bias), "scaled": then Add and
    Mul(., scale), "plain": alone) -> Reshape -> Transpose, as a transformer's Q, K, V projections."""
    inits, nodes = [], []
    for i, kind in enumerate(kinds):
        n = (8, 12, 8, 4)[i]
        w = rng.standard_normal((16, n)).astype(dt)
        if kind == "plain":  # column 0 negative: a zero row of x gives -0 there, which a +0 bias would lose
            w[:, 0] = -np.abs(w[:, 0])
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        nodes.append(helper.make_node("MatMul", ["x", f"w{i}"], [f"m{i}"]))
        last = f"m{i}"
        if kind in ("bias", "scaled"):
            inits.append(numpy_helper.from_array(rng.standard_normal(n).astype(dt), f"bias{i}"))
            nodes.append(helper.make_node("Add", [f"bias{i}", last] if i % 2 else [last, f"bias{i}"], [f"p{i}"]))
            last = f"p{i}"
        if kind == "scaled":
            inits.append(numpy_helper.from_array(np.array(scale, dt), f"c{i}"))
            nodes.append(helper.make_node("Mul", [last, f"c{i}"], [f"s{i}"]))
            last = f"s{i}"
        nodes.append(helper.make_node("Reshape", [last, f"shape{i}"], [f"r{i}"]))
        nodes.append(helper.make_node("Transpose", [f"r{i}"], [f"y{i}"], perm=[0, 2, 1, 3]))
        inits.append(numpy_helper.from_array(np.array([2, 5, 2, n // 2], np.int64), f"shape{i}"))
    elem = T.FLOAT if dt == np.float32 else T.FLOAT16
    graph = helper.make_graph(nodes, "qkv", [helper.make_tensor_value_info("x", elem, [2, 5, 16])],
                              [helper.make_tensor_value_info(f"y{i}", elem, None) for i in range(len(kinds))], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("dt", [np.float32, np.float16])
@pytest.mark.parametrize("kinds,scale,dispatches", [
    (("bias", "bias", "bias"), 1, (1, 3)), (("plain", "plain", "plain"), 1, (1, 3)),
    (("bias", "plain", "bias", "scaled"), 0.25, (1, 4)), (("scaled", "bias"), 8.0, (1, 2)),
    (("bias", "plain", "bias", "scaled"), 0.3, (2, 5))])
def test_float_products_sharing_their_activation_run_as_one(rng, dt, kinds, scale, dispatches):
    """Float projections on one activation (MatMul by constant weights, with a constant bias or without,
    product_groups.find_float_groups) run as one GEMM whose column views feed the heads' Reshape /
    Transpose; every output's bits equal those of the products run one by one, in whole-graph and
    node-by-node runs. Plain products on the A of biased ones join them with a bias of -0 (a zero row of x
keeps its -0 products' sign); a sum that a Mul by a power of two
    scales (fusion_bias's MatMul -> Add -> Mul) is a biased member with its weights and bias scaled, a sum
    scaled by another constant a biased member whose Mul runs after it."""
    model = _float_projections(rng, dt, kinds, scale)
    feeds = {"x": rng.standard_normal((2, 5, 16)).astype(dt)}
    feeds["x"][0, 0] = 0
    single = Backend.prepare(model, "CPU", group_products=False)
    want = single.run(feeds)
    for kind, w in zip(kinds, want):
        assert kind != "plain" or (np.signbit(w) & (w == 0)).any()  # the -0 the bias must keep
    assert next(iter(single.state.plans.values())).dispatches == dispatches[1]
    grouped = Backend.prepare(model, "CPU")
    for mode in (True, False):
        grouped.state.node_by_node = not mode
        got = grouped.run(feeds)
        for g, w in zip(got, want):
            assert g.shape == w.shape and g.dtype == w.dtype
            np.testing.assert_array_equal(g.view(f"u{g.itemsize}"), w.view(f"u{w.itemsize}"))
    assert next(iter(grouped.state.plans.values())).dispatches == dispatches[0]


@pytest.mark.parametrize("kind", ["float32", "float16", "integer"])
def test_grouped_members_start_on_the_tensor_alignment(rng, kind):
    """Members whose widths are no multiple of 16 bytes (a router's 5 columns beside projections of 3 and
    7: Qwen2-MoE's shared expert after onnxruntime's optimizer) start at aligned columns of the one
    product, zero columns between them, so each column view binds where DirectML's 16-byte offset rule
    allows (a Sigmoid reads each; before, the second member's view at byte 20 was refused); every
    output's bits equal the products run one by one."""
    dt = {"float32": np.float32, "float16": np.float16, "integer": np.float32}[kind]
    elem = T.FLOAT16 if dt == np.float16 else T.FLOAT
    inits, nodes = [], []
    for i, n in enumerate((5, 3, 7)):
        if kind == "integer":
            inits += [numpy_helper.from_array(rng.integers(-128, 128, (16, n), dtype=np.int8), f"w{i}"),
                      numpy_helper.from_array(rng.uniform(0.001, 0.1, n).astype(np.float32), f"bs{i}"),
                      numpy_helper.from_array(rng.standard_normal(n).astype(np.float32), f"bias{i}")]
            nodes.append(helper.make_node("MatMulIntegerToFloat", ["a", f"w{i}", "s", f"bs{i}", "z", "", f"bias{i}"],
                                          [f"p{i}"], domain="com.microsoft"))
        else:
            inits += [numpy_helper.from_array(rng.standard_normal((16, n)).astype(dt), f"w{i}"),
                      numpy_helper.from_array(rng.standard_normal(n).astype(dt), f"bias{i}")]
            nodes += [helper.make_node("MatMul", ["a", f"w{i}"], [f"m{i}"]),
                      helper.make_node("Add", [f"m{i}", f"bias{i}"], [f"p{i}"])]
        nodes.append(helper.make_node("Sigmoid", [f"p{i}"], [f"y{i}"]))
    if kind == "integer":
        ins = [helper.make_tensor_value_info("a", T.UINT8, [2, 5, 16]), helper.make_tensor_value_info("s", T.FLOAT, []),
               helper.make_tensor_value_info("z", T.UINT8, [])]
        feeds = {"a": rng.integers(0, 256, (2, 5, 16), dtype=np.uint8), "s": np.array(0.02, np.float32),
                 "z": np.array(9, np.uint8)}
    else:
        ins = [helper.make_tensor_value_info("a", elem, [2, 5, 16])]
        feeds = {"a": rng.standard_normal((2, 5, 16)).astype(dt)}
    graph = helper.make_graph(nodes, "g", ins, [helper.make_tensor_value_info(f"y{i}", elem, None) for i in range(3)],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    want = Backend.prepare(model, "CPU", group_products=False).run(feeds)
    grouped = Backend.prepare(model, "CPU")
    got = grouped.run(feeds)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g.view(f"u{g.itemsize}"), w.view(f"u{w.itemsize}"))
    assert next(iter(grouped.state.plans.values())).dispatches == 4  # one product, three Sigmoids


def test_view_strides_agree_with_numpys_no_copy_reshape(rng):
    """handlers_values.view_strides: strides exactly where numpy reshapes a view without a copy,
    and then the same elements in the same order (random slices and transposes, random
    factorizations with inserted size-1 dimensions)."""
    from kompute_dml.onnx_backend.handlers_values import view_strides

    views = 0
    for _ in range(1500):
        a = np.arange(int(np.prod(base := rng.integers(1, 4, rng.integers(1, 5)))) * 8).reshape(*base, 8)
        v = a[tuple(slice(None, None, int(rng.integers(1, 3))) for _ in a.shape)]
        if rng.random() < 0.4:
            v = v.transpose(rng.permutation(v.ndim))
        dims, rem = [], v.size
        while rem > 1:
            d = int(rng.choice([d for d in range(2, rem + 1) if rem % d == 0]))
            dims.append(d)
            rem //= d
        if rng.random() < 0.3:
            dims.insert(int(rng.integers(0, len(dims) + 1)), 1)
        new = tuple(dims) or (1,)
        st = view_strides(v.shape, tuple(s // 8 for s in v.strides), new)
        try:
            r = v.view()
            r.shape = new  # numpy refuses where a copy is needed
            numpy_can = True
        except AttributeError:
            numpy_can = False
        assert (st is not None) == numpy_can or v.size == 1, (v.shape, v.strides, new)
        if st is not None:
            views += 1
            w = np.lib.stride_tricks.as_strided(v, new, tuple(x * 8 for x in st))
            np.testing.assert_array_equal(w, v.reshape(new))
    assert views > 500


def test_host_nodes_of_constants_alone_are_evaluated_and_uploaded_once_per_model(rng, monkeypatch):
    """A quantized embedding table dequantized by a DequantizeLinear of initializers alone (as
    in MiniLM): the same for every input, so it is evaluated once and uploaded once, and a
    second input shape plans without either; Shape arithmetic stays per input shape."""
    from kompute_dml.onnx_backend import transfers

    table = rng.integers(0, 256, (30, 8)).astype(np.uint8)
    inits = [numpy_helper.from_array(table, "table_q"), numpy_helper.from_array(np.array(0.25, np.float32), "s"),
             numpy_helper.from_array(np.array(100, np.uint8), "zp"), numpy_helper.from_array(np.array([-1], np.int64), "m1")]
    n = helper.make_node
    nodes = [n("DequantizeLinear", ["table_q", "s", "zp"], ["table"]),
             n("Gather", ["table", "ids"], ["emb"]),
             n("Shape", ["ids"], ["shp"]), n("Concat", ["shp", "m1"], ["shp3"], axis=0),
             n("Reshape", ["emb", "shp3"], ["emb3"]), n("Add", ["emb3", "emb3"], ["y"])]
    model = _model(nodes, [helper.make_tensor_value_info("ids", T.INT64, ["B", "S"])],
                   [helper.make_tensor_value_info("y", T.FLOAT, None)], inits)
    rep = Backend.prepare(model, "CPU")
    assert rep.folded_outputs == {"table"}
    calls = []
    real = transfers.evaluate
    monkeypatch.setattr(transfers, "evaluate", lambda node, *a: calls.append(node.op_type) or real(node, *a))
    for b, s in ((2, 5), (3, 4), (2, 5), (1, 9)):
        ids = rng.integers(0, 30, (b, s)).astype(np.int64)
        (y,) = rep.run({"ids": ids})
        want = (table[ids].astype(np.int64) - 100).astype(np.float32) * np.float32(0.25)
        np.testing.assert_array_equal(y, want + want)
        st = rep.last_run
        assert st.submissions == 1
        if (b, s) != (2, 5):
            assert st.constant_uploads == 0 or not st.planned  # the table is on the device already
    assert calls.count("DequantizeLinear") == 1 and calls.count("Concat") == 3


def test_outputs_are_copied_in_the_waits_native_call(rng, monkeypatch):
    """A replayed run copies its outputs into the caller's arrays inside kp's wait
    (kdml_wait_copy: the GIL taken back once per run), giving the bits of the copy made after
    the wait, run after run; outputs past staging.PARALLEL_BYTES keep the copy threads."""
    from kompute_dml.runtime import staging
    from kompute_dml.runtime.inflight import InFlight, Owned

    made = []
    wait_owned = InFlight.wait_owned

    def waited(self, owned, spin_cap_ns=0):  # every replayed run's wait (engine._launch)
        wait_owned(self, owned, spin_cap_ns)
        if isinstance(owned, Owned):
            made.append(owned.copies is not None and owned.copies.done)

    monkeypatch.setattr(InFlight, "wait_owned", waited)
    model, _weights = _encoder_like(rng)
    rep = Backend.prepare(model, "CPU")
    feeds = [_feeds(rng, 2, 5) for _ in range(4)]
    got = [rep.run(f)[0].copy() for f in feeds]
    assert made and all(made[1:]), "every replayed run made its copies in the wait"
    made.clear()
    monkeypatch.setattr(staging, "PARALLEL_BYTES", 0)  # every output "large": copied after the wait
    again = [rep.run(f)[0] for f in feeds]
    assert made and not any(made)
    for a, b in zip(got, again):
        np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))


def test_large_inputs_go_over_the_copy_threads(rng, monkeypatch):
    """A plan's inputs past staging.PARALLEL_BYTES are written by the device's copy threads (a
    batch of images), run after run, with the bits of the one-thread copy."""
    from kompute_dml.runtime import staging

    model, _ = _encoder_like(rng)
    dev = kdml.Device()
    try:
        rep = Backend.prepare(model, kdml_device=dev)
        feeds = [_feeds(rng, 2, 5) for _ in range(3)]
        want = [rep.run(f)[0].copy() for f in feeds]
        monkeypatch.setattr(staging, "PARALLEL_BYTES", 1)  # every input "large"
        copies = dev.engine.staging.copies
        copies.threads = 2  # (this host may have one core to spare: COPY_THREADS = 1)
        sizes = []
        copy = copies.copy
        monkeypatch.setattr(copies, "copy", lambda dst, src: (sizes.append(src.size), copy(dst, src)))
        for f, y in zip(feeds, want):
            np.testing.assert_array_equal(rep.run(f)[0].view(np.uint32), y.view(np.uint32))
        assert {np.asarray(a).nbytes for a in feeds[0].values()} <= set(sizes) and copies._pool is not None
    finally:
        dev.close()


def test_result_arrays_are_reused_only_once_nothing_references_them(rng, monkeypatch):
    """A plan hands a result array out again (no allocation, no page faults) only after the
    caller dropped it and every view of it; results the caller keeps never change."""
    from kompute_dml.onnx_backend import device_graph

    monkeypatch.setattr(device_graph, "RECYCLE_BYTES", 0)
    model, (table, w) = _encoder_like(rng)
    rep = Backend.prepare(model, "CPU")
    feeds = [_feeds(rng, 2, 5) for _ in range(6)]
    kept = rep.run(feeds[0])
    want0 = _expected(table, w, feeds[0])[0]
    y1 = rep.run(feeds[1])[0]
    view = y1[0]  # keeps y1's memory referenced after y1 itself is dropped
    y1_id = id(y1)
    del y1
    y2 = rep.run(feeds[2])[0]
    assert id(y2) != y1_id and y2 is not kept[0]
    np.testing.assert_allclose(view, _expected(table, w, feeds[1])[0][0], rtol=2e-6, atol=1e-5)
    np.testing.assert_allclose(kept[0], want0, rtol=2e-6, atol=1e-5)
    del view
    y3 = rep.run(feeds[3])[0]  # y1's array is free now (the plan keeps two per output)
    y2_data = y2.copy()
    ids = {id(y3)}
    del y3
    y4 = rep.run(feeds[4])[0]
    assert id(y4) in ids  # handed out again
    np.testing.assert_allclose(y4, _expected(table, w, feeds[4])[0], rtol=2e-6, atol=1e-5)
    np.testing.assert_array_equal(y2, y2_data)  # held: never overwritten
    np.testing.assert_allclose(kept[0], want0, rtol=2e-6, atol=1e-5)


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # the reference's inf
@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.uint16, np.int16, np.int32])
def test_host_dequantize_equals_the_int64_form_bit_for_bit(rng, dtype):
    """host_eval's DequantizeLinear (float32 arithmetic for 8/16-bit inputs) against
    (int64 difference -> float32) * scale over every value, extreme zero points and scales
    (subnormal, huge: overflow to inf), per tensor and per axis."""
    from kompute_dml.onnx_backend.host_eval import _dequantize

    info = np.iinfo(dtype)
    x = np.arange(info.min, info.max + 1, dtype=np.int64) if info.bits <= 16 else rng.integers(info.min, info.max, 70000)
    x = x.astype(dtype)
    scales = np.array([1.0, 0.0123, 1e-45, 3e-39, 2.5e38, 7.0], np.float32)
    for zp in (info.min, 0, info.max):
        for scale in scales:
            node = helper.make_node("DequantizeLinear", ["x", "s", "z"], ["y"])
            got = _dequantize(node, [x, np.array(scale), np.array(zp, dtype)])
            want = (x.astype(np.int64) - np.int64(zp)).astype(np.float32) * scale
            np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    xm = x[: 6 * (x.size // 6)].reshape(-1, 6)
    zps = np.array([info.min, 0, info.max, 1, -1 if info.min < 0 else 2, 3], dtype)
    node = helper.make_node("DequantizeLinear", ["x", "s", "z"], ["y"], axis=1)
    got = _dequantize(node, [xm, scales, zps])
    want = (xm.astype(np.int64) - zps.astype(np.int64)).astype(np.float32) * scales
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def test_repeating_host_gather_is_uploaded_once_per_distinct_row(rng):
    """BERT's token-type embeddings: a quantized table gathered by indices that are an Expand of a
    constant (equal along batch and sequence), dequantized, added to a device value. The host keeps
    the Gather's result as a broadcast view of its one distinct row (host_eval.BROADCAST_BYTES),
    dequantizes that row, and the plan uploads it bound with zero strides: the result equals
    numpy's, and the plan's uploads stay far below the full (batch, seq, hidden) size."""
    hidden, batch, seq = 256, 8, 160  # the int8 Gather: 8 x 160 x 256 bytes, above BROADCAST_BYTES
    table = rng.integers(-128, 128, (2, hidden)).astype(np.int8)
    inits = [numpy_helper.from_array(table, "tt"), numpy_helper.from_array(np.array(0.03, np.float32), "s"),
             numpy_helper.from_array(np.array(3, np.int8), "zp"), numpy_helper.from_array(np.array(1, np.int64), "one")]
    n = helper.make_node
    nodes = [n("Shape", ["x"], ["xs"]), n("Slice", ["xs", "zero1", "two1"], ["bs"]),
             n("Expand", ["one", "bs"], ["ids"]), n("Gather", ["tt", "ids"], ["g"]),
             n("DequantizeLinear", ["g", "s", "zp"], ["e"]), n("Add", ["x", "e"], ["y"])]
    inits += [numpy_helper.from_array(np.array([0], np.int64), "zero1"), numpy_helper.from_array(np.array([2], np.int64), "two1")]
    model = _model(nodes, [helper.make_tensor_value_info("x", T.FLOAT, ["b", "s", hidden])],
                   [helper.make_tensor_value_info("y", T.FLOAT, None)], inits)
    rep = Backend.prepare(model, "CPU")
    x = rng.standard_normal((batch, seq, hidden)).astype(np.float32)
    (y,) = rep.run({"x": x})
    row = (table[1].astype(np.float32) - np.float32(3)) * np.float32(0.03)
    np.testing.assert_array_equal(y, x + row)
    assert {p.target for p in rep.placement if p.op_type == "Add"} == {VULKAN}
    plan = next(iter(rep.state.plans.values()))
    uploaded = plan.ctx.staged_bytes + sum(t.nbytes for t in plan.ctx.kept if isinstance(t, kdml.Tensor))
    assert 0 < uploaded < 64 * hidden, uploaded  # one row (1 KiB), not 1.25 MiB of float32
