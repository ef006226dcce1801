"""Serving one prepared model to many callers: threads calling `rep.run` on one BackendRep (and
on two reps of one device) at once, and kompute_dml.serving.Batcher (requests gathered along
the batch axis, run as one batch, split back in order). Every result is checked against the
same request run alone and that run against a numpy encoder (tests/test_serving.py's own)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import CancelledError

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

import kompute_dml as kdml  # noqa: E402
from kompute_dml.onnx_backend import Backend  # noqa: E402
from kompute_dml.serving import Batcher  # noqa: E402

H, V, SEQ = 16, 30, 5
JOIN = 120.0


def encoder(rng):
    """An attention block: embedding Gather, Q / K / V products, masked softmax attention, a
    residual Add and LayerNormalization; inputs ids, mask [B, S] int64, output y [B, S, H]."""
    w = {k: (rng.standard_normal((H, H)) / 4).astype(np.float32) for k in ("wq", "wk", "wv")}
    w["table"] = rng.standard_normal((V, H)).astype(np.float32)
    w["gamma"] = (1 + rng.standard_normal(H) / 8).astype(np.float32)
    w["beta"] = (rng.standard_normal(H) / 8).astype(np.float32)
    consts = {**w, "scale": np.array(0.25, np.float32), "neg": np.array(-1e4, np.float32),
              "one": np.array(1.0, np.float32), "ax1": np.array([1], np.int64)}
    n = helper.make_node
    nodes = [
        n("Gather", ["table", "ids"], ["x"]),
        n("MatMul", ["x", "wq"], ["q"]), n("MatMul", ["x", "wk"], ["k"]), n("MatMul", ["x", "wv"], ["v"]),
        n("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
        n("MatMul", ["q", "kt"], ["s0"]), n("Mul", ["s0", "scale"], ["s1"]),
        n("Cast", ["mask"], ["mf"], to=T.FLOAT), n("Sub", ["one", "mf"], ["pad"]), n("Mul", ["pad", "neg"], ["bias"]),
        n("Unsqueeze", ["bias", "ax1"], ["bias3"]), n("Add", ["s1", "bias3"], ["s2"]),
        n("Softmax", ["s2"], ["p"], axis=-1), n("MatMul", ["p", "v"], ["ctx"]), n("Add", ["ctx", "x"], ["r"]),
        n("LayerNormalization", ["r", "gamma", "beta"], ["y"], axis=-1, epsilon=1e-5),
    ]
    g = helper.make_graph(nodes, "enc", [helper.make_tensor_value_info("ids", T.INT64, ["B", "S"]),
                                         helper.make_tensor_value_info("mask", T.INT64, ["B", "S"])],
                          [helper.make_tensor_value_info("y", T.FLOAT, ["B", "S", H])],
                          initializer=[numpy_helper.from_array(v, k) for k, v in consts.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=10), w


def reference(w, ids, mask):
    """The encoder in numpy (float64, rounded once at the end)."""
    x = w["table"].astype(np.float64)[ids]
    q, k, v = (x @ w[name].astype(np.float64) for name in ("wq", "wk", "wv"))
    s = q @ k.transpose(0, 2, 1) * 0.25 + ((1.0 - mask) * -1e4)[:, None, :]
    p = np.exp(s - s.max(-1, keepdims=True))
    r = (p / p.sum(-1, keepdims=True)) @ v + x
    mu, var = r.mean(-1, keepdims=True), r.var(-1, keepdims=True)
    return ((r - mu) / np.sqrt(var + 1e-5) * w["gamma"] + w["beta"]).astype(np.float32)


def request(rng, rows=1, seq=SEQ):
    ids = rng.integers(0, V, (rows, seq)).astype(np.int64)
    mask = np.ones((rows, seq), np.int64)
    mask[:, int(rng.integers(1, seq + 1)):] = 0
    return {"ids": ids, "mask": mask}


@pytest.fixture(scope="module")
def model():
    return encoder(np.random.default_rng(55))


@pytest.fixture
def rep(model):
    return Backend.prepare(model[0], "CPU")


def _alone(model, feeds):
    """What one request gives run alone on its own prepared model, checked against numpy."""
    out = Backend.prepare(model[0], "CPU").run(feeds).y
    np.testing.assert_allclose(out, reference(model[1], feeds["ids"], feeds["mask"]), rtol=1e-4, atol=1e-4)
    return out


def _threads(target, n):
    errors: list[BaseException] = []

    def guarded(i):
        try:
            target(i)
        except BaseException as e:  # reported below
            errors.append(e)

    ts = [threading.Thread(target=guarded, args=(i,), daemon=True) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(JOIN)
    assert not any(t.is_alive() for t in ts), "threads hung"
    if errors:
        raise errors[0]


def test_threads_share_one_prepared_model_and_two_models_share_a_device(model):
    rng = np.random.default_rng(1)
    reqs = [request(rng, rows=1 + i % 3, seq=SEQ + i % 2) for i in range(8)]  # several signatures
    want = [_alone(model, f) for f in reqs]
    shared = Backend.prepare(model[0], "CPU")
    other = Backend.prepare(model[0], "CPU")  # a second model on the same device, run at the same time
    got: dict[tuple[int, int], np.ndarray] = {}

    def work(t):
        rep = other if t == 3 else shared
        for k in range(6):
            i = (t + k) % len(reqs)
            got[t, k] = (i, rep.run(reqs[i]).y)

    _threads(work, 4)
    for i, y in got.values():
        np.testing.assert_array_equal(y, want[i])


def test_batched_requests_equal_each_run_alone_in_order(model, rep):
    rng = np.random.default_rng(2)
    reqs = [request(rng) for _ in range(19)]
    want = [_alone(model, f) for f in reqs]
    done: list[int] = []
    with Batcher(rep, max_batch=8, max_delay_ms=50.0) as b:
        futures = [b.submit(f) for f in reqs]
        for i, f in enumerate(futures):
            f.add_done_callback(lambda _f, i=i: done.append(i))
        results = [f.result(JOIN) for f in futures]
    for r, w in zip(results, want):
        assert r.y.shape == (1, SEQ, H)
        np.testing.assert_array_equal(r.y, w)
    assert done == sorted(done), "requests of one signature complete in the order they came"
    assert b.stats["requests"] == len(reqs) and b.stats["batches"] < len(reqs)


@pytest.mark.parametrize("delay_ms", [0.0, 5.0])  # 0: whatever waits runs as soon as the device is free
def test_many_callers_through_one_batcher(model, rep, delay_ms):
    rng = np.random.default_rng(3)
    reqs = [request(rng, seq=SEQ + i % 2) for i in range(24)]  # two signatures, batched apart
    want = [_alone(model, f) for f in reqs]
    got: dict[int, np.ndarray] = {}
    with Batcher(rep, max_batch=4, max_delay_ms=delay_ms) as b:
        def caller(t):
            for i in range(t, len(reqs), 6):
                got[i] = b.submit(reqs[i]).result(JOIN).y

        _threads(caller, 6)
    assert sorted(got) == list(range(len(reqs)))
    for i, y in got.items():
        np.testing.assert_array_equal(y, want[i])
    assert b.stats["requests"] == len(reqs) and b.stats["run_s"] > 0 and b.stats["gather_s"] >= 0


def test_a_request_error_reaches_only_its_future(model, rep):
    rng = np.random.default_rng(4)
    good = [request(rng) for _ in range(4)]
    bad_type = {"ids": good[0]["ids"].astype(np.float64), "mask": good[0]["mask"]}  # refused at submit
    bad_ids = {"ids": np.full((1, SEQ), V + 5, np.int64), "mask": good[0]["mask"]}  # refused by the run
    with Batcher(rep, max_batch=8, max_delay_ms=200.0) as b:
        futures = [b.submit(good[0]), b.submit(bad_type), b.submit(good[1]), b.submit(bad_ids),
                   b.submit(good[2]), b.submit({"ids": good[3]["ids"]}), b.submit(good[3])]
        errors = [f.exception(JOIN) for f in futures]
    assert [e is None for e in errors] == [True, False, True, False, True, False, True]
    assert isinstance(errors[1], ValueError) and "ids" in str(errors[1])
    assert isinstance(errors[3], kdml.InvalidArgumentError)
    assert isinstance(errors[5], ValueError) and "mask" in str(errors[5])
    for f, feeds in zip([futures[i] for i in (0, 2, 4, 6)], good):
        np.testing.assert_array_equal(f.result().y, _alone(model, feeds))


def test_close_runs_or_cancels_what_is_pending(model, rep):
    rng = np.random.default_rng(5)
    reqs = [request(rng) for _ in range(3)]
    b = Batcher(rep, max_batch=64, max_delay_ms=60_000.0)  # nothing would run before the deadline
    futures = [b.submit(f) for f in reqs]
    b.close(timeout=JOIN)
    for f, feeds in zip(futures, reqs):
        np.testing.assert_array_equal(f.result(0).y, _alone(model, feeds))
    with pytest.raises(RuntimeError, match="closed"):
        b.submit(reqs[0])

    b = Batcher(rep, max_batch=64, max_delay_ms=60_000.0)
    futures = [b.submit(f) for f in reqs]
    time.sleep(0.05)
    b.close(cancel_pending=True, timeout=JOIN)
    assert all(f.cancelled() for f in futures)
    assert not any(t.name.startswith("kdml-batcher") for t in threading.enumerate()), "close() ends both threads"
    with pytest.raises(CancelledError):
        futures[0].result(0)


def test_batcher_arguments_are_checked(rep):
    for kwargs in ({"max_batch": 0}, {"max_batch": 2.0}, {"max_delay_ms": -1}):
        with pytest.raises(ValueError, match=next(iter(kwargs))):
            Batcher(rep, **kwargs)
