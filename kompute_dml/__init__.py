"""kompute_dml: DirectML operator semantics as Vulkan compute shaders, through Kompute.

The public objects are imported here by name; the operators' descriptor classes and functional
helpers (`kdml.CastDesc`, `kdml.cast`, ...) are not listed anywhere: they are what the operator
modules of kompute_dml/ops declare (`OperatorSpec`), found when this package is imported.
"""

from __future__ import annotations

from .device import Device, list_devices
from .dtypes import DataType, FeatureLevel
from .errors import DeviceError, DMLError, InvalidArgumentError, OutOfMemoryError, UnsupportedError
from .functional import default_device
from .memory import Buffer, Tensor
from .ops import operators as _operators
from .recording import Recording
from .tensor_desc import TensorDesc, calc_buffer_tensor_size
from .views import getitem as _getitem  # noqa: F401  (registers Tensor.__getitem__)

__version__ = "0.1.0"

globals().update(_operators().exports)

__all__ = [
    "Buffer", "DMLError", "DataType", "Device", "DeviceError", "FeatureLevel", "InvalidArgumentError",
    "OutOfMemoryError", "Recording", "Tensor", "TensorDesc", "UnsupportedError", "__version__",
    "calc_buffer_tensor_size", "default_device", "list_devices",
    *sorted(_operators().exports),
]
