"""DirectML's ELEMENT_WISE_QUANTIZE_LINEAR (DML_ELEMENT_WISE_QUANTIZE_LINEAR_OPERATOR_DESC):
Output = clamp(round(Input / Scale) + ZeroPoint, Min, Max), Min / Max the output type's range.

The dispatch plans are the element-wise operators' (ops/elementwise_plan.py: merged dimensions,
per-tensor strides, stride-0 broadcast of the scale and zero point); the shader is
shaders/quantize.comp: the division correctly rounded, the quotient rounded half to even, NaN to
Min (onnxruntime's CPU kernel's result), INT32 inputs converted to float32 (nearest even beyond
2^24): docs/quantize.md. ONNX QuantizeLinear runs on it (onnx_backend/handlers_math.py; per-tensor
and per-axis scales); helper kdml.quantize_linear.

Tensor support as the page gives it: 1_0: 4-D FLOAT32 input and scale, UINT8 zero point and output;
2_1: INT32 inputs and INT8 too; 3_0: 1 to 8 dimensions. Validation, in order: DML_BUFFER_TENSOR_DESC
rules and the table (InvalidArgumentError / UnsupportedError naming the field), then the page's
constraints (the four tensors' DimensionCount and Sizes equal, the output's DataType the zero
point's: InvalidArgumentError naming the field), then a non-overlapping output and 32-bit addressing.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.dtypes import DataType, FeatureLevel
from ..core.errors import invalid
from ..core.inputs import as_host_array, conform, is_python_data
from ..core.layout import check_no_overlap
from ..core.registry import F32, FL, D, LevelSupport, OperatorSupport, row
from ..core.tensor_desc import TensorDesc
from ..device.device import Device
from ..device.memory import Tensor
from ..functional import device_of
from ..functional.constants import device_constant
from ..functional.elementwise import _operands, _run
from . import contract
from .base import CompiledOperator, validate_tensors
from .elementwise import CompiledElementWise, check_same
from .elementwise_plan import check_addressable, plan_elementwise
from .onnx_types import FLOAT32_NUMPY, quantized_product
from .spec import OnnxOp, OperatorSpec

_Q8 = frozenset({D.INT8, D.UINT8})


def _q_row(level: FeatureLevel, dims: tuple[int, int], inputs: frozenset[DataType], q: frozenset[DataType]) -> LevelSupport:
    return row(level, ("input_tensor", "input", dims, inputs), ("scale_tensor", "input", dims, F32),
               ("zero_point_tensor", "input", dims, q), ("output_tensor", "output", dims, q))


ELEMENT_WISE_QUANTIZE_LINEAR = OperatorSupport("ELEMENT_WISE_QUANTIZE_LINEAR", 33, (
    _q_row(FL.FL_1_0, (4, 4), F32, frozenset({D.UINT8})),
    _q_row(FL.FL_2_1, (4, 4), F32 | {D.INT32}, _Q8),
    _q_row(FL.FL_3_0, (1, 8), F32 | {D.INT32}, _Q8),
))


@dataclass(frozen=True)
class ElementWiseQuantizeLinearDesc:
    """DML_ELEMENT_WISE_QUANTIZE_LINEAR_OPERATOR_DESC { InputTensor, ScaleTensor,
    ZeroPointTensor, OutputTensor }: f(input, scale, zero_point) = clamp(round(input / scale) +
    zero_point, Min, Max). The page's constraints: the four tensors share DimensionCount and Sizes
    (broadcast through 0 strides), Output and ZeroPoint share a DataType. kompute_dml's rules where
    the page is silent (docs/quantize.md): round is half to even after a correctly rounded
    division; a NaN quotient gives Min."""

    input_tensor: TensorDesc
    scale_tensor: TensorDesc
    zero_point_tensor: TensorDesc
    output_tensor: TensorDesc
    # kompute_dml extension (docs/quantize.md): the output is the quantized value dequantized with the
    # same scale and zero point, FLOAT32 (ELEMENT_WISE_DEQUANTIZE_LINEAR's bits): a QDQ graph's
    # QuantizeLinear -> DequantizeLinear in one dispatch; FLOAT32 input
    round_trip: bool = False


def compile_quantize_linear(device: Device, desc: ElementWiseQuantizeLinearDesc) -> CompiledOperator:
    support = ELEMENT_WISE_QUANTIZE_LINEAR
    x, s, z, y = desc.input_tensor, desc.scale_tensor, desc.zero_point_tensor, desc.output_tensor
    if desc.round_trip:  # the table's rules with an output of the quantized type, then the extension's
        if not isinstance(y, TensorDesc) or y.data_type != DataType.FLOAT32:
            raise invalid("output_tensor.data_type", "must be FLOAT32 with round_trip, got "
                                                     f"{getattr(y, 'data_type', type(y).__name__)}")
        q_type = z.data_type if isinstance(z, TensorDesc) else DataType.UINT8  # (a bad zero point: the table says)
        as_quantized = dataclasses.replace(desc, output_tensor=dataclasses.replace(y, data_type=q_type))
        validate_tensors(support, device.feature_level, as_quantized, support.fields, support.outputs)
        if x.data_type != DataType.FLOAT32:
            raise invalid("input_tensor.data_type", f"must be FLOAT32 with round_trip, got {x.data_type.name}")
    else:
        validate_tensors(support, device.feature_level, desc, support.fields, support.outputs)
    check_same(desc, "input_tensor", ("scale_tensor", "zero_point_tensor", "output_tensor"), data_type=False)
    if y.data_type != z.data_type and not desc.round_trip:
        raise invalid("output_tensor.data_type", f"must equal zero_point_tensor's ({z.data_type.name}), "
                                                 f"got {y.data_type.name}")
    check_no_overlap(y.sizes, y.effective_strides, "output_tensor")
    check_addressable(support.fields, (x, s, z, y))
    o = "i8" if z.data_type == DataType.INT8 else "u8"
    family = contract.QUANT_RT if desc.round_trip else contract.QUANT
    variant = (contract.QUANT_RT.name(o=o) if desc.round_trip else
               contract.QUANT.name(i="i32" if x.data_type == DataType.INT32 else "f32", o=o))
    plans = plan_elementwise(family, variant, (x, s, z, y), device.limits["max_compute_work_group_count"][0])
    return CompiledElementWise(device, desc, support, support.inputs, support.outputs, list(plans))


def quantize_linear(x: Any, scale: Any, zero_point: Any = None, *, round_trip: bool = False,
                    out: Tensor | None = None, device: Device | None = None) -> Tensor:
    """clamp(round(x / scale) + zero_point) (DML_ELEMENT_WISE_QUANTIZE_LINEAR): x, scale and
    zero_point broadcast with numpy's rules (stride-0 views: per tensor, per axis); the output
    takes the zero point's type (INT8 / UINT8). Python numbers and lists as the scale become
    FLOAT32; a zero point of None is a UINT8 0 (ONNX's default), a device constant.
    `round_trip` (kompute_dml's extension): that value dequantized again with the same scale and
    zero point, a FLOAT32 output (kdml.dequantize_linear's bits) in one dispatch."""
    if is_python_data(scale):
        scale = conform(as_host_array(scale, "scale", dml=False), np.dtype(np.float32), "scale", python=True)
    dev = device_of(x, scale, zero_point, out, device=device)
    if zero_point is None:
        zero_point = device_constant(dev, np.zeros(1, np.uint8))
    elif is_python_data(zero_point):
        zero_point = as_host_array(zero_point, "zero_point", dml=False)
    fields = ("x", "scale", "zero_point")
    dev, tensors = _operands((x, scale, zero_point), fields, dev, slice(0, 0))
    if round_trip:
        return _run(functools.partial(ElementWiseQuantizeLinearDesc, round_trip=True), tensors, fields, DataType.FLOAT32,
                    out, dev)
    return _run(ElementWiseQuantizeLinearDesc, tensors, fields, tensors[2].desc.data_type, out, dev)


def quantize_rule(t: Any) -> str:
    """ONNX QuantizeLinear on the operator: a float32 or int32 input, an int8 / uint8 zero point (or
    none), no blocked quantization."""
    dt = t.elem(0) if t.inputs else None
    if dt is not None and dt not in (np.float32, np.int32):
        return f"input type {dt} is not float32 / int32"
    zt = t.elem(2) if t.inputs > 2 else None
    if zt is not None and zt not in (np.int8, np.uint8):
        return f"zero point type {zt} is not int8 / uint8"
    return "blocked quantization (block_size)" if int(t.attr("block_size", 0) or 0) else ""


_T = TensorDesc(DataType.FLOAT32, (1, 2, 3, 4))
_U = TensorDesc(DataType.UINT8, (1, 2, 3, 4))
SPECS = (OperatorSpec(ElementWiseQuantizeLinearDesc, ELEMENT_WISE_QUANTIZE_LINEAR, compile_quantize_linear,
                      (contract.QUANT, contract.QUANT_RT),
                      helpers=("quantize_linear",),
                      # com.microsoft's QOperator nodes: their float steps, then this (onnx_backend/handlers_qlinear.py)
                      onnx=(OnnxOp("QuantizeLinear", "", "quantize_linear", check=quantize_rule),
                            *(OnnxOp(t, "com.microsoft", "quantize_linear", check=quantized_product(q, sc, FLOAT32_NUMPY))
                              for t, q, sc in (("QLinearAdd", (0, 3), 1), ("QLinearMul", (0, 3), 1), ("QLinearSigmoid", (0,), 1),
                                               ("QLinearLeakyRelu", (0,), 1), ("QLinearGlobalAveragePool", (0,), 1),
                                               ("QLinearAveragePool", (0,), 1),
                                               ("QLinearSoftmax", (0,), 1), ("QLinearConcat", (2,), 0)))),
                      example=lambda: ElementWiseQuantizeLinearDesc(_T, _T, _U, _U)),)
