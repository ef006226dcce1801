"""The operators: every module's SPECS (kompute_dml/ops/spec.py) and what is derived from them."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..dtypes import FeatureLevel
from ..errors import invalid
from ..registry import support_matrix as _support_matrix
from . import (
    activation,
    cast,
    dequantize,
    diagonal,
    dynamic_quantize,
    elementwise,
    gather,
    gemm,
    identity,
    join,
    matmul_integer,
    mean_variance_normalization,
)
from .activation import ActivationGeluDesc, ActivationSoftmax1Desc
from .cast import CastDesc
from .dequantize import ElementWiseDequantizeLinearDesc
from .diagonal import DiagonalMatrix1Desc, DiagonalMatrixDesc
from .dynamic_quantize import DynamicQuantizeLinearDesc
from .elementwise import (
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
from .gather import GatherDesc, GatherElementsDesc
from .gemm import GemmDesc, MatrixTransform
from .identity import ActivationIdentityDesc, CopyDesc
from .join import JoinDesc, Slice1Desc
from .matmul_integer import MatrixMultiplyIntegerToFloatDesc
from .mean_variance_normalization import MeanVarianceNormalization1Desc
from .spec import OperatorSpec, check_plans, onnx_placement

if TYPE_CHECKING:
    from ..device import Device

SPECS: tuple[OperatorSpec, ...] = (*identity.SPECS, *diagonal.SPECS, *matmul_integer.SPECS, *elementwise.SPECS,
                                  *cast.SPECS, *dequantize.SPECS, *gather.SPECS, *activation.SPECS,
                                  *dynamic_quantize.SPECS, *mean_variance_normalization.SPECS, *gemm.SPECS,
                                  *join.SPECS)
BY_DESC: dict[type, OperatorSpec] = {s.desc_type: s for s in SPECS}
BY_NAME: dict[str, OperatorSpec] = {s.name: s for s in SPECS}
COMPILERS: dict[type, Callable[[Device, Any], Any]] = {s.desc_type: s.compile for s in SPECS}
# (ONNX op type, domain) -> (operator, kdml helper, lowest feature level): the backend's placement
ONNX_PLACEMENT = onnx_placement(SPECS)
if len(BY_DESC) != len(SPECS) or len(BY_NAME) != len(SPECS):
    raise ValueError("two operator specs share a descriptor class or a name")


def compile_operator(device: Device, op_desc: Any) -> Any:
    spec = BY_DESC.get(type(op_desc))
    if spec is None:
        raise invalid("op_desc", f"{type(op_desc).__name__} is not an operator descriptor of kompute_dml")
    compiled = spec.compile(device, op_desc)
    check_plans(spec, compiled.plans, device.capabilities)
    return compiled


def support_matrix(level: FeatureLevel) -> list[dict[str, str]]:
    """Every operator's support rows in force at `level` (`kompute-dml info`)."""
    return _support_matrix(level, [s.support for s in SPECS])


__all__ = [
    "BY_DESC", "BY_NAME", "COMPILERS", "ONNX_PLACEMENT", "SPECS", "ActivationIdentityDesc", "CopyDesc",
    "DiagonalMatrix1Desc", "DiagonalMatrixDesc", "MatrixMultiplyIntegerToFloatDesc", "OperatorSpec",
    "compile_operator", "support_matrix",
]
__all__ += [  # ops/elementwise.py
    "ElementWiseAdd1Desc", "ElementWiseAddDesc", "ElementWiseDivideDesc", "ElementWiseIfDesc", "ElementWiseIsNanDesc",
    "ElementWiseLogicalAndDesc", "ElementWiseLogicalEqualsDesc", "ElementWiseLogicalGreaterThanOrEqualDesc",
    "ElementWiseMultiplyDesc", "ElementWiseSubtractDesc",
]
__all__ += ["CastDesc"]  # ops/cast.py
__all__ += ["ElementWiseDequantizeLinearDesc"]  # ops/dequantize.py
__all__ += ["GatherDesc", "GatherElementsDesc"]  # ops/gather.py
__all__ += ["ActivationGeluDesc", "ActivationSoftmax1Desc"]  # ops/activation.py
__all__ += ["DynamicQuantizeLinearDesc"]  # ops/dynamic_quantize.py
__all__ += ["MeanVarianceNormalization1Desc"]  # ops/mean_variance_normalization.py
__all__ += ["GemmDesc", "MatrixTransform"]  # ops/gemm.py
__all__ += ["JoinDesc", "Slice1Desc"]  # ops/join.py
