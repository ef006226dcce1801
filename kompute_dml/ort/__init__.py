"""kompute_dml as an onnxruntime plugin execution provider.

    import onnxruntime as ort, kompute_dml.ort as kort
    ort.register_execution_provider_library(kort.get_ep_name(), kort.get_library_path())
    opts = ort.SessionOptions()
    opts.add_provider_for_devices([d for d in ort.get_ep_devices() if d.ep_name == kort.get_ep_name()], {})
    sess = ort.InferenceSession("model.onnx", sess_options=opts)

The EP claims the nodes the ONNX backend places on the Vulkan device (its placement rules and
fusions), in sub-graphs as large as ORT allows; each sub-graph runs as one prepared kompute_dml
model (plugin.py). ORT's CPU EP runs the rest. Provider options: plugin.OPTIONS.
"""

from __future__ import annotations

import importlib.machinery
from pathlib import Path
from typing import Any

from . import plugin
from .plugin import DEVICE_MEMORY_EP_NAME, EP_NAME, OPTIONS

__all__ = ["DEVICE_MEMORY_EP_NAME", "EP_NAME", "OPTIONS", "ep_devices", "get_ep_name", "get_library_path", "register", "session_options"]

_HERE = Path(__file__).resolve().parent
_LIBRARY = "libkompute_dml_ep"


def get_ep_name(device_memory: bool = False) -> str:
    """The execution provider's name (OrtEpDevice.ep_name); `device_memory`: its variant whose
    inputs and outputs live in device memory (onnxruntime's IO binding keeps them on the GPU)."""
    return DEVICE_MEMORY_EP_NAME if device_memory else EP_NAME


def get_library_path() -> str:
    """The plugin EP shared library to pass to onnxruntime.register_execution_provider_library.
    FileNotFoundError, saying how to build it, where the package was installed without it."""
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = _HERE / f"{_LIBRARY}{suffix}"
        if path.is_file():
            return str(path)
    raise FileNotFoundError(
        f"the kompute_dml plugin EP library ({_LIBRARY}*.so) is not in {_HERE}: it is built with the package when "
        "onnxruntime's C API headers are available (scripts/ort-headers.sh fetches them; then "
        "`pip install --no-build-isolation -e .` or `make setup`)")


def register() -> None:
    """Register the library with onnxruntime under get_ep_name(), once per process (a second
    register_execution_provider_library under one name is an error in onnxruntime)."""
    import onnxruntime as ort

    if not any(d.ep_name == EP_NAME for d in ort.get_ep_devices()):
        ort.register_execution_provider_library(EP_NAME, get_library_path())


def ep_devices(device_memory: bool = False) -> list[Any]:
    """onnxruntime's OrtEpDevices of this EP (one per Vulkan device), registering first."""
    import onnxruntime as ort

    register()
    return [d for d in ort.get_ep_devices() if d.ep_name == get_ep_name(device_memory)]


def session_options(options: Any = None, device: int | None = None, device_memory: bool = False,
                    **provider_options: Any) -> Any:
    """SessionOptions (new, or `options`) with this EP (its device-memory variant with
    `device_memory`) added for one Vulkan device (the first offered when `device` is None) and
    the given provider options (OPTIONS)."""
    import onnxruntime as ort

    devices = ep_devices(device_memory)
    if device is not None:
        devices = [d for d in devices if d.ep_metadata.get(plugin.METADATA_DEVICE) == str(device)]
        if not devices:
            raise ValueError(f"device: no Vulkan device {device} among this EP's devices")
    opts = options if options is not None else ort.SessionOptions()
    opts.add_provider_for_devices(devices[:1], {k: str(v) for k, v in provider_options.items()})
    return opts
