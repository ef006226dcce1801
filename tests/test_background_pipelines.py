"""Pipelines made in the background (runtime/pipelines.Programs.prepare_later): the ONNX backend's
siblings (onnx_backend/siblings.py, the GPUs' policy) are compiled on a thread of their own, so a
model's first run returns while they are still being made (a cold driver compiles each for
hundreds of ms), its next plan waits for them, closing the device waits for the batch being
compiled, and a process that exits meanwhile exits cleanly (the batch is waited for before kp's
own exit callback destroys the device)."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import threading
import time

import numpy as np
from onnx import TensorProto as T
from onnx import helper

import kompute_dml as kdml
from kompute_dml.onnx_backend import Backend
from kompute_dml.runtime import pipelines

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _model():
    """y = Flatten(Transpose(x)): a rows_copy, whose other specializations are its siblings."""
    n = helper.make_node
    g = helper.make_graph([n("Transpose", ["x"], ["t"], perm=[0, 2, 1]), n("Flatten", ["t"], ["y"], axis=1)], "g",
                          [helper.make_tensor_value_info("x", T.FLOAT, ["B", "S", 8])],
                          [helper.make_tensor_value_info("y", T.FLOAT, None)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def _with_siblings(rep, monkeypatch=None):
    dev = rep.device
    policy = dataclasses.replace(dev.policy, prepare_siblings=True, memory_kernel="gpu")
    if monkeypatch is not None:
        monkeypatch.setattr(dev, "policy", policy)
        monkeypatch.setattr(dev.engine, "prepared_variants", set())
    else:
        dev.policy = policy
        dev.engine.prepared_variants = set()
    return dev


def test_the_first_run_does_not_wait_for_its_siblings(rng, monkeypatch):
    rep = Backend.prepare(_model(), "CPU")
    dev = _with_siblings(rep, monkeypatch)
    release = threading.Event()
    made: list[str] = []
    prepare_many = pipelines.Programs.prepare_many

    def held(self, plans, threads):  # the background batch waits for the test (a slow driver's compile)
        if threading.current_thread().name == "kdml-pipelines":
            assert release.wait(30)
            made.extend(p.variant for p in plans)
        return prepare_many(self, plans, threads)

    monkeypatch.setattr(pipelines.Programs, "prepare_many", held)
    x = rng.standard_normal((2, 5, 8)).astype(np.float32)
    try:
        (y,) = rep.run({"x": x})  # returns with the siblings still held
        np.testing.assert_array_equal(y, x.transpose(0, 2, 1).reshape(2, -1))
        assert made == [] and dev.engine.programs._later is not None
        (y,) = rep.run({"x": x})  # the same plan again: nothing waits
        np.testing.assert_array_equal(y, x.transpose(0, 2, 1).reshape(2, -1))
        threading.Timer(0.2, release.set).start()
        x2 = rng.standard_normal((64, 100, 8)).astype(np.float32)
        (y2,) = rep.run({"x": x2})  # a new plan: waits for the siblings first
        assert made and release.is_set()
        np.testing.assert_array_equal(y2, x2.transpose(0, 2, 1).reshape(64, -1))
        assert dev.engine.programs.later_error is None
    finally:
        release.set()
        dev.engine.programs.wait()


def test_close_waits_for_the_batch_being_compiled(rng, monkeypatch):
    dev = kdml.Device()
    rep = Backend.prepare(_model(), kdml_device=dev)
    _with_siblings(rep)
    release = threading.Event()
    prepare_many = pipelines.Programs.prepare_many

    def held(self, plans, threads):
        if threading.current_thread().name == "kdml-pipelines":
            assert release.wait(30)
        return prepare_many(self, plans, threads)

    monkeypatch.setattr(pipelines.Programs, "prepare_many", held)
    try:
        rep.run({"x": rng.standard_normal((1, 3, 8)).astype(np.float32)})
        threading.Timer(0.3, release.set).start()
        t0 = time.perf_counter()
        dev.close()  # waits for the held batch, then destroys the device
        assert release.is_set() and time.perf_counter() - t0 >= 0.2
    finally:
        release.set()
        dev.close()
    with_new = kdml.Device()  # Vulkan is still usable
    np.testing.assert_array_equal(kdml.add(np.ones(3, np.float32), 1.0, device=with_new).numpy(), [2, 2, 2])
    with_new.close()


def test_a_process_that_exits_while_siblings_compile_exits_cleanly(tmp_path):
    script = f"""
import dataclasses, sys, threading, time
sys.path.insert(0, {os.path.join(ROOT, 'tests')!r})
import numpy as np
from test_background_pipelines import _model, _with_siblings
from kompute_dml.onnx_backend import Backend
from kompute_dml.runtime import pipelines
prepare_many = pipelines.Programs.prepare_many
def slow(self, plans, threads):  # still compiling when the interpreter exits
    if threading.current_thread().name == "kdml-pipelines":
        time.sleep(0.5)
    return prepare_many(self, plans, threads)
pipelines.Programs.prepare_many = slow
rep = Backend.prepare(_model(), "CPU")
_with_siblings(rep)
rep.run({{"x": np.ones((1, 3, 8), np.float32)}})
assert rep.device.engine.programs._later is not None
print("ran", flush=True)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])})
    assert done.returncode == 0, done.stderr[-2000:]
    assert "ran" in done.stdout


def test_the_plans_own_pipelines_are_made_before_its_siblings_start(rng, monkeypatch):
    """On a fresh device with the siblings on (the GPUs' policy), a plan makes its own pipelines
    (those its flushes left: DevicePolicy.plan_flush_compiling) on the calling thread before the
    siblings' background batch starts, so that batch's compiles do not take the cores the first
    run's compiles need: the background batches hold none of the plan's pipelines (variant and
    specialization), only other specializations."""
    # no pipelines of earlier processes made at prepare (program_record.py, the GPUs' policy): that
    # batch may make the plan's own pipelines first on the background thread
    monkeypatch.setattr(pipelines.Programs, "warm", lambda self, threads: 0)
    dev = kdml.Device()
    try:
        rep = Backend.prepare(_model(), kdml_device=dev)
        _with_siblings(rep, monkeypatch)
        events: list[tuple[str, set[str]]] = []
        prepare_many = pipelines.Programs.prepare_many

        def logged(self, plans, threads):
            todo = {(p.variant, p.spec) for p in plans if not self.has(p)}
            if todo:
                events.append((threading.current_thread().name, todo))
            return prepare_many(self, plans, threads)

        monkeypatch.setattr(pipelines.Programs, "prepare_many", logged)
        x = rng.standard_normal((2, 5, 8)).astype(np.float32)
        (y,) = rep.run({"x": x})
        dev.engine.programs.wait()
        np.testing.assert_array_equal(y, x.transpose(0, 2, 1).reshape(2, -1))
        (plan,) = [p for p in rep.state.plans.values() if p is not None]
        own = {(p.variant, p.spec) for plans, _b in plan.program.work for p in plans
               if isinstance(p, pipelines.DispatchPlan)}
        first, background = events[0], [e for e in events if e[0] == "kdml-pipelines"]
        assert first[0] == threading.current_thread().name and own <= first[1]
        assert background and not (own & set().union(*(e[1] for e in background)))
    finally:
        dev.close()


def test_the_siblings_start_after_the_plans_first_run(rng, monkeypatch):
    """The siblings' background batch is queued once the plan's first run has waited for the
    device, not while it is made: on the H100 a run submitted while the driver compiled a sibling
    (BERT float16's first run behind mvn_skip_f16_gen, 2.2 s) waited for that compile. Later runs of
    the plan queue nothing more."""
    from kompute_dml.device.recording import RecordedProgram

    rep = Backend.prepare(_model(), "CPU")
    _with_siblings(rep, monkeypatch)
    order: list[str] = []
    run, later = RecordedProgram.run, pipelines.Programs.prepare_later

    def program_run(self, *a, **k):
        out = run(self, *a, **k)
        order.append("run")
        return out

    def queued(self, plans, threads):
        order.append("siblings")
        return later(self, plans, threads)

    monkeypatch.setattr(RecordedProgram, "run", program_run)
    monkeypatch.setattr(pipelines.Programs, "prepare_later", queued)
    x = rng.standard_normal((2, 5, 8)).astype(np.float32)
    for _ in range(3):
        (y,) = rep.run({"x": x})
        np.testing.assert_array_equal(y, x.transpose(0, 2, 1).reshape(2, -1))
    rep.device.engine.programs.wait()
    (plan,) = [p for p in rep.state.plans.values() if p is not None]
    assert order[:3] == ["run", "siblings", "run"] and order.count("siblings") == 1, order
    assert plan.siblings_prepared > 0


def test_a_pipeline_compiles_with_the_gil_released():
    """Creating one pipeline (Programs.prepare_many of one plan, as the background batch's last
    compile often is, and Programs.program) lets other Python threads run meanwhile: a probe thread
    is never held for a compile's time. Before, one pipeline went through kdml_prepare_program,
    which holds the GIL: on the H100 a run waited 2.3 s behind a sibling's compile."""
    from kompute_dml.ops.contract.check import reflect
    from kompute_dml.ops.spec import family_of

    dev = kdml.Device()
    try:
        progs = dev.engine.programs
        plans = []
        for variant in ("mhac16x_d64k16", "mhac16x_d128k32"):  # slow to compile (0.3 s on lavapipe)
            fam, spirv = family_of(variant), progs.spirv(variant)
            plans.append(pipelines.DispatchPlan(variant=variant, bindings=tuple(range(reflect(spirv).bindings)),
                                                push=(0,) * fam.push.words, groups=(1, 1, 1), writes=()))
        for make in (lambda p: progs.prepare_many([p], 1), progs.program):
            plan = plans.pop()
            assert not progs.has(plan)
            stop, longest, ready = threading.Event(), [0.0], threading.Event()

            def probe(stop=stop, longest=longest, ready=ready):
                last = time.perf_counter()
                ready.set()
                while not stop.is_set():
                    now = time.perf_counter()
                    longest[0], last = max(longest[0], now - last), now

            t = threading.Thread(target=probe)
            t.start()
            ready.wait()
            t0 = time.perf_counter()
            make(plan)
            took = time.perf_counter() - t0
            stop.set()
            t.join()
            assert progs.has(plan)
            # the probe turns every switch interval (5 ms) at least; a held GIL stops it for the compile
            assert longest[0] < max(0.05, took / 4), (took, longest[0])
    finally:
        dev.close()
