"""What every `kompute-dml` subcommand shares: `--device` (one syntax, one error) and the console.

Accepted: an index (`2`), `VULKAN:2` (any case), and `CPU` / `VULKAN` for the default device
(index 0: "CPU" is the ONNX backend's name for it). A device that this machine lacks, or text
that is none of these, is a `DeviceArgError` whose message is one line; the commands print it
to stderr and exit with status 2.
"""

from __future__ import annotations

from typing import Any

HELP = "Vulkan device: an index (0) or VULKAN:<index>; CPU = the default device (default: 0)"


class DeviceArgError(ValueError):
    """A --device value that names no device of this machine (one line)."""


def parse_device(text: Any) -> int:
    """The device index `text` names (see the module docstring); DeviceArgError if it
    names none, or none that this machine has."""
    raw = str(text).strip()
    kind, sep, idx = raw.upper().partition(":")
    if kind == "CPU" and idx in ("", "0"):
        index = 0
    elif kind == "VULKAN":
        index = _int(idx, raw) if idx else 0
    elif not sep:
        index = _int(kind, raw)
    else:
        raise DeviceArgError(f"--device {raw!r}: expected an index (0), VULKAN:<index> or CPU")
    from ..device.device import list_devices

    devices = list_devices()
    if not 0 <= index < len(devices):
        names = ", ".join(f"{d['index']}: {d['name']}" for d in devices) or "none"
        raise DeviceArgError(f"--device {raw!r}: no Vulkan device {index}; this machine has {len(devices)} "
                             f"({names}); `kompute-dml info` lists them")
    return index


def _int(text: str, raw: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise DeviceArgError(f"--device {raw!r}: expected an index (0), VULKAN:<index> or CPU") from None


# Wide enough for any table at its natural width: piped output is read by programs and
# people with wide windows, and rich would otherwise cut names to the 80 columns it assumes.
PIPED_WIDTH = 1000


def console(**kwargs: Any) -> Any:
    """A rich Console: the terminal's width on a terminal, PIPED_WIDTH when piped (tables
    print at their natural width, no name cut with an ellipsis)."""
    import sys

    from rich.console import Console

    file = kwargs.get("file", sys.stdout)
    return Console(**kwargs) if file.isatty() else Console(width=PIPED_WIDTH, **kwargs)


__all__ = ["HELP", "DeviceArgError", "console", "parse_device"]
