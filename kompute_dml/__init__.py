"""kompute_dml: DirectML operator semantics as Vulkan compute shaders, through Kompute."""

from __future__ import annotations

from .device import Device, list_devices
from .dtypes import DataType, FeatureLevel
from .errors import DeviceError, DMLError, InvalidArgumentError, OutOfMemoryError, UnsupportedError
from .functional import (
    copy,
    default_device,
    diagonal_matrix,
    diagonal_matrix1,
    eye_like,
    identity,
    tril,
    triu,
)
from .functional_activation import gelu, softmax
from .functional_cast import cast
from .functional_dequantize import dequantize_linear
from .functional_elementwise import add, div, equal, greater_equal, isnan, logical_and, mul, sub, where
from .functional_gather import gather, gather_elements
from .functional_gemm import gemm, matmul
from .functional_join import join, onnx_slice, slice1
from .functional_matmul import matmul_integer_to_float
from .functional_normalization import layer_norm, mean_variance_normalization, skip_layer_norm
from .functional_quantize import dynamic_quantize_linear
from .memory import Buffer, Tensor
from .ops import (
    ActivationIdentityDesc,
    CastDesc,
    CopyDesc,
    DiagonalMatrix1Desc,
    DiagonalMatrixDesc,
    MatrixMultiplyIntegerToFloatDesc,
)
from .ops.activation import ActivationGeluDesc, ActivationSoftmax1Desc
from .ops.dequantize import ElementWiseDequantizeLinearDesc
from .ops.dynamic_quantize import DynamicQuantizeLinearDesc
from .ops.elementwise import (
    ElementWiseAdd1Desc,
    ElementWiseAddDesc,
    ElementWiseDivideDesc,
    ElementWiseIfDesc,
    ElementWiseIsNanDesc,
    ElementWiseLogicalAndDesc,
    ElementWiseLogicalEqualsDesc,
    ElementWiseLogicalGreaterThanOrEqualDesc,
    ElementWiseMultiplyDesc,
    ElementWiseSubtractDesc,
)
from .ops.gather import GatherDesc, GatherElementsDesc
from .ops.gemm import GemmDesc, MatrixTransform
from .ops.join import JoinDesc, Slice1Desc
from .ops.mean_variance_normalization import MeanVarianceNormalization1Desc
from .recording import Recording
from .tensor_desc import TensorDesc, calc_buffer_tensor_size
from .views import getitem as _getitem  # noqa: F401  (registers Tensor.__getitem__)

__version__ = "0.1.0"

__all__ = [
    "ActivationIdentityDesc",
    "Buffer",
    "CopyDesc",
    "DMLError",
    "DataType",
    "Device",
    "DeviceError",
    "DiagonalMatrix1Desc",
    "DiagonalMatrixDesc",
    "FeatureLevel",
    "InvalidArgumentError",
    "MatrixMultiplyIntegerToFloatDesc",
    "OutOfMemoryError",
    "Recording",
    "Tensor",
    "TensorDesc",
    "UnsupportedError",
    "__version__",
    "calc_buffer_tensor_size",
    "copy",
    "default_device",
    "diagonal_matrix",
    "diagonal_matrix1",
    "eye_like",
    "identity",
    "list_devices",
    "matmul_integer_to_float",
    "tril",
    "triu",
]
# element-wise operators (ops/elementwise.py) and their helpers (functional_elementwise.py)
__all__ += [
    "ElementWiseAdd1Desc",
    "ElementWiseAddDesc",
    "ElementWiseDivideDesc",
    "ElementWiseIfDesc",
    "ElementWiseIsNanDesc",
    "ElementWiseLogicalAndDesc",
    "ElementWiseLogicalEqualsDesc",
    "ElementWiseLogicalGreaterThanOrEqualDesc",
    "ElementWiseMultiplyDesc",
    "ElementWiseSubtractDesc",
    "add",
    "div",
    "equal",
    "greater_equal",
    "isnan",
    "logical_and",
    "mul",
    "sub",
    "where",
]
# CAST (ops/cast.py) and its helper (functional_cast.py)
__all__ += ["CastDesc", "cast"]
# ELEMENT_WISE_DEQUANTIZE_LINEAR (ops/dequantize.py) and its helper (functional_dequantize.py)
__all__ += ["ElementWiseDequantizeLinearDesc", "dequantize_linear"]
# GATHER, GATHER_ELEMENTS (ops/gather.py) and their helpers (functional_gather.py)
__all__ += ["GatherDesc", "GatherElementsDesc", "gather", "gather_elements"]
# JOIN, SLICE1 (ops/join.py) and their helpers (functional_join.py)
__all__ += ["JoinDesc", "Slice1Desc", "join", "onnx_slice", "slice1"]
# ACTIVATION_GELU, ACTIVATION_SOFTMAX1 (ops/activation.py) and their helpers (functional_activation.py)
__all__ += ["ActivationGeluDesc", "ActivationSoftmax1Desc", "gelu", "softmax"]
# DYNAMIC_QUANTIZE_LINEAR (ops/dynamic_quantize.py) and its helper (functional_quantize.py)
__all__ += ["DynamicQuantizeLinearDesc", "dynamic_quantize_linear"]
# MEAN_VARIANCE_NORMALIZATION1 (ops/mean_variance_normalization.py) and its helpers (functional_normalization.py)
__all__ += ["MeanVarianceNormalization1Desc", "layer_norm", "mean_variance_normalization", "skip_layer_norm"]
# GEMM (ops/gemm.py) and its helpers (functional_gemm.py)
__all__ += ["GemmDesc", "MatrixTransform", "gemm", "matmul"]
