"""What a new input signature's first run does beside the device (issues 22 and 23): the plan's
buffers made on kp's threads while planning goes on (Buffer `later=True`, kp patch level 10:
Manager.kdml_storage_later), and the plan's objects moved to the collector's oldest generation, so
the first run owes no collection of them (gc_pause.gc_paused)."""

from __future__ import annotations

import gc
import threading

import numpy as np
import pytest

import kompute_dml as kdml
from kompute_dml.core.errors import DeviceError, OutOfMemoryError
from kompute_dml.runtime.memory import DeviceMemory

onnx = pytest.importorskip("onnx")
from onnx import TensorProto as T  # noqa: E402
from onnx import helper  # noqa: E402

from kompute_dml.onnx_backend import (  # noqa: E402
    Backend,
    gc_pause,
)

DT = kdml.DataType


def test_memory_made_later_holds_what_is_written_and_binds_like_any(dev, rng):
    """A buffer made later is pending until its first use; written, read, and bound as an
    operator's input and output it behaves as one made at once, in a recording too."""
    n = 1 << 16
    x = rng.standard_normal(n).astype(np.float32)
    src = kdml.Buffer(dev, x.nbytes, zeroed=False, later=True)
    out = kdml.Buffer(dev, x.nbytes + 64, zeroed=False, later=True)
    assert src.memory._pending is not None and out.memory._pending is not None
    src.write(x)
    assert src.memory._pending is None  # the write took it
    out.write(np.full(16, 0x7F, np.uint32), offset=x.nbytes)  # guard bytes past the output
    desc = kdml.TensorDesc(DT.FLOAT32, (n,))
    with dev.capture() as rec:
        kdml.identity(kdml.Tensor(src, desc), out=kdml.Tensor(out, desc), device=dev)
    rec.compile().run()
    np.testing.assert_array_equal(np.frombuffer(out.read(0, x.nbytes), np.float32), x)
    assert out.read(x.nbytes, 64) == np.full(16, 0x7F, np.uint32).tobytes()


def test_memory_made_later_is_released_and_the_device_closes_with_some_pending(rng):
    """Buffers dropped before their first use give their bytes back to the budget, and a device
    closes with buffers made later still held, never used (some may still be in the making then:
    kp's destroy waits for those; how fast the driver is decides, so that is not asserted)."""
    d = kdml.Device()
    before = d.engine.budget.allocated
    bufs = [kdml.Buffer(d, 1 << 20, zeroed=False, later=True) for _ in range(8)]
    assert d.engine.budget.allocated == before + 8 * (1 << 20)
    del bufs[:4]
    gc.collect()
    assert d.engine.budget.allocated == before + 4 * (1 << 20)
    d.close()


def test_zeroed_memory_is_made_at_once_even_when_asked_later(dev):
    """`later` applies to unzeroed memory only: a zeroed buffer is filled at allocation."""
    b = kdml.Buffer(dev, 256, later=True)
    assert b.memory._pending is None
    assert b.read() == bytes(256)


class _FailingPending:
    def __init__(self, message: str) -> None:
        self.message = message

    def get(self):
        raise RuntimeError(self.message)


class _Manager:
    """The engine's kp Manager, whose later allocations fail as the driver's would."""

    def __init__(self, real, message: str) -> None:
        self._real, self._message = real, message

    def kdml_storage_later(self, words):
        return _FailingPending(self._message)

    def __getattr__(self, name):
        return getattr(self._real, name)


@pytest.mark.parametrize("message,error", [("vk::Device::allocateMemory: ErrorOutOfDeviceMemory", OutOfMemoryError),
                                           ("vk::Device::createBuffer: ErrorUnknown", DeviceError)])
def test_a_later_allocation_that_failed_raises_at_first_use(message, error):
    """What making the memory raised reaches the first use, as OutOfMemoryError or DeviceError
    (as Engine.allocate raises at once); nothing was written, and the device stays usable."""
    d = kdml.Device()
    try:
        real = d.engine.manager
        d.engine.manager = _Manager(real, message)
        try:
            b = kdml.Buffer(d, 1024, zeroed=False, later=True)
        finally:
            d.engine.manager = real
        with pytest.raises(error):
            b.write(np.zeros(1024, np.uint8))
        with pytest.raises(error):  # again: the failure stays
            b.read()
        ok = kdml.Buffer(d, 64)
        ok.write(np.arange(64, dtype=np.uint8))
        assert ok.read() == bytes(range(64))
    finally:
        d.close()


# ---- the plan's objects join the collector's oldest generation --------------------------
def _softmax_model():
    g = helper.make_graph([helper.make_node("Softmax", ["x"], ["y"], axis=-1)], "g",
                          [helper.make_tensor_value_info("x", T.FLOAT, ["B", "S"])],
                          [helper.make_tensor_value_info("y", T.FLOAT, None)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def _run_softmax(rep, rng, shape):
    x = rng.standard_normal(shape).astype(np.float32)
    (y,) = rep.run({"x": x})
    e = np.exp(x.astype(np.float64) - x.max(axis=-1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(axis=-1, keepdims=True), rtol=1e-5, atol=1e-7)
    assert rep.last_run.submissions == 1


def test_a_plans_objects_join_the_oldest_generation_so_no_collection_is_due(rng):
    """After a new signature's plan, its objects (the GraphPlan among them) are in the collector's
    oldest generation and generation 0 starts afresh: the first run owes no collection of them.
    On CPython 3.12 too, which starts with objects of its own frozen (before device_graph's import)."""
    rep = Backend.prepare(_softmax_model(), "CPU")
    was = gc.isenabled()
    gc.enable()
    try:
        _run_softmax(rep, rng, (2, 8))
        _run_softmax(rep, rng, (3, 40))
        plans = [p for p in rep.state.plans.values() if p is not None]
        assert len(plans) == 2
        oldest = {id(o) for o in gc.get_objects(generation=2)}
        assert all(id(p) in oldest and id(p.program) in oldest for p in plans)
        assert gc.get_count()[0] < gc.get_threshold()[0]
    finally:
        (gc.enable if was else gc.disable)()


def test_objects_frozen_before_the_import_are_thawed_with_the_plans_promotion(rng, monkeypatch):
    """Objects frozen when gc_pause was imported (the interpreter's own: CPython 3.12 starts
    with 375) do not keep a plan young: they join the oldest generation with it."""
    rep = Backend.prepare(_softmax_model(), "CPU")
    early = [[i] for i in range(50)]  # frozen "before the import"
    gc.freeze()
    monkeypatch.setattr(gc_pause, "FROZEN_AT_IMPORT", gc.get_freeze_count())
    try:
        _run_softmax(rep, rng, (2, 8))
        assert gc.get_freeze_count() == 0
        (plan,) = [p for p in rep.state.plans.values() if p is not None]
        oldest = {id(o) for o in gc.get_objects(generation=2)}
        assert id(plan) in oldest and all(id(e) in oldest for e in early)
    finally:
        gc.unfreeze()


def test_objects_frozen_elsewhere_stay_frozen_and_the_plan_stays_young(rng):
    """Where objects were frozen after device_graph's import (the application's gc.freeze before a
    fork), planning leaves the frozen set as it was (no gc.unfreeze) and the generations alone."""
    rep = Backend.prepare(_softmax_model(), "CPU")
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        _run_softmax(rep, rng, (2, 8))
        assert 0 < gc.get_freeze_count() <= frozen  # not thawed, and nothing more frozen
        (plan,) = [p for p in rep.state.plans.values() if p is not None]
        assert all(o is not plan for o in gc.get_objects(generation=2))
    finally:
        gc.unfreeze()


class _SlowPending:
    """A later allocation that is not made until the test says so."""

    def __init__(self, tensor) -> None:
        self.tensor, self.done = tensor, False

    def ready(self):
        return self.done

    def get(self):
        self.done = True
        return self.tensor


def _made_slowly(dev, monkeypatch, *sizes):
    """Buffers made later whose memory is made only when the test says so (their _SlowPending)."""
    pendings = []

    class Manager(_Manager):
        def kdml_storage_later(self, words):
            pendings.append(_SlowPending(self._real.kdml_storage(words)))
            return pendings[-1]

    real = dev.engine.manager
    monkeypatch.setattr(dev.engine, "manager", Manager(real, ""))
    bufs = [kdml.Buffer(dev, n, zeroed=False, later=True) for n in sizes]
    monkeypatch.setattr(dev.engine, "manager", real)
    return pendings, bufs


def test_a_flush_stops_before_an_execution_that_binds_memory_still_being_made(dev, rng, monkeypatch):
    """Recording.flush starts the executions up to the first that binds a buffer still being
    made (so a flush never waits for an allocation); the next flush, once it is made, starts the
    rest, and the program's first run the remainder; every result exact, guard bytes intact."""
    n = 2048
    desc = kdml.TensorDesc(DT.FLOAT32, (n,))
    x = rng.standard_normal(n).astype(np.float32)
    src, mid = kdml.Buffer(dev, x.nbytes), kdml.Buffer(dev, x.nbytes)
    src.write(x)
    pendings, (late,) = _made_slowly(dev, monkeypatch, x.nbytes + 64)
    out = kdml.Buffer(dev, x.nbytes)
    with dev.capture() as rec:
        kdml.identity(kdml.Tensor(src, desc), out=kdml.Tensor(mid, desc), device=dev)
        kdml.identity(kdml.Tensor(mid, desc), out=kdml.Tensor(late, desc), device=dev)
        kdml.identity(kdml.Tensor(late, desc), out=kdml.Tensor(out, desc), device=dev)
        rec.flush()
        assert rec.flushed == 1 and not pendings[0].done  # waited for nothing
        pendings[0].done = True
        rec.flush()
        assert rec.flushed == 3
    for b in (mid, late, out):
        np.testing.assert_array_equal(np.frombuffer(b.read(0, x.nbytes), np.float32), x)


def test_engine_knows_memory_still_being_made(dev, monkeypatch):
    """Engine.allocating is True while memory made later is not made yet, False once it is made or
    dropped (the plans' flush rule below reads it)."""
    pendings, (late, other) = _made_slowly(dev, monkeypatch, 256, 256)
    assert dev.engine.allocating()
    pendings[0].done = True
    assert dev.engine.allocating()  # the other one
    del other
    assert not dev.engine.allocating() and late.memory.ready
    for _ in range(20):  # made and dropped, with nobody asking: the engine keeps no trace of them
        kdml.Buffer(dev, 256, zeroed=False, later=True).memory.tensor  # noqa: B018
    assert len(dev.engine.later._making) <= 1


@pytest.mark.parametrize("allocating, anyway", [(False, False), (True, False), (True, True)])
def test_a_plan_does_not_flush_while_a_buffer_is_being_made(rng, monkeypatch, allocating, anyway):
    """A plan flushes (DevicePolicy.plan_flush_ms) only while no buffer is being made: the NVIDIA
    driver holds a submission up meanwhile. With memory always being made, it never flushes and the
    whole program runs at the first run, unless the policy says to flush anyway
    (plan_flush_allocating, KDML_PLAN_FLUSH_ALLOCATING=1)."""
    import dataclasses

    rep = Backend.prepare(_softmax_model(), "CPU")
    monkeypatch.setattr(rep.device, "policy", dataclasses.replace(rep.device.policy, plan_flush_ms=1e-9,
                                                                    plan_flush_allocating=anyway))
    monkeypatch.setattr(type(rep.device.engine), "allocating", lambda self: allocating)
    # a flush that happens starts everything recorded (it waits for memory still being made)
    monkeypatch.setattr(DeviceMemory, "ready", property(lambda self: True))
    _run_softmax(rep, rng, (3, 40))
    (plan,) = [p for p in rep.state.plans.values() if p is not None]
    assert (plan.flushed == 0) == (allocating and not anyway)


def _chain_model():
    """x -> Relu -> Sigmoid -> Abs -> y: three element-wise dispatches of three variants."""
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Sigmoid", ["a"], ["b"]),
             helper.make_node("Abs", ["b"], ["y"])]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", T.FLOAT, ["B", "S"])],
                          [helper.make_tensor_value_info("y", T.FLOAT, None)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


@pytest.mark.parametrize("anyway", [False, True], ids=["default", "plan_flush_compiling"])
def test_a_plan_flushes_only_executions_whose_pipelines_are_made(rng, monkeypatch, anyway):
    """On a device that has made none of a plan's pipelines, a plan flushing before every node
    (plan_flush_ms) starts the inputs' copy alone: each node's new pipeline would be compiled at its
    own flush, one after another, where the plan's last encode compiles all three in one
    Programs.prepare_many (in parallel on GPUs). plan_flush_compiling (KDML_PLAN_FLUSH_COMPILING=1)
    flushes anyway: three compiles of one pipeline each. The same result either way; a second
    signature, whose pipelines are made, flushes as often as that."""
    import dataclasses

    from kompute_dml.runtime.pipelines import Programs

    # none of the plan's pipelines made in this process, nor made at prepare from earlier processes'
    # record (program_record.py, the GPUs' policy)
    monkeypatch.setattr(Programs, "warm", lambda self, threads: 0)
    dev = kdml.Device()
    try:
        rep = Backend.prepare(_chain_model(), kdml_device=dev)
        monkeypatch.setattr(rep.device, "policy", dataclasses.replace(rep.device.policy, plan_flush_ms=1e-9,
                                                                        plan_flush_compiling=anyway))
        monkeypatch.setattr(type(rep.device.engine), "allocating", lambda self: False)
        monkeypatch.setattr(DeviceMemory, "ready", property(lambda self: True))
        made: list[int] = []
        many = Programs.prepare_many

        def counted(self, plans, threads):  # the plan's own (the GPUs' siblings compile on their thread)
            n = many(self, plans, threads)
            if n and threading.current_thread().name != "kdml-pipelines":
                made.append(n)
            return n

        monkeypatch.setattr(Programs, "prepare_many", counted)
        x = rng.standard_normal((3, 40)).astype(np.float32)
        (y,) = rep.run({"x": x})
        np.testing.assert_allclose(y, np.abs(1 / (1 + np.exp(-np.maximum(x.astype(np.float64), 0)))), rtol=1e-6)
        (plan,) = [p for p in rep.state.plans.values() if p is not None]
        assert made == ([1, 1, 1] if anyway else [3])
        # flushed before each node: the inputs' copy, then (anyway) every node's execution but the last
        assert plan.flushed == (3 if anyway else 1)
        (y2,) = rep.run({"x": x[:2]})  # another signature: its pipelines are made
        np.testing.assert_array_equal(y2, y[:2])
        assert [p for p in rep.state.plans.values() if p is not None][-1].flushed == 3
    finally:
        dev.close()


def test_the_flush_settings_come_from_the_environment(dev, monkeypatch):
    from kompute_dml.runtime.policy import PLAN_FLUSH_ALLOCATING_ENV, PLAN_FLUSH_COMPILING_ENV, policy_for

    assert not policy_for("discrete-gpu", frozenset(), dev.limits).plan_flush_allocating
    monkeypatch.setenv(PLAN_FLUSH_ALLOCATING_ENV, "1")
    assert policy_for("discrete-gpu", frozenset(), dev.limits).plan_flush_allocating
    assert not policy_for("discrete-gpu", frozenset(), dev.limits).plan_flush_compiling
    monkeypatch.setenv(PLAN_FLUSH_COMPILING_ENV, "1")
    assert policy_for("discrete-gpu", frozenset(), dev.limits).plan_flush_compiling
    monkeypatch.setenv(PLAN_FLUSH_COMPILING_ENV, "yes")
    with pytest.raises(kdml.InvalidArgumentError, match="KDML_PLAN_FLUSH_COMPILING"):
        policy_for("discrete-gpu", frozenset(), dev.limits)


def test_a_larger_output_creates_no_memory_kernel_pipeline_where_the_policy_prepares_ahead(rng, monkeypatch):
    """The memory kernels take one chunk per invocation for outputs of up to 1 MiB and
    gpu_memory.VECS beyond (a specialization constant): a model's first plan creates both
    (ShaderFamily.shape_specs), so a first run whose copy outgrows 1 MiB creates no pipeline.
    (A transposed view flattened: a rows_copy of 8 rows of S elements per batch.)"""
    import dataclasses

    from kompute_dml.runtime import pipelines

    n = helper.make_node
    g = helper.make_graph([n("Transpose", ["x"], ["t"], perm=[0, 2, 1]), n("Flatten", ["t"], ["y"], axis=1)], "g",
                          [helper.make_tensor_value_info("x", T.FLOAT, ["B", "S", 8])],
                          [helper.make_tensor_value_info("y", T.FLOAT, None)])
    rep = Backend.prepare(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=10), "CPU")
    dev = rep.device
    monkeypatch.setattr(dev, "policy", dataclasses.replace(dev.policy, prepare_siblings=True, memory_kernel="gpu"))
    monkeypatch.setattr(dev.engine, "prepared_variants", set())
    created: list[tuple[str, tuple[int, ...]]] = []
    program = pipelines.Programs.program

    def noting(self, plan):
        if not self.has(plan):
            created.append((plan.variant, plan.spec))
        return program(self, plan)

    monkeypatch.setattr(pipelines.Programs, "program", noting)
    try:
        for k, shape in enumerate(((1, 5, 8), (64, 1000, 8))):  # outputs of 160 bytes, then 2 MiB
            x = rng.standard_normal(shape).astype(np.float32)
            (y,) = rep.run({"x": x})
            np.testing.assert_array_equal(y, x.transpose(0, 2, 1).reshape(shape[0], -1))
            if k == 0:  # the first run's kernel, in both specializations (made now, or by an earlier test)
                dev.engine.programs.wait()  # the siblings, queued once the first run has waited
                at_first = list(created)
                specs = {spec for (variant, spec, *_rest) in dev.engine.programs._programs if variant == "rows_copy_b32"}
                assert {(1,), (4,)} <= specs, specs
        assert created == at_first, f"the larger output created {created[len(at_first):]}"
    finally:
        rep.release()


def test_small_buffers_made_at_once_come_from_spares(dev, rng):
    """A small unzeroed buffer asked for at once (a compile's device constant) is one of the
    spares made ahead on kp's thread, and the spares are made up again; it holds what is written
    and gives its budget back when dropped. A zeroed one or a larger one is made as asked."""
    from kompute_dml.runtime import later as eng_mod

    eng = dev.engine
    kdml.Buffer(dev, 64, zeroed=False)  # the spares are requested, if none were
    for m in eng.later.spares:
        m.tensor  # noqa: B018  (made)
    spares = {m.serial for m in eng.later.spares}
    assert len(spares) == eng_mod.SPARES
    base = eng.budget.allocated
    data = rng.integers(0, 256, 100).astype(np.uint8)
    buf = dev.buffer(data)  # padded to its 16-byte unit, no fill: unzeroed
    assert buf.memory.serial in spares and buf.memory.words == 28
    assert np.array_equal(np.frombuffer(buf.memory.read(0, 112), np.uint8)[:100], data)
    assert buf.read() == data.tobytes()
    assert len(eng.later.spares) == eng_mod.SPARES and buf.memory.serial not in {m.serial for m in eng.later.spares}
    for other in (kdml.Buffer(dev, 64), kdml.Buffer(dev, 4 * eng_mod.SPARE_WORDS + 16, zeroed=False)):
        assert other.memory.serial not in spares
    del buf, other
    gc.collect()
    assert eng.budget.allocated == base  # the used one's given back, the new spare's taken


def test_a_spare_whose_making_failed_is_not_handed_out(dev):
    """A spare whose allocation failed on kp's thread is dropped, not handed out: the small buffer
    asked for at once is another spare (or made at once) and works."""
    eng = dev.engine
    kdml.Buffer(dev, 64, zeroed=False)  # the spares are requested, if none were
    for m in eng.later.spares:
        m.tensor  # noqa: B018  (made)

    class Failed:
        def ready(self) -> bool:
            return True

        def get(self) -> None:
            raise RuntimeError("vkAllocateMemory failed")

    bad = eng.later.spares[0]
    bad._tensor, bad._pending = None, Failed()
    buf = kdml.Buffer(dev, 64, zeroed=False)
    assert buf.memory is not bad and bad not in eng.later.spares
    buf.write(bytes(range(64)))
    assert buf.read() == bytes(range(64))
