"""DEPTH_TO_SPACE1 and SPACE_TO_DEPTH1 (ops/depth_space.py: strided copies) against numpy's
reshape / transpose forms of ONNX's DCR and CRD definitions: every type of the pages' table, both
orders, block sizes 1 to 3, strided inputs and outputs at random offsets, outputs poisoned first
and every other byte unchanged (bit copies: NaN payloads kept); the pages' examples; refused
descriptors; ONNX DepthToSpace / SpaceToDepth node cases on the device and models against
onnxruntime."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from helpers import assert_output, place, poison_against, random_strides, random_values

import kompute_dml as kdml

DT = kdml.DataType
TD = kdml.TensorDesc
DCR, CRD = kdml.DepthSpaceOrder.DEPTH_COLUMN_ROW, kdml.DepthSpaceOrder.COLUMN_ROW_DEPTH
TYPES = [DT.FLOAT32, DT.FLOAT16, DT.INT32, DT.INT16, DT.INT8, DT.UINT32, DT.UINT16, DT.UINT8]


def d2s(x, b, order):
    n, c, h, w = x.shape
    if order == DCR:
        return x.reshape(n, b, b, c // b // b, h, w).transpose(0, 3, 4, 1, 5, 2).reshape(n, c // b // b, h * b, w * b)
    return x.reshape(n, c // b // b, b, b, h, w).transpose(0, 1, 4, 2, 5, 3).reshape(n, c // b // b, h * b, w * b)


def s2d(x, b, order):
    n, c, h, w = x.shape
    t = x.reshape(n, c, h // b, b, w // b, b)
    t = t.transpose(0, 3, 5, 1, 2, 4) if order == DCR else t.transpose(0, 1, 3, 5, 2, 4)
    return t.reshape(n, c * b * b, h // b, w // b)


@pytest.mark.parametrize("dt", TYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("order", [DCR, CRD], ids=lambda o: o.name)
@pytest.mark.parametrize("to_space, xs, b", [
    (True, (2, 12, 3, 5), 2), (True, (1, 18, 2, 2), 3), (True, (3, 4, 2, 3), 1),
    (False, (2, 3, 4, 6), 2), (False, (1, 2, 9, 3), 3),
], ids=["d2s-2", "d2s-3", "d2s-1", "s2d-2", "s2d-3"])
def test_against_numpy(dev, rng, dt, order, to_space, xs, b):
    x = random_values(rng, dt, xs)
    want = d2s(x, b, order) if to_space else s2d(x, b, order)
    xd = TD(dt, xs, random_strides(rng, xs, allow_broadcast=False))
    yd = TD(dt, want.shape, random_strides(rng, want.shape, allow_broadcast=False))
    tx, _ = place(dev, rng, xd, x)
    ty, _ = place(dev, rng, yd)
    before = poison_against(ty, want, rng)
    cls = kdml.DepthToSpace1Desc if to_space else kdml.SpaceToDepth1Desc
    dev.compile(cls(xd, yd, b, order)).execute([tx], [ty])
    assert_output(ty, before, want)


def test_the_pages_example_and_helpers(dev, rng):
    x = np.array([v + 9 * c for c in range(8) for v in range(6)], np.uint32).reshape(1, 8, 2, 3)  # the page's input
    y = kdml.depth_to_space(x, 2, device=dev).numpy()
    np.testing.assert_array_equal(y[0, 0, 0], [0, 18, 1, 19, 2, 20])
    np.testing.assert_array_equal(y[0, 1, 1], [45, 63, 46, 64, 47, 65])
    y = kdml.depth_to_space(x, 2, "CRD", device=dev).numpy()
    np.testing.assert_array_equal(y[0, 0, 1], [18, 27, 19, 28, 20, 29])
    np.testing.assert_array_equal(kdml.space_to_depth(y, 2, CRD, device=dev).numpy(), x)
    f = rng.standard_normal((2, 3, 4, 4)).astype(np.float16)
    np.testing.assert_array_equal(kdml.space_to_depth(f, 2, device=dev).numpy(), s2d(f, 2, DCR))
    with pytest.raises(kdml.InvalidArgumentError, match="^mode"):
        kdml.depth_to_space(x, 2, "RCD", device=dev)
    with pytest.raises(kdml.InvalidArgumentError, match="^x"):
        kdml.depth_to_space(x[0], 2, device=dev)


F = DT.FLOAT32
BASE = kdml.DepthToSpace1Desc(TD(F, (1, 8, 2, 3)), TD(F, (1, 2, 4, 6)), 2)


@pytest.mark.parametrize("change, field", [
    (dict(block_size=0), "block_size"),
    (dict(block_size=True), "block_size"),
    (dict(order=3), "order"),
    (dict(input_tensor=TD(F, (1, 6, 2, 3))), "input_tensor.sizes"),
    (dict(output_tensor=TD(F, (1, 2, 4, 5))), "output_tensor.sizes"),
    (dict(output_tensor=TD(DT.INT32, (1, 2, 4, 6))), "output_tensor.data_type"),
])
def test_refused_descriptors_name_their_field(dev, change, field):
    with pytest.raises(kdml.InvalidArgumentError, match=f"^{field}"):
        dev.compile(dataclasses.replace(BASE, **change))
    s2d_base = kdml.SpaceToDepth1Desc(TD(F, (1, 2, 4, 6)), TD(F, (1, 8, 2, 3)), 2)
    with pytest.raises(kdml.InvalidArgumentError, match="^input_tensor.sizes"):
        dev.compile(dataclasses.replace(s2d_base, input_tensor=TD(F, (1, 2, 4, 5))))
    with pytest.raises(kdml.UnsupportedError, match="input_tensor"):
        dev.compile(dataclasses.replace(BASE, input_tensor=TD(DT.INT64, (1, 8, 2, 3)),
                                        output_tensor=TD(DT.INT64, (1, 2, 4, 6))))


onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402
from onnx_node_cases import node_case_tests, one_node_model  # noqa: E402

from kompute_dml.onnx_backend import Backend  # noqa: E402

test_case_count, test_onnx_node_case_on_the_device = node_case_tests(r"^test_(depthtospace|spacetodepth)\w*_cpu$",
                                                                     __name__, 12)


@pytest.mark.parametrize(("dt", "et"), [(np.float32, TensorProto.FLOAT), (np.int8, TensorProto.INT8),
                                        (np.bool_, TensorProto.BOOL), (np.int64, TensorProto.INT64)],
                         ids=["f32", "i8", "bool", "i64"])
@pytest.mark.parametrize("op, mode", [("DepthToSpace", "DCR"), ("DepthToSpace", "CRD"), ("SpaceToDepth", None)])
def test_models_against_onnxruntime(rng, dt, et, op, mode):
    x = (rng.standard_normal((2, 8, 4, 6)) * 50).astype(dt)
    node = helper.make_node(op, ["x"], ["y"], blocksize=2, **({"mode": mode} if mode else {}))
    model = one_node_model(node, [("x", et, x.shape)], et, opset=13)
    rep = Backend.prepare(model, "CPU")
    got = rep.run({"x": x})[0]
    order = CRD if mode == "CRD" else DCR
    want = d2s(x, 2, order) if op == "DepthToSpace" else s2d(x, 2, order)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    if dt == np.float32:  # onnxruntime implements the float types only
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        np.testing.assert_array_equal(got, sess.run(None, {"x": x})[0])
    assert [p.target for p in rep.placement] == (["cpu"] if dt == np.int64 else ["vulkan"]), rep.summary()
