"""The integer convolution's family of the contract (kompute_dml/ops/contract/__init__.py
re-exports it): shaders/conv_integer.comp (ops/convolution_integer.py). Imports nothing from
kompute_dml (the build loads the contract package by path)."""

from __future__ import annotations

from .core import block, family

# ---- CONVOLUTION_INTEGER: an output element per invocation; the tensors' offsets in elements
# (bytes for the 8-bit ones, words for the INT32 output), the geometry in the operator's constant
CONV_INT_PUSH = block("x_off", "xz_off", "w_off", "wz_off", "y_off")
CONV_INT = family("conv_int", "conv_integer.comp", "conv_int", CONV_INT_PUSH, (256, 1, 1))
