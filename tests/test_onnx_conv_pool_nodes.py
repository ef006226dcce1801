"""onnx's own node cases for Conv, ConvTranspose, MaxPool, AveragePool, the global pools and
BatchNormalization (issue 53; training mode and MaxPool's column-major Indices included), run
through the Backend one at a time: every node on the Vulkan device, no CPU node, no run-time
fallback."""

from __future__ import annotations

import pytest

pytest.importorskip("onnx")

from onnx_node_cases import node_case_tests

test_case_count, test_onnx_node_case_on_the_device = node_case_tests(
    r"^test_(basic_conv|conv_with|convtranspose|maxpool|averagepool|global(average|max)pool|batchnorm)\w*_cpu$",
    __name__, 64)
