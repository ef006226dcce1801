"""Benchmark-only shader overlay: the direct-fragment s8 product experiment (benchmarks/coop_direct.py).

Family COOP_DIRECT, source benchmarks/shaders/coop_direct.comp: cooperative-matrix fragments loaded
straight from the storage buffers (no shared-memory staging), `coop_direct_p<PF>` with (1) or
without (0) the next step's fragments loaded during the current multiply-adds. Not in the
production contract: `load()` builds it into benchmarks/out/spirv_direct and adds it to this
process's shaders; `compile_direct` makes a compiled operator of one tile configuration.
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
FAMILIES = (COOP_DIRECT,)


@dataclass(frozen=True)
class DirectConfig:
    sgm: int  # subgroups along M
    sgn: int  # subgroups along N
    fm: int  # 16-row fragments per subgroup
    fn: int  # 16-column fragments per subgroup
    pf: int = 1  # next step's fragments loaded during the multiply-adds
    group_m: int = 8

    @property
    def bm(self) -> int:
        return 16 * self.sgm * self.fm

    @property
    def bn(self) -> int:
        return 16 * self.sgn * self.fn

    def name(self) -> str:
        return (f"{self.bm}x{self.bn} tile, {self.sgm}x{self.sgn} subgroups of {16 * self.fm}x{16 * self.fn}"
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
    from kompute_dml import DataType, TensorDesc
    from kompute_dml.dtypes import FeatureLevel
    from kompute_dml.errors import UnsupportedError
    from kompute_dml.ops.base import CompiledOperator
    from kompute_dml.registry import ALL_TYPES, LevelSupport, OperatorSupport, TensorSupport
    from kompute_dml.runtime import DispatchPlan
    from kompute_dml.shaders import check_capabilities

    if "cooperative_matrix" not in device.capabilities:
        raise UnsupportedError(f"coop_direct: {device.name} has no cooperative matrices")
    if m % cfg.bm or n % cfg.bn or k % 64:
        raise UnsupportedError(f"coop_direct: {m}x{k}x{n} is not a multiple of the {cfg.bm}x{cfg.bn} tile and 64 k")
    load()
    variant = COOP_DIRECT.name(pf=cfg.pf)
    check_capabilities(variant, device.capabilities)
    support = OperatorSupport("COOP_DIRECT", None, (LevelSupport(FeatureLevel.FL_1_0, (
        TensorSupport("a_tensor", "input", (1, 8), ALL_TYPES), TensorSupport("b_tensor", "input", (1, 8), ALL_TYPES),
        TensorSupport("output_tensor", "output", (1, 8), ALL_TYPES))),))
    desc = _DirectDesc(TensorDesc(DataType.INT8, (m * k,)), TensorDesc(DataType.INT8, (n * k,)),
                       TensorDesc(DataType.INT32, (m * n,)))
    wg = cfg.sgm * cfg.sgn * subgroup_size
    plan = DispatchPlan(variant=variant, bindings=(0, 1, 2), push=COOP_DIRECT.pack(m=m, n=n, k=k),
                        groups=((m // cfg.bm) * (n // cfg.bn), 1, 1), writes=(2,),
                        spec=(wg, cfg.sgm, cfg.sgn, cfg.fm, cfg.fn, cfg.group_m))
    return CompiledOperator(device, desc, support, ("a_tensor", "b_tensor"), ("output_tensor",), [plan])
