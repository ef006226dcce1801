"""onnx's own node test cases (onnx.backend.test, built in memory) run one at a time through
kompute_dml's Backend, with every BackendRep they prepare recorded, so a test can check where the
nodes ran: tests/test_onnx_logic.py, tests/test_onnx_fill_pad.py."""

from __future__ import annotations

import re
import unittest
import warnings
from typing import Any

from onnx.backend.test import BackendTest

from kompute_dml.onnx_backend import Backend


class Recording(Backend):
    """Backend that keeps every rep it prepares in `reps` (cleared by run_case)."""

    reps: list = []

    @classmethod
    def prepare(cls, model: Any, device: str = "CPU", **kwargs: Any) -> Any:  # type: ignore[override]
        rep = super().prepare(model, device, **kwargs)
        cls.reps.append(rep)
        return rep


def node_cases(pattern: str, module: str, skip: tuple[str, ...] = ()) -> tuple[Any, list[str]]:
    """onnx's node-model test case class and its test names that match `pattern` (none ending in
    `skip`), run through Recording."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        runner = BackendTest(Recording, module)
    runner.include(pattern)
    case = runner.test_cases["OnnxBackendNodeModelTest"]
    case.__test__ = False  # run one name at a time; not collected as a whole by pytest
    return case, sorted(n for n in dir(case) if re.match(pattern, n) and not (skip and n.endswith(skip)))


def run_case(case: Any, name: str) -> list[Any]:
    """Run one case (it must pass, not be skipped) and return the reps it prepared."""
    Recording.reps.clear()
    result = unittest.TestResult()
    case(name).run(result)
    assert not (result.errors or result.failures or result.skipped), (name, result.errors, result.failures)
    return list(Recording.reps)


def run_on_device(case: Any, name: str, host: bool = False) -> list[Any]:
    """run_case, then every node of every rep it prepared placed on Vulkan and run there (no
    run-time fallback); with `host`, shape arithmetic on the host too (an _expanded case's)."""
    reps = run_case(case, name)
    assert reps, name
    for rep in reps:
        where = {p.target for p in rep.placement}
        assert where == {"vulkan"} or (host and where == {"vulkan", "host"}), rep.summary()
        assert rep.last_run.runtime_fallbacks == 0, rep.last_run.events
    return reps


def one_node_model(node: Any, inputs: list[tuple[str, int, Any]], out_type: int, inits: Any = (),
                   opset: int = 17) -> Any:
    """A model of one node: its inputs (name, ONNX element type, shape), one output "y" of
    `out_type` (shape left to inference), IR version 8 (onnxruntime 1.31 reads it)."""
    from onnx import helper

    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, t, list(s)) for n, t, s in inputs],
                              [helper.make_tensor_value_info("y", out_type, None)], initializer=list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def node_case_tests(pattern: str, module: str, least: int) -> tuple[Any, Any]:
    """The two tests of a module's onnx node cases: the count (at least `least`) and each case
    on the device (_expanded cases with their shape arithmetic on the host)."""
    import pytest

    case, names = node_cases(pattern, module)

    def test_case_count() -> None:
        assert len(names) >= least, names

    @pytest.mark.parametrize("name", names)
    def test_onnx_node_case_on_the_device(name: str) -> None:
        run_on_device(case, name, host="_expanded" in name)

    return test_case_count, test_onnx_node_case_on_the_device
