"""Benchmark-only shader overlay: the s8 product staging experiments (benchmarks/coop_direct.py).

Family COOP_DIRECT, source benchmarks/shaders/coop_direct.comp: cooperative-matrix fragments loaded
straight from the storage buffers (no shared-memory staging), `coop_direct_p<PF>` with (1) or
without (0) the next step's fragments loaded during the current multiply-adds. Family COOP_SPLIT,
benchmarks/shaders/coop_split.comp: loader subgroups stage the tiles while math subgroups multiply.
Not in the production contract: `load()` builds them into benchmarks/out/spirv_direct and adds
them to this process's shaders; `compile_direct` / `compile_split` make a compiled operator of one
tile configuration. Family COOP_DIRECT_WG, benchmarks/shaders/coop_direct_wg.comp: workgroup-scope
matrices (VK_NV_cooperative_matrix2) loaded from the buffers, `compile_direct_wg`.
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
SPIRV_DIR = ROOT / "benchmarks" / "out" / "spirv_direct"

DIRECT_PUSH = contract.block("m", "n", "k")
COOP_DIRECT = contract.family("coop_direct", "coop_direct.comp", "coop_direct_p{pf}", DIRECT_PUSH, None, pf=(0, 1),
                              defines=lambda pf: {"PF": int(pf)}, target=contract.COOP_TARGET)
COOP_SPLIT = contract.family("coop_split", "coop_split.comp", "coop_split", DIRECT_PUSH, None,
                             target=contract.COOP_TARGET)
# workgroup-scope matrices straight from the buffers (VK_NV_cooperative_matrix2): tile TMxTN, BK k
WG_DIRECT_TILES = ("128x128", "128x256", "256x128")
COOP_DIRECT_WG = contract.family(
    "coop_direct_wg", "coop_direct_wg.comp", "coop_direct_wg_{tile}_k{bk}_p{pf}", DIRECT_PUSH, None,
    tile=WG_DIRECT_TILES, bk=(32, 64), pf=(0, 1),
    defines=lambda tile, bk, pf: {"TM": tile.split("x")[0], "TN": tile.split("x")[1], "BK": bk, "PF": pf},
    target="vulkan1.3")  # SPIR-V 1.6, LocalSizeId: overlay_peak.WG_TARGET says why
FAMILIES = (COOP_DIRECT, COOP_SPLIT, COOP_DIRECT_WG)


class _Tile:
    """A work-group tile of SGM x SGN subgroups, each FM x FN 16 x 16 accumulators."""

    sgm: int
    sgn: int
    fm: int
    fn: int

    @property
    def bm(self) -> int:
        return 16 * self.sgm * self.fm

    @property
    def bn(self) -> int:
        return 16 * self.sgn * self.fn


@dataclass(frozen=True)
class DirectConfig(_Tile):
    sgm: int  # subgroups along M
    sgn: int  # subgroups along N
    fm: int  # 16-row fragments per subgroup
    fn: int  # 16-column fragments per subgroup
    pf: int = 1  # next step's fragments loaded during the multiply-adds
    group_m: int = 8

    def name(self) -> str:
        return (f"{self.bm}x{self.bn} tile, {self.sgm}x{self.sgn} subgroups of {16 * self.fm}x{16 * self.fn}"
                f"{', prefetch' if self.pf else ''}")


@dataclass(frozen=True)
class SplitConfig(_Tile):
    sgm: int  # math subgroups along M
    sgn: int  # math subgroups along N
    fm: int  # 16-row fragments per math subgroup
    fn: int  # 16-column fragments per math subgroup
    loaders: int  # loader subgroups
    bk: int = 64
    ahead: int = 1  # tiles in flight per loader (2: two register sets)
    group_m: int = 8

    def name(self) -> str:
        return (f"{self.bm}x{self.bn}x{self.bk} tile, {self.sgm}x{self.sgn} math subgroups of "
                f"{16 * self.fm}x{16 * self.fn}, {self.loaders} loaders{', 2 ahead' if self.ahead == 2 else ''}")


@dataclass(frozen=True)
class WgDirectConfig:
    """A work group's TM x TN tile of workgroup-scope matrices, BK k a step (COOP_DIRECT_WG)."""

    bm: int
    bn: int
    bk: int
    invocations: int  # a workgroup-scope shape's workgroupInvocations
    pf: int = 1
    group_m: int = 8

    def name(self) -> str:
        return (f"{self.bm}x{self.bn}x{self.bk} workgroup scope, {self.invocations} invocations"
                f"{', prefetch' if self.pf else ''}")


@functools.cache
def load() -> None:
    """Build the overlay where its SPIR-V is missing or stale, and let the runtime load it."""
    from overlay_peak import _builder  # tools/build_spirv.py, loaded as the benchmark overlays load it

    if _builder().build(quiet=True, families=FAMILIES, shader_dir=SHADER_DIR, out_dir=SPIRV_DIR) != 0:
        raise RuntimeError(f"the coop_direct overlay did not build (see above): {SPIRV_DIR}")
    from kompute_dml import shaders

    shaders.add_overlay(SPIRV_DIR)


@dataclass(frozen=True)
class _DirectDesc:
    a_tensor: Any
    b_tensor: Any
    output_tensor: Any


def compile_direct(device: Any, cfg: DirectConfig, m: int, n: int, k: int, subgroup_size: int = 32) -> Any:
    """C (M x N int32) = A (M x K int8, row-major) x B (stored N x K, k contiguous)^T on cfg's tiles.
    UnsupportedError where the device has no cooperative matrices or the shape is off the tiles."""
    spec = (cfg.sgm * cfg.sgn * subgroup_size, cfg.sgm, cfg.sgn, cfg.fm, cfg.fn, cfg.group_m)
    return _compile(device, COOP_DIRECT.name(pf=cfg.pf), cfg, m, n, k, 64, spec)


def compile_split(device: Any, cfg: SplitConfig, m: int, n: int, k: int, subgroup_size: int = 32) -> Any:
    """compile_direct's product by the loader / math split kernel (coop_split.comp)."""
    wg = (cfg.sgm * cfg.sgn + cfg.loaders) * subgroup_size
    spec = (wg, cfg.sgm, cfg.sgn, cfg.fm, cfg.fn, cfg.group_m, cfg.bk, cfg.loaders, subgroup_size, cfg.ahead)
    return _compile(device, COOP_SPLIT.name(), cfg, m, n, k, cfg.bk, spec)


def compile_direct_wg(device: Any, cfg: WgDirectConfig, m: int, n: int, k: int, subgroup_size: int = 32) -> Any:
    """compile_direct's product by workgroup-scope matrices (coop_direct_wg.comp); UnsupportedError
    also where the capability cooperative_matrix_workgroup is not enabled."""
    variant = COOP_DIRECT_WG.name(tile=f"{cfg.bm}x{cfg.bn}", bk=cfg.bk, pf=cfg.pf)
    if "cooperative_matrix_workgroup" not in device.capabilities:
        from kompute_dml.errors import UnsupportedError

        raise UnsupportedError(f"{variant}: {device.name} has no workgroup-scope cooperative matrices "
                               "(cooperative_matrix_workgroup, VK_NV_cooperative_matrix2)")
    return _compile(device, variant, cfg, m, n, k, cfg.bk, (cfg.invocations, cfg.group_m))


def _compile(device: Any, variant: str, cfg: Any, m: int, n: int, k: int, k_step: int, spec: tuple[int, ...]) -> Any:
    from kompute_dml import DataType, TensorDesc
    from kompute_dml.dtypes import FeatureLevel
    from kompute_dml.errors import UnsupportedError
    from kompute_dml.ops.base import CompiledOperator
    from kompute_dml.registry import ALL_TYPES, LevelSupport, OperatorSupport, TensorSupport
    from kompute_dml.runtime import DispatchPlan
    from kompute_dml.shaders import check_capabilities

    if "cooperative_matrix" not in device.capabilities:
        raise UnsupportedError(f"{variant}: {device.name} has no cooperative matrices")
    if m % cfg.bm or n % cfg.bn or k % k_step:
        raise UnsupportedError(f"{variant}: {m}x{k}x{n} is not a multiple of the {cfg.bm}x{cfg.bn} tile and {k_step} k")
    load()
    check_capabilities(variant, device.capabilities)
    support = OperatorSupport(variant.upper(), None, (LevelSupport(FeatureLevel.FL_1_0, (
        TensorSupport("a_tensor", "input", (1, 8), ALL_TYPES), TensorSupport("b_tensor", "input", (1, 8), ALL_TYPES),
        TensorSupport("output_tensor", "output", (1, 8), ALL_TYPES))),))
    desc = _DirectDesc(TensorDesc(DataType.INT8, (m * k,)), TensorDesc(DataType.INT8, (n * k,)),
                       TensorDesc(DataType.INT32, (m * n,)))
    plan = DispatchPlan(variant=variant, bindings=(0, 1, 2), push=DIRECT_PUSH.pack(m=m, n=n, k=k),
                        groups=((m // cfg.bm) * (n // cfg.bn), 1, 1), writes=(2,), spec=spec)
    return CompiledOperator(device, desc, support, ("a_tensor", "b_tensor"), ("output_tensor",), [plan])
