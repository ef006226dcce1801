"""The convolutional networks' families of the contract beside convolution and pooling:
shaders/resample.comp (ops/resample.py), shaders/lrn.comp (ops/local_response_normalization.py),
both re-exported by kompute_dml/ops/contract/__init__.py, and shaders/fold.comp (ops/fold.py, which
reads `contract.vision.FOLD`: the package finds every module's families, no re-export needed).
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
# ---- FOLD (ops/fold.py, shaders/fold.comp): an output element per invocation, summing the window
# positions that land on it; offsets in elements, the element count, C, the window's size K, the
# input's strides (batch, row, block), the output's (batch, channel, 3 spatial), and per spatial axis
# (leading axes padded to 3: size 1, window 1, stride 1, dilation 1, padding 0, 1 block) the output's
# size, the window, stride, dilation, start padding and blocks. A variant per type.
FOLD_PUSH = block("x_off", "y_off", "total", "c", "k", "xs[3]", "ys[5]", "osz[3]", "win[3]", "stride[3]", "dil[3]",
                  "pad[3]", "blk[3]")
FOLD = family("fold", "fold.comp", "fold_{t}", FOLD_PUSH, _L256, t=("f32", "f16"), defines=lambda t: {"F16": int(t == "f16")})
