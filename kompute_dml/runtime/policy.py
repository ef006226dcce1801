"""Per-device policy: which execution path and kernel family a device gets.

One object decides, from the device type, its enabled capabilities and its limits, what
the dispatcher uses; operators ask it and never branch on the device type themselves.
Every choice here is a measured one (figures in docs/ and benchmarks/RESULTS.md):

- lavapipe (a CPU device): transfer commands (vkCmdCopyBuffer / vkCmdFillBuffer) move
  bytes several times faster than its compute shaders, whose every buffer access is a
  bounds-checked per-lane loop; its matrix products want the register-blocked "cpu"
  family (no shared memory, no barriers).
- discrete GPUs (measured on an NVIDIA H100, ../shared/notes/gpu.md): the same transfer
  commands are 2-3x slower than compute shaders (50x for one region per row), so every
  operator runs as shaders; matrix products take tiled "gpu" kernels, or cooperative-matrix
  kernels on the tensor cores where the device enabled them (FLOAT16 GEMM too: gemm_family).
- every device: outputs that depend on the descriptor alone are copied from a constant
  (CONSTANT_BELOW); an execution completes by a completion word (COMPLETION); a submission's first
  run goes through one shared, re-recorded sequence (FIRST_RUN).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Any

from . import attention_policy as ap  # MULTIHEAD_ATTENTION's kernel and the attention fusion's limits
from .capabilities import CAPABILITIES, FEATURES_ENV, requested_capabilities  # noqa: F401 (re-exported)
from .coop_policy import (  # noqa: F401 (re-exported: the float16 cooperative-matrix choices)
    CONV_KERNEL_ENV,
    CONV_KERNELS,
    F16_SHAPE,
    GEMM_COOP_CAPABILITIES,
    GEMM_COOP_MIN,
    GEMM_KERNEL_ENV,
    GEMM_KERNELS,
    GEMM_STREAM,
    SCOPE_SUBGROUP,
    choose_conv_kernel,
    choose_gemm_family,
    coop_family,
    has_f16_shape,
)
from .llvmpipe import CPU_MATMUL_MAX_K, cpu_matmul_fits
from .matmul_table import (  # noqa: F401 (re-exported: the table's entries and limits)
    DOT_CANDIDATE,
    DOT_MAX_M,
    GEMV_COOP_MAX_M,
    GEMV_MAX_M,
    GEMV_TINY_MAX_M,
    TINY_B_BYTES,
    TINY_K,
    KernelCandidate,
    gemv_candidate,
    is_tiny,
)
from .pipelines import pipeline_threads
from .plan_flush import GPU_PLAN_FLUSH_MS, PLAN_FLUSH_ALLOCATING_ENV, PLAN_FLUSH_COMPILING_ENV, PLAN_FLUSH_ENV

# Bytes up to which a discrete GPU copies by transfer commands (DevicePolicy.transfer_below).
# H100, `benchmarks/latency.py --sizes` (eager FLOAT32 identity, median us, shaders vs transfer
# commands, two runs): 16 KiB 21.4 / 19.6 and 23.0 / 20.8; 64 KiB 20.2 / 20.2 and 22.3 / 21.1;
# 256 KiB 20.3 / 20.2 and 21.7 / 21.3; 1 MiB 20.2 / 22.1 and 20.4 / 22.1; 16 MiB 26.6 / 61.6.
# `--sequences`: a barrier + 16 KiB copy sequence 16.8 us, barrier + dispatch 18.4-18.6.
GPU_TRANSFER_BELOW = 256 * 1024
# ... and only with at most this many row regions: a copy of many short rows is slow as transfer
# commands (H100, `benchmarks/encoder_profile.py --shape 1x16`, MiniLM's head merge, a (1, 16,
# 12, 32) transposed FLOAT32 copy of 192 regions of 128 bytes: 1,615 us for six of them, where
# a row-copy dispatch takes a few us).
GPU_TRANSFER_REGIONS = 4
# Packed outputs of at most this many bytes that depend on the descriptor alone (DIAGONAL_MATRIX,
# DIAGONAL_MATRIX1 without input) are copied from a constant the operator computes when it
# compiles (DevicePolicy.constant_below, ops/diagonal_constant.py), on every device. Eager
# DIAGONAL_MATRIX 64x64 FLOAT32, `benchmarks/latency.py --ops`: H100, kp timestamps around the
# commands, the 16 KiB copy 3.10 us against the kernel's 5.15-5.28, eager 18.14 / 18.39 us against
# 19.39 / 21.48 (other processes); lavapipe (`--constant-below 0` / `65536`, alternating) 30.31 /
# 35.10 us by its zero fill + band kernel against 8.09 / 7.77 by the copy. 64 KiB: a bound on
# what each such operator keeps on the device.
CONSTANT_BELOW = 64 * 1024
# How an execution learns that the device is done (DevicePolicy.completion; KDML_COMPLETION=fence
# or word overrides): "word" polls a host-visible word the command buffer writes last (kp patch
# level 7; since level 16 after a barrier that makes every earlier write available to the host, as
# the outputs are read at the word), "fence" polls the sequence's fence. `bash benchmarks/vk_floor/run.sh` (C, no kp), median
# us from vkQueueSubmit to completion of barrier + one dispatch, word / fence polled, two runs each:
# H100 16.25 / 46.36 and 16.85 / 48.57 (the driver's slow mode for fences: the fence reports about
# 30 us after the word; p10 of the second run's fence 16.28), in its fast mode 17.01 / 16.97 and
# 16.93 / 16.73 (the fence then 4.4 us after the word); lavapipe 62.5 / 85.4.
COMPLETION_ENV = "KDML_COMPLETION"
COMPLETIONS = ("word", "fence")
# How long a waiting thread polls before it blocks (DevicePolicy.wait_spin_cap_us; the kp patch's
# kdml_set_wait_spin_ns, default 250 us; KDML_WAIT_SPIN_US fixes it for every wait). A blocked wait
# wakes up late: H100, `benchmarks/run_breakdown.py --repeat 200` (BERT 256/3, program.run us,
# two runs each, spin 250 / 3000 us): 8x128 796 and 723 / 649 and 636, 1x16 1314 and 392 / 341 and
# 339. On GPUs an execution's wait therefore polls up to twice its previous duration (as CUDA's
# default synchronization spins), at most this long; a CPU device keeps the default, its worker
# threads need the cores.
WAIT_SPIN_CAP_US = 5000
# Where a submission runs the first time (DevicePolicy.first_run; KDML_FIRST_RUN=own or shared):
# "shared" records it into one fence-completed sequence re-recorded for each first run
# (runtime/replay.py), "own" into a new sequence of its own. A first run then creates no command
# buffer and no fence: on the H100 a new sequence's first submission cost 304.7 us against 25 for
# its second, dropping a finished one 310.3, re-recording one about 94 (benchmarks/RESULTS.md, the
# runtime around the kernels). `benchmarks/first_call.py --breakdown` prints both paths; lavapipe,
# 64^3, shared / own first runs 207.2 / 184.6, 189.7 / 183.2, 181.9 / 184.3 us.
FIRST_RUN_ENV = "KDML_FIRST_RUN"
FIRST_RUNS = ("shared", "own")
# How the ONNX backend lays out a constant 2-D weight (B) of an integer product (DevicePolicy.weights,
# weight_layout; KDML_WEIGHTS=rows or columns): "rows" as ONNX stores it (n-contiguous), "columns"
# transposed once at upload (k-contiguous), which the tensor cores stage without a transpose: for
# products gemv does not take (GEMV_COOP_MAX_M). H100 (benchmarks/RESULTS.md): 4096^3 rows / columns
# 248.2 / 423.7 TOPS (`bench_coop.py`), MiniLM 8x128 1.61 / 1.48 ms (`first_runs.py`).
WEIGHTS_ENV = "KDML_WEIGHTS"
WEIGHT_LAYOUTS = ("rows", "columns")
# The matrix-product families (MATRIX_MULTIPLY_INTEGER_TO_FLOAT), each planned by the ops module
# that registers it (ops/matmul_integer.PLANNERS): "cpu" / "cpu-ssbo" (register-blocked; without the
# texel variant), "gpu" (shared-memory tiles), "coopmat" / "dot" / "coopmat-emulated" (ops/matmul_coop.py:
# tensor cores, OpSDot, plain code), "gemv" (few rows, ops/matmul_gemv.py), "wide" (exact 16/32-bit,
# ops/matmul_wide.py). A planner returns None where its family does not take the descriptor; the
# next candidate then does. KDML_MATMUL_KERNEL (read once, when the policy is made) forces one.
MATMUL_KERNEL_ENV = "KDML_MATMUL_KERNEL"
MATMUL_KERNELS = ("cpu", "cpu-ssbo", "gpu", "coopmat", "dot", "coopmat-emulated", "gemv", "wide")
# The tensor-core kernel's zero-point sums: "dot" (mmc8s_*: OpSDot) with integer_dot_product, else "bytes" (mmc8_*).
# H100, benchmarks/coop_quant_parts.py at 16a7ab2: quantized 4096^3 / 8192^3 at 0.874 / 0.894 of s8 "bytes", 0.928 / 0.963 "dot".
COOP_SUMS = ("bytes", "dot")

# DYNAMIC_QUANTIZE_LINEAR's geometry (DevicePolicy.dql_geometry, ops/dynamic_quantize.py): input
# elements per min / max work group (at least; at most 256 groups) and 16-byte loads per
# quantizing invocation (4, 2 or 1). KDML_DQL_GEOMETRY=ELEMENTS,LOADS overrides it (for
# `benchmarks.bench_dql --geometries` and model-level comparisons in one process each). H200, device
# call 302 (`bench_dql --rounds 5 --geometries ...`, us per execution, 4096,4 / 1024,2 / 1024,1):
# 256 Ki elements (a small encoder's 1024 x 256 activations) 11.6 / 10.8 / 10.7, 1 Mi 13.2 / 12.7 /
# 12.9, 4 Mi 20.6 / 22.2 / 24.8; DistilBERT int8 (small) at 8 x 128, `encoder_profile`, device time
# 0.72 / 0.70 / 0.68 ms, its 16 DYNAMIC_QUANTIZE_LINEAR 215 / 201 us at the first two. lavapipe keeps few groups (each a loop
# on a core): 262144 elements 2.67 ms at 4096,4 against 4.15 at 1024,1 (bench_dql --rounds 2).
DQL_GEOMETRY = {"cpu": (4096, 4), "gpu": (1024, 2)}
# SQUEEZE_EXCITATION's scaled output (fusion_se.py: the block's Mul(x, gate) in the gate's dispatch) where
# one work group scales at most this many elements (its channels, at most 64, times the positions),
# float32 and float16; past it the Mul runs as its own ELEMENT_WISE_MULTIPLY over the whole device (0:
# never). H200, device call 309 (`python -m benchmarks.bench_se --rounds 3 -n 20 [--dtype float16]`, us,
# scaled / the gate then the Mul, batch 1): float32 96 x 14 x 14 12.4 / 14.2, 576 x 7 x 7 20.8 / 24.0,
# 672 x 14 x 14 25.5 / 25.7, but 144 x 28 x 28 (50,176 per work group) 31.8 / 20.7; float16 288 x 7 x 7
# 22.5 / 25.2, 1152 x 7 x 7 47.1 / 50.9, but 96 x 14 x 14 22.6 / 19.1 (batch 8 alike).
SE_SCALE_MAX_ELEMENTS = (64 * 14 * 14, 64 * 7 * 7)
DQL_GEOMETRY_ENV = "KDML_DQL_GEOMETRY"


@dataclass(frozen=True)
class DevicePolicy:
    """The measured choices for one device. `describe()` is what `kompute-dml info` prints."""

    name: str  # which policy ("cpu", "discrete-gpu", ...)
    transfer_commands: bool  # dense copies and fills as transfer commands instead of shaders
    matmul_family: str  # "cpu" | "gpu" | "dot" | "coopmat"
    capabilities: frozenset[str]
    # Variant family of the memory-bound operators (copies, DIAGONAL_MATRIX[1]): "cpu" keeps
    # lavapipe's branch-free one-vector shaders; "gpu" takes the multi-vector, row-tiled ones.
    memory_kernel: str = "cpu"
    # Dense copies of at most this many bytes run as transfer commands even where
    # `transfer_commands` is False: a small vkCmdCopyBuffer completes sooner than a dispatch
    # (H100: see GPU_TRANSFER_BELOW), while large ones run at a fraction of a shader's speed.
    transfer_below: int = 0
    transfer_regions: int = 0  # the most row regions such a small copy may have (0: any)
    # Whether the ONNX backend creates, at a model's first run, the pipelines of the variants
    # other input shapes may pick, and host memory for their inputs and outputs (onnx_backend/
    # device_graph.py): GPUs, where that makes a new sequence length's first run cheap; not
    # lavapipe, whose pipeline compiles take seconds.
    prepare_siblings: bool = False
    pipeline_threads: int = field(default_factory=pipeline_threads)  # new pipelines compiled at once
    # Outputs that depend on the descriptor alone, packed, of at most this many bytes: copied
    # from a constant computed at compile time (CONSTANT_BELOW); 0: never.
    constant_below: int = 0
    completion: str = "word"  # see COMPLETION
    wait_spin_cap_us: int = 0  # see WAIT_SPIN_CAP_US; 0: the fixed default spin
    first_run: str = "shared"  # see FIRST_RUN
    plan_flush_ms: float = 0.0  # see PLAN_FLUSH_ENV
    plan_flush_allocating: bool = False  # see PLAN_FLUSH_ALLOCATING_ENV
    plan_flush_compiling: bool = False  # see PLAN_FLUSH_COMPILING_ENV
    # How GEMM (ops/gemm.py) picks its output tile (32 x 32 or 64 x 64, contract.GEMM_BLOCKS):
    # "work" (CPU devices) the one with the least padded work per unit of speed (GEMM_CPU_B4_RATE),
    # "parallel" (GPUs) 64 x 64 only where enough such tiles keep the device busy (ops/gemm.py).
    gemm_tiles: str = "work"
    # The tiled kernel's blocks that keep their speed with a fused activation, the only products the ONNX
    # GELU fusions fuse (ops/gemm.py keeps_speed_with_activation; docs/gemm.md "Fused activation")
    gemm_act_blocks: tuple[str, ...] = ("2", "4")
    matmul_kernel: str = field(default_factory=lambda: os.environ.get(MATMUL_KERNEL_ENV, "auto"))  # forced family
    # FLOAT16 GEMM's family (large products, GEMM_COOP_MIN): "coopmat" with GEMM_COOP_CAPABILITIES and F16_SHAPE
    gemm_family: str = "tiled"
    gemm_kernel: str = field(default_factory=lambda: os.environ.get(GEMM_KERNEL_ENV, "auto"))  # forced family
    # CONVOLUTION's half-precision FORWARD family: "coopmat" where GEMM's is (KDML_CONV_KERNEL forces a kernel)
    conv_family: str = "tiled"
    conv_pointwise_gemm: bool = False  # 1 x 1 convolutions on GEMM's kernels (ops/conv_pointwise.py; GPUs)
    gemm_stream: tuple[int, int] = (0, 0)  # see GEMM_STREAM
    dql_geometry: tuple[int, int] = DQL_GEOMETRY["cpu"]  # DYNAMIC_QUANTIZE_LINEAR's: see DQL_GEOMETRY
    gelu_table: bool = False  # ACTIVATION_GELU's erfc coefficients from a table (GPUs: shaders/gelu_math.glsl's figures)
    barrier_levels: bool = False  # submissions in encode.levels (GPUs: RESULTS.md, barrier_levels), else program order
    se_scale_max_elements: tuple[int, int] = SE_SCALE_MAX_ELEMENTS  # (float32, float16): see there
    weights: str = "rows"  # see WEIGHT_LAYOUTS
    coop_sums: str = "bytes"  # see COOP_SUMS
    gemv_max_m: int = GEMV_MAX_M  # see GEMV_MAX_M, GEMV_COOP_MAX_M
    gemv_k_contiguous: bool = True  # gemv takes k-contiguous B (not on coopmat GPUs: GEMV_COOP_MAX_M)
    attention_kernel: str = "tiled"  # see ap.ATTENTION_KERNEL_ENV
    attention_fused_max_flops: float = ap.ATTENTION_FUSED_MAX_FLOPS["gpu"]  # see ap.ATTENTION_FUSED_MAX_FLOPS
    attention_fused_min_rows: int = ap.ATTENTION_FUSED_MIN_ROWS["gpu"]
    attention_coop_max_flops: float = ap.ATTENTION_COOP_MAX_FLOPS  # see ap.ATTENTION_COOP_MAX_FLOPS
    attention_blocked_min_rows: int = ap.ATTENTION_BLOCKED_MIN_ROWS  # see ap.ATTENTION_KERNELS
    attention_blocked_max_flops: float = ap.ATTENTION_BLOCKED_MAX_FLOPS
    attention_blocked32_max_groups: int = ap.ATTENTION_BLOCKED32_MAX_GROUPS  # see there
    attention_gemm_min_flops: float = ap.ATTENTION_GEMM_MIN_FLOPS["gpu"]  # see there

    def has(self, capability: str) -> bool:
        return capability in self.capabilities

    def weight_layout(self, rows: int) -> str:
        """How the ONNX backend stores a constant integer-product weight multiplied by `rows`
        rows of A (the product's M): "columns" (k-contiguous) or "rows" (WEIGHT_LAYOUTS)."""
        return "columns" if self.weights == "columns" and (rows > self.gemv_max_m or not self.gemv_k_contiguous) else "rows"

    def matmul_family_for(self, m: int) -> str:
        """The matrix-product family for matrices of `m` rows (the "dot" family only up to DOT_MAX_M)."""
        return "gpu" if self.matmul_family == "dot" and m > DOT_MAX_M else self.matmul_family

    def matmul_kernel_for(self, kernel: str | None = None) -> str:
        """The forced family (`kernel`, else the policy's override) or "auto"; InvalidArgumentError
        ("kernel") for a name that is neither."""
        choice = (self.matmul_kernel if kernel is None else kernel) or "auto"
        choice = choice.strip().lower()
        if choice != "auto" and choice not in MATMUL_KERNELS:
            from ..core.errors import invalid

            raise invalid("kernel", f"must be one of {', '.join(map(repr, MATMUL_KERNELS))} or 'auto' (also via "
                          f"{MATMUL_KERNEL_ENV}, read when the device is made), got {choice!r}")
        return choice

    def matmul_table(self, kernel: str | None = None) -> tuple[KernelCandidate, ...]:
        """The matrix-product families to try, in order, for a forced `kernel` (None: the policy's
        override, itself "auto" unless KDML_MATMUL_KERNEL was set): the first whose candidate applies
        and whose planner returns a plan takes the descriptor. Automatic GPU families: gemv for few
        rows, then the policy's family ("dot" up to DOT_MAX_M rows), "wide" (16/32-bit inputs), "gpu";
        the CPU family on CPU devices (the gpu tiles past its loop limit, llvmpipe.py). A forced family
        comes first; where its planner declines, what it falls back to (gemv: the automatic table; the
        coop families: wide, then gpu)."""
        choice = self.matmul_kernel_for(kernel)
        gpu_tail = (KernelCandidate("wide"), KernelCandidate("gpu"))
        if choice == "auto":
            family = self.matmul_family if self.matmul_family in MATMUL_KERNELS else "gpu"
            if family in ("cpu", "cpu-ssbo"):  # (its loops within llvmpipe's limit, else the "gpu" tiles)
                return (KernelCandidate(family, cpu_matmul_fits, f"K <= {CPU_MATMUL_MAX_K}"), KernelCandidate("gpu"))
            head = {"coopmat": (KernelCandidate("coopmat"),), "dot": (DOT_CANDIDATE,)}.get(family, ())
            gemv = (gemv_candidate(self.gemv_max_m, self.gemv_k_contiguous),) if family in ("gpu", "coopmat", "dot") else ()
            return (*gemv, *head, *gpu_tail)
        if choice == "gemv":
            return (KernelCandidate("gemv"), *(c for c in self.matmul_table("auto") if c.family != "gemv"))
        if choice in ("coopmat", "dot", "coopmat-emulated", "wide"):
            return (KernelCandidate(choice), *gpu_tail) if choice != "wide" else gpu_tail
        return (KernelCandidate(choice),)  # cpu, cpu-ssbo, gpu: always plan

    def gemm_family_for(self, float16: bool, m: int, n: int, k: int, kernel: str | None = None) -> str:
        """GEMM's family for an M x N x K product (coop_policy.choose_gemm_family): `kernel`, else KDML_GEMM_KERNEL's
        forced one, else "coopmat" for large enough FLOAT16 products where the device has it, else "tiled"."""
        return choose_gemm_family(self.gemm_family, self.gemm_kernel if kernel is None else kernel, float16, m, n, k)

    def conv_family_for(self, *, half: bool, coutg: int, klen: int, backward: bool, kernel: str | None = None,
                        lanes_work: int | None = None, pointwise: bool = False, float16: bool = False,
                        pixels: int = 0) -> str:
        """CONVOLUTION's kernel (coop_policy.choose_conv_kernel): forced, else "direct" (few channels per group), "gemm"
        (`pointwise` where conv_pointwise_gemm: FLOAT32; FLOAT16 tensors within coop_policy's bounds), "coopmat" (half
        precision where the device has it), "lanes" (GPUs: few output pixels, `lanes_work` small), "tiled"."""
        return choose_conv_kernel(self.conv_family, half=half, coutg=coutg, klen=klen, backward=backward, kernel=kernel,
                                  lanes_work=None if self.name == "cpu" else lanes_work, pointwise=pointwise,
                                  pointwise_gemm=self.conv_pointwise_gemm, float16=float16, pixels=pixels)

    def copies_by_transfer(self, nbytes: int, regions: int = 1) -> bool:
        """Whether a dense copy writing `nbytes` in `regions` row regions runs as transfer commands."""
        if self.transfer_commands:
            return True
        return nbytes <= self.transfer_below and (not self.transfer_regions or regions <= self.transfer_regions)

    def describe(self) -> dict[str, Any]:
        return {
            "policy": self.name,
            "transfer_commands": self.transfer_commands,
            "matmul_family": self.matmul_family,
            "memory_kernel": self.memory_kernel,
            "transfer_below": self.transfer_below,
            "transfer_regions": self.transfer_regions,
            "prepare_siblings": self.prepare_siblings,
            "pipeline_threads": self.pipeline_threads,
            "constant_below": self.constant_below,
            "completion": self.completion,
            "wait_spin_cap_us": self.wait_spin_cap_us,
            "first_run": self.first_run,
            "plan_flush_ms": self.plan_flush_ms,
            "plan_flush_allocating": self.plan_flush_allocating,
            "plan_flush_compiling": self.plan_flush_compiling,
            "gemm_tiles": self.gemm_tiles,
            "gemm_family": self.gemm_family,
            "conv_family": self.conv_family, "conv_pointwise_gemm": self.conv_pointwise_gemm, "gemm_stream": self.gemm_stream,
            "weights": self.weights, "coop_sums": self.coop_sums, "dql_geometry": self.dql_geometry,
            "gemv_max_m": self.gemv_max_m, "gemv_k_contiguous": self.gemv_k_contiguous,
            "gemm_kernel": self.gemm_kernel, "attention_kernel": self.attention_kernel,
            "matmul_kernel": self.matmul_kernel,
            "matmul_table": self._table_text(),
        }

    def _table_text(self) -> list[str]:
        try:
            table = self.matmul_table()
        except ValueError as e:  # an unknown KDML_MATMUL_KERNEL: refused when a product compiles
            return [f"invalid: {e}"]
        return [c.family + ("" if c.when == "always" else f" ({c.when})") for c in table]


def policy_for(device_type: str, capabilities: frozenset[str], limits: Any, *, transfer_commands: bool | None = None,
               coop_shapes: Any = ()) -> DevicePolicy:
    """The policy of a device; `transfer_commands` (or KDML_TRANSFER=0/1) overrides that one choice
    (and with it the small-size exceptions: transfer_below, constant_below); `coop_shapes`: the
    device's cooperative-matrix shapes (Device.cooperative_matrix_shapes)."""
    if device_type == "cpu":
        policy = DevicePolicy("cpu", transfer_commands=True, matmul_family="cpu", capabilities=capabilities,
                              constant_below=CONSTANT_BELOW, attention_kernel="rows",
                              attention_fused_max_flops=ap.ATTENTION_FUSED_MAX_FLOPS["cpu"],
                              attention_fused_min_rows=ap.ATTENTION_FUSED_MIN_ROWS["cpu"],
                              attention_gemm_min_flops=ap.ATTENTION_GEMM_MIN_FLOPS["cpu"])
    else:
        # tensor cores where enabled; else the same tiled kernel on OpSDot where the device has
        # integer dot products, for matrices of at most DOT_MAX_M rows (see there)
        if "cooperative_matrix" in capabilities:
            family = "coopmat"
        elif "integer_dot_product" in capabilities:
            family = "dot"
        else:
            family = "gpu"
        policy = DevicePolicy(
            device_type, transfer_commands=False, matmul_family=family, capabilities=capabilities, memory_kernel="gpu",
            transfer_below=GPU_TRANSFER_BELOW, transfer_regions=GPU_TRANSFER_REGIONS, constant_below=CONSTANT_BELOW,
            gemm_tiles="parallel", prepare_siblings=True, wait_spin_cap_us=WAIT_SPIN_CAP_US, plan_flush_ms=GPU_PLAN_FLUSH_MS,
            gemm_family=coop_family(capabilities, coop_shapes), conv_family=coop_family(capabilities, coop_shapes),
            weights="columns" if family == "coopmat" else "rows",
            gemv_max_m=GEMV_COOP_MAX_M if family == "coopmat" else GEMV_MAX_M, gemv_k_contiguous=family != "coopmat",
            attention_kernel="coopmat" if coop_family(capabilities, coop_shapes) == "coopmat" else "blocked",
            conv_pointwise_gemm=True, dql_geometry=DQL_GEOMETRY["gpu"], gemm_stream=GEMM_STREAM, gelu_table=True, barrier_levels=True,
        )
    if "integer_dot_product" in capabilities:
        policy = replace(policy, coop_sums="dot")
    if transfer_commands is None:
        env = os.environ.get("KDML_TRANSFER")
        transfer_commands = None if env is None else env != "0"
    if transfer_commands is not None:  # an explicit path: no small-size exceptions to it
        policy = replace(policy, transfer_commands=bool(transfer_commands), transfer_below=0, constant_below=0)
    completion = _env_choice(COMPLETION_ENV, COMPLETIONS)
    first_run = _env_choice(FIRST_RUN_ENV, FIRST_RUNS)
    flush = _env_choice(PLAN_FLUSH_ENV, None)
    flush_allocating = _env_choice(PLAN_FLUSH_ALLOCATING_ENV, ("0", "1"))
    flush_compiling = _env_choice(PLAN_FLUSH_COMPILING_ENV, ("0", "1"))
    weights = _env_choice(WEIGHTS_ENV, WEIGHT_LAYOUTS)
    forced = _env_choice(ap.ATTENTION_KERNEL_ENV, ap.ATTENTION_KERNELS)  # "blocked": from one row
    policy = replace(policy, dql_geometry=dql_geometry_from_env() or policy.dql_geometry)
    policy = replace(policy, completion=completion or policy.completion, first_run=first_run or policy.first_run,
                     attention_kernel=forced or policy.attention_kernel,
                     attention_blocked_min_rows=1 if forced == "blocked" else policy.attention_blocked_min_rows,
                     plan_flush_ms=policy.plan_flush_ms if flush is None else flush, weights=weights or policy.weights,
                     plan_flush_allocating=policy.plan_flush_allocating if flush_allocating is None else flush_allocating == "1",
                     plan_flush_compiling=policy.plan_flush_compiling if flush_compiling is None else flush_compiling == "1")
    return policy


def _env_choice(name: str, allowed: tuple[str, ...] | None) -> Any:
    """The environment's override `name` (None where unset): one of `allowed`, or a number of
    milliseconds >= 0 where `allowed` is None; InvalidArgumentError naming it otherwise."""
    value = os.environ.get(name, "").strip().lower()
    if not value:
        return None
    try:
        if allowed is None:
            return max(0.0, float(value))
        if value in allowed:
            return value
    except ValueError:
        pass
    from ..core.errors import invalid

    rule = "a number of milliseconds" if allowed is None else f"one of {', '.join(allowed)}"
    raise invalid(name, f"must be {rule}, got {value!r}")


def dql_geometry_from_env() -> tuple[int, int] | None:
    """KDML_DQL_GEOMETRY's (elements per group >= 256, loads 4 / 2 / 1), None where unset;
    InvalidArgumentError naming it otherwise."""
    value = os.environ.get(DQL_GEOMETRY_ENV, "").strip()
    if not value:
        return None
    try:
        per_group, loads = (int(v) for v in value.split(","))
    except ValueError:
        per_group, loads = 0, 0
    if per_group < 256 or loads not in (4, 2, 1):
        from ..core.errors import invalid

        raise invalid(DQL_GEOMETRY_ENV, f"must be ELEMENTS,LOADS (ELEMENTS >= 256, LOADS 4, 2 or 1), got {value!r}")
    return per_group, loads
