"""Device selection for schedulers (runtime/selection.py): a device by index, by its Vulkan
UUID (VULKAN:<uuid>, CUDA's GPU-<uuid> form) or through KDML_DEVICE, honoured by the default
device, the ONNX backend's device strings and `kompute-dml info`; a spelling that names no
device is an InvalidArgumentError naming where it came from and the rule."""

from __future__ import annotations

import json

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper

import kompute_dml as kdml
import kompute_dml.functional as functional
from kompute_dml.cli import common
from kompute_dml.cli.main import main
from kompute_dml.onnx_backend import Backend

IAE = kdml.InvalidArgumentError
DEVICES = kdml.list_devices()
UUID = DEVICES[0]["uuid"]
WRONG = "0123456789abcdef0123456789abcdef" if UUID != "0123456789abcdef0123456789abcdef" else "f" * 32


def _dashed(u: str) -> str:
    """The 8-4-4-4-12 grouping CUDA and nvidia-smi print."""
    return "-".join((u[:8], u[8:12], u[12:16], u[16:20], u[20:]))


def _model():
    node = helper.make_node("Neg", ["x"], ["y"])
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", T.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", T.FLOAT, [2, 3])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


@pytest.fixture
def fresh_default(monkeypatch):
    """No default device made yet (KDML_DEVICE is read when it is made); a device made here is closed."""
    monkeypatch.setattr(functional, "_default", None)
    yield
    made = functional._default
    if made is not None:
        made.close()


def test_every_device_reports_its_uuid():
    for d in DEVICES:
        assert len(d["uuid"]) == 32 and int(d["uuid"], 16) >= 0, d
    dev = kdml.default_device()
    assert dev.uuid == DEVICES[dev.index]["uuid"]


@pytest.mark.parametrize("spelling", [
    0, "0", " 0 ", "VULKAN:0", "vulkan:0", f"VULKAN:{UUID}", f"vulkan:{UUID.upper()}", f"VULKAN:{_dashed(UUID)}",
    f"GPU-{_dashed(UUID)}", f"gpu-{UUID}",
])
def test_spellings_of_device_0(spelling):
    assert kdml.resolve_device(spelling) == 0


@pytest.mark.parametrize("spelling, rule", [
    (f"VULKAN:{WRONG}", f"no Vulkan device has UUID {WRONG}; this machine has {len(DEVICES)} "),
    (f"GPU-{_dashed(WRONG)}", f"no Vulkan device has UUID {WRONG}"),
    ("GPU-1234", "not a CUDA GPU UUID"),
    ("VULKAN:x", "not a device spelling"),
    ("MIG-0", "not a device spelling"),
    ("-1", "not a device spelling"),
    (str(len(DEVICES)), f"no Vulkan device {len(DEVICES)}; this machine has {len(DEVICES)} "),
    (1.0, "must be an integer index or a string"),
])
def test_names_of_no_device_are_refused_naming_the_field_and_the_rule(spelling, rule):
    with pytest.raises(IAE) as e:
        kdml.resolve_device(spelling, "device")
    assert str(e.value).startswith(f"device {spelling!r}: "), e.value
    assert rule in str(e.value)
    if "this machine has" in rule:  # the message lists what there is, UUIDs included
        assert f"VULKAN:{UUID}" in str(e.value)


def test_kdml_device_picks_the_default_device(monkeypatch, fresh_default):
    monkeypatch.setenv("KDML_DEVICE", f"GPU-{_dashed(UUID)}")
    dev = kdml.default_device()
    assert dev.index == 0 and dev.uuid == UUID
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(Backend.prepare(_model(), "CPU").run([x]).y, -x)  # "CPU": the default device


@pytest.mark.parametrize("value, rule", [(f"VULKAN:{WRONG}", "no Vulkan device has UUID"),
                                         ("one", "not a device spelling")])
def test_a_bad_kdml_device_is_refused_naming_the_variable(monkeypatch, fresh_default, value, rule):
    monkeypatch.setenv("KDML_DEVICE", value)
    with pytest.raises(IAE, match=f"^KDML_DEVICE {value!r}: .*{rule}"):
        kdml.default_device()
    with pytest.raises(IAE, match="^KDML_DEVICE"):
        Backend.prepare(_model(), "CPU")
    assert main(["info"]) == 2


def test_backend_takes_a_device_by_uuid():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    for device in (f"VULKAN:{UUID}", f"GPU-{_dashed(UUID)}"):
        assert Backend.supports_device(device)
        rep = Backend.prepare(_model(), device)
        assert rep.device.uuid == UUID
        np.testing.assert_array_equal(rep.run([x]).y, -x)
    assert not Backend.supports_device(f"VULKAN:{WRONG}")
    with pytest.raises(IAE, match=f"^device 'VULKAN:{WRONG}': no Vulkan device has UUID {WRONG}"):
        Backend.prepare(_model(), f"VULKAN:{WRONG}")


def test_info_prints_each_uuid_and_takes_one(capsys):
    assert main(["info", "--device", f"VULKAN:{UUID}"]) == 0
    out = capsys.readouterr().out
    assert all(d["uuid"] in out for d in DEVICES)
    assert main(["info", "--json"]) == 0
    assert [d["uuid"] for d in json.loads(capsys.readouterr().out)["devices"]] == [d["uuid"] for d in DEVICES]
    assert common.parse_device(f"GPU-{_dashed(UUID)}") == 0
    rc = main(["info", "--device", f"VULKAN:{WRONG}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1
    assert err[0].startswith(f"kompute-dml info: error: --device 'VULKAN:{WRONG}': no Vulkan device has UUID")
