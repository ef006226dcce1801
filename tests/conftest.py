"""Test session set-up: the Khronos validation layer (with synchronization validation) is
on for the whole session, and any message it logs fails the test that caused it."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

# Must happen before any Vulkan instance is created (i.e. before kompute_dml.Device).
_VAL_DIR = Path(tempfile.mkdtemp(prefix="kdml-validation-"))
VALIDATION_LOG = _VAL_DIR / "validation.log"
(_VAL_DIR / "vk_layer_settings.txt").write_text(
    "khronos_validation.debug_action = VK_DBG_LAYER_ACTION_LOG_MSG\n"
    "khronos_validation.report_flags = error,warn\n"
    f"khronos_validation.log_filename = {VALIDATION_LOG}\n"
    "khronos_validation.enables = VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT\n"
)
if os.environ.get("KDML_NO_VALIDATION") != "1":
    os.environ["VK_INSTANCE_LAYERS"] = "VK_LAYER_KHRONOS_validation"
    os.environ["VK_LAYER_SETTINGS_PATH"] = str(_VAL_DIR)
os.environ.setdefault("KDML_VALIDATION_LOG", str(VALIDATION_LOG))
# The suite's pipeline caches go to a folder of its own (runtime/disk_cache.py), not the user's.
os.environ.setdefault("KDML_CACHE_DIR", str(_VAL_DIR / "pipeline-cache"))

from hypothesis import HealthCheck, settings  # noqa: E402

settings.register_profile(
    "ci", max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
settings.register_profile(
    "fuzz", max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
settings.load_profile(os.environ.get("KDML_HYPOTHESIS_PROFILE", "ci"))

import kompute_dml as kdml  # noqa: E402


def _log_size() -> int:
    try:
        return VALIDATION_LOG.stat().st_size
    except FileNotFoundError:
        return 0


@pytest.fixture(autouse=True)
def _no_validation_messages():
    """Fail any test during which the validation layer logged something."""
    start = _log_size()
    yield
    end = _log_size()
    if end > start:
        with open(VALIDATION_LOG, "rb") as f:
            f.seek(start)
            text = f.read(end - start).decode(errors="replace")
        pytest.fail(f"Vulkan validation layer reported:\n{text[:4000]}", pytrace=False)


@pytest.fixture(scope="session")
def dev() -> kdml.Device:
    d = kdml.Device()
    yield d
    d.close()


@pytest.fixture(scope="session")
def dev_shader() -> kdml.Device:
    """A device that runs every operator as compute shaders (no transfer commands)."""
    d = kdml.Device(transfer_commands=False)
    yield d
    d.close()


@pytest.fixture(scope="session")
def dev_transfer() -> kdml.Device:
    """A device that runs dense copies and fills as transfer commands, whatever its policy."""
    d = kdml.Device(transfer_commands=True)
    yield d
    d.close()


@pytest.fixture(params=["transfer", "shader"])
def xdev(request, dev_transfer, dev_shader) -> kdml.Device:
    """Both execution paths, on every device: transfer-assisted and shaders only (the
    device policy picks one of them by default)."""
    return dev_transfer if request.param == "transfer" else dev_shader


@pytest.fixture
def rng(request) -> np.random.Generator:  # noqa: F821
    import numpy as np

    # Fresh data every run, reproducible from the printed seed when a test fails.
    seed = int.from_bytes(os.urandom(4), "little")
    request.node.user_properties.append(("seed", seed))
    return np.random.default_rng(seed)


@pytest.fixture
def plans_made(monkeypatch) -> list[int]:
    """Grows by one for every whole-graph plan (onnx_backend/device_graph.GraphPlan) made while the
    test runs: a decoder's steps that replay a plan make none."""
    from kompute_dml.onnx_backend import device_graph

    made: list[int] = []
    make = device_graph.GraphPlan.__init__
    monkeypatch.setattr(device_graph.GraphPlan, "__init__", lambda self, *a, **kw: made.append(1) or make(self, *a, **kw))
    return made


def pytest_runtest_makereport(item, call):
    if call.when == "call" and call.excinfo is not None:
        for k, v in item.user_properties:
            if k == "seed":
                item.add_report_section("call", "seed", f"rng seed = {v}")
