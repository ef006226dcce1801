"""The families of kompute_dml's quantized composite operators' own shaders (the operators read
`contract.quantized.<NAME>`): shaders/quantized_linear_pooling.comp (ops/quantized_linear_pooling.py).
Imports nothing from kompute_dml but .core (the build loads the contract package by path)."""

from __future__ import annotations

from .core import block, family

# ---- QUANTIZED_LINEAR_AVERAGE_POOLING (ops/quantized_linear_pooling.py,
# shaders/quantized_linear_pooling.comp): an output element per invocation, the exact integer sum of
# its window, then the float32 requantization; the six tensors' offsets (elements) and the output's
# element count here, the geometry (C, flags, sizes, strides, window, per-channel strides of the
# scales and zero points) in the operator's constant (binding 6). A variant per input and output
# type (INT8 / UINT8: the bytes' signedness).
QL_AVG_POOL_PUSH = block("x_off", "xs_off", "xz_off", "ys_off", "yz_off", "y_off", "total")
QL_AVG_POOL = family("ql_avg_pool", "quantized_linear_pooling.comp", "qlap_{i}_{o}", QL_AVG_POOL_PUSH, (256, 1, 1),
                     i=("i8", "u8"), o=("i8", "u8"),
                     defines=lambda i, o: {"X_SIGNED": int(i == "i8"), "Y_SIGNED": int(o == "i8")})
