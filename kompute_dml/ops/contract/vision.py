"""The convolutional networks' families of the contract beside convolution and pooling
(kompute_dml/ops/contract/__init__.py re-exports them): shaders/resample.comp (ops/resample.py).
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
