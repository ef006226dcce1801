"""Waits outside the engine's lock (runtime/inflight.py: the thread that submitted a replayed run
waits for it while other threads submit): models run from several threads at once give what each
gives alone, and a model's device output fed to another model, run after run."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import kompute_dml as kdml
from kompute_dml.onnx_backend import Backend

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402


def _model(seed: int, k: int = 24) -> onnx.ModelProto:
    """x [n, k] -> tanh(x @ W + b) @ W2: products, bias and an activation (several dispatches)."""
    rng = np.random.default_rng(seed)
    w = helper.make_tensor("w", TensorProto.FLOAT, [k, k], rng.standard_normal((k, k)).astype(np.float32).ravel())
    b = helper.make_tensor("b", TensorProto.FLOAT, [k], rng.standard_normal(k).astype(np.float32))
    w2 = helper.make_tensor("w2", TensorProto.FLOAT, [k, 8], rng.standard_normal((k, 8)).astype(np.float32).ravel())
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "b"], ["hb"]),
             helper.make_node("Tanh", ["hb"], ["t"]), helper.make_node("MatMul", ["t", "w2"], ["y"])]
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", k])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 8])], [w, b, w2])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _reference(m: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    """numpy in float64, independent of the backend."""
    c = {t.name: onnx.numpy_helper.to_array(t).astype(np.float64) for t in m.graph.initializer}
    return np.tanh(x.astype(np.float64) @ c["w"] + c["b"]) @ c["w2"]


def test_threads_running_models_give_what_each_gives_alone() -> None:
    """Four models, four threads, each run waited for outside the engine's lock while the others
    submit: every result equals the same model's run alone, and the numpy reference."""
    dev = kdml.default_device()
    models = [_model(10 + i) for i in range(4)]
    reps = [Backend.prepare(m, kdml_device=dev) for m in models]
    rng = np.random.default_rng(0)
    feeds = [[rng.standard_normal((1 + (j % 3) * 7, 24)).astype(np.float32) for j in range(6)] for _ in reps]
    alone = [[rep.run({"x": x})[0].copy() for x in xs] for rep, xs in zip(reps, feeds)]
    for m, xs, ys in zip(models, feeds, alone):
        for x, y in zip(xs, ys):
            np.testing.assert_allclose(y, _reference(m, x), rtol=1e-4, atol=1e-4)
    got: dict[tuple[int, int, int], np.ndarray] = {}
    errors: list[BaseException] = []
    start = threading.Barrier(len(reps))

    def loop(k: int) -> None:
        try:
            start.wait()
            for rnd in range(5):
                for j, x in enumerate(feeds[k]):
                    got[k, rnd, j] = reps[k].run({"x": x})[0].copy()
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=loop, args=(k,)) for k in range(len(reps))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for (k, _rnd, j), y in got.items():
        np.testing.assert_array_equal(y, alone[k][j])


def test_a_device_output_feeds_another_model() -> None:
    dev = kdml.default_device()
    first, second = _model(30, k=8), _model(31, k=8)
    a = Backend.prepare(first, kdml_device=dev)
    b = Backend.prepare(second, kdml_device=dev)
    x = np.random.default_rng(1).standard_normal((5, 8)).astype(np.float32)
    for _ in range(3):  # replayed runs too
        y = a.run({"x": x}, device_outputs=True)[0]
        z = b.run({"x": y})[0]
        np.testing.assert_array_equal(z, b.run({"x": y.numpy()})[0])
        np.testing.assert_allclose(z, _reference(second, _reference(first, x).astype(np.float32)), rtol=1e-4, atol=1e-4)


def test_a_submission_settled_again_inside_its_own_wait_does_not_deadlock() -> None:
    """The thread waiting for a replayed run may, inside that wait, be asked to settle the same
    submission (a buffer's finalizer run by the collector: Engine._released): the wait's lock is
    re-entrant, so it finishes instead of waiting for itself. Fakes stand in for kp's sequence."""
    from kompute_dml.runtime.inflight import InFlight
    from kompute_dml.runtime.replay import Replay

    inflight = InFlight(lambda call: call())
    replay = Replay(frozenset({1}), [])
    waits: list[int] = []

    class Seq:
        def kdml_submit(self) -> None:
            pass

        def kdml_wait(self) -> None:
            waits.append(len(waits))
            if len(waits) == 1:
                inflight.settle(1)  # re-entered from the waiting thread

    replay.seq = Seq()
    done = threading.Event()

    def run() -> None:
        inflight.wait_owned(inflight.start_owned(replay, None))
        done.set()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    assert done.wait(10), "the wait waited for itself"
    assert not replay.running and len(inflight) == 0 and waits == [0, 1]


def test_shared_device_bench_runs_both_ways(capsys: pytest.CaptureFixture[str]) -> None:
    """kompute_dml.bench.shared_device (kompute-dml bench --scaling) and its overlay with every wait
    under the engine's lock print a row per shape (the overlay's patch undone after)."""
    pytest.importorskip("torch", reason="the random BERT is a torch export")
    pytest.importorskip("transformers", reason="the random BERT is a transformers model")
    from benchmarks import shared_device as overlay
    from kompute_dml.bench import shared_device
    from kompute_dml.runtime import engine

    launch = engine.Engine._launch
    assert shared_device.main(["--copies", "2", "--shapes", "1x8", "--seconds", "0.05"]) == 0
    try:
        assert overlay.main(["--locked", "--copies", "2", "--shapes", "1x8", "--seconds", "0.05"]) == 0
    finally:
        engine.Engine._launch = launch
    out = capsys.readouterr().out
    assert out.count("| 1x8 |") == 2 and "overlay: every wait under the engine's lock" in out
