"""MATRIX_MULTIPLY_INTEGER_TO_FLOAT on cooperative matrices (tensor cores): the "coopmat" family.

shaders/matmul_coop.comp, for 8-bit A and B on devices with the `cooperative_matrix` capability
(VK_KHR_cooperative_matrix, s8 x s8 -> s32 at 16x16x32): every byte becomes a signed byte (an
unsigned operand is XOR-ed with 0x80 and its zero point shifted by 128), the tensor cores sum
a'b', and the zero points are corrected through row sums of A and column sums of B in the
epilogue, which also applies scales and bias and writes FLOAT32 or FLOAT16 in any layout.
The integer result is exact while K * 255^2 < 2^31 (K <= KMAX); larger K, other widths and
devices without the capability take the other families (`plan_coop` returns None).

Per operand, the load mode follows the layout (see the shader): A `r` (k contiguous), `c` (m
contiguous), `g` (any strides); B `r` (n contiguous, transposed into shared memory), `n` (n
contiguous, kept row-major), `c` (k contiguous), `g`. The vector modes need every other stride
a multiple of 16 bytes. Tile sizes are specialization constants chosen per shape by
`candidate_configs` (`TileConfig`s; benchmarks/bench_coop.py --sweep times alternatives).
Without tensor cores the same kernel runs with each cooperative-matrix operation done by plain
subgroup code on the same shared tiles: family `dot` sums 4 byte products per OpSDot (the
`integer_dot_product` capability; GPUs without cooperative matrices), `coopmat-emulated` with
shifts and multiplies (no device feature: how the tests run the whole kernel on any device).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ..core.errors import UnsupportedError, invalid
from ..core.ints import cdiv
from ..runtime import DispatchPlan
from ..runtime.policy import COOP_SUMS
from ..runtime.shaders import check_capabilities
from .base import CompiledOperator, validate_tensors
from .matmul_common import (
    FIELDS,
    INPUT_FIELDS,
    MATRIX_MULTIPLY_INTEGER_TO_FLOAT,
    OUTPUT_FIELDS,
    MatrixMultiplyIntegerToFloatDesc,
    check_desc,
    matmul_plan,
    matmul_push,
    operands,
    push_flags,
    sum_flags,
)

if TYPE_CHECKING:
    from ..device.device import Device

CAPABILITY = "cooperative_matrix"
KMAX = (2**31 - 1) // (255 * 255)  # 33025: |sum_k (a' - za')(b' - zb')| < 2^31 up to here
VEC = 16  # bytes per vector load: strides of the vector modes are multiples of it
# family -> (variant infix, the capability it needs): tensor cores, OpSDot, plain integer code
FAMILIES = {"coopmat": ("", CAPABILITY), "dot": ("d", "integer_dot_product"), "coopmat-emulated": ("x", None)}
BLOCK_SUBGROUPS = (8, 16, 32, 64, 128)  # subgroup sizes whose invocations tile a 16 x 16 block (MMA != 0)

# c_flags' flag bits are matmul_common's (F_A_SIGNED, F_B_SIGNED, F_F16, F_SUM_A, F_SUM_B)
_F_KNOWN = 1 << 31  # KFLAGS (constant_id 9): the flags are these, not the push word's
# the cooperative-matrix shape the kernel uses, as VkCooperativeMatrixPropertiesKHR lists it:
# M, N, K, A, B, C, result (VK_COMPONENT_TYPE_SINT8_KHR = 3, SINT32_KHR = 5), scope (subgroup = 3)
S8_SHAPE = (16, 16, 32, 3, 3, 5, 5)
SCOPE_SUBGROUP = 3
_A_MODES = {"r": 1, "c": 2, "g": 0}
_B_MODES = {"r": 2, "n": 3, "c": 1, "g": 0}


@dataclass(frozen=True)
class TileConfig:
    """Specialization constants: a BM x BN tile per work group, BK of K per step, a WM x WN block
    of 16 x 16 accumulators per subgroup; GROUP_M tile rows walked together; `b_rows`: how an
    n-contiguous B is staged ("r": transposed to k-contiguous, "n": kept row-major); `stages`
    shared-memory stages (2: one barrier per step; 1: two, for a BK whose two stages would not
    fit); `lean`: signedness, sums and output type fixed at pipeline creation (KFLAGS: no
    sign-flip XOR for signed operands, no sum code where no zero point needs it; one pipeline per
    flag set); `ksplit`: subgroups along K, each multiplying BK / ksplit of every step (few-row
    products: a work group keeps ksplit times the bytes in flight; the accumulators are added at
    the end)."""

    bm: int
    bn: int
    bk: int
    wm: int
    wn: int
    group_m: int = 8
    b_rows: str = "r"
    stages: int = 2
    lean: bool = False
    ksplit: int = 1

    def subgroups(self) -> int:
        """Subgroups per work group (each a WM x WN block of accumulators of one K share)."""
        return (self.bm // self.wm) * (self.bn // self.wn) * self.ksplit

    def invocations(self, subgroup_size: int) -> int:
        return self.subgroups() * subgroup_size

    def spec(self, subgroup_size: int, flags: int = 0) -> tuple[int, ...]:
        """constant_id 0..10 of matmul_coop.comp (0 is also local_size_x_id); `flags`: the
        push word's F_* bits, fixed in the pipeline where `lean`."""
        return (self.invocations(subgroup_size), self.bm, self.bn, self.bk, self.wm, self.wn, subgroup_size,
                self.group_m, self.stages, (flags | _F_KNOWN) if self.lean else 0, self.ksplit)

    def tile_uvec4(self, b_mode: int) -> int:
        """uvec4 of one shared stage of A and B."""
        ks = self.bk // 16 + 1
        return self.bm * ks + (self.bk * (self.bn // 16 + 1) if b_mode == 3 else self.bn * ks)

    def shared_bytes(self, b_mode: int) -> int:
        return 16 * self.stages * self.tile_uvec4(b_mode) + 4 * (self.bm + self.bn)

    def problems(self, subgroup_size: int, a_mode: int, b_mode: int, limits: object) -> list[str]:
        """Why this configuration cannot run (empty: it can); the shader's assumptions."""
        out = []
        bm, bn, bk, wm, wn = self.bm, self.bn, self.bk, self.wm, self.wn
        if min(wm, wn) < 16 or wm % 16 or wn % 16 or bm % wm or bn % wn:
            out.append("WM, WN multiples of 16 dividing BM, BN")
        if self.ksplit < 1 or bk % (32 * self.ksplit) or not 32 <= bk // self.ksplit <= 256:
            out.append("BK a multiple of 32 * ksplit, at most 256 * ksplit")
        if not 1 <= subgroup_size <= 128 or 128 % subgroup_size:
            out.append("a subgroup size dividing 128 (the epilogue's fixed pair loop)")
        if self.group_m < 1:
            out.append("GROUP_M >= 1")
        if self.stages not in (1, 2):
            out.append("stages 1 or 2")
        wg = self.invocations(subgroup_size)
        get = getattr(limits, "get", lambda key, default=None: default)
        if wg > min(get("max_compute_work_group_invocations", 1024), get("max_compute_work_group_size", (1024,))[0]):
            out.append(f"{wg} invocations exceed the device's work-group limit")
        for tmn, mode in ((bm, a_mode), (bn, b_mode)):
            if mode == 3:
                cols = bn // 4
                parts = wg // cols if wg >= cols else 1
                if bk % parts:
                    out.append("column sums: BK divisible by the parts per column")
            else:
                parts = wg // tmn if wg >= tmn else 1
                if (bk // 4) % parts:
                    out.append("row sums: BK / 4 divisible by the parts per row")
        staged = 1 if self.ksplit == 1 else (self.wm // 16) * (self.wn // 16)  # accumulators staged at once
        if self.subgroups() * 64 * staged > self.stages * self.tile_uvec4(b_mode):
            out.append("the accumulator staging (64 uvec4 per subgroup and staged accumulator) must fit in the tiles")
        if self.shared_bytes(b_mode) > get("max_compute_shared_memory_size", 16384):
            out.append(f"{self.shared_bytes(b_mode)} bytes of shared memory exceed the device's limit")
        return out


# Default tiles by shape (candidate_configs; benchmarks/bench_coop.py --sweep times alternatives).
LARGE = TileConfig(128, 128, 64, 64, 32)
MEDIUM = TileConfig(64, 64, 64, 32, 32)
NARROW = TileConfig(32, 64, 64, 32, 16)
DECODE = TileConfig(16, 32, 128, 16, 16)
TARGET_TILES = 96  # work groups wanted in flight (an H100 has 132 SMs)
# TileConfig fields set on every default tile on the tensor cores (family "coopmat"): one shared
# stage of BK 128 (two barriers per step) keeps twice the bytes in flight per barrier within 48 KB,
# `lean` drops the run-time flag code (signedness, sums and output type fixed per pipeline), and a
# row-major B stays row-major (no transpose at the store). Against BK 64 in two stages, run-time
# flags, B transposed (H100, `benchmarks/bench_coop.py --staging --rounds 3`, TOPS): 8192^3 gemm
# 311 vs 196, 4096^3 gemm 299 vs 213, quantized (B row-major) 4096^3 191 vs 137, 512x384x1536 35.5
# vs 30.9, 128x384x1536 13.0 vs 9.3.
TENSOR_CORE_OPTIONS: dict[str, Any] = {"bk": 128, "stages": 1, "lean": True, "b_rows": "n"}


# Few-row products (M <= 32) on the tensor cores: the thin tile with K split over its subgroups
# (TileConfig.ksplit), 4 or 2 shares where the work groups times the shares stay within
# KSPLIT_TARGET (about 6 per SM of an H100) and the deeper step pads K by at most KSPLIT_PAD.
# H100, benchmarks/coop_ksplit.py --rounds 3 (s8, us: the thin tile unsplit / 2 / 4 shares; torch._int_mm):
# 16x4096x4096 17.1 / 11.3 / 10.7 (13.1), 4x11008x4096 66.8 / 39.8 / 27.9 (28.1), 16x4096x11008
# (344 work groups) 32.9 / 24.0 / 31.9 (23.8), 8x768x3072 (4 shares pad K to 1024) 8.58 / 7.82 / 8.62.
KSPLIT_TARGET = 768
KSPLIT_PAD = 0.1


def split_k(cfg: TileConfig, k: int, groups: int) -> TileConfig | None:
    """cfg with 4 or 2 K shares (BK times as deep; see KSPLIT_TARGET), or None: K within one
    step of cfg, or even 2 shares too many work groups."""
    fit = [s for s in (4, 2) if groups * s <= KSPLIT_TARGET]
    if k <= cfg.bk or not fit:
        return None
    # the first that pads K (to whole steps of bk * s) by at most KSPLIT_PAD, else the fewest
    shares = next((s for s in fit if k >= (1.0 - KSPLIT_PAD) * cdiv(k, cfg.bk * s) * cfg.bk * s), fit[-1])
    return replace(cfg, bk=cfg.bk * shares, ksplit=shares)


def candidate_configs(m: int, n: int, t: int, tensor_cores: bool = False, k: int = 0) -> list[TileConfig]:
    """Tiles in order of preference: the largest that still gives TARGET_TILES work groups
    first (M <= 16, decoding: the thin one), then the smaller ones (for devices where it does
    not fit); with TENSOR_CORE_OPTIONS for the coopmat family, each followed by the same tile
    without them (where they do not fit), and for M <= 32 the thin tile first, its K split
    (split_k) where that applies (H100, coop_ksplit.py: 32 x 4096 x 11008, no split, 33.9 us
    against 39.9 for the 64 x 64 tile)."""
    if m <= 16:
        order = [DECODE, NARROW]
    else:
        order = [LARGE, MEDIUM, NARROW]
        fits = [i for i, cfg in enumerate(order) if cdiv(m, cfg.bm) * cdiv(n, cfg.bn) * t >= TARGET_TILES]
        order = order[fits[0]:] if fits else [NARROW, DECODE]
    if not tensor_cores:
        return order
    out = [c for cfg in order for c in (replace(cfg, **TENSOR_CORE_OPTIONS), cfg)]
    if m > 32:
        return out
    # a row-major B transposed into k-contiguous tiles (H100, coop_ksplit.py --b-row-major: 16 x 4096
    # x 11008 with 2 shares 31.5 us against 51.7 kept row-major, 32 x 4096 x 4096 21.6 against 29.5)
    thin = replace(DECODE, **{**TENSOR_CORE_OPTIONS, "b_rows": "r"})
    first = split_k(thin, k, cdiv(m, thin.bm) * cdiv(n, thin.bn) * t) or thin
    return [first, *(c for c in out if c != first)]


def subgroup_size(device: Device) -> int:
    """Invocations per subgroup: the device's (limits "subgroup_size" where the runtime reads it),
    else 8 on CPU devices (lavapipe) and 32 on GPUs (NVIDIA; the H100 reports 32)."""
    size = device.limits.get("subgroup_size")
    return int(size) if size else (8 if device.device_type == "cpu" else 32)


def _vec_ok(*strides: int) -> bool:
    return all(s % VEC == 0 for s in strides)


def operand_modes(a_sz: list[int], a_st: list[int], b_sz: list[int], b_st: list[int], b_rows: str) -> tuple[str, str]:
    """Load modes ('r', 'c', 'g' for A; 'r' or 'n', 'c', 'g' for B) for padded sizes and byte strides."""
    m, k, n = a_sz[2], a_sz[3], b_sz[3]
    if (k == 1 or a_st[3] == 1) and _vec_ok(a_st[0], a_st[1], a_st[2]):
        am = "r"
    elif (m == 1 or a_st[2] == 1) and _vec_ok(a_st[0], a_st[1], a_st[3]):
        am = "c"
    else:
        am = "g"
    if (n == 1 or b_st[3] == 1) and _vec_ok(b_st[0], b_st[1], b_st[2]):
        bm = b_rows
    elif (k == 1 or b_st[2] == 1) and _vec_ok(b_st[0], b_st[1], b_st[3]):
        bm = "c"
    else:
        bm = "g"
    return am, bm


def has_shape(device: Device) -> bool:
    """The device lists the s8 16x16x32 subgroup shape (or lists none: a runtime that does not read
    them, where the capability stands for it)."""
    shapes = getattr(device, "cooperative_matrix_shapes", ())
    return not shapes or any(tuple(s[:7]) == S8_SHAPE and s[8] == SCOPE_SUBGROUP for s in shapes)


def require_capability(device: Device, family: str) -> None:
    cap = FAMILIES[family][1]
    if cap is not None and cap not in device.capabilities:
        enabled = ", ".join(sorted(device.capabilities)) or "none"
        raise UnsupportedError(f"kernel: '{family}' needs the device capability '{cap}', "
                               f"which {device.name} did not enable (enabled: {enabled})")


def plan_coop(device: Device, desc: MatrixMultiplyIntegerToFloatDesc, *, family: str = "coopmat",
              config: TileConfig | None = None, sums: str | None = None) -> DispatchPlan | None:
    """The coopmat dispatch for a validated descriptor, or None where the family does not apply
    (inputs wider than 8 bits, K > KMAX, a device without the s8 shape). Raises UnsupportedError
    where the device lacks the capability (or a forced `config` cannot run). `sums` (tensor cores
    only; None: the policy's coop_sums): "dot" the mmc8s_* variants, "bytes" mmc8_*. (The
    ablations of the kernel, wrong by design, are benchmarks/overlay_ablation.py's.)"""
    require_capability(device, family)
    if sums not in (None, *COOP_SUMS):
        raise invalid("sums", f"must be one of {', '.join(map(repr, COOP_SUMS))} or None, got {sums!r}")
    if desc.a_tensor.data_type.size != 1 or (family == "coopmat" and not has_shape(device)):
        return None
    ops = operands(desc)
    a_st, b_st, m, k, n, t = ops.a_st, ops.b_st, ops.m, ops.k, ops.n, ops.t
    a_sz, b_sz = [ops.nb, ops.nc, m, k], [ops.nb, ops.nc, k, n]  # B's batch sizes are A's (check_desc)
    if k > KMAX:
        return None
    sg = subgroup_size(device)
    for cfg in [config] if config is not None else candidate_configs(m, n, t, family == "coopmat", k):
        am, bmode = operand_modes(a_sz, a_st, b_sz, b_st, cfg.b_rows)
        a_mode, b_mode = _A_MODES[am], _B_MODES[bmode]
        problems = cfg.problems(sg, a_mode, b_mode, device.limits)
        if family != "coopmat" and sg not in BLOCK_SUBGROUPS:
            problems.append(f"family {family!r} needs a subgroup size in {BLOCK_SUBGROUPS}, got {sg}")
        if not problems:
            break
    if problems:
        raise UnsupportedError(f"kernel: tile configuration {cfg} cannot run here: {'; '.join(problems)}")
    words = matmul_push(desc, ops, sum_flags(desc))

    kind = FAMILIES[family][0]
    if family == "coopmat" and (sums or device.policy.coop_sums) == "dot":
        kind = "s"  # the zero points' sums by OpSDot (policy.COOP_SUMS)
    variant = f"mmc8{kind}_{am}{bmode}"
    check_capabilities(variant, device.capabilities)
    groups = cdiv(m, cfg.bm) * cdiv(n, cfg.bn) * t
    return matmul_plan(desc, device, variant, words, groups, cfg.spec(sg, push_flags(words)))


def compile_coop(device: Device, desc: MatrixMultiplyIntegerToFloatDesc, *, family: str = "coopmat",
                 config: TileConfig | None = None, sums: str | None = None) -> CompiledOperator:
    """The operator on the coopmat family with an explicit tile configuration or zero-point sums
    (`sums`, as plan_coop: tests and benchmarks); UnsupportedError where the family does not apply."""
    validate_tensors(MATRIX_MULTIPLY_INTEGER_TO_FLOAT, device.feature_level, desc, FIELDS, OUTPUT_FIELDS)
    check_desc(desc)
    plan = plan_coop(device, desc, family=family, config=config, sums=sums)
    if plan is None:
        raise UnsupportedError(f"kernel: the coopmat family takes 8-bit A and B with K <= {KMAX} on a device "
                               f"listing the s8 16x16x32 shape")
    return CompiledOperator(device, desc, MATRIX_MULTIPLY_INTEGER_TO_FLOAT, INPUT_FIELDS, OUTPUT_FIELDS, [plan])
