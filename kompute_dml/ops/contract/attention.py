"""The attention families of the contract (kompute_dml/ops/contract/__init__.py re-exports them):
shaders/attention.comp (ops/attention.py, MULTIHEAD_ATTENTION and MULTIHEAD_ATTENTION1).
Imports nothing from kompute_dml (the build loads the contract package by path)."""

from __future__ import annotations

from .core import block, family

# One push block for every variant: the bindings' offsets (elements of the float tensors, 4-byte
# words of the INT32 / UINT32 mask and past sequence lengths), the problem's sizes (batch, query
# rows, new key rows, past rows, the present outputs' rows, query heads, query heads per key / value
# head, head sizes), scale and mask filter value, the mask type, flags (MHA_F_*), and the query
# blocks per (batch, head) (tiled) or the value-dimension chunks per query row (rows). Every
# tensor's strides sit in the operator's geometry constant (ops/attention_plan.py).
MHA_PUSH = block("q_off", "k_off", "v_off", "bias_off", "mask_off", "rb_off", "pk_off", "pv_off", "psl_off",
                 "o_off", "prk_off", "prv_off", "batch", "seq", "kv_seq", "past", "present", "heads", "group", "dqk",
                 "dv", "scale:f32", "mask_filter:f32", "mask_type", "flags", "blocks", "splits", "chunk")
MHA_F_BIAS = 1  # bias_tensor added to query, key and value
MHA_F_RB = 2  # relative position bias added to the scaled scores
MHA_F_PAST = 4  # past key / value precede the new keys
MHA_F_PSL = 8  # past sequence lengths per batch (MULTIHEAD_ATTENTION1); with it the attention is causal
MHA_F_CAUSAL = 16  # query i attends keys up to total - seq + i (kompute_dml's extension; implied by MHA_F_PSL)
MHA_F_PSL_UNSIGNED = 32  # the past sequence lengths are UINT32 (else INT32)
MHA_F_PRESENT_K = 64  # the present kernel writes the present key
MHA_F_PRESENT_V = 128  # ... and the present value
MHA_F_NEW_KV = 256  # new key / value rows exist (kv_seq > 0): else keys and values are the past alone

# The tiled kernel (GPUs): a work group of 128 invocations per (batch, head, block of BQ query
# rows), key / value tiles of BK rows in shared memory, online softmax; a variant per bound DMAX on
# both head sizes (shared memory: at most 28 KiB, so lavapipe's 32 KiB runs them too), and blocks of
# 4 rows for at most MHA_FEW_ROWS query rows (decoding: 32 invocations per row instead of 8)
MHA_TILES = {"d64": (16, 32, 64), "d128": (16, 32, 128), "d256": (8, 16, 256), "q4d64": (4, 32, 64),
             "q4d128": (4, 32, 128)}  # BQ, BK, DMAX
MHA_FEW_ROWS = 4
MHA_TILED = family("mha_tiled", "attention.comp", "mha_{t}_{tile}", MHA_PUSH, (128, 1, 1), t=("f32", "f16"),
                   tile=tuple(MHA_TILES), shape=("tile",),
                   defines=lambda t, tile: {"BITS": 32 if t == "f32" else 16, "KERNEL": 0, "BQ": MHA_TILES[tile][0],
                                            "BK": MHA_TILES[tile][1], "DMAX": MHA_TILES[tile][2]})
# Keys split over work groups (few work groups, long key sequences: decoding): the tiled kernel over
# one chunk of keys per work group, its rows' partial maximum, sum and accumulators to the operator's
# scratch (binding 13), then a combine dispatch of an invocation per output element pair
MHA_SPLIT = family("mha_split", "attention.comp", "mha_{t}_{tile}_split", MHA_PUSH, (128, 1, 1), t=("f32", "f16"),
                   tile=tuple(MHA_TILES), shape=("tile",),
                   defines=lambda t, tile: {"BITS": 32 if t == "f32" else 16, "KERNEL": 0, "SPLIT": 1,
                                            "BQ": MHA_TILES[tile][0], "BK": MHA_TILES[tile][1],
                                            "DMAX": MHA_TILES[tile][2]})
MHA_COMBINE = family("mha_combine", "attention.comp", "mha_{t}_combine", MHA_PUSH, (256, 1, 1), t=("f32", "f16"),
                     defines=lambda t: {"BITS": 32 if t == "f32" else 16, "KERNEL": 3})
# The row kernel (CPU devices, and head sizes past the tiles): an invocation per query row and
# chunk of MHA_ROW_CHUNK value dimensions, the keys in order with online softmax
MHA_ROW_CHUNK = 64
MHA_ROWS = family("mha_rows", "attention.comp", "mha_{t}_rows", MHA_PUSH, (64, 1, 1), t=("f32", "f16"),
                  defines=lambda t: {"BITS": 32 if t == "f32" else 16, "KERNEL": 1, "DC": MHA_ROW_CHUNK})
# The present outputs (past, then the new key / value rows with their bias, then zeros): an
# invocation per element pair
MHA_PRESENT = family("mha_present", "attention.comp", "mha_{t}_present", MHA_PUSH, (256, 1, 1), t=("f32", "f16"),
                     defines=lambda t: {"BITS": 32 if t == "f32" else 16, "KERNEL": 2})
