"""FORWARD CONVOLUTION on float16 cooperative matrices (tensor cores): the `conv_coop` families of
shaders/conv_coop.comp, planned by ops/convolution.py's compile_convolution where the device policy
chooses them (DevicePolicy.conv_family_for; docs/convolution.md, "Tensor cores").

"coopmat": f16 x f16 -> f32 cooperative matrices of 16 x 16 x 16 (the GEMM family's capabilities and
shape: ops/gemm_coop.require_capabilities); "coopmat-emulated": the same kernel with each
cooperative-matrix operation as plain subgroup code (any device: how the tests run it on lavapipe).
Its tiles are ops/gemm_coop.CoopTile's specialization constants, chosen by gemm_coop.candidate_tiles
for the implicit GEMM's M = output channels per group, N = output pixels (batch and space), K = CinG x
window volume, one matrix per group; the shader also needs its work group to be a multiple of the
input tile's 8-pixel chunks per row (BN / 8). Types: FLOAT16 ("f16"), FLOAT32 under
allow_half_precision ("f32": input and filter converted to float16 as they load) and FLOAT32 with a
FLOAT16 filter ("f32h", the filter converted once where it is constant).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..core.dtypes import DataType
from ..core.errors import UnsupportedError
from ..runtime.shaders import check_capabilities
from . import contract
from .gemm_coop import FAMILIES, CoopTile, candidate_tiles, require_capabilities, subgroup_size

if TYPE_CHECKING:
    from ..device.device import Device


def coop_types(x: DataType, w: DataType) -> str:
    """The variant's types: f16, f32 (FLOAT32 converted as it loads) or f32h (a FLOAT16 filter)."""
    if x == DataType.FLOAT16:
        return "f16"
    return "f32h" if w == DataType.FLOAT16 else "f32"


def tile_problems(tile: CoopTile, sg: int, limits: object, emulated: bool) -> list[str]:
    """Why `tile` cannot run conv_coop.comp here (empty: it can): CoopTile.problems for row-major
    tiles, and the input tile's chunks per row dividing the work group (its pixels fixed per
    invocation)."""
    out = tile.problems(sg, "r", "r", limits, emulated)
    if (tile.subgroups() * sg) % (tile.bn // 8):
        out.append(f"the work group ({tile.subgroups() * sg}) must be a multiple of BN / 8 ({tile.bn // 8})")
    return out


@dataclass(frozen=True)
class CoopConvChoice:
    """The tile and the variant name's parts (emulated infix, types) of a convolution's plan."""

    tile: CoopTile
    spec: tuple[int, ...]
    emulated: str
    types: str

    def variant(self, split: bool) -> str:
        return contract.CONV_COOP.name(emulated=self.emulated, split="s" if split else "", t=self.types)


def choose(device: Device, family: str, x: DataType, w: DataType, coutg: int, npix: int, klen: int, groups: int,
           config: CoopTile | None = None) -> CoopConvChoice:
    """The family's tile (the first of candidate_tiles, or `config`, that runs here) and variant;
    UnsupportedError where the device lacks the family's capabilities or shape, or no tile runs."""
    if family not in FAMILIES:
        raise ValueError(f"convolution family {family!r} is not a cooperative-matrix family ({', '.join(FAMILIES)})")
    require_capabilities(device, family, "CONVOLUTION")
    sg = subgroup_size(device)
    emulated = family != "coopmat"
    tiles = [config] if config is not None else candidate_tiles(coutg, npix, klen, groups)
    problems: list[str] = []
    for tile in tiles:
        problems = tile_problems(tile, sg, device.limits, emulated)
        if not problems:
            break
    if problems:
        raise UnsupportedError(f"kernel: convolution tile {tile} cannot run here: {'; '.join(problems)}")
    choice = CoopConvChoice(tile, tile.spec(sg), FAMILIES[family][0], coop_types(x, w))
    check_capabilities(choice.variant(False), device.capabilities)
    return choice
