"""onnx's own node cases for Conv, ConvTranspose, MaxPool, AveragePool, the global pools and
BatchNormalization (issue 53), run through the Backend one at a time: every node on the Vulkan
device (no CPU node, no run-time fallback), except the two cases whose outputs kompute_dml
leaves to the CPU by design, which must still pass there, for the reason the placement gives."""

from __future__ import annotations

import pytest

pytest.importorskip("onnx")

from onnx_node_cases import node_cases, run_case, run_on_device  # noqa: E402

CASES = r"^test_(basic_conv|conv_with|convtranspose|maxpool|averagepool|global(average|max)pool|batchnorm)\w*_cpu$"
ON_CPU = {  # case -> the placement's reason
    "test_batchnorm_example_training_mode_cpu": "training mode",
    "test_batchnorm_epsilon_training_mode_cpu": "training mode",
}
_CASE, NAMES = node_cases(CASES, __name__)


def test_case_count():
    assert len(NAMES) >= 64 and set(ON_CPU) <= set(NAMES), NAMES


@pytest.mark.parametrize("name", [n for n in NAMES if n not in ON_CPU])
def test_onnx_node_case_on_the_device(name):
    run_on_device(_CASE, name)


@pytest.mark.parametrize("name", sorted(ON_CPU))
def test_onnx_node_case_on_the_cpu_by_design(name):
    reps = run_case(_CASE, name)
    assert reps and all(ON_CPU[name] in rep.summary() for rep in reps), [rep.summary() for rep in reps]
