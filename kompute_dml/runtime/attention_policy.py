"""MULTIHEAD_ATTENTION's kernel choice and the limits of the exported attention's fusion
(runtime/policy.py's DevicePolicy takes them: the measured decisions stay in one place)."""

from __future__ import annotations

from typing import Any

# MULTIHEAD_ATTENTION's kernel (ops/attention.py): "tiled" (tiles per block of query rows), "blocked" (GPUs: 4 x 4
# register blocks of scores and accumulators from BLOCKED_MIN_ROWS query rows, the tiled kernel below), "rows"
# (CPUs), or "coopmat" (GPUs with float16 cooperative matrices: FLOAT16 problems the tensor-core kernel takes, the
# blocked or tiled kernel the rest; "coopmat-emulated": the same kernel as subgroup code, for tests).
# KDML_ATTENTION_KERNEL=blocked takes the blocked kernel from one query row (tests).
ATTENTION_KERNEL_ENV, ATTENTION_KERNELS = "KDML_ATTENTION_KERNEL", ("tiled", "blocked", "rows", "coopmat",
                                                                    "coopmat-emulated")
# H100, the blocked / tiled kernel (us, FLOAT32, 8 x 12 heads, head size 64; run 50, the sweep that
# `python -m benchmarks.attention_crossover` now runs): 8 rows 16.6 / 11.4, 32 rows 18.9 / 18.2, 48 rows 23.1 / 30.3,
# 64 rows 16.3 / 33.4.
ATTENTION_BLOCKED_MIN_ROWS = 48
# The blocked kernel takes 32 query rows per work group where 64 would make at most this many work groups (batch x
# heads x blocks of 64 rows): the grid doubles within one wave of an H100's 132 SMs, each group half as deep. H100,
# `python -m benchmarks.attention_block_rows` (FLOAT32; us at 64 / 32 rows): 8 x 4 heads x 128 rows, head size 64 (64
# groups) 25.8 / 21.0, 1 x 12 x 128 (24) 25.3 / 21.9, 1 x 4 x 197 (16) 45.0 / 38.5, 8 x 4 x 64 (32) 17.6 / 14.8; but
# 8 x 4 x 197 (128) 44.8 / 69.4, 8 x 12 x 128 (192) 46.2 / 52.4, 64 x 4 x 256 (1024) 336.4 / 510.7.
ATTENTION_BLOCKED32_MAX_GROUPS = 64
# The exported attention chain runs fused on the blocked kernel up to this many flops: H100, `python -m
# benchmarks.bench_attention --rows f32 --unfused` (the unfused chain as the backend runs it, the scale as GEMM's alpha),
# blocked / unfused us: BERT-base 8x128 (0.4 Gflop) 43.9 / 77.8, Whisper-small 1x1500 (2.3) 224.8 / 262.6, ViT-B 32x197
# (3.8) 504.7 / 343.3, BERT-base 64x256 (12.9) 977.9 / 761.2, Whisper-small 8x1500 (18.4) 1304.9 / 1148.6; but
# Whisper small's encoder at batch 1 (2.3 Gflop per layer) ran 0.13-0.17 ms slower fused (`benchmarks.model_families`,
# runs 50 and 54: 2.02 / 1.85 and 2.04 / 1.91 ms), so the limit lies below it.
ATTENTION_BLOCKED_MAX_FLOPS = 2e9
# FLOAT32 attention of at least this many flops (4 b h q k d) runs as two GEMM dispatches (ops/attention_gemm.py:
# the scores with each row's softmax statistics, then softmax(scores) x V: the unfused chain's products less its
# softmax pass) where that kernel takes it, and the exported chain with it (onnx_backend/fusion_attention.py): the
# blocked kernel lost to the unfused chain from 2.3 Gflop (ATTENTION_BLOCKED_MAX_FLOPS). CPU devices: never (the
# rows kernel; tests force it).
ATTENTION_GEMM_MIN_FLOPS = {"gpu": ATTENTION_BLOCKED_MAX_FLOPS, "cpu": float("inf")}
# The exported graphs' attention chain (onnx_backend/fusion_attention.py) runs fused up to MAX_FLOPS (4 b h q k d)
# from MIN_ROWS query rows, its key / value heads not repeated (GQA's stride-0 heads), else as its nodes. H100,
# `benchmarks/bench_attention.py --unfused --rounds 3` at c70c79a: fused / unfused 147 / 621 us at BERT-base 8x128
# (0.4 Gflop), 1715 / 1064 us at ViT-B 32x197 (3.8), 5357 / 1755 at 64x256 (12.9); GQA decoding 0.03x torch (Llama
# small's steps, plans kept: 0.84x torch fused, 1.25x before). lavapipe: the rows kernel 2-3x slower from 2 x 128 keys.
ATTENTION_FUSED_MAX_FLOPS, ATTENTION_FUSED_MIN_ROWS = {"gpu": 1.5e9, "cpu": 4e6}, {"gpu": 16, "cpu": 1}
# ... and at every size where the tensor-core kernel takes it (ops/attention_layout.coop_takes) in at least MIN_GROUPS work
# groups (batch x heads x blocks of query rows). H100, bench_attention at d2e4cb6: fused / unfused 48 / 662 us at
# BERT-base 8x128, 1112 / 1608 at 64x256, 4837 / 6254 at 1x4096 (69 Gflop), 1376 / 2624 at Whisper small 8x1500; but
# Whisper small's encoder at batch 1 (96 work groups of 1500 keys each, no key split) 2.68 ms fused, 2.05 unfused.
ATTENTION_COOP_MAX_FLOPS, ATTENTION_COOP_MIN_GROUPS = float("inf"), 256

# The tensor-core kernel's float16-weight variant (allow_half_precision) takes key tiles of 16 (four work groups per
# SM, ops/contract/attention.py) from this many work groups, key tiles of 32 below (two per SM, each tile's fixed
# cost halved): H100, `python -m benchmarks.attention_ablation` (device call 143), us k32 / k16: BERT-base 8x128 (192
# groups) 25.7 / 28.2, Whisper 8x1500 (768: 1.45 waves of four per SM) 493.9 / 532.5, 1x4096 h16 (1024) 1808.8 /
# 1518.2, ViT-B 32x197 (1536) 223.5 / 154.8. The float32-weight kernel takes 16 everywhere (128 registers to 187):
# 945.3 / 702.7, 3432.8 / 1992.6, 339.4 / 207.4, BERT-base 37.1 / 37.6.
ATTENTION_COOP_HALF_K16_MIN_GROUPS = 1024


def fused_max_flops(policy: Any, coop: bool, groups: int, blocked: bool) -> float:
    """The largest exported attention chain run fused under a DevicePolicy: the tensor-core kernel's limit
    where it takes the problem (`coop`: ops/attention_layout.coop_takes) in at least COOP_MIN_GROUPS work
    groups, else the blocked kernel's where that takes it (`blocked`: attention_layout.blocked_takes), else
    the tiled one's."""
    if coop and groups >= ATTENTION_COOP_MIN_GROUPS:
        return policy.attention_coop_max_flops
    return policy.attention_blocked_max_flops if blocked else policy.attention_fused_max_flops
