"""What every `kompute-dml` subcommand shares: `--device` (one syntax, one error) and the console.

Accepted: an index (`2`), `VULKAN:2` (any case), a device UUID (`VULKAN:<uuid>`, `GPU-<uuid>`:
runtime/selection.py), and `CPU` / `VULKAN` for the default device (KDML_DEVICE's, else 0: "CPU"
is the ONNX backend's name for it); no --device at all is the default device too. A device that this machine lacks, or text
that is none of these, is a `DeviceArgError` whose message is one line; the commands print it
to stderr and exit with status 2.
"""

from __future__ import annotations

from typing import Any

HELP = ("Vulkan device: an index (0), VULKAN:<index>, VULKAN:<uuid> or GPU-<uuid> (`kompute-dml info` lists the "
        "UUIDs); CPU = the default device (default: KDML_DEVICE's device, else 0)")


class DeviceArgError(ValueError):
    """A --device value that names no device of this machine (one line)."""


def parse_device(text: Any) -> int:
    """The device index `text` names (see the module docstring); DeviceArgError if it
    names none, or none that this machine has. None: KDML_DEVICE's device, else 0."""
    from ..core.errors import InvalidArgumentError
    from ..runtime.selection import default_index, resolve_device

    if text is None:
        try:
            return default_index()
        except InvalidArgumentError as e:
            raise DeviceArgError(str(e)) from None
    raw = str(text).strip()
    kind, sep, _ = raw.upper().partition(":")
    if raw.upper() in ("CPU", "CPU:0", "VULKAN"):
        try:
            return default_index()
        except InvalidArgumentError as e:
            raise DeviceArgError(f"--device {raw!r} (the default device): {e}") from None
    if not (kind == "VULKAN" or kind.startswith("GPU-") or (not sep and kind.isdigit())):
        raise DeviceArgError(f"--device {raw!r}: expected an index (0), VULKAN:<index>, VULKAN:<uuid>, GPU-<uuid> "
                             "or CPU")
    try:
        return resolve_device(raw, "--device")
    except InvalidArgumentError as e:
        raise DeviceArgError(str(e) if "kompute-dml info" in str(e) else f"{e}; `kompute-dml info` lists them") from None


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
