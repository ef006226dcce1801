"""TOP_K1's family of the contract (kompute_dml/ops/contract/__init__.py re-exports it):
shaders/topk.comp (ops/top_k.py). Imports nothing from kompute_dml (the build loads the contract
package by path)."""

from __future__ import annotations

from .core import block, family

# offsets (the runtime's, in elements of each tensor) and bases (the host's, for outer dimensions
# beyond TOPK_RANK); rows, the axis length, K, the sorting width (a power of two, TOPK_TILE at most),
# tiles per row, candidates per row, flags (bit 0: the smallest K; bit 1: one tile, write the
# result), the first scratch row of this dispatch (host-enumerated dimensions take rows of their
# own); per merged outer dimension its size and the three tensors' strides; the axis' strides
TOPK_RANK = 3
TOPK_TILE = 1024  # shaders/topk.comp's TILE
TOPK_PUSH = block("x_off", "v_off", "i_off", "x_base", "v_base", "i_base", "rows", "len", "k", "tile", "ntiles", "cand",
                  "flags", "r_base", f"size[{TOPK_RANK}]", f"x_str[{TOPK_RANK}]", f"v_str[{TOPK_RANK}]", f"i_str[{TOPK_RANK}]",
                  "x_ax", "v_ax", "i_ax")
_TYPES = {"f32": (32, 2), "f16": (16, 2), "i8": (8, 1), "u8": (8, 0), "i16": (16, 1), "u16": (16, 0), "i32": (32, 1),
          "u32": (32, 0), "i64": (64, 1), "u64": (64, 0)}
TOPK = family("topk", "topk.comp", "topk_{mode}_{t}_i{ib}", TOPK_PUSH, (256, 1, 1), mode=("tile", "rank"),
              t=tuple(_TYPES), ib=(32, 64),
              defines=lambda mode, t, ib: {"MODE": int(mode == "rank"), "BITS": _TYPES[t][0], "KIND": _TYPES[t][1],
                                           "IBITS": ib, "RANK": TOPK_RANK})
