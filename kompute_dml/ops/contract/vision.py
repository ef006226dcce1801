"""The convolutional networks' families of the contract beside convolution and pooling
(kompute_dml/ops/contract/__init__.py re-exports them): shaders/resample.comp (ops/resample.py),
shaders/lrn.comp (ops/local_response_normalization.py).
Imports nothing from kompute_dml (the build loads the contract package by path)."""

from __future__ import annotations

from .core import block, family

_L256 = (256, 1, 1)

# ---- RESAMPLE / RESAMPLE1 / RESAMPLE2 (ops/resample.py, shaders/resample.comp): an output element
# per invocation; offsets in elements, the geometry and each axis' table in the operator's constant.
# A variant per kind (nearest: one tap, bits copied; interp: LINEAR and kompute_dml's CUBIC) and type.
RESAMPLE_PUSH = block("x_off", "y_off")
RESAMPLE = family("resample", "resample.comp", "resample_{k}_{t}", RESAMPLE_PUSH, _L256, k=("nearest", "interp"),
                  t=("f32", "f16"), defines=lambda k, t: {"NEAREST": int(k == "nearest"), "F16": int(t == "f16")})
# ---- LOCAL_RESPONSE_NORMALIZATION (ops/local_response_normalization.py, shaders/lrn.comp): an
# output element per invocation; offsets in elements, the 4-D geometry, the region's reach below
# (lo) and above (hi) each index, CrossChannel, Alpha / LocalSize, Beta, Bias. A variant per type.
LRN_PUSH = block("x_off", "y_off", "total", "cross", "lo", "hi", "size[4]", "xs[4]", "ys[4]", "alpha:f32", "beta:f32",
                 "bias:f32")
LRN = family("lrn", "lrn.comp", "lrn_{t}", LRN_PUSH, _L256, t=("f32", "f16"), defines=lambda t: {"F16": int(t == "f16")})
