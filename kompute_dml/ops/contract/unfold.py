"""UNFOLD's family of the shader contract (kompute_dml/ops/unfold.py, shaders/unfold.comp; the operator
reads `contract.unfold.UNFOLD`). Imports nothing from kompute_dml but .core (the build loads the
contract package by path)."""

from __future__ import annotations

from .core import block, family

# ---- UNFOLD (ops/unfold.py, shaders/unfold.comp): an output element per invocation, the input
# element its window position and block reach (0 in the padding), its bits copied; offsets in
# elements, the element count, C, the window's size K, the input's strides (batch, channel, 3 spatial),
# the output's (batch, row, block), and per spatial axis (leading axes padded to 3: size 1, window 1,
# stride 1, dilation 1, padding 0, 1 block) the input's size, the window, stride, dilation, start
# padding and blocks. A variant per element width (every type of that width: the bits are copied).
UNFOLD_PUSH = block("x_off", "y_off", "total", "c", "k", "xs[5]", "ys[3]", "isz[3]", "win[3]", "stride[3]", "dil[3]",
                    "pad[3]", "blk[3]")
UNFOLD = family("unfold", "unfold.comp", "unfold_b{bits}", UNFOLD_PUSH, (256, 1, 1), bits=(8, 16, 32),
                defines=lambda bits: {"ELEM_BITS": bits})
