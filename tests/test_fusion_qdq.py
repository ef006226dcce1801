"""onnxruntime's QDQ products (quantize_static, QuantFormat.QDQ): DequantizeLinear(x) -> MatMul(.,
DequantizeLinear(W)) -> QuantizeLinear fused into one QLinearMatMul (fusion_qdq.py), bit for bit
an independent numpy reference of onnxruntime's QLinearMatMul arithmetic (exact int64 sums, one
float32 scale), with the shared DequantizeLinear that quantize_static writes by default given to
each product (dedicate_dequantize)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper
from ort_exactness import onnxruntime_exact

from kompute_dml.onnx_backend import Backend
from kompute_dml.onnx_backend.fusion_qdq import dedicate_dequantize

FUSED = "DequantizeLinear+MatMul+QuantizeLinear"


def _quantize(v: np.ndarray, scale: np.float32, zp: int, dt: type) -> np.ndarray:
    info = np.iinfo(dt)
    return np.clip(np.rint(v / scale) + zp, info.min, info.max).astype(dt)


def _qlinear_matmul(xq, xs, xz, w, ws, wz, ys, yz, dt):
    """y = saturate(rint(float32(S) * m) + yz), S the exact sum of (x - xz)(w - wz), m = xs * ws / ys
    in float32 (per column where ws is)."""
    s = np.matmul(xq.astype(np.int64) - xz, w.astype(np.int64) - wz)
    m = (np.float32(xs) * ws.astype(np.float32)) / np.float32(ys)
    info = np.iinfo(dt)
    return np.clip(np.rint(s.astype(np.float32) * m.astype(np.float32)) + yz, info.min, info.max).astype(dt)


def _model(rng, x_shape, per_column, xdt, shared_reader):
    """Q(x) -> DQ -> two products (their weights' DQs) -> Q -> DQ outputs; `shared_reader`: an Add
    reads the x DequantizeLinear too (it keeps the original)."""
    k, n1, n2 = x_shape[-1], 7, 5
    xt = T.UINT8 if xdt == np.uint8 else T.INT8
    xz = 131 if xdt == np.uint8 else -3
    consts = {"xs": np.array(0.05, np.float32), "xz": np.array(xz, xdt), "ys": np.array(0.4, np.float32),
              "yz": np.array(xz - 11, xdt)}
    for name, n in (("w1", n1), ("w2", n2)):
        consts[name] = rng.integers(-128, 128, (k, n)).astype(np.int8)
        cols = n if per_column else 1
        consts[name + "s"] = (rng.random(cols) * 0.03 + 0.005).astype(np.float32).reshape(-1 if per_column else ())
        consts[name + "z"] = np.zeros(consts[name + "s"].shape, np.int8)
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xf"])]
    outs = []
    for name in ("w1", "w2"):
        nodes += [helper.make_node("DequantizeLinear", [name, name + "s", name + "z"], [name + "f"], axis=1),
                  helper.make_node("MatMul", ["xf", name + "f"], [name + "m"]),
                  helper.make_node("QuantizeLinear", [name + "m", "ys", "yz"], [name + "q"]),
                  helper.make_node("DequantizeLinear", [name + "q", "ys", "yz"], [name + "y"])]
        outs.append(name + "y")
    if shared_reader:
        nodes.append(helper.make_node("Add", ["xf", "xf"], ["twice"]))
        outs.append("twice")
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", T.FLOAT, x_shape)],
                              [helper.make_tensor_value_info(o, T.FLOAT, None) for o in outs],
                              [numpy_helper.from_array(v, k) for k, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model, consts, xt


@pytest.mark.parametrize("per_column", [False, True], ids=["tensor", "column"])
@pytest.mark.parametrize("xdt", [np.uint8, np.int8], ids=["u8", "s8"])
@pytest.mark.parametrize("x_shape", [(6, 16), (2, 5, 33)], ids=["rank2", "rank3"])
def test_fused_against_reference(rng, per_column, xdt, x_shape):
    model, c, _ = _model(rng, x_shape, per_column, xdt, shared_reader=True)
    rep = Backend.prepare(model, "CPU")
    assert f"{FUSED} x2 " in rep.summary(), rep.summary()
    x = (rng.standard_normal(x_shape) * 3).astype(np.float32)
    xq = _quantize(x, c["xs"], int(c["xz"]), xdt)
    for _ in range(2):  # node by node, then the whole-graph plan
        got = rep.run({"x": x})
        assert rep.last_run.cpu_segments == 0 and rep.last_run.runtime_fallbacks == 0
        for name, y in zip(("w1", "w2"), got):
            yq = _qlinear_matmul(xq, c["xs"], int(c["xz"]), c[name], c[name + "s"], 0, c["ys"], int(c["yz"]), xdt)
            np.testing.assert_array_equal(y, (yq.astype(np.float32) - np.float32(c["yz"])) * c["ys"])
        xf = (xq.astype(np.float32) - np.float32(c["xz"])) * c["xs"]
        np.testing.assert_array_equal(got[2], xf + xf)  # the shared DequantizeLinear's other reader
    if onnxruntime_exact(xdt, np.int8).exact:  # (its u8 x s8 sums saturate without VNNI: tests/ort_exactness.py)
        want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)  # onnxruntime fuses the same node units into QLinearMatMul


def test_float_weight_stays_unfused(rng):
    """A MatMul of a float weight (no DequantizeLinear) is not a quantized product: DQ, MatMul and
    Q run one by one, on the device."""
    model, c, _ = _model(rng, (4, 8), False, np.uint8, shared_reader=False)
    g = model.graph
    w1f = next(n for n in g.node if n.output[0] == "w1f")
    g.node.remove(w1f)
    g.initializer.append(numpy_helper.from_array(
        ((c["w1"].astype(np.float32) - 0) * c["w1s"]).astype(np.float32), "w1f"))
    rep = Backend.prepare(model, "CPU")
    assert f"{FUSED} x1 " in rep.summary(), rep.summary()
    x = rng.standard_normal((4, 8)).astype(np.float32)
    got = rep.run({"x": x})
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    np.testing.assert_allclose(got[0], want[0], atol=float(c["ys"]) * 1.01)  # float sums: one step at most


def test_dedicate_dequantize():
    """A shared DequantizeLinear: a copy for each product reading it at input 0 (a MatMul of a
    dequantized constant weight, placed before its reader), the original for the rest (a product of
    a computed weight included) and for a graph output; no copy where it has one reader."""
    weights = [helper.make_node("DequantizeLinear", ["wa", "s"], ["a"]),
               helper.make_node("DequantizeLinear", ["wb", "s"], ["b"])]
    nodes = [helper.make_node("DequantizeLinear", ["q", "s"], ["f"]),
             helper.make_node("MatMul", ["f", "a"], ["m1"]),
             helper.make_node("Add", ["f", "m1"], ["s1"]),
             helper.make_node("MatMul", ["f", "b"], ["m2"]),
             helper.make_node("MatMul", ["b", "f"], ["m3"]),  # f as B: not a product's x
             helper.make_node("MatMul", ["f", "s1"], ["m5"]),  # a computed weight: no chain to fuse
             helper.make_node("DequantizeLinear", ["q", "s"], ["g"]),
             helper.make_node("MatMul", ["g", "a"], ["m4"])]
    constant = {"wa", "wb", "s"}.__contains__
    new, copies = dedicate_dequantize(helper.make_graph(weights + nodes, "g", [], []), set(), constant)
    ops = [(n.op_type, list(n.input), list(n.output)) for n in new.node][2:]
    assert copies == {"f/dq_for_0": "f", "f/dq_for_1": "f"}
    assert ops[1] == ("DequantizeLinear", ["q", "s"], ["f/dq_for_0"]) and ops[2] == ("MatMul", ["f/dq_for_0", "a"], ["m1"])
    assert ops[4] == ("DequantizeLinear", ["q", "s"], ["f/dq_for_1"]) and ops[5] == ("MatMul", ["f/dq_for_1", "b"], ["m2"])
    assert ops[3] == ("Add", ["f", "m1"], ["s1"]) and ops[6:8] == [("MatMul", ["b", "f"], ["m3"]), ("MatMul", ["f", "s1"], ["m5"])]
    assert ops[8:] == [("DequantizeLinear", ["q", "s"], ["g"]), ("MatMul", ["g", "a"], ["m4"])]
    # every reader a product: the first keeps the original; a graph output keeps it too
    two = helper.make_graph(weights + nodes[:2] + nodes[3:4], "g", [], [])
    assert list(dedicate_dequantize(two, set(), constant)[1]) == ["f/dq_for_0"]
    assert list(dedicate_dequantize(two, {"f"}, constant)[1]) == ["f/dq_for_0", "f/dq_for_1"]
    assert dedicate_dequantize(two, set(), lambda n: False)[1] == {}  # weights not constant: no product
    assert dedicate_dequantize(helper.make_graph(nodes[6:], "g", [], []), set(), constant)[0].node == nodes[6:]


def test_bert_qdq_family_products_fused():
    """quantize_static's default QDQ BERT (shared DequantizeLinears): every product of a weight is
    one QLinearMatMul (6 a layer), the attention's two products of computed values unfused."""
    pytest.importorskip("transformers", reason="it defines the architecture (requirements-model.txt)")
    from kompute_dml.bench import families

    rep = Backend.prepare(str(families.build("bert-qdq", "tiny")), "CPU")
    layers = families.SIZES["tiny"]["layers"]
    assert f"{FUSED} x{6 * layers} " in rep.summary(), rep.summary()


PAIR = "QuantizeLinear+DequantizeLinear"


def _pair_model(qs, qz, ds, dz, then="Add"):
    """x -> Q -> DQ (output xf) -> `then`(., x) -> y (float32 [4, 9]); a zero point None: absent."""
    consts = {k: v for k, v in (("qs", qs), ("qz", qz), ("ds", ds), ("dz", dz)) if v is not None}
    nodes = [helper.make_node("QuantizeLinear", ["x", "qs"] + (["qz"] if qz is not None else []), ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "ds"] + (["dz"] if dz is not None else []), ["xf"]),
             helper.make_node(then, ["xf", "x"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", T.FLOAT, (4, 9))],
                              [helper.make_tensor_value_info(n, T.FLOAT, None) for n in ("y", "xf")],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("zp", [np.uint8(140), np.int8(-7), None], ids=["u8", "s8", "none"])
def test_pair_is_one_dispatch(rng, zp):
    """QuantizeLinear -> DequantizeLinear of one scale and zero point: the round-trip extension,
    the unfused nodes' bits (fuse=False) and the numpy references' (quantize, then dequantize)."""
    from dequantize_reference import dequantize_ref
    from test_quantize import reference

    import kompute_dml as kdml

    s = np.float32(0.07)
    rep = Backend.prepare(_pair_model(s, zp, s, zp), "CPU")
    assert f"{PAIR} x1 " in rep.summary(), rep.summary()
    x = (rng.standard_normal((4, 9)) * 8).astype(np.float32)
    x.flat[:4] = [np.nan, np.inf, -np.inf, 0.035]  # (0.035 / 0.07: a tie, to even)
    z = np.zeros((), np.uint8) if zp is None else np.asarray(zp)
    xf = dequantize_ref(reference(x, np.asarray(s), z, z.dtype.type), np.asarray(s), z, kdml.DataType.FLOAT32)
    unfused = Backend.prepare(_pair_model(s, zp, s, zp), "CPU", fuse=False)
    for _ in range(2):  # node by node, then the whole-graph plan
        y, got = rep.run({"x": x})
        y2, got2 = unfused.run({"x": x})
        assert rep.last_run.dispatches == unfused.last_run.dispatches - 1, (rep.last_run, unfused.last_run)
        np.testing.assert_array_equal(got.view(np.uint32), xf.view(np.uint32))
        np.testing.assert_array_equal(got.view(np.uint32), got2.view(np.uint32))
        # (the Add's NaN + x: the device's NaN, whatever its payload)
        np.testing.assert_array_equal(y.view(np.uint32), y2.view(np.uint32))


@pytest.mark.parametrize("case", ["scales", "zero points", "zero point types"])
def test_pair_of_different_parameters_stays_unfused(rng, case):
    s, t = np.float32(0.07), np.float32(0.08)
    args = {"scales": (s, np.uint8(3), t, np.uint8(3)), "zero points": (s, np.uint8(3), s, np.uint8(4)),
            "zero point types": (s, np.uint8(3), s, np.int8(3))}[case]
    rep = Backend.prepare(_pair_model(*args), "CPU")
    assert PAIR not in rep.summary(), rep.summary()
    if case == "zero point types":  # (not a valid model: the DequantizeLinear's input is the Q's uint8)
        return
    x = rng.standard_normal((4, 9)).astype(np.float32)
    want = ort.InferenceSession(_pair_model(*args).SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    for g, w in zip(rep.run({"x": x}), want):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)


def test_pair_before_a_quantized_product_is_left_to_it(rng):
    """Q -> DQ -> MatMul(., DQ(W)) -> Q -> DQ: the first DequantizeLinear belongs to the product's
    chain (it reads the integers), not to a pair with its QuantizeLinear (which comes first)."""
    model, c, _ = _model(rng, (6, 16), False, np.uint8, shared_reader=False)
    g = model.graph
    for node in [n for n in g.node if n.output[0] in ("w2f", "w2m", "w2q", "w2y")]:
        g.node.remove(node)
    del g.output[1]
    rep = Backend.prepare(model, "CPU")
    assert f"{FUSED} x1 " in rep.summary() and PAIR not in rep.summary(), rep.summary()
    x = (rng.standard_normal((6, 16)) * 3).astype(np.float32)
    yq = _qlinear_matmul(_quantize(x, c["xs"], int(c["xz"]), np.uint8), c["xs"], int(c["xz"]), c["w1"], c["w1s"], 0,
                         c["ys"], int(c["yz"]), np.uint8)
    np.testing.assert_array_equal(rep.run({"x": x})[0], (yq.astype(np.float32) - np.float32(c["yz"])) * c["ys"])
