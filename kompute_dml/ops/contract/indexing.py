"""The families of GATHER_ND / GATHER_ND1 (ops/gather_nd.py), SCATTER / SCATTER_ND (ops/scatter.py)
and ONE_HOT (ops/one_hot.py): one source, shaders/indexing.comp (the contract's __init__
re-exports them). Imports nothing from kompute_dml (the build loads the contract package by path).

Every dispatch reads its geometry from the operator's constant (ops/index_geometry.py: the tuple
table, then iteration spaces of 8 dimensions); the push block holds the tensors' element offsets,
the invocation count, the word where the dispatch's iteration space starts and four mode words."""

from __future__ import annotations

from .core import block, family

_L256 = (256, 1, 1)
_BITS = (8, 16, 32, 64)
# index element types: (bits, signed)
INDEX_TYPES = {"i32": (32, 1), "u32": (32, 0), "i64": (64, 1), "u64": (64, 0)}
# shaders/indexing.comp's modes
INDEX_MODES = {"prep": 0, "link": 1, "copy": 2, "gather": 3, "scatter": 4, "reduce": 5, "onehot": 6}
# the reductions of kompute_dml's scatter extension, on 32-bit elements: (op code, type code)
REDUCE_OPS = {"add": 0, "mul": 1, "max": 2, "min": 3}
REDUCE_TYPES = {"f32": 0, "i32": 1, "u32": 2}

INDEX_PUSH = block("a_off", "b_off", "u_off", "o_off", "count", "space", "p0", "p1", "p2", "p3")


def _d(mode: str, bits: int = 32, idx: str = "u32", op: str = "add", t: str = "u32") -> dict[str, int]:
    return {"MODE": INDEX_MODES[mode], "ELEM_BITS": bits, "IDX_BITS": INDEX_TYPES[idx][0],
            "IDX_SIGNED": INDEX_TYPES[idx][1], "RED_OP": REDUCE_OPS[op], "RED_T": REDUCE_TYPES[t]}


# the tuples' positions: each index tuple's element offset into the target (range-checked)
IDX_PREP = family("idx_prep", "indexing.comp", "idx_prep_{idx}", INDEX_PUSH, _L256, idx=tuple(INDEX_TYPES),
                  defines=lambda idx: _d("prep", idx=idx))
# duplicates: each tuple's next tuple of the same position and whether it is the first
IDX_LINK = family("idx_link", "indexing.comp", "idx_link_{w}", INDEX_PUSH, _L256, w=("u32",),
                  defines=lambda w: _d("link"))
# element moves: the input copied to the output, gathered, or scattered (last write of duplicates)
IDX_MOVE = family("idx_move", "indexing.comp", "idx_{mode}_b{bits}", INDEX_PUSH, _L256,
                  mode=("copy", "gather", "scatter"), bits=_BITS, defines=lambda mode, bits: _d(mode, bits))
# kompute_dml's scatter reductions: the first tuple of each position folds every duplicate in order
IDX_REDUCE = family("idx_reduce", "indexing.comp", "idx_reduce_{op}_{t}", INDEX_PUSH, _L256,
                    op=tuple(REDUCE_OPS), t=tuple(REDUCE_TYPES), defines=lambda op, t: _d("reduce", op=op, t=t))
ONE_HOT = family("one_hot", "indexing.comp", "one_hot_b{bits}_{idx}", INDEX_PUSH, _L256, bits=_BITS,
                 idx=tuple(INDEX_TYPES), defines=lambda bits, idx: _d("onehot", bits, idx))

INDEX_FAMILIES = (IDX_PREP, IDX_LINK, IDX_MOVE, IDX_REDUCE, ONE_HOT)
