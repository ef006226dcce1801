"""DML_ELEMENT_WISE_ADD1: A + B with DirectML's FusedActivation (docs/elementwise.md). Without an
activation (or with ACTIVATION_IDENTITY) the sum is ELEMENT_WISE_ADD's shader; with one of the
activations CONVOLUTION fuses (ops/conv_fused.py) it is elementwise.comp's ew_add1 variant, which
rounds the sum to the output type and applies the standalone activation's own function to it
(shaders/fused_act.glsl): the bits of ADD1 then the activation operator, in one dispatch. Its own
module: the activation descriptors it reads import ops/elementwise.py (which keeps the descriptor:
the element-wise helpers use it)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..core.registry import FL, FLOATS
from . import contract, onnx_types
from .base import CompiledOperator
from .conv_fused import ACT_NONE, fused_words
from .elementwise import ElementWiseAdd1Desc, _binary, _compile, _validate, type_code
from .spec import OnnxOp, OperatorSpec

if TYPE_CHECKING:
    from ..device.device import Device

ELEMENT_WISE_ADD1 = _binary("ELEMENT_WISE_ADD1", 89, ((FL.FL_2_0, (4, 5), FLOATS), (FL.FL_3_0, (1, 8), FLOATS)))


def compile_add1(device: Device, desc: ElementWiseAdd1Desc) -> CompiledOperator:
    support = ELEMENT_WISE_ADD1
    act = desc.fused_activation
    words = fused_words(device, act, support.name) if act is not None else [ACT_NONE]
    _validate(device, desc, support, ("a_tensor", "b_tensor", "output_tensor"))
    t = type_code(desc.a_tensor.data_type, False)
    if words[0] == ACT_NONE:  # (IDENTITY too: the plain sum)
        return _compile(device, desc, support, contract.EW_ADD, contract.EW_ADD.name(t=t), in_place=True)
    return _compile(device, desc, support, contract.EW_ADD1, contract.EW_ADD1.name(t=t), in_place=True, prm=words)


SPECS = (
    OperatorSpec(ElementWiseAdd1Desc, ELEMENT_WISE_ADD1, compile_add1, (contract.EW_ADD, contract.EW_ADD1),
                 helpers=("add",),  # com.microsoft BiasAdd: two additions (onnx_backend/handlers_transformer.py)
                 onnx=(OnnxOp("BiasAdd", "com.microsoft", "add", check=onnx_types.float_input),)),
)
