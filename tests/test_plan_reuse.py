"""What the ONNX backend's plans of one model share so that a new input shape plans faster
(onnx_backend/device_graph.py): host nodes' results by their inputs' values (host_eval.HostMemo),
small host values uploaded once (plan_context.SMALL_HOST_BYTES), per-node liveness per input
names, and Python's garbage collector paused while a plan is made, then as it was."""

from __future__ import annotations

import gc

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

from kompute_dml.onnx_backend import (  # noqa: E402
    Backend,
    device_graph,
    transfers,
)

OPSETS = [helper.make_opsetid("", 17)]


def _two_layers():
    """Two "layers" that each split x's last dimension in two through shape arithmetic
    (Shape / Gather / Unsqueeze / Concat / Reshape, with initializers of their own but equal
    values), the second on the first's output: the same host nodes on equal inputs."""
    inits, nodes = [], []
    n = helper.make_node
    x = "x"
    for layer in (1, 2):
        inits += [numpy_helper.from_array(np.array(0, np.int64), f"i0_{layer}"),
                  numpy_helper.from_array(np.array([0], np.int64), f"ax_{layer}"),
                  numpy_helper.from_array(np.array([2, -1], np.int64), f"two_{layer}")]
        nodes += [n("Shape", [x], [f"shp{layer}"]), n("Gather", [f"shp{layer}", f"i0_{layer}"], [f"b{layer}"]),
                  n("Unsqueeze", [f"b{layer}", f"ax_{layer}"], [f"b1_{layer}"]),
                  n("Concat", [f"b1_{layer}", f"two_{layer}"], [f"split{layer}"], axis=0),
                  n("Reshape", [x, f"split{layer}"], [f"r{layer}"]), n("Add", [f"r{layer}", f"r{layer}"], [f"a{layer}"]),
                  n("Reshape", [f"a{layer}", f"shp{layer}"], [f"y{layer}"])]
        x = f"y{layer}"
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", T.FLOAT, ["B", "S"])],
                          [helper.make_tensor_value_info("y2", T.FLOAT, None)], initializer=inits)
    return helper.make_model(g, opset_imports=OPSETS, ir_version=10)


def test_host_nodes_equal_in_value_are_evaluated_once(rng, monkeypatch):
    """The second layer's shape arithmetic repeats the first's (equal inputs, equal attributes):
    evaluated once per plan, not once per layer; a new input shape evaluates it again, and an
    input shape planned before plans nothing. Results are shared read-only, outputs exact."""
    rep = Backend.prepare(_two_layers(), "CPU")
    calls = []
    real = transfers.evaluate
    monkeypatch.setattr(transfers, "evaluate", lambda node, *a: calls.append(node.op_type) or real(node, *a))
    for b, s, evaluated in ((2, 6, 4), (3, 8, 4), (2, 6, 0)):
        calls.clear()
        x = rng.standard_normal((b, s)).astype(np.float32)
        (y,) = rep.run({"x": x})
        np.testing.assert_array_equal(y, x * 4)
        assert rep.last_run.submissions == 1
        assert sorted(calls) == (sorted(["Shape", "Gather", "Unsqueeze", "Concat"]) if evaluated else []), calls
    results = list(rep.state.host_memo._results.values())
    assert results and all(not o.flags.writeable for outs in results for o in outs if isinstance(o, np.ndarray))


def test_a_different_attribute_or_value_is_not_shared():
    """HostMemo's key: the node's type and attributes and every input's type, shape and bytes."""
    from kompute_dml.onnx_backend.host_eval import HostMemo

    memo = HostMemo()
    g0 = helper.make_node("Gather", ["a", "i"], ["o"], axis=0)
    g1 = helper.make_node("Gather", ["a", "i"], ["o"], axis=1)
    a = np.arange(6, dtype=np.int64).reshape(2, 3)
    k = memo.key(0, g0, [a, np.array(0, np.int64)], np.shape)
    memo.put(k, [np.take(a, 0, axis=0)])
    assert memo.get(memo.key(5, g0, [a.copy(), np.array(0, np.int64)], np.shape)) is not None  # another node, equal
    for other in (memo.key(1, g1, [a, np.array(0, np.int64)], np.shape),
                  memo.key(0, g0, [a, np.array(1, np.int64)], np.shape),
                  memo.key(0, g0, [a, np.array(0, np.int32)], np.shape),
                  memo.key(0, g0, [a.reshape(3, 2), np.array(0, np.int64)], np.shape)):
        assert memo.get(other) is None
    assert memo.key(0, g0, [np.zeros(100_000, np.int64), np.array(0, np.int64)], np.shape) is None  # a table


def test_small_host_values_go_up_once_per_model(rng):
    """A Cast to BOOL binds three one-element host values (ONNX's "nonzero is true"): uploaded
    by the first plan, bound again by the next plans of other shapes."""
    node = helper.make_node("Cast", ["x"], ["y"], to=T.BOOL)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", T.FLOAT, ["N"])],
                          [helper.make_tensor_value_info("y", T.BOOL, None)])
    rep = Backend.prepare(helper.make_model(g, opset_imports=OPSETS, ir_version=10), "CPU")
    uploads = []
    for n in (5, 9, 33):
        x = rng.standard_normal(n).astype(np.float32)
        x[::3] = 0
        (y,) = rep.run({"x": x})
        np.testing.assert_array_equal(y, x != 0)
        assert rep.last_run.planned
        uploads.append(rep.last_run.constant_uploads)
    assert uploads[0] >= 2 and uploads[1:] == [0, 0], uploads


def test_small_host_values_need_no_allocation_of_their_own(rng, monkeypatch):
    """The first plan places its small host values among its other host values (one buffer made
    on kp's thread, one transfer): no synchronous allocation, which would wait while kp's thread
    makes the plan's large buffers."""
    from kompute_dml.runtime import engine

    node = helper.make_node("Cast", ["x"], ["y"], to=T.BOOL)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", T.FLOAT, ["N"])],
                          [helper.make_tensor_value_info("y", T.BOOL, None)])
    rep = Backend.prepare(helper.make_model(g, opset_imports=OPSETS, ir_version=10), "CPU")
    made = []
    real = engine.Engine.allocate
    monkeypatch.setattr(engine.Engine, "allocate",
                        lambda self, words, zeroed=True, later=False: made.append(later) or real(self, words, zeroed, later))
    x = rng.standard_normal(7).astype(np.float32)
    x[::2] = 0
    (y,) = rep.run({"x": x})
    np.testing.assert_array_equal(y, x != 0)
    assert rep.last_run.planned and rep.last_run.constant_uploads >= 2
    assert made and all(made), made  # every allocation of the plan made later
    assert len(rep.state.plan_small) >= 2


@pytest.mark.parametrize("enabled", [True, False], ids=["gc-on", "gc-off"])
def test_planning_pauses_the_collector_and_restores_it(rng, monkeypatch, enabled):
    seen = []
    real = device_graph.GraphPlan.__init__

    def init(self, *a, **k):
        seen.append(gc.isenabled())
        real(self, *a, **k)

    monkeypatch.setattr(device_graph.GraphPlan, "__init__", init)
    rep = Backend.prepare(_two_layers(), "CPU")
    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        rep.run({"x": rng.standard_normal((2, 4)).astype(np.float32)})
        assert gc.isenabled() == enabled
    finally:
        (gc.enable if was else gc.disable)()
    assert seen == [False]


def test_gpu_policy_sizes_the_plans_host_memory_once(rng, monkeypatch):
    """Where the policy prepares for other input shapes (GPUs), the model's first plan takes host
    memory for inputs and outputs with room for IO_HEADROOM times its own (at least IO_MIN_BYTES, at
    most PLAN_IO_BYTES), so larger shapes within it allocate none; a shape past it grows it."""
    import dataclasses

    rep = Backend.prepare(_two_layers(), "CPU")
    monkeypatch.setattr(rep.device, "policy", dataclasses.replace(rep.device.policy, prepare_siblings=True))
    monkeypatch.setattr(device_graph, "prepare_siblings", lambda *a: 0)  # lavapipe: no pipeline compiles
    sizes = []
    for b, s in ((1, 4), (8, 64), (16, 128)):
        x = rng.standard_normal((b, s)).astype(np.float32)
        (y,) = rep.run({"x": x})
        np.testing.assert_array_equal(y, x * 4)
        sizes.append((rep.state.plan_io["in"].nbytes, rep.state.plan_io["out"].nbytes))
    assert sizes == [(transfers.IO_MIN_BYTES, transfers.IO_MIN_BYTES)] * 3  # (16 bytes first, 8 KiB last)
    x = rng.standard_normal((64, 2048)).astype(np.float32)  # 512 KiB
    np.testing.assert_array_equal(rep.run({"x": x})[0], x * 4)
    assert rep.state.plan_io["in"].nbytes >= x.nbytes and rep.state.plan_io["out"].nbytes >= x.nbytes


def test_an_output_takes_a_larger_free_buffer_before_allocating(rng):
    """a (n floats) dies at the Slice that reads it; c (n / 2 floats, another size class) then
    takes a's buffer instead of a new one: the plan holds three buffers for values (a's, b's,
    y's), not four, beside its input buffer (PlanContext.input_buffer: one of the model's plan
    buffers too), and the output equals numpy's (the larger buffer's tail is never read)."""
    n = helper.make_node
    inits = [numpy_helper.from_array(np.array([0], np.int64), "st"), numpy_helper.from_array(np.array([512], np.int64), "en"),
             numpy_helper.from_array(np.array([1], np.int64), "ax")]
    nodes = [n("Add", ["x", "x"], ["a"]), n("Slice", ["a", "st", "en", "ax"], ["b"]), n("Add", ["b", "b"], ["c"]),
             n("Mul", ["c", "b"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", T.FLOAT, [4, 1024])],
                          [helper.make_tensor_value_info("y", T.FLOAT, None)], initializer=inits)
    rep = Backend.prepare(helper.make_model(g, opset_imports=OPSETS, ir_version=10), "CPU")
    x = rng.standard_normal((4, 1024)).astype(np.float32)
    (y,) = rep.run({"x": x})
    b = (x + x)[:, :512]
    np.testing.assert_array_equal(y, (b + b) * b)
    assert rep.last_run.planned and rep.last_run.submissions == 1
    held = sorted(buf.nbytes for bufs in rep.state.plan_buffers.values() for buf in bufs)
    assert held == [4 * 512 * 4, 4 * 512 * 4, 4 * 1024 * 4, 4 * 1024 * 4], held  # b's, y's, a's (then c's), x's


@pytest.mark.parametrize("flush_ms", [0.0, 1e-9], ids=["planned-then-run", "flushed-while-planned"])
def test_host_values_go_up_together_before_the_device_reads_them(rng, monkeypatch, flush_ms):
    """Two position-embedding-like host values (a constant table gathered by a Range of the
    sequence length) share one buffer of the plan, written in one transfer before the first
    flush that may read them (flushes before every node) or at the plan's end."""
    import dataclasses

    import kompute_dml as kdml

    hidden = 64
    t1, t2 = (rng.standard_normal((100, hidden)).astype(np.float32) for _ in range(2))
    n = helper.make_node
    inits = [numpy_helper.from_array(t1, "t1"), numpy_helper.from_array(t2, "t2"),
             numpy_helper.from_array(np.array(1, np.int64), "one"), numpy_helper.from_array(np.array(0, np.int64), "zero")]
    nodes = [n("Shape", ["x"], ["shp"]), n("Gather", ["shp", "one"], ["s"]), n("Range", ["zero", "s", "one"], ["pos"]),
             n("Gather", ["t1", "pos"], ["p1"]), n("Gather", ["t2", "pos"], ["p2"]),
             n("Add", ["x", "p1"], ["a"]), n("Add", ["a", "p2"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", T.FLOAT, ["B", "S", hidden])],
                          [helper.make_tensor_value_info("y", T.FLOAT, None)], initializer=inits)
    rep = Backend.prepare(helper.make_model(g, opset_imports=OPSETS, ir_version=10), "CPU")
    monkeypatch.setattr(rep.device, "policy", dataclasses.replace(rep.device.policy, plan_flush_ms=flush_ms))
    for b, s in ((2, 20), (3, 37)):
        x = rng.standard_normal((b, s, hidden)).astype(np.float32)
        for _ in range(2):
            (y,) = rep.run({"x": x})
            np.testing.assert_array_equal(y, (x + t1[:s]) + t2[:s])
        plan = rep.state.plans[next(reversed(rep.state.plans))]
        assert [type(k) for k in plan.ctx.kept] == [kdml.Buffer] and plan.ctx.staged_bytes == 2 * s * hidden * 4


def test_node_by_node_runs_within_a_memory_budget_its_arena_exceeds(rng):
    """Node by node (a node on the CPU), every node's output buffer is kept for the next run (the
    arena): twelve 1 MiB outputs on a device with a 6 MiB budget. Where an allocation would go
    over it, the arena's buffers go first: the run succeeds, twice, and equals numpy's."""
    import kompute_dml as kdml

    n = helper.make_node
    nodes, x = [], "x"
    for i in range(12):
        nodes.append(n("Add", [x, x], [f"a{i}"]))
        x = f"a{i}"
    nodes.append(n("Neg", [x], ["y"]))
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", T.FLOAT, [1 << 18])],
                          [helper.make_tensor_value_info("y", T.FLOAT, None)])
    dev = kdml.Device(memory_budget=6 << 20)
    try:
        rep = Backend.prepare(helper.make_model(g, opset_imports=OPSETS, ir_version=10), "CPU", kdml_device=dev,
                              exclude_ops=["Neg"])
        x = rng.standard_normal(1 << 18).astype(np.float32)
        for _ in range(2):
            (y,) = rep.run({"x": x})
            np.testing.assert_array_equal(y, -(x * 4096))
            assert not rep.last_run.planned and rep.last_run.cpu_segments == 1
    finally:
        dev.close()


def test_an_empty_input_is_planned_as_a_host_value(rng):
    """An input with a 0 in its shape (a decoder's first past) has no bytes on the device: the
    plan keeps it as a host value, nodes of it alone resolve on the host (a Concat of it alone
    stays empty, Shape reads it) and a Concat with device values leaves it out; one upload."""
    n = helper.make_node
    graph = helper.make_graph(
        [n("Concat", ["past"], ["p1"], axis=1), n("Concat", ["p1", "x"], ["cat"], axis=1),
         n("Shape", ["past"], ["shp"]), n("Relu", ["cat"], ["y"])],
        "empty", [helper.make_tensor_value_info("past", T.FLOAT, [2, "p", 3]),
                  helper.make_tensor_value_info("x", T.FLOAT, [2, "s", 3])],
        [helper.make_tensor_value_info("y", T.FLOAT, None), helper.make_tensor_value_info("shp", T.INT64, None)])
    rep = Backend.prepare(helper.make_model(graph, opset_imports=OPSETS, ir_version=10), "CPU")
    for p, s in ((0, 4), (2, 4)):
        past = rng.standard_normal((2, p, 3)).astype(np.float32)
        x = rng.standard_normal((2, s, 3)).astype(np.float32)
        y, shp = rep.run({"past": past, "x": x})
        np.testing.assert_array_equal(y, np.maximum(np.concatenate([past, x], 1), 0))
        np.testing.assert_array_equal(shp, [2, p, 3])
        assert rep.last_run.planned and rep.last_run.runtime_fallbacks == 0 and rep.last_run.uploads == 1


@pytest.mark.parametrize("count, dispatches", [(2, 1 << 16), (256, 1)])
def test_plans_are_kept_within_both_capacities(rng, count, dispatches):
    """Plans per signature are kept up to plan_capacity of them and plan_dispatch_capacity
    dispatches together, least recently used out first (the newest always stays)."""
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu",
                              [helper.make_tensor_value_info("x", T.FLOAT, ["n"])],
                              [helper.make_tensor_value_info("y", T.FLOAT, None)])
    rep = Backend.prepare(helper.make_model(graph, opset_imports=OPSETS, ir_version=10), "CPU")
    rep.state.plan_capacity, rep.state.plan_dispatch_capacity = count, dispatches
    for n in (3, 4, 5, 4):
        x = rng.standard_normal(n).astype(np.float32)
        np.testing.assert_array_equal(rep.run({"x": x})[0], np.maximum(x, 0))
    kept = [key[0][1] for key in rep.state.plans]
    assert kept == ([(5,), (4,)] if count == 2 else [(4,)])
    assert rep.last_run.planned == (count != 2)  # (4,) was still kept at two plans


def test_float_shape_arithmetic_is_resolved_on_the_host(rng):
    """ceil(w / 2) of a shape (MobileViT's patch count: Cast to float, Div, Ceil, Cast back) is
    host arithmetic: the Reshape it feeds is planned (it refused the plan: 'a value computed on
    the device'), one upload and one download."""
    n = helper.make_node
    inits = [numpy_helper.from_array(np.array(1, np.int64), "i1"), numpy_helper.from_array(np.array(2.0, np.float32), "two"),
             numpy_helper.from_array(np.array([0], np.int64), "ax"), numpy_helper.from_array(np.array([-1], np.int64), "m1")]
    nodes = [n("Shape", ["x"], ["s"]), n("Gather", ["s", "i1"], ["w"]), n("Cast", ["w"], ["wf"], to=T.FLOAT),
             n("Div", ["wf", "two"], ["h"]), n("Ceil", ["h"], ["c"]), n("Cast", ["c"], ["ci"], to=T.INT64),
             n("Unsqueeze", ["ci", "ax"], ["cu"]), n("Concat", ["m1", "cu"], ["shape"], axis=0),
             n("Reshape", ["x", "shape"], ["y"])]
    graph = helper.make_graph(nodes, "ceil", [helper.make_tensor_value_info("x", T.FLOAT, [2, "w"])],
                              [helper.make_tensor_value_info("y", T.FLOAT, None)], initializer=inits)
    rep = Backend.prepare(helper.make_model(graph, opset_imports=OPSETS, ir_version=10), "CPU")
    for w in (6, 8):
        x = rng.standard_normal((2, w)).astype(np.float32)
        y = rep.run({"x": x})[0]
        np.testing.assert_array_equal(y, x.reshape(-1, -(-w // 2)))
        assert rep.last_run.planned and rep.last_run.uploads == 1 and rep.last_run.runtime_fallbacks == 0


def test_a_scatter_of_host_values_is_host_arithmetic(rng):
    """ScatterND into a ConstantOfShape of an input's shape (Swin's shifted-window mask) reads no
    input data: resolved on the host (it was a CPU sub-graph per run), the model one planned
    submission."""
    n = helper.make_node
    inits = [numpy_helper.from_array(np.array([[0], [2]], np.int64), "idx"),
             numpy_helper.from_array(np.ones((2, 3), np.float32), "upd")]
    nodes = [n("Shape", ["x"], ["s"]), n("ConstantOfShape", ["s"], ["z"], value=numpy_helper.from_array(np.zeros(1, np.float32))),
             n("ScatterND", ["z", "idx", "upd"], ["m"]), n("Add", ["x", "m"], ["y"])]
    graph = helper.make_graph(nodes, "scatter", [helper.make_tensor_value_info("x", T.FLOAT, [4, 3])],
                              [helper.make_tensor_value_info("y", T.FLOAT, None)], initializer=inits)
    rep = Backend.prepare(helper.make_model(graph, opset_imports=OPSETS, ir_version=10), "CPU")
    assert [p.target for p in rep.placement if p.op_type == "ScatterND"] == ["host"]
    x = rng.standard_normal((4, 3)).astype(np.float32)
    m = np.zeros((4, 3), np.float32)
    m[[0, 2]] = 1
    np.testing.assert_array_equal(rep.run({"x": x})[0], x + m)
    assert rep.last_run.planned and rep.last_run.cpu_segments == 0 and rep.last_run.uploads == 1


def test_size_of_a_device_value_is_host_arithmetic(rng):
    """Size needs only its input's shape (as Shape): the Size of a device result is resolved on
    the host, never read back, and the model planned; its value follows the input's shape."""
    n = helper.make_node
    nodes = [n("Relu", ["x"], ["r"]), n("Size", ["r"], ["s"]), n("Cast", ["s"], ["sf"], to=T.FLOAT),
             n("Div", ["r", "sf"], ["y"])]
    graph = helper.make_graph(nodes, "size", [helper.make_tensor_value_info("x", T.FLOAT, ["a", "b"])],
                              [helper.make_tensor_value_info("y", T.FLOAT, None),
                               helper.make_tensor_value_info("s", T.INT64, None)])
    rep = Backend.prepare(helper.make_model(graph, opset_imports=OPSETS, ir_version=10), "CPU")
    assert {p.op_type: p.target for p in rep.placement} == {"Relu": "vulkan", "Size": "host", "Cast": "host",
                                                           "Div": "vulkan"}
    for shape in ((3, 4), (5, 7), (2, 9)):  # a new signature each: each run plans
        x = rng.standard_normal(shape).astype(np.float32)
        y, s = rep.run({"x": x})
        assert s.dtype == np.int64 and s.shape == () and int(s) == x.size
        np.testing.assert_allclose(y, np.maximum(x, 0) / np.float32(x.size), rtol=1e-6)
        assert rep.last_run.planned and rep.last_run.cpu_segments == 0 and rep.last_run.runtime_fallbacks == 0
