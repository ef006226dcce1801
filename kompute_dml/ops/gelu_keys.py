"""ACTIVATION_GELU's keys_output_tensor (kompute_dml's extension, ops/activation.py's
ActivationGeluDesc): the GELU of a FLOAT32 run of unit strides in one dispatch whose work groups
also write the order keys of their outputs' range with +0 (shaders/float_unary.comp KEYS), the
input_keys_tensor of a DYNAMIC_QUANTIZE_LINEAR of the output (docs/dynamic_quantize.md): an int8
transformer's GELU, then its quantized second feed-forward product."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from ..core.dtypes import DataType
from ..core.errors import UnsupportedError, invalid
from ..core.ints import cdiv
from ..core.layout import merge_dims
from ..core.registry import OperatorSupport
from ..core.tensor_desc import validate_desc
from . import contract
from .base import CompiledOperator
from .elementwise import CompiledElementWise
from .elementwise_plan import device_limits, plan_elementwise

if TYPE_CHECKING:
    from ..device.device import Device


def gelu_key_parts(count: int) -> int:
    """The pairs of keys ACTIVATION_GELU's keys_output_tensor holds for `count` elements: its work
    groups, 256 invocations of 4 elements each."""
    return cdiv(count, 1024)


def compile_gelu_keys(device: Device, desc: Any, fn: str, support: OperatorSupport) -> CompiledOperator:
    """ActivationGeluDesc with keys_output_tensor (checked by compile_gelu but for the keys): one
    gelu_keys dispatch of GELU form `fn` (contract.elementwise.GELU_KEYS)."""
    x, y, q = desc.input_tensor, desc.output_tensor, desc.keys_output_tensor
    assert q is not None
    validate_desc(q, "keys_output_tensor", output=True)
    if q.data_type != DataType.UINT32:
        raise invalid("keys_output_tensor.data_type", f"must be UINT32, got {q.data_type.name}")
    parts = gelu_key_parts(x.element_count)
    if q.sizes != (parts, 2) or q.effective_strides != (2, 1):
        raise invalid("keys_output_tensor.sizes", f"must be packed ({parts}, 2): a pair of keys per work group, got "
                                                  f"sizes {q.sizes} strides {q.effective_strides}")
    family = contract.elementwise.GELU_KEYS
    variant = family.name(fn=fn)
    plans = plan_elementwise(family, variant, (x, y), **device_limits(device), vector=variant)
    sizes, strides = merge_dims(x.sizes, x.effective_strides, y.effective_strides)
    one_run = len(sizes) == 1 and (sizes[0] == 1 or all(st == [1] for st in strides))
    if x.data_type != DataType.FLOAT32 or len(plans) != 1 or not one_run:
        raise UnsupportedError("keys_output_tensor: ACTIVATION_GELU writes keys for FLOAT32 input and output of one "
                               "run of unit strides, in one dispatch")
    plan = dataclasses.replace(plans[0], bindings=(*plans[0].bindings, 2), writes=(*plans[0].writes, 2),
                               offset_slots=(*plans[0].offset_slots, *family.slots(b_off=(2, 4))))
    return CompiledElementWise(device, desc, support, support.inputs, (*support.outputs, "keys_output_tensor"), [plan])
