"""The fill and padding families of the contract (kompute_dml/ops/contract/__init__.py re-exports
them): shaders/fill.comp (ops/fill.py) and shaders/pad.comp (ops/padding.py, ops/tile.py).
Imports nothing from kompute_dml (the build loads the contract package by path)."""

from __future__ import annotations

from .core import block, family

_L256 = (256, 1, 1)

# ---- FILL_VALUE_CONSTANT / FILL_VALUE_SEQUENCE (ops/fill.py, shaders/fill.comp): the output's own
# sizes and strides (8 dimensions, leading 1s), the value (and delta) as (low, high) words; a
# constant variant per element width, a sequence variant per type (integers wrap alike)
FILL_PUSH = block("o_off", "v_lo", "v_hi", "d_lo", "d_hi", "size[8]", "str[8]")
FILL = family("fill", "fill.comp", "fill_b{bits}", FILL_PUSH, _L256, bits=(8, 16, 32, 64),
              defines=lambda bits: {"BITS": bits, "SEQ": 0, "T_KIND": 0})
_FILL_SEQ_TYPES = {"b8": (8, 0), "b16": (16, 0), "b32": (32, 0), "b64": (64, 0), "f32": (32, 1), "f16": (16, 2)}
FILL_SEQ = family("fill_seq", "fill.comp", "fill_seq_{t}", FILL_PUSH, _L256, t=tuple(_FILL_SEQ_TYPES),
                  defines=lambda t: {"BITS": _FILL_SEQ_TYPES[t][0], "SEQ": 1, "T_KIND": _FILL_SEQ_TYPES[t][1]})
# ---- PADDING / PADDING1 / TILE (ops/padding.py, ops/tile.py, shaders/pad.comp): up to PAD_RANK
# merged output dimensions in the shader (the host enumerates the rest), each with the input's
# size, the start padding and both strides; mode word (mode | 8: all constant), the constant's
# words; a variant per element width
PAD_RANK = 5
PAD_PUSH = block("i_off", "o_off", "i_base", "o_base", "mode", "v_lo", "v_hi", f"size[{PAD_RANK}]",
                 f"in_size[{PAD_RANK}]", f"start[{PAD_RANK}]", f"i_str[{PAD_RANK}]", f"o_str[{PAD_RANK}]")
PAD = family("pad", "pad.comp", "pad_b{bits}", PAD_PUSH, _L256, bits=(8, 16, 32, 64),
             defines=lambda bits: {"BITS": bits, "RANK": PAD_RANK})
