"""The public objects: `Device` (device.py), `Buffer` and `Tensor` (memory.py), `Recording`
(recording.py), Tensor indexing (views.py)."""

from ..runtime.selection import resolve_device
from .device import Device, list_devices
from .memory import Buffer, Tensor
from .recording import RecordedProgram, Recording

__all__ = ["Buffer", "Device", "RecordedProgram", "Recording", "Tensor", "list_devices", "resolve_device"]
