"""GEMM's tiled kernel's register block per product (ops/gemm.py plan_gemm, ops/attention_gemm.py): the
device policy's `gemm_tiles` rule and the measurements behind it."""

from __future__ import annotations

from ..core.ints import cdiv
from .gemm_split import SPLIT_FROM_K

# A 16 BLK x 16 BLK output tile per work group (contract.GEMM_BLOCKS), chosen by the policy's
# `gemm_tiles` (choose_block). GPUs ("parallel"): 128 x 128 (BLK 8) where K >= BLK8_MIN_K and
# there are BLK8_MIN_TILES of them, else the largest of 64 x 64 (BLK 4) and 32 x 32 of which a
# problem has at least BIG_TILES_MIN; M and N must exceed half the tile.
# CPU devices ("work"): the tile with the least padded work divided by its speed: on lavapipe
# (2 cores, llvmpipe 256-bit) the 64 x 64 tile computed 4.96-5.00 GFLOPS against 2.08-2.13 for
# 32 x 32 at 256^3 (FLOAT32 / FLOAT16), 2.18 / 0.86 at 96 x 200 x 130, 3.30 / 1.40 on 16 matrices
# of 128 x 32 x 128: CPU_B4_RATE.
BIG_TILES_MIN = 64
# 128 x 128 tiles only over long sums and for enough of them (two per multiprocessor of an H100):
# on the H100 (benchmarks/bench_gemm.py --blocks, at 72f5805) they beat 64 x 64 at 4096^3 (3,656
# us against 4,469), 2048^3, 8192 x 4096 x 1024, 4096 x 1024 x 4096 and 8192 x 2048 x 2048, and
# lost at K < 1,024 (Whisper's 12000 x 256 x 1024 240 against 222, its scores at K = 64 713
# against 437) and with fewer tiles (1024 x 4096 x 1024: 64 tiles, 464 against 304; 12000 x 1024
# x 256: 188 tiles).
BLK8_MIN_K, BLK8_MIN_TILES = 1024, 256
# FLOAT32 without a fused activation on GPUs: where 64 x 64 is chosen and there are RECT_MIN_TILES tiles of
# 128 x 64, an 8 x 4 block (gemm_block). H200 (`python -m benchmarks.gemm_steps --forms`, device call 276):
# Whisper's 12000 x 256 x 1024 217 -> 197 us, 12000 x 1024 x 256 220 -> 195, 1024 x 768 x 3072 167 -> 148,
# 1576 x 256 x 1024 46 -> 38; with fewer tiles it lost (1576 x 256 x 256 on 52: 17.4 -> 23.3). With GELU
# fused it lost in the models (call 278, encoder_profile: BERT's and ViT's FC1 155 / 151 us against 125 on
# 64 x 64), and the two-GEMM attention's kernels too (Whisper's 2,013 / 1,664 against 1,896 / 1,594). The
# same sums in the same order: the same bits. Not measured on narrow products (below RECT_MIN_N columns they
# keep 64 x 64) nor on convolutions' 1 x 1 layers (ops/conv_pointwise.py asks for square blocks).
RECT_MIN_TILES = 128
# Over K >= SPLIT_FROM_K from RECT_MIN_TILES_LONG_K tiles (H200, `python -m benchmarks.bench_gemm --blocks --only
# 1576x 1024x768x2304`, device call 296, us): on 156 tiles ViT-B's products at batch 8 lost to 64 x 64 (1576 x 3072 x
# 768 370.8 against 325.7, 286.0 in two parts: gemm_split.LONG_K; 1576 x 768 x 768 98.6 against 88.0), on 288 by 5 %
# (1024 x 768 x 2304 148.2 against 141.5); from 376 they won (Whisper's 12000 x 1024 x 256 above; 1024 x 768 x 3072
# on 384, 147.3 against 166.6; 1576 x 768 x 2304 on 468, 190.7 against 195.7). Shorter sums keep the 128-tile rule
# (1576 x 256 x 1024 on 208 above)
RECT_MIN_TILES_LONG_K = 300
RECT_MIN_N = 64  # the narrowest product measured (Whisper's attention context, N = 64): not below
CPU_B4_RATE = 2.4
# FLOAT32 products of few 64 x 64 tiles over K >= SPLIT_FROM_K are split (ops/gemm_split.py, into parts by the logical
# shape alone, whatever the block): there 64 x 64 beat 32 x 32 at the base size's batch 1 (H200, `python -m
# benchmarks.bench_gemm --blocks --only 128x 197x`, device call 296: 128 x 3072 x 768 64.8 -> 34.3 us, 197 x
# 3072 x 768 107.4 -> 66.4, 128 x 768 x 768 25.0 -> 20.3, 197 x 768 x 768 35.1 -> 24.9)


def choose_block(rule: str, m: int, n: int, nmat: int, k: int = 0) -> int:
    """BLK (outputs per invocation per side) for M x N outputs of `nmat` matrices over K (see BIG_TILES_MIN)."""
    if rule == "work":
        small = cdiv(m, 32) * cdiv(n, 32) * 32 * 32
        big = cdiv(m, 64) * cdiv(n, 64) * 64 * 64
        return 4 if big < small * CPU_B4_RATE else 2
    if k >= BLK8_MIN_K and cdiv(m, 128) * cdiv(n, 128) * nmat >= BLK8_MIN_TILES and min(m, n) > 64:
        return 8
    tiles64 = cdiv(m, 64) * cdiv(n, 64) * nmat
    return 4 if tiles64 >= BIG_TILES_MIN and min(m, n) > 32 else 2


def gemm_block(rule: str, float16: bool, square: bool, m: int, n: int, nmat: int, k: int = 0) -> str:
    """The tiled kernel's register block: choose_block's square one ("2", "4", "8"), or "8x4" (a 128 x 64
    tile, contract.GEMM_TILES) for FLOAT32 on GPUs where 64 x 64 is chosen, N >= RECT_MIN_N and RECT_MIN_TILES
    such tiles exist (RECT_MIN_TILES_LONG_K over K >= SPLIT_FROM_K), unless `square` (a fused activation; a
    convolution's 1 x 1 layer: not measured).
    FLOAT32 on GPUs over K >= gemm_split.SPLIT_FROM_K, M and N > 32: 64 x 64 however few the tiles
    (split-K makes the work groups the tiles lack)."""
    blk = choose_block(rule, m, n, nmat, k)
    if rule == "parallel" and not float16 and blk == 2 and k >= SPLIT_FROM_K and min(m, n) > 32:
        blk = 4
    least = RECT_MIN_TILES_LONG_K if k >= SPLIT_FROM_K else RECT_MIN_TILES
    if (rule == "parallel" and not float16 and not square and blk == 4 and m > 64 and n >= RECT_MIN_N
            and cdiv(m, 128) * cdiv(n, 64) * nmat >= least):
        return "8x4"
    return str(blk)
