"""Benchmark-only shader overlay: GEMM's tiled float32 kernel (shaders/gemm.comp) at other K steps
and load forms than the product's, for `python -m benchmarks.gemm_steps` to time beside the
policy's: `gemmx{s}_f32_b{blk}_k{kt}{c}` is the BLK register block with KT terms per stage (16,
32 or 64), `s` the split-K parts' variant, `c` the loads at clamped addresses with the padding
selected after them (CLAMP=1; the product keeps each load inside its bounds branch). Every
variant sums each output over k in order from -0, so all give the product's bits. H100 (device
call 177): the product's form was the fastest nearly everywhere; 32-term steps only at 1024 x 256
x 256 and 1576 x 256 x 256 (8-9 %); RESULTS.md has the table. `gemmw{s}_f32_m{bm}n{bn}_w{wd}` (GEMM_FORMS,
for `gemm_steps --forms`): BM x BN blocks in WD x WD work groups; the product took 8 x 4 from them (H200,
device call 276: ops/gemm_blocks.py).

    python tools/build_spirv.py --overlay benchmarks/overlay_gemm.py --out benchmarks/out/spirv_gemm
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import Any

try:  # loaded by tools/build_spirv.py --overlay (standard library only): its copy of the contract
    contract: Any = sys.modules["_kdml_shader_contract"]
except KeyError:
    from kompute_dml.ops import contract

ROOT = Path(__file__).resolve().parent.parent
SPIRV_DIR = ROOT / "benchmarks" / "out" / "spirv_gemm"
STEPS = (16, 32, 64)  # KT; 128 x 128 tiles (BLK 8) take 16 and 32 (64 would need 64 KiB of shared memory)

GEMM_STEPS = contract.family(
    "gemm_steps", "gemm.comp", "gemmx{split}_f32_b{blk}_k{kt}{c}", contract.GEMM_PUSH, (16, 16, 1),
    split=("", "s"), blk=contract.GEMM_BLOCKS, kt=STEPS, c=("", "c"),
    defines=lambda split, blk, kt, c: {"F16": 0, "BLK": blk, "KT": f"{kt}u", "CLAMP": int(c == "c"),
                                       "SPLIT": int(split == "s")})
# other work-group forms: `gemmw{s}_f32_m{bm}n{bn}_w{wd}`, a WD x WD work group of BM x BN register blocks
# (a (WD BM) x (WD BN) tile; WD 8: a quarter of the invocations); the local size is the family's, so one
# family per WD
GEMM_FORMS = tuple(contract.family(
    f"gemm_forms{wd}", "gemm.comp", "gemmw{split}_f32_m{bm}n{bn}_w" + str(wd), contract.GEMM_PUSH, (wd, wd, 1),
    split=("", "s"), bm=contract.GEMM_BLOCKS, bn=contract.GEMM_BLOCKS,
    defines=lambda split, bm, bn, wd=wd: {"F16": 0, "BLK": max(bm, bn), "BM": bm, "BN": bn, "WD": wd,
                                          "SPLIT": int(split == "s")})
    for wd in (8, 16))
FAMILIES = (GEMM_STEPS, *GEMM_FORMS)
# the forms timed (bm, bn, wd): the policy's square blocks, rectangular ones, 8 x 8 work groups
FORMS = ((2, 2, 16), (4, 4, 16), (8, 8, 16), (8, 4, 16), (4, 8, 16), (2, 4, 16), (4, 2, 16), (4, 4, 8), (8, 8, 8),
         (8, 4, 8), (4, 8, 8))


def form_name(split: str, bm: int, bn: int, wd: int) -> str:
    return f"gemmw{split}_f32_m{bm}n{bn}_w{wd}"



def runs(blk: int, kt: int) -> bool:
    """Whether the variant's shared memory fits 48 KiB (two KT x 16 BLK float tiles)."""
    return 2 * kt * 16 * blk * 4 <= 48 * 1024


@functools.cache
def load() -> None:
    """Build the overlay where its SPIR-V is missing or stale, and let the runtime load it."""
    from benchmarks.overlay_load import build_and_load

    build_and_load(FAMILIES, SPIRV_DIR, "gemm")
