"""MEAN_VARIANCE_NORMALIZATION1's keys_output_tensor (the skip extension's "_q" variants),
ACTIVATION_GELU's (ops/gelu_keys.py) and DYNAMIC_QUANTIZE_LINEAR's input_keys_tensor: a skip
normalization or a GELU writes, per work group, the order keys of the range of the outputs it
wrote (with +0), and the quantization takes them in place of its own first pass (one dispatch
instead of two), as the ONNX backend runs a normalization or GELU that a DynamicQuantizeLinear /
DynamicQuantizeMatMul reads.

Oracles: the keys against numpy's minimum and maximum of the output as stored, per row group
(the rows a work group takes: ops/mean_variance_normalization.row_layout); the quantization
against quantize_reference.dynamic_quantize_ref (numpy, ONNX Runtime's arithmetic) of that
output, bit for bit, and against the two-dispatch operator. Bytes around the keys poisoned and
unchanged; the fields' rules as InvalidArgumentError naming them."""

from __future__ import annotations

import numpy as np
import pytest
from quantize_reference import dynamic_quantize_ref

import kompute_dml as kdml
from kompute_dml.functional.mean_variance_normalization import skip_layer_norm_key_parts
from kompute_dml.ops.gelu_keys import gelu_key_parts
from kompute_dml.ops.mean_variance_normalization import WG, row_layout

DT = kdml.DataType
TD = kdml.TensorDesc
POISON = 0xA5A5A5A5


def _key(v: np.ndarray) -> np.ndarray:
    """dynamic_quantize.comp's order key of float32 values (-0 below +0)."""
    b = np.asarray(v, np.float32).view(np.uint32)
    return np.where(b & 0x80000000, ~b, b | 0x80000000).astype(np.uint32)


def _want_keys(y: np.ndarray, rows_per: int) -> np.ndarray:
    """Per group of rows_per rows of y (the last axis a row): (least, greatest) key of its non-NaN
    values and +0."""
    rows = y.astype(np.float32).reshape(-1, y.shape[-1])
    out = []
    for g in range(0, rows.shape[0], rows_per):
        v = rows[g:g + rows_per].reshape(-1)
        k = _key(np.concatenate([v[~np.isnan(v)], np.float32([0.0])]))
        out.append((k.min(), k.max()))
    return np.array(out, np.uint32)


def _keys_in_poisoned(dev: kdml.Device, parts: int, pad: int = 4) -> tuple[kdml.Tensor, kdml.Tensor]:
    """A keys tensor `pad` pairs into a buffer of poisoned words, and the whole buffer's words."""
    whole = dev.tensor(np.full(2 * (parts + 2 * pad), POISON, np.uint32))
    return whole, kdml.Tensor(whole.buffer, TD(DT.UINT32, (parts, 2)), 8 * pad)


CASES = [  # (shape, dtype, values): FLOAT32 rows within the cache, longer ones (the per-unit path), FLOAT16
    ((8, 16, 256), np.float32, "normal"),
    ((3, 5, 3000), np.float32, "normal"),
    ((2, 7, 96), np.float16, "normal"),
    ((5, 2500), np.float16, "normal"),
    ((600, 24), np.float32, "edges"),
    ((1, 1, 7), np.float32, "positive"),
]


def _inputs(rng: np.random.Generator, shape: tuple[int, ...], dt: type, values: str) -> list[np.ndarray]:
    x, skip = (rng.standard_normal(shape).astype(dt) for _ in range(2))
    gamma, beta = (rng.standard_normal(shape[-1:]).astype(dt) for _ in range(2))
    if values == "edges":  # rows whose outputs hold NaN, +-inf and -0 (gamma's and beta's), one all-NaN row
        gamma[:3] = [np.nan, np.inf, 0.0]
        beta[:3] = [0.0, 0.0, -0.0]
        x[7] = np.nan
    if values == "positive":  # no negative output: the range's low end is +0 itself
        gamma[:] = 0.0
        beta[:] = np.abs(beta) + 1
    return [x, skip, gamma, beta]


@pytest.mark.parametrize("shape,dt,values", CASES)
def test_keys_and_one_dispatch_quantization(dev, shape, dt, values):
    rng = np.random.default_rng(len(shape) * 7 + shape[-1])
    x, skip, gamma, beta = _inputs(rng, shape, dt, values)
    parts = skip_layer_norm_key_parts(shape, DT.from_numpy(np.dtype(dt)))
    tl, _ = row_layout(shape[-1], DT.from_numpy(np.dtype(dt)))
    rows_per = WG >> tl
    assert parts == -(-int(np.prod(shape[:-1])) // rows_per)
    whole, keys = _keys_in_poisoned(dev, parts)
    y = kdml.skip_layer_norm(dev.tensor(x), dev.tensor(skip), dev.tensor(gamma), None, dev.tensor(beta),
                             keys_out=keys, device=dev)
    yn = y.numpy()
    words = whole.numpy()
    assert (words[:8] == POISON).all() and (words[8 + 2 * parts:] == POISON).all()
    np.testing.assert_array_equal(keys.numpy(), _want_keys(yn, rows_per))
    # the same output as without keys (the variant differs only in what it also writes)
    plain = kdml.skip_layer_norm(dev.tensor(x), dev.tensor(skip), dev.tensor(gamma), None, dev.tensor(beta),
                                 device=dev).numpy()
    np.testing.assert_array_equal(yn.view(np.uint8), plain.view(np.uint8))
    if dt != np.float32:  # (DynamicQuantizeLinear takes float32: the FLOAT16 keys through the operator below)
        return
    q1 = kdml.dynamic_quantize_linear(y, keys=keys, device=dev)
    q2 = kdml.dynamic_quantize_linear(y, device=dev)
    want = dynamic_quantize_ref(yn)
    for got in (q1, q2):
        np.testing.assert_array_equal(got[0].numpy(), want[0])
        assert got[1].numpy()[0].view(np.uint32) == np.float32(want[1]).view(np.uint32)
        assert int(got[2].numpy()[0]) == want[2]


def test_float16_keys_through_the_operator(dev):
    """A FLOAT16 input's keys (decoded exactly) feed DYNAMIC_QUANTIZE_LINEAR of that input."""
    rng = np.random.default_rng(5)
    shape = (4, 9, 40)
    x, skip, gamma, beta = _inputs(rng, shape, np.float16, "normal")
    parts = skip_layer_norm_key_parts(shape, DT.FLOAT16)
    keys = dev.empty(TD(DT.UINT32, (parts, 2)))
    y = kdml.skip_layer_norm(dev.tensor(x), dev.tensor(skip), dev.tensor(gamma), None, dev.tensor(beta),
                             keys_out=keys, device=dev)
    ones = (1,) * len(shape)
    desc = kdml.DynamicQuantizeLinearDesc(y.desc, TD(DT.UINT8, shape), TD(DT.FLOAT32, ones), TD(DT.UINT8, ones),
                                          keys.desc)
    op = dev.compile(desc)
    assert [p.variant.split("_")[1] for p in op.plans] == ["quant"]
    outs = [dev.empty(d) for d in (desc.output_tensor, desc.output_scale_tensor, desc.output_zero_point_tensor)]
    op.execute([y, keys], outs)
    want = dynamic_quantize_ref(y.numpy().astype(np.float32))
    np.testing.assert_array_equal(outs[0].numpy(), want[0])
    assert outs[1].numpy().reshape(-1)[0].view(np.uint32) == np.float32(want[1]).view(np.uint32)
    assert int(outs[2].numpy().reshape(-1)[0]) == want[2]


def test_more_parts_than_a_work_group(dev):
    """More key pairs than the quantizing work group's invocations (each folds several)."""
    rng = np.random.default_rng(9)
    shape = (3000, 16)  # 16-element rows: 128 rows per work group at most, 24 parts or more
    x, skip, gamma, beta = _inputs(rng, shape, np.float32, "normal")
    parts = skip_layer_norm_key_parts(shape, DT.FLOAT32)
    keys = dev.empty(TD(DT.UINT32, (parts, 2)))
    y = kdml.skip_layer_norm(dev.tensor(x), dev.tensor(skip), dev.tensor(gamma), None, dev.tensor(beta),
                             keys_out=keys, device=dev)
    many = np.tile(keys.numpy(), (300 // parts + 1, 1))[:300]  # 300 pairs: the same range, repeated
    many[-1] = _key(np.float32([-1e30, 1e30]))  # the last pair widens it
    kt = dev.tensor(many)
    got = kdml.dynamic_quantize_linear(y, keys=kt, device=dev)
    yn = y.numpy()
    assert got[1].numpy()[0] == np.float32(np.float32(2e30) / np.float32(255))
    want = dynamic_quantize_ref(np.concatenate([yn.reshape(-1), np.float32([-1e30, 1e30])]))
    np.testing.assert_array_equal(got[0].numpy().reshape(-1), want[0][:-2])


@pytest.mark.parametrize("n", [1, 5, 1024, 1027, 70000])
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_keys(dev, n, approximate):
    """ACTIVATION_GELU's keys per 1024 outputs (a work group's) against numpy's, poisoned words
    around them unchanged, the outputs those without keys, the one-dispatch quantization numpy's."""
    rng = np.random.default_rng(n)
    x = (rng.standard_normal(n) * 4).astype(np.float32)
    if n > 8:
        x[:4] = [np.nan, -np.inf, np.inf, -0.0]
    parts = gelu_key_parts(n)
    assert parts == -(-n // 1024)
    whole, keys = _keys_in_poisoned(dev, parts)
    y = kdml.gelu(dev.tensor(x), approximate=approximate, keys_out=keys, device=dev)
    words = whole.numpy()
    assert (words[:8] == POISON).all() and (words[8 + 2 * parts:] == POISON).all()
    yn = y.numpy()
    np.testing.assert_array_equal(keys.numpy(), _want_keys(yn.reshape(-1, 1), 1024))
    plain = kdml.gelu(dev.tensor(x), approximate=approximate, device=dev).numpy()
    np.testing.assert_array_equal(yn.view(np.uint32), plain.view(np.uint32))
    q = kdml.dynamic_quantize_linear(y, keys=keys, device=dev)
    want = dynamic_quantize_ref(yn)
    np.testing.assert_array_equal(q[0].numpy(), want[0])
    assert q[1].numpy()[0].view(np.uint32) == np.float32(want[1]).view(np.uint32)


def test_gelu_keys_rules(dev):
    x = TD(DT.FLOAT32, (8, 300))
    good = TD(DT.UINT32, (gelu_key_parts(2400), 2))
    cases = [(TD(DT.UINT32, (5, 2)), x, kdml.InvalidArgumentError, r"keys_output_tensor\.sizes"),
             (TD(DT.FLOAT32, good.sizes), x, kdml.InvalidArgumentError, r"keys_output_tensor\.data_type"),
             (good, TD(DT.FLOAT32, (8, 300), (600, 2)), kdml.UnsupportedError, "keys_output_tensor"),
             (TD(DT.UINT32, good.sizes), TD(DT.FLOAT16, (8, 300)), kdml.UnsupportedError, "keys_output_tensor")]
    for keys, xd, err, field in cases:
        yd = TD(xd.data_type, xd.sizes)
        with pytest.raises(err, match=field):
            dev.compile(kdml.ActivationGeluDesc(xd, yd, "none", keys))


def _mvn_desc(shape: tuple[int, ...], keys: TD | None, skip: bool = True) -> kdml.MeanVarianceNormalization1Desc:
    x = TD(DT.FLOAT32, shape)
    return kdml.MeanVarianceNormalization1Desc(x, None, None, x, (len(shape) - 1,), True, 1e-5,
                                               skip_tensor=x if skip else None, keys_output_tensor=keys)


@pytest.mark.parametrize("keys,skip,field", [
    (TD(DT.UINT32, (3, 2)), True, "keys_output_tensor.sizes"),
    (TD(DT.UINT32, (1, 2)), True, "keys_output_tensor.sizes"),
    (TD(DT.INT32, (2, 2)), True, "keys_output_tensor.data_type"),
    (TD(DT.UINT32, (2, 2), (1, 2)), True, "keys_output_tensor.sizes"),
    (TD(DT.UINT32, (2, 2)), False, "skip_tensor"),
])
def test_keys_output_rules(dev, keys, skip, field):
    assert skip_layer_norm_key_parts((64, 64), DT.FLOAT32) == 2  # (64-element rows: 32 rows per work group)
    with pytest.raises(kdml.InvalidArgumentError, match=field.replace(".", r"\.")):
        dev.compile(_mvn_desc((64, 64), keys, skip))


@pytest.mark.parametrize("keys", [TD(DT.UINT32, (4,)), TD(DT.UINT32, (4, 3)), TD(DT.FLOAT32, (4, 2)),
                                  TD(DT.UINT32, (4, 2), (1, 4))])
def test_input_keys_rules(dev, keys):
    x = TD(DT.FLOAT32, (8,))
    desc = kdml.DynamicQuantizeLinearDesc(x, TD(DT.UINT8, (8,)), TD(DT.FLOAT32, (1,)), TD(DT.UINT8, (1,)), keys)
    with pytest.raises(kdml.InvalidArgumentError, match=r"input_keys_tensor\."):
        dev.compile(desc)


def test_onnx_normalization_then_dynamic_quantization(dev):
    """SkipLayerNormalization, Add -> LayerNormalization, com.microsoft Gelu and FastGelu, each read by a
    DynamicQuantizeLinear:
    the quantizations run one dispatch each (no dql_minmax) and give numpy's quantization of the
    normalized values the model also outputs, bit for bit."""
    pytest.importorskip("onnx")
    from onnx import TensorProto as T
    from onnx import helper, numpy_helper

    from kompute_dml.onnx_backend import Backend

    rng = np.random.default_rng(11)
    h = 48
    inits = [numpy_helper.from_array(rng.standard_normal(h).astype(np.float32), n) for n in ("g", "b")]
    nodes = [
        helper.make_node("SkipLayerNormalization", ["x", "s", "g", "b"], ["n1"], domain="com.microsoft", epsilon=1e-5),
        helper.make_node("DynamicQuantizeLinear", ["n1"], ["q1", "s1", "z1"]),
        helper.make_node("Add", ["n1", "x"], ["sum"]),
        helper.make_node("LayerNormalization", ["sum", "g", "b"], ["n2"], axis=-1, epsilon=1e-5),
        helper.make_node("DynamicQuantizeLinear", ["n2"], ["q2", "s2", "z2"]),
        helper.make_node("Gelu", ["n2"], ["n3"], domain="com.microsoft"),
        helper.make_node("DynamicQuantizeLinear", ["n3"], ["q3", "s3", "z3"]),
        helper.make_node("FastGelu", ["n2", "b"], ["n4"], domain="com.microsoft"),
        helper.make_node("DynamicQuantizeLinear", ["n4"], ["q4", "s4", "z4"]),
    ]
    shape = ["B", "S", h]
    outs = [helper.make_tensor_value_info(n, t, None) for n, t in (
        ("n1", T.FLOAT), ("q1", T.UINT8), ("s1", T.FLOAT), ("z1", T.UINT8),
        ("n2", T.FLOAT), ("q2", T.UINT8), ("s2", T.FLOAT), ("z2", T.UINT8),
        ("n3", T.FLOAT), ("q3", T.UINT8), ("s3", T.FLOAT), ("z3", T.UINT8),
        ("n4", T.FLOAT), ("q4", T.UINT8), ("s4", T.FLOAT), ("z4", T.UINT8))]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, T.FLOAT, shape) for n in ("x", "s")], outs, inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
                              ir_version=8)
    rep = Backend.prepare(model.SerializeToString(), "CPU")
    eager = Backend.prepare(model.SerializeToString(), "CPU")
    eager.state.node_by_node = True  # (the executor of graphs with CPU nodes: no whole-graph plan)
    for b, s in ((1, 5), (4, 33), (4, 33)):  # (the second 4 x 33: the plan's replay)
        feeds = {n: rng.standard_normal((b, s, h)).astype(np.float32) for n in ("x", "s")}
        got = dict(zip(rep.output_names, rep.run(feeds)))
        for i in ("1", "2", "3", "4"):
            want = dynamic_quantize_ref(got["n" + i])
            np.testing.assert_array_equal(got["q" + i], want[0])
            assert got["s" + i].view(np.uint32) == np.float32(want[1]).view(np.uint32)
            assert int(got["z" + i]) == want[2]
        for a, e in zip(rep.run(feeds), eager.run(feeds)):
            np.testing.assert_array_equal(a, e)
    with rep.device.profile() as p:
        rep.run(feeds)
    variants = [r.variant for r in p.rows]
    assert not any(v.startswith("dql_minmax") for v in variants), variants
    assert sum(v.startswith("mvn_skip") and v.endswith("_q") for v in variants) == 2, variants
    assert sum(v.endswith("_f32_vq") for v in variants) == 2, variants


@pytest.mark.parametrize("name", ["distilbert-int8", "roberta-int8"])
def test_int8_families_with_and_without_keys(dev, name, monkeypatch):
    """A quantized family planned with the keys and without them (handlers_nn.keys_for returning
    None): the same bits, and fewer dispatches with them."""
    pytest.importorskip("torch", reason="torch (requirements-model.txt) exports the models")
    pytest.importorskip("transformers", reason="transformers (requirements-model.txt) defines the models")
    from kompute_dml.bench import families
    from kompute_dml.onnx_backend import Backend, fusions, handlers_nn, handlers_transformer

    path = str(families.build(name, "tiny"))
    feeds = families.feeds(name, 3, 17, np.random.default_rng(4))
    outs, counts = [], []
    for keys in (True, False):
        if not keys:
            for module in (handlers_nn, fusions, handlers_transformer):
                monkeypatch.setattr(module, "keys_for", lambda *a, **k: None)
        rep = Backend.prepare(path, "CPU", kdml_device=dev)
        outs.append(rep.run(feeds))
        with dev.profile() as p:
            rep.run(feeds)
        counts.append(len(p.rows))
        rep.release()
    for x, y in zip(*outs):
        np.testing.assert_array_equal(np.asarray(x).view(np.uint8), np.asarray(y).view(np.uint8))
    assert counts[0] < counts[1], counts
