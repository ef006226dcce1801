"""kompute_dml.onnx_backend: MatMulIntegerToFloat / DynamicQuantizeMatMul against exact integer
arithmetic (tests/onnx_reference.py), and against onnxruntime's CPU provider where a probe shows
it exact on this processor (tests/ort_exactness.py); partitioning, placement and transfers of
mixed models; fallbacks; empty tensors; run_node; the `kompute-dml run` command."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto as T  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402
from onnx_reference import assert_product, dynamic_quantize_linear, mmitf_exact  # noqa: E402
from ort_exactness import PAIRS, skip_unless_exact  # noqa: E402

import kompute_dml as kdml  # noqa: E402
from kompute_dml.onnx_backend import CPU, VULKAN, Backend, BackendRep, dynamic_quantize_uint8  # noqa: E402

OPSETS = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
# "exact": kompute_dml against int64 arithmetic; "onnxruntime": onnxruntime against the same
# exact reference, and kompute_dml beside it, where the probe shows onnxruntime exact here.
ORACLES = ["exact", "onnxruntime"]


def _model(nodes, inputs, outputs, initializers=()):
    g = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    return helper.make_model(g, opset_imports=OPSETS, ir_version=10)


def _vi(name, arr):
    return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(arr.dtype), list(arr.shape))


def _ort(model, feeds):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _rand_q(rng, dtype, shape):
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, size=shape, dtype=np.int64).astype(dtype)


needs_mmitf = pytest.mark.skipif(not hasattr(kdml, "matmul_integer_to_float"),
                                 reason="kdml.matmul_integer_to_float has not landed")


def _mmitf_case(rng, pair, a_shape, b_shape, *, zp, bias, per_column, b_const):
    ta, tb = PAIRS[pair]
    n = b_shape[-1]
    a = _rand_q(rng, ta, a_shape)
    b = _rand_q(rng, tb, b_shape)
    a_scale = np.array(rng.uniform(0.001, 0.05), dtype=np.float32)
    b_scale = (rng.uniform(0.001, 0.05, size=(n,)) if per_column else np.array(rng.uniform(0.001, 0.05))).astype(
        np.float32)
    a_zp = _rand_q(rng, ta, ()) if zp else None
    b_zp = (_rand_q(rng, tb, (n,)) if per_column else _rand_q(rng, tb, ())) if zp else None
    bias_v = rng.uniform(-1, 1, size=(n,)).astype(np.float32) if bias else None
    names = ["A", "B", "a_scale", "b_scale", "a_zero_point" if zp else "", "b_zero_point" if zp else "",
             "bias" if bias else ""]
    while names[-1] == "":
        names.pop()
    values = {"A": a, "B": b, "a_scale": a_scale, "b_scale": b_scale, "a_zero_point": a_zp, "b_zero_point": b_zp,
              "bias": bias_v}
    consts = {"B", "b_scale", "b_zero_point", "bias"} if b_const else set()
    node = helper.make_node("MatMulIntegerToFloat", names, ["Y"], domain="com.microsoft")
    inputs = [_vi(k, values[k]) for k in names if k and k not in consts]
    inits = [numpy_helper.from_array(values[k], k) for k in names if k and k in consts]
    out_shape = np.matmul(np.zeros(a_shape, np.float32), np.zeros(b_shape, np.float32)).shape
    model = _model([node], inputs, [helper.make_tensor_value_info("Y", T.FLOAT, list(out_shape))], inits)
    feeds = {k: values[k] for k in names if k and k not in consts}
    return model, feeds, mmitf_exact(a, b, a_scale, b_scale, a_zp, b_zp, bias_v)


@needs_mmitf
@pytest.mark.parametrize("oracle", ORACLES)
@pytest.mark.parametrize("pair", sorted(PAIRS))
@pytest.mark.parametrize("zp", [False, True], ids=["nozp", "zp"])
@pytest.mark.parametrize("bias", [False, True], ids=["nobias", "bias"])
@pytest.mark.parametrize("per_column", [False, True], ids=["tensor", "column"])
def test_matmul_integer_to_float(rng, pair, zp, bias, per_column, oracle):
    if oracle == "onnxruntime":
        skip_unless_exact(*PAIRS[pair], "MatMulIntegerToFloat")
    b_const = bool(rng.integers(2))
    model, feeds, exact = _mmitf_case(rng, pair, (4, 128), (128, 128), zp=zp, bias=bias, per_column=per_column,
                                      b_const=b_const)
    rep = Backend.prepare(model, "CPU")
    assert [p.target for p in rep.placement] == [VULKAN]
    assert rep.placement[0].operator == "MATRIX_MULTIPLY_INTEGER_TO_FLOAT"
    (got,) = rep.run(feeds)
    assert rep.last_run.runtime_fallbacks == 0 and rep.last_run.vulkan_nodes == 1
    assert got.dtype == np.float32
    assert_product(got, exact, what="kompute_dml")
    if oracle == "onnxruntime":
        (theirs,) = _ort(model, feeds)
        assert_product(theirs, exact, what="onnxruntime")


@needs_mmitf
@pytest.mark.parametrize("oracle", ORACLES)
@pytest.mark.parametrize("a_shape,b_shape", [((5, 4, 3), (3, 4)), ((15, 14, 13), (15, 13, 27)), ((2, 1, 3, 8), (4, 8, 5)),
                                             ((7, 16), (3, 16, 9)), ((16,), (16, 6)), ((4, 16), (16,)),
                                             ((2, 3, 2, 4, 8), (8, 5)), ((2, 3, 2, 4, 8), (2, 3, 2, 8, 5)),
                                             ((8,), (2, 3, 2, 8, 5)), ((3, 1, 2, 4, 8), (2, 8, 5))])
@pytest.mark.parametrize("pair", ["u8s8", "s8s8"])
def test_matmul_integer_to_float_broadcast_shapes(rng, a_shape, b_shape, pair, oracle):
    if oracle == "onnxruntime":
        skip_unless_exact(*PAIRS[pair], "MatMulIntegerToFloat")
    # onnxruntime takes per-column B parameters of shape (N,) only for a 2-D B.
    model, feeds, exact = _mmitf_case(rng, pair, a_shape, b_shape, zp=True, bias=len(b_shape) > 1,
                                      per_column=len(b_shape) == 2, b_const=True)
    rep = Backend.prepare(model, "CPU")
    (got,) = rep.run(feeds)
    # More than two batch dimensions are folded into one (broadcast on the host first where
    # they broadcast against each other): every product runs on the device.
    assert rep.last_run.runtime_fallbacks == 0 and rep.last_run.vulkan_nodes == 1, rep.last_run.events
    assert_product(got, exact, what="kompute_dml")
    if oracle == "onnxruntime":
        (theirs,) = _ort(model, feeds)
        assert_product(theirs, exact, what="onnxruntime")


@needs_mmitf
def test_a_shared_weight_makes_one_matrix_of_the_batch(rng, monkeypatch):
    """A 2-D B shared by every matrix of a packed [batch, H, W, K] A: one product of batch x H x W rows
    (7-row matrices otherwise: a Linear over ConvNeXt's [batch, H, W, C]), exact."""
    import kompute_dml as kdml

    shapes = []
    real = kdml.matmul_integer_to_float
    monkeypatch.setattr(kdml, "matmul_integer_to_float", lambda a, *r, **kw: shapes.append(a.desc.sizes) or real(a, *r, **kw))
    model, feeds, exact = _mmitf_case(rng, "u8s8", (2, 3, 7, 16), (16, 5), zp=True, bias=True, per_column=True, b_const=True)
    (got,) = Backend.prepare(model, "CPU").run(feeds)
    assert got.shape == (2, 3, 7, 5) and shapes == [(42, 16)], shapes
    assert_product(got, exact, what="kompute_dml")


@needs_mmitf
def test_matmul_integer_to_float_float16_output(rng):
    a = np.array([[11, 7, 3], [10, 6, 2]], np.uint8)
    b = np.array([[1, 4], [2, 5], [3, 6]], np.uint8)
    a_scale = np.array(0.0107, np.float16)
    b_scale = np.array([1.10, 1.123], np.float16)
    b_zp = np.array([98, 71], np.uint8)
    a_zp = np.array(5, np.uint8)
    node = helper.make_node("MatMulIntegerToFloat", ["A", "B", "as", "bs", "az", "bz"], ["Y"], domain="com.microsoft")
    model = _model([node], [_vi("A", a)], [helper.make_tensor_value_info("Y", T.FLOAT16, [2, 2])],
                   [numpy_helper.from_array(v, k) for k, v in (("B", b), ("as", a_scale), ("bs", b_scale),
                                                               ("az", a_zp), ("bz", b_zp))])
    rep = Backend.prepare(model, "CPU")
    (got,) = rep.run({"A": a})
    assert got.dtype == np.float16
    # A float16 output cannot show a unit error of the sum; within a float16 ulp of the epilogue.
    assert_product(got, mmitf_exact(a, b, a_scale, b_scale, a_zp, b_zp), resolve_units=False)


@needs_mmitf
@pytest.mark.parametrize("pair", sorted(PAIRS))
@pytest.mark.parametrize("shapes", [((40, 128), (128, 96)), ((2, 33, 37), (37, 5)), ((50, 200), (200, 1)),
                                    ((4, 128), (128, 96))], ids=["40x128x96", "batched-odd", "one-column", "few-rows"])
def test_weights_stored_columns_give_the_same_product(rng, monkeypatch, pair, shapes):
    """A policy with weights="columns" (the tensor-core GPUs') binds a constant 2-D B transposed
    once at upload, under a column-major descriptor, for products the policy's weight_layout gives
    "columns" (more than gemv_max_m rows; every one on tensor-core GPUs): the results equal the
    exact product, and the bits of the product with B as ONNX stores it ("rows"); a single column,
    and products of few rows (gemv's, elsewhere), keep ONNX's layout."""
    import dataclasses

    model, feeds, exact = _mmitf_case(rng, pair, *shapes, zp=True, bias=True, per_column=True, b_const=True)
    results = {}
    for layout in ("rows", "columns", "columns only"):   # only: gemv takes no k-contiguous B (tensor-core GPUs)
        rep = Backend.prepare(model, "CPU")
        weights = layout.split()[0]
        policy = dataclasses.replace(rep.device.policy, weights=weights, gemv_k_contiguous=layout != "columns only")
        monkeypatch.setattr(rep.device, "policy", policy)
        bound = []
        real = BackendRep.weight_to_device
        monkeypatch.setattr(BackendRep, "weight_to_device",
                            lambda *a, bound=bound, real=real: bound.append(real(*a)) or bound[-1])
        for graph_mode in (True, False):
            rep.state.node_by_node = not graph_mode
            (got,) = rep.run(feeds)
            as_columns = min(shapes[1]) > 1 and rep.device.policy.weight_layout(shapes[0][-2]) == "columns"
            assert bound and all((tuple(t.desc.effective_strides) == (1, shapes[1][0])) == as_columns for t in bound)
            assert_product(got, exact, what=f"kompute_dml, weights {layout}")
            results.setdefault(layout, got)
            np.testing.assert_array_equal(got.view(np.uint32), results[layout].view(np.uint32))
        # under "columns" both layouts go up at the first product, whatever its rows, where the
        # policy uses both: a later plan with more or fewer rows (gemv_max_m) uploads nothing
        transposed = rep.state.device_constants.get("B#columns")
        assert (transposed is not None) == (weights == "columns" and min(shapes[1]) > 1)
        both = policy.weight_layout(1) != policy.weight_layout(1 << 30)
        assert ("B" in rep.state.device_constants) == (transposed is None or both)
        if transposed is not None:
            assert tuple(transposed.tensor.desc.effective_strides) == (1, shapes[1][0])
            assert tuple(transposed.tensor.desc.sizes) == shapes[1]
    np.testing.assert_array_equal(results["rows"].view(np.uint32), results["columns"].view(np.uint32))
    np.testing.assert_array_equal(results["rows"].view(np.uint32), results["columns only"].view(np.uint32))


def test_assert_product_sees_one_unit_of_the_integer_product(rng):
    """The oracle itself: a result off by one unit of the integer sum anywhere fails it."""
    _, _, exact = _mmitf_case(rng, "u8s8", (4, 128), (128, 128), zp=True, bias=True, per_column=True, b_const=True)
    good = exact.float32_results()[0]
    assert_product(good, exact)
    for step in (-1, 1):
        bad = good.copy()
        i = tuple(int(rng.integers(s)) for s in bad.shape)
        bad[i] = exact.float32_results(exact.acc + step)[0][i]
        with pytest.raises(AssertionError, match="1 of 512 outputs differ from the exact product"):
            assert_product(bad, exact)


# ---- DynamicQuantizeMatMul ---------------------------------------------------------------
def _dql_model():
    node = helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"])
    return _model([node], [helper.make_tensor_value_info("x", T.FLOAT, None)],
                  [helper.make_tensor_value_info(n, t, None) for n, t in (("y", T.UINT8), ("s", T.FLOAT),
                                                                          ("z", T.UINT8))])


@pytest.mark.parametrize("kind", ["normal", "positive", "negative", "zeros", "constant", "wide", "ties"])
def test_dynamic_quantize_uint8_matches_onnxruntime(rng, kind):
    """kompute_dml's host quantization against onnxruntime (float32 operations, exact on any CPU)
    and the independent reference of tests/onnx_reference.py."""
    x = {
        "normal": rng.standard_normal((7, 33)),
        "positive": rng.uniform(0.5, 3.0, (5, 9)),
        "negative": rng.uniform(-4.0, -0.1, (5, 9)),
        "zeros": np.zeros((3, 4)),
        "constant": np.full((3, 4), 2.5),
        "wide": rng.standard_normal((4, 64)) * 1e4,
        "ties": np.array([[-1.0, 0.0, 0.5, 1.5, 2.5, 255.0 / 2]]) * (255.0 / 255.0),
    }[kind].astype(np.float32)
    q, s, z = dynamic_quantize_uint8(x)
    y, s_ref, z_ref = _ort(_dql_model(), {"x": x})
    assert np.float32(s) == np.float32(s_ref) and np.uint8(z) == np.uint8(z_ref)
    np.testing.assert_array_equal(q, y)
    q2, s2, z2 = dynamic_quantize_linear(x)
    assert np.float32(s) == s2 and np.uint8(z) == z2
    np.testing.assert_array_equal(q, q2)


@needs_mmitf
@pytest.mark.parametrize("oracle", ORACLES)
@pytest.mark.parametrize("b_type", [np.int8, np.uint8])
@pytest.mark.parametrize("zp", [False, True], ids=["nozp", "zp"])
@pytest.mark.parametrize("bias", [False, True], ids=["nobias", "bias"])
@pytest.mark.parametrize("per_column", [False, True], ids=["tensor", "column"])
def test_dynamic_quantize_matmul(rng, b_type, zp, bias, per_column, oracle):
    if oracle == "onnxruntime":
        skip_unless_exact(np.uint8, b_type, "DynamicQuantizeMatMul")
    m, k, n = 6, 96, 40
    a = (rng.standard_normal((2, m, k)) * rng.uniform(0.1, 4)).astype(np.float32)
    b = _rand_q(rng, b_type, (k, n))
    b_scale = (rng.uniform(0.001, 0.05, size=(n,)) if per_column else np.array(0.02)).astype(np.float32)
    b_zp = (_rand_q(rng, b_type, (n,)) if per_column else _rand_q(rng, b_type, ())) if zp else None
    bias_v = rng.uniform(-1, 1, size=(n,)).astype(np.float32) if bias else None
    names = ["A", "B", "b_scale", "b_zero_point" if zp else "", "bias" if bias else ""]
    while names[-1] == "":
        names.pop()
    vals = {"B": b, "b_scale": b_scale, "b_zero_point": b_zp, "bias": bias_v}
    node = helper.make_node("DynamicQuantizeMatMul", names, ["Y"], domain="com.microsoft")
    model = _model([node], [_vi("A", a)], [helper.make_tensor_value_info("Y", T.FLOAT, [2, m, n])],
                   [numpy_helper.from_array(vals[x], x) for x in names[1:] if x])
    rep = Backend.prepare(model, "CPU")
    assert [p.target for p in rep.placement] == [VULKAN]
    (got,) = rep.run({"A": a})
    assert rep.last_run.runtime_fallbacks == 0
    q, s, z = dynamic_quantize_linear(a)
    exact = mmitf_exact(q, b, s, b_scale, z, b_zp, bias_v)
    assert_product(got, exact, what="kompute_dml")
    if oracle == "onnxruntime":
        (theirs,) = _ort(model, {"A": a})
        assert_product(theirs, exact, what="onnxruntime")


# ---- mixed models: partition, placement, transfers ---------------------------------------------
# the mixed model's CPU nodes, kept there by the caller whatever the device can run
MIXED_CPU_OPS = ["Abs", "Sum", "Neg"]


def _mixed_model():
    """x -Trilu-> t1 -Identity-> t2 -Abs(cpu)-> r -Trilu(lower, k)-> t3 -Identity-> y1
                                              r -Sum(cpu) with EyeLike(r)-> y2
    (prepared with exclude_ops=MIXED_CPU_OPS)"""
    nodes = [
        helper.make_node("Trilu", ["x"], ["t1"], name="triu"),
        helper.make_node("Identity", ["t1"], ["t2"], name="id1"),
        helper.make_node("Abs", ["t2"], ["r"], name="abs"),
        helper.make_node("Trilu", ["r", "k"], ["t3"], upper=0, name="tril"),
        helper.make_node("Identity", ["t3"], ["y1"], name="id2"),
        helper.make_node("EyeLike", ["r"], ["e"], k=1, name="eye"),
        helper.make_node("Sum", ["r", "e"], ["y2"], name="add"),
        helper.make_node("Neg", ["y2"], ["y3"], name="neg"),
    ]
    return _model(nodes, [helper.make_tensor_value_info("x", T.FLOAT, [5, 6]),
                          helper.make_tensor_value_info("k", T.INT64, [])],
                  [helper.make_tensor_value_info("y1", T.FLOAT, [5, 6]),
                   helper.make_tensor_value_info("y3", T.FLOAT, [5, 6])])


def test_mixed_model_placement_and_transfers(rng, monkeypatch):
    model = _mixed_model()
    rep = Backend.prepare(model, "CPU", exclude_ops=MIXED_CPU_OPS)
    where = {p.name: p.target for p in rep.placement}
    assert where == {"triu": VULKAN, "id1": VULKAN, "abs": CPU, "tril": VULKAN, "id2": VULKAN, "eye": VULKAN,
                     "add": CPU, "neg": CPU}
    ops = {p.name: p.operator for p in rep.placement}
    assert ops["triu"] == ops["tril"] == "DIAGONAL_MATRIX1" and ops["eye"] == "DIAGONAL_MATRIX"
    assert ops["id1"] == "COPY" and ops["abs"] == "onnxruntime"
    # Sum and Neg are consecutive fallback nodes: one CPU sub-graph; Abs is another.
    segs = {p.name: p.segment for p in rep.placement if p.target == CPU}
    assert segs["add"] == segs["neg"] != segs["abs"]
    assert len(rep.segments) == 2
    s = rep.summary()
    assert "5 of 8 nodes on Vulkan" in s and "3 nodes fall back to the CPU in 2 sub-graph(s)" in s

    # A first run compiles the operators (where the device policy copies EyeLike's output from a
    # constant, ops/diagonal_constant.py, its operator uploads that constant then, once). The
    # earlier tests' garbage goes first: in the full suite a collection (or the pool trim an
    # allocation near the memory budget starts) during the runs below could release a pooled
    # buffer and count a descriptor set the runs themselves do not cause.
    import gc

    # Trilu's k is a descriptor field (DIAGONAL_MATRIX1's fill bounds): each k the runs below use
    # is compiled, and its dispatch encoded, here (a device that dispatches Trilu would otherwise
    # write one descriptor set for each new k).
    gc.collect()
    for k in (-1, 0, 1):
        rep.run({"x": rng.standard_normal((5, 6)).astype(np.float32), "k": np.array(k, np.int64)})
    # Count every download of a device tensor and every upload (host write to device memory).
    downloads, uploads = [], []
    real_numpy, real_write = kdml.Tensor.numpy, kdml.Buffer.write
    monkeypatch.setattr(kdml.Tensor, "numpy", lambda self: downloads.append(self) or real_numpy(self))
    monkeypatch.setattr(kdml.Buffer, "write", lambda self, *a, **kw: uploads.append(a) or real_write(self, *a, **kw))

    for run in range(3):
        downloads.clear()
        uploads.clear()
        gc.collect()
        misses = rep.device.stats()["descriptor_sets"]
        x = rng.standard_normal((5, 6)).astype(np.float32)
        k = np.array(run - 1, np.int64)
        y1, y3 = rep.run({"x": x, "k": k})
        r = np.abs(np.triu(x))
        np.testing.assert_array_equal(y1, np.tril(r, run - 1))
        np.testing.assert_array_equal(y3, -(r + np.eye(5, 6, 1, dtype=np.float32)))
        st = rep.last_run
        assert st.vulkan_nodes == 5 and st.cpu_segments == 2 and st.runtime_fallbacks == 0
        # x goes up once; t1 -> Identity stays on the device; t2 comes down once for Abs;
        # r goes up once for Trilu (EyeLike needs only its shape); t3 -> Identity stays on the
        # device; y1 and e come down once each.
        assert st.uploads == len(uploads) == 2
        assert st.downloads == len(downloads) == 3
        assert rep.device.stats()["descriptor_sets"] == misses  # the same buffers and k again: no new encode


def test_fallback_for_types_the_device_cannot_take(rng):
    nodes = [helper.make_node("EyeLike", ["b"], ["e"], name="eye_bool"),
             helper.make_node("Trilu", ["b"], ["t"], name="triu_bool"),
             helper.make_node("Identity", ["s"], ["s2"], name="id_str"),
             helper.make_node("EyeLike", ["x"], ["e2"], dtype=T.BOOL, name="eye_to_bool"),
             helper.make_node("Identity", ["x"], ["x2"], name="id_ok")]
    model = _model(nodes, [helper.make_tensor_value_info("b", T.BOOL, [3, 4]),
                           helper.make_tensor_value_info("s", T.STRING, [2]),
                           helper.make_tensor_value_info("x", T.INT32, [3, 3])],
                   [helper.make_tensor_value_info(n, t, None) for n, t in
                    (("e", T.BOOL), ("t", T.BOOL), ("s2", T.STRING), ("e2", T.BOOL), ("x2", T.INT32))])
    rep = Backend.prepare(model, "CPU")
    where = {p.name: (p.target, p.reason) for p in rep.placement}
    assert where["id_ok"][0] == VULKAN
    for name in ("eye_bool", "triu_bool", "id_str", "eye_to_bool"):
        assert where[name][0] == CPU and "not a DirectML type" in where[name][1], where[name]
    b = rng.integers(0, 2, (3, 4)).astype(bool)
    s = np.array(["a", "bc"], dtype=object)
    x = rng.integers(-9, 9, (3, 3)).astype(np.int32)
    e, t, s2, e2, x2 = rep.run({"b": b, "s": s, "x": x})
    np.testing.assert_array_equal(e, np.eye(3, 4, dtype=bool))
    np.testing.assert_array_equal(t, np.triu(b))
    assert list(s2) == ["a", "bc"]
    np.testing.assert_array_equal(e2, np.eye(3, dtype=bool))
    np.testing.assert_array_equal(x2, x)


def test_runtime_fallback_when_types_are_only_known_at_run_time(rng):
    # No declared element type: the static placement says Vulkan; the bool input sends it to the CPU.
    node = helper.make_node("Trilu", ["x"], ["y"], name="t")
    g = helper.make_graph([node], "g", [helper.make_value_info("x", onnx.TypeProto())],
                          [onnx.ValueInfoProto(name="y")])
    model = helper.make_model(g, opset_imports=OPSETS, ir_version=10)
    rep = Backend.prepare(model, "CPU")
    assert rep.placement[0].target == VULKAN
    b = rng.integers(0, 2, (4, 4)).astype(bool)
    (y,) = rep.run([b])
    np.testing.assert_array_equal(y, np.triu(b))
    assert rep.last_run.runtime_fallbacks == 1 and any("ran on the CPU" in e for e in rep.last_run.events)
    f = rng.standard_normal((4, 4)).astype(np.float32)
    (y,) = rep.run([f])
    np.testing.assert_array_equal(y, np.triu(f))
    assert rep.last_run.runtime_fallbacks == 0


def test_empty_tensors_give_empty_outputs_without_dispatch(monkeypatch):
    def boom(*a, **k):
        raise AssertionError("no dispatch expected for an empty tensor")

    for name in ("eye_like", "triu", "tril", "copy", "matmul_integer_to_float"):
        monkeypatch.setattr(kdml, name, boom, raising=False)
    nodes = [helper.make_node("Trilu", ["x"], ["t"]), helper.make_node("Identity", ["x"], ["i"]),
             helper.make_node("EyeLike", ["x"], ["e"], dtype=T.FLOAT),
             helper.make_node("MatMulIntegerToFloat", ["a", "b", "s", "s"], ["m"], domain="com.microsoft"),
             helper.make_node("MatMulIntegerToFloat", ["a0", "b0", "s", "s", "", "", "bias"], ["m0"],
                              domain="com.microsoft")]
    x = np.zeros((0, 4), np.int64)
    a = np.zeros((2, 0, 8), np.uint8)
    b = np.zeros((8, 3), np.int8)
    a0 = np.zeros((2, 5, 0), np.uint8)
    b0 = np.zeros((0, 3), np.int8)
    s = np.array(0.5, np.float32)
    bias = np.array([1, 2, 3], np.float32)
    feeds = {"x": x, "a": a, "b": b, "s": s, "a0": a0, "b0": b0, "bias": bias}
    model = _model(nodes, [_vi(k, v) for k, v in feeds.items()],
                   [helper.make_tensor_value_info(n, t, None) for n, t in
                    (("t", T.INT64), ("i", T.INT64), ("e", T.FLOAT), ("m", T.FLOAT), ("m0", T.FLOAT))])
    rep = Backend.prepare(model, "CPU")
    t, i, e, m, m0 = rep.run(feeds)
    assert t.shape == i.shape == e.shape == (0, 4) and t.dtype == np.int64 and e.dtype == np.float32
    assert m.shape == (2, 0, 3) and m.dtype == np.float32
    np.testing.assert_array_equal(m0, np.broadcast_to(bias, (2, 5, 3)))
    assert rep.last_run.runtime_fallbacks == 0 and rep.last_run.uploads == 0


def test_identity_sequence_and_optional_stay_on_device(rng):
    seq_t = helper.make_sequence_type_proto(helper.make_tensor_type_proto(T.FLOAT, None))
    opt_t = helper.make_optional_type_proto(helper.make_tensor_type_proto(T.INT8, None))
    nodes = [helper.make_node("Identity", ["s"], ["s2"]), helper.make_node("Identity", ["o"], ["o2"])]
    g = helper.make_graph(nodes, "g", [helper.make_value_info("s", seq_t), helper.make_value_info("o", opt_t)],
                          [helper.make_value_info("s2", seq_t), helper.make_value_info("o2", opt_t)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 16)], ir_version=8)
    rep = Backend.prepare(model, "CPU")
    assert [p.target for p in rep.placement] == [VULKAN, VULKAN]
    seq = [rng.standard_normal((2, 3)).astype(np.float32), np.array(1.5, np.float32),
           np.zeros((0, 2), np.float32)]
    s2, o2 = rep.run([seq, None])
    assert o2 is None and len(s2) == 3
    for got, want in zip(s2, seq):
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
    o = rng.integers(-100, 100, (7,)).astype(np.int8)
    _, o2 = rep.run([[], o])
    np.testing.assert_array_equal(o2, o)


def test_reference_evaluator_fallback(rng):
    model = _mixed_model()
    rep = Backend.prepare(model, "CPU", fallback="reference", exclude_ops=MIXED_CPU_OPS)
    x = rng.standard_normal((5, 6)).astype(np.float32)
    y1, y3 = rep.run({"x": x, "k": np.array(2, np.int64)})
    r = np.abs(np.triu(x))
    np.testing.assert_array_equal(y1, np.tril(r, 2))
    np.testing.assert_allclose(y3, -(r + np.eye(5, 6, 1, dtype=np.float32)))
    assert {p.operator for p in rep.placement if p.target == CPU} == {"reference"}


def test_exclude_ops_and_rank_5_trilu(rng):
    x = rng.standard_normal((2, 3, 2, 4, 5)).astype(np.float32)
    node = helper.make_node("Trilu", ["x", "k"], ["y"])
    model = _model([node], [_vi("x", x), helper.make_tensor_value_info("k", T.INT64, [])],
                   [helper.make_tensor_value_info("y", T.FLOAT, list(x.shape))])
    rep = Backend.prepare(model, "CPU")
    for k in (-2, 0, 3, 2**40, -(2**63)):
        (y,) = rep.run({"x": x, "k": np.array(k, np.int64)})
        np.testing.assert_array_equal(y, np.triu(x, max(min(k, 99), -99)))
        assert rep.last_run.vulkan_nodes == 1
    cpu = Backend.prepare(model, "CPU", exclude_ops=["Trilu"])
    assert cpu.placement[0].target == CPU and cpu.placement[0].reason == "excluded by the caller"


def test_run_node_and_devices(rng):
    assert Backend.supports_device("CPU") and Backend.supports_device("VULKAN:0")
    assert not Backend.supports_device("CUDA")
    x = rng.integers(-50, 50, (3, 4, 4)).astype(np.int16)
    (y,) = Backend.run_node(helper.make_node("Trilu", ["x", "k"], ["y"], upper=0), [x, np.array(1, np.int64)])
    np.testing.assert_array_equal(y, np.tril(x, 1))
    (e,) = Backend.run_node(helper.make_node("EyeLike", ["x"], ["y"], dtype=T.DOUBLE, k=-1), [x[0]])
    np.testing.assert_array_equal(e, np.eye(4, k=-1))
    with pytest.raises(ValueError, match="missing input"):
        Backend.prepare(_mixed_model(), "CPU").run({"x": np.zeros((5, 6), np.float32)})


# ---- the command line -------------------------------------------------------------------------
def test_cli_run(tmp_path, rng, capsys):
    from kompute_dml.cli.run import main

    onnx.save(_mixed_model(), tmp_path / "m.onnx")
    x = rng.standard_normal((5, 6)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "k.npy", np.array(0, np.int64))
    out = tmp_path / "out.npz"
    rc = main([str(tmp_path / "m.onnx"), "--input", f"x={tmp_path / 'x.npy'}", "--input",
               f"k={tmp_path / 'k.npy'}", "--output", str(out), "--placement", "--exclude-ops", ",".join(MIXED_CPU_OPS)])
    text = capsys.readouterr().out
    assert rc == 0, text
    assert "5 of 8 nodes on Vulkan" in text and "timing:" in text and "vulkan:DIAGONAL_MATRIX1" in text
    with np.load(out) as z:
        np.testing.assert_array_equal(z["y1"], np.tril(np.abs(np.triu(x))))

    (tmp_path / "bad.npy").write_text("not numpy")
    (tmp_path / "empty.onnx").write_bytes(b"")
    np.save(tmp_path / "x64.npy", x.astype(np.float64) / 3)
    cases = [
        ([str(tmp_path / "empty.onnx")], "empty.onnx: empty (0 bytes), not an ONNX model"),
        ([str(tmp_path / "m.onnx"), "--input", f"x={tmp_path / 'x64.npy'}", "--input", f"k={tmp_path / 'k.npy'}"],
         "pass --cast"),
        ([str(tmp_path / "m.onnx"), "--input", f"x={tmp_path / 'x.npy'}"], "missing input"),
        ([str(tmp_path / "m.onnx"), "--input", f"x={tmp_path / 'bad.npy'}", "--input", f"k={tmp_path / 'k.npy'}"],
         "not a numpy"),
        ([str(tmp_path / "m.onnx"), "--input", f"x={tmp_path / 'nope.npy'}"], "no such file"),
        ([str(tmp_path / "nope.onnx")], "no such model file"),
        ([str(tmp_path / "x.npy")], "cannot read"),
        ([str(tmp_path / "m.onnx"), "--input", f"x={tmp_path / 'k.npy'}", "--input", f"k={tmp_path / 'k.npy'}"],
         "expected float32"),
    ]
    for argv, msg in cases:
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert msg in err and "Traceback" not in err, err
    assert main([str(tmp_path / "m.onnx"), "--input", f"x={tmp_path / 'x64.npy'}", "--input", f"k={tmp_path / 'k.npy'}",
                 "--cast"]) == 0


def test_cli_entry_point_exit_status(tmp_path):
    onnx.save(_mixed_model(), tmp_path / "m.onnx")
    exe = [sys.executable, "-m", "kompute_dml.cli", "run", str(tmp_path / "m.onnx")]
    p = subprocess.run(exe, capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "missing input" in p.stderr and "Traceback" not in p.stderr


def test_graph_input_with_a_default_initializer(rng):
    """An initializer that is also a graph input is a default the caller may override."""
    w0 = np.arange(6, dtype=np.float32).reshape(2, 3)
    nodes = [helper.make_node("Add", ["x", "w"], ["s"]), helper.make_node("Identity", ["w"], ["wi"])]
    model = _model(nodes, [_vi("x", w0), _vi("w", w0)], [_vi("s", w0), _vi("wi", w0)],
                   [numpy_helper.from_array(w0, "w")])
    rep = Backend.prepare(model, "CPU")
    assert rep.feed_names == ["x"]
    x = rng.standard_normal((2, 3)).astype(np.float32)
    s, wi = rep.run({"x": x})
    np.testing.assert_array_equal(s, x + w0)
    np.testing.assert_array_equal(wi, w0)
    w1 = rng.standard_normal((2, 3)).astype(np.float32)
    s, wi = rep.run({"x": x, "w": w1})
    np.testing.assert_array_equal(s, x + w1)
    np.testing.assert_array_equal(wi, w1)
    s, wi = rep.run([x])
    np.testing.assert_array_equal(wi, w0)


def test_feature_level_below_an_operator_sends_it_to_the_cpu(rng):
    model = _mixed_model()
    rep = Backend.prepare(model, "CPU", feature_level="4_0")
    where = {p.name: (p.target, p.reason) for p in rep.placement}
    assert where["tril"] == (CPU, "DIAGONAL_MATRIX1 needs feature level 0x5100")
    assert where["id1"][0] == VULKAN and where["eye"][0] == VULKAN
    x = rng.standard_normal((5, 6)).astype(np.float32)
    y1, y3 = rep.run({"x": x, "k": np.array(0, np.int64)})
    r = np.abs(np.triu(x))
    np.testing.assert_array_equal(y1, np.tril(r))
    np.testing.assert_array_equal(y3, -(r + np.eye(5, 6, 1, dtype=np.float32)))
    assert rep.device.feature_level == kdml.FeatureLevel.FL_4_0


def test_cli_run_npz_inputs(tmp_path, rng, capsys):
    from kompute_dml.cli.run import main

    onnx.save(_mixed_model(), tmp_path / "m.onnx")
    x = rng.standard_normal((5, 6)).astype(np.float32)
    np.savez(tmp_path / "feeds.npz", x=x, k=np.array(1, np.int64))
    rc = main([str(tmp_path / "m.onnx"), "--input", str(tmp_path / "feeds.npz"), "--output",
               str(tmp_path / "o.npz"), "--repeat", "2", "--compare-onnxruntime", "--fallback", "reference",
               "--exclude-ops", ",".join(MIXED_CPU_OPS)])
    text = capsys.readouterr().out
    assert rc == 0, text
    assert "max |kompute_dml - onnxruntime| = 0" in text and "(reference 3)" in text
    with np.load(tmp_path / "o.npz") as z:
        np.testing.assert_array_equal(z["y1"], np.tril(np.abs(np.triu(x)), 1))


def test_products_sharing_a_host_activation_upload_it_once(rng):
    """Q/K/V-style: three products of one quantized activation; A, its scale and zero point
    go up once per run, the three run as one product (onnx_backend/product_groups.py: its
    weights side by side and its per-column B scale are the run's two constant uploads, three
    where the policy stores weights as columns for some products and not others: both layouts go
    up at once), and the second run rebuilds no pipeline."""
    a = _rand_q(rng, np.uint8, (2, 5, 16))
    s, z = np.array(0.03, np.float32), np.array(7, np.uint8)
    ws = {f"w{i}": _rand_q(rng, np.int8, (16, 8)) for i in range(3)}
    nodes = [helper.make_node("MatMulIntegerToFloat", ["a", f"w{i}", "s", "bs", "z"], [f"y{i}"],
                              domain="com.microsoft") for i in range(3)]
    inits = [numpy_helper.from_array(w, n) for n, w in ws.items()] + [
        numpy_helper.from_array(np.array(0.01, np.float32), "bs")]
    model = _model(nodes, [_vi("a", a), _vi("s", s), _vi("z", z)],
                   [helper.make_tensor_value_info(f"y{i}", T.FLOAT, None) for i in range(3)], inits)
    rep = Backend.prepare(model, "CPU")
    for run in range(2):
        misses = rep.device.stats()["descriptor_sets"]
        outs = rep.run({"a": a, "s": s, "z": z})
        assert rep.last_run.uploads == 1 and rep.last_run.downloads == 3
        policy = rep.device.policy
        both = policy.weights == "columns" and policy.weight_layout(1) != policy.weight_layout(1 << 30)
        first = 3 if both else 2
        assert rep.last_run.constant_uploads == (first if run == 0 else 0)
        if run:
            assert rep.device.stats()["descriptor_sets"] == misses
        for i, y in enumerate(outs):
            assert_product(y, mmitf_exact(a, ws[f"w{i}"], s, np.array(0.01, np.float32), z), what=f"y{i}")


@pytest.mark.parametrize("case", ["trilu-1d", "trilu-0d", "trilu-1d-undeclared", "eyelike-3d", "eyelike-dtype",
                                  "undefined-value", "b-scale-length", "bias-length"])
def test_invalid_models_raise_value_errors_naming_the_problem(case):
    f32 = np.zeros((3, 4), np.float32)
    if case.startswith("trilu"):
        x = np.zeros(5, np.float32) if case != "trilu-0d" else np.array(1, np.float32)
        shape = None if case.endswith("undeclared") else list(x.shape)
        model = _model([helper.make_node("Trilu", ["x"], ["y"])], [helper.make_tensor_value_info("x", T.FLOAT, shape)],
                       [onnx.ValueInfoProto(name="y")])
        feeds, match = [x], "Trilu .*rank >= 2"
    elif case == "eyelike-3d":
        model = _model([helper.make_node("EyeLike", ["x"], ["y"])], [helper.make_tensor_value_info("x", T.FLOAT, None)],
                       [onnx.ValueInfoProto(name="y")])
        feeds, match = [np.zeros((2, 3, 4), np.float32)], "EyeLike .*2-D"
    elif case == "eyelike-dtype":
        model = _model([helper.make_node("EyeLike", ["x"], ["y"], dtype=999)], [_vi("x", f32)],
                       [onnx.ValueInfoProto(name="y")])
        feeds, match = [f32], "dtype 999"
    elif case == "undefined-value":
        model = _model([helper.make_node("Identity", ["nope"], ["y"])], [_vi("x", f32)], [onnx.ValueInfoProto(name="y")])
        feeds, match = [f32], "'nope', which no graph input"
    else:
        a, b = np.ones((2, 3), np.uint8), np.ones((3, 5), np.int8)
        bs = np.ones(4 if case == "b-scale-length" else 1, np.float32)
        bias = np.ones(4, np.float32)
        names = ["a", "b", "s", "bs"] + (["", "", "bias"] if case == "bias-length" else [])
        node = helper.make_node("MatMulIntegerToFloat", names, ["y"], domain="com.microsoft")
        vals = {"a": a, "b": b, "s": np.array(1, np.float32), "bs": bs, "bias": bias}
        model = _model([node], [_vi(n, vals[n]) for n in names if n], [onnx.ValueInfoProto(name="y")])
        feeds = [vals[n] for n in names if n]
        match = "b_scale has 4 elements; B has 5 columns" if case == "b-scale-length" else "bias has 4 elements"
    with pytest.raises(ValueError, match=match):
        Backend.run_model(model, feeds)


def test_cpu_subgraph_failing_at_run_time_reports_both_engines():
    # float64 Sum: a node the device does not take (its rule), so a CPU sub-graph
    model = _model([helper.make_node("Sum", ["x", "y"], ["z"])],
                   [helper.make_tensor_value_info("x", T.DOUBLE, None), helper.make_tensor_value_info("y", T.DOUBLE, None)],
                   [onnx.ValueInfoProto(name="z")])
    rep = Backend.prepare(model, "CPU")
    with pytest.raises(RuntimeError, match=r"no CPU fallback could run the sub-graph of \['Sum'\]: onnxruntime: .*; "
                                           r"reference: "):
        rep.run([np.ones((2, 3), np.float64), np.ones((4,), np.float64)])
    (z,) = rep.run([np.ones((2, 3), np.float64), np.ones((3,), np.float64)])  # still on onnxruntime
    np.testing.assert_array_equal(z, np.full((2, 3), 2, np.float64))
    assert rep.segments[0].engine == "onnxruntime"


def test_nodes_out_of_topological_order_are_sorted():
    """A graph whose nodes are listed out of order (as convert_float_to_float16 writes the Casts
    of the graph inputs) runs as onnxruntime runs it; the caller's model is not changed."""
    nodes = [helper.make_node("Relu", ["c"], ["y"]), helper.make_node("Cast", ["x"], ["c"], to=T.FLOAT16)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", T.FLOAT, ["n"])],
                          [helper.make_tensor_value_info("y", T.FLOAT16, ["n"])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    before = model.SerializeToString()
    rep = Backend.prepare(model, "CPU")
    assert [p.op_type for p in rep.placement] == ["Cast", "Relu"] and rep.graph_mode
    x = np.array([-1.5, 0.25, 70000.0, np.nan], np.float32)
    (y,) = rep.run({"x": x})
    (want,) = ort.InferenceSession(before, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_array_equal(y, want)
    assert model.SerializeToString() == before
