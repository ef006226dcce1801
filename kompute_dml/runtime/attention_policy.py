"""MULTIHEAD_ATTENTION's kernel choice and the limits of the exported attention's fusion
(runtime/policy.py's DevicePolicy takes them: the measured decisions stay in one place)."""

from __future__ import annotations

# MULTIHEAD_ATTENTION's kernel (ops/attention.py): "tiled" (GPUs: tiles per block of query rows), "rows" (CPUs), or
# "coopmat" (GPUs with float16 cooperative matrices: FLOAT16 problems the tensor-core kernel takes, the tiled kernel for
# the rest; "coopmat-emulated": the same kernel as subgroup code, for tests).
ATTENTION_KERNEL_ENV, ATTENTION_KERNELS = "KDML_ATTENTION_KERNEL", ("tiled", "rows", "coopmat", "coopmat-emulated")
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
