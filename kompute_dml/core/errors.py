"""Exception classes. Every public entry point raises only these (API.md, Errors)."""

from __future__ import annotations


class DMLError(RuntimeError):
    """Base class of every kompute_dml error."""


class InvalidArgumentError(DMLError, ValueError):
    """A descriptor or binding breaks a rule; the message names the field and the rule."""


class UnsupportedError(DMLError, NotImplementedError):
    """Operator, data type or dimension count not supported at the device's feature level."""


class OutOfMemoryError(DMLError, MemoryError):
    """Device (or staging) memory could not be allocated."""


class DeviceError(DMLError):
    """No Vulkan device, the device was lost, or the runtime is not installed correctly."""


def invalid(field: str, rule: str) -> InvalidArgumentError:
    """Build an InvalidArgumentError whose message always starts with the field name."""
    return InvalidArgumentError(f"{field}: {rule}")
