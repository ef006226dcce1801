"""onnx's own LayerNormalization node cases (each requests the optional Mean and InvStdDev; the
_expanded ones as ONNX's function body, their shape arithmetic on the host), every node on the
Vulkan device through the Backend (onnx_backend/handlers_nn.py)."""

from __future__ import annotations

import pytest

pytest.importorskip("onnx")

from onnx_node_cases import node_case_tests

test_case_count, test_onnx_node_case_on_the_device = node_case_tests(r"^test_layer_normalization\w*_cpu$", __name__, 57)
