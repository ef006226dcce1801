"""The quantized operators' families of the contract beyond DEQUANTIZE_LINEAR and the integer
products (kompute_dml/ops/contract/__init__.py re-exports them): shaders/quantize.comp
(ops/quantize.py), shaders/qconv.comp and qconv_tiled.comp (ops/quantized_convolution.py) and shaders/conv_integer.comp
(ops/convolution_integer.py). Imports nothing from
kompute_dml (the build loads the contract package by path)."""

from __future__ import annotations

from .core import block, family
from .elementwise import EW_IF_PUSH, EW_IF_RANK

_L256 = (256, 1, 1)

# ---- ELEMENT_WISE_QUANTIZE_LINEAR (ops/quantize.py, shaders/quantize.comp): IF's four-tensor
# element-wise block (c = input, a = scale, b = zero point, o = output) and plans; a variant per
# input type (FLOAT32, INT32) and output type (INT8, UINT8)
QUANT = family("quant", "quantize.comp", "q_{i}_{o}", EW_IF_PUSH, _L256, i=("f32", "i32"), o=("i8", "u8"),
               defines=lambda i, o: {"IN_INT": int(i == "i32"), "OUT_SIGNED": int(o == "i8"), "ROUND_TRIP": 0,
                                     "RANK": EW_IF_RANK})
# kompute_dml's round-trip extension (ElementWiseQuantizeLinearDesc.round_trip): the quantized value
# dequantized with the same scale and zero point, a FLOAT32 output (a QDQ graph's QuantizeLinear ->
# DequantizeLinear in one dispatch); FLOAT32 inputs, a variant per quantized type
QUANT_RT = family("quant_rt", "quantize.comp", "qrt_f32_{o}", EW_IF_PUSH, _L256, o=("i8", "u8"),
                  defines=lambda o: {"IN_INT": 0, "OUT_SIGNED": int(o == "i8"), "ROUND_TRIP": 1, "RANK": EW_IF_RANK})
# ---- QUANTIZED_LINEAR_CONVOLUTION (ops/quantized_convolution.py, shaders/qconv.comp): an output
# element per invocation; the ten tensors' offsets (elements), the geometry and the types' signedness
# in the operator's constant (binding 10)
QCONV_PUSH = block("x_off", "xs_off", "xz_off", "w_off", "ws_off", "wz_off", "b_off", "ys_off", "yz_off", "y_off")
QCONV = family("qconv", "qconv.comp", "qconv", QCONV_PUSH, _L256)
# shaders/qconv_tiled.comp: qconvt 64 x 64 tiles of the implicit GEMM, qconvs + qconvr split-K (the
# parts' int32 sums in the operator's scratch, binding 11, then added and requantized per output)
QCONV_TILED, QCONV_SPLIT, QCONV_REDUCE = (
    family(key, "qconv_tiled.comp", name, QCONV_PUSH, _L256, defines={"SPLIT": int(name == "qconvs"),
                                                                      "REDUCE": int(name == "qconvr")})
    for key, name in (("qconv_tiled", "qconvt"), ("qconv_split", "qconvs"), ("qconv_reduce", "qconvr")))

# ---- CONVOLUTION_INTEGER (ops/convolution_integer.py, shaders/conv_integer.comp): an output element
# per invocation; the tensors' offsets in elements (bytes for the 8-bit ones, words for the INT32
# output), the geometry in the operator's constant
CONV_INT_PUSH = block("x_off", "xz_off", "w_off", "wz_off", "y_off")
CONV_INT = family("conv_int", "conv_integer.comp", "conv_int", CONV_INT_PUSH, (256, 1, 1))
