"""Which Vulkan device a process uses: by index, by UUID, or from the environment.

Schedulers hand a process a GPU by index or by UUID (CUDA_VISIBLE_DEVICES=GPU-..., a Ray or
Kubernetes GPU id). A Vulkan physical device reports the same UUID as CUDA on NVIDIA
(VkPhysicalDeviceIDProperties.deviceUUID, vulkan_info.py), so one of these spellings names a
device wherever the work is placed:

- an index in the loader's order (`kompute-dml info` lists it): `1`, `"1"`, `"VULKAN:1"`;
- a UUID, 32 hex digits with or without dashes, in any case: `"VULKAN:<uuid>"`, or CUDA's and
  nvidia-smi's form `"GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"`.

`KDML_DEVICE` (any spelling above) picks the process-wide default device
(`kdml.default_device()`), the ONNX backend's "CPU" / "VULKAN" device and `kompute-dml`'s
`--device` default. A value that names no device of this machine is an InvalidArgumentError
naming where it came from (`KDML_DEVICE`, `device`, ...) and the rule.
"""

from __future__ import annotations

import os
import string
from typing import Any

from ..core.errors import invalid
from .vulkan_info import PhysicalDeviceInfo, physical_devices

ENV = "KDML_DEVICE"
RULE = ("an index (0), VULKAN:<index>, VULKAN:<uuid> or GPU-<uuid> "
        "(a device UUID: 32 hex digits, dashes allowed; `kompute-dml info` lists them)")


def uuid_of(text: str) -> str | None:
    """The UUID `text` spells, as 32 lower-case hex digits, else None."""
    digits = text.replace("-", "").lower()
    return digits if len(digits) == 32 and all(c in string.hexdigits for c in digits) else None


def _listing(devices: tuple[PhysicalDeviceInfo, ...]) -> str:
    shown = "; ".join(f"{d.index}: {d.name} VULKAN:{d.uuid or '?'}" for d in devices) or "none"
    return f"this machine has {len(devices)} ({shown})"


def resolve_device(spec: Any, field: str = "device") -> int:
    """The index of the Vulkan device `spec` names (module docstring); InvalidArgumentError
    naming `field` where it is no spelling of a device or names none this machine has."""
    devices = physical_devices()
    label = f"{field} {spec!r}"
    if isinstance(spec, int) and not isinstance(spec, bool):
        index: int | None = spec
        uuid = None
    elif isinstance(spec, str):
        raw = spec.strip()
        kind, sep, rest = raw.partition(":")
        if sep and kind.upper() == "VULKAN":
            raw = rest.strip()
        elif raw[:4].upper() == "GPU-":
            raw = raw[4:]
            if uuid_of(raw) is None:
                raise invalid(label, f"not a CUDA GPU UUID (GPU- and 32 hex digits); expected {RULE}")
        index = int(raw) if raw.isdigit() else None
        uuid = None if index is not None else uuid_of(raw)
        if index is None and uuid is None:
            raise invalid(label, f"not a device spelling; expected {RULE}")
    else:
        raise invalid(label, f"must be an integer index or a string, got {type(spec).__name__}; expected {RULE}")
    if uuid is not None:
        for d in devices:
            if d.uuid == uuid:
                return d.index
        raise invalid(label, f"no Vulkan device has UUID {uuid}; {_listing(devices)}")
    assert index is not None
    if not 0 <= index < len(devices):
        raise invalid(label, f"no Vulkan device {index}; {_listing(devices)}")
    return index


def env_device() -> int | None:
    """The device KDML_DEVICE names (None where it is unset or empty)."""
    value = os.environ.get(ENV, "").strip()
    return resolve_device(value, ENV) if value else None


def default_index() -> int:
    """KDML_DEVICE's device where it is set, else device 0."""
    index = env_device()
    return 0 if index is None else index


__all__ = ["ENV", "RULE", "default_index", "env_device", "resolve_device", "uuid_of"]
