"""The device policy's float16 cooperative-matrix choices (re-exported by runtime/policy.py, whose
DevicePolicy holds the per-device family): which kernel family a FLOAT16 GEMM (ops/gemm.py) and a
CONVOLUTION (ops/convolution.py) take.

GEMM: "tiled" (shaders/gemm.comp, FLOAT32 and FLOAT16), "coopmat" (FLOAT16 on cooperative matrices,
ops/gemm_coop.py), "coopmat-emulated" (that kernel with each cooperative-matrix operation as plain
subgroup code: any device, for tests). KDML_GEMM_KERNEL (read once, when the policy is made) forces
one; a coop family takes FLOAT16 only (other types stay "tiled").

CONVOLUTION: "tiled" (shaders/convolution.comp's implicit GEMM, every device), "direct" (one output
per invocation: depthwise and few channels per group), "coopmat" / "coopmat-emulated"
(shaders/conv_coop.comp: FORWARD on float16 cooperative matrices; FLOAT32 only under
allow_half_precision, ops/conv_coop.py). KDML_CONV_KERNEL (read at each compile, so tests and
benchmarks can switch it) forces one; a forced coop family leaves what it does not take (BACKWARD,
FLOAT32 without allow_half_precision) to the tiled kernel, a forced "direct" refuses BACKWARD.
"""

from __future__ import annotations

import os
from typing import Any

GEMM_KERNEL_ENV = "KDML_GEMM_KERNEL"
GEMM_KERNELS = ("tiled", "stream", "coopmat", "coopmat-emulated")  # stream: ops/gemm_stream.py where it fits (tiled: never)
# What the coopmat kernels need: the capabilities their SPIR-V declares, and the f16 x f16 -> f32 16x16x16
# subgroup shape (as VkCooperativeMatrixPropertiesKHR lists it, like matmul_coop.S8_SHAPE: M, N, K,
# A, B, C, result (VkComponentTypeKHR FLOAT16 = 0, FLOAT32 = 1); scope (subgroup = 3) at index 8).
GEMM_COOP_CAPABILITIES = ("cooperative_matrix", "shader_float16", "vulkan_memory_model")
F16_SHAPE = (16, 16, 16, 0, 0, 1, 1)
SCOPE_SUBGROUP = 3
# M, N and K from which an automatic FLOAT16 GEMM takes "coopmat" (one 16 x 16 x 16 fragment each;
# below it the tiled kernel wastes less). Not measured yet: benchmarks/bench_gemm.py times both.
GEMM_COOP_MIN = 16
# FLOAT32 products the tiled family takes that run on ops/gemm_stream.py's kernel (GPUs; 0: none): those without
# a fused activation of at most this many terms K and at least this many columns N per matrix. H200, device call
# 316 (`python -m benchmarks.bench_conv --pointwise --rounds 3`, us, GEMM's tiled kernel / the streaming one):
# 8x16->96 at 112 x 112 29.6 / 21.0, 8x16->72 at 56 x 56 8.8 / 7.0, but 8x256->64 at 56 x 56 with ReLU 31.5 / 40.3,
# 8x80->480 at 14 x 14 with SiLU 12.2 / 20.2 (196 columns: 49 invocations of a group busy); with SiLU fused,
# EfficientNet-B0's 8 x 224 layers on it took 124 us against the tiled kernel's 105 (`encoder_profile`).
GEMM_STREAM = (192, 1024)

CONV_KERNEL_ENV = "KDML_CONV_KERNEL"
CONV_KERNELS = ("tiled", "direct", "lanes", "coopmat", "coopmat-emulated", "gemm")
# Convolutions of fewer output channels per group than DIRECT_BELOW_COUTG and at most DIRECT_MAX_K
# reduction terms take the direct kernel (one output element per invocation): the tiled kernel
# computes 64 channels of a group per work-group and idles the rest (H100, benchmarks/bench_conv.py:
# depthwise 3x3 over 8 x 96 x 56 x 56, tiled 0.535 ms), but the direct kernel walks all the terms
# of an output in one invocation: beyond a 7x7 window the tiled kernel with split-K is faster (H100,
# `python -m benchmarks.bench_small_layers`: depthwise 3x3 576 at 7 x 7 b8 direct 9.3 us, tiled
# 45.1; EfficientNet's squeeze 96 -> 4 at 1 x 1 direct 29.4, tiled in 3 parts 11.7).
DIRECT_BELOW_COUTG = 8
DIRECT_MAX_K = 64
# The direct kernel's row variants (4 outputs of a row per invocation: the filter's taps and each
# input row loaded once for the 4, ops/conv_direct.py) from DIRECT_ROW_MIN_OUTPUTS[(float16, window,
# horizontal stride)] output elements; smaller convolutions keep one output per invocation (a quarter
# of the invocations leaves more of the GPU idle). H100, `python -m benchmarks.bench_conv --depthwise`
# (device call 244; us one per invocation / rows, EfficientNet-B0's and MobileNetV3-small's layers):
# FLOAT32 3 x 3 stride 1 8 x 144 x 56 x 56 54.3 / 33.4 but 1 x 480 x 14 x 14 (94 k outputs) 3.9 / 4.6;
# 3 x 3 stride 2 at most 1.04x faster (8 x 96 x 56 x 56, 2.4 M outputs), 0.91-0.99 below; 5 x 5 from
# 56 k outputs (1 x 1152 x 7 x 7 4.4 / 4.3; 8 x 240 x 28 x 28 39.9 / 20.1); FLOAT16 from 56 k outputs
# (8 x 240 x 28 x 28 5 x 5 88.8 / 40.7), 3 x 3 stride 2 from 301 k (1 x 96 x 56 x 56 11.2 / 9.4;
# 1 x 72 x 28 x 28 4.6 / 5.5).
DIRECT_ROW_MIN_OUTPUTS = {(False, 3, 1): 1 << 18, (False, 3, 2): 1 << 21, (False, 5, 1): 1 << 16, (False, 5, 2): 1 << 16,
                          (True, 3, 1): 1 << 16, (True, 3, 2): 1 << 18, (True, 5, 1): 1 << 16, (True, 5, 2): 1 << 16}
# FLOAT32 FORWARD convolutions of few output pixels take the lanes kernel (32 invocations per output
# channel and 4 pixels, the terms over the lanes) on GPUs where ops/convolution.lanes_work <= LANES_MAX_WORK: the
# tiled kernel's reduction is serial per work-group and split-K adds a second dispatch. H100,
# `python -m benchmarks.bench_small_layers` (lanes / the tiled kernel's best split, us): squeezes at
# 1 x 1 576 -> 144 10.2 / 14.5, 144 -> 576 7.7 / 11.3, at batch 8 11.0 / 14.2; 1x1 288 -> 96 at 7 x 7
# 11.0 / 14.1 (work 468), 240 -> 40 at 14 x 14 10.0 / 12.9 (work 490), 96 -> 576 at 7 x 7 13.9 / 12.2
# (work 936); past it the tiled kernel: 40 -> 240 at 14 x 14 17.3 / 11.9 (work 1470), 288 -> 96 at
# 7 x 7 batch 8 29.8 / 16.8 (work 3528). Half precision keeps its kernels (MobileNetV3's float16
# squeezes were as often slower on the lanes kernel as faster).
LANES_MAX_WORK = 1024
# Output channels per group and reduction terms (CinG x window volume) from which an automatic
# half-precision FORWARD convolution takes "coopmat" on a device that has it: one 16 x 16 x 16
# fragment's worth (below it most of a fragment would be padding). Not measured yet:
# `python -m benchmarks.bench_conv --kernels` times the tiled and coopmat kernels side by side.
CONV_COOP_MIN_COUTG = 16
CONV_COOP_MIN_K = 16
# FLOAT16 pointwise convolutions (ops/conv_pointwise.py) take GEMM's kernels where the device's GEMM
# family is "coopmat" and the product reaches its tensor cores (at least GEMM_COOP_MIN output channels,
# input channels and pixels per image), with at most POINTWISE_F16_GEMM_MAX_K input channels or at most
# POINTWISE_F16_GEMM_MAX_PIXELS pixels per image. H100, device call 238 (`python -m benchmarks.bench_conv
# --pointwise --half`, the tensor-core convolution / GEMM, us): 8 x 16 -> 72 at 56 x 56 39.9 / 16.3,
# 8 x 16 -> 96 at 112 x 112 with SiLU 225.9 / 124.9, 8 x 96 -> 576 at 7 x 7 15.5 / 10.0, 8 x 1152 -> 320 at
# 7 x 7 18.8 / 16.5, 1 x 64 -> 256 at 56 x 56 13.8 / 8.7; past both bounds the convolution kernels:
# 8 x 256 -> 64 at 56 x 56 33.5 / 79.1, 8 x 1024 -> 256 at 14 x 14 29.6 / 32.8.
POINTWISE_F16_GEMM_MAX_K = 128
POINTWISE_F16_GEMM_MAX_PIXELS = 64


def has_f16_shape(shapes: Any) -> bool:
    """The device lists the f16 x f16 -> f32 16x16x16 subgroup shape (or lists none: a runtime that does
    not read them, where the capability stands for it)."""
    shapes = tuple(shapes or ())
    return not shapes or any(tuple(s[:7]) == F16_SHAPE and s[8] == SCOPE_SUBGROUP for s in shapes)


def coop_family(capabilities: frozenset[str], coop_shapes: Any) -> str:
    """A GPU's float16 family: "coopmat" where it enabled GEMM_COOP_CAPABILITIES and lists F16_SHAPE."""
    return "coopmat" if set(GEMM_COOP_CAPABILITIES) <= capabilities and has_f16_shape(coop_shapes) else "tiled"


def _forced(choice: str | None, allowed: tuple[str, ...], env: str) -> str:
    choice = (choice or "auto").strip().lower()
    if choice != "auto" and choice not in allowed:
        from ..core.errors import invalid

        raise invalid("kernel", f"must be one of {', '.join(map(repr, allowed))} or 'auto' (also via {env}), "
                      f"got {choice!r}")
    return choice


def choose_gemm_family(policy_family: str, forced: str | None, float16: bool, m: int, n: int, k: int) -> str:
    """GEMM's family for an M x N x K product (FLOAT16 where `float16`): the forced one (InvalidArgumentError
    ("kernel") for an unknown name), else "coopmat" for FLOAT16 where the device has it and M, N, K >=
    GEMM_COOP_MIN, else "tiled". A coop family's planner declines (-> "tiled") what it does not take: FLOAT32."""
    choice = _forced(forced, GEMM_KERNELS, f"{GEMM_KERNEL_ENV}, read when the device is made")
    if choice != "auto":
        return choice
    return "coopmat" if float16 and min(m, n, k) >= GEMM_COOP_MIN and policy_family == "coopmat" else "tiled"


def choose_conv_kernel(policy_family: str, *, half: bool, coutg: int, klen: int, backward: bool,
                       kernel: str | None = None, lanes_work: int | None = None, pointwise: bool = False,
                       pointwise_gemm: bool = False, float16: bool = False, pixels: int = 0) -> str:
    """CONVOLUTION's kernel: `kernel`, else KDML_CONV_KERNEL's, where one is forced (InvalidArgumentError
    ("kernel") for an unknown name); else "direct" for FORWARD with fewer than DIRECT_BELOW_COUTG output
    channels per group and at most DIRECT_MAX_K terms, "coopmat" for FORWARD in half precision (`half`: FLOAT16, or FLOAT32 under
    allow_half_precision) of at least CONV_COOP_MIN_COUTG channels per group and CONV_COOP_MIN_K terms
    on a device that has it (`policy_family`), else "lanes" for FORWARD FLOAT32 where `lanes_work` (the
    lanes kernel's work-groups times its rounds over the terms, ops/convolution.lanes_work; None: not a
    candidate) is at most LANES_MAX_WORK, else "tiled". `pointwise` (a 1 x 1 convolution GEMM can run,
    `pixels` per image) takes "gemm" where `pointwise_gemm`: FLOAT32 always, FLOAT16 tensors (`float16`)
    within the bounds of POINTWISE_F16_GEMM_MAX_K. A forced coop family applies to FORWARD in half precision
    only ("tiled" otherwise)."""
    forced = kernel if kernel is not None else os.environ.get(CONV_KERNEL_ENV)
    choice = _forced(forced, CONV_KERNELS, f"{CONV_KERNEL_ENV}, read at each compile")
    coop_ok = half and not backward
    if choice in ("coopmat", "coopmat-emulated"):
        return choice if coop_ok else "tiled"
    if choice == "gemm":
        return "gemm" if pointwise else "tiled"
    if choice != "auto":
        return choice
    if not backward and coutg < DIRECT_BELOW_COUTG and klen <= DIRECT_MAX_K:
        return "direct"
    if (pointwise and pointwise_gemm and float16 and policy_family == "coopmat"
            and min(coutg, klen, pixels) >= GEMM_COOP_MIN
            and (klen <= POINTWISE_F16_GEMM_MAX_K or pixels <= POINTWISE_F16_GEMM_MAX_PIXELS)):
        return "gemm"
    big = coutg >= CONV_COOP_MIN_COUTG and klen >= CONV_COOP_MIN_K
    if coop_ok and big and policy_family == "coopmat":
        return "coopmat"
    if pointwise and pointwise_gemm and not half:
        return "gemm"
    if not backward and not half and lanes_work is not None and lanes_work <= LANES_MAX_WORK:
        return "lanes"
    return "tiled"


def direct_rows(outputs: int, float16: bool, window: int, stride: int) -> bool:
    """Whether a direct convolution of `outputs` output elements (FLOAT16 tensors: `float16`) with a
    `window` x `window` filter and horizontal `stride` takes that window's row variant."""
    return outputs >= DIRECT_ROW_MIN_OUTPUTS.get((float16, window, stride), 1 << 62)
