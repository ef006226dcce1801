"""FORWARD CONVOLUTION on float16 cooperative matrices (tensor cores): the `conv_coop` families of
shaders/conv_coop.comp, planned by ops/convolution.py's compile_convolution where the device policy
chooses them (DevicePolicy.conv_family_for; docs/convolution.md, "Tensor cores").

"coopmat": f16 x f16 -> f32 cooperative matrices of 16 x 16 x 16 (the GEMM family's capabilities and
shape: ops/gemm_coop.require_capabilities); "coopmat-emulated": the same kernel with each
cooperative-matrix operation as plain subgroup code (any device: how the tests run it on lavapipe).
Its tiles are ops/gemm_coop.CoopTile's specialization constants, its own (conv_tiles: CONV_TILE,
CONV_TILE_NARROW, measured) for the implicit GEMM's M = output channels per group, N = output pixels
(batch and space), K = CinG x window volume; the shader also needs its work group to be a multiple of
the input tile's 8-pixel chunks per row (BN / 8). Types: FLOAT16 ("f16"), FLOAT32 under
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
from .gemm_coop import FAMILIES, MEDIUM, SMALL, SMALL_K64, SMALL_K64_N32, CoopTile, require_capabilities, subgroup_size

if TYPE_CHECKING:
    from ..device.device import Device


# The convolution's tiles: one 16 x 16 accumulator per subgroup, 8 subgroups, BK 64 in one stage (14 KiB
# of shared memory), 64 output channels x 32 pixels, or 32 x 64 for at most 32 channels. Its input
# tile is gathered 8 bounds-checked elements at a time, not loaded whole as a GEMM's, and small work
# groups of few registers hide that best: GEMM's 128 x 128 tile (16 subgroups of 32 x 32) held its
# registers at 128 and spilled. H100, `python -m benchmarks.conv_ablation --tiles --no-ablations`
# (us, FLOAT16 / FLOAT32 under allow_half_precision; before: candidate_tiles' LARGE or MEDIUM):
# UNet 3x3 32 at 224 x 224 b8 1299 / 1262 -> 292 / 267 (32 x 64), 3x3 64 at 112 x 112 b8 579 / 581
# -> 162 / 189, 3x3 256 at 28 x 28 b8 318 / 341 -> 121 / 135, ResNet-50 3x3 256 at 14 x 14 b32 319 /
# 336 -> 122 / 135, 1x1 1024 -> 256 at 14 x 14 b32 167 / 174 -> 76 / 93 (60 TFLOP/s at best); among
# 20 tiles, two shared stages of BK 64, BK 128, 128-row tiles and 2 x 2 accumulators per subgroup
# were slower. SMALL and MEDIUM follow for devices where these do not run.
CONV_TILE = SMALL_K64_N32
CONV_TILE_NARROW = SMALL_K64
NARROW_MAX_COUTG = 32


def conv_tiles(coutg: int) -> list[CoopTile]:
    """The tiles in order of preference for `coutg` output channels per group."""
    return [CONV_TILE_NARROW if coutg <= NARROW_MAX_COUTG else CONV_TILE, SMALL, MEDIUM]


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


def choose(device: Device, family: str, x: DataType, w: DataType, coutg: int,
           config: CoopTile | None = None) -> CoopConvChoice:
    """The family's tile (the first of conv_tiles, or `config`, that runs here) and variant;
    UnsupportedError where the device lacks the family's capabilities or shape, or no tile runs."""
    if family not in FAMILIES:
        raise ValueError(f"convolution family {family!r} is not a cooperative-matrix family ({', '.join(FAMILIES)})")
    require_capabilities(device, family, "CONVOLUTION")
    sg = subgroup_size(device)
    emulated = family != "coopmat"
    tiles = [config] if config is not None else conv_tiles(coutg)
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
