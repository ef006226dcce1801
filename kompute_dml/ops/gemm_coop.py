"""FLOAT16 GEMM on cooperative matrices (tensor cores): the `gemm_coop` families of
shaders/gemm_coop.comp, planned for ops/gemm.py's compile_gemm where the device policy chooses
them (DevicePolicy.gemm_family_for; docs/gemm.md, "FLOAT16 on cooperative matrices").

"coopmat": f16 x f16 -> f32 cooperative matrices of 16 x 16 x 16 (VK_KHR_cooperative_matrix, subgroup
scope; the device needs policy.GEMM_COOP_CAPABILITIES and lists policy.F16_SHAPE).
"coopmat-emulated": the same kernel with each cooperative-matrix operation done by plain subgroup
code on the same shared tiles (no device feature: how the tests run the whole kernel on any
device); its sums run over k in increasing order by fma, as shaders/gemm.comp's do.

Every GEMM layout is taken: the shared tiles are stored along each operand's contiguous dimension
(variants `_{a}{b}`: r row-major, c column-major), loaded by 16-byte vectors where the strides
allow it (GEMM_F_A_VEC / GEMM_F_B_VEC) and element by element otherwise. Tile sizes are
specialization constants (`CoopTile`), chosen per shape by `candidate_tiles`. The planner returns
None where the family does not apply (a type other than FLOAT16): the tiled kernel then takes it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..core.dtypes import DataType
from ..core.errors import UnsupportedError
from ..core.ints import cdiv
from ..runtime.policy import GEMM_COOP_CAPABILITIES, has_f16_shape
from ..runtime.shaders import check_capabilities
from . import contract

if TYPE_CHECKING:
    from ..device.device import Device
    from .gemm import GemmShape

# family -> (variant infix, the capabilities it needs)
FAMILIES: dict[str, tuple[str, tuple[str, ...]]] = {"coopmat": ("", GEMM_COOP_CAPABILITIES),
                                                    "coopmat-emulated": ("x", ())}
BLOCK_SUBGROUPS = (8, 16, 32, 64, 128)  # subgroup sizes whose invocations tile a 16 x 16 block (emulated)
VEC = 8  # float16 elements per 16-byte load: the vector loads' stride unit


@dataclass(frozen=True)
class CoopTile:
    """Specialization constants of gemm_coop.comp: a BM x BN output tile per work group, BK of K per
    step in `stages` shared stages (2: one barrier per step; 1: two, for a BK whose two stages would
    not fit), a WM x WN block of 16 x 16 accumulators per subgroup, GROUP_M tile rows walked together."""

    bm: int
    bn: int
    wm: int
    wn: int
    bk: int = 32
    group_m: int = 8
    stages: int = 2

    def subgroups(self) -> int:
        return (self.bm // self.wm) * (self.bn // self.wn)

    def spec(self, subgroup_size: int) -> tuple[int, ...]:
        """constant_id 0..8 (0 is also local_size_x_id)."""
        return (self.subgroups() * subgroup_size, self.bm, self.bn, self.bk, self.wm, self.wn, subgroup_size,
                self.group_m, self.stages)

    def stage_uvec4(self, a_order: str, b_order: str) -> int:
        """uvec4 of one shared stage: each tile's rows along its order, padded by one uvec4."""
        a_out, a_in = (self.bm, self.bk) if a_order == "r" else (self.bk, self.bm)
        b_out, b_in = (self.bk, self.bn) if b_order == "r" else (self.bn, self.bk)
        return a_out * (a_in // 8 + 1) + b_out * (b_in // 8 + 1)

    def shared_bytes(self, a_order: str, b_order: str) -> int:
        return self.stages * 16 * self.stage_uvec4(a_order, b_order)

    def problems(self, subgroup_size: int, a_order: str, b_order: str, limits: Any, emulated: bool) -> list[str]:
        """Why this tile cannot run (empty: it can): the shader's assumptions and the device's limits."""
        out = []
        if min(self.wm, self.wn) < 16 or self.wm % 16 or self.wn % 16 or self.bm % self.wm or self.bn % self.wn:
            out.append("WM, WN multiples of 16 dividing BM, BN")
        if self.bk % 16 or not 16 <= self.bk <= 256:
            out.append("BK a multiple of 16 in [16, 256]")
        if self.group_m < 1:
            out.append("GROUP_M >= 1")
        if self.stages not in (1, 2):
            out.append("stages 1 or 2")
        if emulated and subgroup_size not in BLOCK_SUBGROUPS:
            out.append(f"the emulated family needs a subgroup size in {BLOCK_SUBGROUPS}, got {subgroup_size}")
        if not 1 <= subgroup_size <= 128 or 128 % subgroup_size:
            out.append("a subgroup size dividing 128 (the epilogue's pair loop)")
        wg = self.subgroups() * subgroup_size
        get = getattr(limits, "get", lambda key, default=None: default)
        if wg > min(get("max_compute_work_group_invocations", 1024), get("max_compute_work_group_size", (1024,))[0]):
            out.append(f"{wg} invocations exceed the device's work-group limit")
        if self.subgroups() * 64 > self.stages * self.stage_uvec4(a_order, b_order):
            out.append("the accumulator staging (64 uvec4 per subgroup) must fit in the tiles")
        if self.shared_bytes(a_order, b_order) > get("max_compute_shared_memory_size", 16384):
            out.append(f"{self.shared_bytes(a_order, b_order)} bytes of shared memory exceed the device's limit")
        return out


# Default tiles: many subgroups per work group (latency hiding) and, for 128 x 128, BK 64 in one
# stage. `bench_gemm.py --sweep` on the H100 (two runs; us; tiled kernel in brackets): 128 x 128
# tiles, 8 subgroups of 64 x 32 (BK 32, two stages) / 16 of 32 x 32 (BK 64, one stage); 64 x 64
# tiles, 4 subgroups of 32 x 32 / 8 of 16 x 32; 32 x 32 tiles, 4 of 16 x 16:
#   4096^3 1176 / 647; 1364 (MEDIUM 1556); 2832 (7571)       2048^3 153 / 90.1; 138; 253 (876)
#   8 x 128 batched 256^3 1096 / 409; 613; 952 (1897)        1024 x 768 x 3072 90 / 45.1; 48.5; 82 (235)
#   1024^3 59 / 31.3; 23.3; 39.5 (148)                       512^3 (first run) 43; 18.8 (4 of 32 x 32); 13.5 (62)
#   96 batched 128 x 128 x 32 (BERT attention scores, first run) 33; 19.5; 12.9 (14.8), 128 x 32 x 128
#   (context) 34; 16; 9.0 (16.9), 128 x 128 x 64 33; 19; 13.5 (18.4).
# LARGE: 16 subgroups of 32 x 32 (4 accumulators each), BK 64 in one stage, 36 KiB of shared memory;
# MEDIUM: 8 of 16 x 32, BK 32, two stages; SMALL: 4 of 16 x 16 (one accumulator each). Not tuned
# beyond that sweep (SWEEP_TILES there).
LARGE = CoopTile(128, 128, 32, 32, bk=64, stages=1)
MEDIUM = CoopTile(64, 64, 16, 32)
SMALL = CoopTile(32, 32, 16, 16)
# LARGE where K >= 256 and it gives 128 work groups (about one per SM of an H100's 132), MEDIUM where
# K >= 128 and it gives 256, else the small tiles: large tiles pay with a long enough K and enough
# work groups.
LARGE_MIN = (256, 128)
MEDIUM_MIN = (128, 256)
# The small tiles from K = 64: 8 subgroups of one 16 x 16 accumulator, BK 64 in one stage (14 KiB),
# 32 x 64, or 64 x 32 for N <= 32 (the convolution's tiles too: ops/conv_coop.py). H100, `python -m
# benchmarks.bench_gemm --sweep` at 66927a4 (us, SMALL -> these): 512^3 13.1 -> 10.4, 1024 x 256 x 768
# 15.4 -> 9.7, 128 x 256 x 768 8.3 -> 7.5, 128 x 1024 x 256 17.3 -> 12.6, 96 batched 128 x 64 x 128
# 14.4 -> 11.5, 96 batched 128 x 128 x 32 (attention context, N 32) 7.7 -> 7.4; K 32 (attention
# scores) 11.7 -> 13.9: SMALL stays below K 64.
SMALL_K64 = CoopTile(32, 64, 16, 16, bk=64, stages=1)
SMALL_K64_N32 = CoopTile(64, 32, 16, 16, bk=64, stages=1)


def candidate_tiles(m: int, n: int, k: int, nmat: int) -> list[CoopTile]:
    """Tiles in order of preference (the later ones for devices where the first does not fit):
    LARGE where K and its work groups reach LARGE_MIN, else MEDIUM where they reach MEDIUM_MIN,
    else SMALL_K64 (SMALL_K64_N32 for N <= 32) from K = 64, else SMALL."""
    def enough(t: CoopTile, least: tuple[int, int]) -> bool:
        return k >= least[0] and cdiv(m, t.bm) * cdiv(n, t.bn) * nmat >= least[1]

    if enough(LARGE, LARGE_MIN):
        return [LARGE, MEDIUM, SMALL]
    if enough(MEDIUM, MEDIUM_MIN):
        return [MEDIUM, SMALL]
    if k >= SMALL_K64.bk:
        return [SMALL_K64_N32 if n <= 32 else SMALL_K64, SMALL, MEDIUM]
    return [SMALL, MEDIUM]


def subgroup_size(device: Device) -> int:
    """Invocations per subgroup: the device's (limits "subgroup_size"), else 8 on CPU devices
    (lavapipe) and 32 on GPUs."""
    size = device.limits.get("subgroup_size")
    return int(size) if size else (8 if device.device_type == "cpu" else 32)


def operand_orders(shape: GemmShape) -> tuple[str, str]:
    """The shared-tile order of A and B: along the unit stride (A 'r': k, 'c': m; B 'r': n, 'c': k),
    'r' where neither is unit."""
    a_sm, a_sk = shape.a_st[2], shape.a_st[3]
    b_sk, b_sn = shape.b_st[2], shape.b_st[3]
    a = "r" if a_sk == 1 else "c" if a_sm == 1 else "r"
    b = "r" if b_sn == 1 else "c" if b_sk == 1 else "r"
    return a, b


def vector_flags(shape: GemmShape, a_order: str, b_order: str) -> int:
    """GEMM_F_A_VEC / GEMM_F_B_VEC where an operand's inner (tile-row) stride is 1 and every other
    stride a multiple of VEC elements (binding offsets are multiples of 16 bytes)."""
    flags = 0
    sb, sc, sm, sk = shape.a_st
    inner, outer = (sk, sm) if a_order == "r" else (sm, sk)
    if inner == 1 and all(s % VEC == 0 for s in (sb, sc, outer)):
        flags |= contract.GEMM_F_A_VEC
    sb, sc, sk, sn = shape.b_st
    inner, outer = (sn, sk) if b_order == "r" else (sk, sn)
    if inner == 1 and all(s % VEC == 0 for s in (sb, sc, outer)):
        flags |= contract.GEMM_F_B_VEC
    return flags


def require_capabilities(device: Device, family: str, operator: str = "GEMM") -> None:
    missing = [c for c in FAMILIES[family][1] if c not in device.capabilities]
    if missing:
        enabled = ", ".join(sorted(device.capabilities)) or "none"
        raise UnsupportedError(f"kernel: {operator}'s '{family}' family needs the device capabilities "
                               f"{', '.join(missing)}, which {device.name} did not enable (enabled: {enabled})")
    if family == "coopmat" and not has_f16_shape(getattr(device, "cooperative_matrix_shapes", ())):
        raise UnsupportedError(f"kernel: {operator}'s 'coopmat' family needs the f16 x f16 -> f32 16x16x16 subgroup "
                               f"cooperative-matrix shape, which {device.name} does not list")


@dataclass(frozen=True)
class CoopChoice:
    """What ops/gemm.py's plan takes from this family: the variant, its specialization constants,
    the number of work groups and the flag bits to add."""

    variant: str
    spec: tuple[int, ...]
    groups: int
    flags: int


def plan_gemm_coop(device: Device, dt: DataType, shape: GemmShape, family: str,
                   config: CoopTile | None = None, act: str = "") -> CoopChoice | None:
    """The family's dispatch for a checked GEMM, or None where it does not apply (not FLOAT16).
    UnsupportedError where the device lacks the family's capabilities or shape (a forced family),
    or no tile (a forced `config`) can run here. `act`: the variants' parameter ("a": a fused activation)."""
    if family not in FAMILIES:
        raise ValueError(f"GEMM family {family!r} is not a cooperative-matrix family ({', '.join(FAMILIES)})")
    if dt != DataType.FLOAT16:
        return None
    require_capabilities(device, family)
    sg = subgroup_size(device)
    a_order, b_order = operand_orders(shape)
    nmat = shape.nb * shape.nc
    emulated = family != "coopmat"
    problems: list[str] = []
    tiles = [config] if config is not None else candidate_tiles(shape.m, shape.n, shape.k, nmat)
    for tile in tiles:
        problems = tile.problems(sg, a_order, b_order, device.limits, emulated)
        if not problems:
            break
    if problems:
        raise UnsupportedError(f"kernel: GEMM tile {tile} cannot run here: {'; '.join(problems)}")
    variant = contract.GEMM_COOP.name(emulated=FAMILIES[family][0], a=a_order, b=b_order, act=act)
    check_capabilities(variant, device.capabilities)
    groups = cdiv(shape.m, tile.bm) * cdiv(shape.n, tile.bn) * nmat
    if groups >= 1 << 31:
        raise UnsupportedError(f"a_tensor.sizes: {groups} tiles of {tile.bm} x {tile.bn} exceed the shader's 31-bit count")
    return CoopChoice(variant, tile.spec(sg), groups, vector_flags(shape, a_order, b_order))
