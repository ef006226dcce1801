"""The device's Vulkan pipeline cache, kept on disk between processes.

Every pipeline of a device is created through one VkPipelineCache (kp patch level 8); kp
writes its data to the file named here when the device is destroyed (kp patch level 9:
`Manager.kdml_cache_file`; at Device.close or from kp's exit callback alike, atomically through
a temporary file), and a later process opening the same device merges it in, so that process
compiles nothing it has seen. The file is named by the driver's
pipelineCacheUUID, vendor, device and driver version (a driver update starts a new file),
in `$KDML_CACHE_DIR` or else `$XDG_CACHE_HOME/kompute_dml` (`~/.cache/kompute_dml`);
`KDML_CACHE_DIR=off` (or an empty value) turns it off. A file a driver does not accept is
not loaded (its header names another device or driver, or it is damaged); one that cannot be
read or written is skipped, never an error.
"""

from __future__ import annotations

import contextlib
import os
import struct
from pathlib import Path
from typing import Any

CACHE_ENV = "KDML_CACHE_DIR"
_OFF = {"", "0", "off", "none", "false"}


def cache_dir() -> Path | None:
    """Where pipeline caches live (None: turned off)."""
    value = os.environ.get(CACHE_ENV)
    if value is not None:
        return None if value.strip().lower() in _OFF else Path(value).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kompute_dml"


def _matches(data: bytes, key: str) -> bool:
    """Whether `data` starts with a VkPipelineCacheHeaderVersionOne of this device (header
    size, version 1, vendor, device, pipelineCacheUUID): another driver's or a damaged file
    is not handed to the driver at all."""
    if len(data) < 32:
        return False
    size, version, vendor, device = struct.unpack_from("<4I", data)
    uuid = data[16:32].hex()
    parts = key.split("-")
    return (size >= 32 and version == 1 and len(parts) >= 3 and parts[0] == uuid
            and int(parts[1], 16) == vendor and int(parts[2], 16) == device)


class DiskPipelineCache:
    """One device's cache file: loaded once at open, written by kp when the device goes."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.loaded_bytes = 0  # bytes of cache data the driver accepted at open

    @classmethod
    def for_manager(cls, manager: Any) -> DiskPipelineCache:
        folder = cache_dir()
        if folder is None:
            return cls(None)
        cache = cls(folder / f"pipelines-{manager.kdml_pipeline_cache_key()}.bin")
        cache.load(manager)
        with contextlib.suppress(OSError):
            cache.path.parent.mkdir(parents=True, exist_ok=True)  # kp writes the file, not the folder
        manager.kdml_cache_file(str(cache.path))
        return cache

    def load(self, manager: Any) -> None:
        if self.path is None:
            return
        try:
            data = self.path.read_bytes()
        except OSError:
            return
        if _matches(data, manager.kdml_pipeline_cache_key()) and manager.kdml_load_pipeline_cache(data):
            self.loaded_bytes = len(data)
