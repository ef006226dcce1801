"""The pipelines a device made are recorded beside its pipeline cache and made again in the
background when a later Device prepares a model (runtime/program_record.py, Programs.warm): its
first run then makes none. Entries whose SPIR-V changed since, and unreadable files, are skipped.
(The GPU policy prepares siblings and warms; these Devices take that policy on lavapipe.)"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper

import kompute_dml as kdml
from kompute_dml.onnx_backend import Backend
from kompute_dml.runtime import program_record


def _model():
    nodes = [helper.make_node("Add", ["x", "y"], ["s"]), helper.make_node("Relu", ["s"], ["r"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, T.FLOAT, [4, 8]) for n in "xy"],
                              [helper.make_tensor_value_info("r", T.FLOAT, [4, 8])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _device():
    dev = kdml.Device()
    dev.policy = dataclasses.replace(dev.policy, prepare_siblings=True, pipeline_threads=2)
    return dev


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KDML_CACHE_DIR", str(tmp_path))
    return tmp_path


def test_a_later_device_makes_the_recorded_pipelines_before_its_first_run(cache, rng):
    feeds = {n: rng.standard_normal((4, 8)).astype(np.float32) for n in "xy"}
    first = _device()
    rep = Backend.prepare(_model(), kdml_device=first)
    (want,) = rep.run(feeds)
    first.engine.programs.wait()  # (the siblings' batch, if any)
    made = {(k[0], tuple(k[1]), k[2], k[3]) for k in first.engine.programs.made}
    assert made
    first.close()  # writes the record (so does a background batch, and the exit of a process that prepared a model)
    (path,) = cache.glob("programs-*.json")
    recorded = json.loads(path.read_text())
    assert {(v, tuple(spec), push, b) for v, _sha, spec, push, b in recorded} == made

    second = _device()
    rep = Backend.prepare(_model(), kdml_device=second)
    second.engine.programs.wait()
    assert {(k[0], tuple(k[1]), k[2], k[3]) for k in second.engine.programs.made} == made  # before any run
    before = len(second.engine.programs.made)
    (got,) = rep.run(feeds)
    assert len(second.engine.programs.made) == before  # the first run made none
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(want, np.maximum(feeds["x"] + feeds["y"], 0))
    second.close()


def test_changed_spirv_and_damaged_files_are_skipped(cache):
    path = cache / "programs-x.json"
    entries = [["ew_add_f32", "not the built sha256", [], 32, 3], ["relu_f32", "abc", [], 32, 2]]
    path.write_text(json.dumps(entries))
    assert program_record.load(path, lambda v: "abc") == [program_record.RecordedPlan("relu_f32", (), (0,) * 32, (0, 1))]
    path.write_text("{ not json")
    assert program_record.load(path, lambda v: "abc") == []
    assert program_record.load(cache / "absent.json", lambda v: "abc") == []
    program_record.save(path, [("v", (np.int64(1),), 4, 2)], lambda v: "sha")  # over a damaged file
    assert json.loads(path.read_text()) == [["v", "sha", [1], 4, 2]]
    (cache / "a-file").write_text("")
    program_record.save(cache / "a-file" / "below.json", [("v", (1,), 4, 2)], lambda v: "sha")  # unwritable: nothing
    assert sorted(p.name for p in cache.iterdir()) == ["a-file", "programs-x.json"]
