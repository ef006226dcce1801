"""ELEMENT_WISE_MEAN's family (ops/elementwise_extra.py): shaders/elementwise.comp's OP_MEAN with the
element-wise block and plans (the same members as contract/elementwise.py's EW_PUSH, declared again
here: a contract module imports only .core). Imports nothing from kompute_dml (the build loads the
contract package by path)."""

from __future__ import annotations

from .core import block, family

_RANK = 6  # contract/elementwise.py's EW_RANK
_PUSH = block("a_off", "b_off", "o_off", "a_base", "b_base", "o_base", "count", f"size[{_RANK}]",
              f"a_str[{_RANK}]", f"b_str[{_RANK}]", f"o_str[{_RANK}]")
# element type -> (bits, kind: 0 unsigned, 1 signed, 2 float), as contract/elementwise.py's EW_TYPES
_TYPES = {"f32": (32, 2), "f16": (16, 2), "i32": (32, 1), "u32": (32, 0)}
OP_MEAN = 40  # shaders/elementwise.comp's OP_MEAN

EW_MEAN = family("ew_mean", "elementwise.comp", "ew_mean_{t}", _PUSH, (256, 1, 1), t=tuple(_TYPES),
                 defines=lambda t: {"OP": OP_MEAN, "IN_BITS": _TYPES[t][0], "IN_KIND": _TYPES[t][1],
                                    "OUT_BITS": _TYPES[t][0], "NIN": 2, "RANK": _RANK})
