"""MATRIX_MULTIPLY_INTEGER_TO_FLOAT for few rows of A (decoding: M = 1..16): the "gemv" family.

shaders/matmul_gemv.comp, 8-bit A and B with B n-contiguous (row-major, ONNX's weight layout):
memory-bound shapes where the tiled families waste most of their 16-row tiles. Every invocation
streams NCOL columns of B along K with one vector load per row (uvec4 / uvec2 / uint, the widest
the strides allow) and keeps MT x NCOL int32 sums in registers; a work group splits K across its
invocations and reduces (subgroup butterfly, then shared memory), so N = 4096 already gives 128
work groups. Bytes are made signed and zero points corrected through row and column sums as in
ops/matmul_coop.py (exact in int32 for K <= KMAX). Variants: `mmg8d_r` (OpSDot, the
`integer_dot_product` capability) where the device enabled it, else `mmg8_r` (core GLSL 450,
32-bit words). `plan_gemv` returns None where the family does not apply (wider inputs, K > KMAX,
B neither n- nor k-contiguous (or k-contiguous with columns off 4-byte boundaries), M > MAX_M):
the other families take it. B k-contiguous (column-major) takes the `_c` variants: no transpose,
one 16-byte load per column per group of 16 k.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ..core.errors import UnsupportedError
from ..core.ints import cdiv
from ..runtime import DispatchPlan
from ..runtime.matmul_table import GEMV_MAX_M, TINY_B_BYTES, TINY_K, is_tiny  # noqa: F401 (re-exported)
from ..runtime.shaders import check_capabilities
from . import contract
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
    sum_flags,
)
from .matmul_coop import KMAX, subgroup_size

if TYPE_CHECKING:
    from ..device.device import Device

# Automatic GPU families try this family for matrices of at most SMALL_M rows (the device policy's
# table, kompute_dml/runtime/policy.py, where the measurements are)
SMALL_M = GEMV_MAX_M
MAX_M = 64  # beyond this (forced kernel="gemv" only) B would be re-read for too many row tiles
MAX_MT = 16  # rows per work group: the accumulators' compile-time bound
DOT_CAPABILITY = "integer_dot_product"
ACC_REGISTERS = 64  # MT x NCOL int32 sums per invocation, kept in registers
LOAD_REGISTERS = 64  # words of B in flight per invocation and chunk (GPU default): 4 k rows x NCOL bytes per group

# B row-major on a GPU, 256 invocations: (NCOL, NL, KC) per MT, the fastest of the H100 sweep
# (`bench_decode.py --rounds 5`, docs/matmul_gemv.md; over default_config's general rule: 1.12x at
# M = 1, 1.10x at 2, 1.24x at 4, 1.05x at 8 and 16, 1.45x at 32, which takes two row tiles of 16:
# GPU_ROW_CONFIG_TILED)
GPU_ROW_CONFIGS = {1: (8, 4, 1024), 2: (8, 4, 1024), 4: (8, 4, 1024), 8: (4, 8, 512), 16: (4, 8, 256)}
GPU_ROW_CONFIG_TILED = (4, 16, 256)

# Tiny products (K <= TINY_K and B of at most TINY_B_BYTES, row-major, on a GPU): an eager call's
# device time is the kernel's critical path (staging, reductions, epilogue), not B's bytes, and B
# stays in cache however often it is read. So: one row of A per work group (MT = 1: M times the
# work groups, 4 accumulators each, short butterflies), TINY_NL invocations of 4 columns along N,
# and only as many k-slices as K has groups of 4 (a whole subgroup at least): one chunk covers K.
# H100, benchmarks/tiny_matmul.py: 2.3-6.6 us less per eager call than the decode defaults from 1x64x64
# to 16x512x512 (docs/matmul_gemv.md, "Tiny products").
# (TINY_K, TINY_B_BYTES and is_tiny live in runtime/matmul_table.py: the policy's automatic table reads them too)
TINY_NL = 8

# c_flags: matmul_common's flag bits (F_A_SIGNED ... F_SUM_B), and A staged as words
_F_A_WORDS = 1 << 31


@dataclass(frozen=True)
class GemvConfig:
    """Specialization constants of matmul_gemv.comp: WG invocations, MT rows of A and NL x NCOL
    columns per work group (B row-major: NCOL bytes of a B row per load; column-major, `col`: one
    16-byte load per column), KC k per staged chunk of A."""

    wg: int
    mt: int
    ncol: int
    nl: int
    kc: int
    col: bool = False  # for the `_c` variants (B k-contiguous): groups of 16 k instead of 4

    @property
    def group_k(self) -> int:
        return 16 if self.col else 4

    def spec(self) -> tuple[int, ...]:
        return (self.wg, self.mt, self.ncol, self.nl, self.kc)

    @property
    def tile_n(self) -> int:
        return self.nl * self.ncol

    def shared_bytes(self) -> int:
        return self.mt * self.kc + 4 * (self.mt * self.tile_n + self.tile_n + self.mt)

    def problems(self, subgroup: int, limits: object) -> list[str]:
        """Why this configuration cannot run (empty: it can): the shader's assumptions."""
        out = []
        get = getattr(limits, "get", lambda key, default=None: default)
        if self.ncol not in (4, 8, 16):
            out.append("NCOL 4, 8 or 16")
        if not 1 <= self.mt <= MAX_MT:
            out.append(f"MT in 1..{MAX_MT}")
        if self.nl < 1 or self.nl & (self.nl - 1) or subgroup % self.nl:
            out.append(f"NL a power of two dividing the subgroup size {subgroup}")
        if self.wg < subgroup or self.wg % subgroup or self.wg % self.nl:
            out.append(f"WG a multiple of the subgroup size {subgroup}")
        kl = max(1, self.wg // max(1, self.nl))
        if self.kc < self.group_k * kl or self.kc % (self.group_k * kl):
            out.append(f"KC a multiple of {self.group_k} * WG / NL = {self.group_k * kl}")
        if self.wg > min(get("max_compute_work_group_invocations", 1024), get("max_compute_work_group_size", (1024,))[0]):
            out.append(f"{self.wg} invocations exceed the device's work-group limit")
        if self.shared_bytes() > get("max_compute_shared_memory_size", 16384):
            out.append(f"{self.shared_bytes()} bytes of shared memory exceed the device's limit")
        return out


def rows_per_group(m: int) -> int:
    """MT: the smallest power of two >= M, at most MAX_MT (larger M: several row tiles)."""
    mt = 1
    while mt < min(m, MAX_MT):
        mt *= 2
    return mt


def tiny_config(k: int, subgroup: int) -> GemvConfig:
    """The tiny-product configuration (TINY_K): MT = 1, TINY_NL x 4 columns, KL = the power of two
    nearest below K / 4 in 4..32 (at least a subgroup's worth of invocations), KC covering K."""
    kl = 4
    while kl < 32 and 8 * kl <= k:
        kl *= 2
    wg = max(TINY_NL * kl, subgroup)
    step = 4 * (wg // TINY_NL)
    return GemvConfig(wg, 1, 4, TINY_NL, max(1, cdiv(k, step)) * step)


def default_config(m: int, subgroup: int, ncol_max: int = 16, *, gpu: bool = True, col: bool = False,
                   k: int | None = None, n: int | None = None) -> GemvConfig:
    """On a GPU with B row-major and the product tiny (K, N given; is_tiny): tiny_config. Else MT
    from M; NCOL as wide as ACC_REGISTERS and the layout allow (column-major B: at most 8, each
    column one uvec4 per group); 32 columns per work group (128 work groups at N = 4096). Loads in
    flight per invocation and chunk: on a GPU about LOAD_REGISTERS words (row-major: 16 / NCOL * 4
    groups of 4 k rows, so narrow columns still keep 256 bytes in flight; column-major: 2 groups of
    16 k), on a CPU 2 groups (1 column-major)."""
    mt = rows_per_group(m)
    if gpu and not col and k is not None and n is not None and is_tiny(k, n):
        return tiny_config(k, subgroup)
    if gpu and not col and ncol_max >= 8 and subgroup % 16 == 0:
        ncol, nl, kc = GPU_ROW_CONFIGS[mt] if m <= 16 else GPU_ROW_CONFIG_TILED
        return GemvConfig(256, mt, ncol, nl, kc, col)
    ncol = min(8 if col else ncol_max, max(4, ACC_REGISTERS // mt))
    wg = 256 if gpu else 8 * subgroup
    nl = min(subgroup, max(1, 32 // ncol))
    if col:
        groups = 2 if gpu else 1
    else:
        groups = LOAD_REGISTERS // ncol if gpu else 2
    return GemvConfig(wg, mt, ncol, nl, (16 if col else 4) * (wg // nl) * groups, col)


def sweep_configs(m: int, subgroup: int, ncol_max: int = 16, *, gpu: bool = True, col: bool = False) -> list[GemvConfig]:
    """The default, then alternatives for benchmarks/bench_decode.py: half and twice the columns per
    work group, the loads per chunk and the work group, and half the columns per invocation (twice
    the lanes)."""
    base = default_config(m, subgroup, ncol_max, gpu=gpu, col=col)
    gk = base.group_k
    groups = (base.kc // gk) // (base.wg // base.nl)  # groups per invocation and chunk

    def cfg(wg: int, ncol: int, nl: int, g: int) -> GemvConfig:
        return GemvConfig(wg, base.mt, ncol, nl, gk * (wg // nl) * g, col)
    out = [base]
    for nl in (base.nl // 2, base.nl * 2):
        if nl >= 1 and subgroup % nl == 0:
            out.append(cfg(base.wg, base.ncol, nl, groups))
    for g in (max(1, groups // 2), groups * 2):
        out.append(cfg(base.wg, base.ncol, base.nl, g))
    for wg in (base.wg // 2, base.wg * 2):
        if wg >= subgroup:
            out.append(cfg(wg, base.ncol, base.nl, groups))
    if base.ncol > 4 and subgroup % (base.nl * 2) == 0:
        out.append(cfg(base.wg, base.ncol // 2, base.nl * 2, groups))
    return list(dict.fromkeys(out))


def variant_for(device: Device, dot: bool | None = None, col: bool = False) -> str:
    """`mmg8d_*` (OpSDot) where the device enabled integer_dot_product (or dot=True), else `mmg8_*`;
    `_c` for B k-contiguous, `_r` n-contiguous."""
    use_dot = DOT_CAPABILITY in device.capabilities if dot is None else dot
    return contract.MMG.name(dot="d" if use_dot else "", b="c" if col else "r")


def _b_ncol(b_sz: list[int], b_st: list[int]) -> int:
    """The widest load (16, 8, 4 bytes) a n-contiguous B allows (4 also for rows off 4-byte
    boundaries: the shader then combines two words), 0 where B is not n-contiguous."""
    if not (b_sz[3] == 1 or b_st[3] == 1):
        return 0
    for width in (16, 8):
        if all(s % width == 0 for s in b_st[:3]):
            return width
    return 4


def plan_gemv(device: Device, desc: MatrixMultiplyIntegerToFloatDesc, *, dot: bool | None = None,
              config: GemvConfig | None = None) -> DispatchPlan | None:
    """The gemv dispatch for a validated descriptor, or None where the family does not apply.
    `dot` forces the OpSDot (True) or portable (False) variant; `config` the specialization
    constants (UnsupportedError where they cannot run here)."""
    if desc.a_tensor.data_type.size != 1:
        return None
    ops = operands(desc)
    a_st, b_st, m, k, n, t = ops.a_st, ops.b_st, ops.m, ops.k, ops.n, ops.t
    b_sz = [ops.nb, ops.nc, k, n]  # B's batch sizes are A's (check_desc)
    ncol_max = _b_ncol(b_sz, b_st)
    # B k-contiguous (column-major) with columns on 4-byte boundaries: the `_c` variants (also for
    # one contiguous column, which the row-major variants would read a byte per row)
    col = (k == 1 or b_st[2] == 1) and all(s % 4 == 0 for s in (b_st[0], b_st[1], b_st[3]))
    col = col and (ncol_max == 0 or n == 1)
    if k > KMAX or m > MAX_M or (ncol_max == 0 and not col):
        return None
    sg = subgroup_size(device)
    cfg = config or default_config(m, sg, ncol_max or 16, gpu=device.device_type != "cpu", col=col, k=k, n=n)
    if config is None:  # the default: shorter chunks of A where shared memory is short, else other families
        while cfg.problems(sg, device.limits) and cfg.kc % 2 == 0 and cfg.kc // 2 >= cfg.group_k * (cfg.wg // cfg.nl):
            cfg = replace(cfg, kc=cfg.kc // 2)
        if cfg.problems(sg, device.limits):
            return None
    problems = cfg.problems(sg, device.limits)
    if cfg.col != col:
        problems.append(f"B is {'k' if col else 'n'}-contiguous: the configuration needs col={col}")
    if not col and cfg.ncol > ncol_max:
        problems.append(f"B's strides allow loads of at most {ncol_max} bytes, not NCOL = {cfg.ncol}")
    if problems:
        raise UnsupportedError(f"kernel: gemv configuration {cfg} cannot run here: {'; '.join(problems)}")

    flags = sum_flags(desc)
    # A rows on 4-byte boundaries with unit k stride: staged a word at a time (binding offsets are
    # multiples of 16 bytes); otherwise byte by byte
    if (k == 1 or a_st[3] == 1) and all(s % 4 == 0 for s in a_st[:3]):
        flags |= _F_A_WORDS
    words = matmul_push(desc, ops, flags)

    variant = variant_for(device, dot, col)
    check_capabilities(variant, device.capabilities)
    groups = cdiv(n, cfg.tile_n) * cdiv(m, cfg.mt) * t
    return matmul_plan(desc, device, variant, words, groups, cfg.spec())


def compile_gemv(device: Device, desc: MatrixMultiplyIntegerToFloatDesc, *, dot: bool | None = None,
                 config: GemvConfig | None = None) -> CompiledOperator:
    """The operator on the gemv family with an explicit variant / configuration (tests and
    benchmarks/bench_decode.py); UnsupportedError where the family does not apply."""
    validate_tensors(MATRIX_MULTIPLY_INTEGER_TO_FLOAT, device.feature_level, desc, FIELDS, OUTPUT_FIELDS)
    check_desc(desc)
    plan = plan_gemv(device, desc, dot=dot, config=config)
    if plan is None:
        raise UnsupportedError(f"kernel: the gemv family takes 8-bit A and B with K <= {KMAX}, M <= {MAX_M} and B "
                               f"n- or k-contiguous")
    return CompiledOperator(device, desc, MATRIX_MULTIPLY_INTEGER_TO_FLOAT, INPUT_FIELDS, OUTPUT_FIELDS, [plan])
