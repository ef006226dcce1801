"""Out-of-range indices of Gather and GatherElements through the ONNX backend (ops/device_check.py,
docs/gather.md): an InvalidArgumentError naming the indices' value, position and the node, as
onnxruntime refuses them, in the whole-graph plan (planned then run, and flushed while planned) and
node by node; the model runs right afterwards. Expected values from numpy."""

from __future__ import annotations

import traceback

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402
from test_onnx_graph import _flush_every  # noqa: E402

import kompute_dml as kdml  # noqa: E402
from kompute_dml.onnx_backend import Backend  # noqa: E402

VOCAB, HIDDEN = 50, 4
MODES = pytest.mark.parametrize(("node_by_node", "flush_ms"), [(False, 0.0), (False, 1e-9), (True, 0.0)],
                                ids=["plan", "plan-flushed-while-planned", "node-by-node"])


def _model(node, inputs, inits):
    """`node` (output "g"), then Add(g, g) -> y: the Add is what exclude_ops sends to the CPU."""
    add = helper.make_node("Add", ["g", "g"], ["y"], name="double")
    g = helper.make_graph([node, add], "g", inputs, [helper.make_tensor_value_info("y", T.FLOAT, None)],
                          initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def _prepare(model, node_by_node, flush_ms, monkeypatch):
    rep = Backend.prepare(model, "CPU", exclude_ops=["Add"] if node_by_node else [])
    assert rep.graph_mode is not node_by_node
    _flush_every(monkeypatch, rep, flush_ms)
    return rep


def _text(e: BaseException) -> str:
    return "".join(traceback.format_exception_only(e))


@MODES
def test_embedding_lookup_out_of_range_id(rng, monkeypatch, node_by_node, flush_ms):
    table = rng.standard_normal((VOCAB, HIDDEN)).astype(np.float32)
    node = helper.make_node("Gather", ["table", "input_ids"], ["g"], name="embed", axis=0)
    model = _model(node, [helper.make_tensor_value_info("input_ids", T.INT64, ["b", "s"])],
                   [numpy_helper.from_array(table, "table")])
    rep = _prepare(model, node_by_node, flush_ms, monkeypatch)
    ids = np.array([[1, 2, 3], [4, -1, 0]], np.int64)
    (y,) = rep.run({"input_ids": ids})
    np.testing.assert_array_equal(y, table[ids % VOCAB] * 2)
    bad = ids.copy()
    bad[1, 1] = VOCAB  # onnxruntime: "idx=50 must be within the inclusive range [-50,49]"
    for _ in range(2):  # a plan's first run, then a later one
        with pytest.raises(kdml.InvalidArgumentError, match=f"^indices_tensor: index {VOCAB} at .*"
                                                            f"\\(element 4 in row-major order\\).*\\[-50, 49\\]") as e:
            rep.run({"input_ids": bad})
        assert "(Gather 'embed')" in _text(e.value)
    ids2 = np.array([[7, 8, 9], [10, 11, -50]], np.int64)
    (y,) = rep.run({"input_ids": ids2})
    np.testing.assert_array_equal(y, table[ids2 % VOCAB] * 2)


@MODES
def test_gather_elements_out_of_range(rng, monkeypatch, node_by_node, flush_ms):
    x = rng.standard_normal((3, 5)).astype(np.float32)
    node = helper.make_node("GatherElements", ["x", "idx"], ["g"], name="pick", axis=1)
    model = _model(node, [helper.make_tensor_value_info("idx", T.INT32, [3, 2])], [numpy_helper.from_array(x, "x")])
    rep = _prepare(model, node_by_node, flush_ms, monkeypatch)
    idx = np.array([[0, 4], [-5, 2], [3, -1]], np.int32)
    bad = idx.copy()
    bad[2, 0] = -6
    with pytest.raises(kdml.InvalidArgumentError, match="^indices_tensor: index -6 at position \\(2, 0\\)") as e:
        rep.run({"idx": bad})
    assert "(GatherElements 'pick')" in _text(e.value)
    (y,) = rep.run({"idx": idx})
    np.testing.assert_array_equal(y, np.take_along_axis(x, idx % 5, axis=1) * 2)


def test_device_inputs_and_outputs_raise_the_check_too(rng):
    """With the ids fed as a device Tensor and the outputs left on the device (the input copies, the
    program and the output copies queued, the host waiting once), the failed check still raises,
    naming the node, and the next run's outputs are right."""
    table = rng.standard_normal((VOCAB, HIDDEN)).astype(np.float32)
    node = helper.make_node("Gather", ["table", "input_ids"], ["g"], name="embed", axis=0)
    model = _model(node, [helper.make_tensor_value_info("input_ids", T.INT64, ["b", "s"])],
                   [numpy_helper.from_array(table, "table")])
    rep = Backend.prepare(model, "CPU")
    ids = np.array([[1, 2, 3], [4, -1, 0]], np.int64)
    bad = ids.copy()
    bad[0, 2] = -VOCAB - 1
    for _ in range(2):
        (y,) = rep.run({"input_ids": rep.device.tensor(ids)}, device_outputs=True)
        np.testing.assert_array_equal(y.numpy(), table[ids % VOCAB] * 2)
        with pytest.raises(kdml.InvalidArgumentError, match=f"^indices_tensor: index {-VOCAB - 1} at ") as e:
            rep.run({"input_ids": rep.device.tensor(bad)}, device_outputs=True)
        assert "(Gather 'embed')" in _text(e.value)
