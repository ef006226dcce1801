"""The FusedActivation of CONVOLUTION (ops/convolution.py) and ELEMENT_WISE_ADD1 (ops/elementwise.py):
which activation descriptors fuse, and the words their shaders read for them (the kind, then two
float32 parameters: conv_common.glsl's P_ACT, elementwise.comp's prm; shaders/fused_act.glsl).

Fused: None and ACTIVATION_IDENTITY (nothing applied), ACTIVATION_RELU, and ACTIVATION_LEAKY_RELU,
ACTIVATION_SIGMOID, ACTIVATION_HARD_SIGMOID, ACTIVATION_HARD_SWISH, ACTIVATION_TANH, ACTIVATION_ELU,
ACTIVATION_SWISH (SiLU, EfficientNet's) and ELEMENT_WISE_CLIP (kompute_dml's extension: DirectML fuses activations; CLIP without ScaleBias
gives ReLU6, Clip(0, 6)), each evaluated by the standalone operator's own GLSL function
(act_math.glsl / unary_math.glsl) on the value the output type holds, so the fused result is the
unfused chain's bits. Their FLOAT parameters are validated as the standalone operator validates
them (a number, not NaN; rounded to float32). Refused: other operators (UnsupportedError naming
`fused_activation`), an activation's tensors other than None, a CLIP with a ScaleBias and an
activation whose operator the device's feature level lacks (HARD_SWISH, SWISH before 6_2).
GEMM (ops/gemm.py) fuses ACTIVATION_GELU too, in both forms (kompute_dml's extension for GEMM:
the FFN's MatMul -> Add -> GELU of every transformer), from feature level 5_1 as the operator.
"""

from __future__ import annotations

from typing import Any

from ..core.errors import InvalidArgumentError, UnsupportedError, invalid
from . import activation_params, elementwise_unary
from .activation import ACTIVATION_GELU, GELU_APPROXIMATIONS, ActivationGeluDesc
from .activation_relu import ActivationReluDesc
from .identity import ActivationIdentityDesc

# shaders/conv_common.glsl ACT_*
ACT_NONE, ACT_RELU = 0, 1
ACT_GELU, ACT_GELU_TANH = 10, 11  # ACTIVATION_GELU's forms (fused_act.glsl's FA_GELU: GEMM's epilogue only)
# operator name (its UnaryOp row) -> kind
_KINDS = {"ACTIVATION_LEAKY_RELU": 2, "ELEMENT_WISE_CLIP": 3, "ACTIVATION_SIGMOID": 4, "ACTIVATION_HARD_SIGMOID": 5,
          "ACTIVATION_HARD_SWISH": 6, "ACTIVATION_TANH": 7, "ACTIVATION_ELU": 8,
          "ACTIVATION_SWISH": 9}
_ROWS = {op.name: op for op in (*elementwise_unary.OPS, *activation_params.OPS) if op.name in _KINDS}


def _class_of(name: str) -> type:
    cls_name = elementwise_unary._class_name(name)
    module = activation_params if hasattr(activation_params, cls_name) else elementwise_unary
    return getattr(module, cls_name)  # type: ignore[no-any-return]


FUSED: dict[type, str] = {_class_of(name): name for name in _KINDS}


def fused_words(device: Any, act: Any, operator: str = "CONVOLUTION", gelu: bool = False) -> list[int]:
    """[kind, parameter 0, parameter 1] of a descriptor's FusedActivation (float32 bit patterns);
    the errors of the module docstring (`operator`: the operator they name, CONVOLUTION,
    ELEMENT_WISE_ADD1 or GEMM; `gelu`: ACTIVATION_GELU fuses too)."""
    if act is None:
        return [ACT_NONE, 0, 0]
    if gelu and isinstance(act, ActivationGeluDesc):
        return _gelu_words(device, act)
    known = (ActivationReluDesc, ActivationIdentityDesc, *FUSED)
    if not isinstance(act, known):
        names = ", ".join(["ACTIVATION_RELU", "ACTIVATION_IDENTITY", *FUSED.values(), *(["ACTIVATION_GELU"] if gelu else [])])
        raise UnsupportedError(f"fused_activation: {operator} fuses {names} in kompute_dml, got {type(act).__name__}")
    if getattr(act, "input_tensor", None) is not None or getattr(act, "output_tensor", None) is not None:
        raise invalid("fused_activation", "a fused activation's tensors must be None")
    if isinstance(act, (ActivationReluDesc, ActivationIdentityDesc)):
        return [ACT_RELU if isinstance(act, ActivationReluDesc) else ACT_NONE, 0, 0]
    name = FUSED[type(act)]
    op = _ROWS[name]
    first = op.rows[0][0]
    if device.feature_level < first:
        raise UnsupportedError(f"fused_activation: {name} needs feature level {first.name}, the device's is "
                               f"{device.feature_level.name}")
    if getattr(act, "scale_bias", None) is not None:
        raise UnsupportedError(f"fused_activation: a fused {name} takes no scale_bias in kompute_dml")
    try:
        words = elementwise_unary._param_words(op, act)
    except InvalidArgumentError as e:  # the field lies inside the fused activation
        raise InvalidArgumentError(f"fused_activation.{e}") from None
    return [_KINDS[name], words[3], words[4]]


def _gelu_words(device: Any, act: ActivationGeluDesc) -> list[int]:
    if act.input_tensor is not None or act.output_tensor is not None:
        raise invalid("fused_activation", "a fused activation's tensors must be None")
    first = ACTIVATION_GELU.introduced
    if device.feature_level < first:
        raise UnsupportedError(f"fused_activation: ACTIVATION_GELU needs feature level {first.name}, the device's is "
                               f"{device.feature_level.name}")
    if act.approximate not in GELU_APPROXIMATIONS:
        raise invalid("fused_activation.approximate", f"must be one of {GELU_APPROXIMATIONS}, got {act.approximate!r}")
    return [ACT_GELU_TANH if act.approximate == "tanh" else ACT_GELU, 0, 0]
