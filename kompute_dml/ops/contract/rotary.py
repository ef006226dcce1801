"""ROTARY_EMBEDDING's family of the contract (kompute_dml/ops/contract/__init__.py re-exports it):
shaders/rotary.comp (ops/rotary_embedding.py). Imports nothing from kompute_dml (the build loads
the contract package by path)."""

from __future__ import annotations

from .core import block, family

# offsets (the runtime's, in elements of each tensor), the last dimension's half (hd), the element
# count, flags (bit 0: the sine's product is the sum's first operand), then per dimension (the
# sizes left-padded with ones to ROTARY_RANK) the size and the four tensors' strides
ROTARY_RANK = 4
ROTARY_PUSH = block("x_off", "c_off", "s_off", "y_off", "hd", "count", "flags", f"size[{ROTARY_RANK}]",
                    f"x_str[{ROTARY_RANK}]", f"c_str[{ROTARY_RANK}]", f"s_str[{ROTARY_RANK}]", f"y_str[{ROTARY_RANK}]")
ROTARY = family("rotary", "rotary.comp", "rotary_{t}", ROTARY_PUSH, (256, 1, 1), t=("f32", "f16"),
                defines=lambda t: {"F16": int(t == "f16"), "RANK": ROTARY_RANK})
